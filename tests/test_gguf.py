"""Models in one GGUF file: a tiny random-weight Llama written here with the gguf package's
GGUFWriter (as llama.cpp's converter lays it out) loads back through attnwh's GGUF loading
with exactly the weights and logits of the model it was written from; a missing, foreign or
truncated file fails in one line; the .gguf path is the name the model travels under (the
warehouse's models.folder, a run's model found again). The slow test loads the real
SmolLM2-135M-Instruct (`python tools/fetch_smollm2.py`; CI fetches it) and skips without it;
Gemma 3 270M's (`python tools/fetch_gemma3.py`) are in test_decoders.py. The GGUF cache is
tested in test_gguf_cache.py.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import gguf as gguf_format
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.convert_slow_tokenizer import bytes_to_unicode

from attnwh.errors import ModelError, UsageError
from attnwh.ingest.model import gguf
from attnwh.ingest.model.available import check_model
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs import maps
from helpers import run

SMOLLM2_DIR = Path(os.environ.get("ATTNWH_SMOLLM2", Path(__file__).resolve().parents[1] / "models" / "smollm2-135m"))
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_DIR = Path(os.environ.get("ATTNWH_GEMMA3", Path(__file__).resolve().parents[1] / "models" / "gemma3-270m"))
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"

HEADS, KV_HEADS, LAYERS, WIDTH = 4, 2, 2, 32  # grouped-query attention, two query heads per key/value head
MERGES = ["h e", "t he", "i n", "a n", "Ġ the"]
# The per-layer tensors, by transformers' name and llama.cpp's.
BLOCK_TENSORS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
TOP_TENSORS = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}


def _llama_cpp_order(weight: np.ndarray, heads: int) -> np.ndarray:
    """Q and K rows as llama.cpp stores them (its converter's `permute`): each head's rotary
    halves interleaved. transformers undoes it on loading, so a wrong order shows as other logits."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def write_tiny_gguf(path: Path, seed: int = 0) -> LlamaForCausalLM:
    """A random-weight Llama (float32 tensors, a byte-level BPE vocabulary) written to `path`
    as one GGUF file; returns the model it was written from."""
    tokens = ["<|endoftext|>", *bytes_to_unicode().values(), *[m.replace(" ", "") for m in MERGES]]
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokens), hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
        bos_token_id=0, eos_token_id=0, tie_word_embeddings=False,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    writer = gguf_format.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(WIDTH)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3] + [1] * (len(tokens) - 1))  # 3: control (<|endoftext|>), 1: normal
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    for name, tensor in model.state_dict().items():
        weight = tensor.detach().numpy()
        if name in TOP_TENSORS or name == "lm_head.weight":
            writer.add_tensor(TOP_TENSORS.get(name, "output.weight"), weight)
            continue
        _, _, layer, *module, _ = name.split(".")
        module_name = ".".join(module)
        if module_name == "self_attn.q_proj":
            weight = _llama_cpp_order(weight, HEADS)
        elif module_name == "self_attn.k_proj":
            weight = _llama_cpp_order(weight, KV_HEADS)
        writer.add_tensor(f"blk.{layer}.{BLOCK_TENSORS[module_name]}.weight", np.ascontiguousarray(weight))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, LlamaForCausalLM]:
    folder = tmp_path_factory.mktemp("gguf")
    return folder / "tiny-llama.gguf", write_tiny_gguf(folder / "tiny-llama.gguf")


def truncated(source: Path, out: Path, keep: int) -> Path:
    out.write_bytes(source.read_bytes()[:keep])
    return out


