"""`attnwh ingest relations`: word-level attention, dependency accuracy, the offset baseline,
and the command end to end on a tiny model."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from attnwh.ingest.measures import dependencies as rel
from attnwh.ingest.measures import wordlevel
from attnwh.ingest.sources.examples import seeded_sample
from helpers import run

# Three sentences; "museum" and "robot" split into several pieces with the tiny BERT
# tokenizer; sentence 3 has a multiword-token range (3-4) and an empty node (4.1), and
# subtyped relations (nsubj:pass, det:poss).
CONLLU = """\
# sent_id = 1
# text = The quick brown fox jumps .
1	The	the	DET	_	_	4	det	_	_
2	quick	quick	ADJ	_	_	4	amod	_	_
3	brown	brown	ADJ	_	_	4	amod	_	_
4	fox	fox	NOUN	_	_	5	nsubj	_	_
5	jumps	jump	VERB	_	_	0	root	_	_
6	.	.	PUNCT	_	_	5	punct	_	_

# sent_id = 2
# text = The museum opened a new wing .
1	The	the	DET	_	_	2	det	_	_
2	museum	museum	NOUN	_	_	3	nsubj	_	_
3	opened	open	VERB	_	_	0	root	_	_
4	a	a	DET	_	_	6	det	_	_
5	new	new	ADJ	_	_	6	amod	_	_
6	wing	wing	NOUN	_	_	3	obj	_	_
7	.	.	PUNCT	_	_	3	punct	_	_

# sent_id = 3
# text = Nobody expected the robot .
1	Nobody	nobody	PRON	_	_	2	nsubj:pass	_	_
2	expected	expect	VERB	_	_	0	root	_	_
3-4	the-robot	_	_	_	_	_	_	_	_
3	the	the	DET	_	_	4	det:poss	_	_
4	robot	robot	NOUN	_	_	2	obj	_	_
4.1	ghost	ghost	NOUN	_	_	_	_	2:dep	_
5	.	.	PUNCT	_	_	2	punct	_	_

