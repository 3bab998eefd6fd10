"""Plain text for language modelling: documents from a text file, a JSONL (or CSV, TSV,
Parquet) file, a `datasets` dataset or the bundled `prose` sample, cut into sequences of the
model's tokens.

Reading and cutting are two steps. Reading (:func:`load_text`) happens before any model
loads, so a missing file or field fails in one line at once; it gives a `TaskData` whose
examples are the documents. Cutting (:func:`cut_documents`, called through `TaskData.cut`
once the tokenizer and the length are known) turns each document into windows of at most
`max_length` tokens, special tokens included:

- a document that fits is one sequence, whole; two documents never share a sequence;
- a longer one is cut into windows of `max_length` less the special tokens, consecutive
  windows sharing `stride` tokens (the overlap, as `stride` means in HF tokenizers'
  overflowing windows; 0 by default: every token in exactly one sequence);
- each sequence starts (and ends) with the special tokens the tokenizer adds to one input
  (a BOS where it adds one, [CLS] … [SEP] for BERT);
- a sequence carries its exact token ids, so the model reads the tokens the document was cut
  into, not a re-tokenization of the decoded text (which can differ at a cut); its text is
  the decoded window, for display, and its guid `D:T` names its document D (0-based, in
  source order) and the offset T of its first token in that document.
"""

from __future__ import annotations

import csv
import importlib.resources
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnwh.errors import DataError, UsageError
from attnwh.ingest.sources.examples import Example, TaskData, TextCut
from attnwh.ingest.sources.files import (
    _FILE_FORMATS,
    _columns_of_table,
    _read_json,
    _read_parquet,
    _require_columns,
    _text_cells,
    file_task_name,
)
from attnwh.ingest.sources.glue import normalize_name, read_delimited

if TYPE_CHECKING:
    import transformers

__all__ = [
    "DEFAULT_TEXT_COLUMN",
    "DOCUMENT_UNITS",
    "SAMPLE_TEXTS",
    "cut_documents",
    "load_sample_text",
    "load_text",
    "special_tokens",
    "windows",
]

# How a plain text file is split into documents (the names of `datasets`' text builder's
# sample_by, with `file` for its `document`): blank-line-separated paragraphs by default, as
# prose and wikitext-style dumps are written; `line` for one document per line (JSONL-like
# corpora flattened to text); `file` for a whole file as one document (a book).
DOCUMENT_UNITS = ("paragraph", "line", "file")
DEFAULT_TEXT_COLUMN = "text"
# The bundled text sample (ingest/sources/sample/<name>/<split>.txt), read by name as --task.
SAMPLE_TEXTS: dict[str, tuple[str, ...]] = {"prose": ("dev",)}

_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*\n\s*")


