"""The GGUF cache (attnwh.ingest.model.gguf_cache): a GGUF file is dequantised once, into an
entry named by the file's SHA-256, and later loads read only that entry: no GGUF parsing, the
same tensors, so the same weights hash as a load of the file itself (stored runs still match),
the same logits and statistics, and the same models.name and models.folder. An entry that is
damaged, unfinished or made by other library versions is built again; an interrupted build
leaves no entry; a cache that cannot be written is one warning line, and the file loads
without it. On a tiny random-weight Llama written as GGUF (test_gguf.write_tiny_gguf)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoModel

from attnwh.errors import ModelError
from attnwh.ingest.model import gguf, gguf_cache
from attnwh.ingest.model.encoding import collate, encode_task
from attnwh.ingest.model.loading import LoadedModel, load_model, parameters_hash
from attnwh.ingest.runs.loop import StatisticsCapture
from attnwh.ingest.sources.files import load_sample
from helpers import run
from test_gguf import write_tiny_gguf

TEXT = "the cat in the hat, and then the dog"


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_tiny_gguf(path)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder of the test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(gguf_cache.ENV, str(folder))
    return folder


@pytest.fixture
def gguf_reads(monkeypatch) -> list[str]:
    """Every time transformers parses a GGUF file (config, tokenizer or weights: all go through
    load_gguf_checkpoint) and every time attnwh reads a file's layout, named here."""
    reads: list[str] = []
    parse, layout = gguf_utils.load_gguf_checkpoint, gguf.check_contents

    def parsing(path, *args, **kwargs):
        reads.append(f"parse {Path(path).name}")
        return parse(path, *args, **kwargs)

    def checking(name: str) -> None:
        reads.append(f"layout {Path(name).name}")
        layout(name)

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", parsing)
    monkeypatch.setattr(gguf, "check_contents", checking)
    return reads


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def direct_weights_hash(path: Path) -> str:
    """The weights hash of the file loaded by transformers itself, as attnwh recorded it before
    it had a cache: the base model's dequantised tensors."""
    return parameters_hash(AutoModel.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32))


def logits(encoder: LoadedModel) -> torch.Tensor:
    ids = encoder.tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        return encoder.model(**ids).logits


def statistics(encoder: LoadedModel) -> np.ndarray:
    data = load_sample("prose", "dev").cut(encoder.tokenizer, 24).sample(4, 0)
    encoded = encode_task(encoder.tokenizer, data, 24)
    batch = collate(encoded, list(range(4)), encoder.tokenizer.pad_token_id, encoder.device)
    return StatisticsCapture(encoder).run(batch)


def forget_verified(monkeypatch) -> None:
    """As a new process would: what this one verified of the entries is not remembered (it
    remembers a checked entry while its files' stat is unchanged)."""
    monkeypatch.setattr(gguf_cache, "_verified", {})


def test_the_cache_folder_is_named_by_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(gguf_cache.ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert gguf_cache.root() == tmp_path / "home" / ".cache" / "attnwh" / "gguf"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf_cache.root() == tmp_path / "xdg" / "attnwh" / "gguf"
    monkeypatch.setenv(gguf_cache.ENV, str(tmp_path / "mine"))
    assert gguf_cache.root() == tmp_path / "mine"


def test_the_first_load_fills_the_cache_and_later_loads_read_only_it(tiny_file, cache, gguf_reads, capsys):
    load_model(str(tiny_file), device="cpu")
    assert any(r.startswith("parse") for r in gguf_reads)  # the patch sees transformers read the file
    entry = cache / sha256(tiny_file)
    assert gguf_cache.find(str(tiny_file)) == entry
    assert {"config.json", "model.safetensors", "tokenizer.json", gguf_cache.MANIFEST} <= {
        p.name for p in entry.iterdir()
    }
    assert [p.name for p in cache.iterdir()] == [entry.name]  # nothing half made beside it
    err = capsys.readouterr().err
    assert err.count("attnwh: note: dequantising tiny-llama.gguf once") == 1, err

    gguf_reads.clear()
    again = load_model(str(tiny_file), device="cpu", language_model=True)  # the head comes from the entry too
    assert gguf_reads == []  # neither transformers nor attnwh read the GGUF file
    assert capsys.readouterr().err == ""
    assert again.architecture == "LlamaForCausalLM"


def test_the_cached_model_is_the_files_model(tiny_file, cache, monkeypatch):
    """The weights hash attnwh records for a GGUF file (its dequantised tensors) is the same
    read from the file itself, on the first load and from the cache; so are the name, the
    folder, the tokens, the logits and the statistics."""
    first = load_model(str(tiny_file), device="cpu", language_model=True)
    forget_verified(monkeypatch)
    cached = load_model(str(tiny_file), device="cpu", language_model=True)
    assert first.weights_hash == cached.weights_hash == direct_weights_hash(tiny_file)
    for encoder in (first, cached):
        assert encoder.name == encoder.source == str(tiny_file)
        assert encoder.facts()["folder"] == str(tiny_file.resolve())
    assert first.facts() == cached.facts()
    assert first.tokenizer(TEXT).input_ids == cached.tokenizer(TEXT).input_ids
    assert first.tokenizer.pad_token_id == cached.tokenizer.pad_token_id
    assert torch.equal(logits(first), logits(cached))
    np.testing.assert_array_equal(statistics(first), statistics(cached))


def test_one_entry_per_file_contents_whatever_its_path(tiny_file, cache, tmp_path, gguf_reads):
    load_model(str(tiny_file), device="cpu")
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    copy.write_bytes(tiny_file.read_bytes())
    gguf_reads.clear()
    moved = load_model(str(copy), device="cpu")
    assert gguf_reads == []
    assert moved.folder == str(copy.resolve())  # recorded under its own path, read from the shared entry
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, seed=1)
    assert load_model(str(other), device="cpu").weights_hash != moved.weights_hash
    assert sorted(p.name for p in cache.iterdir()) == sorted([sha256(tiny_file), sha256(other)])


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = bytes(16 * [0x7F])
    path.write_bytes(bytes(data))


