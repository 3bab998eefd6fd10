"""The findings at the top of the report: a few sentences per model and task, each number a
link to the section that shows where it comes from.

Every number is computed by a named query (findings_finetune, findings_ablation,
findings_change, findings_patterns, findings_roles, and sink_vs_ablation's per-run columns); this module only
groups their rows by model and task and words them. A finding whose query returns nothing (for the report's filters) is left
out, and one line names what is missing and the command that adds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from attnwh.reports.sections import DECODER_PATTERN_NOTE, SECTIONS, ReportContext, Section, has_decoders


@dataclass(frozen=True)
class Piece:
    """A run of text; `href` (`#section-…`) makes it a link to the section behind it."""

    text: str
    href: str | None = None


@dataclass(frozen=True)
class Finding:
    """One sentence, as pieces of text of which the numbers are links."""

    pieces: tuple[Piece, ...]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


@dataclass(frozen=True)
class FindingGroup:
    """The findings of one model on one task."""

    model: str
    task: str
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class Findings:
    """The summary: groups by model and task, and a line naming what has no data yet."""

    groups: tuple[FindingGroup, ...] = ()
    missing: str | None = None

    def all(self) -> list[Finding]:
        return [f for g in self.groups for f in g.findings]


@dataclass(frozen=True)
class _Source:
    """A named query, the section its numbers link to, and what it gives, for the note.
    `needs`: a source without whose rows this one's absence goes unsaid (the note already
    names that command); `command`: what adds the rows, when not the section's command."""

    query: str
    section: str
    what: str
    needs: str | None = None
    command: str | None = None
    # Said missing only where the report covers a decoder's run (head roles are decoders').
    decoders_only: bool = False


_SOURCES = (
    _Source("findings_finetune", "finetuning", "the fine-tuned scores"),
    _Source("findings_ablation", "ablation", "the ablation baselines and significant heads and layers"),
    _Source(
        "sink_vs_ablation",
        "sinks-vs-ablation",
        "the sink heads against the effect of disabling them",
        needs="findings_ablation",
        command="attnwh ingest --model FINETUNED on the ablation's examples",
    ),
    _Source("findings_change", "finetuning-change", "the layers that changed most through fine-tuning"),
    _Source("findings_patterns", "pattern-types", "the pattern shares"),
    _Source("findings_roles", "head-roles", "the decoder head roles", decoders_only=True),
)
# The findings group of a model's head-roles runs (whose runs.task is a probe kind).
ROLES_GROUP = "head roles"

_METRIC_WORDS = {
    "accuracy": "accuracy",
    "f1": "F1",
    "mcc": "Matthews correlation",
    "pearson": "Pearson correlation",
    "spearman": "Spearman correlation",
}
_PATTERNS = (
    ("vertical", "vertical"),
    ("diagonal", "diagonal"),
    ("vertical_diagonal", "vertical+diagonal"),
    ("block", "block"),
    ("heterogeneous", "heterogeneous"),
)


class _Sentence:
    """Builds one Finding: `text` adds plain words, `number` a linked number."""

    def __init__(self, href: str | None) -> None:
        self.href = href
        self.pieces: list[Piece] = []

    def text(self, words: str) -> _Sentence:
        if not words:
            return self
        if self.pieces and self.pieces[-1].href is None:
            self.pieces[-1] = Piece(self.pieces[-1].text + words)
        else:
            self.pieces.append(Piece(words))
        return self

    def number(self, value: str) -> _Sentence:
        self.pieces.append(Piece(value, self.href))
        return self

    def count(self, n: int, noun: str) -> _Sentence:
        """'3 heads', the number linked."""
        return self.number(f"{n:,}").text(f" {noun}{'' if n == 1 else 's'}")

    def done(self) -> Finding:
        return Finding(tuple(self.pieces))


