"""Fine-tuning that fits and resumes: micro-batches give the whole batch's updates, a run
killed at a step and rerun ends with the weights of a run never stopped, and bfloat16
autocast trains close to float32."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnwh.ingest.runs.finetune import CHECKPOINT_DIR, Checkpoints, FinetuneOptions, finetune
from test_finetune import task

OPTIONS = FinetuneOptions(epochs=2, batch_size=8, max_length=32, seed=3)


@pytest.fixture(scope="module")
def no_dropout(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny BERT without dropout: what a step computes then depends on its examples only,
    not on the masks drawn, which micro-batches draw in other shapes."""
    folder = tmp_path_factory.mktemp("no-dropout") / "bert"
    shutil.copytree(tiny_model_dir("bert"), folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


@pytest.mark.parametrize("micro", [1, 3, 4])
def test_micro_batches_give_the_whole_batch_updates(no_dropout, tmp_path, micro):
    train, dev = task(40), task(12, split="dev")
    whole = finetune(str(no_dropout), train, dev, tmp_path / "whole", OPTIONS, "cpu")
    split = finetune(str(no_dropout), train, dev, tmp_path / "split", OPTIONS, "cpu", checkpoints=Checkpoints(micro))
    assert len(whole.step_losses) == len(split.step_losses) == 10
    np.testing.assert_allclose(split.step_losses, whole.step_losses, rtol=1e-5)
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "split")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-5, msg=name)


