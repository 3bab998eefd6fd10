"""Attention sinks (Gu et al. 2025): the sink_heads named query (Sink^eps over stored
statistics) against the same count made with numpy from the raw head_stats rows; the sinks
combination of `attnwh ingest ablation` (the heads the rule picks from a statistics run of the
same weights on the sweep's examples, against a plain forward pass with them disabled, and
the note without one); sink_vs_ablation's Spearman rho and bootstrap interval against scipy;
the report's sections and findings."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from helpers import cli_main, ingest_args, run


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, tiny_model_dir):
    from helpers import write_pairs

    tmp = tmp_path_factory.mktemp("sinks")
    db = tmp / "w.duckdb"
    cli_main(*ingest_args(tiny_model_dir("bert"), write_pairs(tmp / "p.tsv", 12), db))
    return db


def expected(db, eps: float) -> dict[tuple[int, str], tuple[int, str | None]]:
    """(layer, token) -> (sink heads, their numbers) from the raw rows."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT layer, head, to_cls, to_sep, to_punct FROM head_stats").fetchnumpy()
    out = {}
    for layer in np.unique(rows["layer"]):
        for token, column in (("[CLS]", "to_cls"), ("[SEP]", "to_sep"), ("punctuation", "to_punct")):
            heads = sorted(
                int(h)
                for h in np.unique(rows["head"])
                if rows[column][(rows["layer"] == layer) & (rows["head"] == h)].astype(np.float64).mean() > eps
            )
            out[(int(layer), token)] = (len(heads), ",".join(map(str, heads)) or None)
    return out


@pytest.mark.parametrize("eps", [None, 0.1, 0.05])
def test_sink_heads_match_a_count_from_the_raw_rows(monkeypatch, capsys, warehouse, eps):
    from attnwh.sql import queries
    from attnwh.sql import warehouse as wh

    con = wh.connect(warehouse, read_only=True)
    try:
        params = {} if eps is None else {"eps": str(eps)}
        found = queries.run_query(con, queries.get_query("sink_heads"), params).to_pylist()
    finally:
        con.close()
    want = expected(warehouse, 0.3 if eps is None else eps)
    assert len(found) == len(want) == 2 * 3  # 2 layers × 3 token kinds
    for row in found:
        n, which = want[(row["layer"], row["token"])]
        assert (row["sink_heads"], row["which_heads"]) == (n, which), row
        assert row["heads"] == 4 and row["sink_share"] == pytest.approx(n / 4)
        assert row["eps"] == pytest.approx(0.3 if eps is None else eps)
    if eps == 0.05:  # a threshold low enough that some heads are sinks: the test is not vacuous
        assert sum(r["sink_heads"] for r in found) > 0


def test_a_threshold_that_is_not_a_number_is_one_line(monkeypatch, capsys, warehouse):
    code, _, err = run(monkeypatch, capsys, "query", "sink_heads", "--db", str(warehouse), "-p", "eps=abc")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "abc" in lines[0]


# ---------------------------------------------------------------- the sinks combination of `attnwh ingest ablation`

LAYERS, HEADS, N, LIMIT = 2, 4, 16, 10
# Heads made sinks by hand in the statistics run (a tiny random model attends almost evenly,
# below any sensible eps): one on every example, one only on the sweep's examples, and one
# only on the others, which the mean over the sweep's examples must not pick.
SINK_EVERYWHERE, SINK_ON_SWEPT, SINK_ELSEWHERE = (0, 1), (1, 2), (1, 3)


def _cli(*argv: str) -> str:
    """Run the CLI in-process; returns stdout (stderr goes to the test's output)."""
    import contextlib
    import io
    import sys

    from _pytest.monkeypatch import MonkeyPatch

    from attnwh import cli

    out = io.StringIO()
    with MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setenv("COLUMNS", "200")
        mp.setattr(sys, "argv", ["attnwh", *argv])
        try:
            cli.main()
        except SystemExit as exc:
            assert not exc.code, (argv, exc.code)
    return out.getvalue()


