"""Loaders that turn a dataset split into `TaskData`: GLUE TSVs, the bundled sample corpus,
and local CSV/TSV/JSONL/Parquet files (Hugging Face datasets: `hub.py`).

Every failure caused by the data (missing file, wrong columns, bad label, unreachable
dataset) surfaces as one `DataError` line naming the file or dataset; no csv, polars,
json or `datasets` exception escapes, because the command line shows only that line.
"""

from __future__ import annotations

import csv
import importlib.resources
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import polars as pl

from attnwh.errors import DataError
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.ingest.sources.glue import (
    GLUE_TASKS,
    GlueTask,
    Table,
    TsvSpec,
    examples_from_spec,
    glue_task,
    load_glue,
    normalize_name,
    read_delimited,
)

__all__ = [
    "GLUE_TASKS",
    "GlueTask",
    "SAMPLE_SPLITS",
    "SAMPLE_TASKS",
    "glue_task",
    "infer_label_names",
    "load_file",
    "load_glue",
    "load_sample",
]

# ---------------------------------------------------------------------------------------
# The bundled sample corpus
# ---------------------------------------------------------------------------------------

SAMPLE_TASKS: dict[str, TsvSpec] = {
    "sentiment": TsvSpec("sentence", None, "label", ("0", "1")),
    "entailment": TsvSpec("sentence1", "sentence2", "label", ("entailment", "not_entailment"), guid="index"),
}
SAMPLE_SPLITS = ("train", "dev")


def sample_root() -> Traversable:
    """Where the bundled corpus lives; a function so tests can point it elsewhere."""
    return importlib.resources.files("attnwh.ingest.sources") / "sample"


def load_sample(task: str, split: str, stride: int = 0) -> TaskData:
    """Read the corpus shipped with attnwh: task `sentiment` or `entailment`, split
    `train` or `dev` (`validation` also works), from `ingest/sources/sample/<task>/<split>.tsv`;
    or the text sample `prose` for language modelling (`text.py`, cut with `stride`)."""
    from attnwh.ingest.sources.text import SAMPLE_TEXTS, load_sample_text

    key = normalize_name(task)
    if key in SAMPLE_TEXTS:
        return load_sample_text(key, split, stride)
    if key not in SAMPLE_TASKS:
        names = ", ".join([*SAMPLE_TASKS, *SAMPLE_TEXTS])
        raise DataError(f"unknown sample task {task!r}; choose one of {names}")
    split_key = "dev" if split.strip().lower() in ("validation", "valid", "val") else split
    split_key = split_key.strip().lower()
    if split_key not in SAMPLE_SPLITS:
        raise DataError(f"sample task {key} has no split {split!r}; choose one of {', '.join(SAMPLE_SPLITS)}")
    resource = sample_root() / key / f"{split_key}.tsv"
    # as_file gives a real path even when the package is installed zipped.
    with importlib.resources.as_file(resource) as path:
        if not path.is_file():
            raise DataError(f"bundled sample file missing: {path} (reinstall attnwh)")
        table = read_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE)
        examples = examples_from_spec(table, SAMPLE_TASKS[key], context=f"sample {key}")
    return TaskData(
        dataset="sample",
        task=key,
        split=split_key,
        examples=examples,
        labels=SAMPLE_TASKS[key].labels,
        source=str(path),
    )


# ---------------------------------------------------------------------------------------
# Label names, shared by local files and Hub datasets without a ClassLabel
# ---------------------------------------------------------------------------------------

MAX_CLASSES_FOR_FLOAT_LABELS = 10
_INT_TEXT = re.compile(r"^[+-]?\d+$")


