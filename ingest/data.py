"""Loaders that turn a dataset split into `TaskData`: GLUE TSVs, the bundled sample corpus,
local CSV/TSV/JSONL/Parquet files, and Hugging Face datasets.

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
from collections.abc import Callable, Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import datasets
import huggingface_hub
import polars as pl

from attnwh.errors import DataError

from .examples import Example, TaskData
from .glue import (
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
    "load_hub",
    "load_sample",
]

# ---------------------------------------------------------------------------------------
# The bundled sample corpus
# ---------------------------------------------------------------------------------------

SAMPLE_TASKS: dict[str, TsvSpec] = {
    "sentiment": TsvSpec("sentence", None, "label", ("0", "1")),
    "entailment": TsvSpec(
        "sentence1", "sentence2", "label", ("entailment", "not_entailment"), guid="index"
    ),
}
SAMPLE_SPLITS = ("train", "dev")


def sample_root() -> Traversable:
    """Where the bundled corpus lives; a function so tests can point it elsewhere."""
    return importlib.resources.files("attnwh.ingest") / "sample"


def load_sample(task: str, split: str) -> TaskData:
    """Read the corpus shipped with attnwh: task `sentiment` or `entailment`, split
    `train` or `dev` (`validation` also works), from `ingest/sample/<task>/<split>.tsv`."""
    key = normalize_name(task)
    if key not in SAMPLE_TASKS:
        raise DataError(f"unknown sample task {task!r}; choose one of {', '.join(SAMPLE_TASKS)}")
    split_key = "dev" if split.strip().lower() in ("validation", "valid", "val") else split
    split_key = split_key.strip().lower()
    if split_key not in SAMPLE_SPLITS:
        raise DataError(
            f"sample task {key} has no split {split!r}; choose one of {', '.join(SAMPLE_SPLITS)}"
        )
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
    data: dict[str, Sequence[Any]],
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


def _require_columns(
    source: str, present: Sequence[str], wanted: Sequence[str | None]
) -> None:
    for name in wanted:
        if name is not None and name not in present:
            raise DataError(
                f"{source}: no column {name!r}; columns are {', '.join(map(repr, present))}"
            )


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
            f"{path}: unknown file type {path.suffix or '(none)'!r}; "
            f"use one of {', '.join(sorted(_FILE_FORMATS))}"
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
        task=task or path.stem,
        split=split,
        examples=examples,
        labels=infer_label_names([x for x in labels if x is not None]) if label_column else None,
        source=str(path),
    )


def _columns_of_table(
    table: Table, wanted: Sequence[str | None]
) -> tuple[dict[str, list[str]], Callable[[int], str]]:
    _require_columns(str(table.path), table.columns, wanted)
    data = {}
    for name in wanted:
        if name is not None:
            index = table.column(name)
            data[name] = [row[index] for row in table.rows]
    return data, table.where


def _read_json(
    path: Path, wanted: Sequence[str | None]
) -> tuple[dict[str, list[Any]], Callable[[int], str]]:
    """JSON Lines, one object per line (or a single JSON array of objects)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    records: list[Any] = []
    lines: list[int] | None = []
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} line {exc.lineno}: invalid JSON ({exc.msg})") from None
        lines = None
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
        return f"{path} line {lines[i]}" if lines is not None else f"{path} row {i}"

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


def _read_parquet(
    path: Path, wanted: Sequence[str | None]
) -> tuple[dict[str, list[Any]], Callable[[int], str]]:
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


# ---------------------------------------------------------------------------------------
# Hugging Face datasets
# ---------------------------------------------------------------------------------------

_HUB_GLUE_NAMES = frozenset({"glue", "nyu-mll/glue"})
# Column names in the Hub's `glue` dataset, which differ from the TSVs (MNLI's premise /
# hypothesis, `label` everywhere); every config also has an `idx` row id.
_HUB_GLUE_COLUMNS: dict[str, tuple[str, str | None]] = {
    "cola": ("sentence", None),
    "sst2": ("sentence", None),
    "mrpc": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"),
    "stsb": ("sentence1", "sentence2"),
    "mnli": ("premise", "hypothesis"),
    "mnli_matched": ("premise", "hypothesis"),
    "mnli_mismatched": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"),
    "rte": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
    "ax": ("premise", "hypothesis"),
}
_HUB_GLUE_CONFIGS = {normalize_name(c): c for c in _HUB_GLUE_COLUMNS}

# Other names a split goes by, tried in order when the dataset lacks the requested one.
_HUB_SPLIT_FALLBACKS = {
    "dev": ("validation", "validation_matched"),
    "validation": ("dev",),
    "dev_matched": ("validation_matched",),
    "dev_mismatched": ("validation_mismatched",),
    "test": ("test_matched",),
}

_HUB_BUILDERS_BY_SUFFIX = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json",
                           ".parquet": "parquet"}


