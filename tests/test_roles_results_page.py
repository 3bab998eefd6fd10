"""`attnwh report results --page roles` on a tiny Llama read as the SmolLM2 roles page reads the real one:
head roles on induction and needle probes, a loss sweep on the prose sample, a restriction run
with needle probes, the page written with its charts; its numbers are the warehouse's, read
here with plain SQL. The statistics page of the same warehouse keeps the loss sweep out of its
prompted-task sections."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from attnwh.reports.results import write_results_page
from helpers import cli_main, run
from test_decoder_ablation import HEADS, LAYERS, make_causal_lm
from test_loss_ablation import SWEEP

CONTEXT = 160  # room for a needle, its question and answer, and a haystack


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("roles-page")
    lm = make_causal_lm("llama", tmp, positions=256)
    db = tmp / "w.duckdb"
    common = ["--model", str(lm), "--db", str(db)]
    cli_main("ingest", *common, "--task", "prose", "--limit", "4", "--max-length", "24", "--device", "cpu")
    cli_main("ingest", "roles", *common, "--examples", "3", "--repeat-length", "10", "--context-length",
             str(CONTEXT), "--depths", "0,1", "--device", "cpu")  # fmt: skip
    cli_main("ingest", "ablation", *common, "--task", "prose", *SWEEP)
    cli_main("ingest", "restriction", *common, "--context-length", str(CONTEXT), "--limit", "3", "--needles", "2",
             "--grid", "0,2,4", "--sink-tokens", "1", "--window", "8", "--device", "cpu")  # fmt: skip
    # A cost file of one step, as /usr/bin/time -v writes it, and one of a step this page does not show.
    for step, wall in (("roles", "1:02.50"), ("stats-sst2", "0:05.00")):
        (tmp / f"time-{step}.txt").write_text(
            f"\tElapsed (wall clock) time (h:mm:ss or m:ss): {wall}\n\tMaximum resident set size (kbytes): 2097152\n",
            encoding="utf-8",
        )
    out = tmp / "results" / "tiny-roles.md"
    cli_main("report", "results", "--page", "roles", "--db", str(db), "--name", "tiny-llama", "--time-dir", str(tmp),
             "--companion", "tiny.md", "--out", str(out))  # fmt: skip
    return db, out.read_text(encoding="utf-8")


def sql(db: Path, text: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(text).fetchall()


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_every_section_is_written_with_its_charts(page):
    db, text = page
    for title in (
        "Head roles",
        "Disabling heads and layers: next-token loss",
        "Which heads need the whole context",
        "What it cost",
    ):
        assert f"\n## {title}\n" in text, title
    assert "[tiny-llama](tiny.md)" in text
    assert f"a llama decoder of {LAYERS} layers × {HEADS} query heads on 2 key/value heads" in text
    for chart in ("chart-head-roles", "chart-restriction-curve", "chart-restriction-needles"):
        link = re.search(rf"!\[{chart}\]\((\S+)\)", text)
        assert link and (db.parent / "results" / link[1]).stat().st_size > 1000, chart
    # Only this page's steps are in its cost table.
    cost = section(text, "What it cost")
    assert "| roles | 1.0 min | 2.00 GiB |" in cost and "stats-sst2" not in cost


def test_role_tables_and_retrieval_share_are_the_warehouses(page):
    db, text = page
    body = section(text, "Head roles")
    [(layer, head, value)] = sql(
        db,
        "SELECT layer, head, avg(induction) AS v FROM head_roles JOIN runs USING (run_id) WHERE task = 'induction' "
        "GROUP BY ALL ORDER BY v DESC, layer, head LIMIT 1",
    )
    assert f"| induction | 1 | L{layer}H{head} |" in body and f"| {value:.3f} | 3 |" in body
    [(above,)] = sql(
        db,
        "SELECT count(*) FROM (SELECT layer, head FROM head_roles JOIN runs USING (run_id) WHERE task = 'needle' "
        "GROUP BY ALL HAVING avg(retrieval) > 0.1)",
    )
    share = 100 * above / (LAYERS * HEADS)
    assert f"{above} of {LAYERS * HEADS} heads ({share:.1f} %) have a retrieval score above 0.1" in body


def test_loss_sweep_numbers_are_the_warehouses(page):
    db, text = page
    body = section(text, "Disabling heads and layers: next-token loss")
    [(base,)] = sql(
        db,
        "SELECT sum(l.nats) / sum(l.tokens) FROM ablation_losses AS l JOIN ablation_configs AS c "
        "USING (run_id, config_id) WHERE c.kind = 'baseline' AND l.span = 'all'",
    )
    assert f"baseline loss {base:.3f} nats per token" in body
    layers = sql(
        db,
        "SELECT c.layer, sum(l.nats) / sum(l.tokens) FROM ablation_losses AS l JOIN ablation_configs AS c "
        "USING (run_id, config_id) WHERE c.kind = 'layer' AND l.span = 'all' GROUP BY ALL ORDER BY 1",
    )
    assert len(layers) == LAYERS
    for layer, loss in layers:
        assert f"| {layer} | {loss:.3f} | {loss - base:+.3f} |" in body
    assert f"of {LAYERS * HEADS} heads changed the loss" in body


def test_restriction_plan_and_needles_are_the_warehouses(page):
    db, text = page
    body = section(text, "Which heads need the whole context")
    [(base, needle)] = sql(db, "SELECT loss, needle_accuracy FROM restriction_runs")
    assert f"unrestricted loss {base:.3f} nats per token" in body
    assert f"(unrestricted: {100 * needle:.0f} % of the answer tokens predicted greedily)" in body
    plan = sql(db, "SELECT k, loss, needle_accuracy FROM restriction_plan ORDER BY k")
    assert [k for k, _, _ in plan] == [0, 2, 4]
    for k, loss, accuracy in plan:
        cells = re.escape(f"| {k} | {loss:.3f} | {loss - base:+.3f} | ")
        assert re.search(cells + re.escape("[") + r"[^]]+\] " + re.escape(f"| {100 * accuracy:.0f} % |"), body)
    # Which of the top role heads' groups keep the whole context at the page's larger budget.
    assert "At a budget of 0.05 nats per token, the top induction heads' groups: L" in body
    # Three sequences: the page says no change can be significant.
    assert "With 3 sequences no change can be significant" in body


def test_the_statistics_page_of_the_same_warehouse_leaves_the_loss_sweep_out(page, tmp_path):
    db, _ = page
    out = tmp_path / "tiny.md"
    cli_main("report", "results", "--page", "decoder", "--db", str(db), "--no-figures", "--out", str(out))
    text = out.read_text(encoding="utf-8")
    assert "No ablation run of this model in the warehouse." in section(text, "The task through a prompt")
    assert "## Disabling heads and layers" not in text


def test_the_command_says_what_it_wrote_and_the_function_writes_the_same(page, monkeypatch, capsys, tmp_path):
    db, text = page
    out = tmp_path / "new-folder" / "roles.md"
    args = ("--db", str(db), "--name", "tiny-llama", "--companion", "tiny.md", "--no-figures", "--out", str(out))
    code, stdout, err = run(monkeypatch, capsys, "report", "results", "--page", "roles", *args)
    assert code == 0 and stdout == f"wrote {out}\n" and not err, err
    done = write_results_page(db, "roles", tmp_path / "api.md", name="tiny-llama", companion="tiny.md", figures=False)
    assert done.figures == [] and done.page.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")
    # Without figures and time files: the fixture's page less its images and its cost table.
    strip = re.compile(r"!\[[^\]]*\]\([^)]+\)\n\n|## What it cost.*", re.S)
    assert strip.sub("", out.read_text(encoding="utf-8")).rstrip() == strip.sub("", text).rstrip()
