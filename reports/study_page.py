"""The results page of an encoder's study (`attnwh report results --page study`): `attnwh
study`, plus `attnwh finetune --from-scratch`, `attnwh finetune --epochs 0` and `attnwh
ingest relations`, set against Kovaleva et al. (2019) figure by figure.

Every number of the model's comes from a named query, named under its table; the paper's are
in :mod:`attnwh.reports.published`. The study's log (`--log`: each stage's "done in N s, peak
memory G GiB" line) and `/usr/bin/time -v` outputs of the other commands (`--time-dir`) feed
the cost table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from attnwh.errors import UsageError
from attnwh.reports.markdown import cost_table, figure, generated, mean, points, source, stored_as, table, timed
from attnwh.reports.published import (
    GLUE_TRAIN,
    KOVALEVA_EPOCHS,
    KOVALEVA_EXAMPLES,
    KOVALEVA_FRAME_HEADS,
    KOVALEVA_MEAN_GAIN,
    KOVALEVA_PATTERN_SHARES,
    KOVALEVA_TABLE1,
)
from attnwh.reports.sections import ReportContext

PAPER_TASKS = tuple(GLUE_TRAIN)
PRIMARY_METRIC = {"sst2": "accuracy", "mrpc": "f1", "rte": "accuracy", "stsb": "pearson"}
PATTERNS = tuple(KOVALEVA_PATTERN_SHARES)
# The report's charts the page shows, by their element id, and the sections that draw them.
CHARTS = (
    "chart-pattern-types",
    "chart-finetune-change-layers",
    "chart-special-tokens-layers",
    "chart-ablation-heads",
    "chart-ablation-layers",
    "chart-relations-frames",
)
CHART_SECTIONS = ("special-tokens", "pattern-types", "finetuning-change", "ablation", "relations-frames")


@dataclass(frozen=True)
class Study:
    """The runs of one study in the warehouse: the base model's name as stored, and per
    task the name of the model fine-tuned from it (not from scratch, at least one epoch)."""

    base: str
    tuned: dict[str, str]  # task -> tuned model name
    name: str  # the name the page uses for the base model
    stored: str  # how the page says where the base model is stored (never a machine's folder)


def find_study(ctx: ReportContext, name: str | None, db: Path) -> Study:
    """The base model is the one the fine-tuned (not from scratch, epochs > 0) models came from."""
    tuned = ctx.query("findings_finetune").filter(~pl.col("from_scratch") & (pl.col("epochs") > 0))
    bases = tuned["base_model"].unique().to_list()
    if len(bases) != 1:
        raise UsageError(
            f"the study page needs fine-tuning runs from one base model; {db} has {len(bases)}"
            + (f": {', '.join(map(str, bases))}" if bases else " (add them with `attnwh study`)")
        )
    base = bases[0]
    per_task = {row["task"]: row["model"] for row in tuned.unique("task", keep="last").iter_rows(named=True)}
    return Study(base, per_task, name or Path(base).name, stored_as(base, db))


def setup(ctx: ReportContext, study: Study) -> list[str]:
    runs = ctx.query("findings_finetune").filter(pl.col("base_model") == study.base)
    tuned = runs.filter(pl.col("model").is_in(list(study.tuned.values()))).unique("run_id")
    ablation = ctx.query("findings_ablation").filter(pl.col("model").is_in(list(study.tuned.values())))
    epochs = sorted(set(tuned["epochs"].to_list()))
    rates = sorted(set(tuned["learning_rate"].to_list()))
    train = ", ".join(f"{r['task']} {r['train_examples']}" for r in tuned.sort("task").iter_rows(named=True))
    examples = ", ".join(f"{task} {n}" for task, n in sorted(study_examples(ctx, study).items()))
    provenance = ctx.query("run_provenance")
    trained = provenance.filter(pl.col("run_id").is_in(tuned["run_id"].to_list()))
    batches = ", ".join(map(str, sorted(set(trained["batch_size"].to_list()))))
    train_cut = ", ".join(map(str, sorted(set(trained["max_length"].to_list()))))
    base_runs = provenance.filter((pl.col("kind") == "statistics") & (pl.col("model") == study.base))
    lengths = ", ".join(
        f"{r['task']} {r['mean_tokens']:.0f} tokens on average, {r['n_truncated']} cut"
        for r in base_runs.sort("task").iter_rows(named=True)
    )
    cut = sorted(set(base_runs["max_length"].to_list()))
    swept = ", ".join(
        f"{r['task']} {r['n_examples']}" for r in ablation.unique("run_id").sort("task").iter_rows(named=True)
    )
    return [
        f"Model: `{study.name}` ({study.stored}). Tasks: {', '.join(sorted(study.tuned))}. "
        f"Fine-tuning: a seeded sample of the train split ({train} examples), {', '.join(f'{e:g}' for e in epochs)} "
        f"epoch{'' if epochs == [1] else 's'}, peak learning rate {', '.join(f'{r:g}' for r in rates)}, batch {batches}, inputs cut at {train_cut} tokens; "
        f"scored on the whole dev split. Statistics, patterns and the compare on a seeded sample of dev "
        f"examples ({examples}; inputs cut at {', '.join(map(str, cut))} tokens: {lengths}); the ablation sweep (every head and every layer, uniform attention as in the "
        f"paper, paired tests with Benjamini–Hochberg across the run's heads and layers) on ({swept}).",
        "",
        "The paper: bert-base-uncased fine-tuned on the full train sets (3 epochs, batch 32), analyses on up to "
        f"{KOVALEVA_EXAMPLES:,} dev examples per task, seven tasks. Its numbers below are the ones it reports "
        "(Kovaleva et al. 2019, arXiv:1908.08593), in `attnwh.reports.published`.",
        "",
    ]


def scores(ctx: ReportContext, study: Study) -> dict[tuple[str, str, str], float]:
    """Our Table 1: (task, metric, pretrained | scratch | tuned) -> score, of the runs from the base model."""
    runs = ctx.query("findings_finetune").filter(pl.col("base_model") == study.base)

    def kind(row: dict) -> str:
        return "scratch" if row["from_scratch"] else "pretrained" if row["epochs"] == 0 else "tuned"

    return {
        (row["task"], row["metric"], kind(row)): row["value"]
        for row in runs.iter_rows(named=True)
        if row["metric"] is not None
    }


def gains(ours: dict[tuple[str, str, str], float], tasks: Iterable[str]) -> dict[str, float]:
    """Per task, the primary metric fine-tuned minus with the untrained head."""
    return {
        t: ours[(t, m, "tuned")] - ours[(t, m, "pretrained")]
        for t in tasks
        for m in [PRIMARY_METRIC.get(t, "accuracy")]
        if (t, m, "tuned") in ours and (t, m, "pretrained") in ours
    }


def paper_score(task: str, metric: str, which: int) -> float | None:
    """The paper's Table 1 number for a task and metric (0 pre-trained, 1 scratch, 2 tuned), in
    points; its STS-B number (metric not named) stands beside our Pearson."""
    paper = KOVALEVA_TABLE1.get(task, {})
    theirs = paper.get(metric) or (paper.get("score") if metric == "pearson" else None)
    return None if theirs is None else theirs[which]


def table1(ctx: ReportContext, study: Study) -> list[str]:
    runs = ctx.query("findings_finetune").filter(pl.col("base_model") == study.base)
    ours = scores(ctx, study)
    rows = []
    for task in sorted({t for t, _, _ in ours}):
        for metric in sorted({m for t, m, _ in ours if t == task}):
            cells = []
            for i, which in enumerate(("pretrained", "scratch", "tuned")):
                theirs = paper_score(task, metric, i)
                cells.append(
                    f"{'–' if theirs is None else f'{theirs:.1f}'} / {points(ours.get((task, metric, which)))}"
                )
            rows.append((task, metric, *cells))
    tuned = {t: ours.get((t, PRIMARY_METRIC.get(t, "accuracy"), "tuned")) for t in study.tuned}
    gained = list(gains(ours, study.tuned).values())
    lines = [
        "## Table 1 — scores without fine-tuning, from scratch, fine-tuned",
        "",
        "Each cell: the paper / ours, in points on the dev split. *Pre-trained*: the encoder with an untrained, "
        "seeded classifier head (`attnwh finetune --epochs 0`); *from scratch*: the same architecture from random "
        "weights, trained like the fine-tuned model (`--from-scratch`); *fine-tuned*: from the pre-trained weights "
        "(`attnwh study`). The paper's STS-B number (metric not named) is set beside our Pearson.",
        "",
        *table(("task", "metric", "pre-trained", "from scratch", "fine-tuned"), rows),
        source("findings_finetune"),
        "",
    ]
    if gained:
        lines += [
            "Fine-tuning raised each task's primary metric (accuracy; F1 for MRPC; Pearson for STS-B) over the "
            f"untrained head by {100 * sum(gained) / len(gained):.1f} points on average over {len(gained)} tasks (the "
            f"paper: {KOVALEVA_MEAN_GAIN} points over its seven), to "
            + ", ".join(f"{t} {points(v)}" for t, v in sorted(tuned.items()))
            + ".",
            "",
        ]
    trained = {
        r["task"]: r["train_examples"]
        for r in runs.filter(pl.col("model").is_in(list(study.tuned.values()))).iter_rows(named=True)
    }
    return lines + compared_with_paper(ours, trained)


def compared_with_paper(ours: dict[tuple[str, str, str], float], trained: dict[str, int]) -> list[str]:
    """A sentence on the fine-tuned column of Table 1 (the gap to the paper, beside the share
    of the full train set used) and one on the from-scratch column."""
    lines = []
    tuned_gaps, scratch = [], []
    for task in sorted(trained):
        metric = PRIMARY_METRIC.get(task, "accuracy")
        full = GLUE_TRAIN.get(task)
        share = f" ({trained[task]:,} of {full:,}, {100 * trained[task] / full:.1f} %)" if full else ""
        if (theirs := paper_score(task, metric, 2)) is not None and (task, metric, "tuned") in ours:
            tuned_gaps.append(f"{task} {theirs - 100 * ours[(task, metric, 'tuned')]:+.1f}{share}")
        if (theirs := paper_score(task, metric, 1)) is not None and (task, metric, "scratch") in ours:
            scratch.append(f"{task} {points(ours[(task, metric, 'scratch')])} (the paper {theirs:.1f})")
    if tuned_gaps:
        lines += [
            "Fine-tuned, the paper's score minus ours (our train sample of the full train set in brackets): "
            + ", ".join(tuned_gaps)
            + ". The paper trained on the full train sets; no published BERT-base or MPNet scores at these sample "
            "sizes are at hand, so its full-data numbers are the only reference here. The classifier reads the "
            "first token, which BERT trained on next-sentence prediction; MPNet's had no sentence-level objective, "
            "and sentence-embedding models such as all-mpnet-base-v2 mean-pool their outputs instead.",
            "",
        ]
    if scratch:
        lines += [
            "From scratch (random weights, the same train sample and schedule): "
            + ", ".join(scratch)
            + "; the paper trained from scratch on the full train sets.",
            "",
        ]
    return lines


def fig2(ctx: ReportContext, study: Study, figures: dict[str, str]) -> list[str]:
    rows = []
    ranges: dict[str, list[float]] = {p: [] for p in PATTERNS}
    special: list[float] = []  # per task: the tuned model's mean weight on [CLS], [SEP] and punctuation
    for task, model in sorted(study.tuned.items()):
        frame = ctx.query("pattern_frequency", model=model, task=task, n_boot=1000, seed=42)
        shares = {r["pattern"]: r for r in frame.iter_rows(named=True)}
        if not shares:
            continue
        for p in shares:
            ranges.setdefault(p, []).append(100 * shares[p]["share"])
        tokens = ctx.query("special_tokens_by_layer", model=model, task=task)
        if tokens.height:
            special.append(mean(tokens["to_cls"] + tokens["to_sep"] + tokens["to_punct"]))
        cells = [
            f"{100 * shares[p]['share']:.1f} [{100 * shares[p]['share_low']:.1f}, {100 * shares[p]['share_high']:.1f}]"
            if p in shares
            else "–"
            for p in PATTERNS
        ]
        rows.append((task, frame["examples"][0], *cells))
    paper = ("the paper (7 tasks)", "≤ 1,000", *(f"{lo}–{hi}" for lo, hi in KOVALEVA_PATTERN_SHARES.values()))
    return [
        "## Fig. 2 — attention pattern shares per task (fine-tuned models)",
        "",
        "Share of the (example, layer, head) maps of each type, % with a 95 % bootstrap interval over examples, by "
        "the shipped pattern classifier (its nested-CV agreement with people on all-mpnet-base-v2's maps is in "
        "[the label set's page](../pattern_labels.md)).",
        "",
        *table(("task", "examples", *PATTERNS), [*rows, paper]),
        source("pattern_frequency", "special_tokens_by_layer"),
        "",
        *pattern_sentence(ranges, special),
        *figure(figures, "chart-pattern-types"),
    ]


def pattern_sentence(ranges: dict[str, list[float]], special: list[float]) -> list[str]:
    """Where our range of each type's share over the tasks falls against the paper's."""
    outside = []
    for pattern, (lo, hi) in KOVALEVA_PATTERN_SHARES.items():
        ours = ranges.get(pattern)
        if ours and (min(ours) > hi or max(ours) < lo):
            outside.append(
                f"{pattern} {min(ours):.0f}–{max(ours):.0f} % ({'above' if min(ours) > hi else 'below'} the paper's {lo}–{hi} %)"
            )
    inside = [p for p in KOVALEVA_PATTERN_SHARES if ranges.get(p) and not any(o.startswith(f"{p} ") for o in outside)]
    if not outside:
        return ["Every type's share falls within or across the paper's range.", ""] if inside else []
    return [
        "Outside the paper's ranges: "
        + "; ".join(outside)
        + (f"; within or across them: {', '.join(inside)}" if inside else "")
        + ". "
        + (
            f"Two likely causes: the model (these fine-tuned models put {100 * min(special):.0f}–"
            f"{100 * max(special):.0f} % of their attention weight on [CLS], [SEP] and punctuation, mean over layers "
            "and heads, the columns vertical maps are made of) and the labeller (the paper's shares come from its "
            "CNN trained on its own hand labels of BERT's maps, never released; ours from attnwh's classifier)."
            if special
            else ""
        ),
        "",
    ]


def fig5(ctx: ReportContext, study: Study, figures: dict[str, str]) -> list[str]:
    frame = ctx.query("finetune_change_by_layer", base=study.base)
    frame = frame.filter(pl.col("tuned").is_in(list(study.tuned.values())))
    if not frame.height:
        return ["## Fig. 5 — attention change per layer", "", "No compare run.", ""]
    layers = sorted(frame["layer"].unique().to_list())
    tasks = sorted(frame["task"].unique().to_list())
    cosine = {(r["task"], r["layer"]): r["mean_cosine"] for r in frame.iter_rows(named=True)}
    rows = [(layer, *(f"{cosine[(t, layer)]:.3f}" for t in tasks)) for layer in layers]
    lowest = {t: sorted(layers, key=lambda layer: cosine[(t, layer)])[:2] for t in tasks}
    last_two = set(layers[-2:])
    agree = [t for t in tasks if set(lowest[t]) == last_two]
    return [
        "## Fig. 5 — how much each layer's attention changed through fine-tuning",
        "",
        "Mean cosine between the pre-trained and the fine-tuned model's map of the same example and head, per "
        "layer (0 = first), over the compare run's examples; maps cropped to the real tokens (the paper's code "
        "flattened maps padded to a fixed length, which counts the padding as agreement).",
        "",
        *table(("layer", *tasks), rows),
        source("finetune_change_by_layer"),
        "",
        "The paper: the last two layers change most on every task but QQP. Here the two most changed layers are "
        + "; ".join(f"{t}: {', '.join(str(layer) for layer in sorted(lowest[t]))}" for t in tasks)
        + f" — the last two ({', '.join(str(layer) for layer in sorted(last_two))}) on {len(agree)} of {len(tasks)} "
        f"tasks; the last layer alone is the most changed on {sum(lowest[t][0] == layers[-1] for t in tasks)} of {len(tasks)}.",
        "",
        *change_sentence([t for t in tasks if t not in agree], layers, cosine, gains(scores(ctx, study), study.tuned)),
        *figure(figures, "chart-finetune-change-layers"),
    ]


def change_sentence(
    tasks: Sequence[str], layers: Sequence[int], cosine: dict[tuple[str, int], float], gained: dict[str, float]
) -> list[str]:
    """For the tasks whose two most changed layers are not the last two: how far the last two
    layers' cosines are from the layers that outranked them, beside the task's fine-tuning gain."""
    if not tasks:
        return []
    parts = []
    for t in tasks:
        ranked = sorted(layers, key=lambda layer: cosine[(t, layer)])
        outranked = [f"{layer} at {cosine[(t, layer)]:.3f}" for layer in ranked[:2] if layer not in layers[-2:]]
        missed = [f"{layer} at {cosine[(t, layer)]:.3f}" for layer in layers[-2:] if layer not in ranked[:2]]
        gain = f" (fine-tuning gained {100 * gained[t]:.1f} points)" if t in gained else ""
        parts.append(f"{t}{gain}: layer {', '.join(missed)} against layer {', '.join(outranked)}")
    mean_gain = f" (mean gain over the tasks: {100 * sum(gained.values()) / len(gained):.1f})" if gained else ""
    return [
        "Where they are not, by how much the last two layers were outranked: " + "; ".join(parts) + mean_gain + ".",
        "",
    ]


def fig6(ctx: ReportContext, study: Study, figures: dict[str, str]) -> list[str]:
    base = ctx.query("special_tokens_by_layer", model=study.base)
    columns = ("to_cls", "to_sep", "to_punct", "norm_to_cls", "norm_to_sep", "norm_to_punct")
    if not base.height:
        return []
    per_layer = base.group_by("layer").agg(pl.col(c).mean() for c in columns).sort("layer")
    rows = [(r["layer"], *(f"{r[c]:.3f}" for c in columns)) for r in per_layer.iter_rows(named=True)]
    layers = per_layer["layer"].to_list()
    half = len(layers) // 2
    first, second = per_layer.head(half), per_layer.tail(len(layers) - half)
    by_task = base.group_by("task").agg(pl.col("to_sep").mean()).sort("task")
    tuned_rows = []
    for task, model in sorted(study.tuned.items()):
        tuned = ctx.query("special_tokens_by_layer", model=model, task=task)
        pre = base.filter(pl.col("task") == task)
        if tuned.height and pre.height:
            tuned_rows.append(
                (task, *(f"{mean(pre[c]):.3f} → {mean(tuned[c]):.3f}" for c in ("to_cls", "to_sep", "to_punct")))
            )
    return [
        "## Figs. 6–7 — attention to [CLS], [SEP] and punctuation per layer",
        "",
        f"The pre-trained model, mean over the {len(study.tuned)} tasks' examples and the layer's heads: the share "
        "of attention "
        "weight on the first token ([CLS]; `<s>` in MPNet and RoBERTa), on the separators (summed over them; the paper takes the "
        "larger of a pair's two) and on punctuation, and the same shares of the heads' output when each weight is "
        "scaled by the norm of its transformed value vector (`norm_*`, Kobayashi et al. 2020).",
        "",
        *table(("layer", *columns), rows),
        source("special_tokens_by_layer"),
        "",
        f"The paper: earlier layers attend more to [CLS], later ones to [SEP]. Here layers "
        f"{layers[0]}–{layers[half - 1]} give [CLS] {mean(first['to_cls']):.3f} and [SEP] "
        f"{mean(first['to_sep']):.3f} on average, layers {layers[half]}–{layers[-1]} [CLS] "
        f"{mean(second['to_cls']):.3f} and [SEP] {mean(second['to_sep']):.3f}; by value norm the separators keep "
        f"{100 * mean(per_layer['norm_to_sep']) / max(mean(per_layer['to_sep']), 1e-12):.0f} % of their weight share. "
        "The paper also found more weight on [SEP] for SST-2, whose inputs have one separator: [SEP] share per task "
        + ", ".join(f"{r['task']} {r['to_sep']:.3f}" for r in by_task.iter_rows(named=True))
        + ".",
        "",
        "What fine-tuning did to these shares (pre-trained → fine-tuned, mean over all layers):",
        "",
        *table(("task", "to_cls", "to_sep", "to_punct"), tuned_rows),
        "Fig. 7's other half, which token the final layer's [CLS] row attends to most, is not stored per row in "
        "the warehouse and is left out.",
        "",
        *figure(figures, "chart-special-tokens-layers"),
    ]


def figs8_9(ctx: ReportContext, study: Study, figures: dict[str, str]) -> list[str]:
    models = list(study.tuned.values())
    summary = ctx.query("ablation_summary", mode="uniform").filter(pl.col("model").is_in(models))
    findings = ctx.query("findings_ablation").filter(pl.col("model").is_in(models))
    layers = ctx.query("layer_ablation", mode="uniform").filter(pl.col("model").is_in(models))
    heads = ctx.query("ablation_effect", mode="uniform").filter(pl.col("model").is_in(models))
    tests = ", ".join(str(n) for n in sorted(set(findings["tests"].to_list())))
    rows = []
    for r in summary.sort("task", "metric").iter_rows(named=True):
        f = findings.filter((pl.col("run_id") == r["run_id"]) & (pl.col("metric") == r["metric"])).row(0, named=True)
        of_run = (pl.col("run_id") == r["run_id"]) & (pl.col("metric") == r["metric"])
        run_layers = layers.filter(of_run)
        run_heads = heads.filter(of_run)
        best_layer = "none" if r["best_layer"] is None else f"{r['best_layer']}: {100 * r['best_layer_delta']:+.1f}"
        rows.append(
            (
                r["task"],
                r["metric"],
                points(r["baseline"]),
                f"{r['n_helpful']} of {run_heads.height}",
                f"{100 * r['best_head_delta']:+.1f}" + ("" if r["best_head"] is None else f" ({r['best_head_name']})"),
                f"{100 * mean(run_heads['delta']):+.2f}",
                f"{f['heads_raised']} / {f['heads_lowered']}",
                f"{run_layers.filter(pl.col('delta') > 0).height} of {run_layers.height}",
                best_layer,
                f"{f['layers_raised']} / {f['layers_lowered']}",
                "–" if f["detect_delta_alone"] is None else points(f["detect_delta_alone"]),
            )
        )
    header = (
        "task",
        "metric",
        "baseline",
        "heads raising",
        "best head Δ",
        "mean head Δ",
        "heads sig. ↑ / ↓",
        "layers raising",
        "best layer Δ",
        "layers sig. ↑ / ↓",
        "smallest Δ alone",
    )
    missing = sorted(set(study.tuned) - set(summary["task"].to_list()))
    return [
        "## Figs. 8–9 — disabling one head, or one whole layer",
        "",
        "Each head (and each layer, all its heads at once) of the fine-tuned model made uniform over the real "
        "tokens, scored on the sweep's examples. Δ in points (disabled − baseline; > 0: disabling helped); *raising*: "
        "Δ > 0 before any test; *sig. ↑ / ↓*: adjusted p < 0.05 after Benjamini–Hochberg over the run's "
        f"{tests} configurations (exact McNemar for accuracy, permutation for F1 and correlations); *smallest Δ alone*: the "
        "least change of accuracy that one configuration could show significantly on this sample. Layers and heads "
        "are 0-based (the paper's layer 1 is layer 0).",
        "",
        *table(header, rows),
        source("ablation_summary", "ablation_effect", "layer_ablation", "findings_ablation"),
        "",
        *([f"No complete sweep in the warehouse for: {', '.join(missing)}.", ""] if missing else []),
        "The paper: on every task some head's disabling raised the score, by +0.1 (STS-B) to +1.2 (MRPC) points, "
        "a random head on average helped on MRPC and RTE, and disabling the first layer raised RTE by +3.2 points; "
        "it ran no significance test.",
        "",
        *ablation_sentence(summary, findings, heads, layers),
        *figure(figures, "chart-ablation-heads"),
        *figure(figures, "chart-ablation-layers"),
    ]


def ablation_sentence(
    summary: pl.DataFrame, findings: pl.DataFrame, heads: pl.DataFrame, layers: pl.DataFrame
) -> list[str]:
    """The paper's three ablation findings, each against ours on the primary metric of every swept task."""
    primary = summary.filter(pl.col("metric") == pl.col("task").replace_strict(PRIMARY_METRIC, default="accuracy"))
    if not primary.height:
        return []
    best, means, first, survive = [], [], [], []
    for r in primary.sort("task").iter_rows(named=True):
        of_run = (pl.col("run_id") == r["run_id"]) & (pl.col("metric") == r["metric"])
        best.append(f"{r['task']} {100 * r['best_head_delta']:+.1f}")
        means.append(f"{r['task']} {100 * mean(heads.filter(of_run)['delta']):+.2f}")
        layer0 = layers.filter(of_run & (pl.col("layer") == 0))
        if layer0.height:
            first.append(f"{r['task']} {100 * layer0['delta'][0]:+.1f}")
        f = findings.filter(of_run).row(0, named=True)
        survive.append(f"{r['task']} {f['heads_raised']}")
    raised = sum(1 for r in primary.iter_rows(named=True) if r["best_head_delta"] > 0)
    return [
        f"Ours, on each task's primary metric: some head's disabling raised the score on {raised} of "
        f"{primary.height} tasks (best: {', '.join(best)} points), and the raises that survive the correction are "
        f"{', '.join(survive)} heads; the mean over heads is {', '.join(means)}; disabling layer 0 changed the score "
        f"by {', '.join(first) or '–'}. On accuracy one configuration alone needs the change in the *smallest Δ "
        "alone* column to survive the correction at this sample size, so single raises of a point or two, the "
        "paper's included, can be chance.",
        "",
    ]


