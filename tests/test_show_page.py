"""The `attnwh show` page (attnwh.reports.example_view): the maps it carries are the example's
maps, byte for byte; a long input's page holds only what fits and says so; and in real headless
Chromium, offline, at 1,280 and 1,920 px every head's map lies inside the window's width, the
large map's labels are full size with punctuation marked, and the pixels drawn are the shares of
the lens, layer and head the menus and clicks chose.

The maps are made up (seeded, row-stochastic, not symmetric) so the page can be checked
without a model; tests/test_api.py draws one through a model and the command.
"""

from __future__ import annotations

import base64
import html
import json
import re

import numpy as np
import pytest
from markupsafe import escape

from attnwh.errors import UsageError
from attnwh.ingest.runs.maps import ExampleMaps
from attnwh.reports import example_view
from attnwh.reports.example_view import example_view as view_of
from attnwh.reports.example_view import write_page
from test_report_browser import browser, open_offline  # noqa: F401

TOKENS = (  # noqa: SIM905 (a sentence reads better than 37 quoted tokens)
    "[CLS] combining quick - cut editing and a blaring heavy metal much of the time , beck seems to be under "
    "the illusion that he ' s shooting the latest system of a down video . [SEP]"
).split()
KINDS = ["cls" if t == "[CLS]" else "sep" if t == "[SEP]" else "punct" if t in "-,'." else "" for t in TOKENS]
PUNCT_GREEN = (27, 120, 55)  # #1b7837


def made_up_maps(tokens: list[str] = TOKENS, kinds: list[str] = KINDS, layers: int = 3, heads: int = 12) -> ExampleMaps:
    n = len(tokens)
    rng = np.random.default_rng(7)
    # Peaked rows (Dirichlet 0.3): many distinct shares, and no map equals its transpose.
    per_head = {
        lens: rng.dirichlet(np.full(n, 0.3), size=(layers, heads, n)) for lens in ("weights", "norm", "post_ln")
    }
    return ExampleMaps(
        run_id=1,
        example_id=-2262091897777869560,
        model="made-up",
        tokens=list(tokens),
        kinds=list(kinds),
        layers=tuple(range(layers)),
        maps={**per_head, "block": rng.dirichlet(np.full(n, 0.3), size=(layers, n))},
        text_a=" ".join(tokens[1:-1]) + " <b>",
        label="0",
    )


def embedded(page: str) -> dict:
    (text,) = re.findall(r'<script type="application/json" id="show-data">(.*?)</script>', page, re.S)
    return json.loads(text)


def as_bytes(shares: np.ndarray) -> np.ndarray:
    return np.rint(shares * 255).astype(np.uint8)


def test_the_page_carries_every_map_byte_for_byte():
    maps = made_up_maps()
    page = view_of(maps, layer=1, lens="norm").html
    data = embedded(page)
    n = len(TOKENS)
    assert data["tokens"] == TOKENS and data["kinds"] == KINDS
    assert (data["layer"], data["lens"], data["heads"], data["layers"]) == (1, "norm", 12, [0, 1, 2])
    assert [k for k, _ in data["lenses"]] == ["weights", "norm", "post_ln", "block"]
    for lens, values in maps.maps.items():
        for layer in maps.layers:
            got = np.frombuffer(base64.b64decode(data["maps"][lens][str(layer)]), np.uint8)
            shape = (n, n) if lens == "block" else (12, n, n)
            np.testing.assert_array_equal(got.reshape(shape), as_bytes(values[layer]), err_msg=f"{lens} {layer}")
    # Offline: no chart library, nothing to fetch; the example's text is escaped text.
    assert "vegaEmbed" not in page and not re.search(r"(src|href)=\"?https?:", page)
    assert str(escape(maps.text_a)) in page and "<b>" not in page


