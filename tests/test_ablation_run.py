"""`attnwh ingest ablation` end to end on tiny classifiers: stored rows, scores recomputed
with scikit-learn, p-values and their correction recomputed independently, resume, bad input."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk

from attnwh.ingest.measures.ablation import sweep_configurations
from helpers import digest, ingest_args, pair_args, run, write_pairs

LAYERS, HEADS, N = 2, 4, 30


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # summary tables on one line each


def ablation_args(model, data, db, *extra: str) -> list[str]:
    sweep = ["--resamples", "200", "--top-k", "3"]
    return ["ingest", "ablation", "--model", str(model), *pair_args(data, db, batch_size=8), *sweep, *extra]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    from tiny_models import make_sharp_classifier

    return make_sharp_classifier("bert", tmp_path_factory.mktemp("sharp"), LAYERS, HEADS)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, classifier):
    """One complete uniform sweep on a tiny classifier, shared by the read-only tests."""
    import sys

    from _pytest.monkeypatch import MonkeyPatch

    tmp = tmp_path_factory.mktemp("ablation")
    data = write_pairs(tmp / "pairs.tsv", N)
    db = tmp / "w.duckdb"
    model = classifier
    with MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["attnwh", *ablation_args(model, data, db)])
        from attnwh import cli

        try:
            cli.main()
        except SystemExit as exc:
            assert exc.code == 0
    return model, data, db


@pytest.fixture(scope="module")
def helped(tmp_path_factory, swept):
    """A sweep in which disabling something helps significantly: the same pairs, twice
    over, labelled with the predictions of the head or layer whose disabling changed the most
    predictions in `swept`, so that configuration scores 100 % and the intact model does not."""
    from helpers import cli_main

    model, _, reference = swept
    ((config_id, flips),) = frame(
        reference,
        "SELECT p.config_id, count(*) FILTER (WHERE p.prediction <> b.prediction) AS flips "
        "FROM ablation_predictions p JOIN ablation_predictions b ON b.example_id = p.example_id AND b.config_id = 0 "
        "JOIN ablation_configs c ON c.run_id = p.run_id AND c.config_id = p.config_id "
        "WHERE c.kind IN ('head', 'layer') GROUP BY p.config_id ORDER BY flips DESC, p.config_id LIMIT 1",
    )
    assert flips >= 5  # twice over: at least 10 discordant examples, p below 0.002
    names = dict(frame(reference, "SELECT DISTINCT label_id, label FROM examples"))
    rows = frame(
        reference,
        "SELECT e.text_a, e.text_b, p.prediction FROM ablation_predictions p JOIN examples e USING (example_id) "
        "WHERE p.config_id = ? ORDER BY e.position",
        [config_id],
    )
    tmp = tmp_path_factory.mktemp("helped")
    data = tmp / "pairs.tsv"
    lines = [f"{a}\t{b}\t{names[p]}" for a, b, p in rows]
    data.write_text("premise\thypothesis\tlabel\n" + "\n".join(lines * 2) + "\n", encoding="utf-8")
    db = tmp / "w.duckdb"
    cli_main(*ablation_args(model, data, db))
    return db


def expected_effects(db) -> dict[tuple, tuple]:
    """Per head and layer configuration, (value, baseline, delta, p, adjusted p) of accuracy
    recomputed from the stored predictions and gold labels: scikit-learn's accuracy, the exact
    McNemar test as scipy's binomial test on the discordant examples, Benjamini–Hochberg by hand."""
    correct, scores = {}, {}
    for kind, layer, head, predictions, labels in frame(
        db,
        "SELECT c.kind, c.layer, c.head, list(p.prediction ORDER BY p.example_id), "
        "list(e.label_id ORDER BY p.example_id) FROM ablation_predictions p JOIN examples e USING (example_id) "
        "JOIN ablation_configs c ON c.run_id = p.run_id AND c.config_id = p.config_id "
        "WHERE c.kind IN ('baseline', 'head', 'layer') GROUP BY ALL",
    ):
        correct[(kind, layer, head)] = np.array(predictions) == np.array(labels)
        scores[(kind, layer, head)] = sk.accuracy_score(labels, predictions)
    base = correct[("baseline", None, None)]
    keys = sorted(k for k in correct if k[0] in ("head", "layer"))
    ps = []
    for key in keys:
        only_other, only_base = int(np.sum(correct[key] & ~base)), int(np.sum(~correct[key] & base))
        ps.append(1.0 if only_other + only_base == 0 else stats.binomtest(only_other, only_other + only_base).pvalue)
    order, m, adjusted, running = np.argsort(ps), len(ps), np.empty(len(ps)), 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, ps[i] * m / rank)
        adjusted[i] = running
    baseline = scores[("baseline", None, None)]
    return {key: (scores[key], baseline, scores[key] - baseline, ps[i], adjusted[i]) for i, key in enumerate(keys)}


