"""The results page of a causal language model (`attnwh report results --page decoder`): where
its attention sinks sit (the first token by layer, the sink heads, massive activations), how
well it answers a GLUE task through its prompt, and what disabling each head and each layer
does to that score; with `--model`, the stored statistics checked against transformers.

Every number comes from a named query (named under its table) or, for the parity check, from
the model itself run again when the page is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from attnwh.errors import UsageError
from attnwh.reports.markdown import f3, figure, generated, largest, source, step_costs, stored_as, table
from attnwh.reports.published import GU_SINK_EPS as EPS
from attnwh.reports.sections import ReportContext

# The report's charts the page shows, by their element id, and the sections that draw them.
CHARTS = ("chart-special-tokens-layers", "chart-attention-sinks", "chart-ablation-heads", "chart-ablation-layers")
CHART_SECTIONS = ("special-tokens", "attention-sinks", "ablation")
PARITY_EXAMPLES = 10
PARITY_COLUMNS = ("to_cls", "to_self", "to_prev", "max_weight")
# The commands of tools/study_smollm2.sh whose cost this page shows, in the order they run.
STEPS = ("stats-prose", "stats-sst2", "sweep-sst2", "stats-sst2-prompt")


def decoder_runs(ctx: ReportContext) -> pl.DataFrame:
    """The decoder's runs (run_models joined with run_provenance): one model only."""
    kinds = ctx.query("run_models").filter(pl.col("causal"))
    models = kinds["model"].unique().to_list()
    if len(models) != 1:
        raise UsageError(
            f"a decoder's page needs the runs of one decoder; the warehouse has {len(models)}"
            + (f": {', '.join(models)}" if models else " (add some with `attnwh ingest --model DECODER`)")
        )
    provenance = ctx.query("run_provenance").select(
        "run_id", "n_examples", "mean_tokens", "max_length", "n_truncated", "seed", "source", "seconds"
    )
    prompted = [r for (r,) in ctx.con.execute("SELECT run_id FROM runs WHERE prompt IS NOT NULL").fetchall()]
    return (
        kinds.join(provenance, on="run_id")
        .sort("run_id")
        .with_columns(
            prompted=pl.col("run_id").is_in(prompted),
            # A statistics run's name on the page: its task, and whether it read the task's prompt.
            label=pl.when(pl.col("run_id").is_in(prompted))
            .then(pl.format("{} prompts", pl.col("task")))
            .otherwise(pl.col("task")),
        )
    )


def model_line(runs: pl.DataFrame, name: str, db: Path) -> str:
    """'Model: `name` (where it is stored): a llama decoder of 30 layers × 9 query heads on 3
    key/value heads (grouped-query attention), 270 heads in all'."""
    first = runs.row(0, named=True)
    return (
        f"Model: `{name}` ({stored_as(first['model'], db)}): a {first['family']} decoder of {first['num_layers']} "
        f"layers × {first['num_heads']} query heads on {first['num_key_value_heads']} key/value heads (grouped-query "
        f"attention), {first['num_layers'] * first['num_heads']} heads in all"
    )


def setup(runs: pl.DataFrame, name: str, db: Path) -> list[str]:
    read = "; ".join(
        f"{r['label']}: {r['n_examples']} examples, {r['mean_tokens']:.1f} tokens on average (at most {r['max_length']}, "
        f"{r['n_truncated']} cut)"
        for r in runs.filter(pl.col("kind") == "statistics").iter_rows(named=True)
    )
    return [f"{model_line(runs, name, db)}. Statistics runs: {read}.", ""]


def first_token(ctx: ReportContext, runs: pl.DataFrame, figures: dict[str, str]) -> list[str]:
    layers = ctx.query("special_tokens_by_layer").join(runs.select("run_id", "label"), on="run_id")
    tasks = runs["label"].to_list()
    by = {(r["label"], r["layer"]): r for r in layers.iter_rows(named=True)}
    n_layers = largest(layers["layer"]) + 1
    rows = [
        (layer, *(f"{f3(by[(t, layer)]['to_cls'])} · {f3(by[(t, layer)]['to_punct'])}" for t in tasks))
        for layer in range(n_layers)
    ]
    lines = [
        "## The first token by layer",
        "",
        "Mean share of each row's attention that goes to the first token, and to punctuation (first token · "
        "punctuation), per layer (0 = first): the mean over the run's examples, the layer's heads and every real "
        "row, row 0 included (its only key is the first token; [what the columns mean on a decoder]"
        "(../metrics.md#decoders)). " + _which_first(ctx, runs),
        "",
        *table(("layer", *tasks), rows),
        source("special_tokens_by_layer"),
        "",
    ]
    for task in tasks:
        shares = [by[(task, layer)]["to_cls"] for layer in range(n_layers)]
        top = int(np.argmax(shares))
        above = [layer for layer, s in enumerate(shares) if s > EPS]
        lines += [
            f"On {task}: the first token takes {min(shares):.3f} to {max(shares):.3f} of a layer's attention "
            f"(largest in layer {top}); {len(above)} of {n_layers} layers give it more than {EPS:g} on average "
            f"({_ranges(above)}).",
            "",
        ]
    return lines + figure(figures, "chart-special-tokens-layers")