def load_hub(
    name: str,
    config: str | None,
    split: str,
    task: str | None = None,
    text_column: str | None = None,
    pair_column: str | None = None,
    label_column: str | None = None,
) -> TaskData:
    """Load one split with `datasets`: a Hub name, a local folder of data files, a single
    local CSV/JSON/Parquet file (its only split is `train`), or a folder written by
    `save_to_disk`.

    For `glue` / `nyu-mll/glue` the columns come from the GLUE config (`sst2`, `SST-2`,
    `mnli`, ...); any other dataset needs `text_column`. `dev` falls back to `validation`
    (and MNLI's `validation_matched`) when the dataset has no `dev` split. With a ClassLabel
    label feature the labels are its names (an Example's label is the name; -1 means
    unlabelled); otherwise labels follow `infer_label_names`.
    """
    is_glue = name.strip().lower() in _HUB_GLUE_NAMES
    guid_column = None
    if is_glue:
        if config is None or normalize_name(config) not in _HUB_GLUE_CONFIGS:
            asked = "needs a GLUE config" if config is None else f"has no GLUE config {config!r}"
            choices = ", ".join(_HUB_GLUE_COLUMNS)
            raise DataError(f"dataset {name!r} {asked}; choose one of {choices}")
        config = _HUB_GLUE_CONFIGS[normalize_name(config)]
        default_text, default_pair = _HUB_GLUE_COLUMNS[config]
        text_column = text_column or default_text
        pair_column = pair_column or default_pair
        label_column = label_column or ("label" if config != "ax" else None)
        guid_column = "idx"
    elif text_column is None:
        raise DataError(f"dataset {name!r} is not GLUE: name its text column (text_column)")
    where_name = f"{name}/{config}" if config else name
    dataset, split_name = _open_hub_split(name, config, split, where_name)
    source = f"{where_name}:{split_name}"

    _require_columns(source, dataset.column_names, [text_column, pair_column, label_column])
    if guid_column not in dataset.column_names:
        guid_column = None
    wanted = [c for c in dict.fromkeys([text_column, pair_column, label_column, guid_column]) if c]
    data: dict[str, list[Any]] = {c: list(dataset[c]) for c in wanted}
    if not data[text_column]:
        raise DataError(f"{source}: split has no rows")

    label_names: tuple[str, ...] | None = None
    feature = dataset.features.get(label_column) if label_column else None
    if label_column and isinstance(feature, datasets.ClassLabel):
        label_names = tuple(feature.names)
        data[label_column] = [_class_name(v, label_names, source, i)
                              for i, v in enumerate(data[label_column])]
    guids = [None if g is None else str(g) for g in data[guid_column]] if guid_column else None
    examples, labels = _build_examples(
        data, text_column, pair_column, label_column, lambda i: f"{source} row {i}", guids,
        # ClassLabel's -1 marks an unlabelled row (GLUE test splits); elsewhere it is an error.
        allow_missing_labels=label_names is not None,
    )
    if label_column and label_names is None:
        label_names = infer_label_names([x for x in labels if x is not None])
    return TaskData(
        dataset=name,
        task=task or config or _default_task(name),
        split=split_name,
        examples=examples,
        labels=label_names,
        source=source,
    )


def _default_task(name: str) -> str:
    """`imdb` -> imdb, `stanfordnlp/sst2` -> sst2, `/data/reviews.csv` -> reviews."""
    path = Path(name.rstrip("/"))
    return path.stem if path.is_file() else path.name


def _class_name(value: Any, names: tuple[str, ...], source: str, row: int) -> str | None:
    if value is None or value == -1:
        return None
    if not isinstance(value, int) or not 0 <= value < len(names):
        raise DataError(
            f"{source} row {row}: label {value!r} is not a class id 0..{len(names) - 1}"
        )
    return names[value]


def _pick_split(requested: str, available: Sequence[str] | None, where_name: str) -> str:
    if available is None:  # the builder cannot tell before downloading; try as asked
        return requested
    for candidate in (requested, *_HUB_SPLIT_FALLBACKS.get(requested.lower(), ())):
        if candidate in available:
            return candidate
    raise DataError(
        f"dataset {where_name!r} has no split {requested!r}; splits are {', '.join(available)}"
    )


def _open_hub_split(
    name: str, config: str | None, split: str, where_name: str
) -> tuple[datasets.Dataset, str]:
    """The requested split as a `datasets.Dataset`, whatever kind of source `name` is."""
    # A failure becomes one DataError line; the hub client's retry warnings would bury it.
    huggingface_hub.utils.logging.set_verbosity_error()
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    local = Path(name).expanduser()
    try:
        if local.is_dir() and any(
            (local / f).is_file() for f in ("dataset_dict.json", "state.json")
        ):
            loaded = datasets.load_from_disk(str(local))
            if isinstance(loaded, datasets.DatasetDict):
                chosen = _pick_split(split, list(loaded), where_name)
                return loaded[chosen], chosen
            return loaded, split  # a single saved Dataset is whatever split was asked for
        path, kwargs = name, {}
        if local.is_file():
            builder_name = _HUB_BUILDERS_BY_SUFFIX.get(local.suffix.lower())
            if builder_name is None:
                raise DataError(f"{local}: unknown file type {local.suffix!r} for datasets")
            path, kwargs = builder_name, {"data_files": str(local)}
            if local.suffix.lower() == ".tsv":  # as in GLUE: tabs only, quotes are text
                kwargs |= {"sep": "\t", "quoting": csv.QUOTE_NONE}
        builder = datasets.load_dataset_builder(path, config, **kwargs)
        if builder.info.splits:
            available: list[str] | None = list(builder.info.splits)
        elif builder.config.data_files:
            available = [str(s) for s in builder.config.data_files]
        else:
            available = None
        chosen = _pick_split(split, available, where_name)
        loaded = datasets.load_dataset(path, config, split=chosen, **kwargs)
    except DataError:
        raise
    except Exception as exc:  # offline, not found, bad config, corrupt files: one line
        raise DataError(f"cannot load dataset {where_name!r}: {_brief(exc)}") from None
    if not isinstance(loaded, datasets.Dataset):
        raise DataError(f"dataset {where_name!r}: split {chosen!r} did not load as a table")
    return loaded, chosen


def _brief(exc: BaseException) -> str:
    """The first line of an exception, short enough for a one-line error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
