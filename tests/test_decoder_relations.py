"""`attnwh ingest relations` on decoders (docs/metrics.md#relations-on-decoders): what a word
sees is only the words before it, so every stored number is checked against word-level maps
pooled here by hand from HF's eager `output_attentions=True`, one sentence at a time, with the
causal definitions applied independently: dependency accuracy per direction over the pairs
whose target comes first, the backward-looking offset baselines, feature-word attention over
the words that see a word, and frame links. GPT-2 (no BOS: its first word holds the sink and is
no word) and Llama (a BOS that is no word, a tokenizer saved to pad on the left)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from attnwh.ingest.measures import dependencies as rel
from attnwh.ingest.measures import wordlevel
from helpers import run
from test_frames import framebert_text
from test_relations import CONLLU

# Sentences of letter-only words and "." (each one pre-token of a byte-level tokenizer, so the
# tokenizer's own word ids of the running text align pieces with words independently of
# attnwh's alignment), with heads on both sides of their dependents.
MORE = """\
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
FAMILIES = ("gpt2", "llama")


@pytest.fixture(scope="module")
def decoders(tmp_path_factory) -> dict[str, Path]:
    from transformers import AutoTokenizer

    from tiny_models import make_tiny_decoder

    made = {f: make_tiny_decoder(f, tmp_path_factory.mktemp(f"rel-{f}"), layers=2, heads=4) for f in FAMILIES}
    # Llama's tokenizer is saved to pad on the left: attnwh right-pads whatever it says.
    tokenizer = AutoTokenizer.from_pretrained(made["llama"])
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(made["llama"])
    return made


def annotated(text: str) -> list[list[tuple[str, str, int, str]]]:
    """(form, UPOS, 0-based head or -1, relation without subtype) per word, read by hand."""
    sentences = []
    for block in text.strip().split("\n\n"):
        cells = [line.split("\t") for line in block.splitlines() if not line.startswith("#")]
        cells = [c for c in cells if c[0].isdigit()]  # no ranges, no empty nodes
        sentences.append([(c[1], c[3], int(c[6]) - 1, c[7].split(":")[0]) for c in cells])
    return sentences


