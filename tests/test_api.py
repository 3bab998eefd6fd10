"""The Python API (attnwh.api): each call gives the rows its command gives, the command line
takes its options (and their defaults) from the API's own signatures, plain Python values are
accepted, and errors are the command line's, as exceptions."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import click
import duckdb
import polars as pl
import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from attnwh import api
from attnwh.cli import app
from attnwh.cli.options import cli_command
from attnwh.errors import ModelError, UsageError
from attnwh.options import LimitOpt
from helpers import cli_main, ingest_args, run, write_pairs
from test_relations import CONLLU

COMMANDS = {
    ("ingest",): api.ingest,
    ("ingest", "compare"): api.compare,
    ("ingest", "relations"): api.relations,
    ("ingest", "ablation"): api.ablation,
    ("ingest", "massive-ablation"): api.massive_ablation,
    ("ingest", "streaming"): api.streaming,
    ("finetune",): api.finetune,
    ("study",): api.study,
    ("report",): api.report,
    ("show",): api.show,
}


def rows(db, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def click_command(path: tuple[str, ...]) -> click.Command:
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_command_takes_its_options_and_defaults_from_the_api(path):
    function = COMMANDS[path]
    signature = inspect.signature(function, eval_str=True)
    params = {p.name: p for p in click_command(path).params if p.name != "version"}
    assert set(params) == set(signature.parameters), path
    for name, p in signature.parameters.items():
        default = p.default
        if default is inspect.Parameter.empty:
            assert params[name].required, name
            continue
        shown = params[name].default
        # typer hands click an enum default's value, a list default as it is.
        expected = default.value if hasattr(default, "value") else default
        assert shown == expected, (name, shown, expected)


def test_a_default_changed_in_the_api_changes_the_command():
    """Nothing repeats a default: a command built from an API function parses with its default."""
    seen: list[int] = []

    @api.python_arguments
    def probe(limit: LimitOpt = 7) -> int:
        return limit

    probe_app = typer.Typer()
    probe_app.command()(cli_command(probe, seen.append))
    probe_app.command("other")(lambda: None)
    assert CliRunner().invoke(probe_app, ["probe"]).exit_code == 0
    assert seen == [7] and probe() == 7
    assert CliRunner().invoke(probe_app, ["probe", "--limit", "3"]).exit_code == 0
    assert seen == [7, 3]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, tiny_model_dir):
    """The same ingest, once through the command line and once through the API."""
    tmp = tmp_path_factory.mktemp("api")
    data = write_pairs(tmp / "pairs.tsv", 10)
    model = tiny_model_dir("bert")
    by_cli, by_api = tmp / "cli.duckdb", tmp / "api.duckdb"
    cli_main(*ingest_args(model, data, by_cli, "--limit", "8"))
    done = api.ingest(
        model=str(model),
        data=str(data),  # plain strings for paths
        text_column="premise",
        pair_column="hypothesis",
        label_column="label",
        db=by_api,
        batch_size=5,
        limit=8,
        device="cpu",  # an enum's value
    )
    return model, data, by_cli, by_api, done


def test_ingest_through_the_api_stores_what_the_command_stores(ingested):
    model, _, by_cli, by_api, done = ingested
    assert isinstance(done, api.Done) and not done.sharded
    assert [s.outcome for s in done.results] == ["complete"] and done.results[0].n_written == 8
    # What it printed before it began is returned too, as plain text.
    assert done.header == f"{model} (bert, 2 layers × 4 heads) on cpu, 64 tokens max"
    table = "SELECT * EXCLUDE (run_id) FROM head_stats ORDER BY example_id, layer, head"
    assert rows(by_api, table) == rows(by_cli, table)
    assert len(rows(by_api, table)) == 8 * 2 * 4
    # Same settings, so the same run key: the API run resumes the command's and vice versa.
    assert rows(by_api, "SELECT run_key FROM runs") == rows(by_cli, "SELECT run_key FROM runs")


def test_warehouse_reads_give_the_rows_of_query_sql_and_schema(monkeypatch, capsys, ingested):
    _, _, by_cli, _, _ = ingested
    wh = api.Warehouse(by_cli)

    def cli_json(*args: str) -> list[dict]:
        code, out, err = run(monkeypatch, capsys, *args, "--db", str(by_cli), "-f", "json")
        assert code == 0, err
        return json.loads(out)

    frame = wh.query("head_summary")
    assert isinstance(frame, pl.DataFrame) and frame.height == 8
    assert frame.to_dicts() == cli_json("query", "head_summary")
    by_task = wh.query("special_tokens_by_layer", task="pairs")
    assert by_task.height == 2 and by_task.to_dicts() == cli_json(
        "query", "special_tokens_by_layer", "-p", "task=pairs"
    )
    statement = "SELECT layer, avg(to_sep) AS s FROM head_stats GROUP BY ALL ORDER BY ALL"
    assert wh.sql(statement).to_dicts() == cli_json("sql", statement)
    assert wh.schema("runs").to_dicts() == cli_json("schema", "runs")
    assert wh.runs()["run_id"].to_list() == [1]
    assert "head_examples" in wh.queries()["name"].to_list()
    assert wh.unmatched(task="nope") and "pairs" in wh.unmatched(task="nope")[0]


def test_report_charts_one_by_one(tmp_path, ingested):
    _, _, by_cli, _, _ = ingested
    wh = api.Warehouse(by_cli)
    charts = wh.charts()
    built = wh.build_report()
    assert list(charts) == [block.id for block in built.charts()]
    assert "chart-special-tokens-layers" in charts
    spec = charts["chart-special-tokens-layers"].to_dict()
    assert any(len(rows) > 0 for rows in spec["datasets"].values())  # drawn with its data inlined
    done = api.report(db=str(by_cli), out=tmp_path / "r.html")
    assert done.page.is_file() and done.images == []
    assert [b.id for b in done.report.charts()] == list(charts)


def test_show_through_the_api_and_the_command(monkeypatch, capsys, tmp_path, ingested):
    _, _, by_cli, _, _ = ingested
    ((example,),) = rows(by_cli, "SELECT min(example_id) FROM run_examples")
    view = api.Warehouse(by_cli).show(run=1, example=example, layer=1, lens="norm")
    assert '"layer":1,"lens":"norm"' in view.html and "[CLS]" in view.html
    assert view._repr_html_().startswith("<iframe")  # what Jupyter draws inline
    out = tmp_path / "one.html"
    code, stdout, err = run(
        monkeypatch, capsys, "show", "--run", "1", "--example", str(example), "--db", str(by_cli), "-o", str(out)
    )
    assert code == 0, err
    assert f"wrote {out}" in stdout
    page = out.read_text(encoding="utf-8")
    assert 'id="show-data"' in page and "http://" not in page.split("<script>")[0] and "[CLS]" in page
    code, _, err = run(monkeypatch, capsys, "show", "--run", "1", "--example", "5", "--db", str(by_cli))
    assert code == 2 and err.count("\n") == 1 and "not one of run 1's examples" in err


def test_relations_through_the_api(tmp_path, tiny_model_dir):
    conllu = tmp_path / "t.conllu"
    conllu.write_text(CONLLU, encoding="utf-8")
    done = api.relations(conllu=conllu, model=str(tiny_model_dir("bert")), db=tmp_path / "r.duckdb", device="cpu")
    assert len(done.results) == 1
    assert rows(tmp_path / "r.duckdb", "SELECT count(*) FROM dependency_heads")[0][0] > 0


def test_errors_are_the_command_lines_as_exceptions(tmp_path, ingested):
    _, _, by_cli, _, _ = ingested
    with pytest.raises(UsageError, match="no warehouse at"):
        api.Warehouse(tmp_path / "missing.duckdb")
    text = tmp_path / "table.csv"
    text.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(UsageError, match="not a DuckDB database"):
        api.Warehouse(text)
    with pytest.raises(UsageError, match="did you mean head_summary"):
        api.Warehouse(by_cli).query("head_sumary")
    with pytest.raises(ModelError):
        api.ingest(model=str(tmp_path / "no-model"), db=tmp_path / "w.duckdb")
    with pytest.raises(UsageError, match="device 'tpu' is not one of auto, cpu, cuda"):
        api.ingest(device="tpu", db=tmp_path / "w.duckdb")
    assert not (tmp_path / "w.duckdb").exists()  # nothing half-written


def test_db_that_is_not_a_warehouse_is_refused_from_python_too(tmp_path):
    csv = tmp_path / "ok.csv"
    csv.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(UsageError, match="not a DuckDB database"):
        api.ingest(task="sentiment", limit=3, db=str(csv))
    assert csv.read_text(encoding="utf-8") == "a,b\n1,2\n"


def test_compare_and_ablation_through_the_api_store_what_the_commands_store(tmp_path, tiny_model_dir):
    from tiny_models import make_sharp_classifier

    data = write_pairs(tmp_path / "pairs.tsv", 12)
    from test_compare import perturb_last_layer

    base = tiny_model_dir("bert")
    tuned = perturb_last_layer(base, tmp_path / "tuned")
    sharp = make_sharp_classifier("bert", tmp_path / "sharp", 2, 4)
    columns = {"data": data, "text_column": "premise", "pair_column": "hypothesis", "label_column": "label"}
    flags = ["--data", str(data), "--text-column", "premise", "--pair-column", "hypothesis", "--label-column", "label"]

    by_cli, by_api = tmp_path / "cli.duckdb", tmp_path / "api.duckdb"
    cli_main("ingest", "compare", "--base", str(base), "--tuned", str(tuned), *flags, "--db", str(by_cli))
    api.compare(tuned=str(tuned), base=str(base), db=by_api, **columns)
    table = "SELECT example_id, layer, head, cosine FROM attention_change ORDER BY ALL"
    assert rows(by_api, table) == rows(by_cli, table) and len(rows(by_api, table)) == 12 * 2 * 4

    sweep = ["--resamples", "200", "--top-k", "2"]
    cli_main("ingest", "ablation", "--model", str(sharp), *flags, *sweep, "--db", str(by_cli))
    done = api.ablation(model=str(sharp), resamples=200, top_k=2, db=by_api, mode="uniform", **columns)
    assert [s.run_id for s in done.results] == [2]
    predictions = "SELECT config_id, example_id, prediction, correct FROM ablation_predictions ORDER BY ALL"
    assert rows(by_api, predictions) == rows(by_cli, predictions)
    scores = "SELECT config_id, metric, value, delta, p_value FROM ablations ORDER BY ALL"
    assert rows(by_api, scores) == rows(by_cli, scores)


def test_the_api_imports_nothing_from_the_command_line():
    """The library's face stands alone: the command line is a shell over it, never the reverse."""
    code = "import sys, attnwh.api; print(sorted(m for m in sys.modules if m.startswith('attnwh.cli')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
