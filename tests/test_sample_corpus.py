"""The bundled sample corpus (ingest/sources/sample) is well formed and reproducible by its generator."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "ingest" / "sources" / "sample"
GENERATOR = REPO / "tools" / "make_sample_corpus.py"

TASKS = {
    "sentiment": {
        "header": ["sentence", "label"],
        "labels": {"0", "1"},
        "texts": ["sentence"],
    },
    "entailment": {
        "header": ["index", "sentence1", "sentence2", "label"],
        "labels": {"entailment", "not_entailment"},
        "texts": ["sentence1", "sentence2"],
    },
}
ROWS = {"train": (1800, 2200), "dev": (350, 450)}
FILES = [(task, split) for task in TASKS for split in ROWS]


def read(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[0], rows[1:]


def content(task: str, row: list[str]) -> tuple[str, ...]:
    """A row without its index column, for comparing rows across files."""
    return tuple(row[1:]) if task == "entailment" else tuple(row)


@pytest.mark.parametrize("task,split", FILES)
def test_header_and_row_count(task: str, split: str) -> None:
    header, rows = read(SAMPLE / task / f"{split}.tsv")
    assert header == TASKS[task]["header"]
    lo, hi = ROWS[split]
    assert lo <= len(rows) <= hi
    assert all(len(row) == len(header) for row in rows)


@pytest.mark.parametrize("task,split", FILES)
def test_labels_allowed_and_balanced(task: str, split: str) -> None:
    header, rows = read(SAMPLE / task / f"{split}.tsv")
    labels = Counter(row[header.index("label")] for row in rows)
    assert set(labels) == TASKS[task]["labels"]
    for label, n in labels.items():
        assert 0.45 <= n / len(rows) <= 0.55, (label, n, len(rows))


@pytest.mark.parametrize("task,split", FILES)
def test_texts_present_and_rows_unique(task: str, split: str) -> None:
    header, rows = read(SAMPLE / task / f"{split}.tsv")
    for column in TASKS[task]["texts"]:
        i = header.index(column)
        assert all(row[i].strip() for row in rows), f"empty {column}"
    keys = [content(task, row) for row in rows]
    assert len(set(keys)) == len(keys), "duplicate rows"
    if task == "entailment":
        assert [row[0] for row in rows] == [str(i) for i in range(len(rows))]


@pytest.mark.parametrize("task", TASKS)
def test_dev_rows_not_in_train(task: str) -> None:
    _, train = read(SAMPLE / task / "train.tsv")
    _, dev = read(SAMPLE / task / "dev.tsv")
    train_keys = {content(task, row) for row in train}
    assert not [row for row in dev if content(task, row) in train_keys]


@pytest.mark.parametrize("task,split", FILES)
def test_plain_utf8_lines(task: str, split: str) -> None:
    data = (SAMPLE / task / f"{split}.tsv").read_bytes()
    data.decode("utf-8")
    assert b"\r" not in data
    assert data.endswith(b"\n") and not data.endswith(b"\n\n")


def test_generator_reproduces_files(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(GENERATOR), "--out", str(tmp_path)], check=True, capture_output=True)
    for task, split in FILES:
        fresh = (tmp_path / task / f"{split}.tsv").read_bytes()
        bundled = (SAMPLE / task / f"{split}.tsv").read_bytes()
        assert fresh == bundled, f"{task}/{split}.tsv differs from a fresh run of {GENERATOR.name}"
