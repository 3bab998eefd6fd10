"""Charts of context mixing (docs/metrics.md#context-mixing): how much of a layer's output
comes from [CLS], [SEP] and punctuation under four lenses, and how much each layer mixes."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from attnwh.reports.charts import (
    _SPLIT,
    DECODER_NOTE,
    FIRST_TOKEN,
    _line_legend,
    _styled,
    by_kind,
    fit_panels,
    panel_label,
)

# The lenses of `mixing_by_layer`, from attention weights to what the layer's output shows.
LENSES: tuple[tuple[str, str], ...] = (
    ("weight", "attention weight"),
    ("value_norm", "weight × value norm"),
    ("heads_ln", "after residual + LayerNorm (heads)"),
    ("layer_ln", "after residual + LayerNorm (whole block)"),
    ("value_zeroing", "value zeroing"),
)
TARGETS: tuple[str, ...] = ("[CLS]", "[SEP]", "punctuation")
# A decoder's: its first token in [CLS]'s place, no [SEP] (whose shares are NULL).
DECODER_TARGETS: tuple[str, ...] = (FIRST_TOKEN, "punctuation")


def lens_rows(frame: pl.DataFrame, causal: bool = False) -> pl.DataFrame:
    """`mixing_by_layer` rows as one row per run, layer, target and lens with a value; lenses
    a run did not measure (value zeroing off, pre-LN models) have none. `causal`: the runs
    are decoders', whose [CLS] target is their first token and which have no [SEP]."""
    index = ["panel", "run_id", "layer", "target"]
    if causal:
        frame = frame.filter(pl.col("target") != "[SEP]").with_columns(
            target=pl.col("target").replace("[CLS]", FIRST_TOKEN)
        )
    data = frame.filter(pl.col("target").is_in(DECODER_TARGETS if causal else TARGETS)).with_columns(
        panel=panel_label(frame)
    )
    long = data.unpivot(index=index, on=[c for c, _ in LENSES], variable_name="lens", value_name="share")
    return long.drop_nulls("share").with_columns(lens=pl.col("lens").replace_strict(dict(LENSES)))


# Panel width in px: a row's label is drawn above each of its panels, wrapped to this width
# (fit_panels), since a longer line would be cut or push the panels apart.
_PANEL_WIDTH = 210


# Each lens's dash. Lenses can agree to within a line's width (on MiniLM the weight × value
# norm and the heads' LayerNorm shares nearly coincide), and a solid line drawn over another
# hides it: the later lenses are dashed, so the line under them shows through the gaps.
LENS_DASHES: dict[str, list[int]] = {
    "attention weight": [1, 0],
    "weight × value norm": [1, 0],
    "after residual + LayerNorm (heads)": [6, 3],
    "after residual + LayerNorm (whole block)": [2, 2],
    "value zeroing": [8, 3, 2, 3],
}


def context_mixing(frame: pl.DataFrame) -> alt.FacetChart | alt.VConcatChart:
    """Per run (rows) and target (columns): the share per layer under each lens, one line per
    lens, colour and dash both naming it; the legend lists only the lenses with data (value
    zeroing only for runs ingested with it). Decoders' runs (a `causal` column) in a grid of
    their own below: the first token and punctuation. `frame` is the `mixing_by_layer` query
    (with `causal` from run_models)."""
    parts = [(causal, lens_rows(part, causal)) for causal, part in by_kind(frame)]
    present = {lens for _, data in parts for lens in data["lens"].to_list()}
    lenses = [label for _, label in LENSES if label in present]
    grids = [_mixing_grid(data, lenses, DECODER_TARGETS if causal else TARGETS, causal) for causal, data in parts]
    return _styled(grids[0] if len(grids) == 1 else alt.vconcat(*grids, spacing=28), view_stroke="#ddd")


def _mixing_grid(data: pl.DataFrame, lenses: list[str], targets: tuple[str, ...], causal: bool) -> alt.FacetChart:
    """context_mixing's grid for runs of one kind (`lens_rows`), the `lenses` of every run."""
    data = data.with_columns(header=fit_panels(data, _PANEL_WIDTH)["panel"])
    colours = dict(zip((label for _, label in LENSES), ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756")))
    legend = _line_legend()
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=20), strokeWidth=2)
        .encode(
            x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("share:Q", title="mean share", scale=alt.Scale(zero=True, nice=True)),
            # Colour and dash share field and title, so Vega-Lite merges them into one legend.
            color=alt.Color(
                "lens:N",
                title="lens",
                scale=alt.Scale(domain=lenses, range=[colours[lens] for lens in lenses]),
                legend=legend,
            ),
            strokeDash=alt.StrokeDash(
                "lens:N",
                title="lens",
                scale=alt.Scale(domain=lenses, range=[LENS_DASHES[lens] for lens in lenses]),
                legend=legend,
            ),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("target:N"),
                alt.Tooltip("lens:N"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("share:Q", title="mean share", format=".3f"),
            ],
        )
        .properties(width=_PANEL_WIDTH, height=150)
    )
    header: dict[str, Any] = {
        "labelFontWeight": "bold",
        "labelAnchor": "start",
        "labelAlign": "left",
    }
    grid = lines.facet(
        # The run's label above each panel of its row, wrapped to the panel's width: on
        # one line a fine-tuned model's label ("… fine-tuned on sentiment from …") was cut.
        row=alt.Row(
            "header:N",
            title=None,
            header=alt.Header(labelOrient="top", labelAngle=0, labelExpr=_SPLIT, labelLimit=_PANEL_WIDTH, **header),
        ),
        column=alt.Column(
            "target:N", title=None, sort=list(targets), header=alt.Header(labelLimit=_PANEL_WIDTH, **header)
        ),
        spacing={"row": 14, "column": 12},
    )
    return grid.properties(title=alt.Title(DECODER_NOTE, anchor="start", fontSize=12)) if causal else grid


def mixing_ratio(frame: pl.DataFrame) -> alt.Chart:
    """The mixing ratio and the residual's share per layer, one line per run (solid: mixing
    ratio, dashed: residual share). `frame` is the `mixing_by_layer` query."""
    runs = frame.filter(pl.col("target") == "[CLS]", pl.col("mixing_ratio").is_not_null())
    names = {"mixing_ratio": "mixing ratio", "residual_share": "residual share"}
    data = (
        runs.with_columns(run=panel_label(runs))
        .unpivot(index=["run", "run_id", "layer"], on=list(names), variable_name="measure")
        .with_columns(measure=pl.col("measure").replace_strict(names))
    )
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=25))
        .encode(
            x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("value:Q", title="mean over tokens", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("run:N", title="run", legend=_line_legend()),
            strokeDash=alt.StrokeDash(
                "measure:N",
                title=None,
                scale=alt.Scale(domain=list(names.values()), range=[[1, 0], [5, 3]]),
                # Stroke-only symbols: the point overlay would fill them and hide the dashes.
                legend=alt.Legend(
                    orient="bottom",
                    symbolType="stroke",
                    symbolStrokeColor="#333",
                    symbolFillColor="transparent",
                    symbolSize=300,
                ),
            ),
            detail="run_id:N",
            tooltip=[
                alt.Tooltip("run:N"),
                alt.Tooltip("measure:N"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("value:Q", format=".3f"),
            ],
        )
        .properties(width=420, height=200)
    )
    return _styled(lines)
