"""The one writer of the runs table (`attnwh.sql.runs`): every kind of run goes through it,
its keys are the ones earlier warehouses were written with, a key of another kind is refused,
and deleting a run leaves nothing of it in any table."""

from __future__ import annotations

import re
import shutil
import types
from pathlib import Path

import duckdb
import pytest

from attnwh.errors import AttnwhError
from attnwh.sql import runs, warehouse
from helpers import ingest_args, pair_args, run, write_pairs

ROOT = Path(__file__).resolve().parents[1]
KINDS = {
    "statistics", "compare", "ablation", "relations", "finetune", "roles", "restriction", "streaming", "loss_curve",
    "massive_ablation",
}  # fmt: skip


def _run_tables_from_schema(con) -> set[str]:
    """Independently of `runs.run_tables`: every base table with a run_id column."""
    return {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.columns JOIN information_schema.tables"
            " USING (table_catalog, table_schema, table_name)"
            " WHERE column_name = 'run_id' AND table_type = 'BASE TABLE'"
        ).fetchall()
    }


@pytest.fixture(scope="module")
def every_kind(tiny_model_dir, tmp_path_factory):
    """A warehouse with a run of every kind (statistics with thumbnails, statistics of a
    decoder read through a prompt, compare, ablation (of a classifier, and of the decoder's
    loss on induction probes), head roles, restriction, streaming, loss curve, massive
    ablation, relations dependencies and frames, finetune, the synthetic-maps fixture with hand
    labels), built through the CLI; and the run ids that `create_run` handed out."""
    from _pytest.monkeypatch import MonkeyPatch

    from fixtures import synthetic_maps
    from test_decoder_ablation import make_causal_lm
    from test_frames import framebert_text
    from test_relations import CONLLU

    tmp = tmp_path_factory.mktemp("every-kind")
    db = tmp / "w.duckdb"
    data = write_pairs(tmp / "pairs.tsv", 12)
    dev = write_pairs(tmp / "dev.tsv", 8)
    conllu = tmp / "tiny-ud-dev.conllu"
    conllu.write_text(CONLLU, encoding="utf-8")
    framenet = tmp / "fn-tiny.conll"
    framenet.write_text(framebert_text(), encoding="utf-8")
    bert, tuned = tiny_model_dir("bert"), tmp / "tuned"
    lm = make_causal_lm("llama", tmp / "lm", positions=256)  # read through a prompt: prompt_predictions
    text = tmp / "text.txt"
    text.write_text(" ".join(["the dog saw a cat and the cat ran off."] * 12) + "\n", encoding="utf-8")
    pair_columns = ["--text-column", "premise", "--pair-column", "hypothesis", "--label-column", "label"]
    sweep = ["--resamples", "100", "--top-k", "2"]
    commands = [
        [
            "finetune",
            "--model",
            str(bert),
            "--data",
            str(data),
            "--eval-data",
            str(dev),
            *pair_columns,
            "--out",
            str(tuned),
            "--db",
            str(db),
            "--epochs",
            "1",
            "--batch-size",
            "8",
        ],
        ingest_args(bert, data, db, "--thumbnails", "3"),
        [
            "ingest",
            "--model",
            str(lm),
            "--task",
            "sentiment",
            "--limit",
            "4",
            "--prompt",
            "--label-words",
            "the,dog",
            "--db",
            str(db),
        ],  # fmt: skip
        ["ingest", "compare", "--base", str(bert), "--tuned", str(tuned), *pair_args(data, db, batch_size=6)],
        ["ingest", "ablation", "--model", str(tuned), *pair_args(data, db, batch_size=6), *sweep],
        [
            "ingest",
            "ablation",
            "--model",
            str(lm),
            "--probe",
            "induction",
            "--repeat-length",
            "6",
            "--limit",
            "2",
            "--resamples",
            "100",
            "--db",
            str(db),
        ],
        [
            "ingest",
            "roles",
            "--model",
            str(lm),
            "--examples",
            "2",
            "--repeat-length",
            "6",
            "--context-length",
            "160",
            "--db",
            str(db),
        ],
        [
            "ingest",
            "restriction",
            "--model",
            str(lm),
            "--text",
            str(text),
            "--context-length",
            "32",
            "--needles",
            "0",
            "--sink-tokens",
            "1",
            "--window",
            "4",
            "--limit",
            "2",
            "--db",
            str(db),
        ],
        [
            "ingest",
            "streaming",
            "--model",
            str(lm),
            "--text",
            str(text),
            "--sink-tokens",
            "0,1",
            "--window",
            "4",
            "--context-lengths",
            "16",
            "--limit",
            "2",
            "--db",
            str(db),
        ],
        [
            "ingest",
            "loss-curve",
            "--model",
            str(lm),
            "--text",
            str(text),
            "--context-length",
            "32",
            "--limit",
            "2",
            "--db",
            str(db),
        ],
        [
            "ingest",
            "massive-ablation",
            "--model",
            str(lm),
            "--text",
            str(text),
            "--context-length",
            "32",
            "--limit",
            "2",
            "--min-magnitude",
            "0",
            "--ratio",
            "3",
            "--db",
            str(db),
        ],
        [
            "ingest",
            "relations",
            "--conllu",
            str(conllu),
            "--framenet",
            str(framenet),
            "--model",
            str(bert),
            "--db",
            str(db),
            "--batch-size",
            "2",
        ],
    ]
    created: list[int] = []
    real_create = runs.create_run

    def counting_create(*args, **kwargs):
        state = real_create(*args, **kwargs)
        created.append(state.run_id)
        return state

    quiet = types.SimpleNamespace(readouterr=lambda: ("", ""))  # a module fixture has no capsys
    with MonkeyPatch.context() as mp:
        mp.setattr(runs, "create_run", counting_create)
        mp.setenv("COLUMNS", "200")
        for args in commands:
            code, _, _ = run(mp, quiet, *args)
            assert code == 0, args[:2]
        labels = synthetic_maps.write_warehouse(db, synthetic_maps.generate(2, 1))
        labels_csv = tmp / "labels.csv"
        labels_csv.write_text("run,example,layer,head,type\n" + "".join(",".join(map(str, r)) + "\n" for r in labels))
        code, _, _ = run(mp, quiet, "patterns", "import-labels", str(labels_csv), "--db", str(db))
        assert code == 0
    return db, created


