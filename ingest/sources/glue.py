"""GLUE in its original TSV layout, and the delimited-text reader every local loader shares.

The GLUE tasks ship as tab-separated files whose quirks differ per task (no header for
CoLA, a byte-order mark in MRPC, a dozen extra columns in MNLI and STS-B). Each task is
described once, as data, in `GLUE_TASKS`; one reader turns any such description into
`Example`s, so the bundled sample corpus and user TSV files go through the same code.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from attnwh.errors import DataError
from attnwh.ingest.sources.examples import Example, TaskData

__all__ = [
    "GLUE_TASKS",
    "GlueTask",
    "Table",
    "TsvSpec",
    "examples_from_spec",
    "glue_task",
    "load_glue",
    "normalize_name",
    "read_delimited",
]


@dataclass(frozen=True)
class TsvSpec:
    """Which columns of a labelled TSV hold what, and which labels are legal."""

    text_a: str
    text_b: str | None
    label: str
    labels: tuple[str, ...] | None  # class names in label-id order; None: a 0-5 regression score
    guid: str | None = None  # the column holding the row's own id, when the format has one
    # Headerless formats (CoLA) name their columns here; None means the first row is a header.
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task as distributed in the original GLUE download."""

    name: str  # canonical lower-case name, as in the Hugging Face `glue` configs
    folder: str  # folder name inside the GLUE download
    spec: TsvSpec
    files: Mapping[str, str] = field(hash=False)  # split name -> file name inside `folder`
    quirks: str = ""

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.files)


_NLI2 = ("entailment", "not_entailment")
_BINARY = ("0", "1")
_TRAIN_DEV = {"train": "train.tsv", "dev": "dev.tsv"}

# Label-id order follows the ClassLabel names of the Hugging Face `glue` dataset, so a label
# id means the same thing whether a task was read from the TSVs or from the Hub. That order
# is also "0" then "1" for every task whose file stores 0/1 labels.
GLUE_TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (
        GlueTask(
            name="sst2",
            folder="SST-2",
            spec=TsvSpec("sentence", None, "label", _BINARY),
            files=_TRAIN_DEV,
            quirks="header `sentence, label`; tokenised sentences ending in a space",
        ),
        GlueTask(
            name="mrpc",
            folder="MRPC",
            spec=TsvSpec("#1 String", "#2 String", "Quality", _BINARY),
            files=_TRAIN_DEV,
            quirks="header starts with a UTF-8 BOM; columns Quality, #1 ID, #2 ID, #1 String, "
            "#2 String; the IDs are sentence ids, not row ids",
        ),
        GlueTask(
            name="rte",
            folder="RTE",
            spec=TsvSpec("sentence1", "sentence2", "label", _NLI2, guid="index"),
            files=_TRAIN_DEV,
        ),
        GlueTask(
            name="cola",
            folder="CoLA",
            spec=TsvSpec(
                "sentence",
                None,
                "label",
                _BINARY,
                columns=("source", "label", "original_label", "sentence"),
            ),
            files=_TRAIN_DEV,
            quirks="no header; columns source, label, original_label (usually empty), sentence",
        ),
        GlueTask(
            name="stsb",
            folder="STS-B",
            spec=TsvSpec("sentence1", "sentence2", "score", None, guid="index"),
            files=_TRAIN_DEV,
            quirks="regression: `score` is a similarity in [0, 5]; ten columns",
        ),
        GlueTask(
            name="qnli",
            folder="QNLI",
            spec=TsvSpec("question", "sentence", "label", _NLI2, guid="index"),
            files=_TRAIN_DEV,
        ),
        GlueTask(
            name="qqp",
            folder="QQP",
            spec=TsvSpec("question1", "question2", "is_duplicate", _BINARY, guid="id"),
            files=_TRAIN_DEV,
            quirks="columns id, qid1, qid2, question1, question2, is_duplicate",
        ),
        GlueTask(
            name="mnli",
            folder="MNLI",
            spec=TsvSpec(
                "sentence1",
                "sentence2",
                "gold_label",
                ("entailment", "neutral", "contradiction"),
                guid="index",
            ),
            files={
                "train": "train.tsv",
                "dev_matched": "dev_matched.tsv",
                "dev_mismatched": "dev_mismatched.tsv",
            },
            quirks="a dozen columns (parses, annotator labels); `dev` means dev_matched",
        ),
        GlueTask(
            name="wnli",
            folder="WNLI",
            spec=TsvSpec("sentence1", "sentence2", "label", _BINARY, guid="index"),
            files=_TRAIN_DEV,
        ),
    )
}

# Split names people use for the same file: the Hugging Face names, and MNLI's bare "dev".
_SPLIT_ALIASES = {
    "validation": "dev",
    "valid": "dev",
    "val": "dev",
    "validation_matched": "dev_matched",
    "validation_mismatched": "dev_mismatched",
}


def normalize_name(name: str) -> str:
    """Fold a task or split name so `SST-2`, `sst-2`, `sst_2` and `sst2` compare equal."""
    return re.sub(r"[\s_\-]+", "", name).lower()


_GLUE_BY_ALIAS = {normalize_name(t.name): t for t in GLUE_TASKS.values()} | {
    normalize_name(t.folder): t for t in GLUE_TASKS.values()
}


def glue_task(name: str) -> GlueTask:
    """The GLUE task called `name`, ignoring case and `-`/`_` (`SST-2`, `sst2`, `Sst_2`)."""
    task = _GLUE_BY_ALIAS.get(normalize_name(name))
    if task is None:
        raise DataError(f"unknown GLUE task {name!r}; choose one of {', '.join(GLUE_TASKS)}")
    return task


