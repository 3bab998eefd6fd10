"""Schema migrations: numbered 1..N without gaps, applied in order, and a file made by any
earlier version upgrades to the latest with its rows kept."""

from __future__ import annotations

import re
from importlib import resources

import duckdb
import pytest

from attnwh.sql import runs, warehouse

# Rows written into a file at each version, into the tables that version has (column lists
# name only that version's columns: later migrations add some).
ROWS: dict[int, list[str]] = {
    1: [
        "INSERT INTO models (model_id, name, weights_hash, family, architecture, num_layers, num_heads, hidden_size,"
        " max_length) VALUES (1, 'tiny/bert', 'ab', 'bert', 'BertModel', 2, 4, 32, 64)",
        "INSERT INTO examples VALUES (7, 'd', 't', 'dev', 0, NULL, 'A sentence.', NULL, 'yes', 1)",
        "INSERT INTO run_examples (run_id, example_id, n_tokens, n_tokens_full, truncated) VALUES ({run}, 7, 5, 5, false)",
        "INSERT INTO head_stats (run_id, example_id, layer, head, to_cls, to_sep, to_punct, to_self, to_prev, to_next,"
        " entropy, max_weight, norm_to_cls, norm_to_sep, norm_to_punct)"
        " VALUES ({run}, 7, 0, 0, 0.1, 0.2, 0.3, 0.1, 0.1, 0.1, 1.0, 0.5, 0.1, 0.2, 0.3)",
    ],
    2: [
        "INSERT INTO finetunes (run_id, from_scratch, train_examples, epochs, learning_rate, warmup, train_seconds,"
        " final_loss, out_dir) VALUES ({run}, false, 10, 1.0, 5e-5, 0.1, 2.5, 0.6, '/tmp/tuned')",
        "INSERT INTO scores VALUES ({run}, 'accuracy', 0.75, 8)",
        "INSERT INTO attention_change VALUES ({run}, 7, 0, 0, 0.9)",
    ],
    3: [
        "INSERT INTO dependency_heads VALUES ({run}, 'det', 'dep_to_head', 0, 0, 3, 4, 0.75)",
        "INSERT INTO dependency_baselines VALUES ({run}, 'det', 1, 3, 4, 0.75)",
    ],
    4: [
        "INSERT INTO frame_heads VALUES ({run}, 'either', 0, 0, 2, 0.4, 50.0, 1)",
        "INSERT INTO frame_filters VALUES ({run}, 6, 1, 1, 1, 1, 2, 2, 2, 12, 3, 2)",
        "INSERT INTO feature_attention VALUES ({run}, 'noun', 0, 0, 3, 4, 0.1, 0.05, 0.1, 0.05)",
    ],
    5: [
        "INSERT INTO pattern_thumbnails (run_id, example_id, layer, head, n_tokens, thumbnail)"
        " VALUES ({run}, 7, 0, 0, 5, [0.5, 0.5]::FLOAT[])",
        "INSERT INTO pattern_labels (run_id, example_id, layer, head, pattern, source) VALUES ({run}, 7, 0, 0, 1, 'x.csv')",
        "INSERT INTO pattern_models (seed, epochs, n_train, n_test, f1_cnn, f1_rules, settings, weights)"
        " VALUES (1, 2, 3, 4, 0.5, 0.4, '{{}}', '\\x00'::BLOB)",
    ],
    6: [
        "INSERT INTO ablation_configs VALUES ({run}, 0, 'baseline', 'uniform', NULL, NULL, NULL, 0, '')",
        "INSERT INTO ablation_predictions VALUES ({run}, 0, 7, 1.0, true)",
        "INSERT INTO ablations VALUES ({run}, 0, 'accuracy', 0.8, 0.8, 0.0, 0.0, 0.0, 1.0, NULL, 'mcnemar-exact', 8, 100)",
        "INSERT INTO head_importance VALUES ({run}, 0, 0, 0.1, 1.0, 8)",
    ],
    7: [],  # comments only (0007_comments.sql): no new table
    8: [],  # views only (0008_readable_views.sql): no new table
    9: [],  # a column of finetunes (0009_finetune_eval_split.sql): no new table
    10: [],  # a comment (0010_shards.sql): no new table
    11: [
        "INSERT INTO head_mixing (run_id, example_id, layer, head, rn_to_cls) VALUES ({run}, 7, 0, 0, 0.2)",
        "INSERT INTO layer_mixing (run_id, example_id, layer, mixing_ratio) VALUES ({run}, 7, 0, 0.3)",
        "INSERT INTO massive_activations VALUES ({run}, 7, 0, 1, 120.5, 3, 0, '[CLS]', 0.1)",
    ],
    12: [
        "INSERT INTO pattern_maps VALUES ({run}, 7, 0, 0, 2, [0.5, 0.5, 0.1, 0.9]::FLOAT[])",
        "INSERT INTO example_tokens VALUES ({run}, 7, ['[CLS]', '[SEP]'])",
        "INSERT INTO pattern_thresholds (name, vertical, diagonal, mixed_vertical, mixed_diagonal, block,"
        " n_labels, folds, seed, cv_macro_f1, cv_agreement) VALUES ('fit', 0.4, 0.3, 0.2, 0.2, 0.6, 10, 5, 0, 0.7, 0.8)",
    ],
    13: [],  # look-feature columns of head_stats (0013_pattern_classifier.sql): no new table
    14: [],  # layer_mixing.mixing_share (0014_mixing_ratio.sql): no new table
    15: [],  # models.folder (0015_model_folder.sql): no new table
    16: [],  # models' decoder columns and the head_groups view (0016_decoders.sql): no new table
    17: [],  # runs.prompt (0017_prompts.sql): no new table
    18: [],  # run_examples.token_ids (0018_run_token_ids.sql): no new table
    19: [],  # comments on value zeroing's columns (0019_decoder_value_zeroing.sql): no new table
    20: [],  # dependency_baselines per direction (0020_decoder_relations.sql): no new table
    21: ["INSERT INTO prompt_predictions VALUES ({run}, 7, 1, true, [0.1, 0.7]::REAL[])"],
    22: [
        "INSERT INTO role_settings VALUES ({run}, 'needle', 64, NULL, 300, [0.0, 0.5]::DOUBLE[], 'ab')",
        "INSERT INTO role_probes VALUES ({run}, 7, 0, 'needle', 42, 0.5, [1, 5, 9]::INTEGER[], '{{\"needle\": [1, 2]}}')",
        "INSERT INTO head_roles VALUES ({run}, 7, 1, 2, 0.3, NULL, NULL, 0.25, 0.5, 0.9)",
    ],
    23: ["INSERT INTO ablation_losses VALUES ({run}, 0, 7, 'all', 12.5, 5)"],
    24: [
        "INSERT INTO restriction_runs VALUES ({run}, 4, 64, 1024, 32768, 'bfloat16', 8, 8184, 2.5, 100, 10, 1000, 0)",
        "INSERT INTO restriction_groups VALUES ({run}, 0, 1, 1, 2.6, 0.1, 0.05, 0.15, 0.01, 0.02, 50)",
        "INSERT INTO restriction_plan VALUES ({run}, 1, [{{'layer': 0, 'kv_group': 1}}], 2.6, 0.1, 0.05, 0.15, 0.01, 50, 9)",
        "INSERT INTO restriction_losses VALUES ({run}, 'group', 0, 1, NULL, 0, 2660.4, 1023)",
    ],
    25: [],  # the restriction tables' needle columns (0025_restriction_needles.sql): no new table
    26: [
        "INSERT INTO model_layers VALUES (1, 0, 'attention', true, 'BertSelfAttention', NULL, NULL, false, false, false)"
    ],
    27: [],  # restriction_losses.example_id (0027_restriction_units.sql): no new table
    28: [],  # the readable views' to_first_token (0028_first_token.sql): no new table
    29: [
        "INSERT INTO relation_sums VALUES ({run}, '000000', 'dependencies', 'correct', 'nsubj', 'int64', [2], [1.0, 3.0])"
    ],
    30: [],  # the comments of the random and text probe kinds (0030_sink_probes.sql): no new table
    31: [
        "INSERT INTO massive_ablation_runs VALUES ({run}, 100, 1000, 0.5, 256, 20, 5100, 1000, 0)",
        "INSERT INTO massive_ablation_entries VALUES ({run}, 2, 507, 'first token', -2.6e4, 2.6e4, 2.7e4, 0.2, 20, 20)",
        "INSERT INTO massive_ablation_sites VALUES ({run}, 0, 7, 2, 507, 'first token', 0, -2.6e4)",
        "INSERT INTO massive_ablation_losses VALUES ({run}, 'zero', 0, 7, 2660.4, 255)",
        "INSERT INTO massive_ablation_results VALUES ({run}, 'zero', 9.5, 7.0, 6.5, 7.5, 0.001)",
    ],
    32: ["INSERT INTO position_losses VALUES ({run}, 7, 0, 1, 42, 3.5)"],
    33: [
        "INSERT INTO streaming_losses VALUES ({run}, 7, 256, 0, NULL, 64, 128, 190.5, 64)",
        "INSERT INTO streaming_results VALUES ({run}, 256, 4, 64, 8, 2040, 3.1, 3.0, 0.1, 0.05, 0.15, 0.01,"
        " 0, -0.2, -0.3, -0.1, 0.01)",
    ],
    34: [],  # ablation_configs' set columns and ablation_losses.correct (0034_head_sets.sql): no new table
}
# Tables whose rows a later migration multiplies: 0020 mirrors each dependency_baselines row
# (dep_to_head) into head_to_dep.
ROWS_AFTER = {"dependency_baselines": 2}
# The columns migration 34 appends to the ablation tables, as a file at 34 or later has them.
SET_VALUES = {"ablation_configs": ", NULL, NULL, NULL", "ablation_losses": ", NULL"}
# The columns migration 25 appends to the restriction tables, as a file at 25 or later has them.
NEEDLE_VALUES = {
    "restriction_runs": ", 0, NULL, NULL, NULL, NULL, NULL",
    "restriction_groups": ", NULL, NULL",
    "restriction_plan": ", NULL, NULL",
    "restriction_losses": ", 'text', NULL",
}


