"""Decoders (causal language models): every family's statistics equal those recomputed
independently from HF's eager ``output_attentions=True`` maps, one example at a time on its
unpadded tokens, whether attnwh batches it with others (right-padded, whatever the
tokenizer's padding side), alone, or in tiles of any height; with grouped-query attention,
sliding windows shorter than the inputs (crossing tile edges) and Gemma 2's soft-capping on.

The reference reads each family's own modules (value projection, W_O) and repeats the
key/value heads for their query heads as transformers' ``repeat_kv`` does; the first token
is the sink candidate in [CLS]'s place, there is no [SEP], and to_sep, to_next and
norm_to_sep are NaN in the array (NULL in the warehouse).
"""

from __future__ import annotations

import time
import unicodedata
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

from attnwh.errors import ModelError
from attnwh.ingest.measures import patterns
from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS
from attnwh.ingest.model import capture
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs.loop import StatisticsCapture
from attnwh.ingest.runs.rows import CAUSAL_NULL_COLUMNS
from attnwh.ingest.sources.files import load_sample
from helpers import run
from test_statistics import assert_matches_reference, layer_rows, task
from tiny_models import BOS_FAMILIES, CORPUS, DECODER_FAMILIES, DECODER_WINDOW, make_tiny_decoder

LAYERS, HEADS = 2, 4
MAX_LENGTH = 40
LONG = 600  # Gemma 3 270M's long sequences: past its 512-token sliding window
NULL = [OBSERVED_COLUMNS.index(c) for c in CAUSAL_NULL_COLUMNS]


@pytest.fixture(scope="module")
def decoders(tmp_path_factory) -> dict[str, Path]:
    started = time.perf_counter()
    made = {f: make_tiny_decoder(f, tmp_path_factory.mktemp(f"dec-{f}"), LAYERS, HEADS) for f in DECODER_FAMILIES}
    print(f"\n{len(made)} tiny decoders built in {time.perf_counter() - started:.2f} s")
    return made


# ---------------------------------------------------------------- the independent reference


def values_and_output(model: nn.Module) -> list[tuple[nn.Module, Any, torch.Tensor]]:
    """Per layer of an eager decoder: the module whose output holds the values, how to take
    them from it ((1, n, H_kv * d) from its output), and W_O as (hidden, H * d)."""
    base: Any = model.base_model
    if model.config.model_type == "gpt2":
        hidden = model.config.hidden_size
        return [(b.attn.c_attn, lambda out: out[..., 2 * hidden :], b.attn.c_proj.weight.detach().T) for b in base.h]
    if model.config.model_type == "phi3":  # fused Q, K, V: the values come last
        kv = model.config.num_key_value_heads * (model.config.hidden_size // model.config.num_attention_heads)
        return [
            (l.self_attn.qkv_proj, lambda out: out[..., -kv:], l.self_attn.o_proj.weight.detach()) for l in base.layers
        ]
    return [(l.self_attn.v_proj, lambda out: out, l.self_attn.o_proj.weight.detach()) for l in base.layers]


def is_punct(token: str) -> bool:
    """Unicode punctuation once the word-piece markers are gone: GPT-2's Ġ and SentencePiece's ▁
    (Gemma's "▁(" is a parenthesis after a space)."""
    text = token.replace("Ġ", "").replace("▁", "").strip()
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def decoder_reference(model: nn.Module, tokenizer, ids: list[int]) -> np.ndarray:
    """(layer, head, column) for one unpadded example from the eager model's
    output_attentions maps and its own value projections and W_O."""
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones((1, len(ids)), dtype=torch.long)}
    return decoder_references(model, tokenizer, batch)[0]