def test_tiny_gguf_loads_with_the_weights_and_logits_it_was_written_from(tiny):
    path, written = tiny
    started = time.perf_counter()
    tokenizer, model = gguf.load(str(path))
    seconds = time.perf_counter() - started
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (model.config.num_hidden_layers, model.config.num_attention_heads) == (LAYERS, HEADS)
    assert model.config.num_key_value_heads == KV_HEADS
    theirs, ours = written.state_dict(), model.state_dict()
    assert sorted(theirs) == sorted(ours)
    for name, tensor in theirs.items():
        assert ours[name].dtype == torch.float32
        assert torch.equal(ours[name], tensor), name
    text = "the cat in the hat, and then the dog"
    ids = tokenizer(text, return_tensors="pt")
    assert tokenizer.decode(ids.input_ids[0]) == text  # the byte-level vocabulary round-trips
    assert "Ġthe" in tokenizer.convert_ids_to_tokens(ids.input_ids[0])  # the merges were read
    with torch.no_grad():
        assert torch.equal(model(**ids).logits, written(**ids).logits)
    assert seconds < 30, f"the tiny GGUF took {seconds:.1f} s to load"


def test_folder_and_file_name_one_model(tiny):
    path, _ = tiny
    assert gguf.model_path(str(path.parent), path.name) == str(path)
    assert gguf.model_path(str(path), None) == str(path)
    assert gguf.model_path(None, None) is None
    assert gguf.pretrained_arguments(str(path)) == (str(path.parent), {"gguf_file": path.name})
    assert gguf.pretrained_arguments("bert-base-uncased") == ("bert-base-uncased", {})
    check_model(str(path))
    check_model(str(path.parent), path.name)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert tokenizer.eos_token == "<|endoftext|>"  # the special token ids were read


@pytest.mark.parametrize(
    ("model", "gguf_file", "error", "says"),
    [
        (None, "x.gguf", UsageError, "--gguf-file needs --model FOLDER"),
        ("{dir}/tiny-llama.gguf", "x.gguf", UsageError, "not both"),
        ("{dir}", "sub/x.gguf", UsageError, "a file name inside"),
        ("{dir}/no-such-folder", "x.gguf", ModelError, "is not a folder"),
        ("{dir}", "missing.gguf", ModelError, "does not exist"),
        ("{dir}/missing.gguf", None, ModelError, "does not exist"),
    ],
)
def test_bad_gguf_names_fail_in_one_line(tiny, model, gguf_file, error, says):
    folder = str(tiny[0].parent)
    with pytest.raises(error, match=says) as raised:
        check_model(model.format(dir=folder) if model else None, gguf_file)
    assert "\n" not in str(raised.value)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "weights.gguf").write_bytes(b"PK\x03\x04 a zip, not a GGUF file")
    with pytest.raises(ModelError, match="is not a GGUF file"):
        check_model(str(tmp_path / "weights.gguf"))
    (tmp_path / "folder.gguf").mkdir()
    with pytest.raises(ModelError, match="it is a folder"):
        check_model(str(tmp_path / "folder.gguf"))


@pytest.mark.parametrize("keep", [3, 24, 2000, 60_000, -100])
def test_a_truncated_gguf_is_one_model_error(tiny, tmp_path, keep):
    """Cut in the magic, the header, the metadata, the tensors or just short of the end."""
    size = tiny[0].stat().st_size
    cut = truncated(tiny[0], tmp_path / "cut.gguf", keep if keep > 0 else size + keep)
    with pytest.raises(ModelError) as raised:
        gguf.check_contents(str(cut))
    assert "\n" not in str(raised.value) and str(cut) in str(raised.value)
    # Past the magic: what is wrong with the file and what to do, not the words of numpy's failure.
    if cut.stat().st_size > len(gguf.MAGIC):
        assert str(raised.value).endswith(f"truncated or damaged ({cut.stat().st_size:,} bytes); fetch it again")
    with pytest.raises(ModelError, match="cut.gguf"):
        load_model(str(cut), device="cpu")


def test_cli_refuses_a_truncated_or_missing_gguf_in_one_line(tiny, tmp_path, monkeypatch, capsys):
    cut = truncated(tiny[0], tmp_path / "cut.gguf", 60_000)
    for command, *args in (
        ["ingest", "--model", str(cut)],
        ["ingest", "--model", str(tmp_path), "--gguf-file", "absent.gguf"],
        ["ingest", "--gguf-file", "absent.gguf"],
        ["study", "--model", str(tmp_path), "--gguf-file", "absent.gguf"],
        ["study", "--model", str(cut)],
    ):
        code, _, err = run(monkeypatch, capsys, command, *args, "--db", str(tmp_path / "w.duckdb"), "--device", "cpu")
        assert code != 0, (command, args)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("attnwh: error:"), err
        assert "Traceback" not in err
    assert not (tmp_path / "w.duckdb").exists()


