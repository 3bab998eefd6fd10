"""Building a report from a warehouse file: open it read-only, run the sections, write files.

This is the library behind `attnwh report`; notebooks and scripts can call `build_report`
and `write_html` / `write_images` directly.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

from attnwh.errors import UsageError
from attnwh.reports.findings import Findings, build_findings
from attnwh.reports.head_panel import head_panel_data
from attnwh.reports.sections import SECTIONS, ChartBlock, RenderedSection, ReportContext, Section, render_sections
from attnwh.sql import warehouse
from attnwh.sql.queries import get_query, run_query


class NothingToReport(UsageError):
    """The warehouse (or the part of it the filters select) holds no attention statistics."""


@dataclass(frozen=True)
class Report:
    """A built report, ready to render: page text, the findings at the top and the sections
    with their charts."""

    title: str
    intro: str
    db_path: str
    generated_at: str
    filters: str
    version: str
    sections: list[RenderedSection]
    # The summary at the top (reports.findings); empty for a report built without it.
    findings: Findings = Findings()
    # What the head panel shows for each head (reports.head_panel); None: no panel.
    head_panel: dict | None = None
    # Built with token maps: why a run's maps were left out ("run 3: …"), one line each.
    token_map_notes: tuple[str, ...] = ()

    def charts(self) -> list[ChartBlock]:
        """Every chart of the page, in page order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, ChartBlock)]


def build_report(
    db: Path | str,
    model: str | None = None,
    task: str | None = None,
    sections: tuple[Section, ...] = SECTIONS,
    token_maps: bool = False,
) -> Report:
    """Read the warehouse at `db` (read-only) and build every section; `model` and `task`
    keep only the runs of that model name / task. With `token_maps`, the head panel embeds the
    token-level map of each head's first examples, recomputed with the runs' models
    (reports.token_maps; loads torch); a run whose model cannot load is left out, and
    `token_map_notes` says why.

    Raises UsageError when there is no warehouse at `db` or a filter names a model or task it
    does not hold, and NothingToReport when it has no statistics (for the filters)."""
    con = warehouse.connect(db, read_only=True)
    try:
        params = {"model": model, "task": task}
        scope = run_query(con, get_query("report_scope"), params, check=True).to_pylist()[0]
        filters = ", ".join(f"{k} {v!r}" for k, v in params.items() if v is not None)
        if not scope["runs"]:
            where = f" for {filters}" if filters else ""
            raise NothingToReport(
                f"no attention statistics in {db}{where}: nothing to report; add some with `attnwh ingest`"
            )
        kinds = run_query(con, get_query("run_provenance"), params).column("kind").to_pylist()
        ctx = ReportContext(con, params)
        rendered = render_sections(ctx, sections)
        findings = build_findings(ctx, sections)
        head_panel = head_panel_data(ctx, Path(db) if token_maps else None)
        left_out = tuple(head_panel["tokenMaps"]["notes"]) if token_maps else ()
    finally:
        con.close()
    models, tasks = scope["models"], scope["tasks"]
    intro = (
        f"Per-head attention statistics of {models} model{_s(models)} on {tasks} task{_s(tasks)}, after Kovaleva "
        f"et al. 2019, Clark et al. 2019 and Kobayashi et al. 2020; {run_counts(kinds)}, all in the provenance "
        "table at the end."
    )
    return Report(
        title="attnwh report",
        intro=intro,
        db_path=str(Path(db).resolve()),
        generated_at=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip(),
        filters=f"only {filters}" if filters else "",
        version=_attnwh_version(),
        sections=rendered,
        findings=findings,
        head_panel=head_panel,
        token_map_notes=left_out,
    )


def write_html(report: Report, out: Path | str) -> Path:
    """Write the self-contained page to `out` (its folder is created)."""
    from attnwh.reports.page import render_page

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(report), encoding="utf-8")
    return out


def write_images(
    report: Report, folder: Path | str, format: Literal["png", "svg"], only: Collection[str] | None = None
) -> list[Path]:
    """Write each chart (or those whose id is in `only`) as `<folder>/<chart id>.<format>` with
    vl-convert; returns the paths."""
    import vl_convert

    from attnwh.reports.page import vegalite_version

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for block in report.charts():
        if only is not None and block.id not in only:
            continue
        target = folder / f"{block.id}.{format}"
        if format == "svg":
            target.write_text(vl_convert.vegalite_to_svg(block.spec(), vl_version=vegalite_version()), encoding="utf-8")
        else:
            # scale=2: sharp on screens and in print (the heatmap cells are 13 px).
            target.write_bytes(vl_convert.vegalite_to_png(block.spec(), vl_version=vegalite_version(), scale=2))
        written.append(target)
    return written


# Run kinds in the order of the work, with the words the page uses for them.
_KIND_WORDS = {"statistics": "statistics", "finetune": "fine-tuning", "compare": "compare", "ablation": "ablation"}


def run_counts(kinds: list[str]) -> str:
    """'5 runs: 2 statistics, 1 fine-tuning, 1 compare, 1 ablation' for the runs' kinds."""
    order = [*_KIND_WORDS, *sorted(set(kinds) - set(_KIND_WORDS))]
    parts = [f"{kinds.count(k)} {_KIND_WORDS.get(k, k)}" for k in order if k in kinds]
    return f"{len(kinds)} run{_s(len(kinds))}: " + ", ".join(parts)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _attnwh_version() -> str:
    try:
        return version("attnwh")
    except PackageNotFoundError:
        return "unknown"
