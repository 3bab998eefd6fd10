"""The head-roles page of a causal language model (`attnwh report results --page roles`): each
head's role scores on seeded probes (previous-token, induction and duplicate heads, Olsson et
al. 2022; retrieval heads, Wu et al. 2025), what disabling each head and each layer does to the
next-token loss on text, and which key/value groups need the whole context (DuoAttention, Xiao
et al. 2024) with the KV memory the others would free.

Every number comes from a named query, named under its table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import polars as pl

from attnwh.reports.decoder_page import decoder_runs, model_line
from attnwh.reports.markdown import f3, figure, generated, source, step_costs, table
from attnwh.reports.published import WU_RETRIEVAL_SHARE
from attnwh.reports.sections import TOP_ROLE_HEADS as TOP
from attnwh.reports.sections import TOP_ROLES, ReportContext
from attnwh.sql.restriction import choose

# The report's charts the page shows, by their element id, and the sections that draw them.
CHARTS = ("chart-head-roles", "chart-restriction-curve", "chart-restriction-needles")
CHART_SECTIONS = ("head-roles", "whole-context")
# The commands of tools/study_smollm2.sh whose cost this page shows.
STEPS = ("roles", "loss-sweep", "restriction")
# The loss budgets the page reads the restriction plan at (nats per token).
BUDGETS = (0.01, 0.05)
# The roles copied from far back, whose heads' key/value groups should keep the whole context.
COPYING = {("induction", "induction"): "induction", ("needle", "retrieval"): "retrieval"}


def mib(n: int | None) -> str:
    return "–" if n is None else f"{n / 2**20:,.0f} MiB"


def interval(row: dict, sequences: int, digits: int = 3) -> str:
    """The 95 % interval of a row's Δ; '–' over one sequence, whose resamples are all itself."""
    if sequences < 2:
        return "–"
    return f"[{row['ci_low']:+.{digits}f}, {row['ci_high']:+.{digits}f}]"


def heads_list(rows: Sequence[dict]) -> str:
    return ", ".join(f"L{r['layer']}H{r['head']}" for r in rows)


def _top(top: pl.DataFrame, probe: str, score: str) -> pl.DataFrame:
    """The top heads of one role, by rank."""
    return top.filter((pl.col("probe") == probe) & (pl.col("score") == score)).sort("run_id", "rank", "layer", "head")


def setup(ctx: ReportContext, runs: pl.DataFrame, name: str, db: Path) -> list[str]:
    lines = [f"{model_line(runs, name, db)}; heads and layers are 0-based (L18H6: layer 18, head 6)."]
    for run_id, kind, repeat, context, depths in ctx.con.execute(
        "SELECT run_id, kind, repeat_length, context_length, depths FROM role_settings ORDER BY run_id"
    ).fetchall():
        [(probes,)] = ctx.con.execute("SELECT count(*) FROM role_probes WHERE run_id = ?", [run_id]).fetchall()
        if kind == "induction":
            lines.append(
                f"Head-roles run {run_id}: {probes} induction probes, {repeat} random tokens then the same "
                f"{repeat} again."
            )
        else:
            at = ", ".join(f"{d:g}" for d in depths)
            lines.append(
                f"Head-roles run {run_id}: {probes} needle probes of {context:,} tokens cut from the text, the needle "
                f"at depths {at} of the haystack in turn, the answer teacher-forced."
            )
    return [" ".join(lines), ""]


