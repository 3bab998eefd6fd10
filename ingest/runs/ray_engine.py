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

A ``--ray-address`` is checked before Ray is handed it (:func:`check_address`): left to
itself, Ray retries an address where nothing answers for about 15 minutes, blocked in C++
where neither Ctrl-C nor SIGTERM gets through, printing its warnings meanwhile. Ray's own
log lines (its Python loggers, and what its C++ core prints on stderr) go to a log file
(:class:`RayLog`), not to the user's terminal, where attnwh draws its bars and its one line.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from attnwh.errors import AttnwhError, Interrupted, UsageError
from attnwh.ingest.runs import shards
from attnwh.ingest.runs.engine import EngineOptions, WorkerSpec, build_worker
from attnwh.ingest.runs.shards import Part

if TYPE_CHECKING:
    from attnwh.ingest.runs.units import WorkUnit

INSTALL_HINT = "--engine ray needs Ray: pip install 'attnwh[ray]'"

# How long the address check waits for the connection, and again for the reply: a Ray head
# answers in milliseconds; an address that drops packets would hold Ray for minutes.
ANSWER_SECONDS = 5.0
# An HTTP/2 client's first bytes (RFC 9113 §3.4: the preface, then an empty SETTINGS frame).
# Ray's GCS speaks gRPC, so it answers with a SETTINGS frame of its own; a web server (the
# dashboard's 8265) or anything else does not.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_SETTINGS = 4
ADDRESS_FORMS = "the head's host:port (its GCS port, 6379 unless `ray start --port` said otherwise)"
DRIVER_LOG = "attnwh-driver.log"  # in the Ray session's log folder


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
    (auto, host:port), or a new local instance (None), shut down when this process
    exits. Ray's log lines go to :class:`RayLog`'s file until then, where this process
    started or joined Ray (one that Ray was already running in logs as its owner set up)."""
    ray = import_ray(local=address is None)
    if ray.is_initialized():
        return ray
    check_address(address)  # again: the cluster may have gone while the models loaded
    log = ray_log()
    log.start()  # before ray.init, which logs (a token it made, the instance it started)
    try:
        if address is None:
            ray.init(address="local", include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except BaseException as exc:
        log.release()
        if not isinstance(exc, (ConnectionError, ValueError, RuntimeError)):
            raise  # Ctrl-C, SIGTERM (Ray's handler exits), a bug
        where = "a local Ray instance" if address is None else f"the Ray cluster at {address}"
        hint = ""
        if "InvalidAuthToken" in log.text():  # Ray sends its token only to clusters it found itself (auto)
            hint = "; the cluster asks for a token: set RAY_AUTH_MODE=token (Ray reads RAY_AUTH_TOKEN or ~/.ray/auth_token)"
        raise AttnwhError(f"cannot start or reach {where}: {_last_line(exc)}{hint} (Ray's log: {log.path})") from None
    log.settle(ray)
    atexit.register(_shutdown, ray)
    return ray


def _shutdown(ray: Any) -> None:
    """Ray's shutdown, its last lines still to the log; then the terminal is stderr again."""
    try:
        ray.shutdown()
    finally:
        ray_log().release()


