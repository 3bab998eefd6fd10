"""Results pages (`attnwh report results`): what a warehouse holds on one study or one model,
written up as a Markdown page beside the papers' numbers, every table naming the query it
comes from and every figure one of the report's own charts (PNG, in a folder named after the
page), so that a published page can be checked against its warehouse and regenerated.

The pages: `study`, an encoder's study against Kovaleva et al. (2019)
(:mod:`attnwh.reports.study_page`); `decoder`, a causal language model's attention sinks and a
task through its prompt (:mod:`attnwh.reports.decoder_page`); `roles`, its head roles and which
heads need the whole context (:mod:`attnwh.reports.roles_page`); `findings`, published findings
of attention research measured on the warehouse's decoders side by side
(:mod:`attnwh.reports.findings_page`).

Only the standard library is imported here, so the command line can name the pages without
loading Altair; the pages load when one is written.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnwh.errors import UsageError


class ResultsPage(str, enum.Enum):
    """Which results page to write."""

    study = "study"
    decoder = "decoder"
    roles = "roles"
    findings = "findings"


# The options each page takes beyond the warehouse, its name on the page and the time files,
# with their names on the command line.
PAGE_OPTIONS: dict[ResultsPage, tuple[str, ...]] = {
    ResultsPage.study: ("logs", "cost_note"),
    ResultsPage.decoder: ("model", "companion"),
    ResultsPage.roles: ("companion",),
    ResultsPage.findings: (),
}
FLAGS = {"logs": "--log", "cost_note": "--cost-note", "model": "--model", "companion": "--companion"}


@dataclass(frozen=True)
class ResultsWritten:
    """What `write_results_page` wrote: the page and its figures."""

    page: Path
    figures: list[Path]


def write_results_page(
    db: Path | str,
    page: ResultsPage | str,
    out: Path | str,
    *,
    name: str | None = None,
    time_dir: Path | str | None = None,
    logs: Sequence[Path | str] = (),
    cost_note: str | None = None,
    model: Path | str | None = None,
    companion: str | None = None,
    figures: bool = True,
) -> ResultsWritten:
    """Write the results page `page` of the warehouse at `db` (read-only) to `out`, with its
    figures in the folder `out` names without its suffix (none without `figures`).

    `name` is the model's name on the page (default: its folder's or file's name); `time_dir`
    a folder of GNU `/usr/bin/time -v` outputs (`time-<what>.txt`) for the cost table. The
    study page takes `logs` (the study's stderr, each stage's "done in N s, peak memory G GiB"
    line) and `cost_note` (a sentence on how the costs were measured); the decoder page takes
    `model` (its file or folder: the stored statistics of ten examples checked against
    transformers' eager attention); the decoder and roles pages take `companion`, the other
    page of the same model, linked.

    Raises UsageError for an option the page does not take, a missing file or folder, a
    missing warehouse, or a warehouse without what the page reports (one study, one decoder).
    """
    try:
        page = ResultsPage(page)
    except ValueError:
        raise UsageError(f"page {page!r} is not one of {', '.join(p.value for p in ResultsPage)}") from None
    db, out = Path(db), Path(out)
    log_files = [Path(p) for p in logs]
    time_folder = Path(time_dir) if time_dir else None
    model_path = Path(model) if model else None
    given: dict[str, object] = {"logs": log_files, "cost_note": cost_note, "model": model_path, "companion": companion}
    for option, value in given.items():
        if value and option not in PAGE_OPTIONS[page]:
            takers = [p.value for p, options in PAGE_OPTIONS.items() if option in options]
            pages = f"{' and '.join(takers)} page{'s' if len(takers) > 1 else ''}"
            raise UsageError(f"{FLAGS[option]} is an option of the {pages}, not the {page.value} page")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; give a file name such as {out / (page.value + '.md')}")
    for flag, path in [*(("--log", p) for p in log_files), ("--time-dir", time_folder), ("--model", model_path)]:
        if path is not None and not path.exists():
            raise UsageError(f"{flag} {path}: no such file or folder")
    options = {k: v for k, v in given.items() if k in PAGE_OPTIONS[page]}
    return _write(db, page, out, figures, name=name, time_dir=time_folder, **options)


def _write(db: Path, page: ResultsPage, out: Path, figures: bool, **options: object) -> ResultsWritten:
    """Build the page's text and its charts from the warehouse, then write them."""
    from attnwh.reports.build import build_report, write_images
    from attnwh.reports.sections import SECTIONS, ReportContext
    from attnwh.sql import warehouse

    builder = importlib.import_module(f"attnwh.reports.{page.value}_page")
    folder = out.parent / out.stem
    # The report's own sections draw the charts; only those the page shows are kept, and the
    # page links only those that were drawn (a section without data draws none).
    report = (
        build_report(db, sections=tuple(s for s in SECTIONS if s.id in builder.CHART_SECTIONS)) if figures else None
    )
    drawn = [b.id for b in report.charts() if b.id in builder.CHARTS] if report else []
    links = {chart: f"{folder.name}/{chart}.png" for chart in drawn}
    con = warehouse.connect(db, read_only=True)
    try:
        lines = builder.build_page(ReportContext(con, {}), db, links, **options)
    finally:
        con.close()
    images = write_images(report, folder, "png", only=drawn) if report else []
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return ResultsWritten(out, images)