def relations(ctx: ReportContext, study: Study, figures: dict[str, str]) -> list[str]:
    lines = ["## FrameNet and dependency heads", ""]
    frames = ctx.query("frame_heads", model=study.base).filter(pl.col("direction") == "either")
    if frames.height:
        top = frames.sort("rank").head(5)
        models = list(study.tuned.values())
        effect = ctx.query("ablation_effect", mode="uniform").filter(pl.col("model").is_in(models))
        primary = pl.col("metric") == pl.col("task").replace_strict(PRIMARY_METRIC, default="accuracy")
        rows = []
        for r in top.iter_rows(named=True):
            deltas = effect.filter((pl.col("layer") == r["layer"]) & (pl.col("head") == r["head"]) & primary)
            disabled = ", ".join(
                f"{d['task']} {100 * d['delta']:+.1f}{'*' if d['significant'] else ''}"
                for d in deltas.sort("task").iter_rows(named=True)
            )
            rows.append(
                (
                    r["rank"],
                    f"{r['layer']}-{r['head']}",
                    f"{r['mean_max_attention']:.3f}",
                    f"{r['percentile']:.1f}",
                    r["annotations"],
                    disabled or "–",
                )
            )
        lines += [
            "Per head of the pre-trained model, the largest word-level attention weight on an annotation's "
            "target–frame-element links (either direction), averaged over the FrameNet 1.7 dev annotations that "
            "pass the paper's filters; the five best heads, and what disabling each did to the fine-tuned models "
            "(Δ in points of the primary metric; * adjusted p < 0.05).",
            "",
            *table(("rank", "head", "mean max attention", "percentile", "annotations", "Δ when disabled"), rows),
            source("frame_heads", "ablation_effect"),
            "",
            f"The paper: two heads of 144 stood out, at {KOVALEVA_FRAME_HEADS[0]} and {KOVALEVA_FRAME_HEADS[1]} "
            "(above the 99th percentile), and disabling them did not hurt any task.",
            "",
            *frame_sentence(top, ctx.query("frame_coverage", model=study.base)),
            *figure(figures, "chart-relations-frames"),
        ]
    deps = ctx.query("dependency_heads", model=study.base)
    if deps.height:
        deps = deps.sort("dependencies", descending=True).head(10)
        lines += [
            "Dependency relations (Clark et al. 2019) on UD English EWT dev: per relation and direction, the head "
            "whose most-attended word is most often the relation's other end, beside that direction's best fixed offset "
            "(the other end's position from the attending word). The ten "
            "most frequent relation–direction pairs:",
            "",
            *table(
                ("relation", "direction", "head", "accuracy", "best offset", "offset accuracy", "pairs"),
                (
                    (
                        r["relation"],
                        r["direction"],
                        f"{r['layer']}-{r['head']}",
                        f"{r['accuracy']:.3f}",
                        r["baseline_offset"],
                        f"{r['baseline_accuracy']:.3f}",
                        r["dependencies"],
                    )
                    for r in deps.iter_rows(named=True)
                ),
            ),
            source("dependency_heads"),
            "",
        ]
    return lines


