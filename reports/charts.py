"""Altair charts of the report, one function per chart, each from a polars frame of a named query.

The functions are pure (frame in, chart out) so that the golden-spec tests can pin down each
chart's Vega-Lite spec, and so a researcher can build the same chart in a notebook from
`attnwh query ... --format parquet` output.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, TypeVar, cast

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

# What a decoder's (causal language model's) runs show in the same places: its first token
# (BOS, or the first real token) takes [CLS]'s place and it has no [SEP], whose shares are
# NULL (docs/decoders.md). A NULL share is drawn as no panel at all, never as 0.
FIRST_TOKEN = "first token"
DECODER_SHARES: tuple[tuple[str, str, str], ...] = tuple(
    (column, FIRST_TOKEN if target == "[CLS]" else target, weighting)
    for column, target, weighting in SHARES
    if target != "[SEP]"
)
DECODER_NOTE = "Decoders (causal language models): the first token in [CLS]'s place; a decoder has no [SEP]"


def by_kind(frame: pl.DataFrame) -> list[tuple[bool, pl.DataFrame]]:
    """`frame` as (causal, rows) parts: the encoders' runs, then the decoders' (a `causal`
    column, from the query run_models, says which); one part when all runs are of one kind or
    the frame has no `causal` column. Encoder and decoder runs are drawn in separate grids,
    since a decoder has no [SEP] panel and a grid with a panel missing shifts the others."""
    if "causal" not in frame.columns or not frame["causal"].any():
        return [(False, frame)]
    if frame["causal"].all():
        return [(True, frame)]
    return [(False, frame.filter(~pl.col("causal"))), (True, frame.filter(pl.col("causal")))]


_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


# The axes of every layer × head heatmap (Any: each value suits only its own keyword of
# `encode`, which a dict's one value type cannot say).
# Layers and heads are numbered from 0 here and on the whole page (the paper counts from 1).
_HEAD_GRID: dict[str, Any] = {
    "x": alt.X("head:O", title="head (from 0)", axis=alt.Axis(labelAngle=0, labelFontSize=9)),
    "y": alt.Y("layer:O", title="layer (from 0)", axis=alt.Axis(labelFontSize=9)),
}

# The head the reader clicked: two top-level signals that the page's script sets in every
# layer × head chart at once (linked selection without a server); -1 = no head selected.
SELECTED_LAYER, SELECTED_HEAD = "selected_layer", "selected_head"
_IS_SELECTED = f"datum.layer === {SELECTED_LAYER} && datum.head === {SELECTED_HEAD}"


def _selected_outline(*otherwise: dict[str, Any]) -> dict[str, Any]:
    """Encodings that outline the selected head's mark in near-black; `otherwise` are further
    stroke conditions ({"test": …, "value": colour}) for the other marks."""
    return {
        "stroke": alt.Stroke(value=None, condition=[{"test": _IS_SELECTED, "value": "#111"}, *otherwise]),
        "strokeWidth": alt.StrokeWidth(value=2, condition={"test": _IS_SELECTED, "value": 3}),
    }


_Selectable = TypeVar("_Selectable", alt.HConcatChart, alt.VConcatChart, alt.FacetChart)


def _selectable(chart: _Selectable) -> _Selectable:
    """`chart` with the two selection signals declared at its top level (see SELECTED_LAYER).

    Set directly: `add_params` would push the parameters down into the sub-charts of a
    compound chart, where a facet or concat cannot share them."""
    chart = chart.copy(deep=False)
    chart.params = [alt.VariableParameter(name=name, value=-1) for name in (SELECTED_LAYER, SELECTED_HEAD)]
    return chart


# Run labels hold their parts on separate lines ("run 3 · bert-base-uncased", "rte (dev)",
# "pre-trained"): one line would be wider than a panel, and a header wider than its panel
# either is cut or pushes the panel away from its axis. Headers and legends split them.
NEWLINE = "\n"
_SPLIT = "split(datum.label, '\\n')"


def wrapped(label: str, width: int) -> str:
    """`label` (lines split by newlines) with each line wrapped at spaces into lines of at most
    `width` characters, for a header above a panel narrower than its label; a word longer than
    that is broken after a hyphen, slash, dot or underscore (model names), and only one
    without any keeps a line of its own."""
    out: list[str] = []
    for line in label.split(NEWLINE):
        current = ""
        for word in line.split(" "):
            pieces = re.findall(r"[^-/._]*[-/._]?", word)[:-1] if len(word) > width else [word]
            for k, piece in enumerate(pieces):
                joined = (current + piece) if k else (f"{current} {piece}" if current else piece)
                if current and len(joined) > width:
                    out.append(current.rstrip())
                    current = piece
                else:
                    current = joined
        out.append(current)
    return NEWLINE.join(out)


def fit_panels(data: pl.DataFrame, px: int) -> pl.DataFrame:
    """`data` with its `panel` labels wrapped to headers `px` wide (bold 11 px: about 6.5 px a
    character): a header line wider than its panel is cut, or, where the header may run on,
    pushes the panels apart and the chart past the page."""
    labels = {label: wrapped(label, px * 2 // 13) for label in data["panel"].unique().to_list()}
    return data.with_columns(panel=pl.col("panel").replace_strict(labels, default=None))


def run_order(panels: Iterable[str]) -> list[str]:
    """Panel labels ("run 2 · …") in the order of their run numbers, for the `sort` of every
    channel that lays out or colours runs: Vega-Lite sorts a nominal field as text, which put
    run 10 before run 2."""

    def key(label: str) -> tuple[float, str]:
        number = re.match(r"run (\d+)", label)
        return (int(number.group(1)) if number else math.inf, label)

    return sorted(set(panels), key=key)


def _grid_width(frame: pl.DataFrame, cell: int) -> int:
    """Width in px of one layer × head panel of `cell` px squares."""
    heads = int(cast(int, frame["head"].max())) + 1 if frame.height else 12
    return cell * heads


def _cell(frame: pl.DataFrame, smallest: int) -> int:
    """Cell size in px of a layer × head heatmap: at least `smallest` (13 px keeps two-digit
    head ticks apart), and wide enough that a panel of few heads is never narrower than a
    header line (120 px)."""
    heads = int(cast(int, frame["head"].max())) + 1 if frame.height else 12
    return max(smallest, -(-120 // heads))


def _heatmap(data: pl.DataFrame, cell: int, **encoding: Any) -> alt.Chart:
    """A layer × head heatmap of `cell` px squares, the selected head outlined; `encoding`
    adds colour and tooltips (and may replace the outline)."""
    return (
        alt.Chart(data)
        .mark_rect()
        .encode(**_HEAD_GRID, **{**_selected_outline(), **encoding})
        .properties(width=alt.Step(cell), height=alt.Step(cell))
    )


def _panels(chart: alt.Chart | alt.LayerChart, columns: int, spacing: int, **header: Any) -> alt.FacetChart:
    """One panel per run (the `panel` column), `columns` to a row, titled in bold, one line
    of the label per line of the header."""
    # From the panel's left edge: a centred header wider than its panel would push the panel
    # (and its axis) apart; a left-aligned one only widens the gap to the next panel.
    header = {
        "labelFontWeight": "bold",
        "labelLimit": 320,
        "labelExpr": _SPLIT,
        "labelAnchor": "start",
        "labelAlign": "left",
        **header,
    }
    # Each panel draws its own x axis: a shared one goes in a footer under every column of the
    # last row, so with a short last row (4 runs, 3 columns) the empty places got axes too and
    # looked like untitled panels without data.
    data = chart.data
    assert isinstance(data, pl.DataFrame), "the panels' data must be the chart's own (a polars frame)"
    return chart.facet(
        facet=alt.Facet("panel:N", title=None, header=alt.Header(**header), sort=run_order(data["panel"])),
        columns=columns,
        spacing=spacing,
    ).resolve_axis(x="independent")


def _layer(*charts: alt.Chart, **kwargs: Any) -> alt.LayerChart:
    """`alt.layer` of charts without facet encodings, which is always a LayerChart."""
    layered = alt.layer(*charts, **kwargs)
    assert isinstance(layered, alt.LayerChart)  # a FacetChart only when the charts share facet encodings
    return layered


_UNSET = object()
_Styled = TypeVar("_Styled", bound=alt.TopLevelMixin)


def _styled(chart: _Styled, view_stroke: Any = _UNSET) -> _Styled:
    """The page's font on `chart`; `view_stroke` (None: no frame) for the cells' frame."""
    chart = chart.configure(font=_FONT)
    return chart if view_stroke is _UNSET else chart.configure_view(stroke=view_stroke)


def _lineage(frame: pl.DataFrame) -> list[pl.Expr]:
    """The label's last line, when `frame` has a `lineage` column ("pre-trained", "fine-tuned
    on sst2 from bert-base"; see `with_lineage`)."""
    return [pl.lit(NEWLINE), pl.col("lineage")] if "lineage" in frame.columns else []


