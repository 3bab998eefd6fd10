"""`attnwh ingest relations`: word-level attention, dependency accuracy, the offset baseline,
and the command end to end on a tiny model."""

from __future__ import annotations

from collections import Counter
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
    prev = {r: int(to_head.offsets[r][0, rel.OFFSETS.index(-1)]) for r in EXPECTED_TOTALS}
    assert prev == {"det": 0, "amod": 0, "nsubj": 0, "obj": 0, "punct": 1}
    assert {r: int(to_head.correct[r][0, 0, 1]) for r in EXPECTED_TOTALS} == prev
    # head->dep with the previous word: right exactly when the dependent sits just before its head
    nxt = {r: int(to_head.offsets[r][1, rel.OFFSETS.index(1)]) for r in EXPECTED_TOTALS}
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
    assert counts.baseline("compound", 1) == (-1, 2 + 4 + 7)  # the dependent is one word before its head
    rows = counts.baseline_rows()
    assert rows["direction"] == ["dep_to_head", "head_to_dep"]
    assert rows["best_offset"] == [1, -1] and rows["accuracy"] == [1.0, 1.0] and rows["total"] == [13, 13]


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
        base = dict(
            con.execute("SELECT relation, total FROM dependency_baselines WHERE direction = 'dep_to_head'").fetchall()
        )
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
    from attnwh.ingest.model.loading import load_model

    encoder = load_model(str(tiny_model_dir("bert")), "cpu")
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


# ---------------------------------------------------------------- stored values against eager attention

# Two more sentences for the value test: a proper noun, a pronoun as indirect object, "n't",
# words the tiny tokenizer splits into several pieces, and advmod as often one word before its
# head as one word after (the offset baseline's tie).
MORE_CONLLU = """\
# sent_id = 4
# text = Mary did n't give them the book .
1	Mary	Mary	PROPN	_	_	4	nsubj	_	_
2	did	do	AUX	_	_	4	aux	_	_
3	n't	not	PART	_	_	4	advmod	_	_
4	give	give	VERB	_	_	0	root	_	_
5	them	they	PRON	_	_	4	iobj	_	_
6	the	the	DET	_	_	7	det	_	_
7	book	book	NOUN	_	_	4	obj	_	_
8	.	.	PUNCT	_	_	4	punct	_	_

# sent_id = 5
# text = The dog follows slowly along the river .
1	The	the	DET	_	_	2	det	_	_
2	dog	dog	NOUN	_	_	3	nsubj	_	_
3	follows	follow	VERB	_	_	0	root	_	_
4	slowly	slowly	ADV	_	_	3	advmod	_	_
5	along	along	ADP	_	_	7	case	_	_
6	the	the	DET	_	_	7	det	_	_
7	river	river	NOUN	_	_	3	obl	_	_
8	.	.	PUNCT	_	_	3	punct	_	_

"""


