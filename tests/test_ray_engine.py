"""`--engine ray` on a real local Ray instance (2 CPUs and one logical GPU): the same rows as
the single process (statistics on tiny models and the bundled MiniLM, compare, ablation), a
worker killed mid-run, the driver interrupted and rerun, GPU scheduling, and no traffic:
usage reporting off and a local instance on 127.0.0.1 only.

Needs the ray extra (`pip install 'attnwh[ray]'`), which CI installs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import pair_args, run, write_pairs
from test_shards import DECODER_STATS, STATS, assert_same_rows, fetch

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'attnwh[ray]'")

pytestmark = pytest.mark.slow
N = 23


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    """One local instance for the module, as a user's would be: 2 CPUs and a logical GPU
    (no CUDA here: workers that get it still run on the CPU)."""
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"  # set by conftest before Ray loads
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


RAY = ["--engine", "ray", "--workers", "2", "--device", "cpu"]


def single_and_ray(monkeypatch, capsys, args: list[str], tmp_path: Path) -> tuple[Path, Path]:
    single, on_ray = tmp_path / "single.duckdb", tmp_path / "ray.duckdb"
    code, _, err = run(monkeypatch, capsys, *args, "--db", str(single))
    assert code == 0, err
    code, _, err = run(monkeypatch, capsys, *args, "--db", str(on_ray), *RAY)
    assert code == 0, err
    assert not (tmp_path / "ray.duckdb.shards").exists()  # the driver's scratch folder is gone
    return single, on_ray


def test_ray_statistics_equal_the_single_process(monkeypatch, capsys, tiny_model_dir, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, tmp_path / "x", 4), "--thumbnails", "5"]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    assert_same_rows(single, on_ray, "head_stats", STATS, N * 2 * 4)
    assert_same_rows(single, on_ray, "pattern_thumbnails", "thumbnail", 5 * 2 * 4)
    assert {s for (s,) in fetch(on_ray, "SELECT status FROM runs")} == {"complete"}


def test_ray_statistics_of_a_decoder_equal_the_single_process(monkeypatch, capsys, tiny_gemma2, tmp_path):
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "--model", str(tiny_gemma2), *pair_args(data, tmp_path / "x", 4)]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    assert_same_rows(single, on_ray, "head_stats", DECODER_STATS, N * 2 * 4)
    assert fetch(on_ray, "SELECT count(*) FROM head_stats WHERE to_sep IS NOT NULL") == [(0,)]


@pytest.mark.e2e
def test_ray_statistics_equal_the_single_process_on_the_bundled_minilm(monkeypatch, capsys, tmp_path):
    args = ["ingest", "--limit", "12", "--batch-size", "4"]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    assert_same_rows(single, on_ray, "head_stats", STATS, 2 * 12 * 6 * 12)  # two sample tasks, 6 layers × 12 heads


def test_ray_compare_equals_the_single_process(monkeypatch, capsys, tiny_model_dir, tmp_path):
    from test_compare import perturb_last_layer

    base = tiny_model_dir("bert")
    tuned = perturb_last_layer(base, tmp_path / "tuned")
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = ["ingest", "compare", "--base", str(base), "--tuned", str(tuned), *pair_args(data, tmp_path / "x", 4)]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    assert_same_rows(single, on_ray, "attention_change", "cosine", N * 2 * 4)


def test_ray_ablation_equals_the_single_process(monkeypatch, capsys, tmp_path_factory, tmp_path):
    from tiny_models import make_sharp_classifier

    model = make_sharp_classifier("bert", tmp_path_factory.mktemp("sharp"), 2, 4)
    data = write_pairs(tmp_path / "pairs.tsv", N)
    args = [
        "ingest", "ablation", "--model", str(model), *pair_args(data, tmp_path / "x", 4),
        "--resamples", "200", "--top-k", "3",
    ]  # fmt: skip
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    predictions = "SELECT config_id, example_id, prediction, correct FROM ablation_predictions ORDER BY ALL"
    assert fetch(single, predictions) == fetch(on_ray, predictions)
    scores = "SELECT config_id, metric, value, delta, ci_low, ci_high, p_value, p_adjusted FROM ablations ORDER BY ALL"
    a, b = fetch(single, scores), fetch(on_ray, scores)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x[:2] == y[:2]
        np.testing.assert_allclose(np.array(x[2:], float), np.array(y[2:], float), atol=1e-12, equal_nan=True)
    assert fetch(on_ray, "SELECT status FROM runs") == [("complete",)]


def test_ray_prompted_sweep_equals_the_single_process(monkeypatch, capsys, tmp_path_factory, tmp_path):
    """A tiny Llama read through the sentiment prompt (one shot, seed 3): Ray workers load its
    language-model head and score the label words; predictions and scores are the single
    process's. (Prompted statistics' workers: tests/test_prompt_runs.py.)"""
    from test_decoder_ablation import make_causal_lm

    lm = make_causal_lm("llama", tmp_path_factory.mktemp("lm"), positions=512)
    args = ["ingest", "ablation", "--model", str(lm), "--task", "sentiment", "--prompt", "--label-words", "the,dog"]
    args += ["--shots", "1", "--shot-seed", "3", "--limit", "6", "--batch-size", "3"]
    args += ["--resamples", "100", "--top-k", "2", "--no-importance"]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    predictions = "SELECT config_id, example_id, prediction, correct FROM ablation_predictions ORDER BY ALL"
    assert len(fetch(single, predictions)) >= 6 * 11 and fetch(single, predictions) == fetch(on_ray, predictions)
    scores = "SELECT config_id, metric, value, delta, ci_low, ci_high, p_value FROM ablations ORDER BY ALL"
    a, b = fetch(single, scores), fetch(on_ray, scores)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x[:2] == y[:2]
        np.testing.assert_allclose(np.array(x[2:], float), np.array(y[2:], float), atol=1e-12, equal_nan=True)
    assert fetch(on_ray, "SELECT status, prompt IS NOT NULL FROM runs") == [("complete", True)]


def test_ray_loss_sweep_equals_the_single_process(monkeypatch, capsys, tmp_path_factory, tmp_path):
    """A tiny Llama swept by next-token loss on induction probes: Ray workers take each
    batch's configurations in groups and give the single process's nats per sequence and
    span; the tests, run on the driver, give its scores."""
    from test_decoder_ablation import make_causal_lm
    from test_engine_kinds import LOSS_ROWS, LOSS_SCORES, assert_same

    lm = make_causal_lm("llama", tmp_path_factory.mktemp("lm"), positions=320)
    args = ["ingest", "ablation", "--model", str(lm), "--probe", "induction", "--repeat-length", "8"]
    args += ["--limit", "7", "--batch-size", "2", "--mode", "zero", "--resamples", "100"]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    assert_same(single, on_ray, LOSS_ROWS)
    assert_same(single, on_ray, LOSS_SCORES)
    assert fetch(on_ray, "SELECT status FROM runs") == [("complete",)]


def test_ray_roles_equal_the_single_process(monkeypatch, capsys, tmp_path):
    """Head roles of a tiny Llama on both probe kinds: Ray workers score the probes the
    driver built and give the single process's rows."""
    from test_engine_kinds import assert_same_roles
    from tiny_models import make_tiny_decoder

    model = make_tiny_decoder("llama", tmp_path / "llama", 2, 4, seed=3, positions=256)
    args = ["ingest", "roles", "--model", str(model), "--examples", "6", "--batch-size", "2"]
    args += ["--repeat-length", "10", "--context-length", "160", "--depths", "0,1", "--local-window", "8"]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    assert_same_roles(single, on_ray)