def helpful(db) -> dict[tuple, tuple]:
    """The configurations helpful_heads should list: disabling raised accuracy, adjusted p < 0.05."""
    return {k: v for k, v in expected_effects(db).items() if v[2] > 0 and v[4] < 0.05}


def frame(db, sql: str, params=None):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def test_every_configuration_has_a_prediction_per_example_and_scores(swept):
    _, _, db = swept
    n_singles = 1 + LAYERS * HEADS + LAYERS
    kinds = dict(frame(db, "SELECT kind, count(*) FROM ablation_configs GROUP BY kind"))
    assert kinds["baseline"] == 1 and kinds["head"] == LAYERS * HEADS and kinds["layer"] == LAYERS
    assert kinds["top_k"] == 3
    n_configs = sum(kinds.values())
    assert n_configs >= n_singles + 3
    ((rows, unique),) = frame(db, "SELECT count(*), count(DISTINCT (config_id, example_id)) FROM ablation_predictions")
    assert rows == unique == n_configs * N
    assert frame(db, "SELECT count(*) FROM ablations")[0][0] == n_configs  # accuracy only for this task
    assert frame(db, "SELECT count(*) FROM head_importance WHERE importance >= 0")[0][0] == LAYERS * HEADS
    assert frame(db, "SELECT status, kind FROM runs") == [("complete", "ablation")]


def test_stored_scores_equal_sklearn_on_the_stored_predictions(swept):
    _, _, db = swept
    rows = frame(
        db,
        "SELECT p.config_id, list(p.prediction ORDER BY p.example_id), list(e.label_id ORDER BY p.example_id), "
        "any_value(a.value), any_value(a.baseline), bool_and(p.correct = (p.prediction = e.label_id)) "
        "FROM ablation_predictions p JOIN examples e USING (example_id) JOIN ablations a USING (run_id, config_id) "
        "GROUP BY p.config_id ORDER BY p.config_id",
    )
    baseline = sk.accuracy_score(rows[0][2], rows[0][1])
    for config_id, predictions, labels, value, stored_baseline, correct_ok in rows:
        assert value == pytest.approx(sk.accuracy_score(labels, predictions), abs=1e-12), config_id
        assert stored_baseline == pytest.approx(baseline, abs=1e-12)
        assert correct_ok


def test_p_values_are_exact_mcnemar_and_adjusted_by_benjamini_hochberg(swept):
    _, _, db = swept
    correct = {}
    for config_id, flags in frame(
        db, "SELECT config_id, list(correct ORDER BY example_id) FROM ablation_predictions GROUP BY config_id"
    ):
        correct[config_id] = np.array(flags)
    stored = frame(
        db,
        "SELECT a.config_id, c.kind, a.p_value, a.p_adjusted FROM ablations a JOIN ablation_configs c "
        "USING (run_id, config_id) ORDER BY a.config_id",
    )
    tested = []
    for config_id, kind, p, p_adjusted in stored:
        only_base = int(np.sum(correct[0] & ~correct[config_id]))
        only_other = int(np.sum(~correct[0] & correct[config_id]))
        # McNemar's exact test by hand: twice the smaller binomial tail, capped at 1.
        n, k = only_base + only_other, min(only_base, only_other)
        expected = 1.0 if n == 0 else min(1.0, 2 * sum(stats.binom.pmf(i, n, 0.5) for i in range(k + 1)))
        assert p == pytest.approx(expected, abs=1e-9), config_id
        if kind in ("head", "layer"):
            tested.append((config_id, p, p_adjusted))
        else:
            assert p_adjusted is None
    # Benjamini–Hochberg by hand: p_(i) * m / i, made monotone from the largest p down.
    ps = np.array([t[1] for t in tested])
    order = np.argsort(ps)
    m = len(ps)
    adjusted = np.empty(m)
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, ps[i] * m / rank)
        adjusted[i] = running
    assert [t[2] for t in tested] == pytest.approx(list(adjusted), abs=1e-12)


