"""One example's attention drawn token by token (`attnwh show`, `Warehouse.show`): every head of
a layer as a small map, as many across as the page is wide, and the head clicked drawn large
with the tokens on both axes ([CLS], [SEP] and punctuation in colour, on a tint, and on a strip
along the map); menus switch the lens (attention weight, weight × value norm, after residual +
LayerNorm per head, the whole block) and the layer.

The page is self-contained and offline, with no chart library: the maps travel as bytes, one a
cell (:func:`attnwh.reports.token_maps.map_bytes`, as the report's token maps do), and
templates/token_map.js and templates/show.js draw them on canvases, decoding only the lens and
layer on screen. :func:`write_page` writes the page; :func:`example_view` returns it as an
:class:`ExampleView`, which Jupyter draws inline. The maps come from
:func:`attnwh.ingest.runs.maps.example_maps`.
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

from attnwh.errors import UsageError

if TYPE_CHECKING:  # the maps are computed in attnwh.ingest; drawing them needs no torch
    from attnwh.ingest.runs.maps import ExampleMaps

LENS_TITLES: dict[str, str] = {
    "weights": "attention weight",
    "norm": "weight × value norm",
    "post_ln": "after residual + LayerNorm (each head)",
    "block": "after residual + LayerNorm (whole block: every head and the residual)",
}
# Cells in a page, one byte each (about 5.3 MB of base64): past it only the chosen layer goes in,
# and past that only its chosen lens, so a page of a long input stays a few megabytes.
MAX_CELLS = 4_000_000


@dataclass(frozen=True)
class ExampleView:
    """The page of one example's maps (`html`, a whole self-contained document); in Jupyter it
    draws inline, in a frame as wide as the output."""

    title: str
    html: str

    def save(self, out: Path | str) -> Path:
        """Writes the page to `out`; returns the path."""
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.html, encoding="utf-8")
        return out

    def _repr_html_(self) -> str:
        # A frame keeps the page's styles and script to itself; the page sets the frame's height
        # to its own once drawn (templates/show.js), 900 px until then.
        return (
            f'<iframe title="{html.escape(self.title)}" srcdoc="{html.escape(self.html)}" '
            'style="width: 100%; height: 900px; border: 0;"></iframe>'
        )


def example_view(maps: ExampleMaps, layer: int | None = None, lens: str = "weights") -> ExampleView:
    """The page of `maps`, showing `layer` (one of `maps.layers`, default the first) through
    `lens` at first; its menus switch both, within what the page holds (see MAX_CELLS)."""
    from attnwh.reports.inline import script_json, template_script
    from attnwh.reports.token_maps import map_bytes

    if lens not in maps.maps:
        raise UsageError(f"no lens {lens!r} for this model; it has {', '.join(maps.maps)}")
    shown = maps.layers[0] if layer is None else layer
    if shown in maps.other_layers:
        raise UsageError(
            f"layer {shown} is {maps.other_layers[shown]}, not softmax attention: it has no maps "
            f"(the attention layers: {', '.join(map(str, maps.layers))})"
        )
    if shown not in maps.layers:
        raise UsageError(f"layer {shown} is not among the maps' layers ({', '.join(map(str, maps.layers))})")
    layers, lenses, note = _contents(maps, shown, lens)
    heads = int(maps.maps["weights"].shape[1])
    data = {
        "tokens": maps.labels or maps.tokens,
        "kinds": maps.kinds,
        "heads": heads,
        "layer": shown,
        "lens": lens,
        "layers": layers,
        "lenses": [[k, LENS_TITLES.get(k, k)] for k in lenses],
        # Per lens and layer, every head's map one after the other (the block lens: one map).
        "maps": {k: {str(at): map_bytes(maps.maps[k][maps.layers.index(at)]) for at in layers} for k in lenses},
        # A decoder's maps are drawn as triangles; under grouped-query attention each head is
        # labelled with the key/value head it reads (groupSize query heads share one).
        "causal": maps.causal,
        "groupSize": heads // (maps.num_key_value_heads or heads),
    }
    title = f"Attention of example {maps.example_id} (run {maps.run_id}, {maps.model})"
    special = {
        kind: next((t for t, k in zip(maps.labels or maps.tokens, maps.kinds, strict=True) if k == kind), None)
        for kind in ("cls", "sep")
    }
    page = _template().render(
        title=title,
        text=maps.text_a if maps.text_b is None else f"{maps.text_a} ‖ {maps.text_b}",
        label=maps.label,
        facts=f"{len(maps.tokens)} tokens · {heads} heads a layer · {len(maps.layers)} layers" + _decoder_facts(maps),
        causal=maps.causal,
        special=special,
        note=note,
        data=script_json(data),
        script=Markup(template_script("token_map.js", "show.js")),
    )
    return ExampleView(title=title, html=page)


def _decoder_facts(maps: ExampleMaps) -> str:
    """' · decoder, 3 key/value heads (3 query heads each)' for a decoder's maps, else ''."""
    if not maps.causal:
        return ""
    heads = int(maps.maps["weights"].shape[1])
    kv = maps.num_key_value_heads or heads
    shared = f", {kv} key/value head{'' if kv == 1 else 's'} ({heads // kv} query heads each)"
    return " · decoder" + (shared if kv < heads else "") + _other_layers(maps)


def _other_layers(maps: ExampleMaps) -> str:
    """' · layers 0, 1, 2 linear attention (no maps)' for a hybrid model's other layers."""
    by_kind: dict[str, list[int]] = {}
    for layer, kind in sorted(maps.other_layers.items()):
        by_kind.setdefault(kind, []).append(layer)
    return "".join(
        f" · layer{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))} {kind} (no maps)"
        for kind, ls in by_kind.items()
    )


def write_page(maps: ExampleMaps, out: Path | str, layer: int | None = None, lens: str = "weights") -> Path:
    """The page of :func:`example_view` written to `out`; returns the path."""
    return example_view(maps, layer, lens).save(out)


def _contents(maps: ExampleMaps, shown: int, lens: str) -> tuple[list[int], list[str], str | None]:
    """The layers and lenses the page holds and, where not all, a note saying what is left out:
    every layer and lens if they fit in MAX_CELLS, else the shown layer's lenses, else only the
    shown layer and lens."""
    per_lens = {k: int(v[0].size) for k, v in maps.maps.items()}  # cells of one layer through each lens
    every = sum(per_lens.values()) * len(maps.layers)
    if every <= MAX_CELLS:
        return list(maps.layers), list(maps.maps), None
    why = f"every layer and lens would take {every:,} cells, over the page's {MAX_CELLS:,}"
    if sum(per_lens.values()) <= MAX_CELLS:
        return (
            [shown],
            list(maps.maps),
            f"This page holds layer {shown} only ({why}); --layer (layer= in Python) draws another.",
        )
    return (
        [shown],
        [lens],
        (
            f"This page holds layer {shown} through one lens only ({why}); --layer and --lens (layer=, lens= in "
            "Python) draw others."
        ),
    )


@functools.lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    source = (resources.files("attnwh.reports") / "templates" / "show.html.j2").read_text(encoding="utf-8")
    # autoescape=True for every value; only the JSON and the script (Markup) bypass it.
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source)