def roles(ctx: ReportContext, figures: dict[str, str]) -> list[str]:
    findings = ctx.query("findings_roles")
    lines = [
        "## Head roles",
        "",
        "Each head's mean score over a run's probes ([definitions](../metrics.md#head-roles)): previous token, the "
        "weight on the token just before; induction, on random tokens repeated, the weight from each repeated "
        "token to the token that followed its first occurrence; duplicate token, the weight on that first "
        "occurrence itself (Olsson et al. 2022); retrieval, on needle probes, the share of the answer's tokens at "
        "which the head's largest weight falls on the needle token being copied (Wu et al. 2025). The top "
        f"{TOP} heads by each score, with the key/value group each reads:",
        "",
    ]
    if not findings.height:
        return [*lines, "No head-roles run in this warehouse.", ""]
    top = ctx.query("head_roles_top", top=TOP)
    rows = [
        (words, r["rank"], f"L{r['layer']}H{r['head']}", r["kv_group"], f3(r["value"]), r["probes"])
        for (probe, score), words in TOP_ROLES.items()
        for r in _top(top, probe, score).iter_rows(named=True)
    ]
    lines += table(("score", "rank", "head", "key/value group", "mean score", "probes"), rows)
    lines += [source("head_roles_top", "findings_roles"), ""]
    for r in findings.filter(pl.col("role") == "retrieval").iter_rows(named=True):
        share = r["above"] / r["heads"]
        lines += [
            f"Retrieval heads (run {r['run_id']}, {r['probes']} needle probes): {r['above']} of {r['heads']} heads "
            f"({100 * share:.1f} %) have a retrieval score above {r['threshold']:g}, Wu et al.'s threshold; they "
            f"found fewer than {100 * WU_RETRIEVAL_SHARE:.0f} % in every model they read, and by this score this "
            "model has "
            + ("fewer." if share < WU_RETRIEVAL_SHARE else "more.")
            + f" The highest: {heads_list(r['top'])} ({', '.join(f3(h['value']) for h in r['top'])}).",
            "",
        ]
    induction, retrieval = ({(h["layer"], h["head"]) for h in _top(top, *key).iter_rows(named=True)} for key in COPYING)
    if both := ", ".join(f"L{layer}H{head}" for layer, head in sorted(induction & retrieval)):
        lines += [
            f"Among the top {TOP} by both induction and retrieval: {both}. Both scores reward a head that "
            "attends to the token about to be copied: induction to the one that followed an earlier match, "
            "retrieval to the needle's token being reproduced.",
            "",
        ]
    return lines + figure(figures, "chart-head-roles")


def loss_sweep(ctx: ReportContext) -> list[str]:
    frame = ctx.query("loss_ablation", span="all")
    lines = ["## Disabling heads and layers: next-token loss", ""]
    if not frame.height:
        return [*lines, "No loss ablation run in this warehouse.", ""]
    for (run_id,), run in frame.group_by("run_id", maintain_order=True):
        base = run.filter(pl.col("kind") == "baseline").row(0, named=True)
        heads = run.filter(pl.col("kind") == "head")
        layers = run.filter(pl.col("kind") == "layer").sort("layer")
        significant = heads.filter(pl.col("significant"))
        raised = significant.filter(pl.col("delta") > 0).height
        lowered = significant.height - raised
        layers_significant = layers.filter(pl.col("significant"))
        lines += [
            f"Run {run_id} ({base['task']}, {base['mode']} attention in place of a disabled head's): "
            f"{base['sequences']} sequences, {int(base['tokens']):,} predicted tokens, baseline loss "
            f"{base['loss']:.3f} nats per token. Every head alone and every layer whole disabled, Δ = disabled − "
            "baseline (> 0: the loss rose), a 95 % paired bootstrap interval over sequences and a paired sign-flip "
            "permutation test, Benjamini–Hochberg across the run's heads and layers: "
            f"{significant.height} of {heads.height} heads changed the loss with q < 0.05 ({raised} raised it, "
            f"{lowered} lowered it), and {layers_significant.height} of {layers.height} layers.",
            "",
        ]
        for label, descending in (("raised the loss most", True), ("lowered it most", False)):
            chosen = heads.sort("delta", descending=descending).head(TOP)
            lines += [f"Heads whose disabling {label}:", "", *table(*_loss_rows(chosen, head=True))]
        lines += ["Whole layers disabled:", "", *table(*_loss_rows(layers, head=False))]
        lines += [source("loss_ablation"), ""]
        lines += _roles_disabled(ctx, heads)
    return lines


