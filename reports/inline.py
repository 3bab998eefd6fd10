"""What an offline page inlines, made safe for it: data as JSON inside a
`<script type="application/json">` element and scripts from templates/ inside `<script>`
elements. Shared by the report (page.py) and the `attnwh show` page (example_view.py), without
the report's chart libraries.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

from markupsafe import Markup


def script_json(value: object) -> Markup:
    """JSON for a `<script type="application/json">` element: `<`, `>`, `&` and the two
    Unicode line separators become \\u escapes, which JSON.parse reads back unchanged."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return Markup(text)


@functools.lru_cache
def template_script(*names: str) -> str:
    """The scripts `names` of templates/, one after the other, safe inside a <script> element."""
    text = "\n".join(
        (resources.files("attnwh.reports") / "templates" / name).read_text(encoding="utf-8") for name in names
    )
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)
