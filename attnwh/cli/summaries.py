"""The tables the commands print on stdout when they finish.

Relations results are read back from the warehouse with the named queries (the same numbers
`attnwh query dependency_heads | feature_attention | frame_heads -p run=N` shows), so the best
heads are chosen once, in SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from attnwh.cli.output import results_console


def describe(encoder: Any) -> str:
    """The model line a command prints on stderr before it starts."""
    return (
        f"[bold]{encoder.name}[/] ({encoder.family}, {encoder.num_layers} layers × {encoder.num_heads} heads) "
        f"on {encoder.device}"
    )


def print_runs(summaries: Sequence[Any], db: Path, seconds: float, rows_name: str = "head-statistics") -> None:
    """One line per run of `attnwh ingest` / `ingest compare` (`RunSummary`), then the total."""
    # Runs read through a prompt (`ingest --prompt`) also say how often the prompt's answer was right.
    prompted = any(getattr(s, "accuracy", None) is not None for s in summaries)
    columns = ["task", "run", "outcome", "examples", "written", "truncated", "rows", "ex/s"]
    table = Table(*columns, *(["prompt accuracy"] if prompted else []), box=None)
    for s in summaries:
        rate = f"{s.n_written / s.seconds:.1f}" if s.seconds > 0 else "–"
        accuracy = getattr(s, "accuracy", None)
        cells = [
            s.task,
            str(s.run_id),
            s.outcome,
            str(s.n_examples),
            str(s.n_written),
            str(s.n_truncated),
            f"{s.rows_written:,}",
            rate,
        ]
        table.add_row(*cells, *([f"{accuracy:.3f}" if accuracy is not None else "–"] if prompted else []))
    out = results_console()
    out.print(table)
    out.print(
        f"{sum(s.rows_written for s in summaries):,} {rows_name} rows written in {seconds:.1f} s → {db.resolve()}",
        soft_wrap=True,
    )


def print_shards(summaries: Sequence[Any], seconds: float) -> None:
    """One line per run of a static shard (`ShardSummary`), then how to merge."""
    table = Table("task", "kind", "run key", "shard", "units", "written", "examples (all shards)", box=None)
    for s in summaries:
        index, count = s.shard
        table.add_row(
            s.task,
            s.kind,
            s.run_key[:12],
            f"{index}/{count} (index {index - 1})",  # both conventions: --shard from 1, --shard-index from 0
            str(s.n_units),
            str(s.n_written),
            str(s.n_examples),
        )
    out = results_console()
    out.print(table)
    folder = summaries[0].folder.parent.resolve() if summaries else "the shard folder"
    out.print(
        f"{sum(s.n_written for s in summaries)} parts written in {seconds:.1f} s → {folder}; "
        f"once every shard is done: attnwh merge {folder}",
        soft_wrap=True,
    )


def print_merge(summaries: Sequence[Any], db: Path, seconds: float) -> None:
    """One line per run `attnwh merge` stored (`MergeSummary`), then what is left to do."""
    table = Table("run", "kind", "task", "parts", "examples", "stored", "status", box=None)
    for s in summaries:
        table.add_row(str(s.run_id), s.kind, s.task, str(s.parts), str(s.n_examples), str(s.n_done), s.status)
    out = results_console()
    out.print(table)
    # What finishing a whole run does, for the kinds whose finish needs the model.
    finishes = {
        "ablation": "sweep whole; finish it (significance, combinations, importance)",
        "restriction": "ranking whole; finish it (the plan and the tests)",
        "massive_ablation": "losses whole; finish it (the tests)",
        "streaming": "every sequence measured; finish it (the tests)",
    }
    for s in summaries:
        if s.kind not in finishes and s.status == "partial":
            out.print(f"run {s.run_id}: {s.n_examples - s.n_done} examples still missing; merge the other shards")
        elif s.status == "partial":
            if s.finish_command:
                out.print(f"run {s.run_id}: {finishes[s.kind]} with:")
                out.print(f"  {s.finish_command}", highlight=False, soft_wrap=True)
            else:
                out.print(
                    f"run {s.run_id}: {s.n_examples - s.n_done} examples not yet computed; merge the other shards"
                )
    out.print(f"{sum(s.parts for s in summaries)} parts merged in {seconds:.1f} s → {db.resolve()}", soft_wrap=True)


def print_relations(summary: Any, db: Path) -> None:
    """The stored results of one `attnwh ingest relations` run (`RelationsSummary`), then its line."""
    from attnwh.sql import warehouse

    out = results_console()
    con = warehouse.connect(db, read_only=True)
    try:
        if summary.task == "frames":
            _frame_tables(out, con, summary.run_id)
        else:
            n_relations = _dependency_tables(out, con, summary.run_id)
    finally:
        con.close()
    r = summary.result
    if r is None:
        out.print(f"{summary.task} run {summary.run_id}: already complete (--replace redoes it)")
    elif summary.task == "frames":
        out.print(
            f"frames run {summary.run_id} {summary.outcome}: {r.n_annotations} annotations after the filters "
            f"({r.n_skipped} not measurable), in {r.seconds:.1f} s"
        )
    else:
        rate = f"{(r.n_sentences - r.n_skipped) / r.seconds:.1f} sent/s" if r.seconds > 0 else ""
        out.print(
            f"run {summary.run_id} {summary.outcome}: {r.n_sentences} sentences ({r.n_skipped} skipped as too long), "
            f"{sum(r.counts.total.values())} dependencies of {n_relations} relations, {rate}, in {r.seconds:.1f} s → {db.resolve()}",
            soft_wrap=True,
        )


def _rows(con: Any, name: str, run_id: int) -> list[dict[str, Any]]:
    from attnwh.sql.queries import get_query, run_query

    return run_query(con, get_query(name), {"run": str(run_id)}).to_pylist()


def _frame_tables(out: Console, con: Any, run_id: int) -> None:
    from attnwh.ingest.measures.frames import DIRECTIONS

    rows = _rows(con, "frame_heads", run_id)
    table = Table("direction", "rank", "layer-head", "mean max attention", "percentile", box=None)
    for direction in DIRECTIONS:
        for row in (r for r in rows if r["direction"] == direction and r["rank"] <= 3):
            table.add_row(
                direction if row["rank"] == 1 else "",
                str(row["rank"]),
                f"{row['layer']}-{row['head']}",
                f"{row['mean_max_attention']:.3f}",
                f"{row['percentile']:.1f}",
            )
    out.print(table)


def _dependency_tables(out: Console, con: Any, run_id: int) -> int:
    """Print the best head per relation and direction and the feature words' heads; returns
    the number of relations."""
    from attnwh.ingest.measures.features import FEATURES

    best: dict[str, dict[str, dict[str, Any]]] = {}  # relation → direction → row, most frequent first
    for row in _rows(con, "dependency_heads", run_id):
        best.setdefault(row["relation"], {})[row["direction"]] = row
    # Per direction: the dependencies it saw (all of them on an encoder; on a decoder those
    # whose target comes first, and a direction that saw none has no row: "-").
    table = Table("relation", "direction", "pairs", "best head", "acc", "baseline", "acc", box=None)
    for relation, by_direction in best.items():
        for direction, label in (("dep_to_head", "dep→head"), ("head_to_dep", "head→dep")):
            found = by_direction.get(direction)
            name = relation if direction == "dep_to_head" else ""
            if found is None:
                table.add_row(name, label, "0", "-", "-", "-", "-")
                continue
            table.add_row(
                name,
                label,
                str(found["dependencies"]),
                f"{found['layer']}-{found['head']}",
                f"{found['accuracy']:.3f}",
                f"{found['baseline_offset']:+d}",
                f"{found['baseline_accuracy']:.3f}",
            )
    out.print(table)

    features: dict[str, list[dict[str, Any]]] = {}
    for row in _rows(con, "feature_attention", run_id):
        features.setdefault(row["feature"], []).append(row)
    if features:
        table = Table("feature", "sentences", "words", "best head", "attention", "uniform", "layer means", box=None)
        for feature in (f for f in FEATURES if f in features):
            heads = features[feature]
            top = next(r for r in heads if r["rank"] == 1)
            by_layer: dict[int, list[float]] = {}
            for r in heads:
                by_layer.setdefault(r["layer"], []).append(r["mean_attention"])
            layer_means = " ".join(f"{sum(v) / len(v):.2f}" for _, v in sorted(by_layer.items()))
            table.add_row(
                feature,
                str(top["sentences"]),
                str(top["words"]),
                f"{top['layer']}-{top['head']}",
                f"{top['mean_attention']:.3f}",
                f"{top['uniform_attention']:.3f}",
                layer_means,
            )
        out.print(table)
    return len(best)


def print_loss_ablation(summaries: Sequence[Any], db: Path, seconds: float) -> None:
    """One line per run of `attnwh ingest ablation` scored by next-token loss (`LossSummary`):
    the baseline loss, and the head and layer whose disabling raised it most."""

    def effect(name: str, delta: float, p_adjusted: float | None) -> str:
        return f"{name} {delta:+.4f} (q {p_adjusted:.2g})" if p_adjusted is not None else f"{name} {delta:+.4f}"

    table = Table("text · mode", "run", "sequences", "tokens", "loss", "spans", "worst head", "worst layer",
                  "signif.", box=None)  # fmt: skip
    for s in summaries:
        head, layer = s.worst_head, s.worst_layer
        table.add_row(
            f"{s.task} · {s.mode}",
            f"{s.run_id} {s.outcome}",
            str(s.n_sequences),
            str(s.n_tokens),
            f"{s.baseline:.4f}",
            ", ".join(f"{name} {loss:.3f}" for name, loss in s.spans.items()) or "–",
            "–" if head is None else effect(f"{head[0]}-{head[1]}", head[2], head[3]),
            "–" if layer is None else effect(str(layer[0]), layer[1], layer[2]),
            str(s.n_significant),
        )
    out = results_console()
    out.print(table)
    _print_sets(out, summaries)
    out.print(
        "loss: mean next-token loss per token (nats) with nothing disabled; Δ: with it disabled minus baseline "
        "(> 0: the loss rose); q: Benjamini–Hochberg over the run's heads and layers; signif.: q < 0.05. "
        f"Per configuration and span: named query loss_ablation. Done in {seconds:.1f} s → {db.resolve()}",
        highlight=False,
        soft_wrap=True,
    )


def _print_sets(out: Any, summaries: Sequence[Any]) -> None:
    """The head sets of each loss run: the span's accuracy and Δ loss, with its unadjusted p."""
    runs = [s for s in summaries if getattr(s, "sets", ())]
    if not runs:
        return
    table = Table("run · set", "span", "accuracy", "Δ loss", "p", box=None)
    for s in runs:
        accuracy = s.baseline_accuracy
        table.add_row(f"{s.run_id} baseline", s.set_span, "–" if accuracy is None else f"{accuracy:.3f}", "", "")
        for label, delta, p_value, accuracy in s.sets:
            shown = "–" if accuracy is None else f"{accuracy:.3f}"
            table.add_row(f"{s.run_id} {label}", s.set_span, shown, f"{delta:+.4f}", f"{p_value:.2g}")
    out.print(table)
    out.print("Heads disabled together; per probe, with intervals: named query head_set_effect.", highlight=False)


