"""Parquet shards: the rows of units of work written outside the warehouse, and merged into
it by one writer.

A shard folder holds one folder per run, named by its key (hive style, ``run_key=<key>``),
with the run's description (``run.json``: kind, identity, the runs columns and the models
it names) and one folder per computed unit, ``part-<unit>``. A part folder holds one
Parquet file per warehouse table it adds rows to (without run_id: the warehouse numbers
runs) and a ``manifest.json`` naming every file with its row count and SHA-256. A part is
written under a temporary name (``.part-<unit>.tmp-…``) and renamed when complete, so a
worker killed while writing leaves a temporary folder that no merge accepts, never a part
that looks whole.

:func:`merge_shards` (``attnwh merge DIR``) checks every file of a folder before it writes
anything, then stores each part with :func:`attnwh.ingest.runs.rows.store_part`, the
function the single process and the Ray driver store with too. Storing is idempotent: a
part merged twice adds nothing.

No torch here: merging runs on any machine that can open the warehouse.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from attnwh.errors import UsageError
from attnwh.sql import runs, warehouse

# 2: layer_mixing.mixing_ratio is Kobayashi et al.'s ratio (migration 14); a part of format 1
# holds the share of norms under that name and is refused rather than stored as the ratio.
FORMAT = 2
RUN_FILE = "run.json"
MANIFEST = "manifest.json"
_RUN_DIR = re.compile(r"^run_key=([0-9a-f]{32})$")
_PART_DIR = re.compile(r"^part-([0-9]{6}(?:-g[0-9]{2})?)$")
_TEMPORARY = re.compile(r"^\.part-.*\.tmp-")
# The tables a part may add rows to: the per-example rows of the heavy stages and what
# goes with them (examples and ablation configurations are inserted only where missing).
PART_TABLES = frozenset(
    {
        "examples",
        "run_examples",
        "head_stats",
        "pattern_thumbnails",
        "pattern_maps",
        "example_tokens",
        "head_mixing",
        "layer_mixing",
        "massive_activations",
        "attention_change",
        "ablation_configs",
        "ablation_losses",
        "ablation_predictions",
        "prompt_predictions",
        "role_settings",
        "role_probes",
        "head_roles",
        "restriction_losses",
        "streaming_losses",
        "massive_ablation_losses",
        "position_losses",
        "relation_sums",
    }
)


@dataclass
class Part:
    """The rows one unit of work adds to the warehouse, by table, without run_id.

    `covers_examples`: the part holds every row of its examples (statistics, compare, an
    ablation unit with the whole sweep), so its run_examples rows mark them done; an
    ablation unit with one group of configurations marks an example done only once every
    group of it is stored.
    """

    run_key: str
    name: str  # the unit's name, e.g. 000012 or 000012-g03
    tables: dict[str, pa.Table]
    covers_examples: bool = True
    seconds: float = 0.0  # model time
    device: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the worker's GPU ids

    @property
    def example_ids(self) -> pa.Array:
        return self.tables["run_examples"]["example_id"].combine_chunks()

    @property
    def n_examples(self) -> int:
        return self.tables["run_examples"].num_rows


# -- writing ---------------------------------------------------------------------------


def run_folder(shard_dir: Path, run_key: str) -> Path:
    return Path(shard_dir) / f"run_key={run_key}"


def write_run_info(shard_dir: Path, info: Mapping[str, Any]) -> None:
    """Write (or rewrite, atomically) the description of a run whose parts go to `shard_dir`."""
    folder = run_folder(shard_dir, str(info["run_key"]))
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{RUN_FILE}.tmp-{uuid.uuid4().hex}"
    temporary.write_text(json.dumps({"format": FORMAT, **info}, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, folder / RUN_FILE)


def part_path(shard_dir: Path, run_key: str, name: str) -> Path:
    return run_folder(shard_dir, run_key) / f"part-{name}"


def write_part(shard_dir: Path, part: Part) -> Path:
    """Write `part` under a temporary name and rename it into place; returns its folder. A
    part that is already there (the same unit, computed again after a retry) is kept."""
    final = part_path(shard_dir, part.run_key, part.name)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.parent / f".part-{part.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    temporary.mkdir()
    files = {}
    for table, rows in part.tables.items():
        path = temporary / f"{table}.parquet"
        pq.write_table(rows, path)
        files[table] = {"rows": rows.num_rows, "sha256": _sha256(path)}
    manifest = {
        "format": FORMAT,
        "run_key": part.run_key,
        "part": part.name,
        "covers_examples": part.covers_examples,
        "seconds": part.seconds,
        "device": part.device,
        "meta": part.meta,
        "files": files,
    }
    (temporary / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    try:
        os.rename(temporary, final)
    except OSError:
        if not (final / MANIFEST).exists():
            raise
        shutil.rmtree(temporary)  # computed twice: the first copy stays
    return final


def remove_partial(shard_dir: Path, run_key: str, names: Sequence[str] = ()) -> None:
    """Delete the temporary folders left by interrupted writes of these units (all units
    when `names` is empty) of a run."""
    folder = run_folder(shard_dir, run_key)
    if not folder.is_dir():
        return
    wanted = {f".part-{name}.tmp-" for name in names}
    for entry in folder.iterdir():
        if _TEMPORARY.match(entry.name) and (not names or any(entry.name.startswith(w) for w in wanted)):
            shutil.rmtree(entry, ignore_errors=True)


def stored_parts(shard_dir: Path, run_key: str) -> set[str]:
    """Names of the complete parts of a run in `shard_dir`."""
    folder = run_folder(shard_dir, run_key)
    if not folder.is_dir():
        return set()
    return {m.group(1) for e in folder.iterdir() if (m := _PART_DIR.match(e.name)) and (e / MANIFEST).is_file()}


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# -- reading and checking --------------------------------------------------------------


def read_part(folder: Path) -> Part:
    """The part in `folder`, checked against its manifest; UsageError names what is wrong."""
    manifest, columns = check_part(folder)
    tables = {}
    for table in columns:
        path = folder / f"{table}.parquet"
        try:
            tables[table] = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            raise UsageError(f"{path}: not readable as Parquet ({str(exc).splitlines()[0]})") from None
    return Part(
        run_key=str(manifest.get("run_key")),
        name=str(manifest.get("part")),
        tables=tables,
        covers_examples=bool(manifest.get("covers_examples", True)),
        seconds=float(manifest.get("seconds") or 0.0),
        device=str(manifest.get("device") or ""),
        meta=dict(manifest.get("meta") or {}),
    )


def check_part(folder: Path) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Check the part in `folder` without loading its rows: its manifest, that it lists
    exactly the files there, each file's SHA-256 and row count, and that each is Parquet.
    Returns the manifest and each table's columns; UsageError names what is wrong."""
    manifest = _read_json(folder / MANIFEST, "part manifest")
    if manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
        raise UsageError(f"{folder}: not a part written by this attnwh (format {manifest.get('format')!r})")
    present = {p.name for p in folder.iterdir()} - {MANIFEST}
    listed = {f"{t}.parquet" for t in manifest["files"]}
    if present != listed:
        odd = sorted(present ^ listed)[0]
        raise UsageError(f"{folder}: {odd} is {'missing' if odd in listed else 'not listed in its manifest'}")
    columns = {}
    for table, facts in manifest["files"].items():
        if table not in PART_TABLES:
            raise UsageError(f"{folder}: {table} is not a table a part may write")
        path = folder / f"{table}.parquet"
        if _sha256(path) != facts.get("sha256"):
            raise UsageError(f"{path}: its contents differ from its manifest (damaged or partly copied)")
        try:
            metadata = pq.ParquetFile(path).metadata
        except (pa.ArrowException, OSError) as exc:
            raise UsageError(f"{path}: not readable as Parquet ({str(exc).splitlines()[0]})") from None
        if metadata.num_rows != facts.get("rows"):
            raise UsageError(f"{path}: {metadata.num_rows} rows, its manifest says {facts.get('rows')}")
        columns[table] = list(metadata.schema.to_arrow_schema().names)
    if "run_examples" not in columns:
        raise UsageError(f"{folder}: no run_examples rows")
    return manifest, columns


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise UsageError(f"{path.parent}: no {path.name} (a partial or foreign folder)")
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UsageError(f"{path}: not a valid {what}") from None
    if not isinstance(found, dict):
        raise UsageError(f"{path}: not a valid {what}")
    return found


