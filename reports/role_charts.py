"""Charts of decoder head roles (docs/metrics.md#head-roles): a layer × head heatmap of each
role score, one row of heatmaps per head-roles run."""

from __future__ import annotations

from typing import cast

import altair as alt
import polars as pl

from attnwh.reports.charts import (
    _HEAD_GRID,
    _cell,
    _grid_width,
    _selectable,
    _selected_outline,
    _styled,
    run_order,
    wrapped,
)

# The role scores of head_roles, in the order the heatmaps show them, with their labels.
ROLE_SCORES: tuple[tuple[str, str], ...] = (
    ("previous_token", "previous token"),
    ("induction", "induction"),
    ("duplicate", "duplicate token"),
    ("retrieval", "retrieval"),
    ("sink", "sink (first token)"),
    ("local_mass", "local mass"),
)
# Wu et al. (2025) call a head with a retrieval score above 0.1 a retrieval head.
RETRIEVAL_THRESHOLD = 0.1


def role_run_label(frame: pl.DataFrame) -> pl.Expr:
    """'run 4 · SmolLM2-135M', 'induction probes (10)': a head-roles run's label, from the
    `head_roles` query's model, run_id, probe and probes columns."""
    short = pl.col("model").str.split("/").list.last()
    return pl.format("run {} · {}\n{} probes ({})", pl.col("run_id"), short, pl.col("probe"), pl.col("probes"))


def role_cells(frame: pl.DataFrame) -> pl.DataFrame:
    """`head_roles` rows as one row per run, layer, head and score it defines (a NULL mean,
    a score the run's probe kind does not define, has no row), with the run's `panel` label
    and the `score` label; `value` is the mean over the run's probes, `rank` the head's."""
    parts = []
    for column, label in ROLE_SCORES:
        parts.append(
            frame.filter(pl.col(column).is_not_null()).select(
                "run_id",
                "layer",
                "head",
                "kv_group",
                "probes",
                panel=role_run_label(frame),
                score=pl.lit(label),
                value=pl.col(column).cast(pl.Float64),
                rank=pl.col(f"{column}_rank").cast(pl.Int64),
            )
        )
    return pl.concat(parts) if parts else frame.clear()


def head_roles(frame: pl.DataFrame) -> alt.VConcatChart:
    """Heatmaps layer × head of each role score, a row per head-roles run with a heatmap per
    score its probes define (induction: previous token, induction, duplicate token, sink,
    local mass; needle: previous token, retrieval, sink, local mass), each with its own colour
    scale from 0 to its largest mean (retrieval's at least to twice the threshold); retrieval heads (mean above RETRIEVAL_THRESHOLD) are
    outlined in red. `frame` is the `head_roles` query."""
    cells = role_cells(frame)
    cell = _cell(frame, 13)
    width = _grid_width(frame, cell)
    order = {label: k for k, (_, label) in enumerate(ROLE_SCORES)}
    rows = []
    for panel in run_order(cells["panel"].unique().to_list()):
        run = cells.filter(pl.col("panel") == panel)
        scores = sorted(run["score"].unique().to_list(), key=order.__getitem__)
        columns = []
        for k, score in enumerate(scores):
            data = run.filter(pl.col("score") == score)
            columns.append(
                alt.Chart(data)
                .mark_rect()
                .encode(
                    x=_HEAD_GRID["x"],
                    y=_HEAD_GRID["y"] if k == 0 else alt.Y("layer:O", axis=None),
                    color=alt.Color(
                        "value:Q",
                        title="mean score",
                        # Retrieval's scale reaches at least twice the threshold, so that a
                        # head far below it is never drawn in the brightest colour.
                        scale=alt.Scale(scheme="viridis", domainMin=0)
                        if score != "retrieval"
                        else alt.Scale(
                            scheme="viridis",
                            domain=[0, max(float(cast(float, data["value"].max())), 2 * RETRIEVAL_THRESHOLD)],
                        ),
                        legend=alt.Legend(
                            orient="bottom",
                            direction="horizontal",
                            gradientLength=max(width - 20, 60),
                            titleFontSize=10,
                        ),
                    ),
                    tooltip=[
                        alt.Tooltip("panel:N", title="run"),
                        alt.Tooltip("score:N"),
                        alt.Tooltip("layer:O"),
                        alt.Tooltip("head:O"),
                        alt.Tooltip("kv_group:O", title="KV group"),
                        alt.Tooltip("value:Q", title="mean", format=".3f"),
                        alt.Tooltip("rank:Q"),
                        alt.Tooltip("probes:Q"),
                    ],
                    **_selected_outline(
                        {
                            "test": f"datum.score === 'retrieval' && datum.value > {RETRIEVAL_THRESHOLD}",
                            "value": "#e45756",
                        }
                    ),
                )
                .properties(
                    width=alt.Step(cell),
                    height=alt.Step(cell),
                    title=alt.Title(score, fontSize=11, fontWeight="normal", anchor="middle"),
                )
            )
        # The run's label over its row, from the left edge, wrapped to a panel's width.
        label = wrapped(panel, max(width * 2 // 13, 24)).split("\n")
        row = alt.hconcat(*columns, spacing=10).resolve_scale(color="independent")
        rows.append(row.properties(title=alt.Title(label, anchor="start", fontSize=12)))
    chart = alt.vconcat(*rows, spacing=28).resolve_scale(color="independent")
    return cast(alt.VConcatChart, _styled(_selectable(chart), view_stroke=None))
