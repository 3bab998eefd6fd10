"""One writer and any number of readers on one warehouse file, at the same time.

DuckDB lets one process open a file for writing, or any number of processes open it
read-only, never both at once. So an attnwh writer holds the file only while it works on
it: between units of work (after a commit, with no transaction or registered rows open) it
hands the file to readers that wait, and takes it back when it next needs it, once they are
done. A reader waits at most :data:`READ_WAIT_S` seconds (``ATTNWH_READ_WAIT``) for that:
usually the rest of the unit being stored, well under a second.

Two small lock files beside the warehouse say who is there (``flock``, released by the
system when a process ends, however it ends):

- ``DB.lock``, held exclusively for a whole command by the one attnwh process that writes the
  warehouse: a second writer is refused at once. It holds that writer's process id and
  command line, for the message.
- ``DB.readers``, held shared by every attnwh reader from before it opens the warehouse
  until it closes it: the writer looks at it to know that readers wait, and to tell them
  from another program holding the file (which is refused at once, not waited for). Its
  first byte says whether the writer has the file open now (``o``) or has handed it over
  (``c``): a waiting reader, or a writer waiting for readers to finish, tries DuckDB's own
  open (~5 ms of CPU each time it is refused) only when the other side has let go, and
  otherwise looks again at these locks, which costs microseconds.

What a reader sees is what was committed: whole units (an example's rows are committed
together) and the runs table, where a run being written has the status ``running``.
No torch here: every reader imports this.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from attnwh.errors import AttnwhError, DatabaseInUseError
from attnwh.sql import status

# How long a reader waits for the writer to hand the file over (seconds): one unit's store,
# normally; more only when the writer cannot take the file back from other readers.
READ_WAIT_S = float(os.environ.get("ATTNWH_READ_WAIT", "60"))
# How long a writer waits to take the file back from readers before it gives up.
WRITE_WAIT_S = 600.0
# How often a waiting process retries, and how often a writer looks for waiting readers.
POLL_S = 0.02
WATCH_S = 0.1
# A writer that has made no call on its connection for this long (the model computing) hands
# the file to waiting readers even between two reads, not only after a commit.
IDLE_S = 0.5
# A writer starting while a reader or `attnwh status` probes its lock tries this long before
# it calls the lock another writer's.
LOCK_GRACE_S = 1.0
# A waiter tries DuckDB's open at least this often whatever the lock files say (a writer
# killed while it had the file open leaves its byte at "open").
RETRY_S = 0.5
OPEN, HANDED_OVER = b"o", b"c"


# Readers open in this process, by warehouse (resolved path).
_readers_here: dict[Path, int] = {}


def held_here(db: Path) -> bool:
    """Whether this process has `db` open through attnwh (writing it, or reading it). Then
    nothing may open and close the file itself: closing any descriptor of a file drops every
    lock this process holds on it (POSIX), DuckDB's included, and another process could then
    open the file while this one uses it."""
    key = db.resolve()
    with _locks_guard:
        return key in _locks or _readers_here.get(key, 0) > 0


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def readers_path(db: Path) -> Path:
    return db.with_name(db.name + ".readers")


def _lock_error(exc: duckdb.Error) -> str | None:
    """The holder's process id (or "") when DuckDB could not lock the file; None for any
    other error."""
    text = str(exc)
    if "lock" not in text.lower():
        return None
    pid = re.search(r"PID (\d+)", text)
    return pid.group(1) if pid else ""


def _held_by(path: Path, pid: str) -> str:
    holder = f" (process {pid})" if pid else ""
    return f"database {path} is in use by another process{holder}, not an attnwh command; wait for it to finish or use another --db"


def _open_lock_file(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _try_flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def writer_running(db: Path) -> dict[str, Any] | None:
    """The attnwh writer holding `db` now (its pid and command, as it wrote them), or None."""
    path = lock_path(db)
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        if _try_flock(fd, fcntl.LOCK_SH):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        try:
            return json.loads(os.pread(fd, 65536, 0) or b"{}")
        except ValueError:
            return {}
    finally:
        os.close(fd)


def _readers_waiting(fd: int) -> bool:
    """Whether an attnwh reader holds (or waits on) the readers' lock whose file is `fd`."""
    if _try_flock(fd, fcntl.LOCK_EX):
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    return True


# -- the writer --------------------------------------------------------------------------------


