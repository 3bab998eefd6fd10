"""Helpers shared by the test modules: the CLI run in-process, small data files, table counts."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import duckdb

from attnwh import cli
from tiny_models import CORPUS

# The real all-mpnet-base-v2 (`python tools/fetch_all_mpnet.py` puts it here), or ATTNWH_MPNET.
MPNET_DIR = Path(os.environ.get("ATTNWH_MPNET", Path(__file__).resolve().parents[1] / "models" / "all-mpnet-base-v2"))

# The sentences the tiny tokenizers were trained on, so few pieces are unknown.
SENTENCES = list(dict.fromkeys(CORPUS))


def run(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run the real console entry point in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["attnwh", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def cli_main(*args: str) -> None:
    """Run the console entry point in-process where no test's monkeypatch is at hand (a
    module-scoped fixture building a warehouse); fails unless it exits 0."""
    from _pytest.monkeypatch import MonkeyPatch

    with MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["attnwh", *args])
        try:
            cli.main()
        except SystemExit as exc:
            assert not exc.code, f"attnwh {' '.join(args)} exited {exc.code}"


def write_pairs(path: Path, n: int = 24) -> Path:
    rows = ["premise\thypothesis\tlabel"]
    for i in range(n):
        a = SENTENCES[i % len(SENTENCES)]
        b = SENTENCES[(3 * i + 1) % len(SENTENCES)]
        rows.append(f"{a} ({i})\t{b}\t{'yes' if i % 2 else 'no'}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("models", "examples", "runs", "run_examples", "head_stats")
        }


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def pair_args(data: Path, db: Path, batch_size: int = 5) -> list[str]:
    """The options that read `write_pairs` data into `db`."""
    columns = ["--text-column", "premise", "--pair-column", "hypothesis", "--label-column", "label"]
    return ["--data", str(data), *columns, "--db", str(db), "--batch-size", str(batch_size)]


def ingest_args(model: Path, data: Path, db: Path, *extra: str) -> list[str]:
    return ["ingest", "--model", str(model), *pair_args(data, db), *extra]