def check_address(address: str | None) -> None:
    """Refuse, in seconds and with one line, a `--ray-address` attnwh cannot use: Ray
    Client's ray://, or an address where no Ray cluster answers (a name that does not
    resolve, a port where nothing listens or that does not answer, something that answers
    but does not speak gRPC as Ray's GCS does). `auto` is resolved as Ray resolves it
    (RAY_ADDRESS, else the cluster `ray start` started on this machine), and a host:port is
    checked where Ray will connect (it replaces 127.0.0.1 and localhost with this machine's
    address). None (start a local instance) needs no check.

    Ray, given such an address, retries for about 15 minutes (20 tries of ~43 s), blocked in
    C++ where neither Ctrl-C nor SIGTERM gets through. The check runs in a thread that this
    one waits for with a timeout, so Ctrl-C works while it waits."""
    if address is None:
        return
    given = (os.environ.get("RAY_ADDRESS") or address) if address == "auto" else address  # ray.init reads it first
    if given.startswith("ray://"):
        # Ray Data's executor runs in the driver and needs a Ray worker there, which a Ray Client
        # connection does not have (it fails with "'Worker' object has no attribute 'core_worker'").
        named = f"--ray-address {given}" if given == address else f"RAY_ADDRESS={given} (read for auto)"
        raise UsageError(
            f"{named}: --engine ray runs on Ray Data, which does not work through Ray Client "
            "(ray://); run attnwh on a node of the cluster (ssh, or `ray job submit`) with --ray-address auto "
            "or the head's host:6379"
        )
    host, port = _bootstrap_address(given)
    try:
        problem = _probe(host, port)
    except KeyboardInterrupt:  # one line and exit 130, wherever the caller is
        raise Interrupted(f"interrupted while checking --ray-address {address}; nothing was done") from None
    if problem is not None:
        via = "" if address == f"{host}:{port}" else f" (Ray connects to {host}:{port})"
        raise AttnwhError(f"cannot reach the Ray cluster at {address}{via}: {problem}")


def _bootstrap_address(address: str) -> tuple[str, int]:
    """The host and port `ray.init(address=address)` connects to first."""
    ray = import_ray(local=False)
    services = getattr(getattr(ray, "_private", None), "services", None)
    canonical = getattr(services, "canonicalize_bootstrap_address", None)
    try:
        target = (canonical(address) if canonical else None) or address  # a Ray without it: check as given
    except ConnectionError:  # auto, and no cluster known here
        raise AttnwhError(
            "--ray-address auto found no Ray cluster on this machine (none started by `ray start`, RAY_ADDRESS "
            f"unset); start one with `ray start --head`, or give {ADDRESS_FORMS}"
        ) from None
    except ValueError:
        target = ""  # refused below
    host, sep, port = target.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray-address {address!r}: give auto or {ADDRESS_FORMS}")
    return host, int(port)


def _probe(host: str, port: int, seconds: float = ANSWER_SECONDS) -> str | None:
    """What is wrong at host:port, or None when it answers as a gRPC server does. The name
    lookup cannot be given a timeout, so all of it runs in a daemon thread, waited for
    here at most twice `seconds` (connect, reply)."""
    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(_answer(host, port, seconds)), daemon=True)
    thread.start()
    thread.join(2 * seconds + 1)
    return outcome[0] if outcome else f"no answer within {2 * seconds + 1:g} s"


def _answer(host: str, port: int, seconds: float) -> str | None:
    try:
        sock = socket.create_connection((host, port), timeout=seconds)
    except socket.gaierror:
        return f"the host name {host!r} does not resolve"
    except ConnectionRefusedError:
        return "nothing listens there (connection refused): is Ray running?"
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    except OSError as exc:
        return str(exc.strerror or exc)
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return None  # a TLS cluster: speaking to it takes its certificates; the port is open
        reply = b""
        with contextlib.suppress(OSError):  # closed or silent: not gRPC
            sock.sendall(H2_PREFACE)
            while len(reply) < 9:
                chunk = sock.recv(9 - len(reply))
                if not chunk:
                    break
                reply += chunk
    if len(reply) == 9 and reply[3] == H2_SETTINGS:
        return None
    return f"it answers, but not as a Ray cluster does (gRPC): give {ADDRESS_FORMS}, not the dashboard's port (8265)"