class WriterLock:
    """This process's hold on writing one warehouse: ``DB.lock`` held exclusively while any
    :class:`SharedConnection` to it is open, or a :func:`writing` block around them is."""

    def __init__(self, db: Path, command: str) -> None:
        self.db = db
        self.users = 0  # open connections, and the command holding it
        self.fd = _open_lock_file(lock_path(db))
        deadline = time.monotonic() + LOCK_GRACE_S
        while not _try_flock(self.fd, fcntl.LOCK_EX):
            if time.monotonic() > deadline:
                holder = _holder_text(self.fd)
                os.close(self.fd)
                raise DatabaseInUseError(
                    f"database {db} is being written by another attnwh command{holder}; wait for it to finish or "
                    "use another --db (read it meanwhile: attnwh status, sql, query, report)"
                )
            time.sleep(POLL_S)
        note = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command}).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, note, 0)
        self.readers_fd = _open_lock_file(readers_path(db))
        self.open = 0  # this process's DuckDB connections to the file, open now

    def opened(self) -> None:
        self.open += 1
        if self.open == 1:
            os.pwrite(self.readers_fd, OPEN, 0)

    def closed(self) -> None:
        self.open -= 1
        if self.open == 0:
            os.pwrite(self.readers_fd, HANDED_OVER, 0)

    def readers_waiting(self) -> bool:
        return _readers_waiting(self.readers_fd)

    def waits(self) -> tuple[Callable[[], bool], Callable[[], bool]]:
        """For :func:`_connect_waiting`: whether the file's holder is an attnwh reader (one
        that will let go), and whether the readers have let go (none holds their lock)."""
        return self.readers_waiting, lambda: not self.readers_waiting()

    def release(self) -> None:
        os.close(self.readers_fd)
        os.ftruncate(self.fd, 0)
        if not self.db.exists():  # nothing was written (bad input): leave nothing beside it
            for path in (lock_path(self.db), readers_path(self.db)):
                path.unlink(missing_ok=True)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _holder_text(fd: int) -> str:
    try:
        note = json.loads(os.pread(fd, 65536, 0) or b"{}")
    except ValueError:
        return ""
    if "pid" not in note:
        return ""
    return f" (process {note['pid']}: {' '.join(str(note.get('command', '')).split())[:80]})"


_locks: dict[Path, WriterLock] = {}
_locks_guard = threading.RLock()


class _Command:
    """A command running in this process (:func:`writing`): the warehouses it writes, each
    with the writer lock it holds to its end and the status it keeps there."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.writes: list[tuple[WriterLock, status.Activity]] = []


_command: _Command | None = None


def acquire_writer(db: Path) -> WriterLock:
    """This process's writer lock on `db`, taken now if it is not held yet (one more user).
    Raises DatabaseInUseError naming the other writer when another process holds it."""
    key = db.resolve()
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = WriterLock(db, _command.command if _command else " ".join(sys.argv))
            if _command is not None:  # the command holds it to its end, and keeps its status
                lock.users += 1
                _command.writes.append((lock, status.start(db, _command.command)))
        lock.users += 1
        return lock


def release_writer(lock: WriterLock) -> None:
    with _locks_guard:
        lock.users -= 1
        if lock.users == 0:
            del _locks[lock.db.resolve()]
            lock.release()


@contextlib.contextmanager
def writing(command: str) -> Iterator[None]:
    """The block is the command `command`: each warehouse it writes is held for writing
    from its first writable connection (or :func:`attnwh.sql.warehouse.check_writable`) to
    the block's end, as its stages open and close connections and no other writer may come
    in between; and it keeps the status `attnwh status` reads there, ended as finished,
    failed or interrupted. A command that writes nothing (a reader, a static shard, bad
    input) takes nothing. Inside another command's block, the outer one counts."""
    global _command
    with _locks_guard:
        if _command is not None:
            nested = True
        else:
            nested, _command = False, _Command(command)
            running = _command
    if nested:
        yield
        return
    outcome, message = "finished", None
    try:
        yield
    except BaseException as exc:
        from attnwh.errors import Interrupted

        if isinstance(exc, KeyboardInterrupt | Interrupted):
            outcome, message = "interrupted", " ".join(str(exc).split()) or "interrupted"
        elif getattr(exc, "exit_code", None) != 0:  # typer.Exit(0) is a normal end
            outcome, message = "failed", " ".join(str(exc).split()) or type(exc).__name__
        raise
    finally:
        with _locks_guard:
            _command = None
            for lock, activity in running.writes:
                status.stop(activity, outcome, message)
                release_writer(lock)