def _sweep_args(model, data, db, *extra: str) -> list[str]:
    from helpers import pair_args

    return [
        "ingest",
        "ablation",
        "--model",
        str(model),
        *pair_args(data, db, batch_size=8),
        "--limit",
        str(LIMIT),
        "--resamples",
        "200",
        "--top-k",
        "2",
        "--no-importance",
        *extra,
    ]


def _rows(db, sql: str, params=None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def _plant(db, run_id: int, swept: list[int]) -> None:
    """Make the planted heads sinks in statistics run `run_id` (see SINK_EVERYWHERE)."""
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE head_stats SET to_sep = 0.6 WHERE run_id = ? AND layer = ? AND head = ?", [run_id, *SINK_EVERYWHERE]
        )
        con.execute(
            "UPDATE head_stats SET to_cls = 0.5 WHERE run_id = ? AND layer = ? AND head = ? AND example_id IN (SELECT unnest(?))",
            [run_id, *SINK_ON_SWEPT, swept],
        )
        con.execute(
            "UPDATE head_stats SET to_punct = 0.95 WHERE run_id = ? AND layer = ? AND head = ? AND example_id NOT IN (SELECT unnest(?))",
            [run_id, *SINK_ELSEWHERE, swept],
        )


def _all_sinks(db, run_id: int) -> None:
    """Every head of statistics run `run_id` a sink: if the run were used, all would be disabled."""
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE head_stats SET to_cls = 0.9 WHERE run_id = ?", [run_id])


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """One warehouse, step by step, with what `attnwh ingest ablation` printed at each step:

    1. a sweep of a tiny classifier on LIMIT of N examples, with no statistics run at all;
    2. rerun after statistics runs that must not be used: another model's (other weights) on
       every example, and this model's on another sample that misses some of the sweep's
       examples, both with every head a sink;
    3. rerun after this model's statistics on all N examples (covering the sweep's LIMIT, as
       samples are nested), with planted sinks;
    4. the sweep redone with --replace: now with its sinks combination."""
    from helpers import ingest_args, write_pairs
    from tiny_models import make_sharp_classifier

    tmp = tmp_path_factory.mktemp("sinks-ablation")
    model = make_sharp_classifier("bert", tmp / "sharp", LAYERS, HEADS)
    other = make_sharp_classifier("bert", tmp / "other", LAYERS, HEADS, seed=1)
    data = write_pairs(tmp / "pairs.tsv", N)
    db = tmp / "w.duckdb"
    printed = {"none": _cli(*_sweep_args(model, data, db))}
    ((sweep_run,),) = _rows(db, "SELECT run_id FROM runs WHERE kind = 'ablation'")
    swept = [r[0] for r in _rows(db, "SELECT example_id FROM run_examples WHERE run_id = ?", [sweep_run])]

    _cli(*ingest_args(other, data, db, "--batch-size", "8"))
    _cli(*ingest_args(model, data, db, "--limit", "6", "--seed", "7"))
    for (run_id,) in _rows(db, "SELECT run_id FROM runs WHERE kind = 'statistics'"):
        _all_sinks(db, run_id)
    printed["unusable"] = _cli(*_sweep_args(model, data, db))

    _cli(*ingest_args(model, data, db))
    stats_run = max(r[0] for r in _rows(db, "SELECT run_id FROM runs WHERE kind = 'statistics'"))
    _plant(db, stats_run, swept)
    printed["later"] = _cli(*_sweep_args(model, data, db))
    printed["replaced"] = _cli(*_sweep_args(model, data, db, "--replace"))
    ((run_id,),) = _rows(db, "SELECT run_id FROM runs WHERE kind = 'ablation'")
    return {"model": model, "db": db, "run": run_id, "swept": swept, "stats_run": stats_run, "printed": printed}


