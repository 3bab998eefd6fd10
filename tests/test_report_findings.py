"""The findings at the top of the report (reports/findings.py, queries findings_*): every number
recomputed from the raw tables with polars, numpy and scipy, "none" said plainly, the smallest
detectable change checked against scipy's binomial test, links that land on the page, escaping,
filters, and a note instead of the findings whose data is absent."""

from __future__ import annotations

import math
import re
import shutil
import sys
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from scipy import stats
from sklearn.metrics import f1_score

from attnwh.reports.build import build_report, write_html
from attnwh.reports.findings import Findings, build_findings
from attnwh.reports.sections import SECTIONS, ReportContext
from attnwh.sql import warehouse
from attnwh.sql.queries import get_query, run_query
from helpers import ingest_args, pair_args, write_pairs

QUERIES = ("findings_finetune", "findings_ablation", "findings_change", "findings_patterns")
BASE = "<b>base</b> & co"  # a model name that is markup, to be shown as text
TUNED = "synthetic/tuned"
NBSP = "\u00a0"
ABLATION_COMMAND = "attnwh ingest ablation --model FINETUNED"


def _sql(db: Path, sql: str) -> pl.DataFrame:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.sql(sql).pl()


def _findings(db: Path, model: str | None = None, task: str | None = None) -> Findings:
    """What build_report puts at the top, without building the charts."""
    con = warehouse.connect(db, read_only=True)
    try:
        return build_findings(ReportContext(con, {"model": model, "task": task}))
    finally:
        con.close()


def _sentences(findings: Findings) -> dict[tuple[str, str], list[str]]:
    return {(g.model, g.task): [f.text for f in g.findings] for g in findings.groups}


def _one(texts: list[str], start: str) -> str:
    found = [t for t in texts if t.startswith(start)]
    assert len(found) == 1, (start, texts)
    return found[0]


def _smallest_k(m: int) -> int:
    """The fewest examples, all changing one way, whose exact McNemar p times m is < 0.05."""
    k = 1
    while stats.binomtest(k, k, 0.5).pvalue * m >= 0.05:
        k += 1
    return k


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """The synthetic warehouse (200 examples, 3 layers × 4 heads) whose second model is a
    tuned version of the first, with one fine-tuning run scored on two metrics."""
    from fixtures.synthetic_warehouse import _create_run, build_synthetic_warehouse

    db = tmp_path_factory.mktemp("findings") / "s.duckdb"
    build_synthetic_warehouse(db, models=(BASE, TUNED), examples=200, layers=3, heads=4)
    con = warehouse.connect(db)
    try:
        con.execute("UPDATE models SET base_model_id = 1, finetuned_task = 'sst2' WHERE model_id = 2")
        run_id = _create_run(con, "finetune", 2, "synthetic", "sst2", 200, 5, base_model_id=1)
        # Trained on the train split, scored on dev: the run row names the first, finetunes the second.
        con.execute("UPDATE runs SET split = 'train' WHERE run_id = ?", [run_id])
        con.execute(
            "INSERT INTO finetunes VALUES (?, false, 6920, 3, 2e-5, 0.1, 300.5, 0.1234, '/tmp/x', 'dev')", [run_id]
        )
        con.execute("INSERT INTO scores VALUES (?, 'accuracy', 0.9, 872), (?, 'f1', 0.875, 872)", [run_id, run_id])
    finally:
        con.close()
    return db


@pytest.fixture(scope="module")
def report(synthetic):
    return build_report(synthetic)


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    """A real `attnwh ingest ablation` sweep of a tiny classifier on an MRPC-like file (F1 by
    permutation test, accuracy by exact McNemar; 30 examples, 2 layers × 4 heads) and the
    same model's statistics, as tests/test_ablation_run.py builds them."""
    from attnwh import cli
    from tiny_models import make_sharp_classifier

    tmp = tmp_path_factory.mktemp("findings-real")
    model = make_sharp_classifier("bert", tmp / "sharp", 2, 4)
    data = write_pairs(tmp / "pairs.tsv", 30)
    db = tmp / "w.duckdb"
    sweep = ["ingest", "ablation", "--model", str(model), *pair_args(data, db, batch_size=8)]
    for argv in (
        [*sweep, "--task", "mrpc", "--resamples", "200", "--top-k", "2", "--no-importance"],
        [*ingest_args(model, data, db), "--task", "mrpc"],
    ):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys, "argv", ["attnwh", *argv])
            try:
                cli.main()
            except SystemExit as exc:
                assert not exc.code, exc.code
    return db