def test_every_kind_is_there_and_every_run_came_from_create_run(every_kind):
    db, created = every_kind
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute("SELECT run_id, kind, run_key, status FROM runs ORDER BY run_id").fetchall()
        assert {r[1] for r in stored} == KINDS
        assert sorted(created) == [r[0] for r in stored]
        assert all(re.fullmatch(r"[0-9a-f]{32}", r[2]) for r in stored)
        assert all(r[3] == "complete" for r in stored)
        # Each table of run rows is filled by this warehouse, so the deletion test covers it;
        # but relation_sums, which holds a relations run's running totals only until the run
        # completes (a partial run's are checked in tests/test_engine_kinds.py).
        empty = [t for t in runs.run_tables(con) if not con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]]
        assert empty == ["relation_sums"]


def test_no_other_writer_of_runs_in_the_source():
    needle = re.compile(r"INSERT\s+(OR\s+\w+\s+)?INTO\s+runs\b", re.IGNORECASE)
    begin = re.compile(r"\.begin\(\)")
    writers, begins = [], []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in {".venv", "build", "dist"} or path.name == Path(__file__).name:
            continue
        text = path.read_text(encoding="utf-8")
        if needle.search(text):
            writers.append(str(rel))
        if begin.search(text):
            begins.append(str(rel))
    assert writers == [str(Path("sql") / "runs.py")]
    assert begins == [str(Path("sql") / "warehouse.py")]


def test_run_tables_come_from_the_schema(every_kind):
    db, _ = every_kind
    with duckdb.connect(str(db), read_only=True) as con:
        tables = set(runs.run_tables(con))
        assert {"finetunes", "scores", "head_stats", "pattern_labels", "ablations"} <= tables
        assert "runs" not in tables and "head_patterns" not in tables  # runs itself, and views, are not
        assert tables == _run_tables_from_schema(con) - {"runs"}