def decoder_references(model: nn.Module, tokenizer, batch: dict[str, torch.Tensor]) -> list[np.ndarray]:
    """Per row of a padded batch (either side), (layer, head, column) from the eager model's
    output_attentions maps of that very batch, read on the row's real tokens: its first real
    token is the sink candidate, its padding is neither a query nor a key."""
    parts = values_and_output(model)
    values: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda m, a, out, take=take: values.append(take(out))) for m, take, _ in parts]
    try:
        with torch.no_grad():
            out = model(**batch, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(out.attentions) == len(values) == model.config.num_hidden_layers
    special = set(tokenizer.all_special_ids)
    references = []
    for row, mask in enumerate(batch["attention_mask"].bool()):
        real = torch.nonzero(mask).flatten()
        ids = batch["input_ids"][row, real].tolist()
        n = len(ids)
        cls = np.zeros(n)
        cls[0] = 1  # the first real token: BOS where the tokenizer adds one
        sep = np.zeros(n)
        punct = np.array(
            [is_punct(t) and i not in special for t, i in zip(tokenizer.convert_ids_to_tokens(ids), ids)], float
        )
        result = []
        for maps, v, (_, _, wo) in zip(out.attentions, values, parts):
            a = maps[row][:, real][:, :, real].double().numpy()  # (H, n, n)
            heads = a.shape[0]
            v = v[row, real].double()  # (n, H_kv * d)
            d = wo.shape[1] // heads
            kv = v.shape[1] // d
            v = v.view(n, kv, d).repeat_interleave(heads // kv, dim=1).reshape(n, heads * d)  # repeat_kv
            result.append(layer_rows(a, v.numpy(), wo.double().numpy(), cls, sep, punct))
        expected = np.array(result)
        expected[..., NULL] = np.nan
        references.append(expected)
    return references


def largest_difference(actual: np.ndarray, expected: np.ndarray) -> float:
    """The largest difference in any measured column; a column NaN in both (to_learned_sink
    without a learned sink) is left out, not allowed to make the answer NaN (which max() of a
    running worst would then skip, printing 0)."""
    compared = [i for i in range(len(OBSERVED_COLUMNS) - 2) if i not in NULL]  # not the type and margin
    return float(np.nanmax(np.abs(actual[..., compared] - expected[..., compared])))


def check_example(family: str, actual: np.ndarray, expected: np.ndarray, message: str) -> None:
    assert np.isnan(actual[..., NULL]).all(), message
    assert_matches_reference(actual, expected, err_msg=message)


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("family", DECODER_FAMILIES)
@pytest.mark.parametrize("pair", [False, True])
def test_statistics_match_eager_output_attentions(decoders, family, pair):
    """A right-padded batch of mixed lengths and each example alone, whole and in tiles of
    3, 7 and 16 rows (tile edges inside the sliding window), against the reference."""
    path = decoders[family]
    encoder = load_model(str(path), device="cpu")
    assert encoder.causal and encoder.family == family
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    data = task(pair)
    encoded = encode_task(encoder.tokenizer, data, MAX_LENGTH)
    stats = StatisticsCapture(encoder)
    everything = list(range(len(data.examples)))
    batch = collate(encoded, everything, encoder.tokenizer.pad_token_id, encoder.device)
    assert not batch["attention_mask"].bool().all()  # padded
    assert max(len(ids) for ids in encoded.input_ids) > 2 * DECODER_WINDOW  # the window is narrower than the inputs
    batched = stats.run(batch)
    assert batched.shape == (len(everything), LAYERS, HEADS, len(OBSERVED_COLUMNS))
    tiled = {}
    for rows in (3, 7, 16):
        with capture.attention_memory(rows=rows):
            tiled[rows] = stats.run(batch)
    for i in everything:
        ids = encoded.input_ids[i].tolist()
        assert (ids[0] == encoder.tokenizer.bos_token_id) == (family in BOS_FAMILIES)
        expected = decoder_reference(eager, encoder.tokenizer, ids)
        check_example(family, batched[i], expected, f"{family} example {i}")
        alone = stats.run(collate(encoded, [i], encoder.tokenizer.pad_token_id, encoder.device))
        check_example(family, alone[0], expected, f"{family} example {i} alone")
        for rows, values in tiled.items():
            check_example(family, values[i], expected, f"{family} example {i} in tiles of {rows} rows")
    # The statistics vary between heads and examples, or the comparison would prove little.
    assert batched[..., OBSERVED_COLUMNS.index("to_cls")].std() > 1e-3
    assert batched[..., OBSERVED_COLUMNS.index("norm_to_cls")].std() > 1e-3
    assert batched[..., OBSERVED_COLUMNS.index("to_punct")].max() > 0
    assert batched[..., OBSERVED_COLUMNS.index("to_prev")].std() > 1e-3


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2"])
def test_long_inputs_in_tiles_of_whole_row_blocks_are_bit_identical(tmp_path, family):
    """An input of 150 tokens in tiles of 16, 48 and 112 rows (whole blocks of
    `tiles.ROW_BLOCK` rows, as budgets give them): the same float32 value of every column (the
    key-side pattern features to the last bit or two), and the reference's within 1e-5; Mistral and Gemma 2 with sliding windows of 5 keys
    across every tile edge, Gemma 2 soft-capped, all with grouped-query attention."""
    path = make_tiny_decoder(family, tmp_path / family, LAYERS, HEADS, positions=160)
    encoder = load_model(str(path), device="cpu")
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    text = " ".join(dict.fromkeys(CORPUS))
    ids = encoder.tokenizer(text, truncation=True, max_length=150)["input_ids"]
    assert len(ids) == 150
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    stats = StatisticsCapture(encoder)
    cells: dict[int, int] = {}
    observe_tile = stats.observer.observe_tile

    def counted(module, tile, value):  # the cells of each tile handed to the observer
        cells[rows] = cells.get(rows, 0) + tile.probs.shape[-2] * tile.probs.shape[-1]
        return observe_tile(module, tile, value)

    stats.observer.observe_tile = counted  # type: ignore[method-assign]
    runs = {}
    for rows in (16, 48, 112):
        with capture.attention_memory(rows=rows):
            runs[rows] = stats.run(batch)
    # Causal tiles hold only the keys their rows see: about half the cells of the whole maps
    # (n(n + 1) / 2 and each tile's rows up to its end), a sliding window fewer still.
    n = len(ids)
    share = cells[16] / (LAYERS * n * n)
    print(f"\n{family}: tiles of 16 rows hold {share:.3f} of the whole maps' cells")
    assert share <= 0.5 + 16 / n
    # Every row-side value is bit-identical. The key-side sums (the mass each key column
    # receives: the pattern features) add the same blocks of rows in the same order, but each
    # block is a float32 matrix product whose grouping of terms can follow the tile's width on
    # some CPUs (seen on an AMD EPYC): there, a last-bit difference, nothing more.
    key_side = [OBSERVED_COLUMNS.index(c) for c in (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS)]
    for rows, values in runs.items():
        differ = (values != runs[16]) & ~(np.isnan(values) & np.isnan(runs[16]))
        assert set(np.nonzero(differ)[-1].tolist()) <= set(key_side), f"tiles of {rows} rows"
        np.testing.assert_array_max_ulp(values[differ], runs[16][differ], maxulp=2)
    check_example(family, runs[16][0], decoder_reference(eager, encoder.tokenizer, ids), f"{family}, 150 tokens")


# ---------------------------------------------------------------- padding side, loading facts


def test_a_left_padding_tokenizer_gives_the_same_statistics(decoders, tmp_path):
    """attnwh right-pads whatever the tokenizer says, so real tokens keep positions 0..n-1:
    a copy of the model whose tokenizer pads on the left stores the same statistics."""
    path = decoders["llama"]
    left = tmp_path / "left"
    AutoModel.from_pretrained(path).save_pretrained(left)
    AutoTokenizer.from_pretrained(path, padding_side="left").save_pretrained(left)
    assert AutoTokenizer.from_pretrained(left).padding_side == "left"
    results = []
    for folder in (path, left):
        encoder = load_model(str(folder), device="cpu")
        encoded = encode_task(encoder.tokenizer, task(True), MAX_LENGTH)
        batch = collate(encoded, [0, 1, 2], encoder.tokenizer.pad_token_id, encoder.device)
        assert not batch["attention_mask"][:, 0].eq(0).any()  # right-padded: the first token is real
        results.append(StatisticsCapture(encoder).run(batch))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2"])
def test_a_left_padded_batch_matches_eager_output_attentions_of_that_batch(decoders, family):
    """A batch padded on the left, given to the capture as it is (the Python API takes any
    batch): each row's statistics equal those of the eager maps of the same batch, read on its
    real tokens, its first real token the sink candidate."""
    path = decoders[family]
    encoder = load_model(str(path), device="cpu")
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    encoded = encode_task(encoder.tokenizer, task(True), MAX_LENGTH)
    right = collate(encoded, [0, 1, 2], encoder.tokenizer.pad_token_id, encoder.device)
    lengths = right["attention_mask"].sum(-1)
    width = int(lengths.max())
    left = {k: torch.zeros_like(v) for k, v in right.items()}
    for row, n in enumerate(lengths.tolist()):
        for key in left:
            left[key][row, width - n :] = right[key][row, :n]
        left["input_ids"][row, : width - n] = encoder.tokenizer.pad_token_id
    assert left["attention_mask"][:, 0].eq(0).any()  # padded on the left
    found = StatisticsCapture(encoder).run(left)
    for row, expected in enumerate(decoder_references(eager, encoder.tokenizer, left)):
        check_example(family, found[row], expected, f"{family} row {row}, left-padded")


def test_loaded_decoders_record_their_attention_facts(decoders):
    facts = {f: load_model(str(decoders[f]), device="cpu").facts() for f in ("gpt2", "qwen2", "mistral", "gemma2")}
    assert [facts[f]["causal"] for f in facts] == [True] * 4
    assert {f: facts[f]["num_key_value_heads"] for f in facts} == {"gpt2": 4, "qwen2": 1, "mistral": 2, "gemma2": 2}
    assert facts["mistral"]["sliding_window"] == DECODER_WINDOW and facts["mistral"]["sliding_layers"] == [0, 1]
    assert facts["gemma2"]["sliding_layers"] == [0]  # layer 1 is global
    assert facts["gpt2"]["sliding_window"] is None
    gpt2 = load_model(str(decoders["gpt2"]), device="cpu")
    assert gpt2.tokenizer.pad_token == gpt2.tokenizer.eos_token  # GPT-2 has no padding token of its own


def test_soft_capping_and_key_value_groups_change_the_statistics(decoders):
    """The parity above would hold trivially if soft-capping did nothing or every key/value
    head were the same: without the cap Gemma 2's statistics move, and Qwen2's four query
    heads, which share one key/value head, still differ."""
    encoder = load_model(str(decoders["gemma2"]), device="cpu")
    encoded = encode_task(encoder.tokenizer, task(False), MAX_LENGTH)
    batch = collate(encoded, [0, 2], encoder.tokenizer.pad_token_id, encoder.device)
    capped = StatisticsCapture(encoder).run(batch)
    for layer in encoder.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    uncapped = StatisticsCapture(encoder).run(batch)
    assert np.nanmax(np.abs(capped - uncapped)) > 1e-3
    qwen = load_model(str(decoders["qwen2"]), device="cpu")
    stats = StatisticsCapture(qwen).run(
        collate(encode_task(qwen.tokenizer, task(False), MAX_LENGTH), [0], 0, qwen.device)
    )
    assert qwen.num_key_value_heads == 1 and stats[0, :, :, OBSERVED_COLUMNS.index("entropy")].std(axis=-1).min() > 1e-3


@pytest.mark.parametrize("form", ["per head", "per row"])
@pytest.mark.parametrize("rows", [None, 2])
def test_learned_sink_logits_take_their_share_of_each_row_as_eager_does(form, rows):
    """A learned sink logit joins each row's softmax (gpt-oss: one per head, `s_aux`; Inkling 2:
    one per head and row, `sinks`): the token weights and the output equal the family's own
    eager attention's, whole or in tiles of `rows` query rows, masked causally."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as per_head
    from transformers.models.inkling2.modeling_inkling2 import eager_attention_forward as per_row

    torch.manual_seed(0)
    module: Any = nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    q, k, v = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    mask = torch.full((6, 6), float("-inf")).triu(1)[None, None]
    if form == "per head":
        module.sinks = torch.randn(4)
        kwargs = {"s_aux": module.sinks}
        expected, weights = per_head(module, q, k, v, mask, 0.35)
    else:
        kwargs = {"sinks": torch.randn(1, 4, 6, 1)}
        expected, weights = per_row(module, q, k, v, mask, 0.35, sinks=kwargs["sinks"])
    assert (weights.sum(-1) < 1 - 1e-3).any()  # the sink takes a visible share
    keep = capture.KeepMaps()
    with capture.attention_memory(rows=rows), capture.observing(keep):
        output, _ = capture.attnwh_attention(module, q, k, v, mask, 0.35, **kwargs)
    torch.testing.assert_close(output, expected, atol=1e-6, rtol=0)
    if rows is None:  # KeepMaps reads whole maps
        torch.testing.assert_close(keep.maps[0], weights, atol=1e-6, rtol=0)


def test_restricting_and_disabling_a_head_with_a_learned_sink():
    """Restricting a key/value group to S sinks and a window of W keeps the sink's logit in the
    softmax: the family's own eager attention with the dropped keys masked. Disabling a head
    (uniform) gives the sink no share: the head outputs the mean of the values its row sees."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    from attnwh.ingest.measures.ablation import HeadDisabler
    from attnwh.ingest.measures.restriction import StreamingRestriction

    torch.manual_seed(1)
    n, sinks, window = 12, 1, 3
    module: Any = nn.Module()
    module.num_key_value_groups, module.is_causal, module.sinks = 2, True, torch.randn(4)
    q, k, v = torch.randn(1, 4, n, 8), torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8)
    causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
    key_mask = torch.ones(1, n, dtype=torch.bool)

    restriction = StreamingRestriction(sinks, window)
    restriction.begin(key_mask, np.array([[[True, False]]]))  # group 0 (heads 0 and 1) restricted
    with capture.observing(restriction):
        restricted, _ = capture.attnwh_attention(module, q, k, v, causal, 0.35, s_aux=module.sinks)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    dropped = (j >= sinks) & (i - j >= window)
    mask = causal.repeat(1, 4, 1, 1)
    mask[:, :2] = mask[:, :2].masked_fill(dropped, float("-inf"))
    expected, _ = eager_attention_forward(module, q, k, v, mask, 0.35)
    torch.testing.assert_close(restricted, expected, atol=1e-6, rtol=0)

    disabler = HeadDisabler("uniform")
    disabler.begin(key_mask, np.array([[[False, True, False, False]]]))
    with capture.observing(disabler):
        disabled, _ = capture.attnwh_attention(module, q, k, v, causal, 0.35, s_aux=module.sinks)
    plain, _ = eager_attention_forward(module, q, k, v, causal, 0.35)
    means = v[0, 0].cumsum(0) / torch.arange(1, n + 1)[:, None]  # head 1 reads group 0
    torch.testing.assert_close(disabled[0, :, 1], means, atol=1e-6, rtol=0)
    torch.testing.assert_close(disabled[:, :, [0, 2, 3]], plain[:, :, [0, 2, 3]], atol=1e-6, rtol=0)


# ---------------------------------------------------------------- the command line


def test_ingest_writes_decoder_rows_with_null_sep_and_next(monkeypatch, capsys, decoders, tmp_path):
    """`attnwh ingest --model <tiny decoder>` on the bundled sample: NULL to_sep, norm_to_sep
    and to_next, the first-token share filled, the model's key/value heads and groups."""
    db = tmp_path / "w.duckdb"
    code, _, err = run(
        monkeypatch, capsys, "ingest", "--model", str(decoders["mistral"]), "--db", str(db), "--limit", "6"
    )
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        rows, nulls, cls = con.execute(
            "SELECT count(*), count(*) FILTER (to_sep IS NULL AND norm_to_sep IS NULL AND to_next IS NULL),"
            " min(to_cls) FROM head_stats"
        ).fetchone()
        assert rows == 2 * 6 * LAYERS * HEADS and nulls == rows and 0 < cls <= 1
        assert con.execute("SELECT count(*) FROM head_stats WHERE isnan(to_cls) OR to_prev IS NULL").fetchone() == (0,)
        assert con.execute("SELECT causal, num_key_value_heads, sliding_window FROM models").fetchall() == [
            (True, 2, DECODER_WINDOW)
        ]
        groups = con.execute("SELECT head, kv_group FROM head_groups ORDER BY head").fetchall()
        assert groups == [(0, 0), (1, 0), (2, 1), (3, 1)]
        assert con.execute("SELECT count(*) FROM layer_mixing").fetchone() == (0,)  # pre-LN: no post-LN mixing
        assert con.execute("SELECT count(*) FROM massive_activations WHERE position = 0").fetchone()[0] > 0


def test_refused_family_gives_one_line(monkeypatch, capsys, tmp_path):
    from tiny_models import make_unreadable_decoder

    code, _, err = run(
        monkeypatch,
        capsys,
        "ingest",
        "--model",
        str(make_unreadable_decoder(tmp_path / "oss")),
        "--db",
        str(tmp_path / "w.duckdb"),
    )
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and "outside transformers' attention interface (BloomAttention)" in lines[0], (
        err
    )
    assert not (tmp_path / "w.duckdb").exists()


def test_the_check_at_load_refuses_maps_that_are_not_per_query_head(decoders, monkeypatch):
    """Were the key/value heads not expanded per query head (grouped-query attention read
    wrongly), loading would fail in one line rather than store statistics of the groups."""
    monkeypatch.setattr(capture, "_per_query_head", lambda states, heads: states)
    with pytest.raises(ModelError, match="not attention per query head"):
        load_model(str(decoders["qwen2"]), device="cpu")


# ---------------------------------------------------------------- a real decoder


@pytest.mark.slow
def test_smollm2_statistics_match_eager_output_attentions():
    """SmolLM2-135M-Instruct (GGUF, dequantised; 30 layers of 9 query heads on 3 key/value
    heads): ten sequences of the bundled prose sample, in one right-padded batch, against the
    eager model's output_attentions one sequence at a time."""
    from test_gguf import SMOLLM2_DIR, SMOLLM2_FILE, smollm2_eager

    path = SMOLLM2_DIR / SMOLLM2_FILE
    if not path.is_file():
        pytest.skip(f"no SmolLM2-135M at {path} (python tools/fetch_smollm2.py)")
    encoder = load_model(str(path), device="cpu")
    assert encoder.causal and (encoder.num_layers, encoder.num_heads) == (30, 9)
    data = load_sample("prose", "dev").cut(encoder.tokenizer, 48).sample(10, 42)
    encoded = encode_task(encoder.tokenizer, data, 48)
    assert len(set(encoded.n_tokens.tolist())) > 1  # mixed lengths: the batch is padded
    batch = collate(encoded, list(range(10)), encoder.tokenizer.pad_token_id, encoder.device)
    stats = StatisticsCapture(encoder).run(batch)
    eager = smollm2_eager()  # shared with test_gguf's completion test: one load
    worst = 0.0
    for i, ids in enumerate(encoded.input_ids):
        expected = decoder_reference(eager, encoder.tokenizer, ids.tolist())
        check_example("smollm2", stats[i], expected, f"SmolLM2 sequence {i}")
        worst = max(worst, largest_difference(stats[i], expected))
    print(f"\nSmolLM2-135M: largest |attnwh - eager| over 10 sequences {worst:.2e}")


@pytest.mark.slow
def test_gemma3_loads_as_packaged_and_completes_rome():
    """Gemma 3 270M as packaged (Q4_K_M, dequantised to float32, read by attnwh from its GGUF
    cache): 18 layers of 4 query heads on one key/value head of size 256, a 512-token window on
    five layers of every six; attnwh's model and the eager one read from the file itself both
    complete the capital of Italy."""
    from test_gguf import GEMMA3_DIR, GEMMA3_FILE, gemma3_eager

    path = GEMMA3_DIR / GEMMA3_FILE
    if not path.is_file():
        pytest.skip(f"no Gemma 3 270M at {path} (python tools/fetch_gemma3.py)")
    encoder = load_model(str(path), device="cpu", language_model=True)
    assert (encoder.family, encoder.architecture) == ("gemma3_text", "Gemma3ForCausalLM")
    assert (encoder.num_layers, encoder.num_heads, encoder.num_key_value_heads) == (18, 4, 1)
    assert encoder.model.config.head_dim == 256
    assert encoder.sliding_window == 512
    assert encoder.sliding_layers == tuple(layer for layer in range(18) if layer % 6 != 5)
    prompt = encoder.tokenizer("The capital of France is Paris. The capital of Italy is", return_tensors="pt")
    for model in (encoder.model, gemma3_eager()):
        with torch.no_grad():
            following = model(**prompt).logits[0, -1].argmax().item()
        assert encoder.tokenizer.decode([following]) == " Rome", type(model).__name__


@pytest.mark.slow
def test_gemma3_statistics_match_eager_output_attentions():
    """Gemma 3 270M (GGUF, dequantised): ten sequences of the bundled prose sample against the
    eager model's output_attentions one sequence at a time: eight of up to 48 tokens in one
    right-padded batch, and two of 600 tokens, past the 512-token window of its sliding
    layers, in another."""
    from test_gguf import GEMMA3_DIR, GEMMA3_FILE, gemma3_eager

    path = GEMMA3_DIR / GEMMA3_FILE
    if not path.is_file():
        pytest.skip(f"no Gemma 3 270M at {path} (python tools/fetch_gemma3.py)")
    encoder = load_model(str(path), device="cpu")
    assert encoder.causal and (encoder.num_layers, encoder.num_heads) == (18, 4)
    tokenizer = encoder.tokenizer
    sample = load_sample("prose", "dev")
    data = sample.cut(tokenizer, 48).sample(8, 42)
    encoded = encode_task(tokenizer, data, 48)
    assert len(set(encoded.n_tokens.tolist())) > 1  # mixed lengths: the batch is padded
    capture_stats = StatisticsCapture(encoder)
    batch = collate(encoded, list(range(8)), tokenizer.pad_token_id, encoder.device)
    sequences = [ids.tolist() for ids in encoded.input_ids]
    stats = list(capture_stats.run(batch))
    ids = tokenizer("\n\n".join(e.text_a for e in sample.examples)).input_ids  # BOS first
    long = [ids[:LONG], ids[:1] + ids[LONG : 2 * LONG - 1]]
    assert all(len(sequence) == LONG for sequence in long)
    stats += list(
        capture_stats.run({"input_ids": torch.tensor(long), "attention_mask": torch.ones((2, LONG), dtype=torch.long)})
    )
    sequences += long
    eager = gemma3_eager()  # shared with the completion test: one load
    worst = 0.0
    for i, (sequence, actual) in enumerate(zip(sequences, stats, strict=True)):
        expected = decoder_reference(eager, tokenizer, sequence)
        check_example("gemma3_text", actual, expected, f"Gemma 3 sequence {i} ({len(sequence)} tokens)")
        worst = max(worst, largest_difference(actual, expected))
    print(f"\nGemma 3 270M: largest |attnwh - eager| over {len(sequences)} sequences {worst:.2e}")
