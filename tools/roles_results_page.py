"""Write the head-roles page of a causal language model read by attnwh from its warehouse, so the
page can be checked and regenerated: each head's role scores on seeded probes (previous-token,
induction and duplicate heads, Olsson et al. 2022; retrieval heads, Wu et al. 2025), what
disabling each head and each layer does to the next-token loss on text, and which key/value
groups need the whole context (DuoAttention, Xiao et al. 2024) with the KV memory the others
would free.

Every number comes from a named query (the page names it under each table). Usage::

    python tools/roles_results_page.py --db smol.duckdb --name SmolLM2-135M-Instruct \\
        --time-dir . --out docs/results/smollm2-135m-roles.md

`--time-dir` is a folder of GNU `/usr/bin/time -v` outputs (`time-<what>.txt`); the cost
table shows the roles, loss-sweep and restriction steps. `--companion` links the model's
statistics page (tools/decoder_results_page.py). The charts (PNG, from the report's
own chart builders) go into a folder named after the page, beside it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import polars as pl
from decoder_results_page import costs, decoder_runs, f3
from results_page import figure, query, source, stored_as, table, write_figures

from attnwh.sql import warehouse
from attnwh.sql.restriction import choose

CHARTS = ("chart-head-roles", "chart-restriction-curve", "chart-restriction-needles")
CHART_SECTIONS = {"head-roles", "whole-context"}
# The commands of tools/study_smollm2.sh whose cost this page shows.
STEPS = ("roles", "loss-sweep", "restriction")
TOP = 5
# Wu et al. (2025): a retrieval head copies from the needle at more than 10 % of the answer's
# tokens, and fewer than 5 % of a model's heads are retrieval heads.
RETRIEVAL_THRESHOLD = 0.1
WU_SHARE = 0.05
# The loss budgets the page reads the restriction plan at (nats per token).
BUDGETS = (0.01, 0.05)
ROLE_WORDS = {
    "induction": "induction",
    "previous_token": "previous token",
    "duplicate": "duplicate token",
    "retrieval": "retrieval",
}


def mib(n: int | None) -> str:
    return "–" if n is None else f"{n / 2**20:,.0f} MiB"


def interval(row: dict, sequences: int, digits: int = 3) -> str:
    """The 95 % interval of a row's Δ; '–' over one sequence, whose resamples are all itself."""
    if sequences < 2:
        return "–"
    return f"[{row['ci_low']:+.{digits}f}, {row['ci_high']:+.{digits}f}]"


def heads_list(rows: Sequence[dict]) -> str:
    return ", ".join(f"L{r['layer']}H{r['head']}" for r in rows)


def setup(con, runs: pl.DataFrame, name: str, stored: str) -> list[str]:
    first = runs.row(0, named=True)
    lines = [
        f"Model: `{name}` ({stored}): a {first['family']} decoder of {first['num_layers']} layers × "
        f"{first['num_heads']} query heads on {first['num_key_value_heads']} key/value heads (grouped-query "
        f"attention), {first['num_layers'] * first['num_heads']} heads in all; heads and layers are 0-based "
        "(L18H6: layer 18, head 6)."
    ]
    for run_id, kind, repeat, context, depths in con.execute(
        "SELECT run_id, kind, repeat_length, context_length, depths FROM role_settings ORDER BY run_id"
    ).fetchall():
        [(probes,)] = con.execute("SELECT count(*) FROM role_probes WHERE run_id = ?", [run_id]).fetchall()
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


def roles(con, figures: dict[str, str]) -> list[str]:
    findings = query(con, "findings_roles")
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
    top = query(con, "head_roles_top", top=TOP)
    rows = []
    for (probe, score), words in ((("induction", s), w) for s, w in ROLE_WORDS.items() if s != "retrieval"):
        rows += _top_rows(top, probe, score, words)
    rows += _top_rows(top, "needle", "retrieval", "retrieval")
    lines += table(("score", "rank", "head", "key/value group", "mean score", "probes"), rows)
    lines += [source("head_roles_top", "findings_roles"), ""]
    retrieval = findings.filter(pl.col("role") == "retrieval")
    for r in retrieval.iter_rows(named=True):
        share = r["above"] / r["heads"]
        lines += [
            f"Retrieval heads (run {r['run_id']}, {r['probes']} needle probes): {r['above']} of {r['heads']} heads "
            f"({100 * share:.1f} %) have a retrieval score above {r['threshold']:g}, Wu et al.'s threshold; they "
            f"found fewer than {100 * WU_SHARE:.0f} % in every model they read, and by this score this model has "
            + ("fewer." if share < WU_SHARE else "more.")
            + f" The highest: {heads_list(r['top'])} ({', '.join(f3(h['value']) for h in r['top'])}).",
            "",
        ]
    both = _overlap(top, ("induction", "induction"), ("needle", "retrieval"))
    if both:
        lines += [
            f"Among the top {TOP} by both induction and retrieval: {both}. Both scores reward a head that "
            "attends to the token about to be copied: induction to the one that followed an earlier match, "
            "retrieval to the needle's token being reproduced.",
            "",
        ]
    return lines + figure(figures, "chart-head-roles")