def with_lineage(frame: pl.DataFrame, lineage: pl.DataFrame, column: str = "model") -> pl.DataFrame:
    """`frame` with a `lineage` column from the `model_lineage` query, matched on `column`
    (a model name): which model is pre-trained and which fine-tuned, and from what."""
    base = lineage["base_model"].str.split("/").list.last()
    names = lineage.select(
        pl.col("model").alias(column),
        lineage=pl.when(pl.col("finetuned_task").is_not_null())
        .then(pl.format("fine-tuned on {} from {}", pl.col("finetuned_task"), base.fill_null("?")))
        .when(pl.col("base_model").is_not_null())
        .then(pl.format("fine-tuned from {}", base))
        .otherwise(pl.lit("pre-trained")),
    ).unique(column, keep="first")
    return frame.join(names, on=column, how="left").with_columns(pl.col("lineage").fill_null("pre-trained"))


def panel_label(frame: pl.DataFrame) -> pl.Expr:
    """'run 3 · bert-base-uncased', 'rte (dev)' and, with a `lineage` column, 'pre-trained',
    on three lines: one label per run, so two runs of a model on a task are never drawn
    into one panel. Model names keep only their last path part; the run number leads to the
    full name in the provenance table."""
    short = pl.col("model").str.split("/").list.last()
    return pl.concat_str(
        [
            pl.format("run {} · {}", pl.col("run_id"), short),
            pl.lit(NEWLINE),
            pl.format("{} ({})", pl.col("task"), pl.col("split")),
            *_lineage(frame),
        ]
    )


def _long(frame: pl.DataFrame, index: list[str], shares: tuple[tuple[str, str, str], ...] = SHARES) -> pl.DataFrame:
    """One row per (index…, share) with readable target/weighting labels, for the `shares`
    (SHARES; DECODER_SHARES for decoders' runs)."""
    columns = [c for c, _, _ in shares]
    long = frame.with_columns(panel=panel_label(frame)).unpivot(
        index=["panel", *index], on=columns, variable_name="share", value_name="value"
    )
    targets = {c: t for c, t, _ in shares}
    weightings = {c: w for c, _, w in shares}
    labels = {column: f"{target} · {weighting}" for column, target, weighting in shares}
    return long.with_columns(
        measure=pl.col("share").replace_strict(labels),
        target=pl.col("share").replace_strict(targets),
        weighting=pl.col("share").replace_strict(weightings),
    ).drop("share")


def special_tokens_heads(frame: pl.DataFrame) -> alt.HConcatChart | alt.VConcatChart:
    """Heatmaps layer × head of the six shares (columns), one row of panels per run; each
    column has its own colour scale (0 to its largest mean), so that the weak shares (the
    norm-weighted ones) are not one dark block beside the strong ones. Decoders' runs (a
    `causal` column) get a grid of their own below, of four shares: the first token in
    [CLS]'s place, no [SEP].

    `frame` is the `head_summary` query (with `causal` from run_models)."""
    cell = _cell(frame, 13)
    width = _grid_width(frame, cell)
    grids = [
        _special_tokens_grid(part, DECODER_SHARES if causal else SHARES, cell, width, DECODER_NOTE if causal else None)
        for causal, part in by_kind(frame)
    ]
    chart = grids[0] if len(grids) == 1 else alt.vconcat(*grids, spacing=28).resolve_scale(color="independent")
    return _styled(_selectable(chart), view_stroke=None)


def _special_tokens_grid(
    frame: pl.DataFrame, shares: tuple[tuple[str, str, str], ...], cell: int, width: int, heading: str | None
) -> alt.HConcatChart:
    """special_tokens_heads' columns for the runs of `frame`, all of one kind."""
    data = fit_panels(_long(frame, ["layer", "head"], shares), width)
    columns = []
    for k, (_, target, weighting) in enumerate(shares):
        first = k == 0
        cells = (
            alt.Chart(data)
            .transform_filter(alt.datum.measure == f"{target} · {weighting}")
            .mark_rect()
            .encode(
                x=_HEAD_GRID["x"],
                y=_HEAD_GRID["y"] if first else alt.Y("layer:O", axis=None),
                color=alt.Color(
                    "value:Q",
                    title="mean share",
                    scale=alt.Scale(scheme="viridis", domainMin=0),
                    legend=alt.Legend(
                        orient="bottom", direction="horizontal", gradientLength=max(width - 20, 60), titleFontSize=10
                    ),
                ),
                tooltip=[
                    alt.Tooltip("panel:N", title="run"),
                    alt.Tooltip("measure:N", title="share"),
                    alt.Tooltip("layer:O"),
                    alt.Tooltip("head:O"),
                    alt.Tooltip("value:Q", title="mean", format=".3f"),
                ],
                **_selected_outline(),
            )
            .properties(width=alt.Step(cell), height=alt.Step(cell))
        )
        # The run's label above its row (left of the axis, a header as wide as its longest
        # label pushes the axis away from the cells), shown in the first column; the other
        # columns keep an invisible copy so that their rows line up with the first's.
        header = alt.Header(
            labelOrient="top",
            labelAnchor="start",
            labelAngle=0,
            labelAlign="left",
            labelFontWeight="bold",
            # Lines wrapped to the panel's width (fit_panels): a longer first-column label
            # widened the first column's band and pushed the other five apart.
            labelLimit=width,
            labelExpr=_SPLIT,
            labelColor="black" if first else "transparent",
        )
        title = alt.Title([target, weighting], fontSize=11, fontWeight="normal", anchor="middle")
        columns.append(
            cells.facet(
                row=alt.Row("panel:N", title=None, header=header, sort=run_order(data["panel"])), spacing={"row": 18}
            ).properties(title=title)
        )
    grid = alt.hconcat(*columns, spacing=10).resolve_scale(color="independent")
    return grid if heading is None else grid.properties(title=alt.Title(heading, anchor="start", fontSize=12))


