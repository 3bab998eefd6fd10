"""The Ray engine (``--engine ray``, ``pip install 'attnwh[ray]'``): units computed by a pool of
Ray actors, each holding the model once, streamed back to this process, the one writer.

The units go into a Ray Data dataset and through ``map_batches`` with an actor pool
(``ActorPoolStrategy``): an actor loads the model(s) when it starts, computes a unit, and
writes its part to the shard folder (`shards.write_part`: temporary name, then rename), so
what comes back through Ray is only the part's path. The driver reads each part as it
arrives, yields it to be stored, and removes it. Ray restarts a killed actor and retries its
unit; a retried unit writes the same part again, which is harmless (the first copy stays,
and storing is idempotent). Parts left by a driver that was interrupted are picked up by
the next run without being computed again.

Ray never reports usage from here: ``RAY_USAGE_STATS_ENABLED=0`` is set before Ray is
imported, and a local instance started here listens on 127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnwh.errors import AttnwhError, UsageError
from attnwh.ingest.runs import shards
from attnwh.ingest.runs.engine import EngineOptions, WorkerSpec, build_worker
from attnwh.ingest.runs.shards import Part

if TYPE_CHECKING:
    from attnwh.ingest.runs.units import WorkUnit

INSTALL_HINT = "--engine ray needs Ray: pip install 'attnwh[ray]'"


def import_ray(local: bool) -> Any:
    """Ray, imported with usage reporting off (and, for a `local` instance, its addresses
    on 127.0.0.1: Ray reads both settings when it is first imported)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if local and "ray" not in sys.modules:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # node address 127.0.0.1, not the LAN's
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return ray