def build_findings(ctx: ReportContext, sections: tuple[Section, ...] = SECTIONS) -> Findings:
    """The findings for the report's filters; numbers link to those of `sections` the page
    has (a section left out of the page gets no links)."""
    on_page = {s.id for s in sections}
    by_key: dict[tuple[str, str], list[tuple[int, Finding]]] = {}
    missing = []
    empty = set()
    for order, source in enumerate(_SOURCES):
        rows = ctx.query(source.query).to_dicts()
        if not rows:
            empty.add(source.query)
            if source.needs not in empty and (not source.decoders_only or has_decoders(ctx)):
                missing.append(source)
            continue
        href = f"#section-{source.section}" if source.section in on_page else None
        for key, finding in _WORDING[source.query](rows, href):
            by_key.setdefault(key, []).append((order, finding))
    groups = tuple(
        FindingGroup(model, task, tuple(f for _, f in sorted(found, key=lambda item: item[0])))
        for (model, task), found in sorted(by_key.items())
    )
    return Findings(groups, _missing_line(missing))


def _missing_line(missing: list[_Source]) -> str | None:
    if not missing:
        return None
    commands = {s.id: s.produced_by for s in SECTIONS}
    parts = [f"{s.what} (run `{s.command or commands[s.section]}`)" for s in missing]
    return "No data yet for " + _join(parts) + "."


def _finetune(rows: list[dict], href: str | None) -> Iterable[tuple[tuple[str, str], Finding]]:
    runs: dict[int, list[dict]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r)
    for run_id, scored in runs.items():
        r = scored[0]
        s = _Sentence(href)
        if r["from_scratch"]:
            s.text(f"Trained from random weights with the architecture of {r['base_model'] or '?'} on ")
        else:
            s.text(f"Fine-tuned from {r['base_model'] or '?'} on ")
        s.number(f"{r['train_examples']:,}").text(" training examples for ").number(f"{r['epochs']:g}")
        s.text(" epochs at learning rate ").number(f"{r['learning_rate']:g}").text(" (fine-tuning run ")
        s.number(str(run_id)).text("): ")
        scores = [x for x in scored if x["metric"] is not None]
        if not scores:
            s.text("no score was stored.")
        else:
            for i, x in enumerate(scores):
                s.text(", " if i else "").text(f"{_metric(x['metric'])} ").number(f"{x['value']:.3f}")
            # The scores come from the evaluation split; runs.split is the training split.
            split = f"{r['eval_split']} split" if r["eval_split"] else "evaluation split"
            s.text(" on ").number(f"{scores[0]['n_examples']:,}").text(f" examples ({split}).")
        yield (r["model"], r["task"]), s.done()


def _ablation(rows: list[dict], href: str | None) -> Iterable[tuple[tuple[str, str], Finding]]:
    for r in rows:
        key = (r["model"], r["task"])
        metric = _metric(r["metric"])
        s = _Sentence(href).text(f"With nothing disabled, {metric} is ").number(f"{r['baseline']:.3f}")
        s.text(" on ").number(f"{r['n_examples']:,}").text(f" examples ({r['split']} split; ablation run ")
        s.number(str(r["run_id"])).text(f", {r['mode']} mode).")
        yield key, s.done()
        if not r["tests"]:  # a run that stored no single head or layer yet: nothing was tested
            continue
        yield key, _significance(r, metric, href)
        yield key, _detectable(r, metric, href)


def _significance(r: dict, metric: str, href: str | None) -> Finding:
    heads, layers = r["heads_significant"], r["layers_significant"]
    s = _Sentence(href)
    after = " after Benjamini–Hochberg correction"
    if not heads and not layers:
        s.text(f"No head or layer changed {metric} significantly{after} (")
        s.count(r["heads_tested"], "head").text(" and ").count(r["layers_tested"], "layer").text(" tested).")
        return s.done()
    if heads:
        s.number(f"{heads:,}").text(" of ").count(r["heads_tested"], "head")
    if heads and layers:
        s.text(" and ")
    if layers:
        s.number(f"{layers:,}").text(" of ").count(r["layers_tested"], "layer")
    s.text(f" changed {metric} significantly{after} (adjusted p < 0.05)")
    if not layers:
        s.text("; no layer did (").count(r["layers_tested"], "layer").text(" tested)")
    elif not heads:
        s.text("; no head did (").count(r["heads_tested"], "head").text(" tested)")
    raised = [(n, w) for n, w in ((r["heads_raised"], "head"), (r["layers_raised"], "layer")) if n]
    lowered = [(n, w) for n, w in ((r["heads_lowered"], "head"), (r["layers_lowered"], "layer")) if n]
    clauses = [(f"raised {metric}", raised)] if raised else []
    if lowered:
        clauses.append(("lowered it" if raised else f"lowered {metric}", lowered))
    s.text(". Disabling ")
    for i, (verb, counted) in enumerate(clauses):
        s.text(" and " if i else "").text(f"{verb} for ")
        for j, (n, word) in enumerate(counted):
            s.text(" and " if j else "").count(n, word)
    return s.text(".").done()