@pytest.fixture
def copy(synthetic, tmp_path):
    """A writable copy of the synthetic warehouse."""
    target = tmp_path / "copy.duckdb"
    shutil.copy(synthetic, target)
    return target


# ---------------------------------------------------------------- the queries


@pytest.mark.parametrize("name", QUERIES)
def test_queries_run_without_parameters(synthetic, tmp_path, name):
    empty = tmp_path / "empty.duckdb"
    warehouse.connect(empty).close()
    query = get_query(name)
    assert query.params == ("model", "task")
    for db, rows in ((empty, 0), (synthetic, None)):
        con = warehouse.connect(db, read_only=True)
        try:
            found = run_query(con, query).num_rows
        finally:
            con.close()
        assert found == rows if rows is not None else found > 0


def test_patterns_agree_with_pattern_frequency(synthetic):
    con = warehouse.connect(synthetic, read_only=True)
    try:
        wide = run_query(con, get_query("findings_patterns")).to_pylist()
        long = run_query(con, get_query("pattern_frequency")).to_pylist()
    finally:
        con.close()
    shares = {(r["run_id"], r["pattern"].replace("+", "_")): r["share"] for r in long}
    for row in wide:
        for column in ("vertical", "diagonal", "vertical_diagonal", "block", "heterogeneous"):
            assert row[column] == pytest.approx(shares[(row["run_id"], column)], abs=1e-12)


# ---------------------------------------------------------------- each number against the raw tables


def test_finetune_sentence(synthetic, report):
    raw = _sql(
        synthetic,
        "SELECT r.run_id, r.task, r.split, m.name AS model, b.name AS base, f.*, s.metric, s.value, s.n_examples "
        "FROM finetunes f JOIN runs r USING (run_id) JOIN models m ON m.model_id = r.model_id "
        "JOIN models b ON b.model_id = r.base_model_id JOIN scores s USING (run_id) ORDER BY s.metric",
    )
    first = raw.row(0, named=True)
    words = {"accuracy": "accuracy", "f1": "F1"}
    scores = ", ".join(f"{words[m]} {v:.3f}" for m, v in zip(raw["metric"], raw["value"]))
    expected = (
        f"Fine-tuned from {first['base']} on {first['train_examples']:,} training examples for {first['epochs']:g} "
        f"epochs at learning rate {first['learning_rate']:g} (fine-tuning run {first['run_id']}): {scores} on "
        f"{first['n_examples']:,} examples ({first['eval_split']} split)."
    )
    assert first["split"] == "train" and first["eval_split"] == "dev"
    assert expected in _sentences(report.findings)[(first["model"], first["task"])]
    assert "2e-05" in expected and "accuracy 0.900, F1 0.875 on 872" in expected


def test_ablation_sentences_on_the_synthetic_warehouse(synthetic, report):
    configs = _sql(synthetic, "SELECT * FROM ablation_configs")
    scores = _sql(synthetic, "SELECT * FROM ablations").join(configs, on=["run_id", "config_id"])
    runs = _sql(synthetic, "SELECT r.run_id, r.task, m.name AS model FROM runs r JOIN models m USING (model_id)")
    sentences = _sentences(report.findings)
    for run_id, rows in scores.group_by("run_id"):
        task, model = runs.filter(pl.col("run_id") == run_id[0]).select("task", "model").row(0)
        texts = sentences[(model, task)]
        baseline = rows.filter(pl.col("kind") == "baseline").row(0, named=True)
        n = baseline["n_examples"]
        assert (
            f"With nothing disabled, accuracy is {baseline['value']:.3f} on {n:,} examples (dev split; ablation run "
            f"{run_id[0]}, uniform mode)." in texts
        )
        heads, layers = (rows.filter(pl.col("kind") == k) for k in ("head", "layer"))
        sig_heads = heads.filter(pl.col("p_adjusted") < 0.05)
        sig_layers = layers.filter(pl.col("p_adjusted") < 0.05)
        # The synthetic sweep: whole layers hurt significantly, no single head does.
        assert sig_heads.height == 0 and 0 < sig_layers.height < layers.height
        assert (sig_layers["delta"] < 0).all()
        assert (
            f"{sig_layers.height} of {layers.height} layers changed accuracy significantly after "
            f"Benjamini–Hochberg correction (adjusted p < 0.05); no head did ({heads.height} heads tested). "
            f"Disabling lowered accuracy for {sig_layers.height} layer{'s' if sig_layers.height > 1 else ''}."
        ) in texts
        m = heads.height + layers.height
        k, k_alone = _smallest_k(1), _smallest_k(m)
        assert (
            f"With {n:,} examples the exact McNemar test can show a change of accuracy of {k / n:.3f} at the least "
            f"({k} examples changing one way, p < 0.05); one head or layer standing alone among the {m} tests needs "
            f"{k_alone / n:.3f} ({k_alone} examples) to survive the correction."
        ) in texts