def test_combinations_follow_the_individual_ranking(swept):
    _, _, db = swept
    heads = frame(
        db,
        "SELECT c.layer, c.head, a.delta, a.p_value FROM ablations a JOIN ablation_configs c USING (run_id, config_id) "
        "WHERE c.kind = 'head'",
    )
    ranked = sorted(heads, key=lambda r: (-r[2], r[3], r[0], r[1]))
    curve = frame(db, "SELECT k, disabled FROM ablation_configs WHERE kind = 'top_k' ORDER BY k")
    for k, disabled in curve:
        assert set(disabled.split(",")) == {f"{l}-{h}" for l, h, _, _ in ranked[:k]}
    helpful = {f"{l}-{h}" for l, h, d, _ in heads if d > 0}
    stored = frame(db, "SELECT disabled FROM ablation_configs WHERE kind = 'helpful'")
    assert stored == (
        [(",".join(sorted(helpful, key=lambda s: tuple(map(int, s.split("-"))))),)] if len(helpful) >= 2 else []
    )


def test_named_queries_read_the_sweep(monkeypatch, capsys, swept):
    _, _, db = swept
    import json

    def query(name: str, *params: str) -> list[dict]:
        code, out, err = run(monkeypatch, capsys, "query", name, "--db", str(db), "--format", "json", *params)
        assert code == 0, err
        return json.loads(out)

    effect = query("ablation_effect", "-p", "mode=uniform")
    assert len(effect) == LAYERS * HEADS and {r["metric"] for r in effect} == {"accuracy"}
    assert all(r["ci_low"] <= r["delta"] + 1e-12 and r["delta"] <= r["ci_high"] + 1e-12 for r in effect)
    assert len(query("layer_ablation")) == LAYERS
    assert query("helpful_heads") == [] and helpful(db) == {}  # no head of this sweep helps beyond the noise
    assert {r["kind"] for r in query("ablation_combinations")} <= {"helpful", "top_k"}
    (corr,) = query("importance_vs_ablation")
    pairs = frame(
        db,
        "SELECT i.importance, -a.delta FROM ablations a JOIN ablation_configs c USING (run_id, config_id) "
        "JOIN head_importance i ON i.run_id = a.run_id AND i.layer = c.layer AND i.head = c.head WHERE c.kind = 'head'",
    )
    drops = [p[1] for p in pairs]
    assert len(set(drops)) >= 2  # the heads differ (with ties), so the correlation is defined and can be wrong
    expected = stats.spearmanr([p[0] for p in pairs], drops).statistic
    assert corr["spearman"] == pytest.approx(expected, abs=1e-9)
    assert corr["heads"] == LAYERS * HEADS


