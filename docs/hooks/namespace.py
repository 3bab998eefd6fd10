"""MkDocs hook: lay out the one `attnwh` namespace for the API reference.

pyproject.toml's [tool.setuptools.package-dir] installs the top-level folders ingest/, sql/
and reports/ as attnwh.ingest, attnwh.sql and attnwh.reports. The editable install does that
with an import hook, which griffe (mkdocstrings' static analysis: it reads the source and
imports nothing) does not run, so it would not find `attnwh.sql.queries` under attnwh/.
Before each build this hook lays the namespace out as a tree of symbolic links under
build/docs-api/ (read from the mapping, so a new mapped folder needs no edit here), the
folder mkdocs.yml gives mkdocstrings as its `paths`. The same layout as .ci/mypy's.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

TREE = Path("build", "docs-api")


def link_tree(root: Path) -> Path:
    """Build root/build/docs-api/attnwh/ from the package-dir mapping; return the tree's folder."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    tree = root / TREE
    shutil.rmtree(tree, ignore_errors=True)
    for package, folder in sorted(mapping.items()):
        target = tree.joinpath(*package.split("."))
        source = (root / folder).resolve()
        if package == "attnwh":
            # The root package is a real folder here, so that the mapped ones can sit in it.
            target.mkdir(parents=True)
            for entry in source.iterdir():
                if entry.name != "__pycache__":
                    (target / entry.name).symlink_to(entry)
        else:
            target.symlink_to(source, target_is_directory=True)
    return tree


# First, before mkdocstrings' own on_config sets up its search paths (which must exist then).
@event_priority(100)
def on_config(config: Any) -> Any:
    link_tree(Path(config.config_file_path).resolve().parent)
    return config