def other_versions(entry: Path) -> None:
    manifest = json.loads((entry / gguf_cache.MANIFEST).read_text())
    manifest["versions"]["transformers"] = "0.0.1"
    (entry / gguf_cache.MANIFEST).write_text(json.dumps(manifest))


DAMAGE = {
    "tensor bytes changed": lambda entry: flip(entry / "model.safetensors"),
    "weights truncated": lambda entry: (entry / "model.safetensors").write_bytes(
        (entry / "model.safetensors").read_bytes()[:4096]
    ),
    "tokenizer deleted": lambda entry: (entry / "tokenizer.json").unlink(),
    "config garbled": lambda entry: (entry / "config.json").write_text("{not json"),
    "no manifest": lambda entry: (entry / gguf_cache.MANIFEST).unlink(),
    "manifest cut short": lambda entry: (entry / gguf_cache.MANIFEST).write_text('{"format": 1, "fi'),
    "other transformers": other_versions,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_or_stale_entry_is_built_again(tiny_file, cache, gguf_reads, monkeypatch, damage):
    first = load_model(str(tiny_file), device="cpu", language_model=True)
    # Before the damage: a loaded model's tensors may be mapped from the entry's file, which the
    # damage rewrites in place (attnwh itself never does: it builds anew and renames).
    expected = logits(first)
    entry = cache / sha256(tiny_file)
    DAMAGE[damage](entry)
    forget_verified(monkeypatch)
    assert gguf_cache.find(str(tiny_file)) is None
    gguf_reads.clear()
    again = load_model(str(tiny_file), device="cpu", language_model=True)
    assert any(r.startswith("parse") for r in gguf_reads)  # read from the file again
    assert gguf_cache.find(str(tiny_file)) == entry  # and the entry is whole once more
    assert [p.name for p in cache.iterdir()] == [entry.name]
    assert again.weights_hash == first.weights_hash
    assert torch.equal(logits(again), expected)


def test_an_interrupted_build_leaves_no_entry(tiny_file, cache, monkeypatch):
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(gguf_cache, "_write_manifest", interrupted)  # the weights are saved, the manifest not
        with pytest.raises(KeyboardInterrupt):
            load_model(str(tiny_file), device="cpu")
    assert list(cache.iterdir()) == []
    load_model(str(tiny_file), device="cpu")
    assert gguf_cache.find(str(tiny_file)) == cache / sha256(tiny_file)


def test_a_killed_builds_leftovers_are_removed(tiny_file, cache):
    """A build killed outright (no cleanup ran) leaves its temporary folder: the next build on
    the machine removes it once its process is gone, and leaves a live build's alone."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    dead = cache / f"{gguf_cache.BUILDING}{host}-{ended.stdout.strip()}-x1"
    live = cache / f"{gguf_cache.BUILDING}{host}-{os.getpid()}-x2"
    for folder in (dead, live):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"half")
    load_model(str(tiny_file), device="cpu")
    assert not dead.exists() and live.exists()


def test_an_entry_another_process_installed_first_is_kept(tiny_file, cache):
    entry = gguf_cache.ensure(str(tiny_file))
    assert entry is not None
    mine = cache / f"{gguf_cache.BUILDING}mine"
    mine.mkdir()
    (mine / "model.safetensors").write_bytes(b"a build that finished second")
    assert gguf_cache._install(mine, entry, sha256(tiny_file)) == entry
    assert gguf_cache.find(str(tiny_file)) == entry


def test_a_cache_that_cannot_be_written_is_one_warning(tiny_file, tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv(gguf_cache.ENV, str(tmp_path / "a-file" / "cache"))
    encoder = load_model(str(tiny_file), device="cpu")
    # attnwh's lines (transformers' own progress bar of the dequantising may be there too).
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnwh")]
    assert len(lines) == 1 and lines[0].startswith("attnwh: warning: cannot write the GGUF cache"), lines
    assert str(tiny_file) in lines[0]
    assert encoder.weights_hash == direct_weights_hash(tiny_file)


def test_a_truncated_file_is_still_one_line_and_builds_nothing(tiny_file, cache, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_file.read_bytes()[:60_000])
    with pytest.raises(ModelError, match="truncated or damaged"):
        load_model(str(cut), device="cpu")
    assert not cache.exists() or list(cache.iterdir()) == []


def test_the_command_line_says_once_that_it_dequantises(tiny_file, cache, tmp_path, monkeypatch, capsys):
    db = str(tmp_path / "w.duckdb")
    args = ("ingest", "--model", str(tiny_file), "--task", "prose", "--limit", "4", "--max-length", "24")
    code, _, err = run(monkeypatch, capsys, *args, "--db", db, "--device", "cpu")
    assert code == 0, err
    assert err.count("attnwh: note: dequantising") == 1
    code, _, err = run(monkeypatch, capsys, *args, "--replace", "--db", db, "--device", "cpu")
    assert code == 0, err
    assert "dequantising" not in err
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT weights_hash FROM models").fetchall() == [(direct_weights_hash(tiny_file),)]
