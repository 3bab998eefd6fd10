"""How long attnwh's compute threads spin before they sleep: short, so that a busy machine
costs attnwh wall time rather than CPU time.

PyTorch runs its CPU operators on an OpenMP pool, one thread per core it may use. A thread
that has finished its share of a parallel region waits for the others at a barrier, and
between regions it waits for the next one; GNU OpenMP (libgomp, the runtime of PyTorch's
Linux wheels) busy-waits there for 300,000 spins (a few milliseconds) before it sleeps,
Intel's and LLVM's runtimes for 200 ms. On an idle machine the waits are short and the spin
is cheap. Beside other jobs the scheduler often takes a thread off its core for a whole time
slice, and the other thread spins through it: beside two busy processes on two cores the
default study took three times its idle CPU time, and two thirds of the fine-tuning's CPU
samples were libgomp's spin loop (`bench/contention.py` measures it).

:func:`configure` therefore sets, before the OpenMP runtime starts (it reads its environment
when torch is first imported) and only where the user has set nothing:

- ``GOMP_SPINCOUNT=10000`` (GNU OpenMP): 0.1 to 0.5 ms of spinning, depending on the CPU,
  which keeps the idle speed of the default and the CPU time of ``OMP_WAIT_POLICY=PASSIVE``
  under load;
- ``KMP_BLOCKTIME=1`` (Intel and LLVM OpenMP, in milliseconds: their shortest spin short of
  none).

A user's own ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT`` or ``KMP_BLOCKTIME`` is kept, and with
``ATTNWH_THREADING=runtime`` attnwh leaves the runtime's own waiting alone (the behaviour
before, kept for comparison). The number of threads is left to PyTorch, which follows the
process's CPU affinity (``taskset``, a batch system's cpuset).

This module imports nothing heavy: the command line calls :func:`configure` first thing,
before anything imports torch.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# What attnwh sets when the user has set none of its keys: variable -> (value, the variables
# that, when set, mean the user has chosen how that runtime waits).
WAITING: dict[str, tuple[str, tuple[str, ...]]] = {
    "GOMP_SPINCOUNT": ("10000", ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")),
    "KMP_BLOCKTIME": ("1", ("KMP_BLOCKTIME", "OMP_WAIT_POLICY")),
}
# ATTNWH_THREADING=runtime: leave the OpenMP runtime's waiting as it is.
SWITCH = "ATTNWH_THREADING"
RUNTIME = "runtime"


def configure(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the short spin-waiting of the module's docstring in `environ` (default: this
    process's environment, which the OpenMP runtime reads when it starts and child processes
    inherit) where the user has not chosen; returns what it set. Effective for this process
    only when torch has not been imported yet."""
    env = os.environ if environ is None else environ
    if env.get(SWITCH, "").strip().lower() == RUNTIME:
        return {}
    chosen: dict[str, str] = {}
    for name, (value, user_keys) in WAITING.items():
        if not any(env.get(key, "").strip() for key in user_keys):
            env[name] = chosen[name] = value
    return chosen