@dataclass(frozen=True)
class ShardRun:
    """One run's folder in a shard folder: its description and its parts' folders."""

    run_key: str
    info: dict[str, Any]
    parts: tuple[Path, ...]


def scan(shard_dir: Path) -> list[ShardRun]:
    """Every run in `shard_dir`, checked: a foreign file, a partial part or a description
    that does not match its key raises UsageError naming it. Reads the manifests only."""
    shard_dir = Path(shard_dir)
    if not shard_dir.is_dir():
        raise UsageError(f"no shard folder at {shard_dir}")
    found = []
    for entry in sorted(shard_dir.iterdir()):
        match = _RUN_DIR.match(entry.name)
        if not match or not entry.is_dir():
            raise UsageError(f"{entry}: not an attnwh shard (expected run_key=… folders only); move it away")
        run_key = match.group(1)
        info = _read_json(entry / RUN_FILE, "run description")
        _check_info(entry, run_key, info)
        parts = []
        for item in sorted(entry.iterdir()):
            if item.name == RUN_FILE:
                continue
            if _TEMPORARY.match(item.name):
                raise UsageError(
                    f"{item}: a partial part left by a worker that stopped while writing it; "
                    "rerun that shard (it is cleaned up) or delete the folder"
                )
            if not _PART_DIR.match(item.name) or not item.is_dir():
                raise UsageError(f"{item}: not an attnwh part; move it away")
            if not (item / MANIFEST).is_file():
                raise UsageError(f"{item}: no manifest, a partial part; rerun that shard or delete the folder")
            parts.append(item)
        found.append(ShardRun(run_key, info, tuple(parts)))
    if not found:
        raise UsageError(f"{shard_dir} holds no shards")
    return found