def test_ablation_sentences_on_a_real_sweep(real):
    """Accuracy's p recomputed from the stored predictions with scipy's binomial test, every
    adjustment with scipy's Benjamini–Hochberg, scores with numpy and scikit-learn."""
    predictions = _sql(
        real,
        "SELECT p.config_id, c.kind, list(p.prediction ORDER BY p.example_id) AS predicted, "
        "list(e.label_id ORDER BY p.example_id) AS labels FROM ablation_predictions p "
        "JOIN ablation_configs c USING (run_id, config_id) JOIN examples e USING (example_id) "
        "GROUP BY ALL ORDER BY p.config_id",
    )
    stored = _sql(real, "SELECT config_id, metric, p_value, n_resamples FROM ablations")
    labels = np.array(predictions["labels"][0])
    predicted = {c: np.array(p) for c, p in zip(predictions["config_id"], predictions["predicted"])}
    kinds = dict(zip(predictions["config_id"], predictions["kind"]))
    tested = [c for c in predicted if kinds[c] in ("head", "layer")]
    baseline = predicted[0]
    (model,) = _sql(real, "SELECT name FROM models")["name"]
    texts = _sentences(_findings(real))[(model, "mrpc")]
    n = len(labels)

    def p_mcnemar(c: int) -> float:
        right, other = baseline == labels, predicted[c] == labels
        only_base, only_other = int(np.sum(right & ~other)), int(np.sum(~right & other))
        return 1.0 if only_base + only_other == 0 else stats.binomtest(only_other, only_base + only_other).pvalue

    def score(metric: str, c: int) -> float:
        return float(np.mean(predicted[c] == labels)) if metric == "accuracy" else f1_score(labels, predicted[c])

    for metric, word in (("accuracy", "accuracy"), ("f1", "F1")):
        if metric == "accuracy":
            p = np.array([p_mcnemar(c) for c in tested])
        else:  # the permutation test's p is seeded; its adjustment is recomputed here
            by_config = dict(zip(*stored.filter(pl.col("metric") == "f1").select("config_id", "p_value")))
            p = np.array([by_config[c] for c in tested])
        adjusted = stats.false_discovery_control(p, method="bh")
        significant = {c: a < 0.05 for c, a in zip(tested, adjusted)}
        delta = {c: score(metric, c) - score(metric, 0) for c in tested}
        count = {
            (kind, sign): sum(1 for c in tested if kinds[c] == kind and significant[c] and sign * delta[c] > 0)
            for kind in ("head", "layer")
            for sign in (1, -1)
        }
        n_heads = sum(1 for c in tested if kinds[c] == "head")
        n_layers = len(tested) - n_heads
        base_text = _one(texts, f"With nothing disabled, {word} is ")
        assert base_text.startswith(f"With nothing disabled, {word} is {score(metric, 0):.3f} on {n:,} examples")
        sig_heads = count[("head", 1)] + count[("head", -1)]
        sig_layers = count[("layer", 1)] + count[("layer", -1)]
        if sig_heads == sig_layers == 0:
            assert (
                f"No head or layer changed {word} significantly after Benjamini–Hochberg correction "
                f"({n_heads} heads and {n_layers} layers tested)."
            ) in texts
        else:
            # Both metrics may start alike ("1 of 8 heads"): pick this metric's sentence.
            claim = f"changed {word} significantly after Benjamini–Hochberg correction"
            sentence = _one([t for t in texts if claim in t], f"{sig_heads if sig_heads else sig_layers} of ")
            for (kind, sign), k in count.items():
                verb = "raised" if sign > 0 else "lowered"
                if k:
                    assert re.search(rf"{verb} (it|{word}) for (\d+ \w+ and )?{k} {kind}", sentence), sentence
    # F1: the permutation test's smallest p, 1 / (R + 1), against 0.05 / m.
    resamples = int(stored["n_resamples"][0])
    m = len(tested)
    smallest, needed = 1 / (resamples + 1), 0.05 / m
    sentence = _one(texts, "F1 is tested by a paired permutation test")
    assert f"with {resamples:,} permutations, whose smallest possible p is {smallest:.3g}" in sentence
    assert f"among the {m} tests needs p < {needed:.3g}" in sentence
    assert sentence.endswith("which these permutations can give." if smallest < needed else "cannot give.")
    # Accuracy: 30 examples, 10 tests.
    k, k_alone = _smallest_k(1), _smallest_k(m)
    assert (k, k_alone, n, m) == (6, 9, 30, 10)
    assert f"can show a change of accuracy of {k / n:.3f} at the least ({k} examples" in " ".join(texts)


