"""Charts of context mixing (docs/metrics.md#context-mixing): how much of a layer's output
comes from [CLS], [SEP] and punctuation under four lenses, and how much each layer mixes."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from attnwh.reports.charts import _line_legend, _styled, panel_label

# The lenses of `mixing_by_layer`, from attention weights to what the layer's output shows.
LENSES: tuple[tuple[str, str], ...] = (
    ("weight", "attention weight"),
    ("value_norm", "weight × value norm"),
    ("heads_ln", "after residual + LayerNorm (heads)"),
    ("layer_ln", "after residual + LayerNorm (whole block)"),
    ("value_zeroing", "value zeroing"),
)
TARGETS: tuple[str, ...] = ("[CLS]", "[SEP]", "punctuation")


def lens_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """`mixing_by_layer` rows as one row per run, layer, target and lens with a value; lenses
    a run did not measure (value zeroing off, pre-LN models) have none."""
    index = ["panel", "run_id", "layer", "target"]
    data = frame.filter(pl.col("target").is_in(TARGETS)).with_columns(panel=panel_label(frame))
    long = data.unpivot(index=index, on=[c for c, _ in LENSES], variable_name="lens", value_name="share")
    return long.drop_nulls("share").with_columns(lens=pl.col("lens").replace_strict(dict(LENSES)))


def context_mixing(frame: pl.DataFrame) -> alt.FacetChart:
    """Per run (rows) and target (columns): the share per layer under each lens, one line per
    lens. `frame` is the `mixing_by_layer` query."""
    data = lens_rows(frame)
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=25))
        .encode(
            x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("share:Q", title="mean share", scale=alt.Scale(zero=True, nice=True)),
            color=alt.Color(
                "lens:N",
                title="lens",
                scale=alt.Scale(domain=[label for _, label in LENSES]),
                legend=_line_legend(),
            ),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("target:N"),
                alt.Tooltip("lens:N"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("share:Q", title="mean share", format=".3f"),
            ],
        )
        .properties(width=200, height=150)
    )
    header: dict[str, Any] = {
        "labelFontWeight": "bold",
        "labelAnchor": "start",
        "labelAlign": "left",
        "labelLimit": 320,
    }
    return _styled(
        lines.facet(
            row=alt.Row("panel:N", title=None, header=alt.Header(labelOrient="top", labelAngle=0, **header)),
            column=alt.Column("target:N", title=None, sort=list(TARGETS), header=alt.Header(**header)),
            spacing={"row": 14, "column": 12},
        ),
        view_stroke="#ddd",
    )


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