def _as_of(sql: str, version: int) -> str:
    """`sql` as attnwh at `version` writes it: from migration 20 on, a baseline has a direction;
    from 25 on, the restriction tables have their needle columns; from 27 on, a restriction
    loss names its example; from 34 on, a configuration has its set's label, draw and roles
    run, and a loss its greedy hits."""
    if version >= 20 and _table(sql) == "dependency_baselines":
        return sql.replace("'det', ", "'det', 'dep_to_head', ")
    if version >= 25 and _table(sql) in NEEDLE_VALUES:
        sql = sql[: sql.rindex(")")] + NEEDLE_VALUES[_table(sql)] + ")"
    if version >= 27 and _table(sql) == "restriction_losses":
        sql = sql[: sql.rindex(")")] + ", 7)"
    if version >= 34 and _table(sql) in SET_VALUES:
        sql = sql[: sql.rindex(")")] + SET_VALUES[_table(sql)] + ")"
    return sql


def _table(sql: str) -> str:
    return re.match(r"INSERT INTO (\w+)", sql).group(1)


def test_migrations_are_numbered_one_to_n_without_gaps():
    found = warehouse.migrations()
    assert [m[0] for m in found] == list(range(1, len(found) + 1))
    files = sorted(e.name for e in (resources.files("attnwh.sql") / "schema").iterdir() if e.name.endswith(".sql"))
    assert files == [f"{v:04d}_{name}.sql" for v, name, _ in found]  # every .sql file is a migration
    assert set(ROWS) == {m[0] for m in found}, "add the new migration's tables to ROWS"


