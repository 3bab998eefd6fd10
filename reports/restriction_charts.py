"""The restriction curve (docs/whole-context.md): the KV-cache memory saved when the k least
harmed key/value groups keep only their sinks and a window, against the loss increase that
costs, one line per restriction run, both ends marked; and against the needle probes'
accuracy, for the runs that read needles."""

from __future__ import annotations

import altair as alt
import polars as pl

from attnwh.reports.charts import _layer, _line_legend, _styled, run_order

GIB, MIB = 2**30, 2**20


def memory_unit(frame: pl.DataFrame) -> tuple[str, int]:
    """GiB where a run saves a GiB or more, else MiB (a small model's cache)."""
    return ("GiB", GIB) if frame.height and int(frame["kv_bytes_saved"].max()) >= GIB else ("MiB", MIB)  # type: ignore[arg-type]


def _curve(frame: pl.DataFrame, unit: str, size: int) -> tuple[pl.DataFrame, alt.Chart]:
    """The plan's points with the memory saved in `unit` (`size` bytes) and each end's label,
    and the chart both curves are drawn on (x: memory saved, colour: run)."""
    contexts = sorted(set(frame["kv_context"].to_list()))
    data = frame.select(
        "run_id",
        "k",
        "n_groups",
        "delta",
        "ci_low",
        "ci_high",
        "needle_accuracy",
        "kv_context",
        saved=pl.col("kv_bytes_saved") / size,
        share=pl.col("saved_share"),
        panel=pl.format("run {} · {}", pl.col("run_id"), pl.col("model").str.split("/").list.last()),
        end=pl.when(pl.col("k") == 0)
        .then(pl.lit("whole context everywhere"))
        .when(pl.col("k") == pl.col("n_groups"))
        .then(pl.format("all {} groups restricted", pl.col("n_groups")))
        .otherwise(None),
    )
    at = ", ".join(f"{c:,}" for c in contexts)
    base = alt.Chart(data).encode(
        # Labels kept 8 px apart (Vega drops every other one until they are), none pushed to
        # the axis's end: the last two ran together ("750800") at the default spacing.
        x=alt.X(
            "saved:Q",
            title=f"KV memory saved per sequence at {at} tokens ({unit})",
            axis=alt.Axis(labelFlush=False, labelSeparation=8, labelOverlap=True),
        ),
        color=alt.Color("panel:N", title=None, legend=_line_legend(), sort=run_order(data["panel"])),
    )
    return data, base


def _ends(base: alt.Chart, y: str) -> tuple[alt.Chart, alt.Chart]:
    """Diamonds and labels at each run's two ends: nothing restricted and every group."""
    ends = base.transform_filter("datum.end != null")
    marks = ends.mark_point(size=120, filled=True, shape="diamond").encode(y=y)
    return marks, ends.mark_text(align="left", dx=8, dy=-8, fontSize=11).encode(y=y, text="end:N")


def restriction_curve(frame: pl.DataFrame) -> alt.LayerChart:
    """x: KV memory saved per sequence at the run's --kv-context; y: Δ loss (nats per token)
    with its 95 % bootstrap interval; a point per measured k. The two ends are labelled:
    nothing restricted (k = 0) and every group restricted. `frame` is `restriction_plan`."""
    unit, size = memory_unit(frame)
    _, base = _curve(frame, unit, size)
    interval = base.mark_rule(strokeWidth=2, opacity=0.4).encode(y="ci_low:Q", y2="ci_high:Q")
    line = base.mark_line(point=True).encode(
        y=alt.Y("delta:Q", title="loss increase Δ (nats per token)"),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("k:Q", title="groups restricted"),
            alt.Tooltip("saved:Q", title=f"saved ({unit})", format=",.3f"),
            alt.Tooltip("share:Q", title="of the cache", format=".0%"),
            alt.Tooltip("delta:Q", title="Δ loss", format="+.4f"),
            alt.Tooltip("ci_low:Q", title="95 % low", format="+.4f"),
            alt.Tooltip("ci_high:Q", title="95 % high", format="+.4f"),
        ],
    )
    marks, labels = _ends(base, "delta:Q")
    zero = alt.Chart().mark_rule(color="#888", strokeDash=[4, 3]).encode(y=alt.datum(0))
    return _styled(_layer(zero, interval, line, marks, labels).properties(width=460, height=260))


def needle_curve(frame: pl.DataFrame) -> alt.LayerChart:
    """The same plan against the needle probes' accuracy: the share of their answer tokens
    the model still predicts (greedy) with exactly that set restricted, for the runs of
    `frame` (`restriction_plan`) that read needles."""
    unit, size = memory_unit(frame)
    _, base = _curve(frame.filter(pl.col("needles") > 0), unit, size)
    line = base.mark_line(point=True).encode(
        y=alt.Y("needle_accuracy:Q", title="needle accuracy (answer tokens)", axis=alt.Axis(format=".0%")),
        tooltip=[
            alt.Tooltip("panel:N", title="run"),
            alt.Tooltip("k:Q", title="groups restricted"),
            alt.Tooltip("saved:Q", title=f"saved ({unit})", format=",.3f"),
            alt.Tooltip("share:Q", title="of the cache", format=".0%"),
            alt.Tooltip("needle_accuracy:Q", title="needle accuracy", format=".1%"),
            alt.Tooltip("delta:Q", title="Δ loss on text", format="+.4f"),
        ],
    )
    marks, labels = _ends(base, "needle_accuracy:Q")
    return _styled(_layer(line, marks, labels).properties(width=460, height=220))