def eager_word_maps(model, tokenizer, words: tuple[str, ...]) -> tuple[np.ndarray, list[int], int]:
    """(layers, heads, W, W) word-level maps of one sentence from the eager path's
    `output_attentions=True`, pooled by hand as docs/metrics.md says (to a word: the sum over
    its pieces; from a word: the mean over its pieces; special tokens are no words), with the
    pieces per word and the sentence's token count (special tokens included)."""
    enc = tokenizer(list(words), is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        a = torch.stack(model(**enc, output_attentions=True).attentions, 1)[0].double().numpy()  # (L, H, S, S)
    ids = enc.word_ids(0)
    pieces = [[s for s, w in enumerate(ids) if w == i] for i in range(len(words))]
    assert all(pieces), "every word has a piece"
    maps = np.zeros((*a.shape[:2], len(words), len(words)))
    for i, rows in enumerate(pieces):
        for j, columns in enumerate(pieces):
            maps[..., i, j] = a[..., rows, :][..., columns].sum(-1).mean(-1)
    return maps, [len(p) for p in pieces], len(ids)


def test_stored_accuracies_baselines_and_feature_attention_match_eager_attention(
    monkeypatch, capsys, tiny_model_dir, tmp_path
):
    """`attnwh ingest relations` (batched, padded) stores the values recomputed here from the
    eager path's maps of each sentence alone: per relation, direction, layer and head the
    dependency accuracy, the best fixed offset, and the attention feature words receive."""
    from transformers import AutoModel, AutoTokenizer

    treebank = tmp_path / "ud.conllu"
    treebank.write_text(CONLLU + MORE_CONLLU, encoding="utf-8")
    folder = tiny_model_dir("bert")
    db = tmp_path / "w.duckdb"
    args = ["ingest", "relations", "--conllu", str(treebank), "--model", str(folder), "--db", str(db)]
    code, _, err = run(monkeypatch, capsys, *args, "--batch-size", "2")
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        heads = {
            (r, d, layer, h): (c, t, a)
            for r, d, layer, h, c, t, a in con.execute(
                "SELECT relation, direction, layer, head, correct, total, accuracy FROM dependency_heads"
            ).fetchall()
        }
        baselines = {
            r: rest
            for r, *rest in con.execute(
                "SELECT relation, best_offset, correct, total, accuracy FROM dependency_baselines WHERE direction = 'dep_to_head'"
            ).fetchall()
        }
        features = {
            (f, layer, h): rest
            for f, layer, h, *rest in con.execute(
                "SELECT feature, layer, head, n_sentences, n_words, mean_attention, per_word_attention,"
                " uniform_attention, uniform_per_word FROM feature_attention"
            ).fetchall()
        }

    # The annotation read by hand: (form, UPOS, 0-based head or -1, relation without subtype).
    sentences = []
    for block in (CONLLU + MORE_CONLLU).strip().split("\n\n"):
        cells = [line.split("\t") for line in block.splitlines() if not line.startswith("#")]
        cells = [c for c in cells if c[0].isdigit()]  # no ranges (3-4), no empty nodes (4.1)
        sentences.append([(c[1], c[3], int(c[6]) - 1, c[7].split(":")[0]) for c in cells])
    negations = {"nobody", "n't"}  # the negation words of these sentences
    feature_of = {
        "noun": lambda form, pos, rel: pos in ("NOUN", "PROPN"),
        "verb": lambda form, pos, rel: pos == "VERB",
        "pronoun": lambda form, pos, rel: pos == "PRON",
        "subject": lambda form, pos, rel: rel == "nsubj",
        "object": lambda form, pos, rel: rel in ("obj", "iobj"),
        "negation": lambda form, pos, rel: form.lower() in negations,
    }

    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    layers, n_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    correct: dict[tuple[str, str], np.ndarray] = {}
    total: dict[str, int] = {}
    offsets: dict[str, Counter[int]] = {}
    sentence_scores: dict[str, list[np.ndarray]] = {f: [] for f in feature_of}
    word_scores: dict[str, list[np.ndarray]] = {f: [] for f in feature_of}
    uniform_sentence: dict[str, list[float]] = {f: [] for f in feature_of}
    uniform_word: dict[str, list[float]] = {f: [] for f in feature_of}
    split_words = 0
    for sentence in sentences:
        words = tuple(w[0] for w in sentence)
        maps, pieces, tokens = eager_word_maps(model, tokenizer, words)
        split_words += sum(p > 1 for p in pieces)
        n = len(words)
        # The most-attended other word of each word, per layer and head; never a near tie, which
        # float32 rounding in the batched pass could break the other way.
        others = np.where(np.eye(n, dtype=bool), -np.inf, maps)
        top = np.sort(others, -1)
        assert (top[..., -1] - top[..., -2]).min() > 1e-5
        best = others.argmax(-1)  # (L, H, W)
        for dep, (_, _, head, relation) in enumerate(sentence):
            if head < 0:
                continue
            total[relation] = total.get(relation, 0) + 1
            for direction, hit in (("dep_to_head", best[:, :, dep] == head), ("head_to_dep", best[:, :, head] == dep)):
                correct[relation, direction] = correct.get((relation, direction), 0) + hit
            offset = head - dep
            if 0 < abs(offset) <= 5:
                offsets.setdefault(relation, Counter())[offset] += 1
        received = maps.sum(-2) / n  # (L, H, W): mean over the sentence's words of A[i, w]
        for feature, has in feature_of.items():
            chosen = [i for i, (form, pos, _, rel) in enumerate(sentence) if has(form, pos, rel)]
            if chosen:
                sentence_scores[feature].append(received[:, :, chosen].max(-1))
                word_scores[feature].extend(received[:, :, i] for i in chosen)
                uniform_sentence[feature].append(max(pieces[i] / tokens for i in chosen))
                uniform_word[feature].extend(pieces[i] / tokens for i in chosen)
    assert split_words >= 3, "the sentences should hold words split into pieces"

    assert set(baselines) == set(total) and len(heads) == len(total) * 2 * layers * n_heads
    for relation, n in total.items():
        for direction in ("dep_to_head", "head_to_dep"):
            expected = correct[relation, direction]
            for layer in range(layers):
                for head in range(n_heads):
                    c = int(expected[layer, head])
                    assert heads[relation, direction, layer, head] == pytest.approx((c, n, c / n)), (
                        relation,
                        direction,
                        layer,
                        head,
                    )
        counted = offsets.get(relation, Counter())
        # The best offset: right most often; ties to the smaller |k|, then to the left.
        k = min((k for k in range(-5, 6) if k), key=lambda k: (-counted[k], abs(k), k))
        assert tuple(baselines[relation]) == pytest.approx((k, counted[k], n, counted[k] / n)), relation
    accuracies = np.array([v[2] for v in heads.values()])
    assert len(set(accuracies.round(6).tolist())) > 3, "accuracies should differ between heads"
    assert offsets["advmod"][1] == offsets["advmod"][-1]  # a tie, for the tie rule

    assert {f for f, _, _ in features} == set(feature_of)
    for feature in feature_of:
        mean, per_word = np.mean(sentence_scores[feature], 0), np.mean(word_scores[feature], 0)
        for layer in range(layers):
            for head in range(n_heads):
                n_s, n_w, *scores = features[feature, layer, head]
                assert (n_s, n_w) == (len(sentence_scores[feature]), len(word_scores[feature])), feature
                expected = [
                    mean[layer, head],
                    per_word[layer, head],
                    np.mean(uniform_sentence[feature]),
                    np.mean(uniform_word[feature]),
                ]
                np.testing.assert_allclose(scores, expected, atol=1e-6, err_msg=f"{feature} {layer} {head}")
    spread = np.array([v[2] for v in features.values()])
    assert spread.std() > 1e-2, "the attention to feature words should differ between heads"
