"""`--ray-address` is checked before Ray gets it: an address where no Ray cluster answers
fails in seconds with one line and before any model or data is loaded (Ray itself retried
for about 15 minutes, deaf to SIGTERM, printing its warnings), Ctrl-C and SIGTERM work while
it is checked, and Ray Client's ray://, on which Ray Data does not run, is refused.

The command runs in a subprocess where the terminal matters (Ray's C++ core writes to
descriptor 2), with no RAY_ variables but those attnwh sets itself. No Ray instance is
started here. Needs the ray extra.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import run

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'attnwh[ray]'")

# A hang is what is tested, not speed: Ray alone took 866 s for 127.0.0.1:1.
BOUND_S = 60
# Ctrl-C as in a user's shell: a test run before may have left SIGINT ignored in this process
# (a worker of the suite), and a child inherits an ignored signal.
ATTNWH = [
    sys.executable,
    "-c",
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from attnwh.cli import main; main()",
]


def attnwh_process(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # as a user's shell
    command = [*ATTNWH, "ingest", "--task", "sentiment", "--limit", "4", "--db", str(cwd / "w.duckdb"), *args]
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def silent_server() -> Iterator[tuple[int, threading.Event]]:
    """A port (on every address: Ray swaps 127.0.0.1 for this machine's) that accepts a
    connection and then says nothing; the event is set when a connection arrives."""
    server = socket.create_server(("", 0))
    arrived = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        with server:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                held.append(conn)
                arrived.set()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], arrived
    server.close()
    for conn in held:
        conn.close()


@pytest.fixture
def web_server() -> Iterator[int]:
    """A port where an HTTP server answers, as the dashboard's 8265 would."""
    server = socket.create_server(("", 0))

    def serve() -> None:
        with server:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1:1", "nothing listens there (connection refused)"),
        ("nosuchhost.invalid:6379", "the host name 'nosuchhost.invalid' does not resolve"),
        ("web", "it answers, but not as a Ray cluster does (gRPC)"),
    ],
)
def test_an_address_where_no_ray_answers_fails_in_seconds_with_one_line(tmp_path, web_server, address, problem):
    address = f"127.0.0.1:{web_server}" if address == "web" else address
    started = time.monotonic()
    process = attnwh_process(["--engine", "ray", "--ray-address", address], tmp_path)
    try:
        out, err = process.communicate(timeout=BOUND_S)
    finally:
        process.kill()
    lines = err.strip().splitlines()
    assert process.returncode == 1, err
    assert len(lines) == 1, err  # no Ray warnings, not even the model's line: nothing was loaded
    assert lines[0].startswith(f"attnwh: error: cannot reach the Ray cluster at {address}") and problem in lines[0]
    assert out == "" and not (tmp_path / "w.duckdb").exists()
    assert time.monotonic() - started < BOUND_S


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [(signal.SIGINT, 130, "attnwh: error: interrupted while checking --ray-address"), (signal.SIGTERM, -15, "")],
)
def test_ctrl_c_and_sigterm_stop_the_command_while_the_address_is_checked(tmp_path, silent_server, sig, code, line):
    port, arrived = silent_server
    process = attnwh_process(["--engine", "ray", "--ray-address", f"127.0.0.1:{port}"], tmp_path)
    try:
        assert arrived.wait(BOUND_S), "the address was never checked"
        process.send_signal(sig)
        # Had the signal not stopped the check, it would end after its own 5 s with its own
        # line and code: the assertions below tell the two apart, so a loaded machine may
        # take its time to exit.
        _, err = process.communicate(timeout=BOUND_S)
    finally:
        process.kill()
    assert process.returncode == code, err
    assert err.strip().startswith(line) and len(err.strip().splitlines()) == (1 if line else 0), err


@pytest.mark.parametrize("address", ["ray://127.0.0.1:10001", "auto"])
def test_ray_client_addresses_are_refused_with_one_line(monkeypatch, capsys, tmp_path, address):
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")  # what auto would read
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, "ingest", "--db", str(db), "--engine", "ray", "--ray-address", address)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "does not work through Ray Client (ray://)" in lines[0], err
    assert not db.exists()


def test_auto_reads_ray_address_and_is_checked_too(monkeypatch):
    from attnwh.errors import AttnwhError
    from attnwh.ingest.runs.ray_engine import check_address

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(AttnwhError, match=r"cannot reach the Ray cluster at auto \(Ray connects to 127.0.0.1:1\)"):
        check_address("auto")


def test_auto_without_a_cluster_says_how_to_start_one(monkeypatch):
    import ray._private.services

    from attnwh.errors import AttnwhError
    from attnwh.ingest.runs.ray_engine import check_address

    def none_found(address, temp_dir=None):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray._private.services, "canonicalize_bootstrap_address", none_found)
    with pytest.raises(AttnwhError, match="--ray-address auto found no Ray cluster .* `ray start --head`"):
        check_address("auto")


@pytest.mark.parametrize("address", ["head", "head:port", "127.0.0.1:99999"])
def test_a_malformed_address_is_a_usage_error(address):
    from attnwh.errors import UsageError
    from attnwh.ingest.runs.ray_engine import check_address

    with pytest.raises(UsageError, match="give auto or the head's host:port"):
        check_address(address)
