"""Loading a split with Hugging Face `datasets`: Hub names (online), local dataset folders
and data files, with GLUE's columns known.

Every failure (offline, not found, bad config or column) surfaces as one `DataError` line
naming the dataset.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import huggingface_hub

from attnwh.errors import DataError
from attnwh.ingest.sources.examples import TaskData
from attnwh.ingest.sources.files import _brief, _build_examples, _require_columns, infer_label_names
from attnwh.ingest.sources.glue import normalize_name

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

_HUB_BUILDERS_BY_SUFFIX = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


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
        data[label_column] = [_class_name(v, label_names, source, i) for i, v in enumerate(data[label_column])]
    guids = [None if g is None else str(g) for g in data[guid_column]] if guid_column else None
    examples, labels = _build_examples(
        data,
        text_column,
        pair_column,
        label_column,
        lambda i: f"{source} row {i}",
        guids,
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
        raise DataError(f"{source} row {row}: label {value!r} is not a class id 0..{len(names) - 1}")
    return names[value]


def _pick_split(requested: str, available: Sequence[str] | None, where_name: str) -> str:
    if available is None:  # the builder cannot tell before downloading; try as asked
        return requested
    for candidate in (requested, *_HUB_SPLIT_FALLBACKS.get(requested.lower(), ())):
        if candidate in available:
            return candidate
    raise DataError(f"dataset {where_name!r} has no split {requested!r}; splits are {', '.join(available)}")


def _open_hub_split(name: str, config: str | None, split: str, where_name: str) -> tuple[datasets.Dataset, str]:
    """The requested split as a `datasets.Dataset`, whatever kind of source `name` is."""
    # A failure becomes one DataError line; the hub client's retry warnings would bury it.
    huggingface_hub.utils.logging.set_verbosity_error()
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    local = Path(name).expanduser()
    try:
        if local.is_dir() and any((local / f).is_file() for f in ("dataset_dict.json", "state.json")):
            loaded = datasets.load_from_disk(str(local))
            if isinstance(loaded, datasets.DatasetDict):
                chosen = _pick_split(split, list(loaded), where_name)
                return loaded[chosen], chosen
            return loaded, split  # a single saved Dataset is whatever split was asked for
        path = name
        kwargs: dict[str, Any] = {}  # for load_dataset_builder
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