def test_helpful_heads_are_those_whose_disabling_raises_accuracy_significantly(monkeypatch, capsys, helped):
    import json

    code, out, err = run(monkeypatch, capsys, "query", "helpful_heads", "--db", str(helped), "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    want = helpful(helped)
    assert rows and len(rows) == len(want)
    for r in rows:
        value, baseline, delta, p, adjusted = want[(r["kind"], r["layer"], r["head"])]
        assert (r["value"], r["baseline"], r["delta"]) == pytest.approx((value, baseline, delta), abs=1e-12)
        assert (r["p_value"], r["p_adjusted"]) == pytest.approx((p, adjusted), rel=1e-9)
        assert r["ci_low"] <= r["delta"] <= r["ci_high"] and r["metric"] == "accuracy" and r["examples"] == 2 * N
    assert [r["delta"] for r in rows] == sorted((r["delta"] for r in rows), reverse=True)  # best first


def test_interrupted_sweep_resumes_to_the_same_results(monkeypatch, capsys, swept, tmp_path):
    model, data, reference_db = swept
    db = tmp_path / "w.duckdb"

    from attnwh.ingest.runs import ablation as ablation_run

    original = ablation_run.rows.store_part
    calls = []

    def write_then_interrupt(*args, **kwargs):
        original(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(ablation_run.rows, "store_part", write_then_interrupt)
    code, _, err = run(monkeypatch, capsys, *ablation_args(model, data, db))
    assert code == 130 and "resume" in err
    assert frame(db, "SELECT status FROM runs") == [("interrupted",)]
    assert frame(db, "SELECT count(*) FROM ablations")[0][0] == 0  # the finish never half-happens
    monkeypatch.setattr(ablation_run.rows, "store_part", original)
    code, out, err = run(monkeypatch, capsys, *ablation_args(model, data, db))
    assert code == 0 and "resumed" in out, err
    sql = (
        "SELECT c.disabled, a.metric, a.value, a.delta, a.ci_low, a.ci_high, a.p_value, a.p_adjusted FROM ablations a "
        "JOIN ablation_configs c USING (run_id, config_id) ORDER BY a.config_id, a.metric"
    )
    assert frame(db, sql) == frame(reference_db, sql)
    ((rows, unique),) = frame(db, "SELECT count(*), count(DISTINCT (config_id, example_id)) FROM ablation_predictions")
    assert rows == unique
    # Complete: a rerun skips it.
    code, out, _ = run(monkeypatch, capsys, *ablation_args(model, data, db))
    assert code == 0 and "already complete" in out


@pytest.mark.slow
def test_zero_mode_is_a_separate_run(monkeypatch, capsys, classifier, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", 12)
    db = tmp_path / "w.duckdb"
    model = classifier
    code, _, err = run(
        monkeypatch, capsys, *ablation_args(model, data, db, "--mode", "uniform", "--mode", "zero", "--no-importance")
    )
    assert code == 0, err
    assert frame(db, "SELECT DISTINCT mode FROM ablation_configs ORDER BY 1") == [("uniform",), ("zero",)]
    assert frame(db, "SELECT count(*) FROM runs WHERE status = 'complete'")[0][0] == 2
    assert frame(db, "SELECT count(*) FROM head_importance")[0][0] == 0


def test_bad_input_gets_one_line_and_leaves_the_file_alone(monkeypatch, capsys, tiny_model_dir, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", 12)
    db = tmp_path / "w.duckdb"
    db.write_bytes(b"")  # not even a warehouse: it must not be touched either
    db.unlink()
    cases = [
        (tiny_model_dir("bert"), data, "no classification head"),  # a bare encoder
    ]
    three = tmp_path / "three.tsv"
    three.write_text("premise\thypothesis\tlabel\n" + "".join(f"a b {i}\tc d\t{'xyz'[i % 3]}\n" for i in range(9)))
    cases.append((tiny_model_dir("bert", classifier=True), three, "do not match"))  # 3 labels, 2-class model
    for model, source, message in cases:
        before = digest(db)
        code, out, err = run(monkeypatch, capsys, *ablation_args(model, source, db))
        assert code != 0 and message in err, err
        assert len(err.strip().splitlines()) == 1 and err.startswith("attnwh: error:")
        assert digest(db) == before


def test_sweep_configurations_count():
    configs = sweep_configurations(LAYERS, HEADS)
    assert len(configs) == 1 + LAYERS * HEADS + LAYERS
    assert [c.start(LAYERS) for c in configs[:2]] == [LAYERS, 0]


@pytest.mark.slow
def test_heads_that_all_tie_give_no_correlation_and_the_report_still_renders(monkeypatch, capsys, swept, tmp_path):
    import json
    import shutil

    model, data, source = swept
    db = tmp_path / "tied.duckdb"
    shutil.copy(source, db)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE ablations SET delta = 0")  # as a classifier that never changes its mind
    code, out, err = run(monkeypatch, capsys, "query", "importance_vs_ablation", "--db", str(db), "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["spearman"] is None
    # The report needs statistics besides the ablation.
    code, _, err = run(monkeypatch, capsys, *ingest_args(model, data, db))
    assert code == 0, err
    code, out, err = run(monkeypatch, capsys, "report", "--db", str(db), "--out", str(tmp_path / "r.html"))
    assert code == 0, err
    assert 'id="chart-importance"' in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_a_model_tuned_on_a_sample_task_is_swept_on_that_task_by_default(monkeypatch, capsys, tmp_path):
    import json

    from tiny_models import make_sharp_classifier

    model = make_sharp_classifier("bert", tmp_path / "tuned")
    (model / "attnwh_finetune.json").write_text(json.dumps({"task": "sentiment", "base_weights_hash": None}))
    db = tmp_path / "w.duckdb"
    code, out, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "ablation",
        "--model",
        str(model),
        "--limit",
        "8",
        "--resamples",
        "100",
        "--no-importance",
        "--db",
        str(db),
    )
    assert code == 0, err
    assert frame(db, "SELECT task, dataset, status FROM runs") == [("sentiment", "sample", "complete")]