def frame_sentence(top: pl.DataFrame, coverage: pl.DataFrame) -> list[str]:
    """Our best frame heads against the paper's two, with the sample they rest on."""
    if not top.height:
        return []
    best = top.row(0, named=True)
    above = top.filter(pl.col("mean_max_attention") > max(KOVALEVA_FRAME_HEADS)).height
    sample = ""
    if coverage.height:
        c = coverage.row(0, named=True)
        sample = (
            f" They rest on {c['measured']} of the {c['annotations_read']:,} annotations read ({c['long_sentence']:,} "
            f"dropped for sentences over {c['max_sentence_words']} words)."
        )
    return [
        f"Ours: the best head, {best['layer']}-{best['head']}, averages {best['mean_max_attention']:.3f}, and "
        f"{above} of the top five exceed the paper's higher head.{sample}",
        "",
    ]


# A stage of the study's log: its header, one line per task, and its "done in N s" line. Skipped
# stages (everything already there) cost nothing and are left out.
STAGE_BLOCK = re.compile(
    r"^stage \d+/\d+: (?P<stage>\S+) .*?^  (?P=stage) (?P<outcome>done|skipped) in (?P<seconds>[\d.]+) s, "
    r"peak memory (?P<gib>[\d.]+) GiB",
    re.M | re.S,
)
TASK_LINE = re.compile(r"^  (\S+)(?: · \S+)?: (.+)$", re.M)
NOTHING_DONE = ("already complete", "kept")