def test_load_encoder_reads_the_gguf_and_keeps_its_path(tiny, monkeypatch):
    """The config comes from the GGUF file (gguf_file= reaches from_pretrained). Until the
    decoder core lands, load_model refuses a Llama, naming it; once it reads decoders, the
    loaded model's source and models.folder are the .gguf file's absolute path."""
    path, _ = tiny
    monkeypatch.chdir(path.parent)
    try:
        encoder = load_model(path.name, device="cpu")
    except ModelError as exc:
        assert f"{path.name} is a 'llama' model" in str(exc)
    else:
        assert encoder.name == path.name
        assert encoder.source == encoder.folder == str(path.resolve())
        assert encoder.facts()["folder"] == str(path.resolve())


def test_a_runs_gguf_model_is_found_again_from_its_recorded_path(tiny, tmp_path, monkeypatch):
    """models.folder holds the .gguf file's absolute path; run_model's places try it first
    and load it (a file, not a folder with config.json), as a Ray worker reloads `source`."""
    path, _ = tiny
    places = maps.model_places("models/tiny-llama.gguf", str(path), tmp_path / "w.duckdb")
    assert places[0] == str(path)
    assert "models/tiny-llama.gguf" not in places  # a .gguf name is never a hub name
    loaded: list[str | None] = []
    monkeypatch.setattr(maps, "load_model", lambda place, device: loaded.append(place) or "model")
    tried: list[str] = []
    assert maps._load_from(str(path), "cpu", tried) == "model"
    assert loaded == [str(path)] and tried == []
    assert maps._load_from(str(tmp_path / "gone.gguf"), "cpu", tried) is None
    assert tried == [str(tmp_path / "gone.gguf")]


@functools.cache
def smollm2_eager() -> LlamaForCausalLM:
    """The real SmolLM2-135M with transformers' eager attention, loaded once for the slow tests
    that read it (about 25 s a load)."""
    model = AutoModelForCausalLM.from_pretrained(
        SMOLLM2_DIR, gguf_file=SMOLLM2_FILE, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


@functools.cache
def gemma3_eager() -> Any:  # a Gemma3ForCausalLM
    """The real Gemma 3 270M with transformers' eager attention, read from the GGUF file itself
    (not attnwh's cache: the reference owes nothing to attnwh), loaded once for the slow tests
    that read it (38 s to 5 min a load, dequantising)."""
    model = AutoModelForCausalLM.from_pretrained(
        GEMMA3_DIR, gguf_file=GEMMA3_FILE, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


@pytest.mark.slow
def test_real_smollm2_completes_rome():
    """SmolLM2-135M-Instruct as packaged (Q4_1, dequantised to float32): a Llama of 30 layers,
    9 query heads and 3 key/value heads, that completes the capital of Italy."""
    path = SMOLLM2_DIR / SMOLLM2_FILE
    if not path.is_file():
        pytest.skip(f"no SmolLM2-135M at {path} (python tools/fetch_smollm2.py)")
    check_model(str(SMOLLM2_DIR), SMOLLM2_FILE)
    tokenizer = AutoTokenizer.from_pretrained(SMOLLM2_DIR, gguf_file=SMOLLM2_FILE)
    model = smollm2_eager()
    config = model.config
    assert (config.model_type, type(model).__name__) == ("llama", "LlamaForCausalLM")
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (30, 9, 3)
    assert next(model.parameters()).dtype == torch.float32
    prompt = tokenizer("The capital of France is Paris. The capital of Italy is", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=1, do_sample=False)
    assert tokenizer.decode(out[0, prompt.input_ids.shape[1] :]) == " Rome"