# Fine-tunes the tiny BERT with dropout (its default) in micro-batches of 3, a checkpoint every
# 2 steps; with a step to die at, it kills itself there (SIGKILL: no handler, no cleanup).
TRAINER = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[4])
    from test_finetune import task
    from attnwh.ingest.runs.finetune import Checkpoints, FinetuneOptions, finetune

    model, out, die_at = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])

    def on_step(step, total, loss):
        if step == die_at:
            os.kill(os.getpid(), signal.SIGKILL)

    options = FinetuneOptions(epochs=2, batch_size=8, max_length=32, seed=3)
    result = finetune(model, task(40), task(12, split="dev"), out, options, "cpu", on_step,
                      checkpoints=Checkpoints(3, every_steps=2, every_minutes=None))
    print(json.dumps({"hash": result.tuned_weights_hash, "losses": result.step_losses,
                      "resumed_from": result.resumed_from}))
    """
)


def train(model: Path, out: Path, die_at: int = 0) -> subprocess.CompletedProcess:
    tests = str(Path(__file__).parent)
    return subprocess.run(
        [sys.executable, "-c", TRAINER, str(model), str(out), str(die_at), tests],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )


@pytest.mark.slow
def test_killed_at_a_step_a_rerun_ends_with_the_weights_of_an_unbroken_run(tiny_model_dir, tmp_path):
    model = tiny_model_dir("bert")
    unbroken = train(model, tmp_path / "unbroken")
    assert unbroken.returncode == 0, unbroken.stderr
    expected = json.loads(unbroken.stdout)
    assert expected["resumed_from"] == 0

    killed = train(model, tmp_path / "out", die_at=7)
    assert killed.returncode == -9, killed.stderr
    assert (tmp_path / "out" / CHECKPOINT_DIR / "state.pt").exists()
    assert not (tmp_path / "out" / "config.json").exists()  # no model saved

    rerun = train(model, tmp_path / "out")
    assert rerun.returncode == 0, rerun.stderr
    found = json.loads(rerun.stdout)
    assert found["resumed_from"] == 6  # the last checkpoint before step 7
    assert found["losses"] == expected["losses"]  # every step's loss, bit for bit
    assert found["hash"] == expected["hash"]  # and the weights
    a, b = weights(tmp_path / "unbroken"), weights(tmp_path / "out")
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not (tmp_path / "out" / CHECKPOINT_DIR).exists()  # removed once the model is saved


def test_a_checkpoint_of_other_settings_is_not_resumed(no_dropout, tmp_path):
    train_data, dev = task(40), task(12, split="dev")
    out = tmp_path / "out"
    every = Checkpoints(every_steps=2, every_minutes=None)

    def stop(step: int, total: int, loss: float) -> None:
        if step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(str(no_dropout), train_data, dev, out, OPTIONS, "cpu", stop, checkpoints=every)
    assert (out / CHECKPOINT_DIR / "state.pt").exists()
    other = FinetuneOptions(epochs=2, batch_size=8, max_length=32, seed=3, learning_rate=1e-4)
    assert finetune(str(no_dropout), train_data, dev, out, other, "cpu", checkpoints=every).resumed_from == 0


def test_bfloat16_autocast_trains_close_to_float32(no_dropout, tmp_path):
    train_data, dev = task(40), task(12, split="dev")
    single = finetune(str(no_dropout), train_data, dev, tmp_path / "fp32", OPTIONS, "cpu")
    half = FinetuneOptions(epochs=2, batch_size=8, max_length=32, seed=3, precision="bfloat16")
    mixed = finetune(str(no_dropout), train_data, dev, tmp_path / "bf16", half, "cpu")
    losses, reference = np.array(mixed.step_losses), np.array(single.step_losses)
    assert not np.array_equal(losses, reference)  # autocast did compute in bfloat16
    # bfloat16 keeps 8 bits of mantissa: each product is within 2^-8 relative.
    np.testing.assert_allclose(losses, reference, rtol=2e-2)
    assert json.loads((tmp_path / "bf16" / "attnwh_finetune.json").read_text())["options"]["precision"] == "bfloat16"


@pytest.mark.slow
def test_ctrl_c_saves_at_the_next_step_and_the_rerun_resumes(tiny_model_dir, pairs, tmp_path):
    """`attnwh finetune` stopped by Ctrl-C finishes its step, saves a checkpoint, says where it
    stopped in one line (exit 130), and the same command resumes to the unbroken run's weights."""
    model = tiny_model_dir("bert")
    columns = ["--text-column", "premise", "--pair-column", "hypothesis", "--label-column", "label"]
    args = ["finetune", "--model", str(model), "--data", str(pairs), "--eval-data", str(pairs), *columns]
    args += ["--epochs", "60", "--batch-size", "4", "--max-length", "32", "--db", str(tmp_path / "w.duckdb")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def command(out: Path) -> list[str]:
        return [sys.executable, "-m", "attnwh", *args, "--out", str(out)]

    unbroken = subprocess.run(command(tmp_path / "unbroken"), capture_output=True, text=True, env=env, timeout=600)
    assert unbroken.returncode == 0, unbroken.stderr
    out = tmp_path / "out"
    stopped = subprocess.Popen(command(out), stderr=subprocess.PIPE, text=True, env=env)
    # Ctrl-C once the training has taken a few steps (the status file counts them).
    from attnwh.sql.status import read_status

    deadline = time.monotonic() + 300
    while not ((bar := read_status(tmp_path / "w.duckdb").current) and bar.done >= 5):
        assert stopped.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    stopped.send_signal(signal.SIGINT)
    _, err = stopped.communicate(timeout=300)
    lines = [line for line in err.splitlines() if line.startswith("attnwh: error:")]
    assert stopped.returncode == 130 and len(lines) == 1, err
    step = int(re.search(r"interrupted at step (\d+) of 360", lines[0]).group(1))
    assert 5 <= step < 360 and (out / CHECKPOINT_DIR / "state.pt").exists()
    assert read_status(tmp_path / "w.duckdb").state == "interrupted"

    rerun = subprocess.run(command(out), capture_output=True, text=True, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resumed from the checkpoint at step {step}" in rerun.stderr
    a, b = weights(tmp_path / "unbroken"), weights(out)
    assert all(torch.equal(a[name], b[name]) for name in a)