def eager_word_maps(model, tokenizer, words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layers, heads, W, W) word-level maps of one sentence alone, from the eager path (to a
    word: sum over its pieces; from a word: mean), the words that have pieces (the first
    token's word has none: it is the sink), and the same maps of an even causal head."""
    enc = tokenizer(" ".join(words), return_tensors="pt")
    ids = enc.word_ids(0)
    assert max(i for i in ids if i is not None) == len(words) - 1  # one pre-token per word
    if ids[0] is not None:  # no BOS: the first word holds the sink and is no word
        ids = [None if i == ids[0] else i for i in ids]
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    a = torch.stack(out.attentions, 1)[0].double().numpy()  # (L, H, S, S)
    n = a.shape[-1]
    even = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    pieces = [[s for s, w in enumerate(ids) if w == i] for i in range(len(words))]
    maps = np.zeros((*a.shape[:2], len(words), len(words)))
    uniform = np.zeros((len(words), len(words)))
    for i, rows in enumerate(pieces):
        for j, columns in enumerate(pieces):
            if rows and columns:
                maps[..., i, j] = a[..., rows, :][..., columns].sum(-1).mean(-1)
                uniform[i, j] = even[rows][:, columns].sum(-1).mean()
    return maps, np.array([bool(p) for p in pieces]), uniform


def best_earlier(maps: np.ndarray, present: np.ndarray, word: int) -> np.ndarray:
    """(layers, heads): the most-attended earlier word, never a near tie."""
    candidates = [j for j in range(word) if present[j]]
    scores = maps[..., word, candidates]
    if len(candidates) > 1:
        top = np.sort(scores, -1)
        assert (top[..., -1] - top[..., -2]).min() > 1e-5
    return np.array(candidates)[scores.argmax(-1)]


@pytest.mark.parametrize("family", FAMILIES)
def test_stored_relations_match_eager_causal_maps(monkeypatch, capsys, tmp_path, decoders, family):
    from transformers import AutoModel, AutoTokenizer

    folder = decoders[family]
    treebank, framenet = tmp_path / "ud.conllu", tmp_path / "fn.conll"
    treebank.write_text(CONLLU + MORE, encoding="utf-8")
    framenet.write_text(framebert_text(), encoding="utf-8")
    db = tmp_path / "w.duckdb"
    args = ["ingest", "relations", "--conllu", str(treebank), "--framenet", str(framenet), "--model", str(folder)]
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(db), "--batch-size", "2")
    assert code == 0, err
    assert "4 sentences" in out and "head→dep" in out
    with duckdb.connect(str(db), read_only=True) as con:
        heads = {
            (r, d, layer, h): (c, t, a)
            for r, d, layer, h, c, t, a in con.execute(
                "SELECT relation, direction, layer, head, correct, total, accuracy FROM dependency_heads"
            ).fetchall()
        }
        baselines = {
            (r, d): tuple(rest)
            for r, d, *rest in con.execute(
                "SELECT relation, direction, best_offset, correct, total, accuracy FROM dependency_baselines"
            ).fetchall()
        }
        features = {
            (f, layer, h): rest
            for f, layer, h, *rest in con.execute(
                "SELECT feature, layer, head, n_sentences, n_words, mean_attention, per_word_attention,"
                " uniform_attention, uniform_per_word FROM feature_attention"
            ).fetchall()
        }
        frames = {
            (d, layer, h): (n, m)
            for d, layer, h, n, m in con.execute(
                "SELECT direction, layer, head, n_annotations, mean_max_attention FROM frame_heads"
            ).fetchall()
        }
        causal = con.execute("SELECT causal FROM models").fetchall()
    assert causal == [(True,)]

    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    layers, n_heads = model.config.num_hidden_layers, model.config.num_attention_heads
    directions = ("dep_to_head", "head_to_dep")
    correct: dict[tuple[str, str], np.ndarray] = {}
    seen: Counter[tuple[str, str]] = Counter()
    back: dict[tuple[str, str], Counter[int]] = {}  # offset of the target from the attending word
    relations: set[str] = set()
    feature_of = {
        "noun": lambda form, pos, r: pos in ("NOUN", "PROPN"),
        "verb": lambda form, pos, r: pos == "VERB",
        "pronoun": lambda form, pos, r: pos == "PRON",
        "subject": lambda form, pos, r: r == "nsubj",
        "object": lambda form, pos, r: r in ("obj", "iobj"),
        "negation": lambda form, pos, r: form.lower() == "nobody",
    }
    sentence_scores: dict[str, list] = {f: [] for f in feature_of}
    word_scores: dict[str, list] = {f: [] for f in feature_of}
    even_sentence: dict[str, list] = {f: [] for f in feature_of}
    even_word: dict[str, list] = {f: [] for f in feature_of}
    for sentence in annotated(CONLLU + MORE):
        words = [w[0] for w in sentence]
        maps, present, uniform = eager_word_maps(model, tokenizer, words)
        assert present[0] == (family == "llama")  # GPT-2 has no BOS: its first word is the sink's
        assert np.abs(np.triu(maps, 1)).max() == 0  # a word sees no later word
        for dep, (_, _, head, relation) in enumerate(sentence):
            if head < 0 or not (present[dep] and present[head]):
                continue
            relations.add(relation)
            for direction, attending, target in (("dep_to_head", dep, head), ("head_to_dep", head, dep)):
                if target > attending:
                    continue  # invisible on a causal map
                seen[relation, direction] += 1
                hit = best_earlier(maps, present, attending) == target
                correct[relation, direction] = correct.get((relation, direction), 0) + hit
                back.setdefault((relation, direction), Counter())[target - attending] += 1
        # a word w is seen by the words i >= w: it receives the mean of A[i, w] over them
        seeing = np.array([present[w:].sum() for w in range(len(words))])
        received = maps.sum(-2) / np.maximum(seeing, 1)
        even = uniform.sum(0) / np.maximum(seeing, 1)
        for feature, has in feature_of.items():
            chosen = [i for i, (form, pos, _, r) in enumerate(sentence) if has(form, pos, r) and present[i]]
            if chosen:
                sentence_scores[feature].append(received[:, :, chosen].max(-1))
                word_scores[feature].extend(received[:, :, i] for i in chosen)
                even_sentence[feature].append(even[chosen].max())
                even_word[feature].extend(even[i] for i in chosen)

    assert {r for r, *_ in heads} == relations
    for relation in relations:
        for direction in directions:
            n = seen[relation, direction]
            for layer in range(layers):
                for head in range(n_heads):
                    stored = heads[relation, direction, layer, head]
                    if n == 0:  # a direction that saw nothing: NULL, not 0
                        assert stored == (0, 0, None), (relation, direction)
                        continue
                    c = int(correct[relation, direction][layer, head])
                    assert stored == pytest.approx((c, n, c / n)), (relation, direction, layer, head)
            if n == 0:
                assert baselines[relation, direction] == (None, 0, 0, None)
                continue
            counted = back[relation, direction]
            k = min(range(-5, 0), key=lambda k: (-counted[k], -k))  # only earlier words; the nearest on ties
            assert baselines[relation, direction] == pytest.approx((k, counted[k], n, counted[k] / n)), relation
    assert seen["det", "dep_to_head"] == 0 and seen["punct", "head_to_dep"] == 0
    assert len({v[2] for v in heads.values() if v[2] is not None}) > 3, "accuracies should differ between heads"

    for feature in feature_of:
        if not sentence_scores[feature]:
            assert not any(f == feature for f, _, _ in features)
            continue
        mean, per_word = np.mean(sentence_scores[feature], 0), np.mean(word_scores[feature], 0)
        for layer in range(layers):
            for head in range(n_heads):
                n_s, n_w, *scores = features[feature, layer, head]
                assert (n_s, n_w) == (len(sentence_scores[feature]), len(word_scores[feature])), feature
                expected = [
                    mean[layer, head],
                    per_word[layer, head],
                    np.mean(even_sentence[feature]),
                    np.mean(even_word[feature]),
                ]
                np.testing.assert_allclose(scores, expected, atol=1e-6, err_msg=f"{feature} {layer} {head}")

    # Frame links (the two annotations test_frames keeps): per direction only the pairs whose
    # attended word comes first; an annotation without one is not in that direction's mean.
    kept = [
        (["The", "critic", "warmly", "praised", "the", "new", "museum", "."], (3,), ((0, 1),)),
        (["Robots", "quickly", "took", "over", "the", "museum", "."], (2, 3), ((0,), (5,))),
    ]
    sums: dict[str, list] = {"target_to_element": [], "element_to_target": [], "either": []}
    for words, targets, elements in kept:
        maps, present, _ = eager_word_maps(model, tokenizer, words)
        pairs = [(t, e) for span in elements for t in targets for e in span if present[t] and present[e]]
        forward = [maps[:, :, t, e] for t, e in pairs if e < t]
        backward = [maps[:, :, e, t] for t, e in pairs if t < e]
        for direction, values in (("target_to_element", forward), ("element_to_target", backward)):
            if values:
                sums[direction].append(np.max(values, 0))
        sums["either"].append(np.max(forward + backward, 0))
    for direction, values in sums.items():
        if not values:
            assert not any(d == direction for d, _, _ in frames)
            continue
        for layer in range(layers):
            for head in range(n_heads):
                n, m = frames[direction, layer, head]
                assert n == len(values)
                assert m == pytest.approx(float(np.mean(values, 0)[layer, head]), abs=1e-6), (direction, layer, head)
    expected = {"gpt2": (1, 1, 2), "llama": (2, 1, 2)}[family]  # GPT-2 loses both sentences' first words
    assert tuple(len(sums[d]) for d in sums) == expected


