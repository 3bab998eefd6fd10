"""The trained two-layer attention-only decoder in tests/fixtures/induction-2l (made by
tools/train_induction.py) holds the answer its known_answer.json states, recomputed here
independently: it loads through attnwh's loader offline as a decoder whose forward equals
the eager model's; its word-level tokenizer reads "t5 t17"; on the induction probe (<bos>,
m distinct random words, the same m again) the eager ``output_attentions`` maps name the
induction head and the layer-0 previous-token head it composes with; the repeat's loss is
far below the first half's; and disabling either head (its rows of W_O set to zero in a
copy of the weights) raises the repeat's loss by more than 1 nat while the first half's
barely moves.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from transformers import AutoModelForCausalLM

from attnwh.ingest.model.loading import LoadedModel, load_model

FIXTURE = Path(__file__).parent / "fixtures" / "induction-2l"
KNOWN: dict[str, Any] = json.loads((FIXTURE / "known_answer.json").read_text(encoding="utf-8"))
M = KNOWN["probe"]["half_length"]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Forwards of a model this small only synchronise a second intra-op thread; on a shared
    CPU it spins for long."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    return load_model(str(FIXTURE), device="cpu", language_model=True)


@pytest.fixture(scope="module")
def eager() -> Any:
    return AutoModelForCausalLM.from_pretrained(FIXTURE, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def probe(loaded) -> torch.Tensor:
    """The probe of known_answer.json, written as text and read by the model's tokenizer."""
    generator = torch.Generator().manual_seed(KNOWN["probe"]["seed"])
    texts = []
    for _ in range(KNOWN["probe"]["examples"]):
        half = " ".join(f"t{int(i)}" for i in torch.randperm(100, generator=generator)[:M])
        texts.append(f"{half} {half}")
    return loaded.tokenizer(texts, return_tensors="pt")["input_ids"]


def losses(model: Any, ids: torch.Tensor) -> tuple[float, float]:
    """Mean next-token loss on the first half (targets 1..m) and the repeat (m+2..2m)."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    each = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    return each[:, :M].mean().item(), each[:, M + 1 : 2 * M].mean().item()


def without_head(model: Any, layer: int, head: int) -> Any:
    """A copy whose head (layer, head) writes nothing: its rows of W_O are zero."""
    copied = copy.deepcopy(model)
    size = copied.config.hidden_size // copied.config.num_attention_heads
    columns = slice(head * size, (head + 1) * size)
    with torch.no_grad():
        if copied.config.model_type == "gpt2":  # Conv1D: weight is (in, out)
            copied.transformer.h[layer].attn.c_proj.weight[columns] = 0
        else:  # nn.Linear: weight is (out, in)
            copied.model.layers[layer].self_attn.o_proj.weight[:, columns] = 0
    return copied


def test_loads_offline_as_an_attention_only_decoder(loaded, eager, probe):
    assert loaded.family == eager.config.model_type
    assert (loaded.causal, loaded.num_layers, loaded.num_heads) == (True, 2, 2)
    assert probe.shape == (KNOWN["probe"]["examples"], 1 + 2 * M)
    assert loaded.tokenizer("t5 t17 t5")["input_ids"] == [loaded.tokenizer.bos_token_id, 9, 21, 9]
    # Attention-only: every MLP's output projection is exactly zero.
    mlp_out = [p for n, p in eager.named_parameters() if ".mlp.c_proj." in n or ".mlp.down_proj." in n]
    assert mlp_out and all(bool((p == 0).all()) for p in mlp_out)
    with torch.no_grad():
        ours = loaded.model(input_ids=probe).logits
        theirs = eager(input_ids=probe).logits
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_eager_maps_name_the_known_heads(eager, probe):
    with torch.no_grad():
        maps = torch.stack(eager(input_ids=probe, output_attentions=True).attentions)  # (L, B, H, n, n)
    rows, k = torch.arange(1, 2 * M + 1), torch.arange(1, M + 1)
    previous = maps[..., rows, rows - 1].mean(dim=(1, 3))
    induction = maps[..., M + k, k + 1].mean(dim=(1, 3))
    duplicate = maps[..., M + k, k].mean(dim=(1, 3))
    heads = induction.shape[1]
    assert list(divmod(int(induction.argmax()), heads)) == KNOWN["induction_head"]
    assert KNOWN["induction_head"][0] == 1 and induction.max() > 0.5
    assert induction[0].max() < 0.3  # no layer-0 head reaches the repeat by a fixed offset
    assert [0, int(previous[0].argmax())] == KNOWN["previous_token_head"]
    assert previous[0].max() > 0.5
    for name, scores in {"previous_token": previous, "induction": induction, "duplicate": duplicate}.items():
        assert torch.allclose(scores, torch.tensor(KNOWN["scores"][name]), atol=2e-4), name


def test_disabling_the_circuit_breaks_the_repeat(eager, probe):
    first, repeat = losses(eager, probe)
    assert repeat < 1.0 and first > 3.5
    assert (first, repeat) == pytest.approx(tuple(KNOWN["loss"].values()), abs=2e-4)
    layer, head = KNOWN["induction_head"]
    first_off, repeat_off = losses(without_head(eager, layer, head), probe)
    assert repeat_off - repeat > 1.0 and abs(first_off - first) < 0.2
    layer, head = KNOWN["previous_token_head"]
    _, repeat_off = losses(without_head(eager, layer, head), probe)
    assert repeat_off - repeat > 1.0