def special_tokens_layers(frame: pl.DataFrame) -> alt.FacetChart | alt.VConcatChart:
    """Per-layer lines of the three shares, a row of panels per task and a panel per target,
    every model of the task overlaid in its own colour (pre-trained and fine-tuned side by
    side), solid by attention weight and dashed norm-weighted; decoders' runs (a `causal`
    column) in a grid of their own below, of the first token and punctuation. `frame` is the
    `special_tokens_by_layer` query (with `causal` from run_models)."""
    grids = [
        _special_tokens_lines(part, DECODER_SHARES if causal else SHARES, DECODER_NOTE if causal else None)
        for causal, part in by_kind(frame)
    ]
    return _styled(grids[0] if len(grids) == 1 else alt.vconcat(*grids, spacing=28), view_stroke="#ddd")


def _sparse_labels(layers: pl.Series) -> dict[str, Any]:
    """Axis settings that label every 5th layer where more than 16 would crowd a 220 px panel
    (a 30-layer decoder's labels ran together); every layer is labelled up to 16."""
    return {"labelExpr": "datum.value % 5 === 0 ? datum.label : ''"} if layers.n_unique() > 16 else {}


def _special_tokens_lines(
    frame: pl.DataFrame, shares: tuple[tuple[str, str, str], ...], heading: str | None
) -> alt.FacetChart:
    """special_tokens_layers' grid for the runs of `frame`, all of one kind."""
    data = _long(
        frame,
        ["layer", "model", "task", "split", "run_id", *(["lineage"] if "lineage" in frame.columns else [])],
        shares,
    )
    short = pl.col("model").str.split("/").list.last()
    data = data.with_columns(
        model_label=pl.concat_str([short, *_lineage(data)]),
        task_label=pl.format("{} ({})", pl.col("task"), pl.col("split")),
    )
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=25))
        .encode(
            x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0, **_sparse_labels(data["layer"]))),
            y=alt.Y("value:Q", title="mean share", scale=alt.Scale(zero=True, nice=True)),
            color=alt.Color("model_label:N", title="model", legend=_line_legend()),
            strokeDash=alt.StrokeDash(
                "weighting:N",
                title="weighting",
                # The lines' point overlay makes Vega-Lite fill this legend's symbols and drop
                # their stroke colour, which leaves the dashes invisible: stroke only.
                legend=alt.Legend(
                    orient="bottom",
                    symbolType="stroke",
                    symbolStrokeColor="#333",
                    symbolFillColor="transparent",
                    symbolStrokeWidth=2,
                    symbolSize=300,
                ),
                scale=alt.Scale(domain=["attention weight", "norm-weighted"], range=[[1, 0], [5, 3]]),
            ),
            # One line per run and weighting: two runs of one model on a task stay two lines.
            detail="run_id:N",
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("measure:N", title="share"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("value:Q", title="mean", format=".3f"),
            ],
        )
        .properties(width=220, height=160)
    )
    header: dict[str, Any] = {
        "labelFontWeight": "bold",
        "labelAnchor": "start",
        "labelAlign": "left",
        "labelLimit": 320,
    }
    grid = lines.facet(
        row=alt.Row("task_label:N", title=None, header=alt.Header(labelOrient="top", labelAngle=0, **header)),
        column=alt.Column(
            "target:N", title=None, sort=list(dict.fromkeys(t for _, t, _ in shares)), header=alt.Header(**header)
        ),
        spacing={"row": 14, "column": 12},
    )
    return grid if heading is None else grid.properties(title=alt.Title(heading, anchor="start", fontSize=12))


# Token kinds of attention sinks (sink_heads), in the order of the [CLS]/[SEP] charts.
SINK_TOKENS: tuple[str, ...] = ("[CLS]", "[SEP]", "punctuation")


def attention_sinks(frame: pl.DataFrame) -> alt.FacetChart:
    """Heatmaps layer × token kind of the sink share (Gu et al. 2025's Sink at threshold eps):
    the share of the layer's heads whose mean attention to that kind exceeds eps, with their count written in the cell, one
    panel per run. `frame` is the `sink_heads` query."""
    data = fit_panels(
        frame.with_columns(
            panel=panel_label(frame),
            count=pl.format("{}/{}", pl.col("sink_heads"), pl.col("heads")),
            which_heads=pl.col("which_heads").fill_null("–"),
        ),
        3 * 56 + 20,
    )
    eps = float(cast(float, frame["eps"][0])) if frame.height else 0.3
    # A decoder's run has the kinds first token and punctuation (sink_heads): its panel gets
    # its own x scale, or it would show an empty [SEP] column, and the encoders' a first-token one.
    decoders = FIRST_TOKEN in frame["token"].to_list()
    tokens = [t for t in ("[CLS]", FIRST_TOKEN, "[SEP]", "punctuation") if t in SINK_TOKENS or decoders]
    base = alt.Chart().encode(
        x=alt.X("token:N", title=None, sort=tokens, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("layer:O", title="layer (from 0)"),
    )
    cells = base.mark_rect().encode(
        # Fixed 0 to 1, so that panels of different models compare by colour. The title in
        # words: legends draw text as it is, so the paper's Sink^ε would show its caret.
        color=alt.Color(
            "sink_share:Q",
            title=[f"sink share (ε = {eps:g}):", "the layer's heads", "that are sinks"],
            scale=alt.Scale(scheme="oranges", domain=[0, 1]),
        ),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("layer:O"),
            alt.Tooltip("token:N", title="token kind"),
            alt.Tooltip("count:N", title="sink heads"),
            alt.Tooltip("which_heads:N", title="which"),
            alt.Tooltip("max_share:Q", title="largest mean share", format=".3f"),
            alt.Tooltip("max_norm_share_of_sinks:Q", title="largest norm-weighted share of a sink", format=".3f"),
            alt.Tooltip("eps:Q", title="ε"),
        ],
    )
    counts = base.mark_text(fontSize=10).encode(
        text="count:N",
        color=alt.condition(alt.datum.sink_share > 0.6, alt.value("white"), alt.value("#111")),
    )
    step = 68 if decoders else 56  # "first token" is wider than [CLS]
    layered = _layer(cells, counts, data=data).properties(width=alt.Step(step), height=alt.Step(18))
    panels = _panels(layered, 4, 18, labelLimit=300)
    return _styled(panels.resolve_scale(x="independent") if decoders else panels, view_stroke=None)


def pair_label(frame: pl.DataFrame) -> pl.Expr:
    """'run 4 · sst2 (dev)', 'minilm → minilm-sst2' (pre-trained → fine-tuned) on two lines:
    one label per compare run."""
    base = pl.col("base").str.split("/").list.last()
    tuned = pl.col("tuned").str.split("/").list.last()
    return pl.format(
        "run {} · {} ({})" + NEWLINE + "{} → {}", pl.col("run_id"), pl.col("task"), pl.col("split"), base, tuned
    )


