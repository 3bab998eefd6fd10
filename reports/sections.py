"""The report's sections: a small registry, each section declaring the tables it reads.

A section is drawn only when every table it needs exists in the warehouse and holds rows;
otherwise the page keeps its heading and shows a note naming the command that produces the
data, so a warehouse with some analyses still says which others exist and how to add them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import cast

import altair as alt
import duckdb
import polars as pl

from attnwh.reports import charts, mixing_charts, restriction_charts, role_charts, side_by_side_charts
from attnwh.sql import queries as named


@dataclass(frozen=True)
class ChartBlock:
    """A chart with a stable element id (`chart-…`), used in the page and as image file name."""

    id: str
    caption: str
    chart: alt.TopLevelMixin

    def spec(self) -> dict:
        """The chart's Vega-Lite spec, data inlined. Altair refuses more than 5,000 rows by
        default; a report chart may hold up to 50,000 (the gallery's cells pass 5,000), which
        still stops a query gone wrong from bloating the page."""
        with alt.data_transformers.enable("default", max_rows=50_000):
            return self.chart.to_dict()


@dataclass(frozen=True)
class TableBlock:
    """An HTML table; each cell is a list of lines (text only, escaped when rendered)."""

    id: str
    caption: str
    columns: tuple[str, ...]
    rows: list[list[list[str]]]
    # Per row, where its cell in column `link_column` links to (a head panel's `#head-L-H`);
    # empty: no links.
    links: tuple[str | None, ...] = ()
    link_column: int = 0


@dataclass(frozen=True)
class NoteBlock:
    """A sentence in place of a chart that would draw nothing (the data is there, but no row
    passes the query's test: no massive entry, no head whose disabling helped), saying what
    was looked for and why there is no chart; `id` is the chart's. An empty chart would show
    axes or a legend alone, which reads as a drawing error or, worse, as a finding."""

    id: str
    text: str


Block = ChartBlock | TableBlock | NoteBlock


def chart_or_note(
    id: str, caption: str, frame: pl.DataFrame, draw: Callable[[pl.DataFrame], alt.TopLevelMixin], empty: str
) -> ChartBlock | NoteBlock:
    """The chart `draw(frame)` under `caption`, or the sentence `empty` when `frame` has no row."""
    return ChartBlock(id, caption, draw(frame)) if frame.height else NoteBlock(id, empty)


@dataclass(frozen=True)
class ReportContext:
    """What a section builder may read: the warehouse (read-only) and the report's filters."""

    con: duckdb.DuckDBPyConnection
    params: dict[str, str | None]

    def query(self, name: str, **extra: object) -> pl.DataFrame:
        """Run a named query (`sql/<name>.sql`) with the report's model/task filters and the
        `extra` parameters."""
        query = named.get_query(name)
        params = {k: v for k, v in self.params.items() if k in query.params and v is not None} | extra
        frame = pl.from_arrow(named.run_query(self.con, query, params))
        assert isinstance(frame, pl.DataFrame)  # from_arrow gives a Series only for an Array
        return frame


@dataclass(frozen=True)
class Section:
    """One analysis of the page. `tables` are what it needs; `produced_by` is the command
    that writes them, named in the note shown while they are absent or empty."""

    id: str
    title: str
    tables: tuple[str, ...]
    produced_by: str
    build: Callable[[ReportContext], list[Block]]
    # The title where the report covers decoders' runs: "decoders" when it covers only theirs,
    # "both" beside encoders' (a decoder has no [CLS] or [SEP]); `title` where absent.
    titles: dict[str, str] = field(default_factory=dict)

    def title_for(self, ctx: ReportContext) -> str:
        """The title for the runs `ctx` covers: encoders', decoders' or both."""
        if not self.titles:
            return self.title
        causal = ctx.query("run_models")["causal"]
        if not causal.any():
            return self.title
        return self.titles["decoders" if causal.all() else "both"]


@dataclass(frozen=True)
class RenderedSection:
    """A section as the page shows it: its blocks, or a note when it has nothing to draw;
    `looked` says that its tables hold rows but none passed the test (the note then says
    what was looked for), not that its data is missing."""

    section: Section
    blocks: list[Block] = field(default_factory=list)
    note: str | None = None
    looked: bool = False


def _lineage(ctx: ReportContext, frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with the `lineage` of its models (query model_lineage), for the run labels."""
    return charts.with_lineage(frame, ctx.query("model_lineage"))


def _kind(ctx: ReportContext, frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with `causal` (query run_models): which runs are decoders', whose charts show
    the first token in [CLS]'s place and no [SEP] (charts.by_kind)."""
    kinds = ctx.query("run_models").select("run_id", "causal")
    return frame.join(kinds, on="run_id", how="left").with_columns(pl.col("causal").fill_null(False))


def has_decoders(ctx: ReportContext) -> bool:
    """Whether any run the report covers is a decoder's (models.causal)."""
    return bool(ctx.query("run_models")["causal"].any())


def _special_tokens(ctx: ReportContext) -> list[Block]:
    heads = _kind(ctx, _lineage(ctx, ctx.query("head_summary")))
    layers = _kind(ctx, _lineage(ctx, ctx.query("special_tokens_by_layer")))
    decoders_text = (
        " Decoders' runs (causal language models) are drawn below the encoders', on their own: the first token "
        "(BOS, or the first real token) takes [CLS]'s place, every row counted, row 0 included (its only key is "
        "itself), and a decoder has no [SEP], so it has no [SEP] panel (its share is NULL, not 0)."
        if has_decoders(ctx)
        else ""
    )
    return [
        ChartBlock(
            "chart-special-tokens-heads",
            "Share of each head's attention that goes to [CLS], [SEP] and punctuation (Kovaleva et al. Fig. 6, "
            "Clark et al.), per layer (rows) and head (columns), with the same share weighted by the norm of each "
            "token's transformed value (Kobayashi et al.) beside it; each column has its own colour scale, from 0 "
            "to its largest mean; query head_summary: mean over each run's examples of the per-example "
            "statistics in head_stats." + decoders_text,
            charts.special_tokens_heads(heads),
        ),
        ChartBlock(
            "chart-special-tokens-layers",
            "Mean share of attention to [CLS], [SEP] and punctuation per layer (solid: attention weight, dashed: "
            "norm-weighted), a row per task and a column per target, every model of the task overlaid in its own "
            "colour so a fine-tuned model sits on its base; query special_tokens_by_layer: mean over the run's "
            "examples and the layer's heads." + decoders_text,
            charts.special_tokens_layers(layers),
        ),
    ]


def _sinks(ctx: ReportContext) -> list[Block]:
    return [
        ChartBlock(
            "chart-attention-sinks",
            "Attention sinks (Gu et al. 2025): per layer (rows) and token kind (columns), the sink share (their "
            "Sink with threshold ε = 0.3): the share of the layer's heads whose mean attention to [CLS], [SEP] or "
            "punctuation exceeds ε (the mean over query rows and the run's examples, as in the heatmap above), "
            "with their count in the cell and, in the "
            "tooltip, which heads and the largest norm-weighted share among them (Kobayashi et al.: how much of that "
            "attention carries anything); query sink_heads."
            + (
                " A decoder's run has the token kinds first token (BOS, or the first real token: [CLS]'s place, "
                "where StreamingLLM's sinks sit) and punctuation, and no [SEP]."
                if has_decoders(ctx)
                else ""
            ),
            charts.attention_sinks(_lineage(ctx, ctx.query("sink_heads"))),
        )
    ]


def sinks_text(frame: pl.DataFrame) -> str:
    """'Run 9: 15 of 72 heads are sinks; ρ = -0.18 (bootstrap interval -0.39 to 0.05).', one
    sentence per ablation run of a `sink_vs_ablation` frame."""
    sentences = []
    for r in frame.unique("run_id", keep="first", maintain_order=True).iter_rows(named=True):
        rho = "undefined (every head has the same Δ or score)"
        if r["spearman"] is not None:
            rho = f"{r['spearman']:.2f}"
            if r["spearman_low"] is not None:
                rho += f" (bootstrap interval {r['spearman_low']:.2f} to {r['spearman_high']:.2f})"
        together = ""
        if r["sinks_delta"] is not None:
            together = (
                f"; all {r['sinks_disabled']} disabled together: Δ {r['sinks_delta']:+.4f}, p {r['sinks_p_value']:.3g}"
            )
        sentences.append(
            f"Run {r['run_id']} ({r['metric']}): {r['sink_heads']} of {r['heads']} heads are sinks; Spearman ρ (sink score, Δ) = "
            f"{rho}{together}."
        )
    return " ".join(sentences)


def _sinks_vs_ablation(ctx: ReportContext) -> list[Block]:
    frame = _lineage(ctx, ctx.query("sink_vs_ablation"))
    return [
        chart_or_note(
            "chart-sinks-vs-ablation",
            "Are the sink heads the ones that can be removed? Per head of a fine-tuned model, its sink score (the "
            "largest of its mean attention to [CLS], [SEP] and punctuation, from a statistics run of the same "
            "weights averaged over exactly the ablation run's examples) against Δ, the change in score when it alone "
            "is disabled (disabled − baseline, as in the ablation heatmap), sink heads (score > ε = 0.3, dotted "
            "line) in orange; each panel's title gives Spearman's ρ across the heads (average ranks for ties) and "
            "its 95 % percentile bootstrap interval over resampled heads. A sink head that matters sits low on "
            "the right; query sink_vs_ablation. " + sinks_text(frame),
            frame,
            charts.sinks_vs_ablation,
            "Are the sink heads the ones that can be removed? No ablation run has a statistics run of its model on "
            "its examples, so there is no sink score to set against Δ: `attnwh ingest --model FINETUNED` on the "
            "sweep's examples (the same data, seed and a --limit at least the sweep's) adds one; query "
            "sink_vs_ablation.",
        )
    ]


def _finetunes(ctx: ReportContext) -> list[Block]:
    runs = ctx.query("finetune_runs")
    rows = []
    for r in runs.iter_rows(named=True):
        start = "random weights (from scratch)" if r["from_scratch"] else f"from {r['base_model'] or '?'}"
        rows.append(
            [
                [str(r["run_id"])],
                [r["model"], start],
                [f"{r['task']} · {r['split']}"],
                [f"{r['train_examples']:,} examples", f"{r['epochs']:g} epochs"],
                [f"learning rate {r['learning_rate']:g}", f"warm-up {r['warmup']:g} of the steps"],
                [f"{r['final_loss']:.4f}" if r["final_loss"] is not None else "–", f"{r['train_seconds']} s"],
                [
                    r["scores"] or "–",
                    f"on {r['scored_examples']:,} {r['eval_split'] or 'evaluation'} examples"
                    if r["scored_examples"]
                    else "",
                ],
            ]
        )
    return [
        TableBlock(
            "table-finetunes",
            "Every fine-tuning run: the model it made and where it started, the training data, settings and the "
            "loss of the last step, and its scores on the evaluation split; query finetune_runs.",
            ("run", "model", "task", "training", "settings", "final loss", "scores"),
            rows,
        )
    ]


def _finetune_change(ctx: ReportContext) -> list[Block]:
    return [
        ChartBlock(
            "chart-finetune-change-heads",
            "How much each head's attention changed through fine-tuning (Kovaleva et al. Fig. 5): mean over the "
            "examples of the cosine similarity between the base and the tuned model's attention maps, each cropped "
            "to the real tokens; query finetune_change_by_head. Bright = changed most.",
            charts.finetune_change_heads(ctx.query("finetune_change_by_head")),
        ),
        ChartBlock(
            "chart-finetune-change-layers",
            "The same cosine per layer, mean over examples and heads with a band of one standard deviation; "
            "query finetune_change_by_layer. The paper found the last two layers change most.",
            charts.finetune_change_layers(ctx.query("finetune_change_by_layer")),
        ),
    ]


def curve_text(frame: pl.DataFrame) -> str:
    """What the top-k curve leaves out, one sentence per ablation run and metric of an
    `ablation_combinations` frame whose curve is cut: 'Run 7 (accuracy): no head's own
    disabling raised the score (none helped), so it has no top-k curve.' or '… 2 heads helped, so its
    curve stops at k = 2 of the 10 disabled together.'; empty when every curve is whole."""
    curves = frame.filter(pl.col("kind") == "top_k").group_by("run_id", "metric", maintain_order=True)
    sentences = []
    for (run_id, metric), rows in curves:
        helped, longest = int(rows["n_helpful"][0]), int(cast(int, rows["k"].max()))
        if helped == 0:
            sentences.append(
                f"Run {run_id} ({metric}): no head's own disabling raised the score (none helped), so it has no "
                "top-k curve."
            )
        elif helped < longest:
            heads = "1 head" if helped == 1 else f"{helped} heads"
            sentences.append(
                f"Run {run_id} ({metric}): {heads} helped, so its curve stops at k = {helped} of the {longest} "
                "disabled together."
            )
    return " ".join(sentences)


def _ablation(ctx: ReportContext) -> list[Block]:
    # Each run and metric's smallest change one head alone could show significantly sets the
    # heatmap's colour scale (`charts.delta_reach`).
    detectable = ctx.query("findings_ablation").select("run_id", "metric", "detect_delta_alone")
    heads = _lineage(ctx, ctx.query("ablation_effect")).join(detectable, on=["run_id", "metric"], how="left")
    layers = _lineage(ctx, ctx.query("layer_ablation"))
    combinations = _lineage(ctx, ctx.query("ablation_combinations"))
    cut = curve_text(combinations)
    curve = combinations.filter(pl.col("kind") == "top_k", pl.col("k") <= pl.col("n_helpful"))
    return [
        chart_or_note(
            "chart-ablation-heads",
            "What disabling one head does to the task score (Kovaleva et al. Fig. 8): per layer and head, "
            "Δ = the fine-tuned model's score with that head disabled minus its score with none (red: disabling "
            "hurt, blue: disabling helped), on "
            "the same examples; a filled dot ● marks a change whose paired test (exact McNemar for accuracy, "
            "permutation otherwise) survives the Benjamini–Hochberg correction across the run's heads and layers "
            "(adjusted p < 0.05), as everywhere on this page; the tooltip gives the 95 % bootstrap interval. Full "
            "colour is at least the smallest Δ one head alone could show significantly on the run's examples (exact "
            "McNemar after the correction; the legend gives it), so a change of one or two predictions reads pale; "
            "queries ablation_effect and findings_ablation (detect_delta_alone).",
            heads,
            charts.ablation_heads,
            "No single head was disabled in these ablation runs, so there is no heatmap; query ablation_effect.",
        ),
        chart_or_note(
            "chart-ablation-layers",
            "The same Δ for every head of a layer disabled at once (Kovaleva et al. Fig. 9), with the 95 % paired "
            "bootstrap interval of the change; a filled dot ● = adjusted p < 0.05 (significant), a ring ○ = not; "
            "query layer_ablation.",
            layers,
            charts.ablation_layers,
            "No whole layer was disabled in these ablation runs, so there is no chart; query layer_ablation.",
        ),
        chart_or_note(
            "chart-ablation-curve",
            "Do helpful heads add up? The change in score with the k heads whose own disabling helped most disabled "
            "together, k = 1, 2, … up to the number of heads whose own disabling raised the score, with the 95 % "
            "bootstrap band; the heads were chosen on the same examples, so the curve is optimistic; query "
            "ablation_combinations." + (" " + cut if cut else ""),
            curve,
            charts.ablation_curve,
            "Do helpful heads add up? "
            + (cut or "These ablation runs disabled no heads together (`attnwh ingest ablation --top-k K` adds them).")
            + " Query ablation_combinations.",
        ),
    ]


def _importance(ctx: ReportContext) -> list[Block]:
    effects = _lineage(ctx, ctx.query("ablation_effect"))
    return [
        chart_or_note(
            "chart-importance",
            "Does the cheap estimate find the heads that matter? Per head, gradient importance (Michel et al.: mean "
            "over examples of |∂L/∂ξ| for a gate ξ on the head's output) against Δ, the change in score measured "
            "by disabling it (disabled − baseline, as in the heatmap above: the heads that matter are low), with "
            "the Spearman correlation across heads in each panel's title; queries ablation_effect and "
            "importance_vs_ablation.",
            effects.filter(pl.col("importance").is_not_null()),
            lambda frame: charts.importance_scatter(frame, ctx.query("importance_vs_ablation")),
            "No head of these ablation runs has a gradient importance (runs made with --no-importance), so there "
            "is nothing to set against Δ; queries ablation_effect and importance_vs_ablation.",
        )
    ]


def _whole_context(ctx: ReportContext) -> list[Block]:
    from attnwh.sql.restriction import DEFAULT_LOSS_BUDGET, choose

    plan = ctx.query("restriction_plan")
    blocks: list[Block] = [
        chart_or_note(
            "chart-restriction-curve",
            "Which key/value groups need the whole context: the k groups least harmed when restricted alone to "
            "their first S tokens (sinks) and a window of the last W keep only those, together; per k, the KV "
            "memory that saves for one sequence at --kv-context tokens against the loss increase measured with "
            "exactly that set (nats per token, 95 % bootstrap interval over sequences). Diamonds mark the ends: "
            "nothing restricted and every group restricted. Query restriction_plan; each group alone: "
            "restriction_groups.",
            plan,
            restriction_charts.restriction_curve,
            "The restriction runs of this report hold no plan; query restriction_plan.",
        ),
        chart_or_note(
            "chart-restriction-needles",
            "What the same sets do to retrieval from long context: the share of the needle probes' answer tokens "
            "(a needle sentence in a haystack of the run's text, the question, the answer teacher-forced) the model "
            "still predicts greedily, against the KV memory saved. Query restriction_plan, column needle_accuracy.",
            plan.filter(pl.col("needles") > 0),
            restriction_charts.needle_curve,
            "No restriction run of this report read needle probes (runs made with --needles 0); "
            "query restriction_plan.",
        ),
    ]
    rows = []
    for run_id in sorted(set(plan["run_id"].to_list())):
        chosen = choose(ctx.con, DEFAULT_LOSS_BUDGET, run_id)
        keep = chosen.whole_context
        listed = [f"L{r['layer']}.G{r['kv_group']} (Δ alone {r['delta']:+.4f})" for r in keep.iter_rows(named=True)]
        needles = [] if chosen.needle_accuracy is None else [f"needle accuracy {chosen.needle_accuracy:.0%}"]
        rows.append(
            [
                [f"run {run_id}", str(plan.filter(pl.col("run_id") == run_id)["model"][0])],
                [f"{chosen.k} of {chosen.k + keep.height} groups", f"Δ {chosen.delta:+.4f} nats/token", *needles],
                [
                    f"{chosen.kv_bytes_saved / 2**20:,.1f} MiB of {chosen.kv_bytes / 2**20:,.1f} MiB at {chosen.kv_context:,}"
                ],
                listed or ["none: every group may keep only its sinks and window"],
            ]
        )
    blocks.append(
        TableBlock(
            "table-whole-context",
            f"The groups that must keep the whole context: for each restriction run, the largest measured set whose "
            f"loss increase is within {DEFAULT_LOSS_BUDGET} nats per token is restricted; the others (layer L, "
            "key/value group G, with their loss increase when restricted alone) keep every token. "
            "Warehouse.restriction_choice(budget) gives it for any budget.",
            ("run", "restricted", "KV memory saved", "must keep the whole context"),
            rows,
        )
    )
    return blocks


def _side_by_side(ctx: ReportContext) -> list[Block]:
    from attnwh.sql.restriction import DEFAULT_LOSS_BUDGET

    budget = {"budget": DEFAULT_LOSS_BUDGET}
    measures, models = side_by_side_charts.whole_models(ctx.query("models_side_by_side", bins=1, **budget))
    if len(models) < 2:
        return [
            NoteBlock(
                "chart-models-by-depth",
                "This report covers one model: read another on the same text and probes (`attnwh ingest`, "
                "`attnwh ingest roles`, `attnwh ingest restriction` with its --model) to compare them here by "
                "relative depth and per key/value group; query models_side_by_side.",
            )
        ]
    rows = [
        [[m["name"], m["model"]] if m["model"] != m["name"] else [m["model"]], m["shape"], *m["cells"].values()]
        for m in models
    ]
    return [
        TableBlock(
            "table-models-side-by-side",
            "Each model whole, one value per run: the mean first-token share of its heads (statistics runs); the "
            "share of its heads whose first-token share exceeds 0.3 (sink heads, Gu et al. 2025); the share of "
            "(example, layer) pairs holding an entry |h| > 100 and > 1000 × the median (massive activations, Sun "
            "et al. 2024); the largest mean induction score of a head (Olsson et al. 2022); the share of heads whose "
            "retrieval score exceeds 0.1 (retrieval heads, Wu et al. 2025); the share of key/value groups that keep "
            f"the whole context in the restriction plan at a loss budget of {DEFAULT_LOSS_BUDGET} nats per token. "
            "Query models_side_by_side with bins = 1.",
            ("model", "shape", *(side_by_side_charts.MEASURES[m] for m in measures)),
            rows,
        ),
        ChartBlock(
            "chart-models-by-depth",
            "The same measures layer by layer, placed at each layer's relative depth (layer / layers), so models "
            "of different depth meet where they are equally deep: a line per model and run. The legend is the "
            "model selector: click a model to show it alone, shift-click to add others, click the legend's "
            "background to show all again. Query models_side_by_side with by = 'layer' (by = 'depth' bins it).",
            side_by_side_charts.by_depth(ctx.query("models_side_by_side", by="layer", **budget)),
        ),
        ChartBlock(
            "chart-models-by-group",
            "Per key/value group, the unit a KV cache is kept for under grouped-query attention: each model's "
            "groups (G0, G1, …) as strips across its relative depth, one cell per layer, for the measures a group "
            "has (its query heads' first-token share, sink heads, strongest induction head, retrieval heads; "
            "whether the restriction plan keeps it whole). Query models_side_by_side with by = 'group'.",
            side_by_side_charts.by_group(ctx.query("models_side_by_side", by="group", **budget)),
        ),
    ]


def _provenance(ctx: ReportContext) -> list[Block]:
    runs = ctx.query("run_provenance")
    rows = []
    for r in runs.iter_rows(named=True):
        versions = ", ".join(f"{k} {v}" for k, v in json.loads(r["versions"] or "{}").items())
        limit = "all" if r["example_limit"] is None else f"limit {r['example_limit']}, seed {r['seed']}"
        rows.append(
            [
                [str(r["run_id"]), r["kind"]],
                [
                    r["model"],
                    f"{r['family']} · {r['architecture']}",
                    f"{r['num_layers']} layers × {r['num_heads']} heads",
                    *(
                        [f"layers without softmax attention (no maps): {r['other_layers']}"]
                        if r["other_layers"]
                        else []
                    ),
                    f"weights {r['weights_hash']}" + (f" · revision {r['revision']}" if r["revision"] else ""),
                ],
                [f"{r['dataset']} · {r['task']} · {r['split']}", r["source"]],
                [
                    f"{r['n_examples']} examples ({limit})",
                    # fine-tuning runs keep no per-example token counts
                    *([f"mean {r['mean_tokens']} tokens"] if r["mean_tokens"] is not None else []),
                    f"{r['n_truncated']} truncated at {r['max_length']}",
                ],
                [f"{r['device']} · {r['dtype']} · batch {r['batch_size']}", r["command"] or ""],
                [versions],
                [r["status"], f"{r['seconds']} s" if r["seconds"] is not None else ""],
                [
                    f"started {r['started_at']:%Y-%m-%d %H:%M}",
                    f"finished {r['finished_at']:%Y-%m-%d %H:%M}" if r["finished_at"] else "not finished",
                ],
                [_clip(r["sample_text"] or "", 120)],
            ]
        )
    return [
        TableBlock(
            "table-provenance",
            "Every run behind this page: the checkpoint (name, weights hash), the data (source, split, sample), "
            "size and settings, software versions and dates; query run_provenance.",
            ("run", "model", "data", "size", "settings", "versions", "status", "date", "first example"),
            rows,
        )
    ]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _relations_dependencies(ctx: ReportContext) -> list[Block]:
    return [
        ChartBlock(
            "chart-relations-dependencies",
            "Heads that track dependency relations (Clark et al. Table 2): per relation (the most frequent 15 of "
            "each run, most frequent on top), the accuracy of the single best head at pointing from the dependent to "
            "its head (blue) and from the head to the dependent (orange), next to each direction's best fixed-offset "
            "baseline (dark diamonds: the other end is always k words away); word-level attention, [CLS]/[SEP] "
            "excluded. On a decoder a word sees only earlier words: each direction counts only the dependencies "
            "whose other end comes first, and the first token, the sink, is no word; query dependency_heads.",
            charts.dependency_heads(ctx.query("dependency_heads")),
        )
    ]


def frame_coverage_text(coverage: pl.DataFrame) -> str:
    """'Run 5 rests on 21 of 2,272 annotations read (24 kept by the filters; sentences of at
    most 12 words, elements of at most 3, linked words at least 2 apart).', one per run."""
    sentences = []
    for r in coverage.iter_rows(named=True):
        sentences.append(
            f"Run {r['run_id']} rests on {r['measured']:,} of the {r['annotations_read']:,} annotations read "
            f"({r['kept']:,} kept by the filters: sentences of at most {r['max_sentence_words']} words, elements "
            f"of at most {r['max_element_words']}, linked words at least {r['min_distance']} apart)."
        )
    return " ".join(sentences)


def _relations_frames(ctx: ReportContext) -> list[Block]:
    coverage = ctx.query("frame_coverage")
    return [
        ChartBlock(
            "chart-relations-frames",
            "Heads that link frame-evoking words to their frame elements (Kovaleva et al. §4.2, FrameNet 1.7): per "
            "layer and head, the mean over annotations of the largest word-level attention on a target–element link, "
            "in either direction; outlined: heads above the 99th percentile of all heads. "
            + (frame_coverage_text(coverage) + " " if coverage.height else "")
            + "Queries frame_heads and frame_coverage.",
            charts.frame_heads(ctx.query("frame_heads")),
        )
    ]


def _relations_features(ctx: ReportContext) -> list[Block]:
    return [
        ChartBlock(
            "chart-relations-features",
            "Attention to feature words (Kovaleva et al. §4.4): per feature, layer and head, the mean over sentences "
            "of the largest attention a feature word receives (mean over the sentence's words, word level), divided "
            "by what a head attending evenly to every token would give; nouns and verbs from UPOS, subjects (nsubj) "
            "and objects (obj, iobj) from the CoNLL-U deprels, negation from a 17-word list; query feature_attention.",
            charts.feature_attention(ctx.query("feature_attention")),
        )
    ]


# Said wherever a decoder's pattern types are shown (findings, the pattern sections).
DECODER_PATTERN_NOTE = (
    "This model is a decoder: its types come from a classifier trained on encoders' maps and are not "
    "validated against people's labels on decoders' (triangular) maps; read them as a rough guide."
)


def _decoder_patterns(ctx: ReportContext) -> str:
    """The note on decoders' pattern types ("Runs 1 and 4 are decoders': …"), or "" when the
    report covers no decoder's run."""
    runs = ctx.query("run_models").filter(pl.col("causal"), pl.col("kind") == "statistics")["run_id"].to_list()
    if not runs:
        return ""
    which = f"Run {runs[0]} is a decoder's" if len(runs) == 1 else f"Runs {_and(runs)} are decoders'"
    return f"{which}: their types come from a classifier trained on encoders' maps and are not validated " + (
        "against people's labels on decoders' (triangular) maps; read them as a rough guide. "
    )


def _and(items: list) -> str:
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _pattern_types(ctx: ReportContext) -> list[Block]:
    return [
        ChartBlock(
            "chart-pattern-types",
            _decoder_patterns(ctx)
            + "Share of each attention pattern type (Kovaleva et al. Fig. 1–2) among a run's (example, layer, head) "
            "maps; types as stored in head_stats: at ingest by attnwh's classifier trained on hand labels of real "
            "maps (docs/pattern_labels.md), from features of each map computed during ingest, or by the rules "
            "after `attnwh patterns reclassify --classifier rules`; the tooltips give each share's 95 % bootstrap "
            "interval over the run's examples; query pattern_frequency.",
            charts.pattern_frequency(_lineage(ctx, ctx.query("pattern_frequency"))),
        ),
        ChartBlock(
            "chart-pattern-layers",
            "The same shares per layer, one panel per run; query pattern_by_layer.",
            charts.pattern_layers(_lineage(ctx, ctx.query("pattern_by_layer"))),
        ),
    ]


def _pattern_gallery(ctx: ReportContext) -> list[Block]:
    return [
        ChartBlock(
            "chart-pattern-gallery",
            _decoder_patterns(ctx)
            + "Stored maps of each type (rows = queries, columns = keys, [CLS] at the top left), each pooled to "
            "16 × 16 and scaled to its largest cell: the most typical (the largest margin among maps of 12 to 64 "
            "tokens: the classifier that gave the types was surest), a second one where the margin is at least "
            "0.8, and the two most borderline (the smallest). Under each map its run, "
            "layer (L), head (H), number of tokens n and the start of its tokens (kept for examples of at most 64 "
            "tokens, or --map-tokens); hover a cell for the query and key tokens it pools, the rules' scores V, D, B and the margin; "
            "query pattern_gallery.",
            charts.pattern_gallery(ctx.query("pattern_gallery")),
        )
    ]


def _massive(ctx: ReportContext) -> list[Block]:
    frame = _lineage(ctx, ctx.query("massive_activations"))
    return [
        chart_or_note(
            "chart-massive-activations",
            "Massive activations (Sun et al. 2024): per layer and hidden dimension, the share of the run's examples "
            "in which the layer's output has an entry with |h| > 100 and > 1000 × the median |h| of that output over "
            "the example's real tokens, counted among the 8 largest entries stored per example and layer; only "
            "dimensions that are ever massive get a column, and only layers that ever have one a row. The letter "
            "names the token kind holding most of the cell's entries (C [CLS], S [SEP], P punctuation, O other), the "
            "tooltip every kind; query massive_activations."
            + (" On a decoder's run F names its first token, in [CLS]'s place." if has_decoders(ctx) else ""),
            frame,
            charts.massive_activations,
            "No massive activations found (Sun et al. 2024): none of the 8 largest hidden-state entries stored per "
            "example and layer of these runs has |h| > 100 and > 1000 × the median |h| of its layer's output, so "
            "there is nothing to draw (a model with random or small weights has none); query massive_activations.",
        )
    ]


def _context_mixing(ctx: ReportContext) -> list[Block]:
    frame = _kind(ctx, _lineage(ctx, ctx.query("mixing_by_layer")))
    return [
        ChartBlock(
            "chart-context-mixing",
            "How much of each layer's attention output comes from [CLS], [SEP] and punctuation, through four lenses: "
            "the attention weight, the weight scaled by the norm of the head's transformed value (Kobayashi et al. "
            "2020), the share of the heads' terms once the residual and the LayerNorm are counted (Kobayashi et al. "
            "2021; 'whole block' includes every head and the residual, so [CLS] also counts the [CLS] row's own "
            "residual), and value zeroing (Mohebbi et al. 2023; runs ingested with --value-zeroing layer only). Means "
            "over the run's examples and the layer's heads; pre-LN models have no LayerNorm lenses; query "
            "mixing_by_layer, per head head_lenses.",
            mixing_charts.context_mixing(frame),
        ),
        ChartBlock(
            "chart-mixing-ratio",
            "Mixing ratio per layer (solid), as Kobayashi et al. (2021) define it: for each token, the norm of what "
            "the other tokens contribute to its post-LayerNorm attention output, summed as vectors, over that plus "
            "the norm of its own contribution (residual included), m / (m + p); and the residual's share of the "
            "terms' norms (dashed). Kobayashi et al. found that the residual dominates in BERT, so each layer "
            "mixes little. Runs stored before migration 14 have no ratio (ingest them again with --replace); "
            "query mixing_by_layer, which also gives the larger share of summed norms (mixing_share).",
            mixing_charts.mixing_ratio(frame),
        ),
    ]


def _head_roles(ctx: ReportContext) -> list[Block]:
    means = ctx.query("head_roles")
    if not means.height:  # the report's --model has no head-roles run
        return [
            NoteBlock(
                "chart-head-roles",
                "None of the models this report covers has a head-roles run: `attnwh ingest roles --model DECODER` "
                "adds one; query head_roles.",
            )
        ]
    top = ctx.query("head_roles_top", top=TOP_ROLE_HEADS)
    share = retrieval_share_text(means)
    return [
        ChartBlock(
            "chart-head-roles",
            "Each decoder head's role scores on probe inputs (`attnwh ingest roles`), per layer (rows) and head "
            "(columns), a row of heatmaps per head-roles run, each with its own colour scale from 0 to its largest "
            "mean over the run's probes (retrieval's at least to 0.2): previous token, the mean weight on the token just before (the heads that "
            "feed induction heads, Olsson et al. 2022); induction, on m random tokens repeated, the mean weight from "
            "each repeated token to the token that followed its first occurrence (Olsson et al. 2022); duplicate "
            "token, the weight on that first occurrence itself; retrieval, on a needle sentence hidden in a "
            "haystack of text with the answer teacher-forced, the share of the needle's tokens that a head copies "
            "by putting its largest weight on them (Wu et al. 2025; heads above 0.1, Wu et al.'s retrieval heads, "
            "outlined in red); sink, the mean weight on the first token (Xiao et al. 2023); local mass, the mean "
            "weight on the last W tokens (role_settings.local_window). "
            + share
            + "Click a head for its panel; query head_roles, definitions in docs/metrics.md#head-roles.",
            role_charts.head_roles(means),
        ),
        _top_role_heads(top),
    ]


# Heads per role in the top-heads tables.
TOP_ROLE_HEADS = 5
# The roles of the top-heads tables (the report's and the roles results page's), each on the
# probes it is read on (Olsson et al.'s three on repeated random tokens, Wu et al.'s retrieval
# on needles), with their words.
TOP_ROLES: dict[tuple[str, str], str] = {
    ("induction", "induction"): "induction",
    ("induction", "previous_token"): "previous token",
    ("induction", "duplicate"): "duplicate token",
    ("needle", "retrieval"): "retrieval",
}


def retrieval_share_text(means: pl.DataFrame) -> str:
    """'Run 3: 21 of 270 heads (7.8 %) have a retrieval score above 0.1. ', one sentence per
    needle run of a `head_roles` frame; empty without one."""
    sentences = []
    needles = means.filter(pl.col("retrieval").is_not_null())
    for (run_id,), heads in needles.group_by("run_id", maintain_order=True):
        above = heads.filter(pl.col("retrieval") > role_charts.RETRIEVAL_THRESHOLD).height
        sentences.append(
            f"Run {run_id}: {above} of {heads.height} heads ({100 * above / heads.height:.1f} %) have a retrieval "
            f"score above {role_charts.RETRIEVAL_THRESHOLD:g}. "
        )
    return "".join(sentences)


def _top_role_heads(top: pl.DataFrame) -> TableBlock:
    rows, links = [], []
    for r in top.iter_rows(named=True):
        role = TOP_ROLES.get((r["probe"], r["score"]))
        if role is None:
            continue
        rows.append(
            [
                [f"run {r['run_id']}", r["model"].split("/")[-1]],
                [role],
                [str(r["rank"])],
                [str(r["layer"])],
                [str(r["head"])],
                ["–" if r["kv_group"] is None else str(r["kv_group"])],
                [f"{r['value']:.3f}", f"mean of {r['probes']} {r['probe']} probes"],
            ]
        )
        links.append(f"#head-{r['layer']}-{r['head']}")
    return TableBlock(
        "table-head-roles-top",
        f"The top {TOP_ROLE_HEADS} heads of each role (ties share a rank), each role on its own probes: induction, "
        "previous token and duplicate token on the repeated random tokens, retrieval on the needles; KV group: "
        "the key/value head the query head reads under grouped-query attention (its KV cache). The head number "
        "opens the head's panel, with its scores in every run and, under Examples, the probes on which it "
        "scores highest (their maps: `attnwh show --run R --example E`); query head_roles_top.",
        ("run", "role", "rank", "layer", "head", "KV group", "mean score"),
        rows,
        tuple(links),
        link_column=4,
    )


# Order of the page. Sections without `build` wait for the command that writes their tables;
# their table names are placeholders for that command to settle, not a schema.
SECTIONS: tuple[Section, ...] = (
    Section(
        "special-tokens",
        "Attention to [CLS], [SEP] and punctuation",
        ("head_stats", "runs", "models"),
        "attnwh ingest",
        _special_tokens,
        {
            "decoders": "Attention to the first token and punctuation",
            "both": "Attention to [CLS], [SEP], the first token and punctuation",
        },
    ),
    Section("attention-sinks", "Attention sinks", ("head_stats", "runs", "models"), "attnwh ingest", _sinks),
    Section(
        "context-mixing",
        "Context mixing: beyond attention weights",
        ("head_stats", "layer_mixing"),
        "attnwh ingest",
        _context_mixing,
    ),
    Section("pattern-types", "Pattern types per task", ("head_patterns",), "attnwh ingest", _pattern_types),
    Section(
        "pattern-gallery",
        "Pattern gallery",
        ("head_patterns", "pattern_thumbnails"),
        "attnwh ingest --thumbnails N",
        _pattern_gallery,
    ),
    Section("massive-activations", "Massive activations", ("massive_activations",), "attnwh ingest", _massive),
    Section("finetuning", "Fine-tuning runs", ("finetunes", "runs", "models"), "attnwh finetune", _finetunes),
    Section(
        "finetuning-change",
        "Change through fine-tuning per layer and head",
        ("attention_change",),
        "attnwh ingest compare",
        _finetune_change,
    ),
    Section(
        "relations-dependencies",
        "Heads that track linguistic relations: dependencies",
        ("dependency_heads", "dependency_baselines"),
        "attnwh ingest relations --conllu FILE",
        _relations_dependencies,
    ),
    Section(
        "relations-frames",
        "Heads that track linguistic relations: frame links",
        ("frame_heads",),
        "attnwh ingest relations --framenet FILE",
        _relations_frames,
    ),
    Section(
        "relations-features",
        "Heads that track linguistic relations: feature words",
        ("feature_attention",),
        "attnwh ingest relations --conllu FILE",
        _relations_features,
    ),
    Section(
        "head-roles",
        "Head roles of decoders: previous-token, induction, duplicate and retrieval heads",
        ("head_roles", "runs", "models"),
        "attnwh ingest roles --model DECODER",
        _head_roles,
    ),
    Section(
        "ablation",
        "Disabling heads and layers",
        ("ablations", "ablation_configs"),
        "attnwh ingest ablation --model FINETUNED",
        _ablation,
    ),
    Section(
        "importance",
        "Head importance against the effect of disabling",
        ("ablations", "head_importance"),
        "attnwh ingest ablation --model FINETUNED",
        _importance,
    ),
    Section(
        "sinks-vs-ablation",
        "Sink heads against the effect of disabling them",
        ("ablations", "ablation_configs", "head_stats"),
        "attnwh ingest ablation --model FINETUNED",
        _sinks_vs_ablation,
    ),
    Section(
        "whole-context",
        "Which heads need the whole context",
        ("restriction_plan", "restriction_groups"),
        "attnwh ingest restriction --model DECODER",
        _whole_context,
    ),
    Section(
        "models-side-by-side",
        "Models side by side",
        ("runs", "models"),
        "attnwh ingest --model ANOTHER",
        _side_by_side,
    ),
    Section("provenance", "Provenance", ("runs", "models"), "attnwh ingest", _provenance),
)


def tables_with_rows(con: duckdb.DuckDBPyConnection, names: set[str]) -> set[str]:
    """Those of `names` that exist in the warehouse and hold at least one row."""
    existing = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    found = set()
    for name in sorted(names & existing):
        # Names come from the registry above, never from the user; quoted all the same.
        if con.execute(f'SELECT EXISTS (SELECT 1 FROM "{name}")').fetchall()[0][0]:
            found.add(name)
    return found


def render_sections(ctx: ReportContext, sections: tuple[Section, ...] = SECTIONS) -> list[RenderedSection]:
    """Build every section whose tables hold rows; the others get their note. Each section
    carries the title that fits the runs the report covers (`Section.title_for`)."""
    available = tables_with_rows(ctx.con, {t for s in sections for t in s.tables})
    rendered = []
    for section in sections:
        section = replace(section, title=section.title_for(ctx), titles={}) if section.titles else section
        missing = [t for t in section.tables if t not in available]
        if missing:
            note = f"No data for this section yet: run `{section.produced_by}` to add this section."
            rendered.append(RenderedSection(section, note=note))
            continue
        blocks = section.build(ctx)
        if blocks and all(isinstance(b, NoteBlock) for b in blocks):
            # Nothing to draw: the section counts as one without data, its sentences as its note.
            note = " ".join(b.text for b in blocks if isinstance(b, NoteBlock))
            rendered.append(RenderedSection(section, note=note, looked=True))
        else:
            rendered.append(RenderedSection(section, blocks=blocks))
    return rendered
