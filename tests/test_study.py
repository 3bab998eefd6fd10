"""`attnwh study` end to end on a tiny model and a tiny GLUE folder (a classification task
and the STS-B regression): every table filled, the report written, rerun skips every stage,
--force redoes one, bad input is one line, and the report renders in Chromium.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from helpers import SENTENCES, run
from test_report_browser import _wait_for_charts, browser, open_offline  # noqa: F401

TABLES = (
    "models",
    "examples",
    "runs",
    "run_examples",
    "head_stats",
    "finetunes",
    "scores",
    "attention_change",
    "ablation_configs",
    "ablation_predictions",
    "ablations",
    "head_importance",
    "pattern_thumbnails",
)
TASKS = ("rte", "stsb")


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # summary tables on one line each


def write_glue(root: Path) -> Path:
    """RTE and STS-B folders in GLUE's TSV layout, from the tiny tokenizer's sentences."""
    for folder, n_train, n_dev in (("RTE", 40, 16), ("STS-B", 40, 16)):
        (root / folder).mkdir(parents=True)
        for split, n in (("train", n_train), ("dev", n_dev)):
            last = "label" if folder == "RTE" else "score"
            rows = [f"index\tsentence1\tsentence2\t{last}"]
            for i in range(n):
                a, b = SENTENCES[i % len(SENTENCES)], SENTENCES[(3 * i + 1) % len(SENTENCES)]
                # Each sentence pair comes with both labels equally often: the tuned classifier stays
                # undecided, so disabling heads flips predictions and moves the score.
                label = (
                    ("entailment" if i % (2 * len(SENTENCES)) < len(SENTENCES) else "not_entailment")
                    if folder == "RTE"
                    else f"{(i % len(SENTENCES)) * 5 / 7:.3f}"
                )
                rows.append(f"{i}\t{a} ({i})\t{b}\t{label}")
            (root / folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "QNLI").mkdir()  # a dev split only, like ../shared/data/glue
    (root / "QNLI" / "dev.tsv").write_text("index\tquestion\tsentence\tlabel\n0\tWhy?\tBecause.\tentailment\n")
    return root


def study_args(model: Path, glue: Path, tmp: Path, *extra: str) -> list[str]:
    return [
        "study",
        "--model",
        str(model),
        "--glue-dir",
        str(glue),
        "--tasks",
        ",".join(TASKS),
        "--epochs",
        "3",
        "--lr",
        "1e-3",
        "--batch-size",
        "8",
        "--limit",
        "12",
        "--resamples",
        "100",
        "--device",
        "cpu",
        "--db",
        str(tmp / "w.duckdb"),
        "--report",
        str(tmp / "report.html"),
        "--out-dir",
        str(tmp / "models"),
        *extra,
    ]


def counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}


def runs(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT run_id, kind, task, status FROM runs ORDER BY run_id").fetchall()


@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    """One complete study, shared by the tests below (each rerun is in its own test)."""
    import sys

    from _pytest.monkeypatch import MonkeyPatch

    from tiny_models import make_tiny

    tmp = tmp_path_factory.mktemp("study")
    model = make_tiny("bert", tmp / "base")
    glue = write_glue(tmp / "glue")
    with MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "200")
        mp.setattr(sys, "argv", ["attnwh", *study_args(model, glue, tmp)])
        from attnwh import cli

        try:
            cli.main()
        except SystemExit as exc:
            assert exc.code == 0
    return model, glue, tmp


@pytest.mark.slow
def test_every_table_is_filled_and_every_stage_ran(studied):
    _, _, tmp = studied
    db = tmp / "w.duckdb"
    found = counts(db)
    assert all(found[t] > 0 for t in TABLES), found
    stored = runs(db)
    assert all(r[3] == "complete" for r in stored)
    kinds = sorted((r[1], r[2]) for r in stored)
    # base statistics + tuned statistics per task, a fine-tuning, a comparison and a sweep each
    assert kinds == sorted(
        [(k, t) for t in TASKS for k in ("statistics", "statistics", "finetune", "compare", "ablation")]
    )
    with duckdb.connect(str(db), read_only=True) as con:
        tuned = con.execute(
            "SELECT name, finetuned_task, base_model_id IS NOT NULL FROM models "
            "WHERE finetuned_task IS NOT NULL ORDER BY name"
        ).fetchall()
        metrics = {r for r in con.execute("SELECT DISTINCT metric FROM ablations").fetchall()}
        per_task = con.execute(
            "SELECT task, count(DISTINCT model_id) FROM runs JOIN head_stats USING (run_id) GROUP BY task ORDER BY task"
        ).fetchall()
    assert [(Path(n).name, t, linked) for n, t, linked in tuned] == [("rte", "rte", True), ("stsb", "stsb", True)]
    assert {("accuracy",), ("pearson",), ("spearman",)} <= metrics  # STS-B swept as a regression
    assert per_task == [("rte", 2), ("stsb", 2)]
    for task in TASKS:
        assert (tmp / "models" / task / "attnwh_finetune.json").is_file()


def test_report_is_written_with_the_study_charts(studied):
    _, _, tmp = studied
    page = (tmp / "report.html").read_text(encoding="utf-8")
    from attnwh.reports.build import build_report

    built = build_report(tmp / "w.duckdb")
    ids = [c.id for c in built.charts()]
    assert {"chart-special-tokens-heads", "chart-finetune-change-heads", "chart-finetune-change-layers"} <= set(ids)
    for chart_id in ids:
        assert f'id="{chart_id}"' in page, chart_id
    assert {"chart-ablation-heads", "chart-ablation-layers", "chart-ablation-curve", "chart-importance"} <= set(ids)


def test_report_renders_in_chromium(studied, browser):  # noqa: F811
    _, _, tmp = studied
    from attnwh.reports.build import build_report

    assert_drawn(browser, tmp / "report.html", tuple(c.id for c in build_report(tmp / "w.duckdb").charts()))


def assert_drawn(chromium, report: Path, ids: tuple[str, ...]):
    """Open the report offline in Chromium: every chart drawn, no console error, no request;
    returns the open tab (the caller closes its context)."""
    tab, log = open_offline(chromium, report)
    _wait_for_charts(tab, ids)
    for chart_id in ids:
        assert "could not be drawn" not in tab.locator(f"#{chart_id}").inner_text(), chart_id
    assert log["errors"] == [] and log["requests"] == [] and log["dialogs"] == []
    return tab


def test_rerun_skips_every_stage(monkeypatch, capsys, studied):
    model, glue, tmp = studied
    before = runs(tmp / "w.duckdb")
    weights = {p: p.stat().st_mtime_ns for p in (tmp / "models").rglob("*")}
    report = (tmp / "report.html").stat().st_mtime_ns
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(monkeypatch, capsys, *study_args(model, glue, tmp))
    assert code == 0, err
    for stage in ("ingest-base", "finetune", "ingest-tuned", "compare", "ablation", "report"):
        assert f"{stage} skipped" in err, (stage, err)
    # Each stage says its peak memory (this process's resident set, sampled while it ran).
    peaks = [float(p) for p in re.findall(r"skipped in [\d.]+ s, peak memory ([\d.]+) GiB", " ".join(err.split()))]
    assert len(peaks) == 6 and all(0.05 < p < 64 for p in peaks), err
    # The banner says what each stage is scored on: fine-tuning on the whole eval split (16).
    banner = " ".join(err.split())
    assert "scored on every eval example (rte 16, stsb 16); statistics on up to 12 and ablation on up to 12" in banner
    assert runs(tmp / "w.duckdb") == before
    assert {p: p.stat().st_mtime_ns for p in (tmp / "models").rglob("*")} == weights
    assert (tmp / "report.html").stat().st_mtime_ns == report
    # The summary: per task its score, most changed layer and most helpful head, its sink heads
    # disabled together (or why not); then the paths.
    assert "pearson" in out and "accuracy" in out and "rte" in out and "stsb" in out
    # A block per task in plain words, every line within 80 columns (rich draws 80 wide off a terminal).
    assert "most helpful head" in out and "sink heads" in out and "most changed layer" in out
    long = [
        line
        for line in out.splitlines()
        if len(line) > 80 and not line.startswith(("report:", "warehouse:", "models:"))
    ]
    assert not long, long
    assert "examples" in out.split("fine-tuned", 1)[1].splitlines()[0]  # the score says on how many
    assert "statistics run of this model" not in out  # the tuned model's statistics hold the sweep's examples
    assert str((tmp / "report.html").resolve()) in out and str((tmp / "w.duckdb").resolve()) in out


def test_lineage_note_is_written_once_complete(studied):
    """finetune writes the note with the study's part, after the model: the same keys and
    fields as when the study rewrote it, and the tuned weights it describes are in the warehouse."""
    import json

    _, _, tmp = studied
    with duckdb.connect(str(tmp / "w.duckdb"), read_only=True) as con:
        hashes = dict(
            con.execute("SELECT finetuned_task, weights_hash FROM models WHERE finetuned_task IS NOT NULL").fetchall()
        )
    for task in TASKS:
        note = json.loads((tmp / "models" / task / "attnwh_finetune.json").read_text(encoding="utf-8"))
        assert list(note) == ["base", "base_weights_hash", "task", "from_scratch", "options", "scores", "study"]
        assert list(note["study"]) == [
            "max_train_examples",
            "train",
            "tuned_weights_hash",
            "train_examples",
            "dev_examples",
            "train_seconds",
            "final_loss",
            "started_at",
            "finished_at",
        ]
        assert note["task"] == task and note["study"]["tuned_weights_hash"] == hashes[task]
        folder = {"rte": "RTE", "stsb": "STS-B"}[task]
        assert note["study"]["train"] == ["glue", "train", str(tmp / "glue" / folder / "train.tsv"), 40]
        assert note["study"]["train_examples"] == 40 and note["study"]["dev_examples"] == 16


def test_finetune_run_describes_its_training(studied):
    """The fine-tuning run names the train split it was trained on, its size and sample limit,
    and spans the training; the scores keep the eval split's size."""
    _, _, tmp = studied
    with duckdb.connect(str(tmp / "w.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT r.task, r.split, r.source, r.n_examples, r.example_limit, "
            "date_diff('microsecond', r.started_at, r.finished_at) / 1e6, f.train_seconds, "
            "(SELECT max(s.n_examples) FROM scores s WHERE s.run_id = r.run_id) "
            "FROM runs r JOIN finetunes f USING (run_id) ORDER BY r.task"
        ).fetchall()
    for (task, split, source, n, limit, span, seconds, scored), folder in zip(rows, ("RTE", "STS-B"), strict=True):
        assert (split, source, n, limit, scored) == ("train", str(tmp / "glue" / folder / "train.tsv"), 40, 1000, 16)
        assert span >= seconds > 0, (task, span, seconds)


def test_summary_is_the_warehouse_read_as_before(studied):
    """A Study with the command's settings finds every stage done (skipped, decided from its
    per-task outcomes), and its summary is what the Python selection over the named queries
    gave before the study_summary query."""
    from attnwh.sql.queries import get_query, run_query
    from attnwh.study import STAGES, Study, StudyOptions

    model, glue, tmp = studied
    options = StudyOptions(
        model=str(model),
        tasks=TASKS,
        glue_dir=glue,
        limit=12,
        ablation_limit=12,
        max_train_examples=1000,
        epochs=3,
        lr=1e-3,
        batch_size=8,
        resamples=100,
        device="cpu",
        db=tmp / "w.duckdb",
        report=tmp / "report.html",
        out_dir=tmp / "models",
    )
    runner = Study(options)
    results = runner.run()
    assert [r.stage for r in results] == list(STAGES)
    assert all(r.outcome == "skipped" and r.tasks and not any(t.wrote for t in r.tasks) for r in results)
    assert all(r.detail == [f"{t.subject}: {t.outcome}" for t in r.tasks] for r in results)
    assert results[1].detail == ["rte: kept", "stsb: kept"]

    with duckdb.connect(str(tmp / "w.duckdb"), read_only=True) as con:
        expected = []
        for task in runner.tasks:
            tuned = runner.tuned(task)
            score = con.execute(
                "SELECT value FROM scores WHERE run_id = ? AND metric = ?",
                [runner.run_ids[("finetune", task.name)], task.metric],
            ).fetchall()[0][0]
            layers = [
                r
                for r in run_query(
                    con, get_query("finetune_change_by_layer"), {"tuned": tuned.name, "task": task.name}
                ).to_pylist()
                if r["run_id"] == runner.run_ids[("compare", task.name)]
            ]
            best_layer = min(layers, key=lambda r: r["mean_cosine"])
            heads = [
                r
                for r in run_query(
                    con,
                    get_query("ablation_effect"),
                    {"model": tuned.name, "task": task.name, "mode": "uniform", "metric": task.metric},
                ).to_pylist()
                if r["run_id"] == runner.run_ids[("ablation:uniform", task.name)]
            ]
            best = max(heads, key=lambda r: (r["delta"], -(r["p_adjusted"] or 1.0)))
            helpful = (best["layer"], best["head"], best["delta"], best["p_adjusted"]) if best["delta"] > 0 else None
            expected.append((task.name, task.metric, score, (best_layer["layer"], best_layer["mean_cosine"]), helpful))
    found = [(s.task, s.metric, s.score, s.changed_layer, s.helpful_head) for s in runner.summary()]
    assert found == expected
    _check_sinks(runner, tmp / "w.duckdb")


def _check_sinks(runner, db: Path) -> None:
    """The summary's sink heads: the tuned model's statistics run (ingest-tuned, on a sample
    that holds the sweep's) is found, and the count, delta and p are the sinks combination's,
    or the note says there was no sink head."""
    from attnwh.ingest.runs.ablation import NO_SINKS
    from attnwh.sql.queries import get_query, run_query

    with duckdb.connect(str(db), read_only=True) as con:
        for s, task in zip(runner.summary(), runner.tasks, strict=True):
            run_id = runner.run_ids[("ablation:uniform", task.name)]
            heads = run_query(con, get_query("sink_heads_of_run"), {"run": run_id}).to_pylist()
            assert heads and {h["statistics_run"] for h in heads} == {runner.run_ids[("ingest-tuned", task.name)]}
            sinks = [h for h in heads if h["sink"]]
            stored = con.execute(
                "SELECT n_disabled, delta, p_value FROM ablation_results WHERE run_id = ? AND kind = 'sinks' AND metric = ?",
                [run_id, task.metric],
            ).fetchall()
            if sinks:
                assert s.sinks == stored[0] and s.sinks[0] == len(sinks) and s.sinks_note is None
            else:
                assert s.sinks is None and stored == [] and s.sinks_note == NO_SINKS


def test_stage_table_names_help_and_methods():
    from attnwh.study import STAGE_HELP, STAGE_TABLE, STAGES, Study

    assert STAGES == ("ingest-base", "finetune", "ingest-tuned", "compare", "ablation", "report")
    assert list(STAGE_HELP) == list(STAGES)
    assert STAGE_HELP["compare"] == "how each head's attention changed through fine-tuning (cosine of the maps)"
    assert [s.run for s in STAGE_TABLE] == [
        Study.stage_ingest_base,
        Study.stage_finetune,
        Study.stage_ingest_tuned,
        Study.stage_compare,
        Study.stage_ablation,
        Study.stage_report,
    ]


def test_stage_result_skips_on_outcomes_not_text():
    from attnwh.study import StageResult

    kept = StageResult("finetune")
    kept.add("rte", "kept", wrote=False)
    kept.add("stsb · uniform", "run 4 already complete", wrote=False)
    assert kept.wrote_nothing and kept.detail == ["rte: kept", "stsb · uniform: run 4 already complete"]
    worded_alike = StageResult("report")
    worded_alike.add("out/kept", "2 charts, 1 of 3 sections with data kept", wrote=True)
    assert not worded_alike.wrote_nothing
    assert not StageResult("ablation").wrote_nothing  # no tasks: done, not skipped


def test_force_redoes_only_that_stage(monkeypatch, capsys, studied):
    model, glue, tmp = studied
    before = runs(tmp / "w.duckdb")
    code, out, err = run(monkeypatch, capsys, *study_args(model, glue, tmp, "--force", "ablation"))
    assert code == 0, err
    after = runs(tmp / "w.duckdb")
    kept = [r for r in before if r[1] != "ablation"]
    assert [r for r in after if r[1] != "ablation"] == kept
    new = [r for r in after if r[1] == "ablation"]
    assert len(new) == len(TASKS) and min(r[0] for r in new) > max(r[0] for r in before)
    for stage in ("ingest-base", "finetune", "ingest-tuned", "compare"):
        assert f"{stage} skipped" in err
    assert "ablation done" in err and "report done" in err  # new rows: the report is rewritten
    assert all(counts(tmp / "w.duckdb")[t] > 0 for t in TABLES)


def test_summary_reports_the_sink_heads_disabled_together(monkeypatch, capsys, studied):
    """A tiny random model has no sink head (the note says so, checked above); with one made
    by hand in the tuned model's statistics, a redone sweep disables it and the summary shows
    how many, the delta and p, as stored."""

    model, glue, tmp = studied
    db = tmp / "w.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE head_stats SET to_sep = 0.6 WHERE layer = 0 AND head = 1 AND run_id IN (SELECT r.run_id FROM runs r "
            "JOIN models m USING (model_id) WHERE r.kind = 'statistics' AND r.task = 'rte' AND m.finetuned_task = 'rte')"
        )
    args = study_args(model, glue, tmp, "--force", "ablation")
    args[args.index("--tasks") + 1] = "rte"
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        ((disabled, delta, p),) = con.execute(
            "SELECT disabled, delta, p_value FROM ablation_results WHERE kind = 'sinks' AND metric = 'accuracy' "
            "AND run_id = (SELECT max(run_id) FROM runs WHERE kind = 'ablation' AND task = 'rte')"
        ).fetchall()
    assert disabled == "0-1"
    significant = "significant" if p < 0.05 else "not significant"
    shown = " ".join(out.split())  # the sentence may wrap
    assert f"1 sink head disabled together: accuracy {delta:+.4f}, p {p:.2g}, {significant}" in shown, out
    assert "no sinks combination" not in out


