"""The HTML page: one self-contained file a researcher can mail, archive or open offline.

Everything the page needs is inside it: Vega, Vega-Lite and vega-embed (from vl-convert's
bundle, inlined once), each chart's spec with its data, the styles. Text from the warehouse
(model paths, task names, example sentences) is data, not markup: Jinja2 autoescapes it in
the HTML, and chart specs are embedded as JSON whose `<`, `>` and `&` are \\u-escaped, so
nothing from a dataset can close a script element or open a tag.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import TYPE_CHECKING

import jinja2
import vl_convert
from markupsafe import Markup

if TYPE_CHECKING:  # build.py imports this module
    from attnwh.reports.build import Report

from attnwh.reports.inline import script_json, template_script
from attnwh.reports.sections import ChartBlock


@functools.lru_cache(maxsize=1)
def javascript_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one classic script (sets window.vegaEmbed).

    The first call costs a few seconds (vl-convert starts its JavaScript runtime), so it is
    made once per process."""
    # The stub makes `snippet` required, but the runtime's signature is (snippet=None,
    # vl_version=None) and None gives the default snippet that sets window.vegaEmbed.
    bundle = vl_convert.javascript_bundle(vl_version=vegalite_version())  # type: ignore[call-arg]
    # The bundle must not end its own <script> element early; it contains no such text today,
    # and if a future one did, `<\/` means the same to JavaScript in strings and regexes.
    return re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE).replace("<!--", "<\\!--")


@functools.lru_cache(maxsize=1)
def vegalite_version() -> str | None:
    """The Vega-Lite version Altair writes specs for ("6.4"), if vl-convert bundles it;
    None lets vl-convert take its newest."""
    import altair as alt

    wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return wanted if wanted in vl_convert.get_vegalite_versions() else None


def page_script() -> str:
    """The page's own script (templates/page.js: draws the charts, runs the head panel) after
    the token-map drawing it shares with `attnwh show` (templates/token_map.js)."""
    return template_script("token_map.js", "page.js")


@functools.lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    source = (resources.files("attnwh.reports") / "templates" / "page.html.j2").read_text(encoding="utf-8")
    # autoescape=True for every value; only the two Markup values above bypass it.
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source)


def render_page(report: Report) -> str:
    """The report as one HTML document."""
    specs = {
        block.id: script_json(block.spec())
        for item in report.sections
        for block in item.blocks
        if isinstance(block, ChartBlock)
    }
    versions = {
        "vega": vl_convert.get_vega_version(),
        "vegalite": vegalite_version() or vl_convert.get_vegalite_versions()[-1],
        "embed": vl_convert.get_vega_embed_version(),
    }
    head_data = None if report.head_panel is None else script_json(report.head_panel)
    return _template().render(
        report=report,
        specs=specs,
        bundle=Markup(javascript_bundle()),
        script=Markup(page_script()),
        head_data=head_data,
        versions=versions,
    )
