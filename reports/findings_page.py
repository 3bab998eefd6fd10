"""The findings page (`attnwh report results --page findings`): published findings of attention
research measured by attnwh on several models of one warehouse, side by side, each beside the
paper's number, model and setting, with an interval over the unit that varies (the probe or
the sequence) and a sentence on whether attnwh agrees.

Findings: where attention sinks emerge (Gu et al. 2025), eviction breaking streaming
(StreamingLLM, Xiao et al. 2023), retrieval heads and what disabling them does (Wu et al.
2025), induction heads and the in-context learning score (Olsson et al. 2022), massive
activations and what zero and mean do to them (Sun et al. 2024), and the KV memory a
restriction to sinks and a window saves at a fixed loss budget (DuoAttention, Xiao et al. 2024).
Every number comes from a named query, named under its table; the intervals resample the
stored per-probe rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import polars as pl
from scipy import stats

from attnwh.errors import UsageError
from attnwh.reports.markdown import cost_table, figure, generated, source, table, timed
from attnwh.reports.published import (
    DUO_GQA_MEMORY,
    GU_SINK_EPS,
    GU_SINK_SHARES,
    WU_RETRIEVAL_SHARE,
)
from attnwh.reports.sections import ReportContext
from attnwh.reports.side_by_side_charts import MEASURES, short_name, whole_models
from attnwh.sql.restriction import choose

# The report's charts the page shows, by their element id, and the sections that draw them.
CHARTS = ("chart-models-by-depth", "chart-models-by-group")
CHART_SECTIONS = ("models-side-by-side",)
# Resamples of every bootstrap interval and permutation test on the page, and their seed.
RESAMPLES = 2000
SEED = 0
# The loss budgets (nats per token) the restriction plans are read at.
BUDGETS = (0.01, 0.05)
RETRIEVAL_THRESHOLD = 0.1
# Massive activations set to zero: a rise of at least this many nats per token (the perplexity
# times e) counts as Sun et al.'s catastrophe.
CATASTROPHIC_NATS = 1.0
# The first token by depth: tenths of each model's depth.
DEPTH_BINS = 10
# A finding holds on a model when its interval excludes 0 and its test gives p below this.
ALPHA = 0.05
Statistic = Callable[[np.ndarray], float]


def probe_matrix(ctx: ReportContext, run_id: int, column: str) -> np.ndarray:
    """A head-roles run's `column` as (probes, heads): a row per probe, a column per layer and
    head, so that resampling rows resamples probes."""
    frame = ctx.con.sql(
        f"SELECT example_id, layer, head, {column} AS value FROM head_roles WHERE run_id = $run "
        "ORDER BY example_id, layer, head",
        params={"run": run_id},
    ).pl()
    probes = frame["example_id"].n_unique()
    return frame["value"].to_numpy().astype(np.float64).reshape(probes, -1)


def share_above(threshold: float) -> Statistic:
    """The share of heads (columns) whose mean over probes (rows) exceeds `threshold`."""
    return lambda rows: float((rows.mean(axis=0) > threshold).mean())


def interval(rows: np.ndarray, statistic: Statistic) -> tuple[float, float]:
    """A 95 % percentile bootstrap interval of `statistic` over the rows (the probes)."""
    if len(rows) < 2:
        return (float("nan"), float("nan"))
    result = stats.bootstrap(
        (np.arange(len(rows)),),
        lambda index: statistic(rows[index.astype(int)]),
        n_resamples=RESAMPLES,
        method="percentile",
        vectorized=False,
        random_state=np.random.default_rng(SEED),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def difference_p(a: np.ndarray, b: np.ndarray, statistic: Statistic) -> float:
    """A two-sided permutation p of statistic(a) − statistic(b), the rows (probes) of the two
    runs exchanged between them (scipy permutes the rows' indices into both stacked)."""
    both = np.vstack([a, b])
    result = stats.permutation_test(
        (np.arange(len(a)), np.arange(len(a), len(both))),
        lambda x, y: statistic(both[x.astype(int)]) - statistic(both[y.astype(int)]),
        permutation_type="independent",
        n_resamples=RESAMPLES,
        vectorized=False,
        random_state=np.random.default_rng(SEED),
    )
    return float(result.pvalue)


def num(value: float | None, spec: str = ".3f") -> str:
    """`value` formatted, or '–' where there is none (no probe solved, a single sequence)."""
    return "–" if value is None else format(value, spec)


def change(delta: float | None, low: float | None, high: float | None, p: float | None, spec: str = "+.3f") -> str:
    """'+0.123 [+0.100, +0.150], p 0.002', or '–' without a change."""
    if delta is None:
        return "–"
    bounds = f" [{num(low, spec)}, {num(high, spec)}]" if low is not None else ""
    return f"{format(delta, spec)}{bounds}, p {num(p, '.3g')}"


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def pct_interval(low: float, high: float) -> str:
    return "–" if np.isnan(low) else f"[{100 * low:.1f}, {100 * high:.1f}] %"


def models_frame(ctx: ReportContext) -> pl.DataFrame:
    """One row per decoder: name, family and shape."""
    frame = ctx.query("run_models").filter(pl.col("causal"))
    if frame["model"].n_unique() < 1:
        raise UsageError("the findings page reads decoders' runs; this warehouse has none (`attnwh ingest --model M`)")
    return (
        frame.group_by("model")
        .agg(pl.col("family", "num_layers", "num_heads", "num_key_value_heads").first())
        .with_columns(name=short_name(pl.col("model")))
        .sort("name")
    )


def setup(models: pl.DataFrame) -> list[str]:
    shapes = "; ".join(
        f"`{r['name']}`, a {r['family']} decoder of {r['num_layers']} layers × {r['num_heads']} query heads on "
        f"{r['num_key_value_heads']} key/value heads ({r['num_layers'] * r['num_heads']} heads)"
        for r in models.iter_rows(named=True)
    )
    return [
        f"Models: {shapes}. Every interval is a 95 % percentile bootstrap over the unit that varies (probes or "
        f"sequences, {RESAMPLES:,} resamples), every p a permutation test over the same unit.",
        "",
    ]


def side_by_side(ctx: ReportContext, figures: dict[str, str]) -> list[str]:
    measures, models = whole_models(ctx.query("models_side_by_side", bins=1))
    rows = [(m["name"], ", ".join(m["shape"]), *(" · ".join(m["cells"][k]) for k in measures)) for m in models]
    return [
        "## The models side by side",
        "",
        "Each model whole (one value per run, named in brackets): the mean first-token share of its heads, "
        f"the share of heads above ε = {GU_SINK_EPS}, the share of (example, layer) pairs with a massive activation, "
        "the strongest induction and previous-token heads' scores, the share of heads with a retrieval score above "
        "0.1, and the share "
        "of key/value groups the restriction plan keeps whole at a loss budget of 0.05 nats per token.",
        "",
        *table(("model", "shape", *(MEASURES[m] for m in measures)), rows),
        source("models_side_by_side"),
        "",
        *figure(figures, "chart-models-by-depth"),
        *figure(figures, "chart-models-by-group"),
    ]


def first_token_by_depth(ctx: ReportContext) -> list[str]:
    """Each model's mean first-token share and share of sink heads per tenth of its depth."""
    frame = ctx.query("models_side_by_side", bins=DEPTH_BINS).filter(
        pl.col("measure").is_in(["first_token", "sink_share"])
    )
    if not frame.height:
        return []
    frame = frame.with_columns(name=short_name(pl.col("model")))
    runs = frame.select("name", "run_id", "task").unique().sort("name", "run_id")
    header = ["relative depth", *(f"{r['name']} ({r['task']}, run {r['run_id']})" for r in runs.iter_rows(named=True))]
    rows = []
    for b in range(DEPTH_BINS):
        cells = [f"{b / DEPTH_BINS:.1f}–{(b + 1) / DEPTH_BINS:.1f}"]
        for r in runs.iter_rows(named=True):
            part = frame.filter((pl.col("run_id") == r["run_id"]) & (pl.col("depth_bin") == b))
            if not part.height:
                cells.append("–")
                continue
            first = part.filter(pl.col("measure") == "first_token").row(0, named=True)
            sinks = part.filter(pl.col("measure") == "sink_share").row(0, named=True)
            layers = (
                f"L{first['first_layer']}"
                if first["first_layer"] == first["last_layer"]
                else f"L{first['first_layer']}–{first['last_layer']}"
            )
            cells.append(f"{first['value']:.3f} · {100 * sinks['value']:.0f} % ({layers})")
        rows.append(cells)
    return [
        "## The first token by depth",
        "",
        f"Per tenth of each model's depth (layer / layers), the mean share of its heads' attention on the first "
        f"token and the share of its heads above ε = {GU_SINK_EPS} (first-token share · sink heads, with the layers "
        "of that tenth), on the statistics runs' text.",
        "",
        *table(header, rows),
        source("models_side_by_side"),
        "",
    ]


def sinks_emerge(ctx: ReportContext) -> list[str]:
    found = ctx.query("findings_sinks").filter(pl.col("probe").is_in(["random", "text"]))
    lines = [
        "## Attention sinks emerge (Gu et al. 2025)",
        "",
        f"The share of heads whose mean attention to the first token exceeds ε = {GU_SINK_EPS} (Sink^ε), on "
        "inputs of random tokens and of natural text (`attnwh ingest roles --probes random,text`, 64 tokens). "
        f"Gu et al. report {pct(GU_SINK_SHARES[0])} to {pct(GU_SINK_SHARES[1])} on models from GPT-2 XL to "
        "Llama-3-8B, at ε = 0.3 on 64-token inputs, and sinks already in Pythia-14M.",
        "",
    ]
    if not found.height:
        return [*lines, "Not measured in this warehouse: `attnwh ingest roles --model M --probes random,text`.", ""]
    rows, verdicts = [], []
    statistic = share_above(GU_SINK_EPS)
    matrices = {}
    for r in found.iter_rows(named=True):
        rows_ = probe_matrix(ctx, r["run_id"], "sink")
        matrices[(r["model"], r["probe"])] = rows_
        low, high = interval(rows_, statistic)
        setting = "random tokens" if r["probe"] == "random" else "natural text"
        rows.append(
            (short_name_of(r["model"]), setting, r["probes"], r["max_tokens"], f"{r['sink_heads']} of {r['heads']}",
             pct(r["sink_share"]), pct_interval(low, high))
        )  # fmt: skip
    for model in found["model"].unique().sort().to_list():
        if (model, "random") in matrices and (model, "text") in matrices:
            a, b = matrices[(model, "random")], matrices[(model, "text")]
            p = difference_p(a, b, statistic)
            diff = statistic(a) - statistic(b)
            verdicts.append(
                f"`{short_name_of(model)}`: random tokens − natural text {100 * diff:+.1f} points (permutation p "
                f"{p:.3g} over probes)."
            )
    low_paper, high_paper = GU_SINK_SHARES
    agree = [
        short_name_of(r["model"]) for r in found.iter_rows(named=True) if low_paper <= r["sink_share"] <= high_paper
    ]
    return [
        *lines,
        *table(("model", "input", "probes", "tokens", "sink heads", "share", "95 % interval"), rows),
        source("findings_sinks"),
        "",
        *([" ".join(verdicts), ""] if verdicts else []),
        agreement(
            sorted(set(agree)),
            sorted({short_name_of(m) for m in found["model"].to_list()}),
            f"its share of sink heads lies within Gu et al.'s {pct(low_paper)} to {pct(high_paper)} on at least one "
            "input",
            "its share lies outside that range on both inputs, where Gu et al. read other and larger models",
        ),
        "",
    ]


def short_name_of(model: str) -> str:
    """A model's name on the page: its file or folder name, a GGUF file's without `.gguf`."""
    return model.rstrip("/").split("/")[-1].removesuffix(".gguf")


def agreement(agree: list[str], models: list[str], holds: str, fails: str) -> str:
    """'On `A` attnwh agrees: <holds>. On `B` it does not: <fails>.' over the page's models."""
    agree = sorted(set(agree), key=str.lower)
    disagree = sorted((m for m in models if m not in agree), key=str.lower)
    parts = []
    if agree:
        parts.append(f"On {', '.join(f'`{m}`' for m in agree)} attnwh agrees: {holds}.")
    if disagree:
        parts.append(f"On {', '.join(f'`{m}`' for m in disagree)} it does not: {fails}.")
    return " ".join(parts)


def eviction(ctx: ReportContext) -> list[str]:
    frame = ctx.query("streaming_loss")
    lines = [
        "## Eviction breaks streaming (Xiao et al. 2023, StreamingLLM)",
        "",
        "Next-token loss on text longer than the window when every key/value group keeps only the last W = 64 "
        "tokens (S = 0: window attention, the first tokens evicted), or those and the first S = 1 or 4 tokens "
        "(`attnwh ingest streaming`), against the model as it is. Xiao et al. found window attention's "
        "perplexity exploding once the text outgrows the cache (Llama-2, Falcon, Pythia, MPT), and 4 initial "
        "tokens with the window bringing it back close to the model's own.",
        "",
    ]
    if not frame.height:
        return [*lines, "Not measured in this warehouse: `attnwh ingest streaming --model M`.", ""]
    rows, agree = [], []
    for r in frame.sort("model", "context_length", "sinks").iter_rows(named=True):
        versus = change(r["versus_delta"], r["versus_ci_low"], r["versus_ci_high"], r["versus_p_value"])
        rows.append((short_name_of(r["model"]), f"{r['context_length']:,}", r["sinks"], r["sequences"],
                     f"{r['baseline_loss']:.3f} ({r['baseline_perplexity']:.1f})", f"{r['loss']:.3f} ({r['perplexity']:.1f})",
                     change(r["delta"], r["ci_low"], r["ci_high"], r["p_value"]), versus if r["sinks"] else "–"))  # fmt: skip
    for (model,), part in frame.group_by("model"):
        window = part.filter(pl.col("sinks") == 0)
        four = part.filter(pl.col("sinks") == 4)
        if (
            window.height
            and four.height
            and ((four["versus_ci_high"] < 0) & (four["versus_p_value"] < ALPHA)).all()
            and ((window["ci_low"] > 0) & (window["p_value"] < ALPHA)).all()
        ):
            agree.append(short_name_of(model))
    return [
        *lines,
        *table(
            (
                "model",
                "tokens",
                "S",
                "sequences",
                "as it is: loss (perplexity)",
                "restricted",
                "Δ against as it is",
                "Δ against S = 0",
            ),
            rows,
        ),  # fmt: skip
        source("streaming_loss"),
        "",
        agreement(
            agree,
            sorted({short_name_of(m) for m in frame["model"].to_list()}),
            "at every length window attention raises the loss, and 4 sinks bring it down again, both with intervals "
            "over sequences that exclude 0 and p < 0.05",
            "at some length window attention does not raise the loss, or 4 sinks do not lower it, with an interval "
            "that excludes 0 and p < 0.05",
        ),
        "",
    ]


def retrieval_causal(ctx: ReportContext) -> list[str]:
    complete = [r for (r,) in ctx.con.execute("SELECT run_id FROM runs WHERE status = 'complete'").fetchall()]
    frame = ctx.query("head_set_effect").filter(pl.col("run_id").is_in(complete))
    lines = [
        "### Disabling the retrieval heads (Wu et al. 2025)",
        "",
        "Pass-key probes (a five-digit key planted in the text, asked for at the end, its answer teacher-forced; "
        "`attnwh ingest ablation --probe passkey --no-sweep --disable-top retrieval:10 --random-heads 10 --draws 5 "
        "--mode zero`): the share of the answer's tokens the model predicts greedily, on the probes it answers "
        "whole, with the 10 heads of the highest retrieval score disabled, and with 10 random heads (5 draws). "
        "Wu et al. found needle-in-a-haystack answers falling when the top retrieval heads were masked, and "
        "barely moving when as many random heads were.",
        "",
    ]
    if not frame.height:
        return [*lines, "Not measured in this warehouse.", ""]
    lengths = dict(ctx.con.execute("SELECT run_id, max_length FROM runs").fetchall())
    rows, agree = [], []
    for (model, run_id), part in frame.sort("model", "run_id").group_by("model", "run_id", maintain_order=True):
        first = part.row(0, named=True)
        top = part.filter(pl.col("draw").is_null())
        draws = part.filter(pl.col("draw").is_not_null())
        for r in top.iter_rows(named=True):
            rows.append((short_name_of(model), f"{lengths.get(run_id, 0):,}", num(first["baseline_accuracy_all"]),
                         f"{first['solved']} of {first['probes']}", r["label"], num(r["accuracy"]),
                         change(r["accuracy_delta"], r["accuracy_ci_low"], r["accuracy_ci_high"], r["accuracy_p"])))  # fmt: skip
        if draws.height:
            d = draws.row(0, named=True)
            spread = (
                "–"
                if d["draws_mean_delta"] is None
                else f"mean {d['draws_mean_delta']:+.3f} (sd {num(d['draws_sd_delta'])}, {d['draws_min_delta']:+.3f} "
                f"to {d['draws_max_delta']:+.3f})"
            )
            rows.append((short_name_of(model), f"{lengths.get(run_id, 0):,}", "", "", f"{d['set_name']} × {d['draws']}",
                         num(cast(float | None, draws["accuracy"].mean())), spread))  # fmt: skip
            worst = top["accuracy_ci_high"].drop_nulls()
            random_mean = d["draws_mean_delta"]
            strongest = abs(cast(float, top["accuracy_delta"].min() or 0.0))
            tested = top["accuracy_p"].drop_nulls()
            if (
                worst.len()
                and cast(float, worst.max()) < 0
                and cast(float, tested.max()) < ALPHA
                and random_mean is not None
                and abs(random_mean) < strongest / 2
            ):
                agree.append(short_name_of(model))
    models = sorted({short_name_of(m) for m in frame["model"].to_list()})
    return [
        *lines,
        *table(
            (
                "model",
                "tokens",
                "baseline accuracy (all probes)",
                "probes answered whole",
                "heads disabled",
                "accuracy",
                "change on those probes",
            ),
            rows,
        ),  # fmt: skip
        source("head_set_effect"),
        "",
        agreement(
            sorted(set(agree)),
            models,
            "disabling the top retrieval heads lowers the answers' accuracy (interval below 0, p < 0.05), while "
            "random heads change it by less than half as much",
            "the top retrieval heads' effect is not clearly larger than random heads' on these probes",
        ),
        "",
    ]


def retrieval(ctx: ReportContext) -> list[str]:
    found = ctx.query("findings_sinks").filter(pl.col("probe") == "needle")
    lines = [
        "## Retrieval heads are few (Wu et al. 2025)",
        "",
        f"The share of heads whose mean retrieval score on needle probes exceeds {RETRIEVAL_THRESHOLD} (Wu et al.'s "
        f"retrieval heads); they found under {pct(WU_RETRIEVAL_SHARE)} in every model they read (Llama-2, Yi, "
        "Qwen, Mistral families, 6B to 34B, contexts of thousands of tokens).",
        "",
    ]
    if not found.height:
        return [*lines, "Not measured in this warehouse: `attnwh ingest roles --model M --probes needle`.", ""]
    rows, agree = [], []
    statistic = share_above(RETRIEVAL_THRESHOLD)
    for r in found.iter_rows(named=True):
        matrix = probe_matrix(ctx, r["run_id"], "retrieval")
        share = statistic(matrix)
        low, high = interval(matrix, statistic)
        rows.append((short_name_of(r["model"]), r["probes"], f"{r['max_tokens']:,}", f"{round(share * r['heads'])} of {r['heads']}",
                     pct(share), pct_interval(low, high)))  # fmt: skip
        if share < WU_RETRIEVAL_SHARE:
            agree.append(short_name_of(r["model"]))
    return [
        *lines,
        *table(("model", "needle probes", "tokens", "retrieval heads", "share", "95 % interval"), rows),
        source("findings_sinks", "head_roles"),
        "",
        agreement(
            agree,
            sorted({short_name_of(m) for m in found["model"].to_list()}),
            f"fewer than {pct(WU_RETRIEVAL_SHARE)} of its heads are retrieval heads",
            f"{pct(WU_RETRIEVAL_SHARE)} or more of its heads pass 0.1; Wu et al. read contexts of thousands of tokens "
            "in models of 6B parameters and more, where a needle is harder to find than in these probes, and with "
            "few heads a single copying head is a large share",
        ),
        "",
    ]


def induction(ctx: ReportContext) -> list[str]:
    top = ctx.query("head_roles_top", top=3).filter((pl.col("probe") == "induction") & (pl.col("score") == "induction"))
    lines = [
        "## Induction heads (Olsson et al. 2022)",
        "",
        "The top induction heads on repeated random tokens (mean attention from each repeated token to the token "
        "that followed its first occurrence), with their relative depth (layer / layers). Olsson et al. found "
        "induction heads in every model of two layers or more, after an early phase change in training.",
        "",
    ]
    if not top.height:
        return [*lines, "Not measured in this warehouse: `attnwh ingest roles --model M --probes induction`.", ""]
    layers = ctx.query("run_models").select("run_id", "num_layers")
    top = top.join(layers, on="run_id")
    rows = [
        (short_name_of(r["model"]), r["rank"], f"L{r['layer']}H{r['head']}", f"{r['layer'] / r['num_layers']:.2f}",
         f"{r['value']:.3f}", r["probes"])
        for r in top.sort("model", "rank").iter_rows(named=True)
    ]  # fmt: skip
    return [
        *lines,
        *table(("model", "rank", "head", "relative depth", "induction score", "probes"), rows),
        source("head_roles_top", "run_models"),
        "",
    ]


def icl(ctx: ReportContext) -> list[str]:
    try:
        exact, wide = ctx.query("icl_score"), ctx.query("icl_score", window=21)
    except UsageError:  # every loss-curve run is shorter than the score's positions
        exact = wide = pl.DataFrame()
    lines = [
        "### The in-context learning score (Olsson et al. 2022)",
        "",
        "The loss at token 500 minus the loss at token 50 of the text, averaged over sequences of 512 tokens "
        "(`attnwh ingest loss-curve`, query `icl_score`): below 0 when later tokens are predicted better because "
        "the model uses its context. Olsson et al. found the score falling to well below 0 when induction heads "
        "form in training, for models of every size. One token per sequence is noisy; each end's mean over 21 "
        "positions around it is also given.",
        "",
    ]
    if not exact.height:
        return [
            *lines,
            "Not measured in this warehouse: `attnwh ingest loss-curve --model M --context-length 512` (the score "
            "needs 521 tokens or more with its 21-position ends).",
            "",
        ]
    rows, agree = [], []
    for r, w in zip(exact.sort("model").iter_rows(named=True), wide.sort("model").iter_rows(named=True), strict=True):
        rows.append((short_name_of(r["model"]), r["sequences"], num(r["loss_early"]), num(r["loss_late"]),
                     change(r["icl_score"], r["ci_low"], r["ci_high"], r["p_value"]),
                     change(w["icl_score"], w["ci_low"], w["ci_high"], w["p_value"])))  # fmt: skip
        if w["ci_high"] is not None and w["ci_high"] < 0 and w["p_value"] < ALPHA:
            agree.append(short_name_of(r["model"]))
    return [
        *lines,
        *table(("model", "sequences", "loss at 50", "loss at 500", "score", "score, 21 positions each end"), rows),
        source("icl_score"),
        "",
        agreement(
            agree,
            sorted({short_name_of(m) for m in exact["model"].to_list()}),
            "later tokens are predicted better, the 21-position score's interval lying below 0 with p < 0.05",
            "the 21-position score is not below 0 with an interval below 0 and p < 0.05",
        ),
        "",
    ]


def massive_ablation(ctx: ReportContext) -> list[str]:
    frame = ctx.query("massive_ablation")
    lines = [
        "### Setting them to zero and to their mean",
        "",
        "Every sequence's next-token loss with the massive activations overwritten at the layer where they first "
        "appear (`attnwh ingest massive-ablation`): set to zero, and set to their mean over the sequences. Sun et "
        "al. found zero catastrophic (perplexity exploding) and the mean harmless: the activations act as fixed "
        "biases.",
        "",
    ]
    if not frame.height:
        return [*lines, "Not measured in this warehouse: `attnwh ingest massive-ablation --model M`.", ""]
    rows = []
    for r in frame.sort("model", "run_id").iter_rows(named=True):
        moved = (
            "–" if r["intervention"] == "none" else change(r["delta"], r["ci_low"], r["ci_high"], r["p_value"], "+.4f")
        )
        rows.append((short_name_of(r["model"]), r["intervention"], r["entries"], r["sequences"], f"{r['loss']:.3f}",
                     f"{r['perplexity']:,.1f}", moved))  # fmt: skip
    agree: list[str] = []
    partly: list[str] = []
    for (model,), part in frame.group_by("model"):
        zero = part.filter(pl.col("intervention") == "zero")
        mean = part.filter(pl.col("intervention") == "mean")
        low = zero["ci_low"][0] if zero.height else None
        tested = low is not None and low > 0 and zero["p_value"][0] < ALPHA
        if mean.height and tested and zero["delta"][0] > 10 * abs(mean["delta"][0]):
            # Sun et al.'s "catastrophic": the perplexity multiplied many times over.
            (agree if zero["delta"][0] >= CATASTROPHIC_NATS else partly).append(short_name_of(model))
    models = sorted({short_name_of(m) for m in frame["model"].to_list()})
    verdict = agreement(
        agree,
        [m for m in models if m not in partly],
        f"zero raises the loss by {CATASTROPHIC_NATS:g} nat per token or more (the perplexity × {np.e:.1f} or more; "
        "interval above 0, p < 0.05), more than ten times as much as the mean does",
        "zero does not raise the loss with an interval above 0 and p < 0.05, ten times as much as the mean",
    )
    if partly:
        verdict += (
            f" On {', '.join(f'`{m}`' for m in sorted(partly, key=str.lower))} it agrees in part: zero raises the loss "
            "(interval above 0, p < 0.05) and the mean hardly moves it, but by less than "
            f"{CATASTROPHIC_NATS:g} nat per token, not the explosion Sun et al. saw; attnwh has not explained why."
        )
    return [
        *lines,
        *table(("model", "set to", "entries", "sequences", "loss", "perplexity", "Δ loss"), rows),
        source("massive_ablation"),
        "",
        verdict.strip(),
        "",
    ]


def massive(ctx: ReportContext) -> list[str]:
    frame = ctx.query("massive_activations")
    lines = [
        "## Massive activations (Sun et al. 2024)",
        "",
        "Hidden-state entries with |h| > 100 and > 1000 × the median |h| of their layer's output: per model, the "
        "dimensions, on which token, from which layer, in what share of the examples, and the largest. Sun et al. "
        "found a handful of such entries in every LLM they read, at fixed dimensions, on the first token and on "
        "delimiters, appearing after the first few layers.",
        "",
    ]
    if not frame.height:
        return [*lines, "None stored in this warehouse (statistics runs ingest them by default).", ""]
    dims = (
        frame.group_by("model", "task", "dim", "token_kind")
        .agg(
            pl.col("layer").min().alias("first"),
            pl.col("layer").n_unique().alias("layers"),
            pl.col("example_share").max().alias("share"),
            pl.col("max_magnitude").max().alias("largest"),
            pl.col("mean_ratio").max().alias("ratio"),
        )
        .sort("model", "largest", descending=[False, True])
    )
    rows = [
        (short_name_of(r["model"]), r["task"], r["dim"], r["token_kind"], r["first"], r["layers"], pct(r["share"]),
         f"{r['largest']:,.0f}", f"{r['ratio']:,.0f}")
        for r in dims.iter_rows(named=True)
    ]  # fmt: skip
    return [
        *lines,
        *table(
            ("model", "run", "dimension", "token", "from layer", "layers", "examples", "largest |h|", "× median"), rows
        ),  # fmt: skip
        source("massive_activations"),
        "",
    ]


def kv_saving(ctx: ReportContext) -> list[str]:
    plan = ctx.query("restriction_plan")
    lines = [
        "## What a restriction to sinks and a window saves (Xiao et al. 2024, DuoAttention)",
        "",
        "The KV memory freed when the key/value groups least harmed keep only their sinks and a recent window, at "
        "the largest measured set whose next-token loss rises by at most the budget (`attnwh ingest restriction`); "
        "as a factor, the whole cache over what is left. DuoAttention reports up to "
        f"{DUO_GQA_MEMORY:.2f}× less memory for grouped-query models (2.55× for multi-head ones), at its own "
        "accuracy budget on long-context tasks.",
        "",
    ]
    if not plan.height:
        return [*lines, "Not measured in this warehouse: `attnwh ingest restriction --model M`.", ""]
    rows = []
    for run_id in plan["run_id"].unique().sort().to_list():
        of_run = plan.filter(pl.col("run_id") == run_id).row(0, named=True)
        for budget in BUDGETS:
            chosen = choose(ctx.con, budget, run_id)
            left = chosen.kv_bytes - chosen.kv_bytes_saved
            factor = f"{chosen.kv_bytes / left:.2f}×" if left > 0 else "all"
            sequences = of_run["sequences"]
            ci = f"[{chosen.ci_low:+.3f}, {chosen.ci_high:+.3f}]" if sequences > 1 else "–"
            rows.append((short_name_of(of_run["model"]), f"{budget:g}", f"{chosen.k} of {of_run['n_groups']}",
                         f"{chosen.delta:+.3f}", ci, sequences, f"{of_run['context_length']:,}", factor))  # fmt: skip
    return [
        *lines,
        *table(
            (
                "model",
                "budget (nats)",
                "groups restricted",
                "Δ loss",
                "95 % interval",
                "sequences",
                "tokens",
                "memory factor",
            ),
            rows,
        ),  # fmt: skip
        source("restriction_plan"),
        "",
        "The factor is at --kv-context tokens, where the window and sinks are a small part of a cache. "
        "DuoAttention's budget is task accuracy on long contexts, attnwh's the loss on the text: the settings "
        "differ, so the factors say how far this model's groups can be restricted here, not whether the paper's "
        "holds.",
        "",
    ]


def costs(time_dir: Path | None) -> list[str]:
    """Every `/usr/bin/time -v` output of `time_dir` (time-<model>-<step>.txt), in name order."""
    if time_dir is None:
        return []
    rows = []
    for path in sorted(time_dir.glob("time-*.txt")):
        cost = timed(path)
        if cost:
            rows.append((path.stem.removeprefix("time-"), cost[0], cost[1]))
    if not rows:
        return []
    return [
        "## What each step cost",
        "",
        "Wall time and peak resident memory of each command on a 2-core CPU without a GPU, beside other work on "
        "the same cores (`/usr/bin/time -v`).",
        "",
        *cost_table("command", rows),
    ]


def build_page(
    ctx: ReportContext,
    db: Path,
    figures: dict[str, str],
    name: str | None = None,
    time_dir: Path | None = None,
) -> list[str]:
    """The page's lines, for the decoders of the warehouse `ctx` reads (`name` is unused: the
    page names each model)."""
    models = models_frame(ctx)
    return [
        "# Findings of attention research, side by side",
        "",
        *generated("findings"),
        *setup(models),
        *side_by_side(ctx, figures),
        *first_token_by_depth(ctx),
        *sinks_emerge(ctx),
        *eviction(ctx),
        *retrieval(ctx),
        *retrieval_causal(ctx),
        *induction(ctx),
        *icl(ctx),
        *massive(ctx),
        *massive_ablation(ctx),
        *kv_saving(ctx),
        *costs(time_dir),
    ]