def split_documents(text: str, unit: str) -> list[str]:
    """The non-blank documents of a plain text, stripped, split by `unit` (DOCUMENT_UNITS)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if unit == "paragraph":
        parts = _BLANK_LINES.split(text)
    elif unit == "line":
        parts = text.split("\n")
    elif unit == "file":
        parts = [text]
    else:
        raise UsageError(f"--documents {unit!r}: choose one of {', '.join(DOCUMENT_UNITS)}")
    return [p.strip() for p in parts if p.strip()]


def _documents(texts: Sequence[str | None], where: str) -> tuple[Example, ...]:
    """Documents as examples: blank ones are left out (a corpus such as wikitext has many
    empty rows), but keep their place in the numbering so a guid points at its source row."""
    docs = tuple(
        Example(position=i, guid=None, text_a=t.strip(), text_b=None, label=None)
        for i, t in enumerate(texts)
        if t is not None and t.strip()
    )
    if not docs:
        raise DataError(f"{where}: no text (every document is empty)")
    return docs


def _read_plain(path: Path, unit: str) -> tuple[Example, ...]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if not text.strip():
        raise DataError(f"{path}: no text (the file is empty)")
    return _documents(split_documents(text, unit), str(path))


def _read_column(path: Path, kind: str, column: str) -> tuple[Example, ...]:
    """One text field of a JSONL/JSON, CSV, TSV or Parquet file, one document per record."""
    data: Mapping[str, Sequence[Any]]
    where: Callable[[int], str]
    if kind == "jsonl":
        data, where = _read_json(path, [column])
    elif kind == "parquet":
        data, where = _read_parquet(path, [column])
    else:  # TSV as GLUE writes it (tabs only, quotes are text), CSV with the usual quoting
        tsv = kind == "tsv"
        table = read_delimited(
            path, delimiter="\t" if tsv else ",", quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL
        )
        data, where = _columns_of_table(table, [column])
    return _documents(_text_cells(column, data[column], where), f"{path} column {column!r}")


def load_text(
    source: str | Path,
    *,
    text_column: str | None = None,
    split: str | None = None,
    dataset_config: str | None = None,
    stride: int = 0,
    documents: str | None = None,
    task: str | None = None,
) -> TaskData:
    """Read documents for language modelling from `source`: a plain text file (documents
    split by `documents`, default paragraph), a JSONL/JSON, CSV, TSV or Parquet file (one
    document per record, in `text_column`, default `text`), a folder written by
    `save_to_disk` or of data files, or a Hugging Face dataset name (one document per row;
    `split` defaults to `dev`, which falls back to `validation`, as for --dataset). The
    result is cut into sequences by `TaskData.cut`; `stride` is recorded for it."""
    if stride < 0:
        raise UsageError(f"--stride {stride}: give 0 or more tokens")
    path = Path(source).expanduser()
    kind = _FILE_FORMATS.get(path.suffix.lower())
    if documents is not None and documents not in DOCUMENT_UNITS:
        raise UsageError(f"--documents {documents!r}: choose one of {', '.join(DOCUMENT_UNITS)}")
    if path.is_file():
        if kind is None:
            unit = documents or "paragraph"
            if text_column is not None:
                raise UsageError(f"--text-column names a field of JSONL, CSV or Parquet; {path} is plain text")
            docs, origin = _read_plain(path, unit), f"{path} (documents: {unit})"
        else:
            if documents is not None:
                raise UsageError(f"--documents splits plain text; {path} holds one document per record")
            column = text_column or DEFAULT_TEXT_COLUMN
            docs, origin = _read_column(path, kind, column), f"{path} (field {column!r})"
        return TaskData(
            dataset=path.name,
            task=task or file_task_name(path),
            split=split or "all",
            examples=docs,
            labels=None,
            source=origin,
            text=TextCut(stride),
        )
    if kind is not None or path.suffix.lower() in (".txt", ".text"):
        raise DataError(f"text file not found: {path}")
    if documents is not None:
        raise UsageError("--documents splits a plain text file; a dataset holds one document per row")
    return _load_dataset_text(str(source), dataset_config, split, text_column or DEFAULT_TEXT_COLUMN, stride, task)


def _load_dataset_text(
    name: str, config: str | None, split: str | None, column: str, stride: int, task: str | None
) -> TaskData:
    """Documents from a `datasets` dataset: a local folder or a Hub name, one per row."""
    from attnwh.ingest.sources.hub import _default_task, _open_hub_split

    where_name = f"{name}/{config}" if config else name
    dataset, chosen = _open_hub_split(name, config, split or "dev", where_name)
    origin = f"{where_name}:{chosen}"
    _require_columns(origin, dataset.column_names, [column])
    texts = _text_cells(column, list(dataset[column]), lambda i: f"{origin} row {i}")
    return TaskData(
        dataset=name,
        task=task or config or _default_task(name),
        split=chosen,
        examples=_documents(texts, f"{origin} column {column!r}"),
        labels=None,
        source=f"{origin} (field {column!r})",
        text=TextCut(stride),
    )


def load_sample_text(name: str, split: str | None = None, stride: int = 0) -> TaskData:
    """The bundled text sample `name` (SAMPLE_TEXTS): English prose written for attnwh, one
    document per paragraph (ingest/sources/sample/SOURCES.md)."""
    key = normalize_name(name)
    if key not in SAMPLE_TEXTS:
        raise DataError(f"unknown sample text {name!r}; choose one of {', '.join(SAMPLE_TEXTS)}")
    splits = SAMPLE_TEXTS[key]
    split_key = (split or splits[0]).strip().lower()
    split_key = "dev" if split_key in ("validation", "valid", "val") else split_key
    if split_key not in splits:
        raise DataError(f"sample text {key} has no split {split!r}; choose one of {', '.join(splits)}")
    resource = importlib.resources.files("attnwh.ingest.sources") / "sample" / key / f"{split_key}.txt"
    with importlib.resources.as_file(resource) as path:
        if not path.is_file():
            raise DataError(f"bundled sample file missing: {path} (reinstall attnwh)")
        docs = _read_plain(path, "paragraph")
    return TaskData(
        dataset="sample",
        task=key,
        split=split_key,
        examples=docs,
        labels=None,
        source=f"{path} (documents: paragraph)",
        text=TextCut(stride),
    )


# ---------------------------------------------------------------------------------------
# Cutting documents into sequences
# ---------------------------------------------------------------------------------------


def special_tokens(tokenizer: transformers.PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one input's text ([CLS] and [SEP] for BERT,
    BOS for Llama, none for GPT-2), read from how it encodes a probe, so any tokenizer's own
    rule is followed."""
    probe = tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
    ids, mask = list(probe["input_ids"]), list(probe["special_tokens_mask"])
    if 0 not in mask:
        return ids, []
    first = mask.index(0)
    last = len(mask) - mask[::-1].index(0)
    return ids[:first], ids[last:]