def test_deleting_a_run_of_each_kind_leaves_nothing_of_it(every_kind, tmp_path):
    source, _ = every_kind
    db = tmp_path / "w.duckdb"
    shutil.copy(source, db)
    con = duckdb.connect(str(db))
    try:
        tables = sorted(_run_tables_from_schema(con))
        assert "runs" in tables

        def rows_per_run() -> dict[int, int]:
            counts: dict[int, int] = {}
            for table in tables:
                for run_id, n in con.execute(f"SELECT run_id, count(*) FROM {table} GROUP BY run_id").fetchall():
                    counts[run_id] = counts.get(run_id, 0) + n
            return counts

        stored = con.execute("SELECT run_id, kind FROM runs ORDER BY run_id").fetchall()
        for run_id, kind in stored:
            before = rows_per_run()
            assert before[run_id] > 1, kind  # the run row and rows of its own
            with warehouse.transaction(con):
                runs.delete_run(con, run_id)
            after = rows_per_run()
            assert run_id not in after, kind
            assert after == {k: v for k, v in before.items() if k != run_id}, kind  # others untouched
        assert rows_per_run() == {}
    finally:
        con.close()


def test_the_synthetic_warehouse_runs_delete_cleanly(tmp_path):
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path / "s.duckdb"
    build_synthetic_warehouse(db, examples=2, layers=2, heads=2)
    con = duckdb.connect(str(db))
    try:
        kinds = dict(con.execute("SELECT kind, count(*) FROM runs GROUP BY kind").fetchall())
        assert kinds == {"statistics": 4, "compare": 2, "relations": 2, "ablation": 2}
        for (run_id,) in con.execute("SELECT run_id FROM runs").fetchall():
            runs.delete_run(con, run_id)
        tables = _run_tables_from_schema(con)
        assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in tables} == dict.fromkeys(
            tables, 0
        )
    finally:
        con.close()


FIELDS = {
    "model_id": 1,
    "dataset": "d",
    "task": "t",
    "split": "s",
    "source": "src",
    "seed": 0,
    "max_length": 8,
    "n_examples": 0,
    "n_truncated": 0,
    "device": "cpu",
    "dtype": "float32",
    "batch_size": 1,
    "versions": "{}",
}


def test_create_run_creates_resumes_replaces_and_refuses_another_kind(tmp_path):
    con = warehouse.connect(tmp_path / "w.duckdb")
    try:
        identity = {"weights": "w", "data": ["d", "t", "s"]}
        with warehouse.transaction(con):
            first = runs.create_run(con, "statistics", identity, FIELDS)
        assert (first.status, first.outcome, first.done) == ("new", "complete", frozenset())
        con.execute(
            "INSERT INTO run_examples (run_id, example_id, n_tokens, n_tokens_full, truncated) VALUES (?, 7, 3, 3, false)",
            [first.run_id],
        )
        runs.finish_run(con, first.run_id, "interrupted", 1.5)
        again = runs.create_run(con, "statistics", identity, FIELDS)
        assert (again.run_id, again.status, again.outcome, again.done) == (first.run_id, "interrupted", "resumed", {7})
        assert con.execute("SELECT status, seconds FROM runs").fetchall() == [("running", 1.5)]
        runs.finish_run(con, first.run_id, "complete", 2.0)
        assert con.execute("SELECT status, seconds FROM runs").fetchall() == [("complete", 3.5)]
        # Another kind with the same identity is another run.
        other = runs.create_run(con, "compare", identity, FIELDS)
        assert other.run_id != first.run_id and other.status == "new"
        with warehouse.transaction(con):
            replaced = runs.create_run(con, "statistics", identity, FIELDS, replace=True)
        assert (replaced.status, replaced.outcome) == ("replaced", "replaced") and replaced.run_id != first.run_id
        assert con.execute("SELECT count(*) FROM run_examples").fetchall()[0][0] == 0

        # A stored run under this key but of another kind (a hash collision, or a file
        # written by another recipe) is neither resumed nor replaced.
        con.execute("UPDATE runs SET kind = 'ablation' WHERE run_id = ?", [replaced.run_id])
        for replace in (False, True):
            with pytest.raises(AttnwhError, match="is a ablation run"):
                runs.create_run(con, "statistics", identity, FIELDS, replace=replace)
        assert con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [replaced.run_id]).fetchall()[0][0] == 1
        with pytest.raises(ValueError):
            runs.create_run(con, "statistics", identity, {**FIELDS, "status": "complete"})
    finally:
        con.close()