def _top_rows(top: pl.DataFrame, probe: str, score: str, words: str) -> list[tuple]:
    rows = top.filter((pl.col("probe") == probe) & (pl.col("score") == score)).sort("run_id", "rank", "layer", "head")
    return [
        (words, r["rank"], f"L{r['layer']}H{r['head']}", r["kv_group"], f3(r["value"]), r["probes"])
        for r in rows.iter_rows(named=True)
    ]


def _overlap(top: pl.DataFrame, a: tuple[str, str], b: tuple[str, str]) -> str:
    def heads(probe: str, score: str) -> set[tuple[int, int]]:
        chosen = top.filter((pl.col("probe") == probe) & (pl.col("score") == score))
        return set(zip(chosen["layer"].to_list(), chosen["head"].to_list()))

    return ", ".join(f"L{layer}H{head}" for layer, head in sorted(heads(*a) & heads(*b)))


def loss_sweep(con) -> list[str]:
    frame = query(con, "loss_ablation", span="all")
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
        lines += _roles_disabled(con, heads)
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


def _roles_disabled(con, heads: pl.DataFrame) -> list[str]:
    """What disabling the top heads of each role does to the loss on text."""
    top = query(con, "head_roles_top", top=3)
    sentences = []
    for (probe, score), words in ((("induction", "induction"), "induction"), (("needle", "retrieval"), "retrieval")):
        chosen = top.filter((pl.col("probe") == probe) & (pl.col("score") == score)).sort("rank", "layer", "head")
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


def whole_context(con, figures: dict[str, str]) -> list[str]:
    plan = query(con, "restriction_plan")
    lines = ["## Which heads need the whole context", ""]
    if not plan.height:
        return [*lines, "No restriction run in this warehouse.", ""]
    for (run_id,), points in plan.group_by("run_id", maintain_order=True):
        points = points.sort("k")
        r = points.row(0, named=True)
        needles = r["needles"]
        groups = query(con, "restriction_groups", run=run_id)
        [(base, needle_base)] = con.execute(
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
                (
                    "k",
                    "loss",
                    "Δ",
                    "95 % interval",
                    *(("needle accuracy",) if needles else ()),
                    "KV saved",
                    "of the cache",
                ),
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
            chosen = choose(con, budget, run_id)
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
        lines += _role_groups(con, choose(con, BUDGETS[-1], run_id).whole_context, BUDGETS[-1])
        harmed = groups.sort("rank", descending=True).head(10)
        lines += [
            "The ten groups whose own restriction harmed the loss most (layer, key/value group):",
            "",
            *table(
                (
                    "rank",
                    "layer",
                    "group",
                    "Δ",
                    "95 % interval",
                    "p (adjusted)",
                    *(("needle accuracy",) if needles else ()),
                ),
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
        smallest = groups["p_value"].min()
        if r["sequences"] < 6:
            lines += [
                f"With {r['sequences']} sequence{'s' if r['sequences'] != 1 else ''} no change can be significant "
                f"(a paired sign-flip p over n sequences is at least 2 / 2ⁿ; the smallest here is {smallest:.3g}): "
                "the ranking is a measurement on this text, not a test.",
                "",
            ]
    return lines + figure(figures, "chart-restriction-curve") + figure(figures, "chart-restriction-needles")


def _role_groups(con, whole: pl.DataFrame, budget: float) -> list[str]:
    """Whether the key/value groups of the top induction and retrieval heads keep the whole
    context at `budget`: the roles that copy from far back should need it."""
    top = query(con, "head_roles_top", top=TOP)
    keep = set(zip(whole["layer"].to_list(), whole["kv_group"].to_list()))
    sentences = []
    for probe, score, words in (("induction", "induction", "induction"), ("needle", "retrieval", "retrieval")):
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
    db: Path, name: str | None, time_dir: Path | None, figures: dict[str, str], companion: str | None = None
) -> str:
    con = warehouse.connect(db, read_only=True)
    try:
        runs = decoder_runs(con)
        stored = runs["model"][0]
        name = name or Path(stored).stem
        parts = [
            f"# {name}: head roles and which heads need the whole context",
            "",
            "Generated by `tools/roles_results_page.py` from the model's warehouse; every table names the query it "
            "comes from. Rerun the script to regenerate the page."
            + (f" Its attention sinks and a task through a prompt: [{name}]({companion})." if companion else ""),
            "",
            *setup(con, runs, name, stored_as(stored, db)),
            *roles(con, figures),
            *loss_sweep(con),
            *whole_context(con, figures),
            *costs(time_dir, STEPS),
        ]
    finally:
        con.close()
    return "\n".join(parts).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--name", help="the model's name on the page (default: its file's or folder's name)")
    parser.add_argument("--time-dir", type=Path, help="folder of /usr/bin/time -v outputs time-<what>.txt")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--companion", help="the model's statistics page (tools/decoder_results_page.py), linked")
    parser.add_argument("--no-figures", action="store_true", help="write the page without its PNG charts")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        sys.exit(f"error: no warehouse at {args.db}")
    figures = {} if args.no_figures else write_figures(args.db, args.out, CHART_SECTIONS, CHARTS)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(build_page(args.db, args.name, args.time_dir, figures, args.companion), encoding="utf-8")
    print(f"wrote {args.out}" + (f" and {len(figures)} figures" if figures else ""))


if __name__ == "__main__":
    main()