def _loss_rows(frame: pl.DataFrame, head: bool) -> tuple[tuple[str, ...], list[tuple]]:
    header = ("layer", *(("head",) if head else ()), "loss", "Δ", "95 % interval", "q")
    rows = [
        (
            r["layer"],
            *((r["head"],) if head else ()),
            f"{r['loss']:.3f}",
            f"{r['delta']:+.3f}",
            f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
            f"{r['q_value']:.3g}",
        )
        for r in frame.iter_rows(named=True)
    ]
    return header, rows


def _roles_disabled(ctx: ReportContext, heads: pl.DataFrame) -> list[str]:
    """What disabling the top heads of each role does to the loss on text."""
    top = ctx.query("head_roles_top", top=3)
    sentences = []
    for (probe, score), words in COPYING.items():
        chosen = top.filter((pl.col("probe") == probe) & (pl.col("score") == score))
        if not chosen.height:
            continue
        effects = chosen.join(heads.select("layer", "head", "delta", "q_value"), on=["layer", "head"])
        parts = [
            f"L{r['layer']}H{r['head']} Δ {r['delta']:+.3f} (q {r['q_value']:.2g})"
            for r in effects.sort("rank", "layer", "head").iter_rows(named=True)
        ]
        sentences.append(f"The top {words} heads, each disabled alone: {', '.join(parts)}.")
    if not sentences:
        return []
    return [" ".join(sentences), "", source("head_roles_top", "loss_ablation"), ""]


def whole_context(ctx: ReportContext, figures: dict[str, str]) -> list[str]:
    plan = ctx.query("restriction_plan")
    lines = ["## Which heads need the whole context", ""]
    if not plan.height:
        return [*lines, "No restriction run in this warehouse.", ""]
    for (run_id,), points in plan.group_by("run_id", maintain_order=True):
        points = points.sort("k")
        r = points.row(0, named=True)
        needles = r["needles"]
        needle_column = ("needle accuracy",) if needles else ()
        groups = ctx.query("restriction_groups", run=run_id)
        [(base, needle_base)] = ctx.con.execute(
            "SELECT loss, needle_accuracy FROM restriction_runs WHERE run_id = ?", [run_id]
        ).fetchall()
        lines += [
            f"Run {run_id}: each of the {groups.height} key/value groups restricted alone to the first {r['sinks']} "
            f"token{'s' if r['sinks'] != 1 else ''} and the last {r['window']} (its query heads' attention renormalised over them; "
            f"[whole context](../whole-context.md)), ranked by the change in next-token loss on {r['sequences']} "
            f"sequence{'s' if r['sequences'] != 1 else ''} of {r['context_length']:,} tokens of the text "
            f"({int(r['tokens']):,} predicted tokens; unrestricted loss {base:.3f} nats per token)"
            + (
                f" and scored on {needles} needle probe{'s' if needles != 1 else ''} of the same length "
                f"(unrestricted: {100 * needle_base:.0f} % of the answer tokens predicted greedily)"
                if needles
                else ""
            )
            + f"; then the k least harmed restricted together, each set measured with exactly that set. KV memory "
            f"at {r['kv_context']:,} tokens in {r['kv_dtype']}: the whole cache is {mib(r['kv_bytes'])}.",
            "",
            *table(
                ("k", "loss", "Δ", "95 % interval", *needle_column, "KV saved", "of the cache"),
                (
                    (
                        p["k"],
                        f"{p['loss']:.3f}",
                        f"{p['delta']:+.3f}",
                        interval(p, r["sequences"]),
                        *((f"{100 * p['needle_accuracy']:.0f} %",) if needles else ()),
                        mib(p["kv_bytes_saved"]),
                        f"{100 * p['saved_share']:.0f} %",
                    )
                    for p in points.iter_rows(named=True)
                ),
            ),
            source("restriction_plan"),
            "",
        ]
        for budget in BUDGETS:
            chosen = choose(ctx.con, budget, run_id)
            change = f"Δ {chosen.delta:+.3f}"
            if r["sequences"] > 1:
                change += f" [{chosen.ci_low:+.3f}, {chosen.ci_high:+.3f}]"
            if chosen.needle_accuracy is not None:
                change += f", needle accuracy {100 * chosen.needle_accuracy:.0f} %"
            keep = ", ".join(f"L{g['layer']}G{g['kv_group']}" for g in chosen.whole_context.iter_rows(named=True))
            lines += [
                f"For a budget of {budget:g} nats per token: k = {chosen.k} groups restricted ({change}), "
                f"{mib(chosen.kv_bytes_saved)} of {mib(chosen.kv_bytes)} saved at {chosen.kv_context:,} tokens; "
                f"{chosen.whole_context.height} groups keep the whole context"
                + (f" (layer L, key/value group G): {keep}." if keep else "."),
                "",
            ]
        lines += _role_groups(ctx, chosen.whole_context, BUDGETS[-1])
        harmed = groups.sort("rank", descending=True).head(10)
        lines += [
            "The ten groups whose own restriction harmed the loss most (layer, key/value group):",
            "",
            *table(
                ("rank", "layer", "group", "Δ", "95 % interval", "p (adjusted)", *needle_column),
                (
                    (
                        g["rank"],
                        g["layer"],
                        g["kv_group"],
                        f"{g['delta']:+.4f}",
                        interval(g, r["sequences"], 4),
                        f"{g['p_adjusted']:.3g}",
                        *((f"{100 * g['needle_accuracy']:.0f} %",) if needles else ()),
                    )
                    for g in harmed.iter_rows(named=True)
                ),
            ),
            source("restriction_groups"),
            "",
        ]
        if r["sequences"] < 6:
            lines += [
                f"With {r['sequences']} sequence{'s' if r['sequences'] != 1 else ''} no change can be significant "
                f"(a paired sign-flip p over n sequences is at least 2 / 2ⁿ; the smallest here is "
                f"{cast(float, groups['p_value'].min()):.3g}): the ranking is a measurement on this text, not a test.",
                "",
            ]
    return lines + figure(figures, "chart-restriction-curve") + figure(figures, "chart-restriction-needles")