def finetune_change_heads(frame: pl.DataFrame) -> alt.FacetChart:
    """Heatmaps layer × head of the mean cosine between base and tuned attention maps, one
    panel per compare run (Kovaleva et al. Fig. 5). `frame` is `finetune_change_by_head`."""
    data = frame.with_columns(panel=pair_label(frame))
    cell = _cell(frame, 14)
    cells = _heatmap(
        data,
        cell,
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
    return _styled(_selectable(_panels(cells, 3, 16, labelLimit=320)), view_stroke=None)


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
        color=alt.Color("panel:N", title="comparison", legend=_line_legend(), sort=run_order(data["panel"])),
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
    return _styled(_layer(band, line).properties(width=420, height=220))


def _line_legend(**kwargs: Any) -> alt.Legend:
    """A legend of runs for line charts: multi-line labels, and opaque stroke symbols (the
    default takes the faint band's look and is nearly invisible)."""
    return alt.Legend(
        orient="bottom",
        direction="vertical",
        labelLimit=420,
        labelExpr=_SPLIT,
        symbolType="stroke",
        symbolStrokeWidth=3,
        symbolOpacity=1,
        symbolSize=300,
        **kwargs,
    )


def relations_label(frame: pl.DataFrame) -> pl.Expr:
    """'run 5 · all-MiniLM-L6-v2', 'en_ewt-ud-dev.conllu' (two lines): one label per
    relations run."""
    short = pl.col("model").str.split("/").list.last()
    return pl.concat_str(
        [pl.format("run {} · {}", pl.col("run_id"), short), pl.lit(NEWLINE), pl.col("dataset"), *_lineage(frame)]
    )


_DEP_MEASURES = (
    "best head: dependent → head",
    "best head: head → dependent",
    "best fixed offset: dependent → head",
    "best fixed offset: head → dependent",
)


def dependency_heads(frame: pl.DataFrame, relations: int = 15) -> alt.FacetChart:
    """Per relation (the `relations` most frequent of each run), the accuracy of the best head
    in each direction next to that direction's best fixed-offset baseline (Clark et al. Table
    2), one panel per run. On an encoder the two baselines coincide; on a decoder each direction
    counts only the dependencies it can see. `frame` is the `dependency_heads` query."""
    frame = frame.with_columns(panel=relations_label(frame))
    top = (
        frame.group_by("panel", "relation")
        .agg(pl.col("dependencies").max())
        .sort(["panel", "dependencies", "relation"], descending=[False, True, False])
        .group_by("panel", maintain_order=True)
        .head(relations)
    )
    frame = frame.join(top.select("panel", "relation"), on=["panel", "relation"])
    forward = pl.col("direction") == "dep_to_head"
    heads = frame.select(
        "panel",
        "relation",
        "dependencies",
        measure=pl.when(forward).then(pl.lit(_DEP_MEASURES[0])).otherwise(pl.lit(_DEP_MEASURES[1])),
        value="accuracy",
        detail=pl.format("head {}-{}", pl.col("layer"), pl.col("head")),
    )
    baseline = frame.select(
        "panel",
        "relation",
        "dependencies",
        measure=pl.when(forward).then(pl.lit(_DEP_MEASURES[2])).otherwise(pl.lit(_DEP_MEASURES[3])),
        value="baseline_accuracy",
        detail=pl.format("offset {}", pl.col("baseline_offset")),
    )
    data = pl.concat([heads, baseline])
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=70, opacity=0.85)
        .encode(
            x=alt.X("value:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y(
                "relation:N", title="relation", sort=alt.EncodingSortField("dependencies", op="max", order="descending")
            ),
            color=alt.Color(
                "measure:N",
                title=None,
                scale=alt.Scale(domain=list(_DEP_MEASURES), range=["#4c78a8", "#f58518", "#1f3b5c", "#8a4a0c"]),
                legend=alt.Legend(orient="bottom", direction="vertical"),
            ),
            shape=alt.Shape(
                "measure:N",
                scale=alt.Scale(domain=list(_DEP_MEASURES), range=["circle", "circle", "diamond", "diamond"]),
                legend=None,
            ),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("relation:N"),
                alt.Tooltip("measure:N"),
                alt.Tooltip("detail:N", title="which"),
                alt.Tooltip("value:Q", title="accuracy", format=".3f"),
                alt.Tooltip("dependencies:Q"),
            ],
        )
        .properties(width=320, height=alt.Step(16))
    )
    return _styled(_panels(points, 2, 24, labelLimit=320), view_stroke="#ddd")


def frame_heads(frame: pl.DataFrame, direction: str = "either") -> alt.FacetChart:
    """Heatmaps layer × head of the mean max attention on frame links, one panel per run
    (Kovaleva et al. §4.2). `frame` is the `frame_heads` query."""
    data = frame.filter(pl.col("direction") == direction).with_columns(panel=relations_label(frame))
    cell = _cell(frame, 14)
    cells = _heatmap(
        data,
        cell,
        color=alt.Color(
            "mean_max_attention:Q", title="mean max attention", scale=alt.Scale(scheme="viridis", domainMin=0)
        ),
        **_selected_outline({"test": "datum.percentile >= 99", "value": "#e45756"}),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("layer:O"),
            alt.Tooltip("head:O"),
            alt.Tooltip("mean_max_attention:Q", title="mean max attention", format=".3f"),
            alt.Tooltip("percentile:Q", format=".1f"),
            alt.Tooltip("rank:Q"),
            alt.Tooltip("annotations:Q"),
        ],
    )
    return _styled(_selectable(_panels(cells, 3, 16, labelLimit=320)), view_stroke=None)


def feature_attention(frame: pl.DataFrame) -> alt.FacetChart:
    """Heatmaps layer × head of the attention received by each feature (columns) relative to
    an evenly attending head, one row of panels per run. `frame` is `feature_attention`."""
    data = frame.with_columns(panel=relations_label(frame))
    order = ["noun", "verb", "pronoun", "subject", "object", "negation"]
    # At least 0 to 2, so that 1 (the midpoint) is inside the scale even when no head
    # reaches twice the even share.
    top = max(float(cast(float | None, frame["vs_uniform"].max()) or 0.0), 2.0)
    cells = _heatmap(
        data,
        _cell(frame, 13),
        # Diverging around 1, chance (a head attending evenly): white = as a uniform head,
        # orange = more, purple = less. The legend names its midpoint: the default ticks
        # (0, 2, 4, …) leave the reader to guess where white is.
        color=alt.Color(
            "vs_uniform:Q",
            title="× uniform head",
            scale=alt.Scale(scheme="purpleorange", domainMid=1, domain=[0, top]),
            legend=alt.Legend(
                values=[0, 1, math.floor(top * 10) / 10],
                labelExpr="datum.value === 1 ? '1 = uniform' : datum.label",
            ),
        ),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("feature:N"),
            alt.Tooltip("layer:O"),
            alt.Tooltip("head:O"),
            alt.Tooltip("mean_attention:Q", title="mean attention", format=".3f"),
            alt.Tooltip("uniform_attention:Q", title="uniform head", format=".3f"),
            alt.Tooltip("vs_uniform:Q", title="ratio", format=".2f"),
            alt.Tooltip("sentences:Q"),
        ],
    )
    return _styled(
        _selectable(
            cells.facet(
                row=alt.Row(
                    "panel:N",
                    title=None,
                    # Above each row, from its left edge: a header left of the axis, as wide as its
                    # longest label, would push the axis away from the cells.
                    header=alt.Header(
                        labelOrient="top",
                        labelAnchor="start",
                        labelAngle=0,
                        labelAlign="left",
                        labelFontWeight="bold",
                        labelLimit=420,
                        labelExpr=_SPLIT,
                    ),
                    sort=run_order(data["panel"]),
                ),
                column=alt.Column("feature:N", title=None, sort=order),
                spacing={"row": 18, "column": 10},
            )
        ),
        view_stroke=None,
    )


