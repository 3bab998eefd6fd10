"""One process writes a warehouse while others read it (attnwh.sql.sharing), and `attnwh status`
follows the writer (attnwh.sql.status): readers get exactly the committed rows, a second
writer is refused in one line, a reader waits for a unit's commit and no longer than it
was told, and the status of a running study matches the rows it has written."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from attnwh.api import Warehouse
from attnwh.errors import AttnwhError
from attnwh.sql import sharing, status, warehouse
from attnwh.sql.status import read_status, status_path
from helpers import ingest_args, run

# A writer that stops after each committed batch until the test says go (a line on stdin),
# printing how many examples it has committed: the test reads at known points.
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from attnwh.ingest.sources.files import load_file
    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.runs.loop import IngestOptions, ingest_statistics, prepare_tasks
    from attnwh.sql import sharing

    model, data, db = sys.argv[1:4]
    encoder = load_model(model, device="cpu")
    options = IngestOptions(batch_size=4)
    tasks = prepare_tasks(encoder, [load_file(Path(data), "premise", "hypothesis", "label")], options)
    done = 0

    def on_batch(n):
        global done
        done += n
        print(done, flush=True)
        sys.stdin.readline()

    with sharing.writing("the test's writer"):
        ingest_statistics(Path(db), encoder, tasks, options, on_batch=on_batch)
    print("end", flush=True)
    """
)


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", **extra}


def attnwh(*args: str, **extra: str) -> subprocess.CompletedProcess:
    """The command in a process of its own, as a user in another terminal runs it."""
    return subprocess.run(
        [sys.executable, "-m", "attnwh", *args], capture_output=True, text=True, env=env(**extra), timeout=120
    )


def test_readers_get_the_committed_rows_while_another_process_writes(
    monkeypatch, capsys, tiny_model_dir, pairs, tmp_path
):
    db = tmp_path / "w.duckdb"
    model = tiny_model_dir("bert")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(model), str(pairs), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
    )

    def go() -> None:
        writer.stdin.write("\n")
        writer.stdin.flush()

    try:
        for committed in (4, 12):
            while (line := writer.stdout.readline().strip()) != str(committed):
                assert line.isdigit() and int(line) < committed, line
                go()
            # The writer is between batches, holding its connection: every reader gets in.
            cli = attnwh("sql", "SELECT count(*) AS n FROM run_examples", "--db", str(db), "--format", "csv")
            assert cli.returncode == 0, cli.stderr
            assert cli.stdout.split() == ["n", str(committed)]
            code, out, err = run(monkeypatch, capsys, "query", "runs", "--db", str(db), "--format", "csv")
            assert code == 0, err
            assert out.splitlines()[1].split(",")[list(out.splitlines()[0].split(",")).index("status")] == "running"
            code, out, err = run(monkeypatch, capsys, "schema", "head_stats", "--db", str(db))
            assert code == 0 and "head_stats" in out, err
            found = Warehouse(db)
            stats = found.sql("SELECT count(*) AS rows, count(DISTINCT example_id) AS examples FROM head_stats")
            assert stats.row(0) == (committed * 2 * 4, committed)  # 2 layers × 4 heads per example
            assert found.runs()["status"].to_list() == ["running"]
            status = found.status()
            assert status.running and status.command == "the test's writer" and status.pid == writer.pid

            # A second writer is refused at once, in one line naming the first.
            code, _, err = run(monkeypatch, capsys, *ingest_args(model, pairs, db, "--replace"))
            lines = err.strip().splitlines()
            assert code != 0 and len(lines) == 1, err
            assert "being written by another attnwh command" in lines[0] and str(writer.pid) in lines[0]
            go()
        writer.stdin.close()  # go on to the end without stopping
        assert writer.stdout.read().split()[-1] == "end"
        assert writer.wait(timeout=120) == 0
    finally:
        writer.kill()
        writer.wait()
    found = Warehouse(db)
    assert found.runs()["status"].to_list() == ["complete"]
    assert found.sql("SELECT count(*) AS n FROM run_examples")["n"][0] == 24
    assert found.status().state == "finished"