def _detectable(r: dict, metric: str, href: str | None) -> Finding:
    n, tests = r["n_examples"], r["tests"]
    s = _Sentence(href)
    if r["test"] == "mcnemar-exact":
        if r["detect_delta"] is None:
            s.text("With ").number(f"{n:,}").text(f" examples no change of {metric} can be significant: the exact ")
            s.text("McNemar test needs at least ").number(str(r["detect_k"]))
            return s.text(" examples changing one way (p < 0.05).").done()
        s.text("With ").number(f"{n:,}").text(f" examples the exact McNemar test can show a change of {metric} of ")
        s.number(f"{r['detect_delta']:.3f}").text(" at the least (").number(str(r["detect_k"]))
        s.text(" examples changing one way, p < 0.05); one head or layer standing alone among the ")
        s.count(tests, "test")
        if r["detect_delta_alone"] is None:
            s.text(" cannot survive the correction with this sample (it would need ")
            return s.number(str(r["detect_k_alone"])).text(" examples changing one way).").done()
        s.text(" needs ").number(f"{r['detect_delta_alone']:.3f}").text(" (")
        return s.number(str(r["detect_k_alone"])).text(" examples) to survive the correction.").done()
    if r["test"] == "permutation":
        s.text(f"{metric[0].upper()}{metric[1:]} is tested by a paired permutation test with ")
        s.number(f"{r['n_resamples']:,}").text(" permutations, whose smallest possible p is ")
        s.number(f"{r['min_p']:.3g}").text(
            ", so the smallest change it can detect depends on the predictions, not on the number of examples "
            "alone; one head or layer standing alone among the "
        )
        s.count(tests, "test").text(" needs p < ").number(f"{r['p_alone']:.3g}").text(" to survive the correction, ")
        can = "can" if r["alone_possible"] else "cannot"
        return s.text(f"which these permutations {can} give.").done()
    return s.text(f"The smallest detectable change of {metric} is not known for the test {r['test']!r}.").done()


def _sinks(rows: list[dict], href: str | None) -> Iterable[tuple[tuple[str, str], Finding]]:
    """One sentence per ablation run from its first sink_vs_ablation row (the per-run columns
    repeat on every head's row)."""
    seen = set()
    for r in rows:
        if r["run_id"] in seen:
            continue
        seen.add(r["run_id"])
        metric = _metric(r["metric"])
        s = _Sentence(href).number(f"{r['sink_heads']:,}").text(" of ").count(r["heads"], "head")
        # A decoder's run has no [SEP]: its sink candidates are its first token and punctuation.
        targets = "the first token or punctuation" if r["to_sep"] is None else "[CLS], [SEP] or punctuation"
        s.text(f" are sink heads (mean attention to {targets} above ").number(f"{r['eps']:g}")
        s.text(" on the ablation's examples, statistics run ").number(str(r["statistics_run"])).text("). ")
        if r["spearman"] is None:
            s.text(f"Sink score and the change in {metric} when a head is disabled cannot be correlated: every ")
            s.text("head has the same score or the same change")
        else:
            s.text(f"Across the heads, Spearman's ρ between sink score and the change in {metric} when the head is ")
            s.text("disabled is ").number(f"{r['spearman']:.3f}")
            if r["spearman_low"] is not None:
                s.text(" (percentile bootstrap interval over the heads ").number(f"{r['spearman_low']:.3f}")
                s.text(" to ").number(f"{r['spearman_high']:.3f}").text(")")
        if r["sinks_delta"] is not None:
            s.text(f"; disabling all of them together changed {metric} by ").number(f"{r['sinks_delta']:.4f}")
            s.text(" (p ").number(f"{r['sinks_p_value']:.3g}").text(", unadjusted)")
        s.text(" (ablation run ").number(str(r["run_id"])).text(").")
        yield (r["model"], r["task"]), s.done()