def stage_costs(text: str, tasks: Iterable[str]) -> list[tuple[str, float, float]]:
    """(stage with the tasks it did, seconds, GiB) of each stage the log says was done."""
    rows = []
    for block in STAGE_BLOCK.finditer(text):
        if block["outcome"] != "done":
            continue
        did = [
            m[1]
            for m in TASK_LINE.finditer(block[0])
            if m[1] in tasks and not any(m[2].endswith(n) for n in NOTHING_DONE)
        ]
        label = block["stage"] + (f" ({', '.join(dict.fromkeys(did))})" if did else "")
        rows.append((label, float(block["seconds"]), float(block["gib"])))
    return rows


def costs(ctx: ReportContext, study: Study, logs: Sequence[Path], time_dir: Path | None, note: str | None) -> list[str]:
    rows: list[tuple[str, float, float]] = []  # (what, seconds, GiB)
    for log in logs:
        rows += stage_costs(log.read_text(encoding="utf-8"), study.tuned)
    for path in sorted(time_dir.glob("time-*.txt")) if time_dir else []:
        cost = timed(path)
        # `attnwh study` itself is costed stage by stage from its log.
        if cost and not (cost[2] and cost[2].split()[1:2] == ["study"]):
            rows.append((path.stem.removeprefix("time-"), cost[0], cost[1]))
    if not rows:
        return []
    runs = ctx.query("findings_finetune").filter(pl.col("model").is_in(list(study.tuned.values()))).unique("run_id")
    per_example = {
        r["task"]: r["train_seconds"] / (r["train_examples"] * r["epochs"])
        for r in ctx.query("finetune_runs")
        .filter(pl.col("run_id").is_in(runs["run_id"].to_list()))
        .iter_rows(named=True)
    }
    # Model seconds per example of each analysis, per task (runs.seconds: the model's time,
    # summed over resumed sessions): statistics of both models, compare, sweep.
    provenance = ctx.query("run_provenance").filter(
        pl.col("kind").is_in(["statistics", "compare", "ablation"])
        & pl.col("task").is_in(list(study.tuned))
        & (pl.col("status") == "complete")
    )
    per_run = (
        provenance.group_by("kind", "task")
        .agg((pl.col("seconds").sum() / pl.col("n_examples").sum()).alias("per_example"))
        .sort("task")
    )
    rate = {(r["kind"], r["task"]): r["per_example"] for r in per_run.iter_rows(named=True)}
    lines = [
        "## What it costs",
        "",
        "Wall time and peak resident memory of each stage on this machine (2 CPU cores, no GPU), from the study's "
        "log and `/usr/bin/time -v` of the other commands." + (f" {note}" if note else ""),
        "",
        *cost_table("stage", rows),
        "Model time per example and task (the runs' own clocks; statistics: one run, the mean of the pre-trained and the tuned model's "
        "runs; fine-tuning: per train example and epoch):",
        "",
        *table(
            ("task", "fine-tuning", "statistics", "compare", "ablation sweep"),
            (
                (
                    task,
                    f"{per_example[task]:.3f} s" if task in per_example else "–",
                    *(
                        f"{rate[(k, task)]:.3f} s" if (k, task) in rate else "–"
                        for k in ("statistics", "compare", "ablation")
                    ),
                )
                for task in sorted(study.tuned)
            ),
        ),
        source("run_provenance", "finetune_runs"),
        "",
    ]
    if per_example:
        pair_rate = [per_example[t] for t in ("mrpc", "rte", "stsb") if t in per_example]
        mean_pair = sum(pair_rate) / len(pair_rate) if pair_rate else max(per_example.values())
        finetune_full = sum(GLUE_TRAIN[t] * KOVALEVA_EPOCHS * per_example.get(t, mean_pair) for t in PAPER_TASKS)
        # Statistics run twice per task (the pre-trained and the tuned model).
        analysis = {
            k: sum(v for (kind, _), v in rate.items() if kind == k) / max(1, sum(kind == k for kind, _ in rate))
            for k in ("statistics", "compare", "ablation")
        }
        rest = (
            (2 * analysis["statistics"] + analysis["compare"] + analysis["ablation"])
            * KOVALEVA_EXAMPLES
            * len(PAPER_TASKS)
        )
        lines += [
            "At these rates — QNLI, QQP and MNLI fine-tuned at the mean rate of the pair tasks, and every task "
            "analysed at the mean rate of the tasks measured here — the paper's setting (seven tasks fine-tuned 3 epochs on their "
            f"full train sets, {KOVALEVA_EXAMPLES:,} dev examples each for the statistics, the compare and the sweep) "
            f"would take about {finetune_full / 86400:.0f} days of fine-tuning and {rest / 3600:.1f} hours of analysis "
            "on this CPU, assuming time grows linearly with examples and the other tasks' inputs are as long as "
            "these.",
            "",
        ]
    return lines


def study_examples(ctx: ReportContext, study: Study) -> dict[str, int]:
    """Dev examples analysed per task (the statistics runs of the base model)."""
    stats = ctx.query("special_tokens_by_layer", model=study.base).group_by("task").agg(pl.col("examples").max())
    return {r["task"]: r["examples"] for r in stats.iter_rows(named=True)}


def build_page(
    ctx: ReportContext,
    db: Path,
    figures: dict[str, str],
    name: str | None = None,
    logs: Sequence[Path] = (),
    time_dir: Path | None = None,
    cost_note: str | None = None,
) -> list[str]:
    """The page's lines: the study in the warehouse `ctx` reads, against the paper."""
    study = find_study(ctx, name, db)
    return [
        f"# {study.name} against Kovaleva et al. (2019)",
        "",
        *generated("study"),
        *setup(ctx, study),
        *table1(ctx, study),
        *fig2(ctx, study, figures),
        *fig5(ctx, study, figures),
        *fig6(ctx, study, figures),
        *figs8_9(ctx, study, figures),
        *relations(ctx, study, figures),
        *costs(ctx, study, logs, time_dir, cost_note),
    ]
