"""`attnwh report results --page study` on a tiny study (`attnwh study` on RTE and STS-B, from-scratch and
untrained-head fine-tunings, dependency and FrameNet relations): every figure's section is
written, and its numbers are the warehouse's, read here with plain SQL on the tables."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from attnwh.reports.markdown import stored_as
from helpers import cli_main
from test_frames import framebert_text
from test_relations import CONLLU
from test_study import study_args, write_glue

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from tiny_models import make_tiny

    tmp = tmp_path_factory.mktemp("results")
    model = make_tiny("bert", tmp / "base")
    glue = write_glue(tmp / "glue")
    db = tmp / "w.duckdb"
    cli_main(*study_args(model, glue, tmp))
    common = ("--model", str(model), "--glue-dir", str(glue), "--task", "rte", "--batch-size", "8", "--db", str(db))
    cli_main("finetune", *common, "--from-scratch", "--epochs", "1", "--out", str(tmp / "scratch"))
    cli_main("finetune", *common, "--epochs", "0", "--out", str(tmp / "untrained"))
    (tmp / "ud.conllu").write_text(CONLLU, encoding="utf-8")
    (tmp / "fn.conll").write_text(framebert_text(), encoding="utf-8")
    for flag, path in (("--conllu", "ud.conllu"), ("--framenet", "fn.conll")):
        cli_main("ingest", "relations", flag, str(tmp / path), "--model", str(model), "--db", str(db))
    log = tmp / "study.log"
    # Two sessions' logs, as `attnwh study` prints them: a stage skipped on the rerun costs
    # nothing; a stage done for some tasks names them.
    log.write_text(
        "stage 1/6: ingest-base — head statistics of the pre-trained model on each task's\neval split\n"
        "  rte: run 1 complete\n  stsb: run 2 complete\n  ingest-base done in 12.5 s, peak memory 1.50 GiB\n"
        "stage 5/6: ablation — disable every head and layer of each tuned model, with \nsignificance\n"
        "rte · uniform: 157 configurations  32/200 0.2 ex/s 0:02:12 eta 0:11:34\n"
    )
    rerun = tmp / "study2.log"
    rerun.write_text(
        "stage 1/6: ingest-base — head statistics of the pre-trained model on each task's\neval split\n"
        "  rte: run 1 already complete\n  stsb: run 2 already complete\n"
        "  ingest-base skipped in 1.0 s, peak memory 1.03 GiB\n"
        "stage 5/6: ablation — disable every head and layer of each tuned model, with \nsignificance\n"
        "  rte · uniform: run 9 already complete\n  stsb · uniform: run 10 complete\n"
        "  ablation done in 600.0 s, peak memory 2.25 GiB\n"
    )
    (tmp / "time-scratch-rte.txt").write_text(
        "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03\n\tMaximum resident set size (kbytes): 2097152\n"
    )
    (tmp / "time-study.txt").write_text(
        '\tCommand being timed: "attnwh study --tasks rte,stsb"\n'
        "\tElapsed (wall clock) time (h:mm:ss or m:ss): 10:00\n\tMaximum resident set size (kbytes): 2097152\n"
    )
    out = tmp / "docs" / "tiny.md"
    cli_main("report", "results", "--page", "study", "--db", str(db), "--name", "tiny", "--log", str(log),
             "--log", str(rerun), "--time-dir", str(tmp), "--out", str(out))  # fmt: skip
    return db, out, out.read_text(encoding="utf-8")


def rows_of(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under `heading`."""
    section = text.split(heading, 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    table = []
    for line in lines[2:]:
        table.append([cell.strip() for cell in line.strip("|").split("|")])
        if not section.split(line, 1)[1].startswith("\n|"):
            break
    return table


def test_every_figure_has_its_section_and_its_charts(page):
    _, out, text = page
    for heading in (
        "## Table 1",
        "## Fig. 2",
        "## Fig. 5",
        "## Figs. 6–7",
        "## Figs. 8–9",
        "## FrameNet and dependency heads",
        "## What it costs",
    ):
        assert heading in text
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(images) == 6
    for image in images:
        assert (out.parent / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (out.parent / out.stem).iterdir()) == sorted(Path(i).name for i in images)


def test_the_page_shows_no_folder_of_the_machine(page, tmp_path):
    """The study stored its model as an absolute folder; the page names it by its place beside
    the warehouse, and a warehouse elsewhere names only the folder's own name."""
    db, _, text = page
    assert str(db.parent) not in text and "/tmp" not in text
    model_line = next(line for line in text.splitlines() if line.startswith("Model:"))
    assert "`base`" in model_line, model_line
    assert stored_as(str(db.parent / "base"), tmp_path / "elsewhere.duckdb") == "stored as a local folder named `base`"
    assert stored_as("sentence-transformers/all-mpnet-base-v2", db) == (
        "`sentence-transformers/all-mpnet-base-v2` as stored"
    )


def test_table1_is_the_stored_scores(page):
    db, _, text = page
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute(
            "SELECT r.task, s.metric, f.from_scratch, f.epochs, s.value FROM scores s "
            "JOIN finetunes f USING (run_id) JOIN runs r USING (run_id)"
        ).fetchall()
    kinds = {
        (t, m, "scratch" if scratch else "pretrained" if epochs == 0 else "tuned"): v
        for t, m, scratch, epochs, v in stored
    }
    rows = {(r[0], r[1]): r[2:] for r in rows_of(text, "## Table 1")}
    assert rows.keys() == {(t, m) for t, m, _ in kinds}
    for (task, metric), cells in rows.items():
        for cell, kind in zip(cells, ("pretrained", "scratch", "tuned"), strict=True):
            ours = cell.split(" / ")[1]
            value = kinds.get((task, metric, kind))
            assert ours == ("–" if value is None else f"{100 * value:.1f}"), (task, metric, kind)
    assert rows[("rte", "accuracy")][0].startswith("52.7 / ")  # the paper's number beside ours


def test_fig5_is_the_mean_cosine_per_layer(page):
    db, _, text = page
    with duckdb.connect(str(db), read_only=True) as con:
        means = dict(
            ((task, layer), mean)
            for task, layer, mean in con.execute(
                "SELECT r.task, c.layer, avg(c.cosine) FROM attention_change c JOIN runs r USING (run_id) GROUP BY ALL"
            ).fetchall()
        )
    header = next(line for line in text.split("## Fig. 5", 1)[1].splitlines() if line.startswith("| layer"))
    tasks = [cell.strip() for cell in header.strip("|").split("|")][1:]
    rows = rows_of(text, "## Fig. 5")
    assert len(rows) == len({layer for _, layer in means})
    for row in rows:
        for task, cell in zip(tasks, row[1:], strict=True):
            assert cell == f"{means[(task, int(row[0]))]:.3f}"


def test_ablation_counts_are_the_stored_deltas(page):
    db, _, text = page
    with duckdb.connect(str(db), read_only=True) as con:
        counts = con.execute(
            "SELECT r.task, a.metric, count(*) FILTER (WHERE a.value > a.baseline), count(*) "
            "FROM ablations a JOIN ablation_configs c USING (run_id, config_id) JOIN runs r USING (run_id) "
            "WHERE c.kind = 'head' AND c.mode = 'uniform' GROUP BY ALL"
        ).fetchall()
    rows = {(r[0], r[1]): r[3] for r in rows_of(text, "## Figs. 8–9")}
    assert rows == {(task, metric): f"{raised} of {heads}" for task, metric, raised, heads in counts}


def test_costs_come_from_the_log_and_the_time_files(page):
    _, _, text = page
    rows = rows_of(text, "## What it costs")
    # The study is costed by stage from its logs (its own time file is left out), the skipped
    # stage is not a cost, and the other commands come from their time files.
    assert rows == [
        ["ingest-base (rte, stsb)", "0.2 min", "1.50 GiB"],
        ["ablation (stsb)", "10.0 min", "2.25 GiB"],
        ["scratch-rte", "62.0 min", "2.00 GiB"],
    ]


def test_a_rerun_writes_the_same_page(page, tmp_path):
    db, _, text = page
    out = tmp_path / "again.md"
    cli_main(
        "report", "results", "--page", "study", "--db", str(db), "--name", "tiny", "--out", str(out), "--no-figures"
    )
    again = out.read_text(encoding="utf-8")
    # Without the log, time files and figures, the rest is the same text.
    strip = re.compile(r"!\[[^\]]*\]\([^)]+\)\n\n|## What it costs.*", re.S)
    assert strip.sub("", again).rstrip() == strip.sub("", text).rstrip()


def test_the_sentences_read_the_tables(page):
    db, _, text = page
    with duckdb.connect(str(db), read_only=True) as con:
        tuned = dict(
            con.execute(
                "SELECT r.task, s.value FROM scores s JOIN finetunes f USING (run_id) JOIN runs r USING (run_id) "
                "WHERE NOT f.from_scratch AND f.epochs > 0 AND s.metric = 'accuracy'"
            ).fetchall()
        )
        last = con.execute(
            "WITH l AS (SELECT r.task, c.layer, avg(c.cosine) AS m FROM attention_change c JOIN runs r USING (run_id) "
            "GROUP BY ALL) SELECT count(*) FILTER (WHERE arg_min_layer = top), count(*) FROM "
            "(SELECT task, arg_min(layer, m) AS arg_min_layer, max(layer) AS top FROM l GROUP BY task)"
        ).fetchone()
    # Table 1: the paper's RTE accuracy (64.6) minus ours.
    assert f"rte {64.6 - 100 * tuned['rte']:+.1f} (" in text.split("## Table 1", 1)[1]
    assert f"the last layer alone is the most changed on {last[0]} of {last[1]}." in text