def _which_first(ctx: ReportContext, runs: pl.DataFrame) -> str:
    """Whether one token (a BOS) heads every example of these runs, or the text's own first token."""
    firsts = ctx.con.execute(
        "SELECT DISTINCT token_ids[1] FROM run_examples WHERE list_contains(?, run_id)", [runs["run_id"].to_list()]
    ).fetchall()
    if len(firsts) == 1:
        return (
            f"Every example starts with the same token (id {firsts[0][0]}, the tokenizer's BOS): it is the first token."
        )
    return "The tokenizer adds no BOS, so the first token is each text's own first token."


def _ranges(layers: list[int]) -> str:
    """'3–9, 12–15' for a sorted list of layers ('none' when empty)."""
    spans: list[list[int]] = []
    for layer in layers:
        if spans and layer == spans[-1][-1] + 1:
            spans[-1].append(layer)
        else:
            spans.append([layer])
    return ", ".join(f"{s[0]}" if len(s) == 1 else f"{s[0]}–{s[-1]}" for s in spans) or "none"


def sinks(ctx: ReportContext, runs: pl.DataFrame, figures: dict[str, str]) -> list[str]:
    frame = ctx.query("sink_heads", eps=EPS).join(runs.select("run_id", "label"), on="run_id")
    tasks = runs["label"].to_list()
    heads = largest(frame["heads"])
    n_layers = largest(frame["layer"]) + 1
    lines = [
        "## Sink heads",
        "",
        f"Sink heads (Gu et al. 2025): heads whose mean attention to the first token (or to punctuation) exceeds "
        f"ε = {EPS:g}, per layer: how many of its {heads} heads and which.",
        "",
    ]
    rows = []
    counts: dict[tuple[str, str], int] = {}
    for layer in range(n_layers):
        cells = []
        for task in tasks:
            for token in ("first token", "punctuation"):
                r = frame.filter((pl.col("label") == task) & (pl.col("layer") == layer) & (pl.col("token") == token))
                n = int(r["sink_heads"].sum()) if r.height else 0
                counts[(task, token)] = counts.get((task, token), 0) + n
                cells.append(f"{n} ({r['which_heads'][0]})" if n else "0")
        rows.append((layer, *cells))
    lines += table(("layer", *(f"{t}: {k}" for t in tasks for k in ("first token", "punctuation"))), rows)
    lines += [source("sink_heads"), ""]
    total = n_layers * heads
    for task in tasks:
        first, punct = counts[(task, "first token")], counts[(task, "punctuation")]
        lines += [
            f"On {task}: {first} of {total} heads ({100 * first / total:.0f} %) are first-token sinks, "
            f"{punct} punctuation sinks.",
            "",
        ]
    return lines + figure(figures, "chart-attention-sinks")


def massive(ctx: ReportContext, runs: pl.DataFrame) -> list[str]:
    frame = ctx.query("massive_activations").join(runs.select("run_id", "label"), on="run_id")
    lines = [
        "## Massive activations",
        "",
        "Hidden-state entries with |h| > 100 and > 1000 × the median |h| of their layer's output (Sun et al. 2024), "
        "per run and dimension: the layers where the dimension is massive, on which token kind, in what share of "
        "the examples, and the largest magnitude.",
        "",
    ]
    if not frame.height:
        return [*lines, "None found.", "", source("massive_activations"), ""]
    dims = (
        frame.group_by("label", "dim", "token_kind")
        .agg(
            pl.col("layer").unique().sort().alias("layers"),
            pl.col("example_share").max().alias("share"),
            pl.col("max_magnitude").max().alias("largest"),
        )
        .sort("label", "largest", descending=[False, True])
    )
    rows = [
        (
            r["label"],
            r["dim"],
            r["token_kind"],
            _ranges(r["layers"]),
            f"{100 * r['share']:.0f} %",
            f"{r['largest']:,.0f}",
        )
        for r in dims.iter_rows(named=True)
    ]
    return [
        *lines,
        *table(("run", "dimension", "token", "layers", "examples (most in a layer)", "largest |h|"), rows),
        source("massive_activations"),
        "",
    ]


