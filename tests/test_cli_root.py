"""`attnwh` itself: --version, the help of a bare `attnwh`, and the order of the commands in
it (what a newcomer runs first at the top, `merge` at the bottom)."""

from __future__ import annotations

import importlib.metadata
import re

from helpers import run


def test_version(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, "--version")
    assert code == 0 and out == f"attnwh {importlib.metadata.version('attnwh')}\n" and not err


def test_commands_are_listed_study_first_merge_last(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(monkeypatch, capsys, "--help")
    assert code == 0
    listed = re.findall(r"^│ (\w+)\s{2,}", out, flags=re.MULTILINE)
    commands = [name for name in listed if not name.startswith("-")]
    assert commands == [
        "study",
        "ingest",
        "finetune",
        "status",
        "report",
        "show",
        "query",
        "queries",
        "sql",
        "schema",
        "patterns",
        "merge",
    ]
    panels = re.findall(r"^╭─ ([^─]+?) ─", out, flags=re.MULTILINE)
    assert panels == ["Options", "Run models", "Read the warehouse", "More"]


def test_bare_attnwh_shows_the_help_once(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys)
    assert code == 0 and out.count("Usage:") == 1 and out.count("╭─ Run models") == 1 and not err


def test_ctrl_c_anywhere_is_one_line_and_exit_130(monkeypatch, capsys):
    # Ctrl-C where no command handles it (here: while the bundled task is read) must not exit 0.
    from attnwh.ingest.sources import tasks

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tasks, "load_tasks", interrupted)
    monkeypatch.setattr("attnwh.options.load_tasks", interrupted)
    code, _, err = run(monkeypatch, capsys, "ingest", "--limit", "2")
    assert code == 130 and err.strip().splitlines()[-1] == "attnwh: error: interrupted"
