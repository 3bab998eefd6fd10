"""Charts of several models side by side (query models_side_by_side): each measure against
relative depth, a line per model and run, with the legend as the model selector; and each
model's key/value groups as strips across its depth."""

from __future__ import annotations

from typing import cast

import altair as alt
import polars as pl

from attnwh.reports.charts import _styled

# The measures of models_side_by_side in the order the charts show them, with their labels.
MEASURES: dict[str, str] = {
    "first_token": "first-token share",
    "sink_share": "sink heads (share > ε)",
    "massive": "massive activations (share of examples)",
    "induction_max": "strongest induction head",
    "previous_token_max": "strongest previous-token head",
    "retrieval_share": "retrieval heads (score > 0.1)",
    "kept_whole": "KV groups kept whole",
}
# Measures that have a value per key/value group (massive activations are read per layer).
GROUP_MEASURES = ("first_token", "sink_share", "induction_max", "retrieval_share", "kept_whole")
# The name of the model selector's parameter (a legend-bound selection on `model`).
MODEL_SELECTOR = "model_selector"
_PANEL_WIDTH = 210


def short_name(model: pl.Expr) -> pl.Expr:
    """A model's name without its folder: the last part of a path or hub name, a GGUF file's
    without `.gguf`."""
    return model.str.strip_chars_end("/").str.split("/").list.last().str.strip_suffix(".gguf")


def labelled(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (models_side_by_side) with the chart columns: `name` (the model's short name),
    `shape` ('30 layers · 9 heads on 3 KV'), `run` ('run 4 · prose'), `measure_label` and
    `depth` (the middle of the unit's relative depth)."""
    return frame.with_columns(
        name=short_name(pl.col("model")),
        shape=pl.format(
            "{} layers · {} heads on {} KV", pl.col("num_layers"), pl.col("num_heads"), pl.col("num_key_value_heads")
        ),
        run=pl.format("run {} · {}", pl.col("run_id"), pl.col("task")),
        measure_label=pl.col("measure").replace_strict(MEASURES, default=pl.col("measure")),
        depth=(pl.col("depth_from") + pl.col("depth_to")) / 2,
    )


def whole_models(frame: pl.DataFrame) -> tuple[list[str], list[dict]]:
    """The measures present and one row per model of models_side_by_side with bins = 1 (each
    model whole): `name`, `model`, `shape` (its layers, and query heads on KV heads) and, per
    measure, one cell line per run ('0.123 (run 4 · prose)'; '–' where the model has none)."""
    data = labelled(frame)
    measures = [m for m in MEASURES if m in set(data["measure"].to_list())]
    rows = []
    for (model,), part in data.sort("model").group_by("model", maintain_order=True):
        first = part.row(0, named=True)
        cells = {}
        for measure in measures:
            runs = part.filter(pl.col("measure") == measure).sort("run_id")
            cells[measure] = [f"{r['value']:.3f} ({r['run']})" for r in runs.iter_rows(named=True)] or ["–"]
        shape = [f"{first['num_layers']} layers", f"{first['num_heads']} heads on {first['num_key_value_heads']} KV"]
        rows.append({"name": first["name"], "model": model, "shape": shape, "cells": cells})
    return measures, rows


def by_depth(frame: pl.DataFrame) -> alt.FacetChart:
    """One panel per measure, its value against relative depth (layer / layers, each layer at
    the middle of its interval), a line per model and run coloured by model. Clicking a model
    in the legend shows it alone; shift-click adds others; a click on the empty legend space
    shows every model again. `frame` is models_side_by_side with by = 'layer'."""
    data = labelled(frame)
    names = sorted(data["name"].unique().to_list())
    order = [label for key, label in MEASURES.items() if key in set(data["measure"].to_list())]
    selector = alt.selection_point(name=MODEL_SELECTOR, fields=["name"], bind="legend")
    chart = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=18), strokeWidth=1.6)
        .encode(
            x=alt.X("depth:Q", title="relative depth (layer / layers)", scale=alt.Scale(domain=[0, 1])),
            # Every measure is a share or a score between 0 and 1: one scale, comparable panels.
            y=alt.Y("value:Q", title=None, scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("name:N", title="model (click to select)", sort=names, legend=alt.Legend(orient="top")),
            detail="run:N",
            opacity=alt.condition(selector, alt.value(0.95), alt.value(0.07)),
            tooltip=[
                alt.Tooltip("name:N", title="model"),
                alt.Tooltip("shape:N", title="shape"),
                alt.Tooltip("run:N"),
                alt.Tooltip("measure_label:N", title="measure"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("depth_from:Q", title="depth from", format=".3f"),
                alt.Tooltip("value:Q", format=".3f"),
                alt.Tooltip("units:Q", title="over (heads, examples × layers or groups)"),
            ],
        )
        .add_params(selector)
        .properties(width=_PANEL_WIDTH, height=130)
    )
    faceted = chart.facet(
        facet=alt.Facet("measure_label:N", title=None, sort=order, header=alt.Header(labelFontSize=11)),
        columns=3,
    ).resolve_axis(x="independent")  # each panel draws its own depth axis, not only the last row
    return cast(alt.FacetChart, _styled(faceted))


def by_group(frame: pl.DataFrame) -> alt.VConcatChart:
    """Per measure, each model's key/value groups as strips across its relative depth: a row
    per model and group, a cell per layer spanning [layer, layer + 1) / layers, so models of
    different depth and grouping line up. `frame` is models_side_by_side with by = 'group'; a
    model with several runs for a measure shows its latest."""
    data = labelled(frame.filter(pl.col("measure").is_in(GROUP_MEASURES)))
    latest = data.group_by("model", "measure").agg(pl.col("run_id").max())
    data = data.join(latest, on=["model", "measure", "run_id"]).with_columns(
        strip=pl.format("{} · G{}", pl.col("name"), pl.col("kv_group"))
    )
    strips = data.select("name", "kv_group", "strip").unique().sort("name", "kv_group")["strip"].to_list()
    rows = []
    for key, label in MEASURES.items():
        part = data.filter(pl.col("measure") == key)
        if not part.height:
            continue
        rows.append(
            alt.Chart(part)
            .mark_rect(stroke="white", strokeWidth=0.5)
            .encode(
                x=alt.X("depth_from:Q", title="relative depth (layer / layers)", scale=alt.Scale(domain=[0, 1])),
                x2="depth_to:Q",
                y=alt.Y("strip:N", title=None, sort=strips, axis=alt.Axis(labelLimit=220)),
                color=alt.Color(
                    "value:Q",
                    title="value",
                    scale=alt.Scale(scheme="viridis", domain=[0, 1]),
                    legend=alt.Legend(orient="right", gradientLength=120),
                ),
                tooltip=[
                    alt.Tooltip("name:N", title="model"),
                    alt.Tooltip("shape:N", title="shape"),
                    alt.Tooltip("run:N"),
                    alt.Tooltip("layer:O"),
                    alt.Tooltip("kv_group:O", title="KV group"),
                    alt.Tooltip("value:Q", format=".3f"),
                    alt.Tooltip("units:Q", title="over"),
                ],
            )
            .properties(width=2 * _PANEL_WIDTH, height=alt.Step(11), title=alt.Title(label, fontSize=11))
        )
    chart = alt.vconcat(*rows, spacing=14)  # one colour scale: every measure lies between 0 and 1
    return _styled(chart)
