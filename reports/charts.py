"""Altair charts of the report, one function per chart, each from a polars frame of a named query.

The functions are pure (frame in, chart out) so that the golden-spec tests can pin down each
chart's Vega-Lite spec, and so a researcher can build the same chart in a notebook from
`attnwh query ... --format parquet` output.
"""

from __future__ import annotations

import altair as alt
import polars as pl

# (column, target, weighting), in the order the panels appear: each norm-weighted share sits
# right beside the attention share it reweighs (Kobayashi et al. next to Clark et al.).
SHARES: tuple[tuple[str, str, str], ...] = (
    ("to_cls", "[CLS]", "attention weight"),
    ("norm_to_cls", "[CLS]", "norm-weighted"),
    ("to_sep", "[SEP]", "attention weight"),
    ("norm_to_sep", "[SEP]", "norm-weighted"),
    ("to_punct", "punctuation", "attention weight"),
    ("norm_to_punct", "punctuation", "norm-weighted"),
)
_LABELS = {column: f"{target} · {weighting}" for column, target, weighting in SHARES}
_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


def panel_label(frame: pl.DataFrame) -> pl.Expr:
    """'run 3 · bert-base-uncased · rte (dev)': one label per run, so two runs of a model on
    a task are never drawn into one panel. Model names keep only their last path part; the
    run number leads to the full name in the provenance table."""
    short = pl.col("model").str.split("/").list.last()
    return pl.format("run {} · {} · {} ({})", pl.col("run_id"), short, pl.col("task"), pl.col("split"))


def _long(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
    """One row per (index…, share) with readable target/weighting labels."""
    columns = [c for c, _, _ in SHARES]
    long = frame.with_columns(panel=panel_label(frame)).unpivot(
        index=["panel", *index], on=columns, variable_name="share", value_name="value"
    )
    targets = {c: t for c, t, _ in SHARES}
    weightings = {c: w for c, _, w in SHARES}
    return long.with_columns(
        measure=pl.col("share").replace_strict(_LABELS),
        target=pl.col("share").replace_strict(targets),
        weighting=pl.col("share").replace_strict(weightings),
    ).drop("share")


def special_tokens_heads(frame: pl.DataFrame) -> alt.FacetChart:
    """Heatmaps layer × head of the six shares (columns), one row of panels per run.

    `frame` is the `head_summary` query."""
    data = _long(frame, ["layer", "head"])
    # 11 px cells: six 12-head panels and the run labels fit a 1280 px screen; models with
    # few heads get wider cells so that a panel is never narrower than its two-line header.
    heads = int(frame["head"].max()) + 1 if frame.height else 12
    cell = max(11, -(-84 // heads))
    return (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X("head:O", title="head", axis=alt.Axis(labelAngle=0, labelFontSize=9)),
            y=alt.Y("layer:O", title="layer", axis=alt.Axis(labelFontSize=9)),
            color=alt.Color(
                "value:Q",
                title="mean share",
                scale=alt.Scale(scheme="viridis", domainMin=0),
                legend=alt.Legend(orient="right", gradientLength=160),
            ),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("measure:N", title="share"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("head:O"),
                alt.Tooltip("value:Q", title="mean", format=".3f"),
            ],
        )
        .properties(width=alt.Step(cell), height=alt.Step(cell))
        .facet(
            row=alt.Row(
                "panel:N",
                title=None,
                header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold", labelLimit=210,
                                  labelPadding=8),
            ),
            column=alt.Column(
                "measure:N",
                title=None,
                sort=[_LABELS[c] for c, _, _ in SHARES],
                # Two lines ("[SEP]" over "norm-weighted"): one line is wider than a 12-head panel.
                header=alt.Header(labelFontSize=11, labelLimit=200, labelExpr="split(datum.label, ' · ')"),
            ),
            spacing={"row": 18, "column": 10},
        )
        .configure(font=_FONT)
        .configure_view(stroke=None)
    )


def special_tokens_layers(frame: pl.DataFrame) -> alt.FacetChart:
    """Per-layer lines of the three shares, solid by attention weight and dashed
    norm-weighted, one panel per run. `frame` is the `special_tokens_by_layer` query."""
    data = _long(frame, ["layer"])
    return (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=25))
        .encode(
            x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("value:Q", title="mean share", scale=alt.Scale(zero=True, nice=True)),
            color=alt.Color(
                "target:N",
                title="attention to",
                scale=alt.Scale(domain=["[CLS]", "[SEP]", "punctuation"], range=["#4c78a8", "#e45756", "#54a24b"]),
            ),
            strokeDash=alt.StrokeDash(
                "weighting:N",
                title="weighting",
                # Vega-Lite draws this legend's symbols without a stroke colour (invisible);
                # the caption and the tooltips say which line is which instead.
                legend=None,
                scale=alt.Scale(domain=["attention weight", "norm-weighted"], range=[[1, 0], [5, 3]]),
            ),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("measure:N", title="share"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("value:Q", title="mean", format=".3f"),
            ],
        )
        .properties(width=240, height=170)
        .facet(
            facet=alt.Facet(
                "panel:N", title=None, header=alt.Header(labelFontWeight="bold", labelLimit=300, labelFontSize=11)
            ),
            columns=3,
            spacing=16,
        )
        .configure(font=_FONT)
        .configure_view(stroke="#ddd")
    )