def _glue_split(task: GlueTask, split: str) -> str:
    wanted = split.strip().lower()
    wanted = _SPLIT_ALIASES.get(wanted, wanted)
    if wanted == "dev" and "dev" not in task.files and "dev_matched" in task.files:
        wanted = "dev_matched"  # MNLI: the matched dev set is the conventional "dev"
    if wanted not in task.files:
        raise DataError(f"GLUE task {task.name} has no split {split!r}; choose one of {', '.join(task.files)}")
    return wanted


def _task_folder(glue_dir: Path, task: GlueTask) -> Path:
    """Accept either the GLUE root (holding `SST-2/`, ...) or the task folder itself."""
    if not glue_dir.is_dir():
        raise DataError(f"GLUE directory not found: {glue_dir}")
    candidate = glue_dir / task.folder
    if candidate.is_dir():
        return candidate
    # Some mirrors lower-case the folder names (sst-2, sts-b); match them too.
    for child in glue_dir.iterdir():
        if child.is_dir() and normalize_name(child.name) == normalize_name(task.folder):
            return child
    if normalize_name(glue_dir.name) == normalize_name(task.folder) or any(
        (glue_dir / f).is_file() for f in task.files.values()
    ):
        return glue_dir
    raise DataError(
        f"GLUE task folder {task.folder}/ not found in {glue_dir} "
        f"(pass the directory holding {task.folder}/, or that folder itself)"
    )


def load_glue(glue_dir: Path, task: str, split: str) -> TaskData:
    """Read one split of a GLUE task from the original TSV download.

    `glue_dir` is the directory holding the task folders (`.../glue`, with `SST-2/` etc.)
    or a task folder itself. `split` is `train` or `dev` (`validation` also works); MNLI
    has `dev_matched` and `dev_mismatched`, and `dev` means `dev_matched` there.
    Labels keep their text as written in the file (`"1"`, `"entailment"`, `"3.800"`).
    """
    spec_task = glue_task(task)
    split_name = _glue_split(spec_task, split)
    path = _task_folder(Path(glue_dir), spec_task) / spec_task.files[split_name]
    if not path.is_file():
        raise DataError(f"GLUE file not found: {path} (task {spec_task.name}, split {split_name})")
    table = read_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE, columns=spec_task.spec.columns)
    examples = examples_from_spec(table, spec_task.spec, context=f"GLUE {spec_task.name}")
    return TaskData(
        dataset="glue",
        task=spec_task.name,
        split=split_name,
        examples=examples,
        labels=spec_task.spec.labels,
        source=str(path),
    )


@dataclass(frozen=True)
class Table:
    """Rows of a delimited text file, all as strings, with the line each came from."""

    path: Path
    columns: tuple[str, ...]
    rows: list[list[str]]
    lines: list[int]  # physical line number (1-based) of each row, for error messages

    def column(self, name: str) -> int:
        """Index of column `name`; a DataError listing the real columns when it is absent."""
        try:
            return self.columns.index(name)
        except ValueError:
            raise DataError(
                f"{self.path}: no column {name!r}; columns are {', '.join(map(repr, self.columns))}"
            ) from None

    def where(self, row: int) -> str:
        return f"{self.path} line {self.lines[row]}"


def read_delimited(
    path: Path,
    *,
    delimiter: str,
    quoting: Literal[0, 1, 2, 3],  # a csv.QUOTE_* constant
    columns: tuple[str, ...] | None = None,
) -> Table:
    """Read a CSV/TSV file into a `Table`, checking that every row has every column.

    `columns` names the columns of a headerless file; otherwise the first row is the header.
    The encoding is `utf-8-sig` because MRPC (and files saved by Excel) start with a BOM,
    which would otherwise become part of the first column's name. Blank lines are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    rows: list[list[str]] = []
    lines: list[int] = []
    header: tuple[str, ...] | None = tuple(columns) if columns is not None else None
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)
            for row in reader:
                if not row or all(not cell.strip() for cell in row):
                    continue
                if header is None:
                    header = tuple(cell.strip() for cell in row)
                    continue
                if len(row) != len(header):
                    raise DataError(f"{path} line {reader.line_num}: expected {len(header)} columns, found {len(row)}")
                rows.append(row)
                lines.append(reader.line_num)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise DataError(f"{path} line {reader.line_num}: cannot parse ({exc})") from None
    if header is None:
        raise DataError(f"{path}: file is empty")
    if not rows:
        raise DataError(f"{path}: file has a header but no data rows")
    return Table(path, header, rows, lines)


def examples_from_spec(table: Table, spec: TsvSpec, *, context: str) -> tuple[Example, ...]:
    """Turn a table of a known format into Examples, rejecting labels outside the task's set.

    Texts are stripped (SST-2 sentences end in a space) but otherwise kept as read: empty
    texts are allowed because published splits must keep their published sizes.
    """
    a = table.column(spec.text_a)
    b = table.column(spec.text_b) if spec.text_b is not None else None
    lab = table.column(spec.label)
    gid = table.column(spec.guid) if spec.guid is not None else None
    legal = frozenset(spec.labels) if spec.labels is not None else None
    examples = []
    for position, row in enumerate(table.rows):
        label = row[lab].strip()
        if legal is not None and label not in legal:
            raise DataError(
                f"{table.where(position)}: label {label!r} is not one of {', '.join(spec.labels or ())} ({context})"
            )
        if legal is None and not _is_score(label):
            raise DataError(f"{table.where(position)}: score {label!r} is not a number in [0, 5] ({context})")
        examples.append(
            Example(
                position=position,
                guid=row[gid].strip() if gid is not None else None,
                text_a=row[a].strip(),
                text_b=row[b].strip() if b is not None else None,
                label=label,
            )
        )
    return tuple(examples)


def _is_score(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and 0.0 <= value <= 5.0