def _role_groups(ctx: ReportContext, whole: pl.DataFrame, budget: float) -> list[str]:
    """Whether the key/value groups of the top induction and retrieval heads keep the whole
    context at `budget`: the roles that copy from far back should need it."""
    top = ctx.query("head_roles_top", top=TOP)
    keep = set(zip(whole["layer"].to_list(), whole["kv_group"].to_list()))
    sentences = []
    for (probe, score), words in COPYING.items():
        chosen = top.filter((pl.col("probe") == probe) & (pl.col("score") == score)).sort("rank", "layer", "head")
        if not chosen.height:
            continue
        marks = [
            f"L{h['layer']}H{h['head']} ({'kept whole' if (h['layer'], h['kv_group']) in keep else 'restricted'})"
            for h in chosen.iter_rows(named=True)
        ]
        sentences.append(f"the top {words} heads' groups: {', '.join(marks)}")
    if not sentences:
        return []
    return [f"At a budget of {budget:g} nats per token, " + "; ".join(sentences) + ".", ""]


def build_page(
    ctx: ReportContext,
    db: Path,
    figures: dict[str, str],
    name: str | None = None,
    time_dir: Path | None = None,
    companion: str | None = None,
) -> list[str]:
    """The page's lines: the head roles, loss sweep and restriction of the one decoder in the
    warehouse `ctx` reads; `companion` links its statistics page."""
    runs = decoder_runs(ctx)
    name = name or Path(runs["model"][0]).stem
    linked = f" Its attention sinks and a task through a prompt: [{name}]({companion})." if companion else ""
    return [
        f"# {name}: head roles and which heads need the whole context",
        "",
        *generated("roles", linked),
        *setup(ctx, runs, name, db),
        *roles(ctx, figures),
        *loss_sweep(ctx),
        *whole_context(ctx, figures),
        *step_costs(time_dir, STEPS),
    ]