def windows(n_tokens: int, width: int, stride: int) -> list[tuple[int, int]]:
    """[start, end) token ranges covering `n_tokens`: one when they fit in `width`, else
    windows of `width` whose neighbours share `stride` tokens, the last one ending at the
    end (and possibly shorter)."""
    if not 0 <= stride < width:
        raise ValueError(f"stride {stride} must be in [0, {width})")
    if n_tokens <= width:
        return [(0, n_tokens)]
    out = []
    start = 0
    while True:
        end = min(start + width, n_tokens)
        out.append((start, end))
        if end == n_tokens:
            return out
        start = end - stride


def cut_documents(data: TaskData, tokenizer: transformers.PreTrainedTokenizerBase, max_length: int) -> TaskData:
    """A text task's documents cut into sequences of at most `max_length` tokens of
    `tokenizer` (the module's docstring gives the rules); its source then names the length
    and the stride, for the run's record."""
    if data.text is None:
        return data
    if data.text.max_length is not None:
        if data.text.max_length == max_length:
            return data
        raise ValueError(f"{data.task} is already cut into {data.text.max_length}-token sequences")
    stride = data.text.stride
    prefix, suffix = special_tokens(tokenizer)
    width = max_length - len(prefix) - len(suffix)
    if stride >= width:
        specials = f" less the tokenizer's {len(prefix) + len(suffix)} special tokens" if prefix or suffix else ""
        raise UsageError(
            f"--stride {stride} must be less than the {max(width, 0)} tokens of text a {max_length}-token "
            f"sequence holds (--max-length{specials}); lower --stride or raise --max-length"
        )
    documents = data.examples
    # verbose=False: a document longer than the model's limit is the point here, not a mistake.
    content = tokenizer(
        [d.text_a for d in documents], add_special_tokens=False, verbose=False, return_attention_mask=False
    )["input_ids"]
    cuts = [
        (doc, start, ids[start:end])
        for doc, ids in zip(documents, content)
        for start, end in windows(len(ids), width, stride)
        if end > start
    ]
    if not cuts:
        raise DataError(f"{data.source}: its text makes no tokens")
    texts = tokenizer.batch_decode([piece for _, _, piece in cuts])
    examples = tuple(
        Example(
            position=k,
            guid=f"{doc.position}:{start}",
            text_a=text,
            text_b=None,
            label=None,
            token_ids=tuple(prefix + list(piece) + suffix),
        )
        for k, ((doc, start, piece), text) in enumerate(zip(cuts, texts, strict=True))
    )
    return replace(
        data,
        examples=examples,
        source=f"{data.source}; {max_length}-token sequences, stride {stride}",
        text=replace(data.text, max_length=max_length),
    )