def prompted(ctx: ReportContext, runs: pl.DataFrame) -> tuple[list[str], pl.DataFrame]:
    """The prompted sweep's setting and baseline; returns the findings of its run(s)."""
    con = ctx.con
    # A sweep scored through the task's prompt (a loss sweep on plain text has its own page).
    sweep_runs = runs.filter((pl.col("kind") == "ablation") & pl.col("prompted"))
    findings = ctx.query("findings_ablation").filter(pl.col("run_id").is_in(sweep_runs["run_id"].to_list()))
    lines = ["## The task through a prompt", ""]
    if not findings.height:
        return [*lines, "No ablation run of this model in the warehouse.", ""], findings
    for r in findings.iter_rows(named=True):
        prompt = json.loads(con.execute("SELECT prompt FROM runs WHERE run_id = ?", [r["run_id"]]).fetchall()[0][0])
        labels = con.execute(
            "SELECT e.label_id, count(*) FROM run_examples AS x JOIN examples AS e USING (example_id) "
            "WHERE x.run_id = ? GROUP BY ALL ORDER BY 1",
            [r["run_id"]],
        ).fetchall()
        majority = max(n for _, n in labels) / sum(n for _, n in labels)
        predicted = con.execute(
            "SELECT p.prediction, count(*) FROM ablation_predictions AS p JOIN ablation_configs AS c "
            "USING (run_id, config_id) WHERE p.run_id = ? AND c.kind = 'baseline' GROUP BY ALL ORDER BY 1",
            [r["run_id"]],
        ).fetchall()
        words = prompt["label_words"]
        counts = " / ".join(f"{n} `{words[int(p)].strip()}`" for p, n in predicted)
        template = prompt["template"].replace("\n", "⏎")
        shots = f"{prompt['shots']} shots (seed {prompt['seed']})" if prompt["shots"] else "zero-shot"
        same = ("task", "template", "label_token_ids", "shots", "seed")
        read = [
            (run, n, accuracy)
            for run, text, n, accuracy in con.execute(
                "SELECT p.run_id, s.prompt, count(*), avg(p.correct::INT) FROM prompt_predictions AS p "
                "JOIN runs AS s USING (run_id) GROUP BY ALL ORDER BY 1"
            ).fetchall()
            if all(json.loads(text).get(k) == prompt.get(k) for k in same)
        ]
        also = "".join(
            f" The statistics run {run} through the same prompt read the answer in its own pass: accuracy "
            f"{accuracy:.3f} on its {n} examples (`prompt_predictions`)."
            for run, n, accuracy in read
        )
        lines += [
            f"{r['task']}: the template `{template}`, label words {', '.join(f'`{w}`' for w in words)} "
            f"(token ids {', '.join(map(str, prompt['label_token_ids']))}), {shots}; the prediction is the label "
            f"word with the larger logit at the last token ([prompts](../prompts.md)). On {r['n_examples']} dev "
            f"examples (a seeded sample): **accuracy {r['baseline']:.3f}**, the majority class {majority:.3f}; "
            f"predicted {counts}.{also}",
            "",
        ]
    return [*lines, source("findings_ablation"), ""], findings


def _change_rows(frame: pl.DataFrame, *first: str) -> list[tuple]:
    """Rows of the `first` columns, then Δ, its 95 % interval and the adjusted p."""
    return [
        (
            *(f"{h[c]:.3f}" if c == "value" else h[c] for c in first),
            f"{h['delta']:+.3f}",
            f"[{h['ci_low']:+.3f}, {h['ci_high']:+.3f}]",
            f"{h['p_adjusted']:.3g}",
        )
        for h in frame.iter_rows(named=True)
    ]