def print_ablation(summaries: Sequence[Any], db: Path, seconds: float) -> None:
    """One line per run of `attnwh ingest ablation` (`AblationSummary`): baseline, best head and layer."""

    def effect(name: str, delta: float, p_adjusted: float | None) -> str:
        return f"{name} {delta:+.4f} (p adj {p_adjusted:.2g})" if p_adjusted is not None else f"{name} {delta:+.4f}"

    table = Table(
        "task · mode",
        "run",
        "baseline",
        "best head",
        "best layer",
        "helpful (signif.)",
        "all helpful",
        "sink heads",
        box=None,
    )
    for s in summaries:
        head, layer = s.best_head, s.best_layer
        table.add_row(
            f"{s.task} · {s.mode}",
            f"{s.run_id} {s.outcome}",
            f"{s.metric} {s.baseline:.4f}",
            "none helped" if head is None else effect(f"{head[0]}-{head[1]}", head[2], head[3]),
            "none helped" if layer is None else effect(str(layer[0]), layer[1], layer[2]),
            f"{s.n_helpful} ({s.n_significant})",
            "–" if s.helpful_delta is None else f"{s.helpful_delta:+.4f}",
            _sinks_cell(s.sink_heads, s.sinks_delta, s.sinks_p_value),
        )
    out = results_console()
    out.print(table)
    for s in summaries:
        if s.sinks_note:
            out.print(f"{s.task} · {s.mode}: {s.sinks_note}", highlight=False, soft_wrap=True)
    out.print(
        f"Δ: score with it disabled minus baseline; signif.: adjusted p < 0.05 (Benjamini–Hochberg over the "
        f"run's heads and layers); sink heads: mean attention to [CLS], [SEP] (a decoder's first token) or punctuation > 0.3, disabled "
        f"together (Δ, unadjusted p). Done in {seconds:.1f} s → {db.resolve()}",
        highlight=False,
        soft_wrap=True,
    )