def _connect_waiting(
    db: Path, read_only: bool, deadline: float, waiting: Callable[[], bool], free: Callable[[], bool]
) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, retried while DuckDB's own lock is held and `waiting()` says the holder
    is an attnwh process that will let go; another program's lock is refused at once. It is
    tried when `free()` says the other attnwh side has let go, and every RETRY_S seconds all
    the same. So a writer taking the file back lets the readers that wait have it first."""
    foreign_since: float | None = None
    tried = time.monotonic()  # the first try, too, waits for free() (RETRY_S at most)
    while True:
        now = time.monotonic()
        if now - tried < RETRY_S and not free():
            if now > deadline:
                raise TimeoutError("")
            time.sleep(POLL_S)
            continue
        tried = now
        try:
            return duckdb.connect(str(db), read_only=read_only)
        except duckdb.IOException as exc:
            pid = _lock_error(exc)
            if pid is None:
                raise
            now = time.monotonic()
            if waiting():
                foreign_since = None
            else:
                # Give an attnwh process a moment to take its lock file after the database's.
                foreign_since = foreign_since or now
                if now - foreign_since > LOCK_GRACE_S:
                    raise DatabaseInUseError(_held_by(db, pid)) from None
            if now > deadline:
                raise TimeoutError(pid) from None
            time.sleep(POLL_S)


class SharedConnection:
    """A writable connection that lets readers in between units of work.

    It stands for a duckdb connection: every method is the open connection's, called under a
    lock, and a relation it returns (`sql`) is guarded the same way. While readers wait, a
    watcher thread closes the underlying connection when nothing is open on it (no
    transaction, no registered rows) and either a commit just ended a unit of work (*parked*)
    or no call has come for :data:`IDLE_S` seconds (the model computing between two reads);
    the next call opens it again, waiting for the readers to finish. So a result must be
    fetched right after its statement (attnwh always chains them:
    ``con.execute(…).fetchall()``), not kept across other work.
    """

    def __init__(self, db: Path, lock: WriterLock, con: duckdb.DuckDBPyConnection) -> None:
        self._db = db
        self._lock = lock
        self._con: duckdb.DuckDBPyConnection | None = con
        lock.opened()
        self._guard = threading.RLock()
        self._depth = 0  # open transactions and registered relations
        self._parked = False
        self._idle_since = time.monotonic()
        self._closed = False
        self._stopped = threading.Event()  # set by close: the watcher ends at once
        self.handovers = 0  # times the file was handed to readers
        self._watcher = threading.Thread(target=self._watch, name=f"attnwh-share-{db.name}", daemon=True)
        self._watcher.start()

    # The connection methods that open or close what must stay on one connection.
    def begin(self) -> Any:
        result = self.call("begin")
        self._depth += 1
        return result

    def commit(self) -> Any:
        result = self.call("commit")
        self._leave()
        return result

    def rollback(self) -> Any:
        result = self.call("rollback")
        self._leave()
        return result

    def register(self, name: str, rows: Any) -> Any:
        result = self.call("register", name, rows)
        self._depth += 1
        return result

    def unregister(self, name: str) -> Any:
        result = self.call("unregister", name)
        self._leave()
        return result

    def close(self) -> None:
        with self._guard:
            if self._closed:
                return
            self._closed = True
            if self._con is not None:
                self._con.close()
                self._con = None
                self._lock.closed()
        self._stopped.set()
        self._watcher.join()
        release_writer(self._lock)

    def __getattr__(self, name: str) -> Any:
        with self._guard:
            value = getattr(self._use(), name)
        return functools.partial(self.call, name) if callable(value) else value

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The connection's method `name`, under the lock; what it returns, guarded."""
        with self._guard:
            try:
                return self._guarded(getattr(self._use(), name)(*args, **kwargs))
            finally:
                self._idle_since = time.monotonic()

    def _guarded(self, result: Any) -> Any:
        if result is self._con:  # execute() and the like return the connection itself
            return self
        if isinstance(result, duckdb.DuckDBPyRelation):
            return _GuardedRelation(result, self)
        return result

    def __enter__(self) -> SharedConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _leave(self) -> None:
        self._depth = max(0, self._depth - 1)
        self._parked = self._depth == 0

    def _use(self) -> duckdb.DuckDBPyConnection:
        """The open connection, opened again if readers had it; no longer parked."""
        if self._closed:
            raise duckdb.ConnectionException("Connection already closed!")
        self._parked = False
        if self._con is None:
            deadline = time.monotonic() + WRITE_WAIT_S
            try:
                self._con = _connect_waiting(self._db, False, deadline, *self._lock.waits())
            except TimeoutError:
                raise AttnwhError(
                    f"readers kept {self._db} for over {WRITE_WAIT_S:.0f} s; the work so far is kept, rerun to resume"
                ) from None
            self._lock.opened()
        return self._con

    def _free(self) -> bool:
        """Whether the file may go to readers now: nothing open, and a unit just committed or
        no call for IDLE_S seconds."""
        idle = time.monotonic() - self._idle_since > IDLE_S
        return self._con is not None and self._depth == 0 and (self._parked or idle) and not self._closed

    def _watch(self) -> None:
        while not self._stopped.wait(WATCH_S):
            if not self._free() or not self._lock.readers_waiting():
                continue
            with self._guard:
                if self._free():
                    assert self._con is not None
                    self._con.close()  # commits nothing: nothing is open
                    self._con = None
                    self._lock.closed()
                    self.handovers += 1