class RayLog:
    """Where Ray's own log lines go: a file, not the user's terminal, where attnwh draws its
    bars and says what went wrong in one line. Ray's Python loggers get a handler on the
    file in place of their console handlers. Ray's C++ core writes to file descriptor 2
    directly (connection warnings, actor errors, lines at shutdown), so while this process
    holds a Ray connection it made, descriptor 2 is the file and `sys.stderr` a copy of the
    terminal's descriptor. The file starts in the temporary folder and moves into the Ray
    session's log folder (`attnwh-driver.log`, beside Ray's own) once there is one."""

    def __init__(self) -> None:
        self.path = Path(tempfile.gettempdir()) / f"attnwh-ray-{os.getpid()}.log"
        self.handler = logging.FileHandler(self.path, encoding="utf-8", delay=True)  # created at the first line
        self.handler.setLevel(logging.INFO)
        self.handler.setFormatter(
            logging.Formatter("%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s")
        )
        self._stderr: TextIO | None = None  # sys.stderr as it was, while descriptor 2 is the file
        self._terminal: TextIO | None = None  # what sys.stderr is meanwhile
        self._terminal_fd: int | None = None
        self.active = False  # between start() and release()

    def route_loggers(self) -> None:
        """Every Ray logger that writes to the console writes to the file instead (again
        after each import or init: Ray Data and ray.init set up handlers of their own)."""
        for name, logger in list(logging.Logger.manager.loggerDict.items()):
            if not isinstance(logger, logging.Logger) or not (name == "ray" or name.startswith("ray.")):
                continue
            console = [
                h
                for h in logger.handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            ]
            for handler in console:
                logger.removeHandler(handler)
            if (console or name == "ray") and self.handler not in logger.handlers:
                logger.addHandler(self.handler)

    def start(self) -> None:
        """Ray's loggers and descriptor 2 to the file, for the Ray connection this process makes."""
        self.route_loggers()
        self.capture_stderr()
        self.active = True

    def capture_stderr(self) -> None:
        """Descriptor 2 to the file, `sys.stderr` still to the terminal. Only where
        sys.stderr is this process's own descriptor 2 (not under pytest's capture, say)."""
        stream = sys.stderr
        if self._stderr is not None or stream is not sys.__stderr__ or stream is None:
            return
        try:
            if stream.fileno() != 2:
                return
        except (AttributeError, OSError, ValueError):  # no descriptor behind it
            return
        stream.flush()
        log_fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._terminal_fd = os.dup(2)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        self._stderr = stream
        self._terminal = open(  # noqa: SIM115  # closed by release()
            self._terminal_fd, "w", buffering=1, encoding=stream.encoding, errors=stream.errors, closefd=False
        )
        sys.stderr = self._terminal

    def settle(self, ray: Any) -> None:
        """Move the file into the Ray session's log folder (this node's; where Ray has none
        to give, the file stays where it is)."""
        self.route_loggers()
        try:
            node = ray._private.worker._global_node
            target = Path(node.get_logs_dir_path()) / DRIVER_LOG
        except Exception:  # noqa: BLE001  # no node here, or Ray moved it: keep the temporary file
            return
        if self.path.exists():
            try:
                os.rename(self.path, target)  # descriptors open on it keep writing to it
            except OSError:
                return
        self.path = target
        self.handler.baseFilename = str(target)  # where the handler opens it, if it has not yet

    def text(self) -> str:
        """What the file holds so far ("" when nothing)."""
        try:
            return self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def release(self) -> None:
        """The terminal is descriptor 2 and sys.stderr again; an empty file is removed. (Ray's
        loggers keep writing to the file: its last lines, if any, are its.)"""
        self.active = False
        if self._stderr is not None and self._terminal_fd is not None:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(self._terminal_fd, 2)
            if sys.stderr is self._terminal:  # else someone wrapped it: leave their wrapper working
                sys.stderr = self._stderr
                if self._terminal is not None:
                    self._terminal.close()
                os.close(self._terminal_fd)
            self._stderr = self._terminal = self._terminal_fd = None
        with contextlib.suppress(OSError):
            if self.path.parent == Path(tempfile.gettempdir()) and self.path.stat().st_size == 0:
                self.path.unlink()


_RAY_LOG: RayLog | None = None


def ray_log() -> RayLog:
    """This process's :class:`RayLog`."""
    global _RAY_LOG
    if _RAY_LOG is None:
        _RAY_LOG = RayLog()
    return _RAY_LOG


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
        if ray_log().active:
            ray_log().route_loggers()  # in case Ray Data set up its console handler again
        else:  # a Ray this process did not start: as quiet, without moving its owner's logs
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