def test_ray_restriction_equals_the_single_process(monkeypatch, capsys, tmp_path):
    """The restriction's ranking on Ray workers (text and needle probes), the plan and the
    tests on the driver: the single process's losses and tables."""
    from test_engine_kinds import assert_same_restriction
    from test_restriction import make_lm

    model = make_lm("llama", tmp_path, positions=256)
    args = ["ingest", "restriction", "--model", str(model), "--sink-tokens", "2", "--window", "4"]
    args += ["--context-length", "160", "--limit", "7", "--grid", "0,1,2,4", "--needles", "2", "--batch-size", "2"]
    single, on_ray = single_and_ray(monkeypatch, capsys, args, tmp_path)
    assert_same_restriction(single, on_ray)


def test_ray_relations_equal_the_single_process(monkeypatch, capsys, tiny_model_dir, tmp_path):
    """Dependencies and frames: Ray workers compute each unit's totals, the driver sums them
    into the single process's tables."""
    from test_engine_kinds import assert_same_relations, relations_args

    single, on_ray = single_and_ray(monkeypatch, capsys, relations_args(tiny_model_dir("bert")), tmp_path)
    assert_same_relations(single, on_ray)


def _map_workers() -> list[int]:
    """Process ids of the Ray Data actors (their process title names MapWorker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"MapWorker" in cmdline:
                found.append(int(entry.name))
    return found


def test_a_worker_killed_mid_run_is_replaced_and_the_run_completes_once(monkeypatch, capsys, tiny_model_dir, tmp_path):
    from attnwh.ingest.runs import rows

    n = 40
    data = write_pairs(tmp_path / "pairs.tsv", n)
    db = tmp_path / "w.duckdb"
    real_store = rows.store_part
    killed: list[int] = []

    def store_then_kill(*args, **kwargs):
        result = real_store(*args, **kwargs)
        if not killed:  # after the first part is stored, while the others are computed
            workers = _map_workers()
            assert workers, "no Ray worker process found"
            os.kill(workers[0], signal.SIGKILL)
            killed.append(workers[0])
        return result

    monkeypatch.setattr(rows, "store_part", store_then_kill)
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, db, batch_size=1), *RAY]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert killed and killed[0] not in _map_workers()
    # Exactly one row per (example, layer, head), none missing.
    assert fetch(db, "SELECT count(*), count(DISTINCT (example_id, layer, head)) FROM head_stats") == [
        (n * 2 * 4, n * 2 * 4)
    ]
    assert fetch(db, "SELECT status, (SELECT count(*) FROM run_examples) FROM runs") == [("complete", n)]


def test_an_interrupted_driver_resumes_from_what_it_stored(monkeypatch, capsys, tiny_model_dir, tmp_path):
    from attnwh.ingest.runs import rows

    data = write_pairs(tmp_path / "pairs.tsv", N)
    db, single = tmp_path / "w.duckdb", tmp_path / "single.duckdb"
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, db, batch_size=4)]
    real_store = rows.store_part
    calls = []

    def store_then_interrupt(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_store(*a, **k)

    monkeypatch.setattr(rows, "store_part", store_then_interrupt)
    code, _, err = run(monkeypatch, capsys, *args, *RAY)
    assert code == 130 and err.strip().splitlines()[-1].startswith("attnwh: error: interrupted")
    assert fetch(db, "SELECT status, (SELECT count(*) FROM run_examples) FROM runs") == [("interrupted", 8)]
    monkeypatch.setattr(rows, "store_part", real_store)
    code, out, err = run(monkeypatch, capsys, *args, *RAY)
    assert code == 0 and "resumed" in out, err
    code, _, err = run(monkeypatch, capsys, *args[:-2], "--db", str(single))
    assert code == 0, err
    assert_same_rows(single, db, "head_stats", STATS, N * 2 * 4)


def _units_and_spec(tiny_model_dir, tmp_path):
    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.runs.engine import capture_spec
    from attnwh.ingest.runs.loop import IngestOptions, StatisticsCapture, _plan, prepare_tasks
    from attnwh.ingest.sources.files import load_file

    encoder = load_model(str(tiny_model_dir("bert")), "cpu")
    task = load_file(write_pairs(tmp_path / "pairs.tsv", 6), "premise", "hypothesis", "label")
    options = IngestOptions(batch_size=3)
    (prepared,) = prepare_tasks(encoder, [task], options)
    return _plan(prepared, options, frozenset()), capture_spec(StatisticsCapture(encoder))


@pytest.mark.parametrize(
    "workers, gpus, device, expected",
    [(1, 1.0, "auto", ["0"]), (2, 0.5, "auto", ["0"]), (1, None, "auto", ["0"]), (2, None, "cpu", [])],
)
def test_workers_ask_ray_for_gpus_and_get_them(tiny_model_dir, tmp_path, workers, gpus, device, expected):
    from attnwh.ingest.runs.engine import EngineOptions
    from attnwh.ingest.runs.ray_engine import RayExecutor

    units, spec = _units_and_spec(tiny_model_dir, tmp_path)
    engine = EngineOptions(engine="ray", workers=workers, gpus_per_worker=gpus, device=device)
    parts = list(RayExecutor(engine, spec, tmp_path / "shards").map(units))
    assert [p.name for p in parts] == [u.name for u in units]
    assert all(p.meta["gpu_ids"] == expected for p in parts)
    assert all(p.device == "cpu" for p in parts)  # the logical GPU has no CUDA behind it


def test_more_gpus_than_the_cluster_has_fail_at_once_with_one_line(monkeypatch, capsys, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    code, _, err = run(
        monkeypatch,
        capsys,
        "ingest",
        *pair_args(pairs, db),
        "--engine",
        "ray",
        "--workers",
        "2",
        "--gpus-per-worker",
        "1",
    )
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("attnwh: error: 2 Ray workers × 1 GPU need 2 GPUs"), err
    assert "Traceback" not in err
    assert not db.exists()  # refused before anything was written


def test_device_cuda_without_cuda_fails_with_one_line_on_ray_too(monkeypatch, capsys, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, "ingest", *pair_args(pairs, db), "--engine", "ray", "--device", "cuda")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--device cuda" in lines[0], err


def test_without_the_ray_extra_one_line_says_how_to_install_it(monkeypatch, capsys, pairs, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, "ingest", *pair_args(pairs, db), "--engine", "ray")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "pip install 'attnwh[ray]'" in lines[0], err
    assert not db.exists()


LISTENING = """
import os, sys
def listening():
    found = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):  # no IPv6 on this machine
            continue
        for line in open(name).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found[fields[9]] = fields[1].rsplit(":", 1)[0]
    return found