def test_a_report_and_the_named_queries_read_a_decoder_relations_run(monkeypatch, capsys, tmp_path, decoders):
    treebank = tmp_path / "ud.conllu"
    treebank.write_text(CONLLU + MORE, encoding="utf-8")
    db = tmp_path / "w.duckdb"
    args = ["ingest", "relations", "--conllu", str(treebank), "--model", str(decoders["gpt2"]), "--db", str(db)]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    code, out, err = run(monkeypatch, capsys, "query", "dependency_heads", "--db", str(db), "--format", "csv")
    assert code == 0, err
    rows = out.strip().splitlines()
    header = rows[0].split(",")
    directions = Counter(line.split(",")[header.index("direction")] for line in rows[1:])
    assert set(directions) == {"dep_to_head", "head_to_dep"}
    # a determiner comes before its noun: only the noun (head → dependent) can attend it
    det = [line.split(",") for line in rows[1:] if line.split(",")[header.index("relation")] == "det"]
    assert [r[header.index("direction")] for r in det] == ["head_to_dep"]
    assert all(int(r[header.index("baseline_offset")]) < 0 for r in (line.split(",") for line in rows[1:]))
    from attnwh.reports.build import build_report

    # A report needs statistics: two examples of the bundled sample beside the relations run.
    code, _, err = run(monkeypatch, capsys, "ingest", "--model", str(decoders["gpt2"]), "--db", str(db), "--limit", "2")
    assert code == 0, err
    charts = {c.id: c.spec() for c in build_report(db).charts()}
    assert {"chart-relations-dependencies", "chart-relations-features"} <= set(charts)
    code, out, err = run(monkeypatch, capsys, "query", "head_profile", "--db", str(db), "-p", "layer=1", "-p", "head=0")
    assert code == 0 and "relations-dependencies" in out, err


