"""The README documents every command and every named query that attnwh ships."""

from __future__ import annotations

import re
from pathlib import Path

from attnwh.cli import app
from attnwh.sql.queries import named_queries

README = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")


def test_readme_lists_every_command():
    import typer

    top = typer.main.get_command(app)
    commands = {c.name for c in top.commands.values()}
    assert commands == {
        "ingest",
        "merge",
        "sql",
        "queries",
        "query",
        "schema",
        "report",
        "finetune",
        "study",
        "patterns",
    }
    # Subcommands of a group (`attnwh ingest compare`) need their own mention.
    subcommands = {f"{c.name} {sub}" for c in top.commands.values() for sub in getattr(c, "commands", {})}
    assert subcommands == {
        "ingest compare",
        "ingest relations",
        "ingest ablation",
        "patterns reclassify",
        "patterns label",
        "patterns calibrate",
        "patterns import-labels",
        "patterns train",
    }
    for name in commands | subcommands:
        assert f"`attnwh {name}" in README, name


def test_readme_lists_every_named_query():
    for name, query in named_queries().items():
        row = re.search(rf"^\| `{name}` \| ([^|]*) \|", README, re.MULTILINE)
        assert row, name
        assert [p.strip() for p in row.group(1).split(",") if p.strip()] == list(query.params)


def test_readme_test_command_is_ci():
    assert "bash .ci/run" in README