def connect(address: str | None) -> Any:
    """A connected Ray: the instance this process already uses, the cluster at `address`
    (auto, ray://…), or a new local instance (None), shut down when this process exits."""
    ray = import_ray(local=address is None)
    if ray.is_initialized():
        return ray
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    try:
        if address is None:
            ray.init(address="local", include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = "a local Ray instance" if address is None else f"the Ray cluster at {address}"
        raise AttnwhError(f"cannot start or reach {where}: {_last_line(exc)}") from None
    atexit.register(ray.shutdown)
    return ray


def ray_installed() -> bool:
    """Whether the ray extra is installed (checked before anything is written)."""
    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    return importlib.util.find_spec("ray") is not None


def _last_line(exc: BaseException) -> str:
    """The useful line of a Ray error: the last line of its text, which names the cause (a
    remote traceback ends with the worker's own exception)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    last = lines[-1] if lines else type(exc).__name__
    # "attnwh.errors.ModelError: cannot load …" -> "cannot load …"
    head, sep, tail = last.partition(": ")
    return tail if sep and head.replace(".", "").replace("_", "").isalnum() and " " not in head else last


class UnitActor:
    """A Ray actor of the pool: loads the model(s) once, then computes units and writes their
    parts. Its device: the GPU Ray gave it when torch sees CUDA, else the CPU (unless
    --device asked for one of them)."""

    def __init__(self, spec: WorkerSpec, device: str, shard_dir: str) -> None:
        import ray
        import torch

        gpus = [str(g) for g in ray.get_gpu_ids()]
        if device == "auto":
            device = "cuda" if gpus and torch.cuda.is_available() else "cpu"
        self.worker = build_worker(spec, device)
        self.shard_dir = Path(shard_dir)
        self.meta = {"gpu_ids": gpus, "pid": os.getpid()}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[str]]:
        paths = []
        for unit in batch["unit"]:
            part = self.worker.compute(unit)
            part.meta = self.meta
            paths.append(str(shards.write_part(self.shard_dir, part)))
        return {"path": paths}


class RayExecutor:
    """Computes units on a pool of `engine.workers` Ray actors (see the module's docstring)."""

    def __init__(self, engine: EngineOptions, spec: WorkerSpec, shard_dir: Path) -> None:
        """Connects to Ray and checks the GPU request now, before the caller writes anything."""
        self.engine = engine
        self.spec = spec
        self.shard_dir = Path(shard_dir)
        self.ray = connect(engine.ray_address)
        self.gpus = self._gpus_per_worker(self.ray)

    def map(self, units: Sequence[WorkUnit]) -> Iterator[Part]:
        ray = self.ray
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        todo = []
        for unit in units:
            left = self._left_over(unit)
            if left is None:
                todo.append(unit)
            else:
                yield left
                shutil.rmtree(shards.part_path(self.shard_dir, unit.run_key, unit.name), ignore_errors=True)
        if not todo:
            return
        context = ray.data.DataContext.get_current()
        # Parts come back in the units' order (still streamed): the driver's bars go task by
        # task, and an interrupted driver has stored a prefix.
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False  # attnwh draws its own
        context.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        dataset = ray.data.from_items([{"unit": u} for u in todo], override_num_blocks=len(todo))
        computed = dataset.map_batches(
            UnitActor,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(self.engine.workers, len(todo))),
            fn_constructor_kwargs={"spec": self.spec, "device": self.engine.device, "shard_dir": str(self.shard_dir)},
            num_cpus=1,
            num_gpus=self.gpus,
        )
        wanted = {(u.run_key, u.name) for u in todo}
        try:
            for row in computed.iter_rows():
                folder = Path(str(row["path"]))
                part = shards.read_part(folder)
                key = (part.run_key, part.name)
                if key not in wanted:
                    continue  # already stored: Ray hands each unit back once, but be sure
                wanted.discard(key)
                yield part
                shutil.rmtree(folder, ignore_errors=True)
        except ray.exceptions.RayError as exc:
            # A worker's own error (a model that does not load there, CUDA missing there)
            # arrives wrapped in Ray's; its last line names it.
            raise AttnwhError(f"a Ray worker failed: {_last_line(exc)}") from None
        finally:
            for run_key in {u.run_key for u in todo}:
                shards.remove_partial(self.shard_dir, run_key)
                _remove_if_empty(shards.run_folder(self.shard_dir, run_key))
            _remove_if_empty(self.shard_dir)
        if wanted:
            raise AttnwhError(f"{len(wanted)} unit(s) never came back from the Ray workers; rerun to compute them")

    def _left_over(self, unit: WorkUnit) -> Part | None:
        """The unit's part, if an interrupted run already wrote it (and it is whole and holds
        the unit's examples)."""
        folder = shards.part_path(self.shard_dir, unit.run_key, unit.name)
        if not (folder / shards.MANIFEST).is_file():
            return None
        try:
            part = shards.read_part(folder)
        except UsageError:
            shutil.rmtree(folder, ignore_errors=True)
            return None
        if part.example_ids.to_pylist() != unit.example_ids.tolist():
            shutil.rmtree(folder, ignore_errors=True)  # batched differently (another --batch-size)
            return None
        return part

    def _gpus_per_worker(self, ray: Any) -> float:
        """GPUs each actor asks for, checked against the cluster: a request it cannot meet
        would make Ray wait for resources forever."""
        resources = ray.cluster_resources()
        have_gpus, have_cpus = resources.get("GPU", 0.0), resources.get("CPU", 0.0)
        gpus = self.engine.gpus_per_worker
        if gpus is None:
            gpus = 1.0 if have_gpus > 0 and self.engine.device != "cpu" else 0.0
        workers = self.engine.workers
        if gpus > 0 and workers * gpus > have_gpus:
            raise UsageError(
                f"{workers} Ray workers × {gpus:g} GPU need {workers * gpus:g} GPUs, the cluster has {have_gpus:g}; "
                "lower --workers or --gpus-per-worker"
            )
        if workers > have_cpus:
            raise UsageError(f"{workers} Ray workers need a CPU each, the cluster has {have_cpus:g}; lower --workers")
        return gpus


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty: parts of other runs, or the user's files
        folder.rmdir()