def _check_info(folder: Path, run_key: str, info: Mapping[str, Any]) -> None:
    if info.get("format") != FORMAT:
        raise UsageError(f"{folder / RUN_FILE}: not written by this attnwh (format {info.get('format')!r})")
    for name in ("kind", "identity", "fields", "models", "n_examples"):
        if name not in info:
            raise UsageError(f"{folder / RUN_FILE}: no {name}")
    try:
        key = runs.run_key(str(info["kind"]), info["identity"])
    except (ValueError, TypeError, AttributeError):
        key = None
    if key != run_key or info.get("run_key") != run_key:
        raise UsageError(f"{folder / RUN_FILE}: its run is not the one its folder is named for")


# -- merging ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeSummary:
    run_id: int
    kind: str
    task: str
    parts: int  # parts read
    n_examples: int
    n_done: int  # examples of the run stored (all its rows), after the merge
    status: str
    finish_command: str | None  # ablation, restriction, streaming: the command that finishes a whole run


def merge_shards(
    db_path: Path,
    shard_dir: Path,
    on_start: Callable[[str, int], None] | None = None,
    on_part: Callable[[int], None] | None = None,
) -> list[MergeSummary]:
    """Merge every part in `shard_dir` into the warehouse at `db_path`.

    Every file is checked first (:func:`scan`, :func:`read_part`, the columns against the
    warehouse's tables); anything partial or foreign raises UsageError and nothing is
    written. Then each part is stored in its own transaction; parts already stored add
    nothing. A statistics or compare run holding all its examples is complete; one that
    still lacks some is `partial`; an ablation run whose sweep is whole waits for its
    finish (significance, combinations, importance), which `attnwh ingest ablation` does
    with the model, a restriction run for its plan and tests, a streaming run for its tests. A whole relations run is
    finished here: its tables are sums of the units' totals.
    """
    shard_runs = scan(shard_dir)
    checked = {run.run_key: [check_part(p) for p in run.parts] for run in shard_runs}
    for run in shard_runs:
        for folder, (manifest, _) in zip(run.parts, checked[run.run_key]):
            if manifest.get("run_key") != run.run_key:
                raise UsageError(f"{folder}: belongs to another run")
    con = warehouse.connect(db_path)
    try:
        _check_columns(con, checked)
        # Every file is checked: now each part is read (one at a time) and stored.
        if on_start:
            on_start("merging parts", sum(len(run.parts) for run in shard_runs))
        return [_merge_run(con, run, on_part) for run in shard_runs]
    finally:
        con.close()