# Pattern types (Kovaleva et al. Fig. 1), in the order of their codes, with fixed colours so
# a type has the same colour in every chart.
PATTERN_TYPES: tuple[str, ...] = ("heterogeneous", "vertical", "diagonal", "vertical+diagonal", "block")
_PATTERN_COLOURS = ("#bab0ac", "#4c78a8", "#f58518", "#b279a2", "#54a24b")


def _pattern_colour() -> alt.Color:
    return alt.Color(
        "pattern:N",
        title="pattern type",
        sort=list(PATTERN_TYPES),
        scale=alt.Scale(domain=list(PATTERN_TYPES), range=list(_PATTERN_COLOURS)),
        legend=alt.Legend(orient="bottom", direction="horizontal"),
    )


def _with_pattern_order(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its run label and each type's position, so stacks keep the types' order."""
    order = {name: k for k, name in enumerate(PATTERN_TYPES)}
    return frame.with_columns(
        panel=panel_label(frame), order=pl.col("pattern").replace_strict(order, default=len(order))
    )


def pattern_frequency(frame: pl.DataFrame) -> alt.Chart:
    """One stacked bar per run: the share of its maps of each pattern type (Kovaleva et al.
    Fig. 2), the bootstrap interval over examples in the tooltip. `frame` is the
    `pattern_frequency` query."""
    data = _with_pattern_order(frame)
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y(
                "panel:N",
                title=None,
                sort=run_order(data["panel"]),
                axis=alt.Axis(labelLimit=320, labelExpr=_SPLIT, labelFontSize=11),
            ),
            x=alt.X("share:Q", title="share of maps", stack="normalize", axis=alt.Axis(format="%")),
            color=_pattern_colour(),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("pattern:N", title="type"),
                alt.Tooltip("share:Q", format=".1%"),
                alt.Tooltip("share_low:Q", title="95 % interval from", format=".1%"),
                alt.Tooltip("share_high:Q", title="to", format=".1%"),
                alt.Tooltip("maps:Q"),
                alt.Tooltip("examples:Q"),
            ],
        )
        .properties(width=440, height=alt.Step(54))
    )
    return _styled(bars, view_stroke=None)


def pattern_layers(frame: pl.DataFrame) -> alt.FacetChart:
    """Stacked bars per layer of the pattern types' shares, one panel per run. `frame` is the
    `pattern_by_layer` query."""
    layers = int(cast(int, frame["layer"].max())) + 1 if frame.height else 12
    # Each header line wrapped to its panel's width (bold 11 px: about 6.5 px a character),
    # never narrower than 160 px: a fine-tuned model's lineage line was cut at the limit.
    limit = max(22 * layers, 160)
    data = fit_panels(_with_pattern_order(frame), limit)
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("layer:O", title="layer", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("share:Q", title="share of maps", stack="normalize", axis=alt.Axis(format="%")),
            color=_pattern_colour(),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("pattern:N", title="type"),
                alt.Tooltip("share:Q", format=".1%"),
                alt.Tooltip("maps:Q"),
            ],
        )
        .properties(width=alt.Step(22), height=150)
    )
    return _styled(_panels(bars, 3, 16, labelLimit=limit), view_stroke=None)


def pooled(thumbnail: list[float], size: int = 16) -> list[list[float]]:
    """A stored square thumbnail (row-major) average-pooled to `size` × `size` cells and
    scaled to its largest cell (so every map uses the whole colour scale), to 4 decimals."""
    side = int(round(len(thumbnail) ** 0.5))
    step = max(1, side // size)
    cells = [[0.0] * (side // step) for _ in range(side // step)]
    for idx, value in enumerate(thumbnail):
        i, j = divmod(idx, side)
        if i // step < len(cells) and j // step < len(cells):
            cells[i // step][j // step] += value / (step * step)
    top = max(max(row) for row in cells) or 1.0
    return [[round(value / top, 4) for value in row] for row in cells]


def covered_tokens(tokens: list[str], side: int, cells: int, c: int) -> list[str]:
    """The tokens under cell `c` of `cells` along one axis of a `side` × `side` thumbnail of
    the map of `tokens`: ingest pools the n × n map to the thumbnail with adaptive average
    pooling (bin i covers tokens floor(i n / side) to ceil((i + 1) n / side)), and `pooled`
    sums side / cells bins into a cell."""
    n, step = len(tokens), side // cells
    return tokens[c * step * n // side : -(-(c + 1) * step * n // side)]


def token_lines(tokens: list[str], width: int = 18, lines: int = 3) -> list[str]:
    """`tokens` joined by spaces in lines of at most `width` characters (a longer token gets a
    line of its own, cut), at most `lines` of them, the last ending in … when some are left."""
    out: list[str] = []
    for token in tokens:
        token = token if len(token) <= width else token[: width - 1] + "…"
        if out and len(out[-1]) + 1 + len(token) <= width:
            out[-1] += " " + token
        elif len(out) < lines:
            out.append(token)
        else:
            out[-1] = out[-1][: width - 1] + "…"
            break
    return out


def gallery_cells(frame: pl.DataFrame, size: int = 16) -> pl.DataFrame:
    """Long rows (pattern, column, map, query, key, value) of the `pattern_gallery`
    thumbnails, pooled from 32 × 32 to `size` × `size` cells (the page stays small) and
    scaled to each map's largest cell, so that every map uses the whole colour scale;
    `column` is the map's kind and its place among the type's maps of that kind. Cells below
    0.005 are left out: they draw as the white background anyway, and most cells of a map
    are near 0, so the page stays small.

    With the example's tokens (`tokens`, kept where the whole map is: examples of at most 64 tokens, or `--map-tokens`), each cell
    names the query and key tokens it covers (`query_tokens`, `key_tokens`), and the map's
    first row carries its `caption`: a line naming run, layer, head and length, then the
    tokens, wrapped; a map is unreadable without the sentence it attends over."""
    rows: list[dict] = []
    for r in frame.iter_rows(named=True):
        cells = pooled(r["thumbnail"], size)
        side = int(round(len(r["thumbnail"]) ** 0.5))
        tokens: list[str] | None = r.get("tokens")
        margin = "" if r["margin"] is None else f" · margin {r['margin']:.3f}"
        label = (
            f"run {r['run_id']} · L{r['layer']} H{r['head']} · n={r['n_tokens']} · "
            f"V {r['vertical']:.2f} D {r['diagonal']:.2f} B {r['block']:.2f}{margin}"
        )
        if tokens:
            spans = [" ".join(covered_tokens(tokens, side, len(cells), c)) for c in range(len(cells))]
            words = token_lines(tokens)
        else:
            spans = [""] * len(cells)
            words = ["tokens not kept (over 64)" if r["n_tokens"] > 64 else "tokens not stored"]
        caption: list[str] | None = [f"run {r['run_id']} · L{r['layer']} H{r['head']} · n={r['n_tokens']}", *words]
        for i, row in enumerate(cells):
            for j, value in enumerate(row):
                if value < 0.005:
                    continue
                rows.append(
                    {
                        "pattern": r["pattern"],
                        "column": f"{r['kind']} {r['slot']}",
                        "map": label,
                        "query": i,
                        "key": j,
                        "value": value,
                        "query_tokens": spans[i],
                        "key_tokens": spans[j],
                        "caption": caption,
                    }
                )
                caption = None
    return pl.DataFrame(
        rows,
        schema={
            "pattern": pl.String,
            "column": pl.String,
            "map": pl.String,
            "query": pl.Int64,
            "key": pl.Int64,
            "value": pl.Float64,
            "query_tokens": pl.String,
            "key_tokens": pl.String,
            "caption": pl.List(pl.String),
        },
    )


GALLERY_COLUMNS = ("typical 1", "typical 2", "borderline 1", "borderline 2")


def pattern_gallery(frame: pl.DataFrame) -> alt.FacetChart:
    """Small heatmaps of stored thumbnails, a row per pattern type: its two most typical and
    two most borderline maps, each with its run, layer, head and tokens written under it and
    the tokens of each cell in its tooltip. `frame` is the `pattern_gallery` query."""
    data = gallery_cells(frame)
    cells = (
        alt.Chart()
        .mark_rect()
        .encode(
            x=alt.X("key:O", axis=None),
            y=alt.Y("query:O", axis=None),
            # White at 0, as the left-out cells below 0.005 are.
            color=alt.Color(
                "value:Q", title="weight / map's max", scale=alt.Scale(range=["#ffffff", "#000000"], domain=[0, 1])
            ),
            tooltip=[
                alt.Tooltip("pattern:N", title="type"),
                alt.Tooltip("column:N", title="shown as"),
                alt.Tooltip("map:N"),
                alt.Tooltip("query_tokens:N", title="query tokens (row)"),
                alt.Tooltip("key_tokens:N", title="key tokens (column)"),
                alt.Tooltip("value:Q", format=".2f"),
            ],
        )
    )
    # The caption under the map, in pixels from the map's top-left corner: one row per map
    # carries it (a list of lines, which Vega draws one under the other).
    captions = (
        alt.Chart()
        .transform_filter("isValid(datum.caption)")
        .mark_text(align="left", baseline="top", fontSize=9, lineHeight=11, color="#333", limit=_GALLERY_SIDE)
        .encode(text="caption:N", x=alt.value(0), y=alt.value(_GALLERY_SIDE + 4))
    )
    maps = (
        _layer(cells, captions, data=data)
        .properties(width=_GALLERY_SIDE, height=_GALLERY_SIDE)
        .facet(
            row=alt.Row(
                "pattern:N",
                title=None,
                sort=list(PATTERN_TYPES),
                header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold"),
            ),
            column=alt.Column("column:N", title=None, sort=list(GALLERY_COLUMNS), header=alt.Header(labelFontSize=11)),
            # The captions under the maps count in the rows' height (Vega-Lite lays out facets
            # by their full bounds), so the spacing is only the gap below them.
            spacing={"row": 14, "column": 8},
        )
    )
    return _styled(maps, view_stroke="#ddd")


# Side in px of a map of the gallery: 16 pooled cells of 7 px, and a caption line of about
# 20 characters under it.
_GALLERY_SIDE = 112


# Token kinds of massive activations, in the order of attnwh.ingest.measures.massive, with
# the letter a cell shows for the kind that holds most of its entries.
MASSIVE_KINDS: tuple[tuple[str, str], ...] = (
    ("[CLS]", "C"),
    ("first token", "F"),  # a decoder's, in [CLS]'s place
    ("[SEP]", "S"),
    ("punctuation", "P"),
    ("other", "O"),
)


def massive_cells(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per run, layer and dimension of the `massive_activations` query (which has one
    per token kind besides): the dimension's share of the run's examples, the entries and
    their token kinds ("[SEP] 40 · [CLS] 2", most first), the largest magnitude, the mean
    magnitude / median and the letter of the kind with most entries."""
    order = {kind: k for k, (kind, _) in enumerate(MASSIVE_KINDS)}
    letters = dict(MASSIVE_KINDS)
    keys = ["model", "task", "split", "run_id", *(["lineage"] if "lineage" in frame.columns else []), "layer", "dim"]
    ranked = frame.with_columns(kind_order=pl.col("token_kind").replace_strict(order, default=len(order))).sort(
        [*keys, "massive", "kind_order"], descending=[*(False,) * len(keys), True, False]
    )
    cells = ranked.group_by(keys, maintain_order=True).agg(
        dim_example_share=pl.col("dim_example_share").first(),
        run_examples=pl.col("run_examples").first(),
        massive=pl.col("massive").sum(),
        max_magnitude=pl.col("max_magnitude").max(),
        mean_ratio=(pl.col("mean_ratio") * pl.col("massive")).sum() / pl.col("massive").sum(),
        kinds=pl.format("{} {}", pl.col("token_kind"), pl.col("massive")).str.join(" · "),
        letter=pl.col("token_kind").first().replace_strict(letters, default="?"),
    )
    return cells.with_columns(panel=panel_label(cells))


def massive_activations(frame: pl.DataFrame) -> alt.FacetChart:
    """Heatmaps layer × hidden dimension of the share of a run's examples whose layer output
    has a massive activation in that dimension (Sun et al. 2024), one panel per statistics
    run, each with only its own dimensions that are ever massive; a letter names the token
    kind with most entries, the tooltip all of them. `frame` is `massive_activations`."""
    data = massive_cells(frame)
    base = alt.Chart().encode(
        x=alt.X("dim:O", title="hidden dimension", axis=alt.Axis(labelAngle=-90, labelFontSize=9)),
        y=alt.Y("layer:O", title="layer (from 0)", axis=alt.Axis(labelFontSize=9)),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "dim_example_share:Q",
            title="share of examples",
            scale=alt.Scale(scheme="viridis", domain=[0, 1]),
            legend=alt.Legend(format="%"),
        ),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("layer:O"),
            alt.Tooltip("dim:O", title="dimension"),
            alt.Tooltip("dim_example_share:Q", title="share of examples", format=".1%"),
            alt.Tooltip("run_examples:Q", title="examples scanned"),
            alt.Tooltip("massive:Q", title="massive entries"),
            alt.Tooltip("kinds:N", title="on token kinds"),
            alt.Tooltip("max_magnitude:Q", title="max |h|", format=".1f"),
            alt.Tooltip("mean_ratio:Q", title="mean |h| / median", format=",.0f"),
        ],
    )
    # Dark text on the bright (frequent) end of viridis, light text on the dark end.
    letters = base.mark_text(fontSize=9).encode(
        text="letter:N",
        color=alt.condition("datum.dim_example_share > 0.6", alt.value("#111"), alt.value("#fff")),
    )
    layered = _layer(cells, letters, data=data).properties(width=alt.Step(18), height=alt.Step(18))
    return _styled(_panels(layered, 3, 16, labelLimit=320).resolve_scale(x="independent"), view_stroke=None)