def ablation(ctx: ReportContext, findings: pl.DataFrame, figures: dict[str, str]) -> list[str]:
    if not findings.height:
        return []
    lines = [
        "## Disabling heads and layers",
        "",
        "Every head alone and every layer whole disabled (uniform attention over each row's visible keys, as "
        "Kovaleva et al. did on BERT; [ablation](../ablation.md#decoders-fine-tuned-and-prompted-classifiers)), "
        "scored on the same examples as the baseline: Δ = disabled − baseline, the exact McNemar test, "
        "Benjamini–Hochberg across the run's heads and layers.",
        "",
    ]
    for r in findings.iter_rows(named=True):
        run = r["run_id"]
        lines += [
            f"{r['task']} ({r['mode']}): {r['heads_tested']} heads and {r['layers_tested']} layers tested; "
            f"{r['heads_significant']} heads ({r['heads_raised']} raised the accuracy, {r['heads_lowered']} lowered "
            f"it) and {r['layers_significant']} layers ({r['layers_raised']} raised, {r['layers_lowered']} lowered) "
            f"changed it with adjusted p < 0.05. With {r['n_examples']} examples the smallest change that could be "
            f"significant among {r['tests']} tests is {r['detect_k']} examples (Δ {r['detect_delta']:.3f}).",
            "",
        ]
        heads = ctx.query("ablation_effect").filter(pl.col("run_id") == run)
        for label, order in (("lowered it most", False), ("raised it most", True)):
            top = heads.sort("delta", descending=order).head(5)
            lines += [
                f"Heads whose disabling {label}:",
                "",
                *table(("layer", "head", "Δ", "95 % interval", "p (adjusted)"), _change_rows(top, "layer", "head")),
            ]
        layers = ctx.query("layer_ablation").filter(pl.col("run_id") == run).sort("layer")
        lines += [
            "Whole layers disabled:",
            "",
            *table(("layer", "accuracy", "Δ", "95 % interval", "p (adjusted)"), _change_rows(layers, "layer", "value")),
            source("findings_ablation", "ablation_effect", "layer_ablation"),
            "",
        ]
        lines += together(ctx, run)
    return lines + figure(figures, "chart-ablation-heads") + figure(figures, "chart-ablation-layers")


def together(ctx: ReportContext, run: int) -> list[str]:
    """Sentences on the heads disabled together: sinks, the helpful heads, the top-k curve, and
    whether gradient importance finds the heads that matter."""
    lines = []
    sink = ctx.query("sink_vs_ablation", eps=EPS).filter(pl.col("run_id") == run)
    if sink.height:
        s = sink.row(0, named=True)
        rho = _rho(s["spearman"])
        if s["spearman_low"] is not None:
            rho += f" (95 % bootstrap interval {s['spearman_low']:.2f} to {s['spearman_high']:.2f})"
        lines.append(
            f"Sink heads (score > {EPS:g} in statistics run {s['statistics_run']}, over the sweep's "
            f"{s['examples']} examples): {s['sink_heads']} of {s['heads']}. Spearman ρ between a head's sink score "
            f"and its Δ: {rho}."
            + (
                f" The sweep's own sinks combination (the {s['sinks_disabled']} sink heads of the statistics run it "
                f"found when it ran) disabled together: Δ {s['sinks_delta']:+.3f} "
                f"[{s['sinks_ci_low']:+.3f}, {s['sinks_ci_high']:+.3f}], p {s['sinks_p_value']:.3g}."
                if s["sinks_delta"] is not None
                else ""
            )
        )
    combos = ctx.query("ablation_combinations").filter(pl.col("run_id") == run)
    helpful = combos.filter(pl.col("kind") == "helpful")
    if helpful.height:
        h = helpful.row(0, named=True)
        lines.append(
            f"The {h['n_helpful']} heads whose own disabling raised the accuracy, disabled together: "
            f"Δ {h['delta']:+.3f} [{h['ci_low']:+.3f}, {h['ci_high']:+.3f}], p {h['p_value']:.3g}."
        )
    curve = combos.filter(pl.col("kind") == "top_k").sort("k")
    if curve.height:
        lines.append(
            "The top-k curve (the k heads that helped most, together): "
            + ", ".join(f"k = {c['k']}: Δ {c['delta']:+.3f}" for c in curve.iter_rows(named=True))
            + "."
        )
    importance = ctx.query("importance_vs_ablation").filter(pl.col("run_id") == run)
    if importance.height:
        i = importance.row(0, named=True)
        lines.append(
            f"Gradient importance (Michel et al. 2019) against Δ over the {i['heads']} heads: Spearman ρ "
            f"{_rho(i['spearman'])}; {i['top10_overlap']} of the 10 most important heads are among the 10 whose "
            "disabling lowered the accuracy most."
        )
    if not lines:
        return []
    return [" ".join(lines), "", source("sink_vs_ablation", "ablation_combinations", "importance_vs_ablation"), ""]


