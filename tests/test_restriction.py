"""The streaming restriction (sinks + a window per key/value group) and the KV-cache
arithmetic. The logits and the per-sequence loss under a restriction equal an independent
attention function that masks the dropped keys before its softmax (in float64, its own
causal, window and padding masks), padded on either side; tiles equal whole maps; a
restriction that drops nothing changes nothing, bit for bit; a group's restriction changes
each of its query heads and no other."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from transformers import AttentionInterface, AutoModelForCausalLM, Gemma2Config, LlamaConfig

from attnwh.ingest.measures.restriction import (
    StreamingRestriction,
    kv_bytes_saved,
    kv_cache_bytes,
    loss_measure,
    plan,
    rank_groups,
    restricted_lm_loss,
    restriction_rows,
)
from attnwh.ingest.model import capture
from attnwh.ingest.model.loading import load_model
from helpers import SENTENCES
from tiny_models import make_tiny_decoder

LAYERS, HEADS = 2, 4
SINKS, WINDOW = 2, 4
FAMILIES = ("llama", "gpt2", "mistral")  # GQA (4 query heads on 2 groups); MHA; GQA with a window of 5


def make_lm(family: str, out: Path, positions: int = 64) -> Path:
    base = make_tiny_decoder(family, out / "base", LAYERS, HEADS, positions=positions)
    torch.manual_seed(0)
    folder = out / "lm"
    AutoModelForCausalLM.from_pretrained(base).save_pretrained(folder)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lms(tmp_path_factory) -> dict[str, Path]:
    return {f: make_lm(f, tmp_path_factory.mktemp(f"rlm-{f}")) for f in FAMILIES}


def batch_of(tokenizer, side: str, n: int = 4) -> dict[str, torch.Tensor]:
    """Texts of mixed lengths, all longer than SINKS + WINDOW, padded on `side`."""
    texts = [" ".join(SENTENCES[i : i + 1 + i % 3]) for i in range(n)]
    encoded = [tokenizer(t)["input_ids"][:30] for t in texts]
    width = max(len(ids) for ids in encoded)
    ids = torch.full((n, width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for row, seq in enumerate(encoded):
        cols = slice(0, len(seq)) if side == "right" else slice(width - len(seq), width)
        ids[row, cols] = torch.tensor(seq)
        mask[row, cols] = 1
    assert not mask.bool().all() and min(len(e) for e in encoded) > SINKS + WINDOW + 2
    return {"input_ids": ids, "attention_mask": mask}


def sets_for(groups: int) -> list[set[tuple[int, int]]]:
    return [set(), {(0, 0)}, {(1, groups - 1)}, {(0, groups - 1), (1, 0)}]


# ---------------------------------------------------------------- the independent reference

REFERENCE = "attnwh_test_streaming"
_state: dict[str, object] = {}


def reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention written out here in float64, with no mask from transformers: causal,
    window and padding masks from the 2-D attention mask, and for the restricted groups' query
    heads every key that is neither among the row's first SINKS real tokens nor within WINDOW
    of the row set to -inf before the softmax."""
    heads, kv = query.shape[1], key.shape[1]
    key = key.repeat_interleave(heads // kv, dim=1)
    value = value.repeat_interleave(heads // kv, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query.double(), key.double().transpose(2, 3)) * scaling
    n = query.shape[2]
    real = _state["key_mask"].bool()  # (B, n)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    visible = ((j <= i)[None] & real[:, None, :])[:, None].repeat(1, heads, 1, 1)  # (B, H, n, n)
    window = kwargs.get("sliding_window")
    if window:
        visible &= (i - j < window)[None, None]
    first = torch.tensor([int(torch.nonzero(row)[0]) for row in real])  # each row's first real token
    streaming = ((j[None] - first[:, None, None]) < SINKS) | ((i - j) < WINDOW)[None]  # (B, n, n)
    for group in sorted(_state["restricted"].get(module.layer_idx, ())):
        for head in range(group * heads // kv, (group + 1) * heads // kv):
            visible[:, head] &= streaming
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0)
    out = torch.matmul(probs, value.double()).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


@functools.cache
def reference_model(path: Path) -> nn.Module:
    AttentionInterface.register(REFERENCE, reference_attention)
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=REFERENCE).eval()


def reference_logits(path: Path, batch, restricted: set[tuple[int, int]], positions: bool) -> torch.Tensor:
    """The reference model's logits; `positions`: each row's real tokens at positions 0..n-1
    (position_ids from the mask), as the sequence alone would have them."""
    model = reference_model(path)
    by_layer: dict[int, set[int]] = {}
    for layer, group in restricted:
        by_layer.setdefault(layer, set()).add(group)
    _state.update(key_mask=batch["attention_mask"], restricted=by_layer)
    extra = {}
    if positions:
        extra["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(**batch, **extra, use_cache=False).logits


def reference_nats(logits: torch.Tensor, batch) -> np.ndarray:
    mask = batch["attention_mask"].bool()
    targets = mask[:, 1:] & mask[:, :-1]
    losses = nn.functional.cross_entropy(
        logits[:, :-1].double().transpose(1, 2), batch["input_ids"][:, 1:], reduction="none"
    )
    return (losses * targets).sum(-1).numpy()


def observed_logits(model: nn.Module, batch, sets, groups: int) -> torch.Tensor:
    """Logits (sets, rows, length, vocab) through the observer, every set in one pass, the
    batch as given (no rows moved)."""
    observer = StreamingRestriction(SINKS, WINDOW)
    k, rows = len(sets), batch["input_ids"].shape[0]
    observer.begin(batch["attention_mask"].bool().repeat(k, 1), restriction_rows(sets, LAYERS, groups, rows))
    repeated = {name: t.repeat(k, 1) for name, t in batch.items()}
    with torch.inference_mode(), capture.observing(observer):
        return model(**repeated, use_cache=False).logits.view(k, rows, *batch["input_ids"].shape[1:], -1)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_restriction_equals_keys_masked_before_the_softmax(lms, family, side):
    encoder = load_model(str(lms[family]), "cpu", language_model=True)
    groups = encoder.num_key_value_heads or HEADS
    assert groups == (HEADS if family == "gpt2" else HEADS // 2)
    batch = batch_of(encoder.tokenizer, side)
    sets = sets_for(groups)
    mask = batch["attention_mask"].bool()
    observed = observed_logits(encoder.model, batch, sets, groups)
    loss = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, sets_per_pass=3)
    assert loss.tokens.tolist() == (mask.sum(-1) - 1).tolist()
    for s, restricted in enumerate(sets):
        # The batch as given: both models give left-padded rows the same (shifted) positions.
        expected = reference_logits(lms[family], batch, restricted, positions=False)
        np.testing.assert_allclose(observed[s][mask], expected[mask], atol=1e-5, rtol=0, err_msg=f"{family} {s}")
        # The loss reads each sequence at positions 0..n-1, whichever side it is padded on.
        aligned = reference_logits(lms[family], batch, restricted, positions=True)
        np.testing.assert_allclose(loss.nats[s], reference_nats(aligned, batch), atol=1e-5, rtol=1e-6)
    # Every restriction moves the loss, or the comparison would prove little.
    assert (np.abs(loss.nats[1:] - loss.nats[0]).max(axis=1) > 1e-3).all()


def greedy_batch(path: Path, restricted: set[tuple[int, int]], side: str) -> dict[str, torch.Tensor]:
    """batch_of's texts cut to 8 tokens, each continued by 12 tokens the reference model
    predicts greedily under `restricted`, padded on `side`: under that set every continued
    token is the model's greedy prediction, so the hits counted are many and exact."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = batch_of(tokenizer, "right")
    rows = [ids[mask.bool()][:8].tolist() for ids, mask in zip(prompts["input_ids"], prompts["attention_mask"])]
    for _ in range(12):
        batch = {
            "input_ids": torch.tensor(rows),
            "attention_mask": torch.ones(len(rows), len(rows[0]), dtype=torch.long),
        }
        nxt = reference_logits(path, batch, restricted, positions=True)[:, -1].argmax(-1)
        rows = [row + [int(t)] for row, t in zip(rows, nxt)]
    width = len(rows[0]) + 3  # padding on every row
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    cols = slice(0, len(rows[0])) if side == "right" else slice(3, width)
    ids[:, cols], mask[:, cols] = torch.tensor(rows), 1
    return {"input_ids": ids, "attention_mask": mask}


def _record(into: list[tuple[int, int]]):
    return lambda done, of: into.append((done, of))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_prefix_cache_gives_the_whole_passes_losses_bit_for_bit(lms, family):
    """Every set that starts in layer 1 replays layer 0 from the unrestricted pass: the same
    nats and hits as running the whole model for each set, one set per pass (and within
    rounding several per pass, whose batches differ in composition)."""
    from attnwh.ingest.measures.ablation import PrefixCache

    encoder = load_model(str(lms[family]), "cpu", language_model=True)
    assert PrefixCache(encoder.model, family, LAYERS).layers is not None  # the cache is there to test
    groups = encoder.num_key_value_heads or HEADS
    sets = [*sets_for(groups), {(1, 0)}, set()]
    batch = batch_of(encoder.tokenizer, "left")
    passes: list[tuple[int, int]] = []
    naive = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, prefix_cache=False, on_pass=_record(passes))
    assert passes == [(i, len(sets)) for i in range(1, len(sets) + 1)]  # every set a whole pass, each reported
    passes.clear()
    cached = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, on_pass=_record(passes))
    restricted = sum(1 for chosen in sets if chosen)  # an empty set is the reference pass
    assert passes == [(i, restricted) for i in range(1, restricted + 1)]
    assert np.array_equal(cached.nats, naive.nats) and np.array_equal(cached.correct, naive.correct)
    several = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, sets_per_pass=3)
    np.testing.assert_allclose(several.nats, naive.nats, atol=1e-9, rtol=1e-12)
    assert not np.array_equal(naive.nats[2], naive.nats[0])  # a set from layer 1 on moves the loss


def test_greedy_hits_and_scored_spans_equal_the_masked_reference(lms):
    """The tokens the model ranks first, counted by `restricted_lm_loss` under each set, equal
    the argmax of the masked-before-softmax reference; with `scored`, the loss and the count
    cover exactly the tokens named (left-padded: the mask moves with the tokens)."""
    encoder = load_model(str(lms["llama"]), "cpu", language_model=True)
    sets = sets_for(2)
    batch = greedy_batch(lms["llama"], sets[3], "left")
    mask = batch["attention_mask"].bool()
    scored = torch.zeros_like(mask)
    first = mask.int().argmax(-1)
    for row, start in enumerate(first.tolist()):
        scored[row, start + 10 : start + 16] = True  # 6 of the greedy tokens
    whole = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, sets_per_pass=2)
    span = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, scored=scored)
    assert span.tokens.tolist() == [6] * len(first)
    for s, restricted in enumerate(sets):
        logits = reference_logits(lms["llama"], batch, restricted, positions=True)
        hits = (logits[:, :-1].argmax(-1) == batch["input_ids"][:, 1:]) & mask[:, 1:] & mask[:, :-1]
        assert whole.correct[s].tolist() == hits.sum(-1).tolist(), s
        assert span.correct[s].tolist() == (hits & scored[:, 1:]).sum(-1).tolist(), s
        losses = nn.functional.cross_entropy(
            logits[:, :-1].double().transpose(1, 2), batch["input_ids"][:, 1:], reduction="none"
        )
        np.testing.assert_allclose(span.nats[s], (losses * scored[:, 1:]).sum(-1).numpy(), atol=1e-5, rtol=1e-6)
    # Under the set the text was generated with, every continued token is a hit; not so under
    # every other set, or the comparison would prove little.
    assert (whole.correct[3] >= 12).all() and (span.correct[3] == 6).all()
    assert (whole.correct[:3] != whole.correct[3]).any()


def test_left_and_right_padding_give_the_same_loss(lms):
    encoder = load_model(str(lms["llama"]), "cpu", language_model=True)
    sets = sets_for(2)
    right = restricted_lm_loss(encoder.model, batch_of(encoder.tokenizer, "right"), sets, SINKS, WINDOW)
    left = restricted_lm_loss(encoder.model, batch_of(encoder.tokenizer, "left"), sets, SINKS, WINDOW)
    np.testing.assert_allclose(left.nats, right.nats, atol=1e-6, rtol=0)
    assert np.array_equal(left.tokens, right.tokens)


@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_tiles_equal_whole_maps(lms, family):
    encoder = load_model(str(lms[family]), "cpu", language_model=True)
    batch = batch_of(encoder.tokenizer, "left")
    sets = sets_for(2)
    whole = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, sets_per_pass=2)
    seen: list[int] = []
    tile_reader = StreamingRestriction.observe_tile

    def counting(self, module, tile, value):
        seen.append(tile.probs.shape[-2])
        return tile_reader(self, module, tile, value)

    with pytest.MonkeyPatch.context() as patch, capture.attention_memory(rows=3):
        patch.setattr(StreamingRestriction, "observe_tile", counting)
        tiled = restricted_lm_loss(encoder.model, batch, sets, SINKS, WINDOW, sets_per_pass=2)
    assert seen and max(seen) == 3  # really in tiles
    # float32 rounding only: a tile's product with the values sums over fewer keys (the
    # unrestricted model moves as much), far below what any restriction changes.
    np.testing.assert_allclose(tiled.nats, whole.nats, atol=0, rtol=1e-7)
    assert (np.abs(whole.nats[1:] - whole.nats[0]).max(axis=1) > 1e-3).all()


def test_a_restriction_that_drops_nothing_changes_nothing(lms):
    """S + W at least the longest sequence: every row keeps every key, bit for bit."""
    encoder = load_model(str(lms["llama"]), "cpu", language_model=True)
    batch = batch_of(encoder.tokenizer, "left")
    width = batch["input_ids"].shape[1]
    everything = {(layer, group) for layer in range(LAYERS) for group in range(2)}
    sets = [set(), everything]
    for sinks, window in ((SINKS, width - SINKS), (width, 1), (0, width)):
        loss = restricted_lm_loss(encoder.model, batch, sets, sinks, window, sets_per_pass=2)
        assert np.array_equal(loss.nats[1], loss.nats[0]), (sinks, window)
    # The longest sequence's last two rows drop a key (its last row predicts nothing).
    shorter = restricted_lm_loss(encoder.model, batch, sets, SINKS, width - SINKS - 2, sets_per_pass=2)
    assert not np.array_equal(shorter.nats[1], shorter.nats[0])


def test_a_group_changes_each_of_its_query_heads_and_no_other():
    """On given maps (softmax of random scores, left-padded rows, 4 query heads on 2 groups):
    the restricted group's heads become the softmax of the scores with the dropped keys at
    -inf, from the first row that drops one; the other group's heads are untouched."""
    torch.manual_seed(0)
    rows, heads, n = 3, 4, 14
    key_mask = torch.ones((rows, n), dtype=torch.bool)
    key_mask[1, :3] = False  # left padding: this row's sinks are positions 3 and 4
    key_mask[2, :9] = False  # only 5 real tokens: fewer than S + W + 1, nothing dropped
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    visible = (j <= i)[None] & key_mask[:, None, :]  # (R, n, n)
    scores = torch.randn((rows, heads, n, n), dtype=torch.float64) * 3
    additive = torch.zeros((rows, 1, n, n), dtype=torch.float64).masked_fill(~visible[:, None], float("-inf"))
    probs = torch.softmax(scores + additive, -1).nan_to_num(0.0)
    observer = StreamingRestriction(SINKS, WINDOW)
    restricted = np.zeros((1, rows, 2), dtype=bool)
    restricted[0, :, 1] = True  # group 1: query heads 2 and 3
    observer.begin(key_mask, restricted)
    out = observer.observe(nn.Module(), probs.clone(), torch.zeros((rows, heads, n, 8), dtype=torch.float64))
    assert torch.equal(out[:, :2], probs[:, :2])  # group 0 untouched, bit for bit
    first = key_mask.int().argmax(-1)
    kept = visible & (((j[None] - first[:, None, None]) < SINKS) | ((i - j) < WINDOW)[None])
    expected = torch.softmax(scores + additive.masked_fill(~kept[:, None], float("-inf")), -1).nan_to_num(0.0)
    real_rows = key_mask[:, :, None].expand(rows, n, n).any(-1)  # padding query rows are never read
    for head in (2, 3):
        torch.testing.assert_close(out[:, head][real_rows], expected[:, head][real_rows], atol=1e-12, rtol=0)
        drops = (i[None, :, 0] - first[:, None]) >= SINKS + WINDOW  # (R, n)
        changed = (out[:, head] != probs[:, head]).any(-1)
        assert torch.equal(changed, drops & key_mask), head  # from the first row that drops a key
    assert not bool(changed[2].any())


def test_ranking_and_plans_are_measured_not_summed(lms):
    """Each group alone, then the k least harmed together, each loss measured with exactly
    that set (against separate calls of the loss); k = 0 is the unrestricted model."""
    encoder = load_model(str(lms["llama"]), "cpu", language_model=True)
    batch = batch_of(encoder.tokenizer, "right")
    measure = loss_measure(encoder.model, batch, SINKS, WINDOW, sets_per_pass=3)

    def alone(chosen) -> float:
        return float(restricted_lm_loss(encoder.model, batch, [set(chosen)], SINKS, WINDOW).per_token()[0])

    ranking = rank_groups(measure, LAYERS, 2)
    assert sorted(ranking.order()) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    increases = [r.increase for r in ranking.groups]
    assert increases == sorted(increases) and ranking.baseline.increase == 0
    assert ranking.baseline.loss == pytest.approx(alone(()), rel=1e-7)
    for single in ranking.groups:
        assert single.loss == pytest.approx(alone(single.groups), rel=1e-7)
        assert single.increase == pytest.approx(single.loss - ranking.baseline.loss, abs=1e-12)
    points = plan(measure, ranking, [0, 1, 2, 4])
    assert [len(p.groups) for p in points] == [0, 1, 2, 4]
    assert points[1].groups == ranking.groups[0].groups
    assert points[0].loss == pytest.approx(ranking.baseline.loss, rel=1e-7) and abs(points[0].increase) < 1e-6
    for point in points:
        assert point.loss == pytest.approx(alone(point.groups), rel=1e-7)
        assert point.nats.shape == (4,)
    summed = ranking.baseline.loss + sum(increases)
    assert abs(points[-1].loss - summed) > 1e-4  # the groups interact: a sum would be wrong
    with pytest.raises(ValueError, match="k must be between 0 and 4"):
        plan(measure, ranking, [5])


def test_kv_cache_arithmetic():
    """Llama-3-8B's shape by hand: 32 layers, 8 KV heads of 128, bf16; 4 GiB at 32k tokens."""
    llama3 = LlamaConfig(
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_size=4096, dtype="bfloat16"
    )
    assert kv_cache_bytes(llama3, 32768) == 32 * 8 * 32768 * 2 * 128 * 2 == 4 << 30
    assert kv_cache_bytes(llama3, 32768, dtype=torch.float32) == 8 << 30
    everything = [(layer, group) for layer in range(32) for group in range(8)]
    assert kv_bytes_saved(llama3, everything, 32768) == 32 * 8 * (32768 - 4 - 64) * 2 * 128 * 2
    assert kv_bytes_saved(llama3, [(0, 0), (31, 7)], 32768, sinks=8, window=256) == 2 * (32768 - 264) * 2 * 128 * 2
    assert kv_bytes_saved(llama3, everything, 68) == 0  # nothing beyond the sinks and the window
    with pytest.raises(ValueError, match="no key/value group 8 in layer 0"):
        kv_bytes_saved(llama3, [(0, 8)], 1024)
    # A sliding-window layer (Gemma 2: even layers) caches only its window.
    gemma = Gemma2Config(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=100
    )
    assert kv_cache_bytes(gemma, 1000, "float16") == (100 + 1000) * 2 * 2 * 16 * 2
    assert kv_bytes_saved(gemma, [(0, 0), (1, 0)], 1000, dtype="float16") == (32 + 932) * 2 * 16 * 2


def test_kv_cache_of_smollm2():
    """SmolLM2-135M: 30 layers, 3 KV heads of 64 (its GGUF's config)."""
    from transformers import AutoConfig

    model = Path(__file__).parents[1] / "models" / "smollm2-135m"
    if not (model / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file():
        pytest.skip(f"no SmolLM2-135M at {model} (python tools/fetch_smollm2.py)")
    config = AutoConfig.from_pretrained(model, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    assert (config.num_hidden_layers, config.num_key_value_heads, config.hidden_size) == (30, 3, 576)
    assert kv_cache_bytes(config, 2048, "bfloat16") == 30 * 3 * 2048 * 2 * 64 * 2
    assert kv_bytes_saved(config, [(5, 1)], 2048, dtype="bfloat16") == (2048 - 68) * 2 * 64 * 2


def test_paired_tests_enumerate_the_sign_flips_of_one_and_of_two_sequences():
    """A restriction measured on one sequence (a long context on a CPU) gets p = 1: its two
    sign flips, ±d, are equally extreme; on two, the exact p is the share of the 4 flips whose
    |Σ d| reaches the observed one. The interval of one sequence is its own change."""
    from attnwh.ingest.runs.restriction import paired_tests

    one = paired_tests(np.array([10.0]), np.array([[12.0], [9.0]]), np.array([4]))
    assert [r.p_value for r in one] == [1.0, 1.0]
    assert (one[0].delta, one[0].ci_low, one[0].ci_high) == pytest.approx((0.5, 0.5, 0.5))
    d = np.array([1.0, 3.0])
    flips = [abs(a * d[0] + b * d[1]) for a in (1, -1) for b in (1, -1)]
    exact = sum(f >= abs(d.sum()) for f in flips) / len(flips)
    [two] = paired_tests(np.array([10.0, 10.0]), np.array([10.0, 10.0]) + d[None], np.array([4, 4]))
    assert two.p_value == pytest.approx(exact) and exact == 0.5
