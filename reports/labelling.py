"""The labelling page of `attnwh patterns label`: one offline HTML file on which a person
gives each stored attention map a pattern type with one key press, then exports the labels
as the CSV that `attnwh patterns import-labels` reads.

The page holds its maps as JSON data (escaped as the report's specs are, so tokens from a
dataset stay text) and draws each one on a canvas, large, with its tokens on the axes. The
stored type is not shown: it would sway the person labelling. Labels are kept in the
browser's localStorage per page, so a reload or a closed tab loses nothing.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from importlib import resources

import jinja2
from markupsafe import Markup

from attnwh.reports.page import script_json

# Keys per type, in the order of pattern_types (the first key is the one the page shows).
KEYS: dict[str, tuple[str, ...]] = {
    "heterogeneous": ("h", "1"),
    "vertical": ("v", "2"),
    "diagonal": ("d", "3"),
    "vertical+diagonal": ("x", "4"),
    "block": ("b", "5"),
    "skip": ("s", "0"),
}


@functools.lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    source = (resources.files("attnwh.reports") / "templates" / "labelling.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source)


def _script() -> str:
    text = (resources.files("attnwh.reports") / "templates" / "labelling.js").read_text(encoding="utf-8")
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


def label_page(maps: Sequence[dict[str, object]], title: str) -> str:
    """The page for `maps` (records of `attnwh.ingest.runs.patterns.label_sample`). Weights
    are rounded to 4 decimals, which no one can tell apart on screen and which keeps a page of
    hundreds of whole maps to a few megabytes."""
    # Example ids are 64-bit hashes, beyond what a JavaScript number holds exactly: strings.
    items = [
        {**m, "example": str(m["example"]), "cells": [round(float(v), 4) for v in m["cells"]]}  # type: ignore[attr-defined]
        for m in maps
    ]
    data = script_json(items)
    # The page's identity keys its saved labels: the same sample keeps them, another starts afresh.
    page_id = hashlib.sha256(str(data).encode()).hexdigest()[:16]
    return _template().render(
        title=title,
        maps=data,
        keys=script_json(KEYS),
        key_rows=[(name, keys) for name, keys in KEYS.items()],
        page_id=page_id,
        count=len(items),
        script=Markup(_script()),
    )
