"""Frame links and feature words (`attnwh ingest relations --framenet / --conllu`): the
FrameNet reader in both layouts, the paper's filters, scores on hand-made word-level maps
(split words, [CLS]/[SEP]), percentiles against scipy, feature words, the command end to end."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from attnwh.ingest.measures import dependencies as rel
from attnwh.ingest.measures import features as feat
from attnwh.ingest.measures import frames as fn
from attnwh.ingest.measures import wordlevel
from conftest import SHARED_DATA
from helpers import run
from test_relations import CONLLU

# (words, LU per word, frame, FE tag per word): one block per target, as in the Open-SESAME
# conversion. Expected fate in the comment.
BLOCKS = [
    # kept: Communicator (words 0-1) is 2 from the target; Evaluee (4-6) is 1 away -> link dropped
    (
        ["The", "critic", "warmly", "praised", "the", "new", "museum", "."],
        {3: "praise.v"},
        "Judgment_communication",
        ["B-Communicator", "I-Communicator", "O", "O", "B-Evaluee", "I-Evaluee", "I-Evaluee", "O"],
    ),
    # too close: the only element is the target itself
    (
        ["The", "critic", "warmly", "praised", "the", "new", "museum", "."],
        {1: "critic.n"},
        "People_by_vocation",
        ["O", "B-Person", "O", "O", "O", "O", "O", "O"],
    ),
    # no elements
    (["The", "critic", "warmly", "praised", "the", "new", "museum", "."], {6: "museum.n"}, "Locale_by_use", ["O"] * 8),
    # sentence of 13 words
    (
        ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen"],
        {0: "one.num"},
        "Cardinal",
        ["O", "O", "B-Entity"] + ["O"] * 10,
    ),
    # element of 4 words
    (
        ["Robots", "opened", "the", "big", "new", "wing", "."],
        {1: "open.v"},
        "Opening",
        ["O", "O", "B-Theme", "I-Theme", "I-Theme", "I-Theme", "O"],
    ),
    # kept, two links, a two-word target (1-2) and a split word ("museum")
    (
        ["Robots", "quickly", "took", "over", "the", "museum", "."],
        {2: "take_over.v", 3: "take_over.v"},
        "Conquering",
        ["B-Conqueror", "O", "O", "O", "O", "B-Theme", "O"],
    ),
]


def framebert_text(blocks: list | None = None) -> str:
    lines = []
    for words, lus, frame, tags in BLOCKS if blocks is None else blocks:
        for i, (w, t) in enumerate(zip(words, tags)):
            lines.append("\t".join([str(i), w, lus.get(i, "_"), frame if i in lus else "_", t]))
        lines.append("")
    return "\n".join(lines) + "\n"


def opensesame_text() -> str:
    lines = []
    for words, lus, frame, tags in BLOCKS:
        for i, (w, t) in enumerate(zip(words, tags)):
            cells = [
                str(i + 1),
                w,
                "_",
                w.lower(),
                "nn",
                "NN",
                "0",
                "_",
                "_",
                "_",
                "_",
                "_",
                lus.get(i, "_"),
                frame if i in lus else "_",
                t,
            ]
            lines.append("\t".join(cells))
        lines.append("")
    return "\n".join(lines)


@pytest.fixture
def framenet(tmp_path) -> Path:
    path = tmp_path / "fn-tiny.conll"
    path.write_text(framebert_text(), encoding="utf-8")
    return path


@pytest.fixture
def treebank(tmp_path) -> Path:
    path = tmp_path / "tiny-ud-dev.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    return path


# ---------------------------------------------------------------- reading and filtering


def test_both_layouts_read_the_same_annotations(framenet, tmp_path):
    other = tmp_path / "fn-os.conll"
    other.write_text(opensesame_text(), encoding="utf-8")
    a, b = fn.read_framenet(framenet), fn.read_framenet(other)
    assert a == b and len(a) == len(BLOCKS)
    assert a[0].targets == (3,) and a[0].frame == "Judgment_communication"
    assert a[0].elements == (("Communicator", (0, 1)), ("Evaluee", (4, 5, 6)))
    assert a[5].targets == (2, 3) and a[5].elements == (("Conqueror", (0,)), ("Theme", (5,)))


def test_filters_follow_the_paper_and_are_counted(framenet):
    data = fn.apply_filters(fn.read_framenet(framenet))
    assert data.filters == {
        "annotations_read": 6,
        "no_elements": 1,
        "long_sentence": 1,
        "long_element": 1,
        "too_close": 1,
        "kept": 2,
    }
    assert [link.elements for link in data.links] == [((0, 1),), ((0,), (5,))]
    assert len(data.sentences) == 2 and data.links[1].targets == (2, 3)


@pytest.mark.parametrize(
    "text, message",
    [
        ("0\tThe\t_\t_\n", "4 tab-separated columns"),
        ("0\tThe\t_\t_\tO\n1\tend\tend.v\tEnd\tB-X\textra\n", "6 tab-separated columns"),
        ("0\tThe\t_\t_\tO\n2\tend\tend.v\tEnd\tO\n", "count up"),
        ("0\tThe\t_\t_\tO\n1\tend\t_\t_\tB-X\n", "one target"),
        ("0\tThe\tthe.art\tX\tQ-Y\n", "not O, B-Name or I-Name"),
        ("\n\n", "no FrameNet annotations"),
    ],
)
def test_malformed_files_are_one_line_errors(tmp_path, text, message):
    from attnwh.errors import DataError

    path = tmp_path / "bad.conll"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message) as info:
        fn.read_framenet(path)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- scores


def test_link_score_with_split_words_and_special_tokens():
    # [CLS] Robots took over mu ##seum . [SEP]: the element "museum" is split in two pieces;
    # [CLS] takes most of every row and must never count.
    word_ids = [None, 0, 1, 2, 3, 3, 4, None]
    a = torch.full((8, 8), 0.02)
    a[:, 0] = 0.6
    a[2, 4], a[2, 5] = 0.10, 0.14  # "took" -> museum: 0.24 (to a split word: the sum)
    a[3, 4], a[3, 5] = 0.01, 0.03  # "over" -> museum: 0.04
    a[4, 2], a[5, 2] = 0.30, 0.10  # museum -> "took": mean over its pieces 0.20
    a[1, 2] = 0.5  # "Robots" -> "took": 0.5
    a[2, 1] = 0.05  # "took" -> "Robots"
    a = a / a.sum(-1, keepdim=True)
    words = wordlevel.word_attention(a, wordlevel.piece_matrix(word_ids, 5))
    links = fn.FrameLinks(0, "Conquering", (1, 2), ((0,), (3,)))
    counts = fn.FrameCounts(layers=1, heads=1)
    assert counts.add(words[None, None], links, np.ones(5, dtype=bool))
    pairs = [(1, 0), (2, 0), (1, 3), (2, 3)]
    forward = max(float(words[t, e]) for t, e in pairs)
    backward = max(float(words[e, t]) for t, e in pairs)
    np.testing.assert_allclose(counts.means()[:, 0, 0], [forward, backward, max(forward, backward)], rtol=1e-6)
    # by hand: row sums differ, so compare the normalised pieces
    took_to_museum = float(a[2, 4] + a[2, 5])
    robots_to_took = float(a[1, 2])
    museum_to_took = float((a[4, 2] + a[5, 2]) / 2)
    assert forward == pytest.approx(max(took_to_museum, float(a[2, 1])), rel=1e-6)
    assert backward == pytest.approx(max(robots_to_took, museum_to_took), rel=1e-6)
    # a link whose words have no pieces is not measured
    assert not counts.add(words[None, None], links, np.array([False, False, False, False, True]))
    assert counts.n == 1


def test_mean_over_annotations_and_percentiles():
    counts = fn.FrameCounts(layers=2, heads=2)
    # two annotations of a 4-word sentence: target 0, element 2 (and 3 in the second)
    for elements, value in ((((2,),), 0.2), (((2,), (3,)), 0.6)):
        maps = np.zeros((2, 2, 4, 4))
        maps[1, 0, 0, 2] = value  # head 1-0: target -> element
        maps[0, 1, 3, 0] = 0.4  # head 0-1: element 3 -> target (second annotation only)
        maps[0, 0, :, :] = 0.1
        counts.add(maps, fn.FrameLinks(0, "F", (0,), elements), np.ones(4, dtype=bool))
    means = counts.means()
    assert means[0, 1, 0] == pytest.approx(0.4) and means[0, 0, 0] == pytest.approx(0.1)
    assert means[1, 0, 1] == pytest.approx(0.2)  # 0 then 0.4
    assert means[2, 1, 0] == pytest.approx(0.4) and means[2, 0, 1] == pytest.approx(0.2)
    rows = counts.rows()
    either = [
        (l, h, p, r)
        for d, l, h, p, r in zip(rows["direction"], rows["layer"], rows["head"], rows["percentile"], rows["rank"])
        if d == "either"
    ]
    assert either[2] == (1, 0, 100.0, 1)
    assert counts.top("either", 1) == [(1, 0, pytest.approx(0.4), 100.0)]


def test_percentiles_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    scores = np.round(rng.random((6, 12)), 2)  # ties included
    scores[0, :3] = scores[1, 0]
    expected = np.array([stats.percentileofscore(scores.ravel(), x, kind="weak") for x in scores.ravel()])
    np.testing.assert_allclose(fn.percentiles(scores).ravel(), expected)


# ---------------------------------------------------------------- feature words


def test_feature_words_from_conllu(treebank):
    sentences = rel.read_conllu(treebank)
    assert sentences[2].upos == ("PRON", "VERB", "DET", "NOUN", "PUNCT")
    found = [feat.feature_words(s.words, s.upos, s.relations) for s in sentences]
    assert found[0] == {"noun": [3], "verb": [4], "pronoun": [], "subject": [3], "object": [], "negation": []}
    assert found[1]["noun"] == [1, 5] and found[1]["object"] == [5] and found[1]["subject"] == [1]
    assert found[2] == {"noun": [3], "verb": [1], "pronoun": [0], "subject": [0], "object": [3], "negation": [0]}
    assert len(feat.NEGATION_WORDS) == 17 and "n't" in feat.NEGATION_WORDS


def test_feature_scores_take_the_best_word_and_skip_sentences_without_it():
    # [CLS] The mu ##seum opened [SEP]: words The, museum (2 pieces), opened; 6 tokens.
    word_ids = [None, 0, 1, 1, 2, None]
    a = torch.full((6, 6), 0.05)
    a[:, 0] = 0.5
    a[:, 2] += 0.1  # every row looks at the first piece of "museum"
    a = a / a.sum(-1, keepdim=True)
    pieces = wordlevel.piece_matrix(word_ids, 3)
    words = wordlevel.word_attention(a, pieces)
    present = pieces.sum(0) > 0
    received, uniform = feat.received_attention(
        words[None, None, None], present[None], torch.tensor([6.0]), pieces.sum(0)[None]
    )
    np.testing.assert_allclose(received[0, 0, 0], words.mean(0).numpy(), rtol=1e-6)  # mean over the 3 words
    np.testing.assert_allclose(uniform[0], [1 / 6, 2 / 6, 1 / 6])
    counts = feat.FeatureCounts(layers=1, heads=1)
    counts.add({"noun": [1], "verb": [2], "negation": []}, received[0], uniform[0], present.numpy())
    counts.add({"noun": [0, 1], "verb": []}, received[0] * 0 + 0.5, uniform[0], present.numpy())
    museum = float(words[:, 1].mean())
    assert counts.n_sentences == {"noun": 2, "verb": 1} and counts.n_words == {"noun": 3, "verb": 1}
    assert counts.mean("noun")[0, 0] == pytest.approx((museum + 0.5) / 2, rel=1e-6)
    rows = counts.rows()
    assert rows["feature"] == ["noun", "verb"]
    assert rows["per_word_attention"][0] == pytest.approx((museum + 1.0) / 3, rel=1e-6)
    assert rows["uniform_attention"][0] == pytest.approx((2 / 6 + 2 / 6) / 2)
    assert rows["uniform_per_word"][1] == pytest.approx(1 / 6)


# ---------------------------------------------------------------- the command


def test_frames_match_eager_attention_on_a_tiny_model(tiny_model_dir, framenet):
    """The whole pipeline (tokenizer alignment, registered attention, word level) against
    word-level maps computed by hand from `output_attentions=True` on the eager path."""
    from transformers import AutoModel

    from attnwh.ingest.model.loading import load_model

    folder = tiny_model_dir("bert")
    encoder = load_model(str(folder), "cpu")
    data = fn.apply_filters(fn.read_framenet(framenet))
    result = fn.measure_frames(encoder, data, batch_size=1)
    assert (result.n_annotations, result.n_skipped, result.counts.n) == (2, 0, 2)
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    expected = np.zeros((3, encoder.num_layers, encoder.num_heads))
    split = False
    for link in data.links:
        words = data.sentences[link.sentence]
        enc = encoder.tokenizer([list(words)], is_split_into_words=True, return_tensors="pt")
        split |= len(enc["input_ids"][0]) > len(words) + 2
        with torch.no_grad():
            maps = torch.stack(eager(**enc, output_attentions=True).attentions, 1)[0]  # (L, H, S, S)
        w = wordlevel.word_attention(maps, wordlevel.piece_matrix(enc.word_ids(0), len(words))).numpy()
        pairs = [(t, e) for span in link.elements for t in link.targets for e in span]
        fwd = np.max([w[:, :, t, e] for t, e in pairs], 0)
        bwd = np.max([w[:, :, e, t] for t, e in pairs], 0)
        expected += np.stack([fwd, bwd, np.maximum(fwd, bwd)])
    assert split, "the fixture should contain a word split into pieces"
    np.testing.assert_allclose(result.counts.means(), expected / 2, atol=1e-5)


def test_relations_command_with_frames_and_features(monkeypatch, capsys, tiny_model_dir, treebank, framenet, tmp_path):
    db = tmp_path / "w.duckdb"
    args = [
        "ingest",
        "relations",
        "--conllu",
        str(treebank),
        "--framenet",
        str(framenet),
        "--model",
        str(tiny_model_dir("bert")),
        "--db",
        str(db),
        "--batch-size",
        "2",
    ]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "percentile" in out and "negation" in out and "2 annotations" in out
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT task, dataset, status, n_examples FROM runs ORDER BY run_id").fetchall()
        assert runs == [
            ("dependencies", "tiny-ud-dev.conllu", "complete", 3),
            ("frames", "fn-tiny.conll", "complete", 2),
        ]
        assert con.execute("SELECT count(*), min(n_annotations), max(percentile) FROM frame_heads").fetchall() == [
            (3 * 2 * 4, 2, 100.0)
        ]
        assert con.execute("SELECT annotations_read, kept, sentences, measured FROM frame_filters").fetchall() == [
            (6, 2, 2, 2)
        ]
        features = dict(con.execute("SELECT feature, max(n_sentences) FROM feature_attention GROUP BY ALL").fetchall())
        assert features == {"noun": 3, "verb": 3, "pronoun": 1, "subject": 3, "object": 2, "negation": 1}
    code, out, err = run(monkeypatch, capsys, "query", "frame_heads", "--db", str(db), "--format", "csv")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 3 * 8
    code, out, err = run(
        monkeypatch, capsys, "query", "feature_attention", "--db", str(db), "-p", "feature=negation", "--format", "csv"
    )
    assert code == 0 and len(out.strip().splitlines()) == 1 + 8
    # rerun: both kept; --replace redoes both, without leftovers
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0 and out.count("already complete") == 2
    code, out, err = run(monkeypatch, capsys, *args, "--replace")
    assert code == 0 and "replaced" in out
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] == 2
        for table in ("frame_heads", "frame_filters", "feature_attention", "dependency_heads"):
            assert con.execute(f"SELECT count(DISTINCT run_id) FROM {table}").fetchall()[0][0] == 1, table
        assert con.execute("SELECT count(*) FROM frame_heads").fetchall()[0][0] == 3 * 2 * 4


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "give --conllu FILE, --framenet FILE or both"),
        (["--framenet", "{tmp}/none.conll"], "does not exist"),
        (["--framenet", "{tmp}/bad.conll"], "tab-separated columns"),
        (["--framenet", "{tmp}/filtered.conll"], "no annotation passes the filters"),
        (["--conllu", "{tmp}/ok.conllu", "--framenet", "{tmp}/none.conll"], "none.conll"),
    ],
)
def test_bad_input_is_one_line_and_leaves_the_database_alone(monkeypatch, capsys, tmp_path, extra, message):
    (tmp_path / "bad.conll").write_text("0\tThe\t_\n", encoding="utf-8")
    (tmp_path / "ok.conllu").write_text(CONLLU, encoding="utf-8")
    blocks = framebert_text().split("\n\n")
    (tmp_path / "filtered.conll").write_text("\n\n".join(blocks[1:5]) + "\n", encoding="utf-8")
    db = tmp_path / "w.duckdb"
    args = [a.format(tmp=tmp_path) for a in extra]
    code, out, err = run(monkeypatch, capsys, "ingest", "relations", *args, "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert "Traceback" not in err and not db.exists()


@pytest.mark.skipif(not (SHARED_DATA / "framenet").is_dir(), reason="shared data absent")
def test_bundled_minilm_on_shared_data(monkeypatch, capsys, tmp_path):
    db = tmp_path / "w.duckdb"
    code, out, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "relations",
        "--conllu",
        str(SHARED_DATA / "ud" / "en_ewt-ud-dev.conllu"),
        "--framenet",
        str(SHARED_DATA / "framenet" / "fn1.7.dev.opensesame.conll"),
        "--limit",
        "12",
        "--db",
        str(db),
    )
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM frame_heads").fetchall()[0][0] == 3 * 6 * 12
        filters = con.execute("SELECT annotations_read, kept, measured FROM frame_filters").fetchall()[0]
        assert filters[0] == 2272 and 12 < filters[1] < 2272 and filters[2] == 12
        assert con.execute("SELECT count(DISTINCT feature) FROM feature_attention").fetchall()[0][0] >= 5
        assert con.execute("SELECT min(mean_attention) > 0 FROM feature_attention").fetchall()[0][0]
