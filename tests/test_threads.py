"""The threading policy (attnwh.ingest.runs.threads): the OpenMP runtime's spin before a
waiting thread sleeps is shortened where the user chose nothing, the user's own settings and
the switch back to the runtime's defaults are kept, the command line sets it before torch is
imported, and the number of threads follows the CPU affinity."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from attnwh.ingest.runs import threads

POLICY = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "1"}


def test_sets_short_spin_where_unset():
    env = {"PATH": "/bin"}
    assert threads.configure(env) == POLICY
    assert env == {"PATH": "/bin", **POLICY}


@pytest.mark.parametrize(
    ("user", "set_by_attnwh"),
    [
        ({"GOMP_SPINCOUNT": "300000"}, {"KMP_BLOCKTIME": "1"}),
        ({"KMP_BLOCKTIME": "200"}, {"GOMP_SPINCOUNT": "10000"}),
        # The wait policy decides for both runtimes; GOMP_SPINCOUNT would override it in libgomp.
        ({"OMP_WAIT_POLICY": "ACTIVE"}, {}),
        ({"OMP_WAIT_POLICY": "passive", "KMP_BLOCKTIME": "0"}, {}),
        # An empty variable is as good as unset.
        ({"GOMP_SPINCOUNT": " "}, POLICY),
    ],
)
def test_keeps_the_users_choice(user, set_by_attnwh):
    env = dict(user)
    assert threads.configure(env) == set_by_attnwh
    assert env == user | set_by_attnwh


@pytest.mark.parametrize("value", ["runtime", "Runtime "])
def test_switch_leaves_the_runtime_alone(value):
    env = {"ATTNWH_THREADING": value}
    assert threads.configure(env) == {}
    assert env == {"ATTNWH_THREADING": value}


def test_an_unknown_switch_value_keeps_the_policy():
    env = {"ATTNWH_THREADING": "attnwh"}
    assert threads.configure(env) == POLICY


def test_default_environment_is_the_processes(monkeypatch):
    for name in (*POLICY, "OMP_WAIT_POLICY", "ATTNWH_THREADING"):
        monkeypatch.delenv(name, raising=False)
    assert threads.configure() == POLICY
    assert {name: os.environ[name] for name in POLICY} == POLICY


# Runs the command line's entry point (`attnwh --help`), noting whether torch was imported when
# the policy was applied, then imports torch and reports what its runtime got.
PROBE = """
import json, os, sys
from attnwh.ingest.runs import threads
configure = threads.configure
seen = {}
def recording(environ=None):
    seen["torch_loaded"] = "torch" in sys.modules
    return configure(environ)
threads.configure = recording
sys.argv = ["attnwh", "--help"]
from attnwh.cli import main
try:
    main()
except SystemExit:
    pass
import torch
seen["env"] = {k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
seen["threads"] = torch.get_num_threads()
seen["affinity"] = len(os.sched_getaffinity(0))
print("PROBE" + json.dumps(seen))
"""


def probe(cpus: set[int] | None, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in (*POLICY, "OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    environ.pop("ATTNWH_THREADING", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**environ, "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("PROBE")]
    return json.loads(line.removeprefix("PROBE"))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_command_line_sets_the_policy_before_torch_and_threads_follow_the_affinity():
    available = sorted(os.sched_getaffinity(0))
    one = probe({available[0]})
    assert one == {"torch_loaded": False, "env": POLICY, "threads": 1, "affinity": 1}
    every = probe(None, ATTNWH_THREADING="runtime")
    assert every["env"] == {"GOMP_SPINCOUNT": None, "KMP_BLOCKTIME": None}
    # PyTorch may take the physical cores only (one thread per core of a hyperthreaded CPU).
    assert 1 <= every["threads"] <= len(available)