@pytest.fixture
def writing(tmp_path):
    """A warehouse this process writes, holding table t with one committed row: (path, connection)."""
    db = tmp_path / "w.duckdb"
    con = warehouse.connect(db)
    with warehouse.transaction(con):
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
    try:
        yield db, con
    finally:
        con.close()


def test_a_reader_waits_for_the_commit_and_no_longer_than_told(writing):
    db, con = writing
    count = ["sql", "SELECT count(*) AS n FROM t", "--db", str(db), "--format", "csv"]
    # Between units the writer hands the file over: the reader sees the committed row.
    cli = attnwh(*count)
    assert cli.returncode == 0 and cli.stdout.split() == ["n", "1"], cli.stderr
    # The writer takes it back for its next unit, and holds it to the commit: a reader
    # that comes meanwhile waits, then sees the whole unit.
    with warehouse.transaction(con):
        con.execute("INSERT INTO t VALUES (2), (3)")
        reader = subprocess.Popen(
            [sys.executable, "-m", "attnwh", *count], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(4.0)  # the reader is up and waiting by now
        assert reader.poll() is None
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0 and out.split() == ["n", "3"], err
    # A reader told to wait at most 0.5 s gives up in one line while a unit takes longer.
    with warehouse.transaction(con):
        con.execute("INSERT INTO t VALUES (4)")
        late = attnwh(*count, ATTNWH_READ_WAIT="0.5")
    lines = late.stderr.strip().splitlines()
    assert late.returncode != 0 and len(lines) == 1, late.stderr
    assert "not free to read within 0.5 s" in lines[0]
    # The writer goes on writing after the readers.
    con.execute("INSERT INTO t VALUES (5)")
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(5,)]


def test_looking_at_the_file_again_keeps_duckdbs_lock(tmp_path):
    # Closing any descriptor of a file drops every POSIX lock the process holds on it,
    # DuckDB's included: checking the file while this process has it open must not open it.
    db = tmp_path / "w.duckdb"
    probe = "import duckdb, sys\ntry:\n    duckdb.connect(sys.argv[1], read_only=True)\nexcept duckdb.IOException:\n    print('refused')"
    con = warehouse.connect(db)
    try:
        warehouse.check_writable(db)
        warehouse.check_file(db)
        Warehouse(db)
        found = subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True, text=True, timeout=60)
        assert found.stdout.split() == ["refused"], found.stderr
    finally:
        con.close()