def test_an_identity_naming_another_kind_is_refused():
    with pytest.raises(ValueError):
        runs.run_key("statistics", {"kind": "compare"})
    assert runs.run_key("compare", {"kind": "compare", "a": 1}) == runs.run_key("compare", {"a": 1})


def test_run_keys_are_the_ones_earlier_warehouses_hold(tmp_path):
    """Computed with the recipes before `attnwh.sql.runs` (blake2b-16 of the sorted JSON of
    the identity with its kind): a warehouse written then still resumes."""
    from attnwh.ingest.runs.ablation import AblationOptions, ablation_identity
    from attnwh.ingest.runs.relations import run_identity

    statistics = {
        "kind": "statistics",
        "weights": "ab" * 32,
        "name": "bert-base-uncased",
        "data": ["glue", "sst2", "validation"],
        "examples": "0" * 32,
        "max_length": 128,
        "dtype": "torch.float32",
    }
    assert runs.run_key("statistics", statistics) == "c66c4f1dbd5e3a329e9624ca0c50339c"
    encoder = types.SimpleNamespace(weights_hash="ab" * 32, name="bert-base-uncased", dtype="torch.float32")
    prepared = {k: v for k, v in statistics.items() if k not in ("kind", "weights", "name")}
    ablation = {**ablation_identity(encoder, AblationOptions()), **prepared}
    assert runs.run_key("ablation", ablation) == "913b79ba2b265f05e261e2f22a5d81e3"

    conllu = tmp_path / "t.conllu"
    conllu.write_text("1\tA\ta\tDET\t_\t_\t0\troot\t_\t_\n", encoding="utf-8")
    tiny = types.SimpleNamespace(weights_hash="cd" * 32, name="tiny/bert", dtype="torch.float32")
    dependencies = run_identity(tiny, conllu, None, 42, measures="dependencies+features")
    assert runs.run_key("relations", dependencies) == "d6ad3e65c9ea81769b7e3212373ac069"
    frames = run_identity(tiny, conllu, 5, 1, measures="frames", filters=[12, 3, 2])
    assert runs.run_key("relations", frames) == "82b3952e8f576b3bd4b1b06a573ae862"


def test_insert_arrow_and_transaction(tmp_path):
    import pyarrow as pa

    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    try:
        con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v VARCHAR DEFAULT 'd')")
        warehouse.insert_arrow(con, "t", {"k": [1, 2]})
        warehouse.insert_arrow(con, "t", pa.table({"v": ["x", "y"], "k": [2, 3]}), or_ignore=True)
        assert con.execute("SELECT * FROM t ORDER BY k").fetchall() == [(1, "d"), (2, "d"), (3, "y")]
        with pytest.raises(duckdb.ConstraintException):
            warehouse.insert_arrow(con, "t", {"k": [4, 1]})
        with pytest.raises(KeyboardInterrupt), warehouse.transaction(con):
            warehouse.insert_arrow(con, "t", {"k": [5]})
            raise KeyboardInterrupt
        assert con.execute("SELECT max(k) FROM t").fetchall() == [(3,)]
        # Nothing stays registered, even after a failed insert.
        names = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() UNION ALL "
                "SELECT view_name FROM duckdb_views() WHERE NOT internal"
            ).fetchall()
        ]
        assert names == ["t"]
    finally:
        con.close()


def test_a_known_model_keeps_the_folder_it_was_last_loaded_from(tmp_path):
    """models.folder follows a checkpoint that moved (same name and weights, loaded from another
    folder); a run that gives no folder (a hub model) leaves it as it was."""
    con = warehouse.connect(tmp_path / "w.duckdb")
    try:
        facts = {"name": "models/tuned", "weights_hash": "ab", "family": "bert", "architecture": "BertModel"}
        facts |= {"num_layers": 2, "num_heads": 4, "hidden_size": 32, "max_length": 64}
        first = runs.upsert_model(con, facts | {"folder": "/a/models/tuned"})
        assert runs.upsert_model(con, facts | {"folder": "/b/models/tuned"}) == first
        assert runs.upsert_model(con, facts | {"folder": None}) == first
        rows = con.execute("SELECT model_id, folder FROM models").fetchall()
    finally:
        con.close()
    assert rows == [(first, "/b/models/tuned")]