def test_other_sweep_settings_add_only_an_ablation_run(monkeypatch, capsys, studied):
    model, glue, tmp = studied
    args = study_args(model, glue, tmp, "--no-importance")
    args[args.index("--tasks") + 1] = "stsb"  # the regression task alone
    before = runs(tmp / "w.duckdb")
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    # Only the sweep's settings changed: a new ablation run, the rest kept.
    for stage in ("ingest-base", "finetune", "ingest-tuned", "compare"):
        assert f"{stage} skipped" in err
    assert "ablation done" in err and "report done" in err
    new = [r for r in runs(tmp / "w.duckdb") if r not in before]
    assert [(r[1], r[2], r[3]) for r in new] == [("ablation", "stsb", "complete")]
    with duckdb.connect(str(tmp / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM head_importance WHERE run_id = ?", [new[0][0]]).fetchall()[0][0] == 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tasks", "nope"], "unknown GLUE task 'nope'"),
        (["--force", "everything"], "unknown stage 'everything'"),
        (["--tasks", "qnli"], "leave qnli out of --tasks"),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(monkeypatch, capsys, tiny_model_dir, tmp_path, extra, message):
    glue = write_glue(tmp_path / "glue")
    args = study_args(tiny_model_dir("bert"), glue, tmp_path)
    if extra[0] == "--tasks":
        args[args.index("--tasks") + 1] = extra[1]
        extra = []
    code, out, err = run(monkeypatch, capsys, *args, *extra)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "w.duckdb").exists() and not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    "replace, message",
    [
        ({"--glue-dir": "missing"}, "GLUE directory not found"),
        ({"--glue-dir": None, "--tasks": "sst2"}, "unknown sample task 'sst2'"),
        ({"--tasks": "nope"}, "unknown GLUE task 'nope'"),
    ],
)
def test_the_train_split_hint_only_follows_a_missing_train_split(
    monkeypatch, capsys, tiny_model_dir, tmp_path, replace, message
):
    """The hint to leave a task out is for a task without a train split (QNLI above), not for
    a missing folder or an unknown task, whose fix is another option."""
    args = study_args(tiny_model_dir("bert"), write_glue(tmp_path / "glue"), tmp_path)
    for option, value in replace.items():
        at = args.index(option)
        if value is None:
            del args[at : at + 2]
        else:
            args[at + 1] = str(tmp_path / value) if option == "--glue-dir" else value
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert "leave" not in err and "fine-tunes on" not in err, err