before = listening()
from attnwh.cli import main
sys.argv = ["attnwh", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
import ray
from ray._common.usage import usage_lib
print("usage", usage_lib.usage_stats_enabled(), os.environ.get("RAY_USAGE_STATS_ENABLED"))
print("node", ray.util.get_node_ip_address())
print("logs", ray._private.worker._global_node.get_logs_dir_path())
for inode, address in listening().items():
    if inode not in before:
        print("listen", address)
"""  # Ray stays up until the process exits, as in a command: its shutdown is on stderr too

LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
# What Ray's own lines look like: its Python loggers ("2026-01-01 10:00:00,123\tWARNING file.py:85 --"),
# its C++ core ("[2026-01-01 10:00:00,123 E 123 123] core_worker.cc:2465:"), Python warnings
# from its files, worker output ("(raylet)", "(MapWorker pid=…)").
RAY_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\.(py|cc|h):\d+|\bray\b|pid=\d+", re.IGNORECASE)


def test_a_local_instance_reports_no_usage_listens_on_loopback_only_and_keeps_stderr_clean(tiny_model_dir, tmp_path):
    """A whole `attnwh ingest --engine ray` with its own local instance, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # attnwh must set them itself
    data = write_pairs(tmp_path / "pairs.tsv", 6)
    args = ["ingest", "--model", str(tiny_model_dir("bert")), *pair_args(data, tmp_path / "w.duckdb", 3)]
    done = subprocess.run(
        [sys.executable, "-c", LISTENING, *args, "--engine", "ray", "--workers", "1", "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "usage False 0" in lines
    assert "node 127.0.0.1" in lines
    addresses = [line.split()[1] for line in lines if line.startswith("listen")]
    assert addresses, done.stdout  # Ray did start servers
    assert set(addresses) <= LOOPBACK, addresses
    # stderr: attnwh's own lines (the model, the bar), none of Ray's; those are in the session's logs.
    assert [line for line in done.stderr.splitlines() if RAY_LINE.search(line)] == [], done.stderr
    assert any(line.startswith("pairs") for line in done.stderr.splitlines()), done.stderr  # the bar
    logs = next(Path(line.split(maxsplit=1)[1]) for line in lines if line.startswith("logs"))
    assert (logs / "attnwh-driver.log").is_file()


def test_the_address_check_passes_a_real_ray_cluster(ray_instance):
    from attnwh.ingest.runs.ray_engine import check_address

    check_address(ray_instance.get_runtime_context().gcs_address)  # no error: it answers as Ray does


def test_study_runs_ingest_compare_and_the_sweep_on_ray(monkeypatch, capsys, tmp_path):
    from test_study import study_args, write_glue
    from tiny_models import make_tiny

    model = make_tiny("bert", tmp_path / "base")
    glue = write_glue(tmp_path / "glue")
    args = [("rte" if a == "rte,stsb" else a) for a in study_args(model, glue, tmp_path)]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    local, on_ray = tmp_path / "w.duckdb", tmp_path / "ray.duckdb"
    # The same fine-tuned models (kept in --out-dir); ingest, compare and the sweep on Ray.
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(on_ray), "--report", str(tmp_path / "r.html"), *RAY)
    assert code == 0, err
    kinds = "SELECT kind, task, status FROM runs ORDER BY kind, task"
    assert fetch(local, kinds) == fetch(on_ray, kinds)
    assert_same_rows(local, on_ray, "head_stats", STATS, 2 * 12 * 2 * 4)  # base and tuned, 12 examples, 2 × 4 heads
    assert_same_rows(local, on_ray, "attention_change", "cosine", 12 * 2 * 4)
    predictions = "SELECT config_id, example_id, prediction FROM ablation_predictions ORDER BY ALL"
    assert fetch(local, predictions) == fetch(on_ray, predictions)