def _check_columns(con: duckdb.DuckDBPyConnection, checked: Mapping[str, list[tuple[dict, dict]]]) -> None:
    known: dict[str, set[str]] = {}
    for table in PART_TABLES:
        known[table] = {row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()}
    for parts in checked.values():
        for manifest, columns in parts:
            for table, names in columns.items():
                extra = set(names) - known[table]
                if "run_id" in names or extra:
                    odd = "run_id" if "run_id" in names else sorted(extra)[0]
                    raise UsageError(
                        f"part {manifest.get('part')} of run {manifest.get('run_key')}, {table}.parquet: "
                        f"column {odd} does not belong in a part"
                    )


def _merge_run(con: duckdb.DuckDBPyConnection, run: ShardRun, on_part: Callable[[int], None] | None) -> MergeSummary:
    from attnwh.ingest.runs.rows import store_part

    info = run.info
    kind, task, n_examples = str(info["kind"]), str(info["fields"]["task"]), int(info["n_examples"])
    with warehouse.transaction(con):
        model_ids = {column: runs.upsert_model(con, facts) for column, facts in info["models"].items()}
        state = runs.create_run(con, kind, info["identity"], {**model_ids, **info["fields"]})
    if state.status == "complete":
        # A complete run is whole: nothing a shard holds can add to it.
        if on_part:
            on_part(len(run.parts))
        return MergeSummary(state.run_id, kind, task, len(run.parts), n_examples, n_examples, "complete", None)
    for folder in run.parts:
        store_part(con, state.run_id, read_part(folder))
        if on_part:
            on_part(1)
    n_done = warehouse.one_row(con, "SELECT count(*) FROM run_examples WHERE run_id = ?", [state.run_id])[0]
    whole = n_done == n_examples
    finish = None
    if kind in ("ablation", "restriction", "streaming", "massive_ablation"):
        status = "partial"  # until its finish, which needs the model (or, streaming, the command's settings)
        if whole:
            finish = _without_shard_options(info["fields"].get("command"))
    elif kind == "relations" and whole:
        from attnwh.ingest.runs.relations import finish_relations

        # Its finish sums the units' totals and needs no model: done here, completing the run.
        with runs.marking_failure(con, state.run_id):
            finish_relations(con, state.run_id)
        return MergeSummary(state.run_id, kind, task, len(run.parts), n_examples, n_done, "complete", None)
    else:
        status = "complete" if whole else "partial"
    runs.finish_run(con, state.run_id, status)
    if status == "complete":
        runs.store_prompt_scores(con, state.run_id)  # a statistics run read through a prompt: its accuracy
    return MergeSummary(state.run_id, kind, task, len(run.parts), n_examples, n_done, status, finish)


def _without_shard_options(command: str | None) -> str | None:
    """The recorded command of a shard without its shard options (--shard, or --shard-index
    and --shards, and --shard-dir): the command that finishes the run in one process."""
    if not command:
        return None
    options = ("--shard", "--shard-index", "--shards", "--shard-dir")
    words = shlex.split(command)
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in options:
            skip = True
            continue
        if word.startswith(tuple(f"{option}=" for option in options)):
            continue
        kept.append(word)
    return shlex.join(kept)