def test_a_note_without_the_study_part_is_trained_again(monkeypatch, capsys, studied):
    """Last: it rewrites a model. A folder whose note lacks the study's part (finetune's own
    note, say) was not finished by the study, so the study trains it again."""
    import json

    model, glue, tmp = studied
    note_path = tmp / "models" / "rte" / "attnwh_finetune.json"
    note = json.loads(note_path.read_text(encoding="utf-8"))
    note_path.write_text(json.dumps({k: v for k, v in note.items() if k != "study"}, indent=2), encoding="utf-8")
    before = runs(tmp / "w.duckdb")
    args = study_args(model, glue, tmp)
    args[args.index("--tasks") + 1] = "rte"
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "trained differently; training again" in err and "finetune done" in err
    new = [r for r in runs(tmp / "w.duckdb") if r not in before]
    assert ("finetune", "rte", "complete") in [(r[1], r[2], r[3]) for r in new]
    again = json.loads(note_path.read_text(encoding="utf-8"))
    assert list(again) == list(note) and list(again["study"]) == list(note["study"])


def test_fine_tuning_bars_count_steps_not_examples():
    """The study's fine-tuning bar counts optimizer steps and says so (step/s, with the loss);
    the other stages' bars count examples (ex/s)."""
    import io
    import time

    from rich.console import Console

    from attnwh.progress import StudyHooks as _ConsoleHooks

    def shown(stage: str, update) -> str:
        out = io.StringIO()
        with _ConsoleHooks(Console(file=out, width=200)) as hooks:
            hooks.stage(stage, 1, 6)
            hooks.start(f"{stage} rte", None)
            for i in (1, 2):
                time.sleep(0.01)
                update(hooks, i)
            progress = hooks.bars._progress
            assert progress is not None
            probe = Console(file=io.StringIO(), width=200)
            probe.print(progress.get_renderable())
            return probe.file.getvalue()  # type: ignore[attr-defined]

    tuning = shown("finetune", lambda h, i: h.step(i, 10, 0.5))
    assert "step/s" in tuning and "ex/s" not in tuning and "loss 0.5000" in tuning, tuning
    ingesting = shown("ingest-base", lambda h, i: h.advance(4))
    assert "ex/s" in ingesting and "step/s" not in ingesting, ingesting


