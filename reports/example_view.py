"""One example's attention drawn token by token: every head of a layer side by side, a heatmap
each with the tokens on both axes ([CLS], [SEP] and punctuation marked in colour), a menu for
the lens (attention weight, weight × value norm, after residual + LayerNorm per head, the whole
block) and, where the maps hold several, for the layer.

:func:`example_chart` gives the Altair chart (it draws inline in Jupyter); :func:`write_page`
puts it in a self-contained HTML page (`attnwh show`), as offline as the report: Vega is
inlined, nothing is fetched. The maps come from :func:`attnwh.ingest.runs.maps.example_maps`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
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
# Cells drawn in all, over every layer and lens: beyond it only the chosen layer goes into the
# chart, so a page of a long input stays a few megabytes.
MAX_CELLS = 400_000
KIND_COLOURS = {"cls": "#b2182b", "sep": "#2166ac", "punct": "#1b7837"}


def example_chart(maps: ExampleMaps, layer: int | None = None, lens: str = "weights", columns: int = 4) -> alt.Chart:
    """The heads of a layer side by side (`layer`: one of `maps.layers`, default the first),
    through `lens` at first; menus switch lens and layer."""
    if lens not in maps.maps:
        raise UsageError(f"no lens {lens!r} for this model; it has {', '.join(maps.maps)}")
    shown = maps.layers[0] if layer is None else layer
    if shown not in maps.layers:
        raise UsageError(f"layer {shown} is not among the maps' layers ({', '.join(map(str, maps.layers))})")
    n = len(maps.tokens)
    heads = maps.maps["weights"].shape[1]
    per_layer = n * n * (heads * sum(lens != "block" for lens in maps.maps) + ("block" in maps.maps))
    layers = list(maps.layers) if per_layer * len(maps.layers) <= MAX_CELLS else [shown]
    rows = list(_rows(maps, layers))
    side = max(120, min(12 * n, 320))
    lens_menu = alt.param(
        name="lens",
        value=lens,
        bind=alt.binding_select(
            options=list(maps.maps), labels=[LENS_TITLES.get(k, k) for k in maps.maps], name="lens "
        ),
    )
    params: list[Any] = [
        lens_menu,
        alt.param(name="tokens", value=maps.tokens),
        alt.param(name="kinds", value=maps.kinds),
    ]
    filters = "datum.lens == lens"
    if len(layers) > 1:
        params.append(alt.param(name="layer", value=shown, bind=alt.binding_select(options=layers, name="layer ")))
        filters += " && datum.layer == layer"
    label_colour = " : ".join(f"kinds[datum.value] == '{k}' ? '{c}'" for k, c in KIND_COLOURS.items()) + " : '#333'"
    axis: dict[str, Any] = {
        "labelExpr": "tokens[datum.value]",
        "labelColor": {"expr": label_colour},
        "labelFontWeight": {"expr": "kinds[datum.value] == '' ? 'normal' : 'bold'"},
        "labelFontSize": 10 if n <= 40 else 7,
        "labelOverlap": False,
        "ticks": False,
        "labelLimit": 90,
    }
    base = (
        alt.Chart(alt.Data(values=rows), width=side, height=side)
        .transform_filter(filters)
        # A row per panel holds its n × n shares and their cell numbers, flattened here: the
        # page carries numbers, not n² objects with repeated keys.
        .transform_flatten(["w", "cell"])
        .transform_calculate(i=f"floor(datum.cell / {n})", j=f"datum.cell % {n}")
        .transform_calculate(query="tokens[datum.i]", key="tokens[datum.j]")
        .mark_rect()
        .encode(
            x=alt.X("j:O", title="key token", axis=alt.Axis(labelAngle=-90, **axis)),
            y=alt.Y("i:O", title="query token", axis=alt.Axis(**axis)),
            color=alt.Color(
                "w:Q",
                title="share of the row",
                # sqrt: the small shares most of a map holds stay visible; 0 is white.
                scale=alt.Scale(type="sqrt", domain=[0, 1], range=["#ffffff", "#08306b"]),
            ),
            tooltip=[
                alt.Tooltip("query:N", title="query token (row)"),
                alt.Tooltip("key:N", title="key token (column)"),
                alt.Tooltip("w:Q", title="share", format=".4f"),
                alt.Tooltip("panel:N", title="head"),
            ],
        )
    )
    return (
        base.facet(facet=alt.Facet("panel:N", title=None, sort=alt.SortField("order")), columns=columns)
        .add_params(*params)
        .properties(
            title=alt.Title(
                f"run {maps.run_id} · example {maps.example_id} · {maps.model}",
                subtitle=_subtitle(maps),
                anchor="start",
            )
        )
        .resolve_scale(x="independent", y="independent")
    )


def _rows(maps: ExampleMaps, layers: list[int]) -> Any:
    """A chart row per panel: lens, layer, panel title and order, its n × n shares row-major
    (w) and their cell numbers."""
    cells = list(range(len(maps.tokens) ** 2))
    for lens, values in maps.maps.items():
        for layer in layers:
            at = values[maps.layers.index(layer)]
            panels = [("whole block", -1, at)] if lens == "block" else [(f"head {h}", h, m) for h, m in enumerate(at)]
            for title, order, shares in panels:
                yield {
                    "lens": lens,
                    "layer": layer,
                    "panel": title,
                    "order": order,
                    "w": [round(float(x), 5) for x in shares.ravel()],
                    "cell": cells,
                }


def _subtitle(maps: ExampleMaps) -> list[str]:
    text = maps.text_a if maps.text_b is None else f"{maps.text_a} ‖ {maps.text_b}"
    lines = [text if len(text) <= 160 else text[:157] + "…"]
    if maps.label is not None:
        lines.append(f"gold label {maps.label}")
    lines.append("token colours: [CLS] red, [SEP] blue, punctuation green; each row sums to 1")
    return lines


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:">
<title>{{ title }}</title>
<style>
  body { margin: 0; color: #1f2328; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
  main { max-width: 1400px; margin: 0 auto; padding: 24px; }
  h1 { font-size: 22px; margin: 0 0 6px; }
  p { color: #59636e; max-width: 60em; }
  /* The menus above the heads, not below twelve of them (vega-embed puts them last). */
  #view { overflow-x: auto; display: flex; flex-direction: column-reverse; align-items: flex-start; }
  #view .vega-bindings { margin: 0 0 12px; }
  #view .vega-bind { margin-right: 16px; }
</style>
</head>
<body>
<main>
<h1>{{ title }}</h1>
<p>{{ intro }}</p>
<div id="view"></div>
</main>
<script>{{ bundle }}</script>
<script type="application/json" id="spec">{{ spec }}</script>
<script>
  vegaEmbed("#view", JSON.parse(document.getElementById("spec").textContent),
            {actions: false, renderer: "svg"});
</script>
</body>
</html>
"""


def write_page(maps: ExampleMaps, out: Path | str, layer: int | None = None, lens: str = "weights") -> Path:
    """`maps` drawn by :func:`example_chart` as one self-contained HTML page at `out`."""
    from attnwh.reports.page import javascript_bundle, script_json

    chart = example_chart(maps, layer, lens)
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.from_string(_PAGE).render(
        title=f"Attention of example {maps.example_id} (run {maps.run_id}, {maps.model})",
        intro="Every head of a layer, token by token: row i is how query token i spreads its attention over "
        "the key tokens, through the chosen lens (docs/metrics.md). Hover a cell for its tokens and share.",
        bundle=Markup(javascript_bundle()),
        spec=script_json(chart.to_dict()),
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
