"""Token-level maps for the report's head panel, computed when the report is built.

The panel lists each head's top examples (query head_panel_examples); for the first of each
list it can draw that head's attention map with the tokens on both axes. The warehouse holds no
such maps, so the examples are run again through their run's model
(:func:`attnwh.ingest.runs.maps.run_model`: found from the run, weights checked against the
stored hash). torch and the models load here only, and only when the report embeds maps: where
a run's model cannot be loaded, its maps are left out and the panel says why.

Each map travels as bytes (:func:`map_bytes`: 0 … 255 for weights 0 … 1, 1 byte a cell) in
base64; inputs over MAX_TOKENS and maps past MAX_CELLS in all are left out, so the page stays a
few megabytes. `attnwh show` ships its maps the same way, and templates/token_map.js draws
them on both pages.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl

from attnwh.errors import UsageError

MAX_TOKENS = 64  # as pattern_maps: a longer map is not readable in the panel
MAX_CELLS = 2_000_000  # one byte each, about 2.7 MB of base64


def map_bytes(shares: np.ndarray) -> str:
    """Maps of shares 0 … 1 (any shape, row-major) as base64 of one byte a cell, 0 … 255: a
    share to ±0.002, which no colour on screen tells apart, in a quarter of a float's bytes.
    A cell with no share (NaN: a hybrid's layer without attention maps) is drawn as 0."""
    cells = np.clip(np.nan_to_num(shares, nan=0.0), 0, 1)
    return base64.b64encode(np.rint(cells * 255).astype(np.uint8).tobytes()).decode("ascii")


def embed_token_maps(con: duckdb.DuckDBPyConnection, db: Path, examples: pl.DataFrame) -> dict[str, Any]:
    """For the rank-1 example of each (run, layer, head, statistic) in `examples` (rows of
    head_panel_examples): the head's attention map with the example's tokens. `con` is the
    report's connection to the warehouse at `db` (beside which a run's model may lie).

    Returns {"examples": {"run-example": [tokens, kinds, causal]}, "maps": {"run-example-layer-head":
    base64 bytes}, "notes": [why a run's maps are missing]}."""
    from attnwh.ingest.model.encoding import readable_tokens
    from attnwh.ingest.runs.maps import MapCapture, run_model, stored_token_ids, token_kinds
    from attnwh.sql import warehouse

    first = examples.filter(pl.col("rank") == 1).select("run_id", "example_id", "layer", "head").unique()
    found: dict[str, Any] = {"examples": {}, "maps": {}, "notes": []}
    captures: dict[tuple[str, str], Any] = {}  # by model name and weights: runs share their models
    cells = 0
    for (run_id,), per_run in sorted(first.group_by("run_id"), key=lambda g: g[0]):
        name, weights, max_length = warehouse.one_row(
            con,
            "SELECT m.name, m.weights_hash, r.max_length FROM runs AS r JOIN models AS m USING (model_id) "
            "WHERE r.run_id = ?",
            [run_id],
        )
        model = (name, weights)
        if model not in captures:
            try:
                encoder = run_model(con, int(run_id), Path(db), can_give_model=False)  # report's --model filters
                captures[model] = MapCapture(encoder, ["weights"])
            except UsageError as exc:  # ModelError too: a missing folder, changed weights
                captures[model] = None
                found["notes"].append(f"run {run_id}: {exc}")
        capture = captures[model]
        if capture is None:
            continue
        encoder = capture.encoder
        by_example = sorted(per_run.group_by("example_id"), key=lambda g: g[0])
        wanted = [e for (e,), _ in by_example]
        texts = {
            e: (a, b)
            for e, a, b in con.execute(
                "SELECT example_id, text_a, text_b FROM examples WHERE list_contains(?, example_id)", [wanted]
            ).fetchall()
        }
        # The ids the run read, where it stored them: its text need not tokenize back to them.
        ids_read = stored_token_ids(con, int(run_id), wanted)
        computed = capture.compute_many([texts[e] for e in wanted], max_length, token_ids=[ids_read[e] for e in wanted])
        for ((example_id,), heads), (ids, maps) in zip(by_example, computed, strict=True):
            n = len(ids)
            if n > MAX_TOKENS or cells + n * n * heads.height > MAX_CELLS:
                continue
            key = f"{run_id}-{example_id}"
            tokens = readable_tokens(encoder.tokenizer, ids)
            found["examples"][key] = [tokens, token_kinds(encoder, ids), encoder.causal]  # causal: a triangle
            for layer, head in heads.select("layer", "head").iter_rows():
                found["maps"][f"{key}-{layer}-{head}"] = map_bytes(maps["weights"][layer, head])
                cells += n * n
    return found