def test_a_causal_word_picks_only_earlier_words():
    # Word 2 puts most weight on word 3 (impossible on a causal map, so never chosen); word 0
    # has no earlier word: -1.
    maps = torch.tensor([[0.9, 0.0, 0.0, 0.1], [0.2, 0.8, 0.0, 0.0], [0.1, 0.3, 0.1, 0.5], [0.2, 0.1, 0.6, 0.1]])
    present = torch.tensor([True, True, True, True])
    assert wordlevel.most_attended(maps, present, causal=True).tolist() == [-1, 0, 1, 2]
    assert wordlevel.most_attended(maps, present).tolist() == [3, 0, 3, 2]
    assert wordlevel.without_sink_word([0, 0, 1, None], [1, 1, 1, 0]) == [None, None, 1, None]
    assert wordlevel.without_sink_word([None, 0, 1], [1, 1, 1]) == [None, 0, 1]  # a BOS: no word to drop


def test_sentences_longer_than_a_sliding_window_are_skipped_and_counted(tmp_path):
    """A tiny Mistral's window is 5 keys: a sentence of more tokens would have rows that do not
    see their whole prefix, so it is skipped like an over-long one; a short one is measured."""
    from attnwh.ingest.model.loading import load_model
    from tiny_models import DECODER_WINDOW, make_tiny_decoder

    encoder = load_model(str(make_tiny_decoder("mistral", tmp_path / "mistral")), "cpu")
    assert wordlevel.token_limit(encoder) == DECODER_WINDOW < encoder.max_length
    short = rel.Sentence(("The", "dog"), (1, -1), ("det", "root"))
    treebank = tmp_path / "t.conllu"
    treebank.write_text(CONLLU, encoding="utf-8")
    result = rel.measure(encoder, [short, *rel.read_conllu(treebank)])
    assert (result.n_sentences, result.n_skipped) == (4, 3)
    # BOS, "The", "Ġdog": measured; the determiner precedes its noun, so only head→dep sees it
    assert result.counts.total == {"det": 1} and result.counts.visible["det"].tolist() == [0, 1]