def _sinks_cell(n: int | None, delta: float | None, p_value: float | None) -> str:
    """'6: -0.0312 (p 0.041)', '0', or '–' without the statistics to find them."""
    if n is None:
        return "–"
    if delta is None:
        return str(n)
    return f"{n}: {delta:+.4f}" + ("" if p_value is None else f" (p {p_value:.2g})")


def print_study(runner: Any, seconds: float) -> None:
    """Per task of `attnwh study`, a block of plain sentences: the tuned score, the layer whose
    attention changed most, the head whose disabling helped most, and the tuned model's sink
    heads disabled together. Blocks rather than a table: the table's seven columns wrapped to
    eleven lines per task at 80 columns."""
    out = results_console()
    for s in runner.summary():
        out.print(f"[bold]{s.task}[/]", highlight=False)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(width=len("most helpful head") + 2, style="dim")
        grid.add_column(overflow="fold")
        for label, text in study_lines(s):
            grid.add_row(label, text)
        out.print(grid)
    out.print(f"report: {runner.options.report.resolve()}", highlight=False, soft_wrap=True)
    out.print(f"warehouse: {runner.options.db.resolve()}", highlight=False, soft_wrap=True)
    out.print(f"models: {runner.options.models_dir.resolve()}", highlight=False, soft_wrap=True)
    out.print(f"study done in {seconds:.1f} s", highlight=False)