class _GuardedRelation:
    """A relation of a :class:`SharedConnection`, evaluated under its lock (a relation is lazy:
    its query runs when it is fetched)."""

    def __init__(self, relation: duckdb.DuckDBPyRelation, owner: SharedConnection) -> None:
        self._relation = relation
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._relation, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._owner._guard:
                try:
                    return self._owner._guarded(value(*args, **kwargs))
                finally:
                    self._owner._idle_since = time.monotonic()

        return call


def open_writer(db: Path) -> SharedConnection:
    """A shared writable connection to `db`, under this process's writer lock."""
    lock = acquire_writer(db)
    try:
        con = _connect_waiting(db, False, time.monotonic() + WRITE_WAIT_S, *lock.waits())
    except TimeoutError:
        release_writer(lock)
        raise DatabaseInUseError(f"readers kept {db} for over {WRITE_WAIT_S:.0f} s; try again") from None
    except BaseException:
        release_writer(lock)
        raise
    return SharedConnection(db, lock, con)


# -- readers -----------------------------------------------------------------------------------


class ReadConnection:
    """A read-only connection that holds the readers' lock until it is closed."""

    def __init__(self, con: duckdb.DuckDBPyConnection, db: Path, readers_fd: int) -> None:
        self._con = con
        self._key = db.resolve()
        self._readers_fd: int | None = readers_fd
        with _locks_guard:
            _readers_here[self._key] = _readers_here.get(self._key, 0) + 1

    def close(self) -> None:
        self._con.close()
        self._let_go()

    def _let_go(self) -> None:
        if self._readers_fd is None:
            return
        os.close(self._readers_fd)  # releases its shared lock
        self._readers_fd = None
        with _locks_guard:
            _readers_here[self._key] -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def __del__(self) -> None:
        if getattr(self, "_readers_fd", None) is not None:
            self._let_go()

    def __enter__(self) -> ReadConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_reader(db: Path, wait: float | None = None) -> ReadConnection:
    """A read-only connection to `db`, waiting up to `wait` seconds (default READ_WAIT_S)
    for an attnwh writer to hand it over; another program holding it is refused at once."""
    wait = READ_WAIT_S if wait is None else wait
    fd = _open_lock_file(readers_path(db))
    fcntl.flock(fd, fcntl.LOCK_SH)  # blocks only while a writer looks at it (microseconds)
    try:
        con = _connect_waiting(
            db,
            True,
            time.monotonic() + wait,
            lambda: writer_running(db) is not None,
            lambda: os.pread(fd, 1, 0) != OPEN,
        )
    except TimeoutError:
        os.close(fd)
        writer = writer_running(db) or {}
        who = f" (process {writer['pid']}: {writer.get('command', '')})" if "pid" in writer else ""
        raise DatabaseInUseError(
            f"database {db} is being written{who} and was not free to read within {wait:g} s; "
            "try again, or wait longer with ATTNWH_READ_WAIT=SECONDS"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return ReadConnection(con, db, fd)