def infer_label_names(values: Sequence[str]) -> tuple[str, ...] | None:
    """Class names for raw label texts, or None for a regression target.

    Rule: if every label is a number, at least one is written as a non-integer ("3.8",
    "1e-2") and there are more than 10 distinct values, the column is a regression score
    and this returns None. Otherwise the classes are the distinct values, sorted by numeric
    value when all are numbers ("2" before "10") and as strings otherwise.
    """
    distinct = set(values)
    numbers = {v: _as_number(v) for v in distinct}
    if distinct and all(n is not None for n in numbers.values()):
        is_float = any(not _INT_TEXT.match(v.strip()) for v in distinct)
        if is_float and len(distinct) > MAX_CLASSES_FOR_FLOAT_LABELS:
            return None
        return tuple(sorted(distinct, key=lambda v: (numbers[v], v)))
    return tuple(sorted(distinct))


def _as_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------
# Column-wise data from any source -> Examples
# ---------------------------------------------------------------------------------------


def _as_text(value: Any) -> str | None:
    """A cell as text: JSON/Parquet/Arrow cells arrive typed, labels are kept as text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict, tuple, bytes)):
        raise TypeError(type(value).__name__)
    return str(value)


def _text_cells(name: str, values: Sequence[Any], where: Callable[[int], str]) -> list[str | None]:
    out = []
    for i, value in enumerate(values):
        try:
            out.append(_as_text(value))
        except TypeError as exc:
            raise DataError(f"{where(i)}: column {name!r} holds a {exc}, not text") from None
    return out


def _build_examples(
    data: Mapping[str, Sequence[Any]],
    text_column: str,
    pair_column: str | None,
    label_column: str | None,
    where: Callable[[int], str],
    guids: Sequence[str | None] | None = None,
    *,
    allow_missing_labels: bool = False,
) -> tuple[tuple[Example, ...], list[str | None]]:
    """Examples from column lists; rejects empty texts and missing labels, naming the row."""
    texts = _text_cells(text_column, data[text_column], where)
    pairs = _text_cells(pair_column, data[pair_column], where) if pair_column else None
    labels = _text_cells(label_column, data[label_column], where) if label_column else None
    examples = []
    for i, text in enumerate(texts):
        # Empty inputs would tokenize to [CLS] [SEP] and silently skew per-head statistics.
        if text is None or not text.strip():
            raise DataError(f"{where(i)}: empty text in column {text_column!r}")
        pair = pairs[i] if pairs is not None else None
        if pairs is not None and (pair is None or not pair.strip()):
            raise DataError(f"{where(i)}: empty text in column {pair_column!r}")
        label = labels[i] if labels is not None else None
        if labels is not None and not allow_missing_labels and (label is None or not label.strip()):
            raise DataError(f"{where(i)}: missing label in column {label_column!r}")
        examples.append(
            Example(
                position=i,
                guid=guids[i] if guids is not None else None,
                text_a=text.strip(),
                text_b=pair.strip() if pair is not None else None,
                label=label.strip() if label is not None and label.strip() else None,
            )
        )
    return tuple(examples), [e.label for e in examples]


def _require_columns(source: str, present: Sequence[str], wanted: Sequence[str | None]) -> None:
    for name in wanted:
        if name is not None and name not in present:
            raise DataError(f"{source}: no column {name!r}; columns are {', '.join(map(repr, present))}")


# ---------------------------------------------------------------------------------------
# Local files
# ---------------------------------------------------------------------------------------

_FILE_FORMATS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}


# Words that name a split, not a dataset: train.csv holds a dataset's train split.
SPLIT_WORDS = ("train", "training", "dev", "development", "val", "valid", "validation", "test", "testing", "eval")
_SPLIT_SUFFIX = re.compile(rf"(?:[-_. ]+(?:{'|'.join(SPLIT_WORDS)}))+$", re.IGNORECASE)


def file_task_name(path: Path) -> str:
    """The task a local file holds, named after the file less the split its name ends with:
    imdb_train.csv and imdb-dev.tsv hold `imdb`. A file named only for its split (train.csv, dev.tsv) takes
    its folder's name, as the bundled sample's `sentiment/train.tsv` holds `sentiment`; so a
    train file and its eval file name the same task."""
    stem = _SPLIT_SUFFIX.sub("", path.stem)
    if stem and stem.lower() not in SPLIT_WORDS:
        return stem
    for folder in path.resolve().parents:
        if folder.name and folder.name.lower() not in SPLIT_WORDS:
            return folder.name
    return path.stem


def load_file(
    path: Path,
    text_column: str,
    pair_column: str | None = None,
    label_column: str | None = None,
    task: str | None = None,
    split: str = "all",
) -> TaskData:
    """Read a local CSV, TSV, JSONL (or JSON array) or Parquet file, chosen by extension.

    TSV is split on tabs only, with quotes kept as text (like GLUE); CSV follows the usual
    quoting rules. Every text and pair cell must be non-empty, and every label cell present
    when `label_column` is given. Labels are kept as text; the label names follow
    `infer_label_names`: sorted distinct values, or None (regression) for a float column
    with more than 10 distinct values.
    """
    path = Path(path)
    kind = _FILE_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DataError(
            f"{path}: unknown file type {path.suffix or '(none)'!r}; use one of {', '.join(sorted(_FILE_FORMATS))}"
        )
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    wanted = [text_column, pair_column, label_column]
    if kind in ("csv", "tsv"):
        table = read_delimited(
            path,
            delimiter="\t" if kind == "tsv" else ",",
            quoting=csv.QUOTE_NONE if kind == "tsv" else csv.QUOTE_MINIMAL,
        )
        data, where = _columns_of_table(table, wanted)
    elif kind == "jsonl":
        data, where = _read_json(path, wanted)
    else:
        data, where = _read_parquet(path, wanted)
    examples, labels = _build_examples(data, text_column, pair_column, label_column, where)
    return TaskData(
        dataset=path.name,
        task=task or file_task_name(path),
        split=split,
        examples=examples,
        labels=infer_label_names([x for x in labels if x is not None]) if label_column else None,
        source=str(path),
    )


def _columns_of_table(table: Table, wanted: Sequence[str | None]) -> tuple[dict[str, list[str]], Callable[[int], str]]:
    _require_columns(str(table.path), table.columns, wanted)
    data = {}
    for name in wanted:
        if name is not None:
            index = table.column(name)
            data[name] = [row[index] for row in table.rows]
    return data, table.where


def _read_json(path: Path, wanted: Sequence[str | None]) -> tuple[dict[str, list[Any]], Callable[[int], str]]:
    """JSON Lines, one object per line (or a single JSON array of objects)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    records: list[Any] = []
    lines: list[int] = []  # each record's line number; none for a JSON array
    array = text.lstrip().startswith("[")
    if array:
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} line {exc.lineno}: invalid JSON ({exc.msg})") from None
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path} line {number}: invalid JSON ({exc.msg})") from None
            lines.append(number)

    def where(i: int) -> str:
        return f"{path} row {i}" if array else f"{path} line {lines[i]}"

    if not records:
        raise DataError(f"{path}: file is empty")
    present: dict[str, None] = {}  # ordered union of keys, for the "columns are" message
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise DataError(f"{where(i)}: expected a JSON object, found {type(record).__name__}")
        present.update(dict.fromkeys(record))
    _require_columns(str(path), list(present), wanted)
    data = {name: [r.get(name) for r in records] for name in wanted if name is not None}
    return data, where


def _read_parquet(path: Path, wanted: Sequence[str | None]) -> tuple[dict[str, list[Any]], Callable[[int], str]]:
    names = [n for n in dict.fromkeys(wanted) if n is not None]
    try:
        present = list(pl.read_parquet_schema(path))
        _require_columns(str(path), present, names)
        frame = pl.read_parquet(path, columns=names)
    except DataError:
        raise
    except Exception as exc:  # polars raises several types for corrupt or non-Parquet files
        raise DataError(f"{path}: cannot read Parquet ({_brief(exc)})") from None
    if frame.height == 0:
        raise DataError(f"{path}: file has no rows")
    return {n: frame.get_column(n).to_list() for n in names}, lambda i: f"{path} row {i}"


def _brief(exc: BaseException) -> str:
    """The first line of an exception, short enough for a one-line error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