def study_lines(s: Any) -> list[tuple[str, str]]:
    """A `TaskSummary` as (label, sentence) pairs."""
    from attnwh.study import is_significant

    def verdict(p: float | None) -> str:
        return "significant" if is_significant(p) else "not significant"

    def on(n: int | None) -> str:
        return "" if n is None else f" on {n} examples"

    lines = []
    if s.score is None:
        lines.append(("fine-tuned", "no score"))
    else:
        lines.append(("fine-tuned", f"{s.metric} {s.score:.4f}{on(s.score_examples)}"))
    if s.changed_layer is None:
        lines.append(("most changed layer", "no comparison"))
    else:
        layer, cosine = s.changed_layer
        lines.append(("most changed layer", f"layer {layer}: mean cosine {cosine:.3f} to the pre-trained maps"))
    mode = f"{s.mode} disabling{on(s.ablation_examples)}" if s.mode else "disabling"
    if s.helpful_head is not None:
        l, h, delta, p = s.helpful_head
        adjusted = "" if p is None else f", adjusted p {p:.2g}, {verdict(p)}"
        lines.append(("most helpful head", f"head {l}-{h}: {s.metric} {delta:+.4f} ({mode}){adjusted}"))
    elif s.mode is not None:
        lines.append(("most helpful head", f"none helped: disabling no single head raised {s.metric} ({mode})"))
    else:
        lines.append(("most helpful head", "no ablation sweep"))
    if s.sinks is not None:
        n, delta, p_value = s.sinks
        # One test chosen from the attention statistics, not from the sweep: no correction.
        tested = "" if p_value is None else f", p {p_value:.2g}, {verdict(p_value)}"
        heads = "1 sink head" if n == 1 else f"{n} sink heads"
        lines.append(("sink heads", f"{heads} disabled together: {s.metric} {delta:+.4f}{tested}"))
    elif s.sinks_note:
        lines.append(("sink heads", s.sinks_note))
    return lines
