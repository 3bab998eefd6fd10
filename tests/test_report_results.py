"""`attnwh report results` refuses what it cannot write in one line, before writing anything,
and the published results pages carry the line the command writes under their title. (The
pages themselves are checked against plain SQL in test_results_page.py,
test_decoder_results_page.py and test_roles_results_page.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnwh.errors import UsageError
from attnwh.reports.markdown import generated
from attnwh.reports.results import ResultsPage, write_results_page
from fixtures.synthetic_warehouse import build_synthetic_warehouse
from helpers import run

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> Path:
    """A warehouse of two encoders' statistics runs, no fine-tuning and no decoder."""
    db = tmp_path_factory.mktemp("encoders") / "w.duckdb"
    build_synthetic_warehouse(db, examples=8, layers=2, heads=2)
    return db


def one_line_refusal(monkeypatch, capsys, tmp_path: Path, *args: str) -> str:
    """Run `attnwh report ARGS --out tmp/page.md`; assert it exits 2 with one line on stderr
    and writes nothing; returns the line."""
    out = tmp_path / "page.md"
    code, stdout, err = run(monkeypatch, capsys, "report", *args, "--out", str(out))
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, (code, stdout, err)
    assert err.startswith("attnwh: error: ") and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "page").exists()
    return err


def test_a_missing_warehouse_is_one_line(monkeypatch, capsys, tmp_path):
    missing = tmp_path / "nowhere.duckdb"
    err = one_line_refusal(monkeypatch, capsys, tmp_path, "results", "--page", "study", "--db", str(missing))
    assert f"no warehouse at {missing}" in err
    assert not missing.exists()  # read-only: no warehouse is created either


@pytest.mark.parametrize(
    ("page", "words"),
    [
        ("study", "the study page needs fine-tuning runs from one base model; "),
        ("decoder", "a decoder's page needs the runs of one decoder; the warehouse has 0"),
        ("roles", "a decoder's page needs the runs of one decoder; the warehouse has 0"),
        ("findings", "the findings page reads decoders' runs; this warehouse has none"),
    ],
)
def test_a_warehouse_without_the_pages_runs_is_one_line(monkeypatch, capsys, tmp_path, encoders, page, words):
    err = one_line_refusal(monkeypatch, capsys, tmp_path, "results", "--page", page, "--db", str(encoders))
    assert words in err, err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--page", "decoder", "--log", "study.log"], "--log is an option of the study page, not the decoder"),
        (
            ["--page", "study", "--companion", "x.md"],
            "--companion is an option of the decoder and roles pages, not the study page",
        ),
        (["--page", "roles", "--model", "m"], "--model is an option of the decoder page, not the roles"),
        (["--page", "study", "--time-dir", "no-such-folder"], "--time-dir no-such-folder: no such file or folder"),
        (["--page", "encoder"], "'encoder' is not one of"),
        (["--out", "x.md"], "Missing option '--page'"),
    ],
)
def test_bad_options_are_one_line(monkeypatch, capsys, tmp_path, encoders, args, words):
    monkeypatch.chdir(tmp_path)
    err = one_line_refusal(monkeypatch, capsys, tmp_path, "results", *args, "--db", str(encoders))
    assert words in err, err


@pytest.mark.parametrize(
    ("before", "words"),
    [
        (["--format", "png"], "--format/-f is an option of bare `attnwh report`; 'results' does not take it"),
        (
            ["--db", "w.duckdb"],
            "--db belongs after 'results' (options before a subcommand are those of bare `attnwh report`)",
        ),
    ],
)
def test_options_of_bare_report_before_results_are_refused(monkeypatch, capsys, tmp_path, encoders, before, words):
    err = one_line_refusal(monkeypatch, capsys, tmp_path, *before, "results", "--page", "study", "--db", str(encoders))
    assert words in err, err


def test_the_python_function_refuses_like_the_command(encoders, tmp_path):
    with pytest.raises(UsageError, match="not one of study, decoder, roles"):
        write_results_page(encoders, "encoder", tmp_path / "page.md")
    with pytest.raises(UsageError, match="--cost-note is an option of the study page"):
        write_results_page(encoders, ResultsPage.roles, tmp_path / "page.md", cost_note="beside a fine-tuning")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("file", "page"),
    [("all-mpnet-base-v2.md", "study"), ("smollm2-135m.md", "decoder"), ("smollm2-135m-roles.md", "roles")],
)
def test_published_pages_name_the_command_that_regenerates_them(file, page):
    lines = (RESULTS / file).read_text(encoding="utf-8").splitlines()
    assert lines[2].startswith(generated(page)[0]), lines[2]
