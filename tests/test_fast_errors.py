"""Bad input that only needs the arguments fails at once: one line, exit 2, and torch never
imported (asserted on the modules loaded, not on the clock); a hub name that is not cached
fails without trying the network when the hub is offline."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from attnwh.errors import ModelError
from attnwh.ingest.model.available import check_model

# Runs the command line and reports on stderr whether torch (or transformers) was imported.
WRAPPER = """
import runpy, sys
sys.argv = ["attnwh", *sys.argv[1:]]
try:
    runpy.run_module("attnwh", run_name="__main__", alter_sys=True)
finally:
    heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    print("HEAVY:" + ",".join(heavy), file=sys.stderr)
"""
OFFLINE_LINE = (
    "attnwh: error: model 'bert-base-uncased' is not a local folder and is not in the Hugging Face cache, "
    "and the hub is offline (HF_HUB_OFFLINE=1); download it first or give a folder"
)


def attnwh(tmp_path: Path, *args: str) -> tuple[int, list[str], str]:
    """Exit code, stderr lines of the command, and the heavy modules it imported."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "COLUMNS": "200"}
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args, "--db", str(tmp_path / "w.duckdb")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    heavy = [line for line in lines if line.startswith("HEAVY:")]
    assert len(heavy) == 1, done.stderr
    return done.returncode, [line for line in lines if not line.startswith("HEAVY:")], heavy[0][6:]


@pytest.mark.parametrize(
    "args, message",
    [
        (["ingest", "--data", "nope.csv", "--text-column", "text"], "data file not found: nope.csv"),
        (["ingest", "--glue-dir", "no-glue", "--task", "sst2"], "GLUE directory not found: no-glue"),
        (["ingest", "--task", "sst2"], "unknown sample task 'sst2'"),
        (["ingest", "compare", "--tuned", "./no-model"], "model path ./no-model does not exist"),
        (
            ["ingest", "ablation", "--model", "./m", "--data", "x.csv", "--text-column", "t", "--label-column", "y"],
            "model path ./m does not exist",
        ),
        (["ingest", "relations", "--conllu", "nope.conllu"], "CoNLL-U file nope.conllu does not exist"),
        (["finetune", "--out", "tuned", "--task", "sst2"], "unknown sample task 'sst2'"),
        (["finetune", "--out", "tuned", "--glue-dir", "no-glue", "--task", "sst2"], "GLUE directory not found"),
        (["finetune", "--out", "tuned", "--data", "x.csv"], "--data needs --eval-data and --label-column"),
        (["finetune", "--out", "a-file"], "--out a-file exists and is not a folder"),
        (["finetune", "--out", "a-file/tuned"], "--out a-file/tuned: a-file exists and is not a folder"),
        (["finetune", "--out", "notes"], "--out notes is a non-empty folder that holds no model"),
        (["study", "--glue-dir", "no-glue", "--tasks", "sst2"], "GLUE directory not found: no-glue"),
        (["study", "--tasks", "sst2"], "unknown sample task 'sst2'"),
        (["study", "--data", "x.csv"], "--data needs --eval-data, --text-column and --label-column"),
        (["study", "--eval-data", "x.csv"], "--eval-data goes with --data"),
        (["study", "--mode", "both"], "unknown ablation mode 'both'"),
        (["study", "--force", "everything"], "unknown stage 'everything' for --force"),
        (["study", "--report", "notes"], "--report notes is a folder"),
        (["study", "--out-dir", "a-file"], "--out-dir a-file exists and is not a folder"),
        (["study", "--out-dir", "."], "--out-dir .: sentiment is a non-empty folder that holds no model"),
        (["study", "--model", "./no-model"], "model path ./no-model does not exist"),
    ],
)
def test_bad_input_fails_before_torch_is_imported(tmp_path, args, message):
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    for folder in ("notes", "sentiment"):  # folders that hold something other than a model
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "todo.txt").write_text("", encoding="utf-8")
    code, lines, heavy = attnwh(tmp_path, *args)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("attnwh: error: ") and message in lines[0], lines
    assert heavy == "", f"{heavy} imported before the error"


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "--model", "bert-base-uncased"],
        ["ingest", "compare", "--tuned", "bert-base-uncased"],
        ["ingest", "ablation", "--model", "bert-base-uncased", "--task", "sentiment"],
        ["ingest", "relations", "--conllu", "{conllu}", "--model", "bert-base-uncased"],
        ["finetune", "--out", "tuned", "--model", "bert-base-uncased"],
        ["study", "--model", "bert-base-uncased"],
    ],
)
def test_an_uncached_hub_model_fails_at_once_when_offline(tmp_path, args):
    conllu = tmp_path / "t.conllu"
    conllu.write_text("1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    code, lines, heavy = attnwh(tmp_path, *(a.format(conllu=conllu) for a in args))
    assert code == 2, lines
    assert lines == [OFFLINE_LINE]
    assert heavy == ""


def test_offline_check_touches_no_network(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("the network was tried")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelError) as raised:
        check_model("bert-base-uncased")
    assert str(raised.value) == OFFLINE_LINE.removeprefix("attnwh: error: ")


def test_unreachable_hub_is_named(monkeypatch, tmp_path):
    """Without HF_HUB_OFFLINE, a hub that cannot be reached fails just as fast."""

    def refused(*args, **kwargs):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ModelError, match=r"hub is unreachable \(huggingface.co: Connection refused\)"):
        check_model("bert-base-uncased")


def test_a_cached_or_local_model_passes(monkeypatch, tmp_path, tiny_model_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_model(None)  # the bundled MiniLM
    check_model(str(tiny_model_dir("bert")))
    snapshot = tmp_path / "hub" / "models--org--cached" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "hub" / "models--org--cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--cached" / "refs" / "main").write_text("abc", encoding="utf-8")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    check_model("org/cached")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match="has no config.json"):
        check_model(str(empty))