# One convention on the whole page: Δ = score with the head (or layer) disabled minus the
# score with nothing disabled; negative = disabling hurt.
_DELTA_TITLE = "Δ score (disabled − baseline)"
_DELTA_LINES = ["Δ score", "(disabled − baseline)"]


def ablation_label(frame: pl.DataFrame) -> pl.Expr:
    """'run 7 · minilm-sst2', 'sst2 (dev) · uniform · accuracy' and, with a `lineage` column,
    'fine-tuned on sst2 from minilm', on separate lines: one label per ablation run and metric."""
    short = pl.col("model").str.split("/").list.last()
    return pl.concat_str(
        [
            pl.format("run {} · {}", pl.col("run_id"), short),
            pl.lit(NEWLINE),
            pl.format("{} ({}) · {} · {}", pl.col("task"), pl.col("split"), pl.col("mode"), pl.col("metric")),
            *_lineage(frame),
        ]
    )


def delta_reach(frame: pl.DataFrame) -> tuple[float, bool]:
    """The half-width of the ablation heatmap's colour scale: the larger of the largest |Δ| and
    the smallest change one configuration alone could show significantly on its run's
    examples (`detect_delta_alone` of `findings_ablation`, a column of `frame` where known;
    exact McNemar after Benjamini–Hochberg), and whether the latter set it. A change that no
    single head could show significantly then never reads as full colour."""
    largest = float(cast(float | None, frame["delta"].abs().max()) or 0.0)
    known = frame["detect_delta_alone"].drop_nulls() if "detect_delta_alone" in frame.columns else pl.Series([])
    detectable = float(known.max()) if known.len() else 0.0  # type: ignore[arg-type]
    if detectable >= largest and detectable > 0:
        return detectable, True
    return largest or 1e-3, False