def test_a_new_file_gets_every_migration_in_order(tmp_path):
    con = warehouse.connect(tmp_path / "w.duckdb")
    try:
        applied = con.execute("SELECT version, name FROM schema_migrations ORDER BY rowid").fetchall()  # as written
        assert applied == [(v, name) for v, name, _ in warehouse.migrations()]
    finally:
        con.close()


@pytest.mark.parametrize("version", range(len(warehouse.migrations())))
def test_a_file_of_an_earlier_version_upgrades_with_its_rows(tmp_path, version):
    """Migrations 1..version applied by hand (as that version of attnwh did), a row in each
    of its tables, then `connect`: the latest version, rows kept; a second connect changes
    nothing."""
    latest = warehouse.migrations()[-1][0]
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute(
            "CREATE TABLE schema_migrations "
            "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        for v, name, sql in warehouse.migrations()[:version]:
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, current_timestamp)", [v, name])
        run_id = None
        if version >= 1:
            for sql in ROWS[1][:2]:
                con.execute(sql)
            run_id = runs.create_run(
                con,
                "statistics",
                {"weights": "ab"},
                {
                    "model_id": 1,
                    "dataset": "d",
                    "task": "t",
                    "split": "dev",
                    "source": "f.tsv",
                    "seed": 42,
                    "max_length": 64,
                    "n_examples": 1,
                    "n_truncated": 0,
                    "device": "cpu",
                    "dtype": "float32",
                    "batch_size": 8,
                    "versions": "{}",
                },
            ).run_id
            runs.finish_run(con, run_id, "complete", 1.0)
        written = []
        for v in range(1, version + 1):
            for sql in ROWS[v]:
                if v == 1 and sql in ROWS[1][:2]:
                    written.append(_table(sql))
                    continue
                con.execute(_as_of(sql, version).format(run=run_id))
                written.append(_table(sql))
        assert warehouse.schema_version(con) == version
    finally:
        con.close()

    for _ in range(2):  # the second connect finds nothing to do
        con = warehouse.connect(path)
        try:
            assert warehouse.schema_version(con) == latest
            assert [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()] == (
                list(range(1, latest + 1))
            )
            for table in written:
                expected = ROWS_AFTER.get(table, 1) if version < 20 else 1
                assert con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == expected, table
            if run_id is not None:
                assert con.execute("SELECT kind, status, seconds, base_model_id FROM runs").fetchall() == [
                    ("statistics", "complete", 1.0, None)
                ]
                assert con.execute("SELECT to_sep, pattern FROM head_stats").fetchall() == [(pytest.approx(0.2), None)]
            assert con.execute("SELECT count(*) FROM pattern_types").fetchall()[0][0] == 5
        finally:
            con.close()