# A notebook that reads twice inside `with wh:`, pausing between the reads.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from attnwh.api import Warehouse

    wh = Warehouse(sys.argv[1])
    with wh:
        print("first", wh.sql("SELECT count(*) AS n FROM t")["n"][0], flush=True)
        time.sleep(2.0)
        print("second", wh.sql("SELECT count(*) AS n FROM t")["n"][0], len(wh.runs()), flush=True)
    """
)


def test_a_with_block_reads_one_state_and_the_writer_waits_for_its_end(writing):
    db, con = writing
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    assert reader.stdout.readline().split() == ["first", "1"], reader.stderr.read()
    started = time.monotonic()
    con.execute("INSERT INTO t VALUES (2)")  # waits for the block to end
    waited = time.monotonic() - started
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert out.split() == ["second", "1", "0"]  # both reads of the block saw one state
    assert waited > 1.0  # the block held the file through its 2 s pause; then the row went in
    cli = attnwh("sql", "SELECT count(*) AS n FROM t", "--db", str(db), "--format", "csv")
    assert cli.returncode == 0 and cli.stdout.split() == ["n", "2"], cli.stderr


@pytest.mark.slow
def test_status_of_a_running_study_matches_its_rows(tiny_model_dir, tmp_path):
    db = tmp_path / "w.duckdb"
    args = [
        "study",
        "--model",
        str(tiny_model_dir("bert")),
        "--tasks",
        "sentiment",
        "--limit",
        "400",
        "--ablation-limit",
        "8",
        "--max-train-examples",
        "16",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--resamples",
        "100",
        "--device",
        "cpu",
        "--db",
        str(db),
        "--out-dir",
        str(tmp_path / "models"),
        "--report",
        str(tmp_path / "report.html"),
    ]
    study = subprocess.Popen(
        [sys.executable, "-m", "attnwh", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env()
    )
    try:
        deadline = time.monotonic() + 300
        while True:  # until the base model's statistics are part written
            assert study.poll() is None and time.monotonic() < deadline, study.stderr.read().decode()
            found = read_status(db)
            bar, stage = found.current, found.stage
            if bar and stage and stage.name == "ingest-base" and 0 < bar.done < (bar.total or 0):
                break
            time.sleep(0.005)
        # While a reader holds the warehouse the writer cannot commit: the status then counts
        # exactly the rows written.
        con = warehouse.connect(db, read_only=True)
        try:
            time.sleep(0.5)  # a status write under way ends
            found = read_status(db)
            written = con.execute(
                "SELECT count(*) FROM run_examples JOIN runs USING (run_id) WHERE runs.status = 'running'"
            ).fetchall()[0][0]
        finally:
            con.close()
        assert found.running and found.pid == study.pid and found.command.startswith("attnwh study --model")
        assert (found.stage.name, found.stage.index, found.stage.of) == ("ingest-base", 1, 6)
        bar = found.current
        assert (bar.name, bar.stage, bar.unit, bar.total) == ("sentiment", "ingest-base", "ex", 400)
        assert bar.done == written and 0 < written < 400
        assert bar.eta_seconds is not None and bar.eta_seconds > 0
        study.send_signal(signal.SIGKILL)
        study.wait()
        killed = read_status(db)
        assert killed.state == "interrupted" and "ended without finishing" in killed.message
        assert [run["status"] for run in Warehouse(db).status().runs] == ["running"]
    finally:
        study.kill()
        study.wait()


def test_status_of_a_finished_command_and_of_no_warehouse(monkeypatch, capsys, tiny_model_dir, pairs, tmp_path):
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, "status", "--db", str(db))
    assert code == 2 and err.strip().splitlines() == [
        f"attnwh: error: no warehouse at {db}, and no attnwh command is writing one there"
    ]
    assert run(monkeypatch, capsys, *ingest_args(tiny_model_dir("bert"), pairs, db))[0] == 0
    code, out, err = run(monkeypatch, capsys, "status", "--db", str(db))
    assert code == 0, err
    said = " ".join(out.split())
    assert said.startswith("attnwh ingest --model") and ": finished at " in said
    found = Warehouse(db).status()
    assert found.state == "finished" and not found.running and found.runs == []
    (bar,) = found.bars
    assert (bar.name, bar.done, bar.total, bar.finished, bar.eta_seconds) == ("pairs", 24, 24, True, 0.0)


@pytest.mark.parametrize(
    ("error", "state", "message"),
    [
        (AttnwhError("the model could not load"), "failed", "the model could not load"),
        (KeyboardInterrupt(), "interrupted", "interrupted"),
        (None, "finished", None),
    ],
)
def test_a_command_ends_its_status_as_it_ended(tmp_path, error, state, message):
    db = tmp_path / "w.duckdb"
    expected = pytest.raises(type(error)) if error else contextlib.nullcontext()
    with expected, sharing.writing("attnwh ingest --db w.duckdb"):
        warehouse.connect(db).close()
        assert read_status(db).running
        status.on_bar("pairs", 24, "example")  # the work has begun
        status.on_progress(advance=10)
        if error:
            raise error
    found = read_status(db)
    assert (found.state, found.message, found.command) == (state, message, "attnwh ingest --db w.duckdb")
    # A bar the command stopped short is not done.
    assert [(b.done, b.finished) for b in found.bars] == [(10, False)]
    # A command that never opened a warehouse for writing keeps no status there.
    other = tmp_path / "other.duckdb"
    with sharing.writing("attnwh ingest --db other.duckdb"):
        pass
    assert read_status(other).state == "idle" and not other.exists()


def test_a_command_refused_before_any_work_leaves_the_status_as_it_was(tmp_path):
    """Bad input found once the warehouse is held (a model that cannot load) is one line to the
    user, not a status: no file where there was none, and the last command's status kept."""
    db = tmp_path / "w.duckdb"
    with pytest.raises(AttnwhError), sharing.writing("attnwh ingest --model nowhere"):
        warehouse.connect(db).close()
        raise AttnwhError("model path nowhere does not exist")
    assert not status_path(db).exists() and read_status(db).state == "idle"
    with sharing.writing("attnwh ingest --db w.duckdb"):
        warehouse.connect(db).close()
    kept = status_path(db).read_bytes()
    with pytest.raises(AttnwhError), sharing.writing("attnwh ingest --model nowhere"):
        warehouse.connect(db).close()
        raise AttnwhError("model path nowhere does not exist")
    assert status_path(db).read_bytes() == kept and read_status(db).state == "finished"