def test_a_long_input_holds_the_shown_layer_then_the_shown_lens(monkeypatch):
    maps = made_up_maps(layers=3)
    n = len(TOKENS)
    per_layer = 3 * 12 * n * n + n * n
    monkeypatch.setattr(example_view, "MAX_CELLS", 3 * per_layer - 1)
    data = embedded(page := view_of(maps, layer=2, lens="post_ln").html)
    assert data["layers"] == [2] and set(data["maps"]) == {"weights", "norm", "post_ln", "block"}
    assert "holds layer 2 only" in page and f"{3 * per_layer:,} cells" in page
    monkeypatch.setattr(example_view, "MAX_CELLS", per_layer - 1)
    data = embedded(page := view_of(maps, layer=2, lens="post_ln").html)
    assert data["layers"] == [2] and list(data["maps"]) == ["post_ln"] and data["lenses"][0][0] == "post_ln"
    assert "through one lens only" in page
    monkeypatch.setattr(example_view, "MAX_CELLS", 3 * per_layer)
    assert '<p class="note">' not in view_of(maps).html and embedded(view_of(maps).html)["layers"] == [0, 1, 2]


def test_a_lens_or_layer_the_maps_lack_is_refused():
    maps = made_up_maps()
    with pytest.raises(UsageError, match="no lens 'attention'"):
        view_of(maps, lens="attention")
    with pytest.raises(UsageError, match=r"layer 5 is not among the maps' layers \(0, 1, 2\)"):
        view_of(maps, layer=5)


def test_the_view_draws_inline_in_a_frame_of_the_page(tmp_path):
    view = view_of(made_up_maps())
    frame = view._repr_html_()
    (srcdoc,) = re.findall(r'srcdoc="([^"]*)"', frame)
    assert html.unescape(srcdoc) == view.html
    assert view.save(tmp_path / "a" / "v.html").read_text(encoding="utf-8") == view.html


# In the browser.


def pixels(tab, selector: str, nth: int = 0) -> np.ndarray:
    """The canvas's pixels (height, width, RGBA) at its drawing resolution."""
    flat, width = tab.evaluate(
        """([selector, nth]) => {
             const c = document.querySelectorAll(selector)[nth];
             return [Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data), c.width];
           }""",
        [selector, nth],
    )
    return np.array(flat, np.uint8).reshape(-1, width, 4)


def draws(red: np.ndarray, shares: np.ndarray) -> bool:
    """Whether `red` (a cell's red channel, per cell) is what `shares` give: darker for a
    larger share, cell by cell (the colour scale only has to be monotone)."""
    order = np.argsort(as_bytes(shares).ravel(), kind="stable")
    values = red.ravel()[order].astype(int)
    return bool(np.all(np.diff(values) <= 0)) and len(set(values)) > 10


def thumbnail_red(tab, head: int) -> np.ndarray:
    return pixels(tab, "button.head canvas", head)[..., 0]


def large_red(tab) -> tuple[np.ndarray, dict]:
    """The large map's red channel at each cell's centre (n × n), its geometry, and the colour
    of the strip beside each row."""
    found = tab.evaluate(
        """() => {
             const c = document.getElementById('detail-map'), r = window.devicePixelRatio;
             const g = Object.fromEntries(['margin', 'cell', 'tokens', 'strip'].map(k => [k, Number(c.dataset[k])]));
             const image = c.getContext('2d').getImageData(0, 0, c.width, c.height);
             const at = (x, y) => 4 * (Math.floor(y * r) * c.width + Math.floor(x * r));
             const centre = i => g.margin + (i + 0.5) * g.cell, strip = g.margin - 2 - g.strip / 2;
             const red = [], rows = [];
             for (let i = 0; i < g.tokens; i++) {
               for (let j = 0; j < g.tokens; j++) red.push(image.data[at(centre(j), centre(i))]);
               rows.push(Array.from(image.data.slice(at(strip, centre(i)), at(strip, centre(i)) + 3)));
             }
             return {...g, red: red, strip_colours: rows};
           }"""
    )
    n = int(found["tokens"])
    return np.array(found.pop("red")).reshape(n, n), found


def wait_drawn(tab, state: str) -> None:
    tab.wait_for_function("s => document.body.getAttribute('data-drawn') === s", arg=state, timeout=20_000)


