"""The README and the documentation pages document every command and every named query that
attnwh ships, and the README's links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

from attnwh.cli import app
from attnwh.sql.queries import named_queries

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The documentation site's pages (mkdocs.yml); the API reference is generated, not written.
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))


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
        "show",
        "finetune",
        "study",
        "status",
        "patterns",
    }
    # Subcommands of a group (`attnwh ingest compare`) need their own mention.
    subcommands = {f"{c.name} {sub}" for c in top.commands.values() for sub in getattr(c, "commands", {})}
    assert subcommands == {
        "ingest compare",
        "ingest relations",
        "ingest ablation",
        "ingest roles",
        "ingest restriction",
        "ingest massive-ablation",
        "ingest loss-curve",
        "ingest streaming",
        "report results",
        "patterns reclassify",
        "patterns label",
        "patterns calibrate",
        "patterns import-labels",
        "patterns train",
    }
    for name in commands | subcommands:
        assert f"`attnwh {name}" in README, name
        assert f"`attnwh {name}" in DOCS, name


def test_docs_list_every_named_query():
    for name, query in named_queries().items():
        row = re.search(rf"^\| `{name}` \| ([^|]*) \|", DOCS, re.MULTILINE)
        assert row, name
        assert [p.strip() for p in row.group(1).split(",") if p.strip()] == list(query.params)


def test_readme_test_command_is_ci():
    assert "bash .ci/run" in README


def test_readme_is_short():
    """What a newcomer needs; the rest is in docs/ (issue 26)."""
    assert len(README.splitlines()) <= 250


def _github_anchors(markdown: str) -> set[str]:
    """The ids GitHub (and MkDocs' toc, for these headings) gives the headings of a page."""
    anchors = set()
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.*)", line)):
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_readme_links_lead_to_files_and_headings():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), link
        if anchor:
            assert anchor in _github_anchors(target.read_text(encoding="utf-8")), link


def test_home_page_sections_are_marked_in_the_readme():
    """docs/index.md takes these from the README (pymdownx.snippets); mkdocs --strict checks it too."""
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for name in re.findall(r'^--8<-- "README\.md:([\w-]+)"$', home, re.MULTILINE):
        assert f"<!-- --8<-- [start:{name}] -->" in README, name
        assert f"<!-- --8<-- [end:{name}] -->" in README, name