def _delta_colour(frame: pl.DataFrame) -> alt.Color:
    # Symmetric around 0 so that white is "no effect" in every panel; blue: disabling helped.
    # At least as wide as the smallest significant change, so that one changed prediction of
    # a hundred reads pale rather than as the strongest effect on the page.
    reach, significance = delta_reach(frame)
    full = (
        [f"full colour: ±{reach:.3g}, the least", "Δ one head alone could", "show significantly"]
        if significance
        else [f"full colour: ±{reach:.3g}, the largest |Δ|"]
    )
    return alt.Color(
        "delta:Q",
        title=[*_DELTA_LINES, *full],
        scale=alt.Scale(scheme="redblue", domain=[-reach, reach]),
        legend=alt.Legend(titleLimit=240),
    )


def ablation_heads(frame: pl.DataFrame) -> alt.FacetChart:
    """Heatmaps layer × head of the change in task score when the head is disabled, one panel
    per ablation run and metric (Kovaleva et al. Fig. 8); a dot marks a change that survives
    the Benjamini–Hochberg correction. `frame` is `ablation_effect`."""
    data = frame.with_columns(
        panel=ablation_label(frame), mark=pl.when(pl.col("significant")).then(pl.lit("●")).otherwise(pl.lit(""))
    )
    cell = _cell(frame, 16)
    base = alt.Chart().encode(
        **_HEAD_GRID,
    )
    cells = base.mark_rect().encode(
        color=_delta_colour(frame),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("layer:O"),
            alt.Tooltip("head:O"),
            alt.Tooltip("baseline:Q", format=".4f"),
            alt.Tooltip("value:Q", title="disabled", format=".4f"),
            alt.Tooltip("delta:Q", title="Δ", format="+.4f"),
            alt.Tooltip("ci_low:Q", title="95 % CI low", format="+.4f"),
            alt.Tooltip("ci_high:Q", title="95 % CI high", format="+.4f"),
            alt.Tooltip("p_value:Q", title="p", format=".3g"),
            alt.Tooltip("p_adjusted:Q", title="p adjusted (BH)", format=".3g"),
        ],
        **_selected_outline(),
    )
    dots = base.mark_text(fontSize=8, color="#111").encode(text="mark:N")
    layered = _layer(cells, dots, data=data).properties(width=alt.Step(cell), height=alt.Step(cell))
    return _styled(_selectable(_panels(layered, 2, 16, labelLimit=320)), view_stroke=None)


def _run_colour(data: pl.DataFrame) -> alt.Color:
    return alt.Color("panel:N", title=None, legend=_line_legend(), sort=run_order(data["panel"]))


def _interval_around_zero(base: alt.Chart, mark: str, line: alt.Chart) -> alt.LayerChart:
    """The 95 % interval of the delta (`mark`: rule or area), its point estimate `line` and a
    dashed rule at 0, the baseline."""
    interval = getattr(base, f"mark_{mark}")(**({"strokeWidth": 2} if mark == "rule" else {"opacity": 0.15}))
    interval = interval.encode(y=alt.Y("ci_low:Q", title=_DELTA_TITLE), y2="ci_high:Q")
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(0))
    return _layer(zero, interval, line)


# A ring in a point mark's unit square: the outer circle clockwise, the inner one the other
# way, so the default nonzero fill leaves the middle empty.
_RING = "M 1 0 A 1 1 0 1 1 -1 0 A 1 1 0 1 1 1 0 Z M 0.62 0 A 0.62 0.62 0 1 0 -0.62 0 A 0.62 0.62 0 1 0 0.62 0 Z"


LAYER_CHART_WIDTH = 1000  # px the per-layer ablation chart aims at, whatever the runs


