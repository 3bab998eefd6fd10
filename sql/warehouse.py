"""The DuckDB warehouse file: opening it, and bringing its schema up to date.

The schema is the ordered migrations in ``schema/NNNN_name.sql``. Pending migrations are
applied in one transaction together with the rows that record them, so a file is always
at some whole version.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, cast

import duckdb

from attnwh.errors import AttnwhError, DatabaseInUseError, UsageError
from attnwh.sql import sharing

_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")
# Bytes 8–11 of every DuckDB database file (after a checksum). DuckDB opens an existing file
# that lacks them but has a data extension (.csv, .parquet, .json, …) as an empty in-memory
# database without a word, so whatever a command "wrote" there would be lost.
_DUCKDB_MAGIC = b"DUCK"


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every migration shipped with attnwh, in order."""
    found = []
    for entry in (resources.files("attnwh.sql") / "schema").iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    return sorted(found)


def connect(path: Path | str, read_only: bool = False, apply_migrations: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; a writable connection also applies pending migrations, unless
    `apply_migrations` is False.

    One attnwh process may write a warehouse while others read it (attnwh.sql.sharing): a
    writable connection hands the file to waiting readers between units of work, and a
    reader waits for that a bounded time. Raises DatabaseInUseError when another attnwh
    process writes it (a writable open), when another program holds the file, or when a
    reader's wait runs out; UsageError when a read-only open finds no warehouse there.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise UsageError(f"no warehouse at {path}; create one with `attnwh ingest`")
    check_file(path)
    con = _open(path, read_only)
    if read_only:
        version = schema_version(con)
        if version == 0:
            con.close()
            raise UsageError(f"{path} is not an attnwh warehouse (no schema); create one with `attnwh ingest`")
        if version < migrations()[-1][0]:
            # Written by an older attnwh: the named queries read views it does not have yet.
            # The migrations only add (views, columns, comments), so bring it up to date once
            # and go on reading.
            con.close()
            _upgrade(path, version)
            con = _open(path, True)
    elif apply_migrations:
        try:
            migrate(con)
        except ForeignSchema as exc:
            con.close()
            raise ForeignSchema(f"{path}: {exc}") from None
        except BaseException:
            con.close()
            raise
    return con


def _open(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A shared connection (attnwh.sql.sharing), as a duckdb connection: it has every method
    of one. DuckDB's own errors become one line."""
    try:
        con = sharing.open_reader(path) if read_only else sharing.open_writer(path)
    except duckdb.Error as exc:
        raise AttnwhError(f"cannot open database {path}: {str(exc).splitlines()[0]}") from None
    except OSError as exc:  # the lock files beside it: a folder that is not there, or not ours
        raise AttnwhError(f"cannot open database {path}: {exc.strerror} ({exc.filename})") from None
    return cast(duckdb.DuckDBPyConnection, con)


def _upgrade(path: Path, version: int) -> None:
    """Apply the pending migrations to the warehouse at `path` (at schema `version`)."""
    try:
        connect(path).close()
    except (DatabaseInUseError, ForeignSchema):
        raise
    except AttnwhError as exc:
        raise UsageError(
            f"{path} was written by an older attnwh (schema {version}, this one reads {migrations()[-1][0]}) and "
            f"cannot be upgraded here ({exc}); open a writable copy"
        ) from None


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> tuple[Any, ...] | None:
    """The first row of a query, or None. Fetches to the end: DuckDB refuses further work on
    a connection whose last result was only partly read."""
    rows = con.execute(sql, params).fetchall() if params else con.execute(sql).fetchall()
    return rows[0] if rows else None


def one_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> tuple[Any, ...]:
    """The row of a query that always returns one (an aggregate, an INSERT … RETURNING)."""
    row = first_row(con, sql, params)
    if row is None:
        raise AttnwhError(f"expected a row from: {' '.join(sql.split())[:80]}")
    return row


def check_file(path: Path | str) -> None:
    """Refuse a `path` that exists and is not a DuckDB database file (a CSV, Parquet, SQLite
    or empty file, a folder): a new warehouse is only ever created where nothing is."""
    path = Path(path)
    if not path.exists() or sharing.held_here(path):  # open here: a DuckDB file, and not to be touched
        return
    if not path.is_file():
        raise UsageError(f"--db {path} is a folder, not a DuckDB file; give a file name")
    with path.open("rb") as file:
        head = file.read(16)
    if head[8:12] != _DUCKDB_MAGIC:
        raise UsageError(
            f"--db {path} exists and is not a DuckDB database file ({_looks_like(head)}); "
            "give an existing warehouse or a new file name"
        )


def _looks_like(head: bytes) -> str:
    """A few words on what a file that is not a DuckDB database seems to hold, from its start."""
    if not head:
        return "it is empty"
    if head.startswith(b"PAR1"):
        return "it is a Parquet file"
    if head.startswith(b"SQLite format 3"):
        return "it is an SQLite database"
    return "it holds other binary data" if b"\0" in head else "it holds text"


def check_writable(path: Path | str) -> None:
    """Fail early, before expensive work, if another process writes or holds the file. Inside
    a command's :func:`attnwh.sql.sharing.writing` block, its writer lock is kept from here on."""
    path = Path(path)
    check_file(path)
    if path.exists():
        connect(path, read_only=False, apply_migrations=False).close()
    else:  # no file to open yet; its writer lock all the same (two new studies on one path)
        try:
            sharing.release_writer(sharing.acquire_writer(path))
        except OSError as exc:
            raise AttnwhError(f"cannot create database {path}: {exc.strerror} ({exc.filename})") from None


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = one_row(con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'")
    if not exists[0]:
        return 0
    return one_row(con, "SELECT coalesce(max(version), 0) FROM schema_migrations")[0]


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply pending migrations in one transaction; returns the resulting version."""
    current = schema_version(con)
    _check_history(con, current)
    pending = [m for m in migrations() if m[0] > current]
    if not pending:
        return current
    with transaction(con):
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        for version, name, sql in pending:
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, current_timestamp)", [version, name])
    return pending[-1][0]


class ForeignSchema(UsageError):
    """The file's applied migrations are not this attnwh's under the same numbers."""


def _check_history(con: duckdb.DuckDBPyConnection, current: int) -> None:
    """Refuse a file whose applied migrations are not attnwh's own under the same numbers (a
    warehouse written by another build of attnwh): upgrading it would apply migrations on a
    schema they were not written for."""
    if not current:
        return
    shipped = {version: name for version, name, _ in migrations()}
    applied = con.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    for version, name in applied:
        if version in shipped and shipped[version] != name:
            raise ForeignSchema(
                f"cannot upgrade the warehouse: its migration {version} is {name!r} but this attnwh's migration "
                f"{version} is {shipped[version]!r} (the file was written by another build of attnwh)"
            )


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """The block's writes as one transaction: committed at its end, rolled back on any
    exception (Ctrl-C included), which goes on. DuckDB has no nested transactions: do not
    open one inside another."""
    con.begin()
    try:
        yield con
    except BaseException:
        con.rollback()
        raise
    con.commit()


# Registered names are unique per process, so helpers never clash with each other or with
# a name a caller has registered.
_names = itertools.count()
Rows = Any  # a pyarrow Table, or a mapping of column name to values (list or numpy array)


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, rows: Rows) -> Iterator[str]:
    """`rows` (a pyarrow Table, or columns by name) visible to SQL under the yielded name
    for the block, and unregistered after it whatever happens."""
    if isinstance(rows, Mapping):
        import pyarrow as pa

        rows = pa.table(dict(rows))
    name = f"attnwh_rows_{next(_names)}"
    con.register(name, rows)
    try:
        yield name
    finally:
        con.unregister(name)


def insert_arrow(con: duckdb.DuckDBPyConnection, table: str, rows: Rows, *, or_ignore: bool = False) -> None:
    """Insert `rows` (a pyarrow Table, or columns by name) into `table`, matching columns
    by name; with `or_ignore`, rows whose key is already there are skipped."""
    with registered(con, rows) as name:
        con.execute(f"INSERT {'OR IGNORE ' if or_ignore else ''}INTO {table} BY NAME SELECT * FROM {name}")