def test_the_status_moves_with_each_pass_of_a_batch(tmp_path, monkeypatch, capsys):
    """A batch of a sweep or a restriction is many forward passes: the status shows how many
    are done (written at most once a second, and always at the last), until the batch is stored."""
    db = tmp_path / "w.duckdb"
    now = [100.0]
    monkeypatch.setattr(status.time, "time", lambda: now[0])
    with sharing.writing("attnwh ingest ablation --db w.duckdb"):
        warehouse.connect(db).close()
        status.on_bar("prose", 4, "ex")
        now[0] += 0.2
        status.on_pass(1, 30)  # 0.2 s after the last write: not written
        assert read_status(db).bars[0].passes is None
        now[0] += 1.3
        status.on_pass(2, 30)  # 1.5 s after: written
        assert read_status(db).bars[0].passes == (2, 30)
        code, out, err = run(monkeypatch, capsys, "status", "--db", str(db))
        assert code == 0 and "0/4 · batch at pass 2/30" in out, err
        now[0] += 0.1
        status.on_pass(30, 30)  # the last pass: always written
        assert read_status(db).bars[0].passes == (30, 30)
        status.on_progress(advance=2)  # the batch stored: its passes are over
        found = read_status(db).bars[0]
        assert (found.done, found.passes) == (2, None)


def test_a_loss_sweep_reports_every_pass_of_its_batch(monkeypatch, capsys, tmp_path):
    """The loss sweep of a tiny Llama on one batch: the status is told of every pass (one per
    configuration the prefix cache does not answer), in order, before the batch is stored;
    `attnwh status` shows the count."""
    from test_decoder_ablation import make_causal_lm

    model = make_causal_lm("llama", tmp_path, positions=64)
    seen: list[tuple[int, int, int]] = []
    original = status.Activity.passes

    def recording(self, done: int, of: int) -> None:
        seen.append((done, of, self.record["bars"][-1]["done"]))
        original(self, done, of)

    monkeypatch.setattr(status.Activity, "passes", recording)
    args = ["ingest", "ablation", "--model", str(model), "--task", "prose", "--max-length", "24", "--limit", "2"]
    code, _, err = run(monkeypatch, capsys, *args, "--resamples", "100", "--db", str(tmp_path / "w.duckdb"))
    assert code == 0, err
    assert seen, "no pass was reported"
    of = seen[0][1]
    assert [d for d, _, _ in seen] == list(range(1, of + 1)) and {o for _, o, _ in seen} == {of}
    assert {stored for _, _, stored in seen} == {0}  # all within the batch, before it is stored