def _expected_sinks(db, stats_run: int, swept: list[int], eps: float = 0.3) -> set[tuple[int, int]]:
    """The rule, recomputed with numpy from the head_stats rows of the sweep's examples."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT layer, head, example_id, to_cls, to_sep, to_punct FROM head_stats WHERE run_id = ?", [stats_run]
        ).fetchnumpy()
    mine = np.isin(rows["example_id"], np.array(swept))
    found = set()
    for layer in range(LAYERS):
        for head in range(HEADS):
            rows_of = mine & (rows["layer"] == layer) & (rows["head"] == head)
            assert rows_of.sum() == len(swept)
            means = [rows[c][rows_of].astype(np.float64).mean() for c in ("to_cls", "to_sep", "to_punct")]
            if max(means) > eps:
                found.add((layer, head))
    return found


def test_without_a_usable_statistics_run_there_is_no_sinks_combination_and_a_note(sweeps):
    from attnwh.ingest.runs.ablation import NO_STATISTICS, SINKS_LATER

    for step in ("none", "unusable"):
        out = " ".join(sweeps["printed"][step].split())  # the note may wrap
        assert NO_STATISTICS in out, (step, out)
    # Statistics added after the sweep finished: the complete run says so, and how to redo it.
    assert SINKS_LATER in " ".join(sweeps["printed"]["later"].split())
    assert "already complete" in sweeps["printed"]["later"]


def test_the_statistics_run_must_hold_every_example_and_have_the_same_weights(sweeps):
    db, swept = sweeps["db"], sweeps["swept"]
    models = _rows(
        db,
        "SELECT r.run_id, m.weights_hash, count(e.example_id) FILTER (WHERE e.example_id IN (SELECT unnest(?))) "
        "FROM runs r JOIN models m USING (model_id) JOIN run_examples e USING (run_id) "
        "WHERE r.kind = 'statistics' GROUP BY ALL ORDER BY r.run_id",
        [swept],
    )
    (weights,) = _rows(db, "SELECT m.weights_hash FROM runs r JOIN models m USING (model_id) WHERE r.kind = 'ablation'")
    other, short, covering = models
    # The unusable ones: another model's on every example, this model's on too few of them.
    assert other[1] != weights[0] and other[2] == LIMIT
    assert short[1] == weights[0] and short[2] < LIMIT
    assert covering[0] == sweeps["stats_run"] and covering[1] == weights[0] and covering[2] == LIMIT


def test_the_sinks_configuration_disables_exactly_the_heads_the_rule_picks(sweeps):
    db, run_id = sweeps["db"], sweeps["run"]
    expected = _expected_sinks(db, sweeps["stats_run"], sweeps["swept"])
    assert {SINK_EVERYWHERE, SINK_ON_SWEPT} <= expected and SINK_ELSEWHERE not in expected
    assert len(expected) < LAYERS * HEADS  # the other statistics runs (every head a sink) were not used
    # SINK_ELSEWHERE is a sink over the statistics run's examples, only not over the sweep's.
    ((elsewhere,),) = _rows(
        db,
        "SELECT avg(to_punct) FROM head_stats WHERE run_id = ? AND layer = ? AND head = ?",
        [sweeps["stats_run"], *SINK_ELSEWHERE],
    )
    assert elsewhere > 0.3
    ((kind, k, n_disabled, disabled),) = _rows(
        db, "SELECT kind, k, n_disabled, disabled FROM ablation_configs WHERE run_id = ? AND kind = 'sinks'", [run_id]
    )
    stored = {tuple(map(int, pair.split("-"))) for pair in disabled.split(",")}
    assert stored == expected and k == n_disabled == len(expected)
    from attnwh.sql import warehouse
    from attnwh.sql.queries import get_query, run_query

    con = warehouse.connect(db, read_only=True)
    try:
        chosen = run_query(con, get_query("sink_heads_of_run"), {"run": run_id}).to_pylist()
    finally:
        con.close()
    assert {r["statistics_run"] for r in chosen} == {sweeps["stats_run"]} and len(chosen) == LAYERS * HEADS
    assert {(r["layer"], r["head"]) for r in chosen if r["sink"]} == expected
    assert all(r["examples"] == LIMIT for r in chosen)
    # The summary line: the count, the delta and p of the combination, and no note.
    from attnwh.ingest.runs.ablation import NO_SINKS, NO_STATISTICS, SINKS_LATER

    replaced = sweeps["printed"]["replaced"]
    assert f"{len(expected)}: " in replaced and all(n not in replaced for n in (NO_STATISTICS, NO_SINKS, SINKS_LATER))


def test_sinks_predictions_equal_a_plain_forward_pass_with_those_heads_disabled(sweeps):
    from attnwh.ingest.model.encoding import collate, encode_task
    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.sources.examples import Example, TaskData
    from test_ablation import hand_disabled_logits

    db, run_id = sweeps["db"], sweeps["run"]
    ((config_id, disabled),) = _rows(
        db, "SELECT config_id, disabled FROM ablation_configs WHERE run_id = ? AND kind = 'sinks'", [run_id]
    )
    heads = {tuple(map(int, pair.split("-"))) for pair in disabled.split(",")}
    rows = _rows(
        db,
        "SELECT e.example_id, e.text_a, e.text_b, p.prediction, b.prediction FROM ablation_predictions p "
        "JOIN examples e USING (example_id) "
        "JOIN ablation_predictions b ON b.run_id = p.run_id AND b.example_id = p.example_id AND b.config_id = 0 "
        "WHERE p.run_id = ? AND p.config_id = ? ORDER BY e.example_id",
        [run_id, config_id],
    )
    assert len(rows) == LIMIT
    encoder = load_model(str(sweeps["model"]), "cpu")
    examples = tuple(Example(i, None, a, b, "no") for i, (_, a, b, _, _) in enumerate(rows))
    encoded = encode_task(encoder.tokenizer, TaskData("t", "pairs", "dev", examples, ("no", "yes"), "t"), 64)
    batch = collate(encoded, list(range(len(rows))), encoder.tokenizer.pad_token_id, encoder.device)
    logits = hand_disabled_logits(sweeps["model"], batch, heads, "uniform")
    assert [float(p) for *_, p, _ in rows] == logits.argmax(-1).astype(float).tolist()
    plain = hand_disabled_logits(sweeps["model"], batch, set(), "uniform")
    assert [float(b) for *_, b in rows] == plain.argmax(-1).astype(float).tolist()
    assert np.abs(logits - plain).max() > 1e-3  # disabling them moved the logits: the check can fail


def test_sinks_scores_are_stored_like_the_other_combinations(sweeps):
    db, run_id = sweeps["db"], sweeps["run"]
    rows = _rows(
        db,
        "SELECT a.metric, a.value, a.baseline, a.delta, a.ci_low, a.ci_high, a.p_value, a.p_adjusted, a.n_examples, "
        "(SELECT avg(p.correct::INTEGER) FROM ablation_predictions p WHERE p.run_id = a.run_id AND p.config_id = a.config_id) "
        "FROM ablations a JOIN ablation_configs c USING (run_id, config_id) WHERE a.run_id = ? AND c.kind = 'sinks'",
        [run_id],
    )
    assert [r[0] for r in rows] == ["accuracy"]
    metric, value, baseline, delta, low, high, p, p_adjusted, n, accuracy = rows[0]
    assert value == pytest.approx(accuracy, abs=1e-12) and delta == pytest.approx(value - baseline, abs=1e-12)
    assert low <= delta + 1e-12 and delta <= high + 1e-12 and 0 < p <= 1
    assert p_adjusted is None and n == LIMIT  # outside the correction, as helpful and top_k


# ---------------------------------------------------------------- sink_vs_ablation


def _query(db, name: str, **params) -> list[dict]:
    from attnwh.sql import warehouse
    from attnwh.sql.queries import get_query, run_query

    con = warehouse.connect(db, read_only=True)
    try:
        return run_query(con, get_query(name), params).to_pylist()
    finally:
        con.close()


def test_sink_vs_ablation_on_a_real_sweep(sweeps):
    from scipy import stats

    db, run_id = sweeps["db"], sweeps["run"]
    rows = _query(db, "sink_vs_ablation")
    assert len(rows) == LAYERS * HEADS and {r["run_id"] for r in rows} == {run_id}
    assert {r["statistics_run"] for r in rows} == {sweeps["stats_run"]} and {r["metric"] for r in rows} == {"accuracy"}
    # Its sink heads are those the sweep disabled together, with the same combination's scores.
    expected = _expected_sinks(db, sweeps["stats_run"], sweeps["swept"])
    assert {(r["layer"], r["head"]) for r in rows if r["sink"]} == expected
    ((delta, p),) = _rows(
        db, "SELECT delta, p_value FROM ablation_results WHERE run_id = ? AND kind = 'sinks'", [run_id]
    )
    assert all((r["sinks_disabled"], r["sinks_delta"], r["sinks_p_value"]) == (len(expected), delta, p) for r in rows)
    effects = {
        (l, h): (d, pa)
        for l, h, d, pa in _rows(
            db,
            "SELECT layer, head, delta, p_adjusted FROM ablation_results WHERE run_id = ? AND kind = 'head'",
            [run_id],
        )
    }
    for r in rows:
        assert (r["delta"], r["p_adjusted"]) == effects[(r["layer"], r["head"])]
        assert r["sink_score"] == max(r["to_cls"], r["to_sep"], r["to_punct"])
    x = [r["sink_score"] for r in rows]
    y = [r["delta"] for r in rows]
    if len(set(y)) > 1:
        assert rows[0]["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-9)
    else:  # a classifier whose single heads never change a prediction: no correlation
        assert rows[0]["spearman"] is None


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """The synthetic warehouse with 6 × 12 = 72 heads: two ablation runs of the tuned model,
    each with the statistics run of that model on the same examples."""
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path_factory.mktemp("sink-vs-ablation") / "s.duckdb"
    build_synthetic_warehouse(db, examples=40, layers=6, heads=12)
    return db


def _drawn_heads(db, run_id: int, heads: int, n_boot: int, seed: int) -> np.ndarray:
    """The head positions sink_vs_ablation draws, (n_boot, heads): hash(seed, run, resample,
    slot) mod heads, with the query's argument types, read from DuckDB's own hash. Only the
    draws are taken from DuckDB; the statistic and the interval are recomputed by scipy."""
    with duckdb.connect(str(db), read_only=True) as con:
        drawn = con.execute(
            "SELECT (hash(CAST($seed AS BIGINT), CAST($run AS INTEGER), r.range, s.range) % CAST($heads AS UBIGINT))"
            "::BIGINT FROM range($n_boot) AS r, range($heads) AS s ORDER BY r.range, s.range",
            {"seed": seed, "run": run_id, "heads": heads, "n_boot": n_boot},
        ).fetchnumpy()
    return next(iter(drawn.values())).reshape(n_boot, heads)


def test_spearman_and_its_bootstrap_interval_against_scipy(synthetic):
    """rho against scipy.stats.spearmanr; its interval against scipy's rho on each of the
    query's own resamples to rounding (a normal-theory interval, Fisher's z, is off by up
    to 0.011 here), and against scipy.stats.bootstrap's own resamples within
    four Monte-Carlo standard errors of the two percentile estimates."""
    from scipy import stats

    rows = _query(synthetic, "sink_vs_ablation")
    runs = sorted({r["run_id"] for r in rows})
    assert len(runs) == 2
    for run_id in runs:
        mine = [r for r in rows if r["run_id"] == run_id]  # ordered by layer, head: the query's positions
        assert len(mine) == 72 and mine[0]["heads"] == 72
        x = np.array([r["sink_score"] for r in mine])
        y = np.array([r["delta"] for r in mine])
        assert len(set(y)) < len(y)  # the synthetic deltas tie: average ranks are exercised
        rho = stats.spearmanr(x, y).statistic
        first = mine[0]
        assert first["spearman"] == pytest.approx(rho, abs=1e-9)
        assert first["sink_heads"] == sum(1 for r in mine if r["sink"]) == sum(x > 0.3)
        low, high = first["spearman_low"], first["spearman_high"]
        assert low < rho < high
        # The same resamples (default n_boot 1000, seed 42): scipy's rho on each, numpy's
        # linear-interpolation percentiles (DuckDB's quantile_cont), resamples with an
        # undefined rho left out.
        drawn = _drawn_heads(synthetic, run_id, len(mine), 1000, 42)
        with np.errstate(invalid="ignore"):
            replicates = np.array([stats.spearmanr(x[i], y[i]).statistic for i in drawn])
        replicates = replicates[~np.isnan(replicates)]
        assert first["boot_rho"] == len(replicates)
        assert (low, high) == pytest.approx(tuple(np.quantile(replicates, [0.025, 0.975])), abs=1e-9)
        # scipy.stats.bootstrap with its own 4,000 resamples: the two percentile estimates
        # differ by Monte-Carlo noise, whose standard error is sqrt(q (1 - q) / R) over the
        # bootstrap distribution's density at the quantile (0.009 to 0.011 together here).
        resamples = 4000
        reference = stats.bootstrap(
            (x, y),
            lambda a, b: stats.spearmanr(a, b).statistic,
            paired=True,
            vectorized=False,
            method="percentile",
            n_resamples=resamples,
            rng=np.random.default_rng(0),
        )
        density = stats.gaussian_kde(reference.bootstrap_distribution)
        for q, mine_bound, scipy_bound in (
            (0.025, low, reference.confidence_interval.low),
            (0.975, high, reference.confidence_interval.high),
        ):
            error = np.sqrt(q * (1 - q) * (1 / len(replicates) + 1 / resamples)) / density(scipy_bound)[0]
            assert abs(mine_bound - scipy_bound) < 4 * error, (q, mine_bound, scipy_bound, error)


def test_the_bootstrap_is_deterministic_given_the_seed(synthetic):
    def interval(**params) -> set[tuple]:
        return {
            (r["run_id"], r["spearman_low"], r["spearman_high"])
            for r in _query(synthetic, "sink_vs_ablation", **params)
        }

    assert interval(seed=7, n_boot=300) == interval(seed=7, n_boot=300)
    assert interval(seed=7, n_boot=300) != interval(seed=8, n_boot=300)
    # eps moves the sink flags, not the correlation (the score is continuous).
    low = _query(synthetic, "sink_vs_ablation", eps=0.05, n_boot=10)
    default = _query(synthetic, "sink_vs_ablation", n_boot=10)
    assert all(r["sink"] == (r["sink_score"] > 0.05) and r["eps"] == 0.05 for r in low)
    assert sum(r["sink"] for r in low) > sum(r["sink"] for r in default) > 0
    assert [r["spearman"] for r in low] == [r["spearman"] for r in default]


@pytest.mark.parametrize(
    ("task", "regression"), [("cola", False), ("mrpc", False), ("stsb", True), ("sst2", False), ("other", True)]
)
def test_the_default_metric_is_the_runs_main_metric(synthetic, tmp_path, task, regression):
    """A run stores the metrics of metrics_for(task); without `metric` the query reads the
    first of them, the one the sweep chose its combinations by."""
    import shutil

    from attnwh.ingest.measures.metrics import metrics_for

    db = tmp_path / "copy.duckdb"
    shutil.copy(synthetic, db)
    metrics = metrics_for(task, regression)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE ablations SET metric = ?", [metrics[-1]])
        for other in metrics[:-1]:
            con.execute(
                "INSERT INTO ablations SELECT run_id, config_id, ?, value, baseline, -delta, ci_low, ci_high, p_value,"
                " p_adjusted, test, n_examples, n_resamples FROM ablations WHERE metric = ?",
                [other, metrics[-1]],
            )
    rows = _query(db, "sink_vs_ablation", n_boot=10)
    assert rows and {r["metric"] for r in rows} == {metrics[0]}
    for metric in metrics:
        assert {r["metric"] for r in _query(db, "sink_vs_ablation", metric=metric, n_boot=10)} == {metric}


def test_an_ablation_run_without_covering_statistics_has_no_rows(synthetic, tmp_path):
    import shutil

    db = tmp_path / "copy.duckdb"
    shutil.copy(synthetic, db)
    with duckdb.connect(str(db)) as con:
        (run_id,) = con.execute("SELECT min(run_id) FROM runs WHERE kind = 'ablation'").fetchone()
        (task,) = con.execute("SELECT task FROM runs WHERE run_id = ?", [run_id]).fetchone()
        # One example of the sweep that the tuned model's statistics run of the task lacks.
        con.execute(
            "DELETE FROM run_examples WHERE example_id = (SELECT min(example_id) FROM run_examples WHERE run_id = ?)"
            " AND run_id IN (SELECT r.run_id FROM runs r JOIN runs a ON a.model_id = r.model_id"
            " WHERE a.run_id = ? AND r.kind = 'statistics' AND r.task = ?)",
            [run_id, run_id, task],
        )
    assert run_id not in {r["run_id"] for r in _query(db, "sink_vs_ablation", n_boot=10)}
    assert _query(db, "sink_heads_of_run", run=run_id) == []
    assert {r["run_id"] for r in _query(db, "sink_vs_ablation", n_boot=10)}  # the other run still has its rows


# ---------------------------------------------------------------- the report


def test_findings_say_rho_with_its_interval_and_the_combination(synthetic, tmp_path):
    import shutil

    from scipy import stats

    from attnwh.reports.findings import build_findings
    from attnwh.reports.sections import ReportContext
    from attnwh.sql import warehouse

    def findings(db):
        con = warehouse.connect(db, read_only=True)
        try:
            return build_findings(ReportContext(con, {"model": None, "task": None}))
        finally:
            con.close()

    rows = _query(synthetic, "sink_vs_ablation")
    texts = {(g.model, g.task): [f.text for f in g.findings] for g in findings(synthetic).groups}
    for run_id in {r["run_id"] for r in rows}:
        mine = [r for r in rows if r["run_id"] == run_id]
        r = mine[0]
        rho = stats.spearmanr([m["sink_score"] for m in mine], [m["delta"] for m in mine]).statistic
        (sentence,) = [t for t in texts[(r["model"], r["task"])] if f"(ablation run {run_id})" in t]
        assert sentence.startswith(f"{sum(m['sink'] for m in mine)} of 72 heads are sink heads (mean attention")
        assert f"statistics run {r['statistics_run']})" in sentence
        assert f"is {rho:.3f} (percentile bootstrap interval over the heads {r['spearman_low']:.3f} to " in sentence
        assert f"changed accuracy by {r['sinks_delta']:.4f} (p {r['sinks_p_value']:.3g}, unadjusted)" in sentence
    # An ablation without statistics of its examples: the note names the command that adds them.
    db = tmp_path / "copy.duckdb"
    shutil.copy(synthetic, db)
    with duckdb.connect(str(db)) as con:
        con.execute("DELETE FROM run_examples WHERE run_id IN (SELECT run_id FROM runs WHERE kind = 'statistics')")
    missing = findings(db).missing or ""
    assert "the sink heads against the effect of disabling them (run `attnwh ingest --model FINETUNED on" in missing
    # Without an ablation at all, the ablation's note says it; the sinks are not named twice.
    with duckdb.connect(str(db)) as con:
        con.execute("DELETE FROM ablations")
    missing = findings(db).missing or ""
    assert "ablation baselines" in missing and "sink heads" not in missing


def test_report_sections_draw_the_sinks(synthetic):
    from attnwh.reports.build import build_report

    report = build_report(synthetic)
    ids = [s.section.id for s in report.sections]
    assert ids.index("attention-sinks") == ids.index("special-tokens") + 1
    assert ids.index("sinks-vs-ablation") == ids.index("importance") + 1
    blocks = {b.id: b for s in report.sections for b in s.blocks}
    heatmap = blocks["chart-attention-sinks"].spec()
    cells = next(iter(heatmap["datasets"].values()))
    # Every statistics run × layer × token kind, the count as shown in the cell.
    assert len(cells) == 4 * 6 * 3 and all(c["count"] == f"{c['sink_heads']}/12" for c in cells)
    scatter = blocks["chart-sinks-vs-ablation"]
    points = next(iter(scatter.spec()["datasets"].values()))
    rows = _query(synthetic, "sink_vs_ablation")
    assert len(points) == len(rows) == 2 * 72
    assert {p["kind"] for p in points if p["sink"]} == {"sink head"}
    for r in {r["run_id"]: r for r in rows}.values():
        assert f"Run {r['run_id']} (accuracy): {r['sink_heads']} of 72 heads are sinks" in scatter.caption
        title = f"Spearman ρ {round(r['spearman'], 2)} [{round(r['spearman_low'], 2)}, {round(r['spearman_high'], 2)}]"
        assert any(p["panel"].endswith(title) for p in points), title
