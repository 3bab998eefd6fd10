"""The data behind the report's head panel: click a cell of any layer × head heatmap and the
page shows that head through every lens, from the warehouse, without a server.

Everything the panel can show is embedded once as JSON (queries head_profile and
head_thumbnails); the page's script picks the rows of the clicked head. Strings repeat on
every row, so they are stored once in `strings` and referred to by index; thumbnails travel
as base64 bytes (a 16 × 16 map in 344 characters instead of ~1,500 as JSON numbers), which
keeps the page small on a 12 × 12-head model with many runs.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import polars as pl

from attnwh.reports import charts
from attnwh.reports.sections import SECTIONS, ReportContext

# Pooled thumbnail side in the panel (the gallery's size).
THUMBNAIL_SIDE = 16
# Maps shown per head and statistics run.
THUMBNAILS_PER_HEAD = 2
# Examples listed per head, run and statistic (and flips per head and ablation run).
EXAMPLES_PER_LIST = 3


def head_panel_data(ctx: ReportContext, db: Path | None = None) -> dict[str, Any]:
    """The JSON object the page's head panel reads:

    - `sections`: report section id → its title (the panel links each part to its section);
    - `runs`: run id → the lines of its label ("run 3 · model", "task (split)", lineage);
    - `columns` and `rows`: the head_profile query, strings replaced by indexes into `strings`;
    - `thumbnails`: "layer-head" → [[run id, pattern type, tokens, base64 16 × 16 bytes], …];
    - `examples`: "layer-head" → [[run id, statistic, rank, value, example id, text, label,
      predicted], …] (query head_panel_examples), texts indexed into `strings`;
    - `tokenMaps`: with `db`, the rank-1 examples' maps with their tokens (reports.token_maps);
      without, none (`notes` says so)."""
    profile = ctx.query("head_profile")
    thumbnails = ctx.query("head_thumbnails", per_head=THUMBNAILS_PER_HEAD)
    strings: dict[str, int] = {}

    def index(text: str) -> int:
        return strings.setdefault(text, len(strings))

    columns = ["section", "run_id", "layer", "head", "subject", "measure", "value", "ci_low", "ci_high"]
    columns += ["p_value", "p_adjusted", "examples"]
    text_columns = {"section", "subject", "measure"}
    rows = [
        [index(r[c]) if c in text_columns else _number(r[c]) for c in columns] for r in profile.iter_rows(named=True)
    ]
    maps: dict[str, list[list[Any]]] = {}
    for r in thumbnails.iter_rows(named=True):
        cells = [value for row in charts.pooled(r["thumbnail"], THUMBNAIL_SIDE) for value in row]
        encoded = base64.b64encode(bytes(round(255 * v) for v in cells)).decode("ascii")
        maps.setdefault(f"{r['layer']}-{r['head']}", []).append([r["run_id"], r["pattern"], r["n_tokens"], encoded])
    examples = ctx.query("head_panel_examples", top=EXAMPLES_PER_LIST)
    listed: dict[str, list[list[Any]]] = {}
    for r in examples.iter_rows(named=True):
        listed.setdefault(f"{r['layer']}-{r['head']}", []).append(
            [
                r["run_id"],
                r["statistic"],
                r["rank"],
                _number(r["value"]),
                str(r["example_id"]),  # a BIGINT: past JavaScript's exact integers
                index(r["text"]),
                None if r["label"] is None else index(r["label"]),
                None if r["predicted"] is None else index(r["predicted"]),
            ]
        )
    if db is not None:
        from attnwh.reports.token_maps import embed_token_maps

        token_maps = embed_token_maps(ctx.con, db, examples)
    else:
        token_maps = {"examples": {}, "maps": {}, "notes": ["built without token maps"]}
    return {
        "sections": {s.id: s.title_for(ctx) for s in SECTIONS},
        "examples": listed,
        "tokenMaps": token_maps,
        "runs": _run_labels(ctx, profile),
        "strings": list(strings),
        "columns": columns,
        "rows": rows,
        "thumbnailSide": THUMBNAIL_SIDE,
        "thumbnails": maps,
    }


def _run_labels(ctx: ReportContext, profile: pl.DataFrame) -> dict[str, list[str]]:
    """Each run's label lines, as the charts' panels name them (run, model, task, lineage)."""
    runs = profile.select("run_id", "model", "task", "split").unique("run_id").sort("run_id")
    runs = charts.with_lineage(runs, ctx.query("model_lineage"))
    labels = runs.select("run_id", label=charts.panel_label(runs))
    return {str(r["run_id"]): r["label"].split(charts.NEWLINE) for r in labels.iter_rows(named=True)}


def _number(value: Any) -> Any:
    """Floats to 6 significant digits (the panel shows at most 4), others unchanged."""
    return float(f"{value:.6g}") if isinstance(value, float) else value