"""
EXPECTED_TOTALS = {"det": 4, "amod": 3, "nsubj": 3, "obj": 2, "punct": 3}


@pytest.fixture
def treebank(tmp_path) -> Path:
    path = tmp_path / "tiny-ud-dev.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    return path


def test_reader_skips_ranges_and_empty_nodes_and_strips_subtypes(treebank):
    sentences = rel.read_conllu(treebank)
    assert [s.words for s in sentences][2] == ("Nobody", "expected", "the", "robot", ".")
    assert sentences[2].heads == (1, -1, 3, 1, 1)
    assert sentences[2].relations == ("nsubj", "root", "det", "obj", "punct")
    assert seeded_sample(sentences, 2, 42) == seeded_sample(sentences, 2, 42)
    assert len(seeded_sample(sentences, 2, 42)) == 2


def test_word_level_attention_sums_to_and_averages_from_pieces():
    # [CLS] w0 w1a w1b w2 [SEP]: word 1 has two pieces.
    word_ids = [None, 0, 1, 1, 2, None]
    torch.manual_seed(0)
    a = torch.rand(6, 6)
    a = a / a.sum(-1, keepdim=True)
    pieces = wordlevel.piece_matrix(word_ids, 3)
    w = wordlevel.word_attention(a, pieces)
    groups = [[1], [2, 3], [4]]
    expected = torch.tensor(
        [[float(np.mean([sum(a[q, k] for k in to) for q in frm])) for to in groups] for frm in groups]
    )
    assert w.shape == (3, 3)
    torch.testing.assert_close(w, expected)
    # the special tokens are no candidates: each row misses exactly their share of mass
    special_mass = torch.stack([a[q][[0, 5]].sum() for q in range(6)])
    row_mass = torch.stack([special_mass[q].mean() for q in ([1], [2, 3], [4])])
    torch.testing.assert_close(w.sum(-1), 1 - row_mass)
    # even when [CLS] gets almost everything, the chosen word is a real word, never itself
    a2 = torch.full((6, 6), 0.01)
    a2[:, 0] = 0.9
    a2[2, 4] = 0.05  # piece w1a likes w2
    pred = wordlevel.most_attended(wordlevel.word_attention(a2, pieces), torch.ones(3, dtype=torch.bool))
    assert pred.tolist()[1] == 2 and all(p != i for i, p in enumerate(pred.tolist()))


def _one_hot_attention(targets: list[int], n: int) -> torch.Tensor:
    a = torch.full((n, n), 0.01)
    for i, t in enumerate(targets):
        a[i, t] = 1.0
    return a


def test_accuracy_when_attention_points_to_the_head_or_the_previous_word(treebank):
    sentences = rel.read_conllu(treebank)
    to_head = rel.RelationCounts(layers=1, heads=2)
    for s in sentences:
        n = len(s.words)
        head_targets = [h if h >= 0 else (i + 1) % n for i, h in enumerate(s.heads)]
        prev_targets = [(i - 1) % n for i in range(n)]
        maps = torch.stack([_one_hot_attention(head_targets, n), _one_hot_attention(prev_targets, n)])
        pred = wordlevel.most_attended(maps, torch.ones(n, dtype=torch.bool))[None].numpy()  # (1, 2, n)
        to_head.add(s, pred)
    assert to_head.total == EXPECTED_TOTALS
    for relation, total in EXPECTED_TOTALS.items():
        assert to_head.correct[relation][0, 0, 0] == total  # head 0 always finds the head
    # head 1 looks at the previous word: its dep->head accuracy is the offset -1 count
    prev = {r: int(to_head.offsets[r][rel.OFFSETS.index(-1)]) for r in EXPECTED_TOTALS}
    assert prev == {"det": 0, "amod": 0, "nsubj": 0, "obj": 0, "punct": 1}
    assert {r: int(to_head.correct[r][0, 0, 1]) for r in EXPECTED_TOTALS} == prev
    # head->dep with the previous word: right exactly when the dependent sits just before its head
    nxt = {r: int(to_head.offsets[r][rel.OFFSETS.index(1)]) for r in EXPECTED_TOTALS}
    assert nxt == {"det": 2, "amod": 2, "nsubj": 3, "obj": 0, "punct": 0}
    assert {r: int(to_head.correct[r][1, 0, 1]) for r in EXPECTED_TOTALS} == nxt
    rows = to_head.head_rows()
    assert len(rows["relation"]) == len(EXPECTED_TOTALS) * 2 * 1 * 2


def test_baseline_picks_the_offset_of_the_next_word():
    counts = rel.RelationCounts(layers=1, heads=1)
    for n in (3, 5, 8):
        s = rel.Sentence(tuple("w" * n), tuple(list(range(1, n)) + [-1]), tuple(["compound"] * (n - 1) + ["root"]))
        counts.add(s, np.zeros((1, 1, n), dtype=np.int64))
    assert counts.baseline("compound") == (1, 2 + 4 + 7)
    rows = counts.baseline_rows()
    assert rows["best_offset"] == [1] and rows["accuracy"] == [1.0] and rows["total"] == [13]


def test_relations_command_end_to_end(monkeypatch, capsys, tiny_model_dir, treebank, tmp_path):
    db = tmp_path / "w.duckdb"
    args = [
        "ingest",
        "relations",
        "--conllu",
        str(treebank),
        "--model",
        str(tiny_model_dir("bert")),
        "--db",
        str(db),
        "--batch-size",
        "2",
    ]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "3 sentences" in out and str(db.resolve()) in out
    with duckdb.connect(str(db), read_only=True) as con:
        totals = dict(con.execute("SELECT relation, max(total) FROM dependency_heads GROUP BY relation").fetchall())
        assert totals == EXPECTED_TOTALS
        assert con.execute("SELECT count(*) FROM dependency_heads").fetchall()[0][0] == len(EXPECTED_TOTALS) * 2 * 2 * 4
        base = dict(con.execute("SELECT relation, total FROM dependency_baselines").fetchall())
        assert base == EXPECTED_TOTALS
        runs = con.execute("SELECT kind, dataset, task, split, status, n_examples, n_truncated FROM runs").fetchall()
        assert runs == [("relations", "tiny-ud-dev.conllu", "dependencies", "tiny-ud-dev", "complete", 3, 0)]
    code, out, err = run(monkeypatch, capsys, "query", "dependency_heads", "--db", str(db), "--format", "csv")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1 + len(EXPECTED_TOTALS) * 2
    code, out, err = run(
        monkeypatch, capsys, "query", "dependency_heads", "--db", str(db), "-p", "relation=det", "--format", "csv"
    )
    assert code == 0 and len(out.strip().splitlines()) == 3
    # rerun: kept; --replace redoes it
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0 and "already complete" in out
    code, out, err = run(monkeypatch, capsys, *args, "--replace")
    assert code == 0 and "replaced" in out
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == 1
        assert con.execute("SELECT count(DISTINCT run_id) FROM dependency_heads").fetchall()[0][0] == 1


def test_over_long_sentences_are_skipped_and_counted(tiny_model_dir, treebank):
    from attnwh.ingest.encoder.loading import load_encoder

    encoder = load_encoder(str(tiny_model_dir("bert")), "cpu")
    long = rel.Sentence(tuple(["fox"] * 100), tuple([1] + [0] * 99), tuple(["x"] * 100))
    result = rel.measure(encoder, [*rel.read_conllu(treebank), long], batch_size=8)
    assert (result.n_sentences, result.n_skipped) == (4, 1)
    assert result.counts.total == EXPECTED_TOTALS


@pytest.mark.parametrize("content", [None, "1\tonly-two-columns\n\n"])
def test_missing_or_malformed_file_is_one_line_and_no_database(monkeypatch, capsys, tmp_path, content):
    path = tmp_path / "bad.conllu"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    db = tmp_path / "w.duckdb"
    code, out, err = run(monkeypatch, capsys, "ingest", "relations", "--conllu", str(path), "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "bad.conllu" in err
    assert not db.exists()


def test_byte_level_bpe_pieces_are_the_running_text_pieces_of_their_words(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir("roberta"))
    assert wordlevel.byte_level(tokenizer)
    words = [["The", "dog", "barked", "."], ["a", "quick", "fox", "jumps", "over", "it"]]
    enc, word_ids = wordlevel.encode_words(tokenizer, words)
    for b, sentence in enumerate(words):
        # The pieces of the sentence as running text (with "Ġ" before every word but the first) ...
        assert enc["input_ids"][b] == tokenizer(" ".join(sentence))["input_ids"]
        pieces = tokenizer.convert_ids_to_tokens(enc["input_ids"][b])
        # ... each word's pieces spell it (the space before it included), and no word is left without one.
        for w, word in enumerate(sentence):
            mine = [p for p, i in zip(pieces, word_ids[b]) if i == w]
            assert tokenizer.convert_tokens_to_string(mine).strip() == word
        assert word_ids[b][0] is None and word_ids[b][-1] is None  # <s> and </s>


def test_wordpiece_words_are_tokenized_as_given(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir("bert"))
    assert not wordlevel.byte_level(tokenizer)
    words = [["the", "dog", "barked", "."]]
    enc, word_ids = wordlevel.encode_words(tokenizer, words)
    given = tokenizer(words, is_split_into_words=True)
    assert enc["input_ids"] == given["input_ids"] and word_ids == [given.word_ids(0)]


def test_relations_on_a_byte_level_bpe_model(monkeypatch, capsys, tiny_model_dir, treebank, tmp_path):
    db = tmp_path / "w.duckdb"
    args = ["ingest", "relations", "--conllu", str(treebank), "--model", str(tiny_model_dir("roberta"))]
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(db), "--batch-size", "2")
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        totals = dict(con.execute("SELECT relation, max(total) FROM dependency_heads GROUP BY relation").fetchall())
    assert totals == EXPECTED_TOTALS  # every dependency measured: each word has its pieces