def test_change_sentence(synthetic, report):
    change = (
        _sql(synthetic, "SELECT c.*, r.task, r.split, r.model_id FROM attention_change c JOIN runs r USING (run_id)")
        .with_columns(pl.col("cosine").cast(pl.Float64))
        .group_by("run_id", "task", "split", "layer")
        .agg(pl.col("cosine").mean(), pl.col("example_id").n_unique().alias("examples"))
    )
    sentences = _sentences(report.findings)
    for (run_id,), layers in change.group_by("run_id"):
        most = layers.sort("cosine", "layer").row(0, named=True)
        least = layers.sort(pl.col("cosine"), pl.col("layer"), descending=[True, False]).row(0, named=True)
        expected = (
            f"Through fine-tuning from {BASE}, attention changed most in layer {most['layer']} (layers "
            f"0–{layers['layer'].max()}; mean cosine {most['cosine']:.3f} between the two models' maps over "
            f"{most['examples']:,} examples, {most['split']} split) and least in layer {least['layer']} "
            f"({least['cosine']:.3f}); compare run {run_id}."
        )
        assert expected in sentences[(TUNED, most["task"])]
        assert most["layer"] == layers["layer"].max()  # the synthetic maps change most in the last layer


def test_pattern_sentences(synthetic, report):
    maps = _sql(
        synthetic,
        "SELECT s.run_id, r.task, r.split, m.name AS model, t.name AS pattern FROM head_stats s "
        "JOIN pattern_types t USING (pattern) JOIN runs r USING (run_id) JOIN models m USING (model_id)",
    )
    sentences = _sentences(report.findings)
    for (run_id,), rows in maps.group_by("run_id"):
        counts = rows["pattern"].value_counts()
        share = {p: c / rows.height for p, c in zip(counts["pattern"], counts["count"])}
        listed = ", ".join(
            f"{p} {100 * share.get(p, 0.0):.1f}{NBSP}%"
            for p in ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
        )
        first = rows.row(0, named=True)
        expected = (
            f"Pattern types of the {rows.height:,} maps of statistics run {run_id} ({first['split']} split): {listed}."
        )
        assert expected in sentences[(first["model"], first["task"])]


# ---------------------------------------------------------------- the smallest detectable change