def _change(rows: list[dict], href: str | None) -> Iterable[tuple[tuple[str, str], Finding]]:
    for r in rows:
        s = _Sentence(href).text(f"Through fine-tuning from {r['base']}, attention changed most in layer ")
        s.number(str(r["changed_layer"])).text(" (layers 0–").number(str(r["last_layer"])).text("; mean cosine ")
        s.number(f"{r['changed_cosine']:.3f}").text(" between the two models' maps over ")
        s.number(f"{r['examples']:,}").text(f" examples, {r['split']} split) and least in layer ")
        s.number(str(r["steady_layer"])).text(" (").number(f"{r['steady_cosine']:.3f}").text("); compare run ")
        yield (r["tuned"], r["task"]), s.number(str(r["run_id"])).text(".").done()


def _patterns(rows: list[dict], href: str | None) -> Iterable[tuple[tuple[str, str], Finding]]:
    for r in rows:
        s = _Sentence(href).text("Pattern types of the ").number(f"{r['maps']:,}")
        s.text(" maps of statistics run ").number(str(r["run_id"])).text(f" ({r['split']} split): ")
        for i, (column, name) in enumerate(_PATTERNS):
            s.text(", " if i else "").text(f"{name} ").number(f"{100 * r[column]:.1f}\u00a0%")
        s.text(".")
        if r.get("causal"):
            s.text(" " + DECODER_PATTERN_NOTE)
        yield (r["model"], r["task"]), s.done()


# Each role without a threshold: its words and the paper that named it.
_ROLE_WORDS = {
    "induction": ("induction", "Olsson et al. 2022"),
    "previous_token": ("previous-token", "Olsson et al. 2022"),
    "duplicate": ("duplicate-token", "Wang et al. 2022"),
}


def _roles(rows: list[dict], href: str | None) -> Iterable[tuple[tuple[str, str], Finding]]:
    """Per head-roles run, one sentence per role: the top heads by mean score ('L18H6 0.903'),
    and for retrieval how many heads pass Wu et al.'s threshold."""
    for r in rows:
        s = _Sentence(href).text("On ").number(f"{r['probes']:,}").text(f" {r['probe']} probes (head-roles run ")
        s.number(str(r["run_id"])).text(")")
        if r["threshold"] is not None:
            share = 100 * r["above"] / r["heads"] if r["heads"] else 0.0
            s.text(", ").number(f"{r['above']:,}").text(" of ").count(r["heads"], "head").text(" (")
            s.number(f"{share:.1f}\u00a0%").text(f") are {r['role']} heads, with a mean {r['role']} score above ")
            s.number(f"{r['threshold']:g}").text(" (Wu et al. 2025); the highest: ")
        else:
            words, paper = _ROLE_WORDS.get(r["role"], (r["role"], "docs/metrics.md#head-roles"))
            s.text(f", the top {words} heads by mean score ({paper}): ")
        for i, head in enumerate(r["top"]):
            s.text(", " if i else "").number(f"L{head['layer']}H{head['head']} {head['value']:.3f}")
        yield (r["model"], ROLES_GROUP), s.text(".").done()


_WORDING = {
    "findings_finetune": _finetune,
    "findings_ablation": _ablation,
    "sink_vs_ablation": _sinks,
    "findings_change": _change,
    "findings_patterns": _patterns,
    "findings_roles": _roles,
}


def _metric(name: str) -> str:
    return _METRIC_WORDS.get(name, name)


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