def pair_label(frame: pl.DataFrame) -> pl.Expr:
    """'run 4 · minilm → minilm-sst2 · sst2 (dev)': one label per compare run."""
    base = pl.col("base").str.split("/").list.last()
    tuned = pl.col("tuned").str.split("/").list.last()
    return pl.format("run {} · {} → {} · {} ({})", pl.col("run_id"), base, tuned, pl.col("task"), pl.col("split"))


def finetune_change_heads(frame: pl.DataFrame) -> alt.FacetChart:
    """Heatmaps layer × head of the mean cosine between base and tuned attention maps, one
    panel per compare run (Kovaleva et al. Fig. 5). `frame` is `finetune_change_by_head`."""
    data = frame.with_columns(panel=pair_label(frame))
    heads = int(frame["head"].max()) + 1 if frame.height else 12
    cell = max(14, -(-84 // heads))
    return (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X("head:O", title="head", axis=alt.Axis(labelAngle=0, labelFontSize=9)),
            y=alt.Y("layer:O", title="layer", axis=alt.Axis(labelFontSize=9)),
            # Reversed: the heads that changed most (low cosine) are the bright ones.
            color=alt.Color(
                "mean_cosine:Q", title="mean cosine", scale=alt.Scale(scheme="viridis", reverse=True, domainMax=1)
            ),
            tooltip=[
                alt.Tooltip("panel:N", title="comparison"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("head:O"),
                alt.Tooltip("mean_cosine:Q", title="mean cosine", format=".3f"),
                alt.Tooltip("stddev_cosine:Q", title="std. dev.", format=".3f"),
                alt.Tooltip("examples:Q"),
            ],
        )
        .properties(width=alt.Step(cell), height=alt.Step(cell))
        .facet(
            facet=alt.Facet("panel:N", title=None, header=alt.Header(labelFontWeight="bold", labelLimit=360)),
            columns=3,
            spacing=16,
        )
        .configure(font=_FONT)
        .configure_view(stroke=None)
    )


def finetune_change_layers(frame: pl.DataFrame) -> alt.LayerChart:
    """Mean cosine per layer with a band of ± one standard deviation over examples and heads,
    one line per compare run. `frame` is `finetune_change_by_layer`."""
    data = frame.with_columns(
        panel=pair_label(frame),
        low=pl.col("mean_cosine") - pl.col("stddev_cosine").fill_null(0),
        high=(pl.col("mean_cosine") + pl.col("stddev_cosine").fill_null(0)).clip(upper_bound=1.0),
    )
    base = alt.Chart(data).encode(
        x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0)),
        color=alt.Color("panel:N", title="comparison", legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=400)),
    )
    band = base.mark_area(opacity=0.15).encode(y=alt.Y("low:Q", title="cosine, base vs tuned"), y2="high:Q")
    line = base.mark_line(point=True).encode(
        y="mean_cosine:Q",
        tooltip=[
            alt.Tooltip("panel:N", title="comparison"),
            alt.Tooltip("layer:O"),
            alt.Tooltip("mean_cosine:Q", title="mean cosine", format=".3f"),
            alt.Tooltip("stddev_cosine:Q", title="std. dev.", format=".3f"),
        ],
    )
    return alt.layer(band, line).properties(width=420, height=220).configure(font=_FONT)