def inside_the_width(tab) -> dict:
    return tab.evaluate(
        """() => {
             const boxes = [...document.querySelectorAll('button.head canvas, #detail-map')]
               .map(c => c.getBoundingClientRect());
             return {n: boxes.length, width: window.innerWidth,
                     left: Math.min(...boxes.map(b => b.left)), right: Math.max(...boxes.map(b => b.right)),
                     empty: boxes.filter(b => b.width < 40).length,
                     scroll: document.documentElement.scrollWidth};
           }"""
    )


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_head_lies_inside_the_window_and_the_menus_redraw(browser, tmp_path, width):  # noqa: F811
    maps = made_up_maps()
    n = len(TOKENS)
    page = write_page(maps, tmp_path / "show.html")
    tab, log = open_offline(browser, page, width=width)
    wait_drawn(tab, "weights 0 0")
    fit = inside_the_width(tab)
    # Twelve small maps and the large one, none past the window's edges, none behind a scrollbar.
    assert fit["n"] == 13 and fit["empty"] == 0, fit
    assert fit["left"] >= 0 and fit["right"] <= width and fit["scroll"] <= width, fit
    tab.screenshot(path=str(tmp_path / f"show-{width}.png"))
    # Every head of layer 0 drawn from its own map, rows as queries (a transpose would fail).
    for head in range(12):
        assert draws(thumbnail_red(tab, head), maps.maps["weights"][0, head]), head
    assert not draws(thumbnail_red(tab, 3), maps.maps["weights"][0, 3].T)
    # The large map: head 0, a cell per token at least a line of text tall, every token labelled.
    red, g = large_red(tab)
    assert draws(red, maps.maps["weights"][0, 0])
    assert g["cell"] >= 14 and tab.get_attribute("#detail-map", "data-label-step") == "1"
    assert tab.get_attribute("#detail-map", "data-font") == "13"
    # Punctuation rows carry the green strip beside the map; a word's row does not.
    for i, kind in enumerate(KINDS):
        colour = tuple(g["strip_colours"][i])
        assert (colour == PUNCT_GREEN) == (kind == "punct"), (i, TOKENS[i], colour)
    # A click draws that head large; the menus switch layer and lens and draw them.
    tab.click("button.head[data-head='7']")
    wait_drawn(tab, "weights 0 7")
    assert tab.get_attribute("button.head[data-head='7']", "aria-pressed") == "true"
    assert draws(large_red(tab)[0], maps.maps["weights"][0, 7])
    assert not draws(large_red(tab)[0], maps.maps["weights"][0, 6])
    tab.select_option("#layer", "2")
    wait_drawn(tab, "weights 2 7")
    assert draws(large_red(tab)[0], maps.maps["weights"][2, 7])
    assert draws(thumbnail_red(tab, 11), maps.maps["weights"][2, 11])
    tab.select_option("#lens", "post_ln")
    wait_drawn(tab, "post_ln 2 7")
    assert draws(large_red(tab)[0], maps.maps["post_ln"][2, 7])
    tab.select_option("#lens", "block")
    wait_drawn(tab, "block 2 0")
    assert tab.locator("button.head").count() == 1
    assert draws(large_red(tab)[0], maps.maps["block"][2])
    # Pointing at a cell names its tokens and its share.
    i, j = 15, 4
    box = tab.locator("#detail-map").bounding_box()
    tab.mouse.move(box["x"] + g["margin"] + (j + 0.5) * g["cell"], box["y"] + g["margin"] + (i + 0.5) * g["cell"])
    share = as_bytes(maps.maps["block"][2])[i, j] / 255
    assert tab.text_content("#readout").startswith(f"query {i} “,” → key {j} “cut”: share {share:.3f}")
    assert inside_the_width(tab)["scroll"] <= width
    assert log["requests"] == [] and log["errors"] == [] and n == 37


def test_a_long_input_fits_with_every_kth_token_labelled(browser, tmp_path):  # noqa: F811
    words = [f"w{i}" if i % 9 else "," for i in range(1, 299)]
    tokens = ["[CLS]", *words, "[SEP]"]
    kinds = ["cls", *("punct" if w == "," else "" for w in words), "sep"]
    maps = made_up_maps(tokens, kinds, layers=1)
    tab, log = open_offline(browser, write_page(maps, tmp_path / "long.html"), width=1280)
    wait_drawn(tab, "weights 0 0")
    fit = inside_the_width(tab)
    assert fit["n"] == 13 and fit["right"] <= 1280 and fit["scroll"] <= 1280, fit
    assert int(tab.get_attribute("#detail-map", "data-label-step")) > 1
    assert draws(thumbnail_red(tab, 5), maps.maps["weights"][0, 5])
    assert log["requests"] == [] and log["errors"] == []