def test_detectable_change_formula_against_binomtest(copy):
    """The SQL's k = floor(log2(2m / 0.05)) + 1 is the fewest examples, all changing one way,
    whose exact McNemar p (scipy's two-sided binomtest(k, k, 0.5) = 2 · 0.5^k) survives
    Benjamini–Hochberg among m tests when it stands alone; more discordant pairs in both
    directions never give a smaller p for the same net change."""
    for d in range(1, 12):
        lone = stats.binomtest(d, d, 0.5).pvalue
        assert lone == pytest.approx(min(1.0, 2 * 0.5**d), rel=1e-12)
        assert all(stats.binomtest(a + d, 2 * a + d, 0.5).pvalue >= lone for a in range(1, 30))
    con = warehouse.connect(copy)
    try:
        run_id = con.execute("SELECT min(run_id) FROM ablations").fetchone()[0]
        con.execute("DELETE FROM ablations WHERE run_id <> ?", [run_id])
        tested = [
            r[0]
            for r in con.execute(
                "SELECT config_id FROM ablation_configs WHERE run_id = ? AND kind IN ('head', 'layer') "
                "ORDER BY config_id DESC",
                [run_id],
            ).fetchall()
        ]
        seen = []
        for m in (15, 7, 2, 1):
            keep = tested[-m:]
            con.execute(
                f"DELETE FROM ablations WHERE run_id = ? AND config_id NOT IN (0, {', '.join(map(str, keep))}) "
                "AND config_id IN (SELECT config_id FROM ablation_configs WHERE kind IN ('head', 'layer'))",
                [run_id],
            )
            for n in (3, 6, 8, 200, 5000):
                con.execute("UPDATE ablations SET n_examples = ?", [n])
                (row,) = run_query(con, get_query("findings_ablation")).to_pylist()
                k, k_alone = _smallest_k(1), _smallest_k(m)
                assert (row["tests"], row["detect_k"], row["detect_k_alone"]) == (m, k, k_alone)
                assert row["detect_delta"] == (pytest.approx(k / n) if k <= n else None)
                assert row["detect_delta_alone"] == (pytest.approx(k_alone / n) if k_alone <= n else None)
                assert row["alone_possible"] == (k_alone <= n)
                assert row["min_p"] == pytest.approx(2 * 0.5**n)
                seen.append((m, k_alone))
            # Benjamini–Hochberg with the change alone (every other p is 1): k survives, k - 1 does not.
            others = [1.0] * (m - 1)
            for k_try, survives in ((k_alone, True), (k_alone - 1, False)):
                p = stats.binomtest(k_try, k_try, 0.5).pvalue
                assert bool(stats.false_discovery_control([p, *others], method="bh")[0] < 0.05) is survives
    finally:
        con.close()
    assert seen[0] == (15, 10) and seen[-1] == (1, 6)
    assert math.floor(math.log2(2 * 156 / 0.05)) + 1 == _smallest_k(156) == 13  # bert-base: 144 heads, 12 layers


def test_too_few_examples_are_said_plainly(copy):
    con = warehouse.connect(copy)
    try:
        con.execute("UPDATE ablations SET n_examples = 4")
    finally:
        con.close()
    texts = [f.text for f in _findings(copy).all()]
    assert (
        "With 4 examples no change of accuracy can be significant: the exact McNemar test needs at least 6 "
        "examples changing one way (p < 0.05)."
    ) in texts


# ---------------------------------------------------------------- wording, absence, filters


def test_none_is_said_plainly(copy):
    con = warehouse.connect(copy)
    try:
        con.execute("UPDATE ablations SET p_adjusted = 1 WHERE p_adjusted IS NOT NULL")
        heads, layers = con.execute(
            "SELECT count(*) FILTER (WHERE kind = 'head'), count(*) FILTER (WHERE kind = 'layer') "
            "FROM ablation_configs GROUP BY run_id LIMIT 1"
        ).fetchone()
    finally:
        con.close()
    texts = _sentences(_findings(copy))[(TUNED, "rte")]
    assert (
        f"No head or layer changed accuracy significantly after Benjamini–Hochberg correction ({heads} heads and "
        f"{layers} layers tested)."
    ) in texts
    assert not any("changed accuracy significantly after" in t and not t.startswith("No ") for t in texts)


def test_heads_and_layers_both_ways(copy):
    """Significant heads that raised and lowered the score, and layers that lowered it."""
    con = warehouse.connect(copy)
    try:
        con.execute(
            "UPDATE ablations SET p_adjusted = 0.01, delta = CASE c.head WHEN 0 THEN 0.02 ELSE -0.02 END "
            "FROM ablation_configs AS c WHERE c.run_id = ablations.run_id AND c.config_id = ablations.config_id "
            "AND c.kind = 'head' AND c.layer = 0 AND c.head < 3"
        )
        heads, layers = con.execute(
            "SELECT count(*) FILTER (WHERE kind = 'head'), count(*) FILTER (WHERE kind = 'layer') "
            "FROM ablation_configs GROUP BY run_id LIMIT 1"
        ).fetchone()
        (sig_layers,) = con.execute(
            "SELECT count(*) FROM ablations JOIN ablation_configs USING (run_id, config_id) "
            "WHERE kind = 'layer' AND p_adjusted < 0.05 GROUP BY run_id LIMIT 1"
        ).fetchone()
    finally:
        con.close()
    texts = _sentences(_findings(copy))[(TUNED, "rte")]
    assert (
        f"3 of {heads} heads and {sig_layers} of {layers} layers changed accuracy significantly after "
        "Benjamini–Hochberg correction (adjusted p < 0.05). Disabling raised accuracy for 1 head and lowered it "
        f"for 2 heads and {sig_layers} layers."
    ) in texts