def _rho(value: float | None) -> str:
    return "undefined (every head has the same Δ)" if value is None else f"{value:.2f}"


def parity(ctx: ReportContext, runs: pl.DataFrame, model: Path) -> list[str]:
    """The stored statistics of PARITY_EXAMPLES examples of the first statistics run against
    transformers' eager output_attentions on the token ids the run stored, recomputed here."""
    import torch
    from transformers import AutoModelForCausalLM

    run = int(runs.filter(pl.col("kind") == "statistics")["run_id"][0])
    examples = ctx.con.execute(
        "SELECT example_id, token_ids FROM run_examples WHERE run_id = ? ORDER BY example_id LIMIT ?",
        [run, PARITY_EXAMPLES],
    ).fetchall()
    kwargs = {"gguf_file": model.name} if model.suffix == ".gguf" else {}
    folder = model.parent if model.suffix == ".gguf" else model
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", **kwargs).eval()
    worst = dict.fromkeys(PARITY_COLUMNS, 0.0)
    for example_id, ids in examples:
        with torch.no_grad():
            maps = eager(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        a = torch.stack([m[0] for m in maps]).double().numpy()  # (layers, heads, n, n)
        expected = {
            "to_cls": a[..., :, 0].mean(-1),
            "to_self": np.diagonal(a, axis1=-2, axis2=-1).mean(-1),
            # A[i, i − 1], 0 on row 0, every row in the mean.
            "to_prev": np.concatenate([np.zeros(a.shape[:2] + (1,)), np.diagonal(a, -1, -2, -1)], -1).mean(-1),
            "max_weight": a.max(-1).mean(-1),
        }
        stored = ctx.con.execute(
            f"SELECT layer, head, {', '.join(PARITY_COLUMNS)} FROM head_stats "
            "WHERE run_id = ? AND example_id = ? ORDER BY layer, head",
            [run, example_id],
        ).fetchnumpy()
        if len(stored["layer"]) != a.shape[0] * a.shape[1] or a.shape[-1] != len(ids):
            raise UsageError(f"--model {model} is not the model of run {run}: its maps have another shape")
        for column in PARITY_COLUMNS:
            got = np.asarray(stored[column], float).reshape(a.shape[:2])
            worst[column] = max(worst[column], float(np.abs(got - expected[column]).max()))
    return [
        "## Parity with transformers",
        "",
        f"The stored statistics of {len(examples)} examples of run {run} against the same model loaded by "
        "transformers alone with its eager attention (`output_attentions=True`), recomputed when this page was "
        "generated from the token ids the run stored, one example at a time: the largest difference over every "
        "layer and head, per column.",
        "",
        *table(PARITY_COLUMNS, [[f"{worst[c]:.1e}" for c in PARITY_COLUMNS]]),
        "The test suite checks every column of ten sequences the same way "
        "(`tests/test_decoders.py::test_smollm2_statistics_match_eager_output_attentions`).",
        "",
    ]


def build_page(
    ctx: ReportContext,
    db: Path,
    figures: dict[str, str],
    name: str | None = None,
    time_dir: Path | None = None,
    model: Path | None = None,
    companion: str | None = None,
) -> list[str]:
    """The page's lines: the one decoder in the warehouse `ctx` reads; `companion` links its
    head-roles page."""
    runs = decoder_runs(ctx)
    name = name or Path(runs["model"][0]).stem
    stats = runs.filter(pl.col("kind") == "statistics")
    prompt_lines, findings = prompted(ctx, runs)
    linked = f" Its head roles and which heads need the whole context: [{name}]({companion})." if companion else ""
    return [
        f"# {name}: attention sinks and heads through a prompt",
        "",
        *generated("decoder", linked),
        *setup(runs, name, db),
        *(parity(ctx, stats, model) if model else []),
        *first_token(ctx, stats, figures),
        *sinks(ctx, stats, figures),
        *massive(ctx, stats),
        *prompt_lines,
        *ablation(ctx, findings, figures),
        *step_costs(time_dir, STEPS),
    ]