def test_a_stored_offset_baseline_is_mirrored_into_head_to_dep(tmp_path):
    """Before migration 20 a relations run had one baseline per relation, the dep_to_head
    guess; on an encoder the head_to_dep one has the same counts and the negated offset."""
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute(
            "CREATE TABLE schema_migrations "
            "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        for v, name, sql in warehouse.migrations()[:19]:
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, current_timestamp)", [v, name])
        con.execute(ROWS[3][1].format(run=1))
    finally:
        con.close()
    con = warehouse.connect(path)
    try:
        rows = con.execute("SELECT * FROM dependency_baselines ORDER BY direction").fetchall()
        assert rows == [(1, "det", "dep_to_head", 1, 3, 4, 0.75), (1, "det", "head_to_dep", -1, 3, 4, 0.75)]
    finally:
        con.close()


def test_the_old_mixing_ratio_moves_to_mixing_share(tmp_path):
    """Before migration 14, layer_mixing.mixing_ratio held the share of summed norms: it moves
    to mixing_share, and the ratio of summed vectors, which stored rows cannot give, is NULL."""
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute(
            "CREATE TABLE schema_migrations "
            "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        for v, name, sql in warehouse.migrations()[:13]:
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, current_timestamp)", [v, name])
        con.execute(ROWS[11][1].format(run=1))
    finally:
        con.close()
    con = warehouse.connect(path)
    try:
        rows = con.execute("SELECT mixing_ratio, mixing_share FROM layer_mixing").fetchall()
        assert rows == [(None, pytest.approx(0.3))]
    finally:
        con.close()


def test_a_tuned_models_folder_comes_from_its_fine_tuning_run(tmp_path):
    """Before migration 15 models had no folder: a fine-tuned model's is the absolute out_dir
    its fine-tuning run recorded; another model's (a statistics run's) stays unknown."""
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute(
            "CREATE TABLE schema_migrations "
            "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        for v, name, sql in warehouse.migrations()[:14]:
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?, current_timestamp)", [v, name])
        con.execute(ROWS[1][0])  # model 1: 'tiny/bert'
        con.execute(ROWS[1][0].replace("(1, 'tiny/bert'", "(2, 'attnwh-models/rte'"))
        fields = {"dataset": "d", "task": "t", "split": "dev", "source": "f.tsv", "seed": 42, "max_length": 64}
        fields |= {
            "n_examples": 1,
            "n_truncated": 0,
            "device": "cpu",
            "dtype": "float32",
            "batch_size": 8,
            "versions": "{}",
        }
        for kind, model_id in (("statistics", 1), ("finetune", 2)):
            run_id = runs.create_run(con, kind, {"model": model_id}, fields | {"model_id": model_id}).run_id
            con.execute(ROWS[2][0].format(run=run_id).replace("'/tmp/tuned'", f"'/runs/{kind}'"))
    finally:
        con.close()
    con = warehouse.connect(path)
    try:
        rows = con.execute("SELECT model_id, name, folder FROM models ORDER BY 1").fetchall()
    finally:
        con.close()
    assert rows == [(1, "tiny/bert", None), (2, "attnwh-models/rte", "/runs/finetune")]


def test_a_file_of_another_builds_migrations_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """A warehouse whose applied migration N is another than attnwh's N (written by another
    build) is refused before any migration runs on it, reading or writing, in one line."""
    from helpers import run

    db = tmp_path / "other.duckdb"
    latest = warehouse.migrations()[-1][0]
    con = warehouse.connect(db)
    con.execute("UPDATE schema_migrations SET name = 'someone_elses' WHERE version = ?", [latest - 1])
    con.execute("DELETE FROM schema_migrations WHERE version = ?", [latest])
    con.close()
    code, out, err = run(monkeypatch, capsys, "sql", "SELECT 1", "--db", str(db))
    assert code == 2 and err.count("\n") == 1, err
    assert f"its migration {latest - 1} is 'someone_elses'" in err and "another build of attnwh" in err
    with pytest.raises(warehouse.ForeignSchema, match=str(db)):
        warehouse.connect(db)