def ablation_layers(frame: pl.DataFrame) -> alt.LayerChart:
    """The change in task score per disabled layer with its 95 % bootstrap interval, one colour
    per ablation run and metric. `frame` is `layer_ablation`."""
    data = frame.with_columns(panel=ablation_label(frame))
    # One step per (layer, run) pair: 28 px for a few runs, narrower for many, so that a
    # 12-layer model swept on several tasks stays about 1,000 px wide instead of being
    # shrunk to the page with its text.
    slots = data.select(pl.struct("layer", "panel").n_unique()).item()
    step = max(10, min(28, LAYER_CHART_WIDTH // max(slots, 1)))
    base = alt.Chart(data).encode(
        x=alt.X("layer:O", title="layer disabled", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("panel:N", sort=run_order(data["panel"])),
        color=_run_colour(data),
    )
    # One meaning of a filled dot on the whole page, as the ● of the head heatmap: filled =
    # significant (adjusted p < 0.05), a ring = not. The ring is a path (Vega-Lite draws no
    # legend for fillOpacity, so a hollow mark could not be explained in a legend).
    points = base.mark_point(filled=True, size=min(80, 3 * step), opacity=1).encode(
        y="delta:Q",
        shape=alt.Shape(
            "significant:N",
            title="adjusted p < 0.05",
            scale=alt.Scale(domain=[True, False], range=["circle", _RING]),
            legend=alt.Legend(
                labelExpr="datum.value ? 'yes: significant' : 'no'",
                symbolFillColor="#333",
                symbolStrokeColor="#333",
                symbolSize=80,
            ),
        ),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("layer:O"),
            alt.Tooltip("baseline:Q", format=".4f"),
            alt.Tooltip("value:Q", title="disabled", format=".4f"),
            alt.Tooltip("delta:Q", title="Δ", format="+.4f"),
            alt.Tooltip("p_adjusted:Q", title="p adjusted (BH)", format=".3g"),
            alt.Tooltip("significant:N", title="adjusted p < 0.05"),
        ],
    )
    return _styled(_interval_around_zero(base, "rule", points).properties(width=alt.Step(step), height=220))


def ablation_curve(frame: pl.DataFrame) -> alt.LayerChart:
    """The change in task score with the k most helpful heads disabled together, k = 1, 2, …,
    with its 95 % bootstrap band, one line per ablation run and metric; the dashed line is
    the baseline. `frame` is `ablation_combinations`.

    Only the k heads that did help alone count: the sweep ranks every head, so past
    `n_helpful` (and for a run where none helped, from k = 1) its combinations hold heads
    whose own disabling did not raise the score, which the axis title would misname."""
    curve = frame.filter(pl.col("kind") == "top_k", pl.col("k") <= pl.col("n_helpful"))
    data = curve.with_columns(panel=ablation_label(curve))
    base = alt.Chart(data).encode(
        x=alt.X(
            "k:Q",
            title="heads disabled together (the k whose own disabling helped most)",
            # A tick at each k: heads come whole, and Vega's ticks fall on halves (1.5 heads).
            axis=alt.Axis(values=sorted(set(curve["k"].to_list())), format="d"),
        ),
        color=_run_colour(data),
    )
    line = base.mark_line(point=True).encode(
        y="delta:Q",
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("k:Q"),
            alt.Tooltip("disabled:N", title="heads"),
            alt.Tooltip("value:Q", title="score", format=".4f"),
            alt.Tooltip("delta:Q", title="Δ", format="+.4f"),
            alt.Tooltip("p_value:Q", title="p (unadjusted)", format=".3g"),
        ],
    )
    return _styled(_interval_around_zero(base, "area", line).properties(width=420, height=220))


def importance_scatter(frame: pl.DataFrame, correlations: pl.DataFrame) -> alt.FacetChart:
    """Per head, gradient importance (Michel et al.) against Δ, the change in score when the
    head is disabled (the sign of the ablation heatmap: negative = disabling hurt), one panel
    per ablation run and metric, labelled with their Spearman correlation.
    `frame` is `ablation_effect`, `correlations` is `importance_vs_ablation`."""
    rho = correlations.select("run_id", "metric", "spearman")
    data = (
        frame.filter(pl.col("importance").is_not_null())
        .join(rho, on=["run_id", "metric"], how="left")
        .with_columns(
            panel=pl.concat_str(
                [
                    ablation_label(frame),
                    pl.lit(NEWLINE),
                    pl.format("Spearman {}", pl.col("spearman").round(2).cast(pl.String).fill_null("–")),
                ]
            ),
        )
    )
    points = (
        alt.Chart(data)
        .mark_circle(size=36, opacity=0.7)
        .encode(
            x=alt.X("importance:Q", title="gradient importance (mean |∂L/∂ξ|)"),
            y=alt.Y("delta:Q", title=_DELTA_TITLE),
            color=alt.Color("layer:O", title="layer", scale=alt.Scale(scheme="viridis")),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("head:O"),
                alt.Tooltip("importance:Q", format=".4g"),
                alt.Tooltip("delta:Q", title="Δ", format="+.4f"),
            ],
            **_selected_outline(),
        )
        .properties(width=300, height=220)
    )
    return _styled(_selectable(_panels(points, 2, 24, labelLimit=300)))


def sink_label(frame: pl.DataFrame) -> pl.Expr:
    """The ablation run's label (`ablation_label`) and a last line with Spearman's rho between
    sink score and Δ and its bootstrap interval: 'Spearman ρ -0.18 [-0.39, 0.05]'."""

    def number(column: str) -> pl.Expr:
        return pl.col(column).round(2).cast(pl.String).fill_null("–")

    return pl.concat_str(
        [
            ablation_label(frame),
            pl.lit(NEWLINE),
            pl.format("Spearman ρ {} [{}, {}]", number("spearman"), number("spearman_low"), number("spearman_high")),
        ]
    )


def sinks_vs_ablation(frame: pl.DataFrame) -> alt.FacetChart:
    """Per head, its sink score (the largest of its mean attention to [CLS], [SEP] and
    punctuation) against Δ, the change in score when it alone is disabled, sink heads
    highlighted, a dotted rule at eps; one panel per ablation run, titled with Spearman's rho
    and its bootstrap interval. `frame` is `sink_vs_ablation`."""
    data = frame.with_columns(
        panel=sink_label(frame),
        kind=pl.when(pl.col("sink")).then(pl.lit("sink head")).otherwise(pl.lit("other head")),
    )
    eps = float(cast(float, frame["eps"][0])) if frame.height else 0.3
    points = (
        alt.Chart()
        .mark_point(filled=True, size=40, opacity=0.8)
        .encode(
            x=alt.X("sink_score:Q", title="sink score (largest mean share: [CLS], [SEP], punctuation)"),
            y=alt.Y("delta:Q", title=_DELTA_TITLE),
            color=alt.Color(
                "kind:N",
                title=None,
                scale=alt.Scale(domain=["sink head", "other head"], range=["#e6550d", "#9e9e9e"]),
                legend=alt.Legend(orient="bottom", direction="horizontal"),
            ),
            shape=alt.Shape("sink_kind:N", title="largest share to", sort=list(SINK_TOKENS)),
            tooltip=[
                alt.Tooltip("panel:N", title="run"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("head:O"),
                alt.Tooltip("sink_score:Q", title="sink score", format=".3f"),
                alt.Tooltip("sink_kind:N", title="to"),
                alt.Tooltip("to_cls:Q", title="[CLS]", format=".3f"),
                alt.Tooltip("to_sep:Q", title="[SEP]", format=".3f"),
                alt.Tooltip("to_punct:Q", title="punctuation", format=".3f"),
                alt.Tooltip("delta:Q", title="Δ", format="+.4f"),
                alt.Tooltip("ci_low:Q", title="95 % CI low", format="+.4f"),
                alt.Tooltip("ci_high:Q", title="95 % CI high", format="+.4f"),
                alt.Tooltip("p_adjusted:Q", title="p adjusted (BH)", format=".3g"),
            ],
            **_selected_outline(),
        )
    )
    threshold = alt.Chart().mark_rule(color="#e6550d", strokeDash=[2, 3]).encode(x=alt.datum(eps))
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(0))
    layered = _layer(zero, threshold, points, data=data).properties(width=300, height=220)
    return _styled(_selectable(_panels(layered, 2, 24, labelLimit=300)))
