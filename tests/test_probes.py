"""Probe inputs for head roles (`attnwh.ingest.sources.probes`): the same probes from the same
seed, exact spans, a repeat equal to its first half, the needle's payload again as the answer,
the needle where its depth asks, and the lengths asked for; with a BOS tokenizer (Llama) and
one that adds none (GPT-2)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from attnwh.errors import DataError, UsageError
from attnwh.ingest.sources import probes
from attnwh.ingest.sources.text import load_sample_text
from tiny_models import make_tiny_decoder

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tokenizer(request, tmp_path_factory):
    folder = make_tiny_decoder(request.param, tmp_path_factory.mktemp(f"probe-{request.param}"), layers=1, heads=2)
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def prose() -> list[str]:
    return [e.text_a for e in load_sample_text("prose").examples]


def test_induction_probes(tokenizer) -> None:
    made = probes.induction_probes(tokenizer, 3, 20, seed=7)
    assert made == probes.induction_probes(tokenizer, 3, 20, seed=7)
    assert made != probes.induction_probes(tokenizer, 3, 20, seed=8)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token != tokenizer.eos_token else []
    ordinary = set(probes.ordinary_ids(tokenizer).tolist())
    special = set(tokenizer.all_special_ids)
    for probe in made:
        ids = list(probe.token_ids)
        assert probe.kind == "induction" and probe.depth is None
        assert len(ids) == len(bos) + 40 and ids[: len(bos)] == bos
        first, repeat = [ids[i] for i in probe.span("first")], [ids[i] for i in probe.span("repeat")]
        assert probe.segments["first"][1] == probe.segments["repeat"][0] and probe.segments["repeat"][1] == len(ids)
        assert first == repeat and len(set(first)) == 20
        assert set(first) <= ordinary and not set(first) & special
        assert all(tokenizer.decode([t]).strip() for t in first)
    assert len({p.token_ids for p in made}) == 3  # each probe its own draw


def test_needle_probes(tokenizer, prose) -> None:
    made = probes.needle_probes(tokenizer, prose, 5, 300, DEPTHS, seed=3)
    assert made == probes.needle_probes(tokenizer, prose, 5, 300, DEPTHS, seed=3)
    assert made != probes.needle_probes(tokenizer, prose, 5, 300, DEPTHS, seed=4)
    for probe, depth in zip(made, DEPTHS):
        ids = probe.token_ids
        assert probe.kind == "needle" and probe.depth == depth and len(ids) == 300
        needle = [ids[i] for i in probe.span("needle")]
        answer = [ids[i] for i in probe.span("answer")]
        assert needle == answer and probe.segments["answer"][1] == len(ids)
        assert probe.segments["question"][1] == probe.segments["answer"][0]
        words = tokenizer.decode(needle).split()
        assert len(words) == probes.PAYLOAD_WORDS and set(words) <= set(probes.NEEDLE_WORDS)
        start, stop = probe.segments["needle_sentence"]
        assert tokenizer.decode(ids[start:stop]).strip().startswith(probes.NEEDLE_LEAD)
        # The haystack: from the first token after BOS to the question, less the needle.
        bos = 1 if ids[0] == tokenizer.bos_token_id and tokenizer.bos_token != tokenizer.eos_token else 0
        haystack = probe.segments["question"][0] - bos - (stop - start)
        assert abs((start - bos) - depth * haystack) <= max(probes.snap_tokens(haystack), 0.5)
    assert made[0].segments["needle_sentence"][0] <= 1  # depth 0: first
    assert made[-1].segments["needle_sentence"][1] == made[-1].segments["question"][0]  # depth 1: last


def test_random_probes(tokenizer) -> None:
    made = probes.random_probes(tokenizer, 3, 30, seed=7)
    assert made == probes.random_probes(tokenizer, 3, 30, seed=7)
    assert made != probes.random_probes(tokenizer, 3, 30, seed=8)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token != tokenizer.eos_token else []
    ordinary = set(probes.ordinary_ids(tokenizer).tolist())
    for probe in made:
        ids = list(probe.token_ids)
        assert probe.kind == "random" and len(ids) == 30 and ids[: len(bos)] == bos
        body = [ids[i] for i in probe.span("random")]
        assert probe.segments["random"] == (len(bos), 30) and len(set(body)) == len(body) and set(body) <= ordinary
    assert len({p.token_ids for p in made}) == 3


def test_text_probes(tokenizer, prose) -> None:
    made = probes.text_probes(tokenizer, prose, 4, 40, seed=2)
    assert made == probes.text_probes(tokenizer, prose, 4, 40, seed=2)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token != tokenizer.eos_token else []
    for probe in made:
        ids = list(probe.token_ids)
        assert probe.kind == "text" and len(ids) == 40 and ids[: len(bos)] == bos
        assert probe.segments["text"] == (len(bos), 40)
        # Natural text: the probe's words are the start of one of the documents' sentences on.
        words = tokenizer.decode(ids[len(bos) :]).split()
        assert any(" ".join(words[:5]) in " ".join(doc.split()) for doc in prose)
    with pytest.raises(DataError, match="empty"):
        probes.text_probes(tokenizer, [" "], 1, 40, 0)
    with pytest.raises(UsageError, match="at least"):
        probes.random_probes(tokenizer, 1, 1, 0)


def test_bad_probe_settings(tokenizer, prose) -> None:
    with pytest.raises(DataError, match="empty"):
        probes.needle_probes(tokenizer, ["", "  "], 1, 200, DEPTHS, 0)
    with pytest.raises(UsageError, match="depths"):
        probes.needle_probes(tokenizer, prose, 1, 200, (1.5,), 0)
    with pytest.raises(UsageError, match="no room"):
        probes.needle_probes(tokenizer, prose, 1, 20, DEPTHS, 0)
    with pytest.raises(UsageError, match="ordinary tokens"):
        probes.induction_probes(tokenizer, 1, 10**6, 0)


def test_passkey_probes(tokenizer, prose) -> None:
    made = probes.passkey_probes(tokenizer, prose, 5, 200, DEPTHS, seed=3)
    assert made == probes.passkey_probes(tokenizer, prose, 5, 200, DEPTHS, seed=3)
    assert made != probes.passkey_probes(tokenizer, prose, 5, 200, DEPTHS, seed=4)
    keys = []
    for probe, depth in zip(made, DEPTHS):
        ids = probe.token_ids
        assert probe.kind == "passkey" and probe.depth == depth and len(ids) == 200
        key = [ids[i] for i in probe.span("needle")]
        assert key == [ids[i] for i in probe.span("answer")] and probe.segments["answer"][1] == len(ids)
        digits = tokenizer.decode(key).strip()
        assert len(digits) == probes.PASSKEY_DIGITS and digits.isdigit() and digits[0] != "0"
        keys.append(digits)
        start, stop = probe.segments["needle_sentence"]
        sentence = " ".join(tokenizer.decode(ids[start:stop]).split())
        assert sentence == f"The pass key is {digits}. Remember it. {digits} is the pass key."
        question = tokenizer.decode(ids[probe.segments["question"][0] : probe.segments["answer"][0]]).strip()
        assert question == probes.PASSKEY_QUESTION
    assert len(set(keys)) == 5  # each probe its own key
    assert made[0].segments["needle_sentence"][0] <= 1 and made[-1].segments["needle_sentence"][1] == 200 - (
        made[-1].segments["answer"][1] - made[-1].segments["question"][0]
    )
    with pytest.raises(UsageError, match="no room"):
        probes.passkey_probes(tokenizer, prose, 1, 30, DEPTHS, 0)