def test_a_decoder_study_runs_every_stage_and_its_report_draws_without_sep(
    monkeypatch,
    capsys,
    tmp_path,
    browser,  # noqa: F811
):
    """`attnwh study --model <tiny llama>` on the sample sentiment task: the base and tuned
    statistics, the fine-tuned classifier, the comparison and the ablation sweep of the tuned
    classifier are stored; the report, opened offline in Chromium, draws its charts with no
    [SEP] panel and no console error; a rerun skips every stage."""
    from tiny_models import make_tiny_decoder

    model = make_tiny_decoder("llama", tmp_path / "llama")
    db, report = tmp_path / "w.duckdb", tmp_path / "report.html"
    args = [
        "study", "--model", str(model), "--max-train-examples", "16", "--epochs", "1", "--lr", "1e-3",
        "--batch-size", "8", "--limit", "4", "--device", "cpu", "--db", str(db), "--report", str(report),
        "--out-dir", str(tmp_path / "models"), "--resamples", "100",
    ]  # fmt: skip
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "Traceback" not in err and "not run" not in err
    kinds = sorted(r[1] for r in runs(db))
    assert kinds == ["ablation", "compare", "finetune", "statistics", "statistics"], kinds
    assert all(r[3] == "complete" for r in runs(db))
    with duckdb.connect(str(db), read_only=True) as con:
        tuned = con.execute("SELECT architecture, causal FROM models WHERE finetuned_task = 'sentiment'").fetchall()
        assert tuned == [("LlamaForSequenceClassification", True)]
        assert con.execute("SELECT count(*), count(to_sep) FROM head_stats").fetchone() == (2 * 4 * 2 * 4, 0)
        assert con.execute("SELECT count(*) FROM attention_change").fetchone() == (4 * 2 * 4,)
        # The baseline, 2 × 4 heads and 2 layers, each on the 4 examples (and the combinations).
        swept = con.execute(
            "SELECT c.mode, count(DISTINCT c.config_id) FROM ablation_predictions p "
            "JOIN ablation_configs c USING (run_id, config_id) WHERE c.kind IN ('baseline', 'head', 'layer') "
            "GROUP BY c.mode ORDER BY c.mode"
        ).fetchall()
        assert swept == [("uniform", 11)], swept
    from attnwh.reports.build import build_report

    tab = assert_drawn(browser, report, tuple(c.id for c in build_report(db).charts()))
    drawn = tab.locator("#chart-special-tokens-heads").inner_html()
    # No [SEP] panel: every cell drawn is a share of the first token or punctuation (the grid's
    # title says a decoder has no [SEP]).
    assert "share: first token" in drawn and "share: [SEP]" not in drawn
    tab.context.close()

    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    for stage in ("ingest-base", "finetune", "ingest-tuned", "compare", "ablation", "report"):
        assert f"{stage} skipped" in err, (stage, err)
    assert len(runs(db)) == 5