def test_absent_ablation_data_leaves_a_note(copy, tmp_path):
    con = warehouse.connect(copy)
    try:
        for table in ("ablations", "ablation_configs", "head_importance"):
            con.execute(f"DELETE FROM {table}")
    finally:
        con.close()
    built = build_report(copy)
    texts = [f.text for f in built.findings.all()]
    assert texts and not any("disabled" in t or "McNemar" in t or "Benjamini" in t for t in texts)
    assert built.findings.missing is not None and f"`{ABLATION_COMMAND}`" in built.findings.missing
    assert "finetune" not in built.findings.missing and "compare" not in built.findings.missing
    html = write_html(built, tmp_path / "r.html").read_text(encoding="utf-8")
    note = re.search(r'<p class="findings-missing" id="note-findings">([^<]*)</p>', html)
    assert note and "the ablation baselines and significant heads and layers (run " in note.group(1)


def test_no_findings_at_all_leave_only_the_note(copy):
    con = warehouse.connect(copy)
    try:
        for table in ("ablations", "ablation_configs", "finetunes", "scores", "attention_change"):
            con.execute(f"DELETE FROM {table}")
        con.execute("UPDATE head_stats SET pattern = NULL")
    finally:
        con.close()
    findings = _findings(copy)
    assert findings.groups == ()
    assert findings.missing == (
        "No data yet for the fine-tuned scores (run `attnwh finetune`), the ablation baselines and significant "
        f"heads and layers (run `{ABLATION_COMMAND}`), the layers that changed most through fine-tuning (run "
        "`attnwh ingest compare`) and the pattern shares (run `attnwh ingest`)."
    )


def test_filters_keep_only_matching_findings(synthetic):
    only_rte = _findings(synthetic, task="rte")
    assert only_rte.groups and {g.task for g in only_rte.groups} == {"rte"}
    only_base = _findings(synthetic, model=BASE)
    assert {g.model for g in only_base.groups} == {BASE}
    assert all(f.text.startswith("Pattern types") for f in only_base.all())
    assert "fine-tuned scores" in (only_base.missing or "")


# ---------------------------------------------------------------- the page


def test_links_land_on_sections_and_names_are_text(report, tmp_path):
    html = write_html(report, tmp_path / "r.html").read_text(encoding="utf-8")
    start, end = html.index('<section id="findings">'), html.index("<nav")
    assert html.index('id="conventions"') < start < end
    block = html[start:end]
    targets = set(re.findall(r'<a href="#([^"]+)">', block))
    assert targets == {
        "section-finetuning",
        "section-ablation",
        "section-sinks-vs-ablation",
        "section-finetuning-change",
        "section-pattern-types",
    }
    for target in targets:
        assert html.count(f'id="{target}"') == 1, target
    # Every number from the warehouse is a link; the unlinked text holds only the fixed 0.05
    # and the first layer's 0.
    for finding in report.findings.all():
        for piece in finding.pieces:
            if piece.href is None:
                assert not re.search(
                    r"\d", piece.text.replace("0.05", "").replace("layers 0–", "").replace("F1", "")
                ), piece.text
            else:
                assert re.fullmatch(r"[\d.,e\-]+(\u00a0%)?", piece.text), piece.text
    # Names are text: the markup in the base model's name is escaped.
    assert "<b>base</b>" not in html and "&lt;b&gt;base&lt;/b&gt; &amp; co" in block
    assert f"<h3>{TUNED} · sst2</h3>" in block


def test_sections_left_off_the_page_get_no_links(synthetic):
    kept = tuple(s for s in SECTIONS if s.id != "ablation")
    findings = build_report(synthetic, sections=kept).findings
    ablation = [f for f in findings.all() if "McNemar" in f.text or "nothing disabled" in f.text]
    assert ablation and all(p.href is None for f in ablation for p in f.pieces)
    others = [f for f in findings.all() if f.text.startswith("Pattern types")]
    assert others and all(any(p.href == "#section-pattern-types" for p in f.pieces) for f in others)
