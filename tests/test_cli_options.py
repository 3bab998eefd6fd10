"""The option vocabulary is one: --db and --device mean the same in every command, and options
given where they would be ignored are refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from attnwh.cli import app
from attnwh.options import Device
from helpers import run


def _commands() -> dict:
    """Every command of the app by its path, groups included (bare `attnwh ingest` runs too)."""
    found = {}

    def walk(command, path: str) -> None:
        found[path] = command
        if hasattr(command, "commands"):  # a group
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "attnwh")
    return found


def _param(command, name: str):
    return next((p for p in command.params if p.name == name), None)


def test_every_db_option_reads_attnwh_db_with_one_default():
    with_db = {path: _param(c, "db") for path, c in _commands().items() if _param(c, "db") is not None}
    assert set(with_db) == {
        "attnwh ingest",
        "attnwh ingest compare",
        "attnwh ingest relations",
        "attnwh ingest ablation",
        "attnwh ingest roles",
        "attnwh ingest restriction",
        "attnwh ingest streaming",
        "attnwh ingest massive-ablation",
        "attnwh ingest loss-curve",
        "attnwh sql",
        "attnwh query",
        "attnwh schema",
        "attnwh status",
        "attnwh merge",
        "attnwh report",
        "attnwh report results",
        "attnwh show",
        "attnwh finetune",
        "attnwh study",
        "attnwh patterns reclassify",
        "attnwh patterns label",
        "attnwh patterns calibrate",
        "attnwh patterns import-labels",
        "attnwh patterns train",
    }
    for path, param in with_db.items():
        assert param.opts == ["--db"], path
        assert param.envvar == "ATTNWH_DB", path
        assert param.default == Path("attnwh.duckdb"), path


def test_every_device_option_is_one_choice():
    devices = {path: _param(c, "device") for path, c in _commands().items() if _param(c, "device") is not None}
    assert {
        "attnwh ingest",
        "attnwh ingest compare",
        "attnwh ingest ablation",
        "attnwh ingest relations",
        "attnwh finetune",
        "attnwh study",
    } <= set(devices)
    for path, param in devices.items():
        assert param.default is Device.auto, path


@pytest.mark.parametrize(
    "command",
    [
        ["finetune", "--out", "M"],
        ["ingest"],
        ["ingest", "compare", "--tuned", "x"],
        ["ingest", "relations"],
        ["ingest", "ablation", "--model", "x"],
        ["study"],
    ],
)
def test_an_unknown_device_is_refused_in_one_line(monkeypatch, capsys, tmp_path, command):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(monkeypatch, capsys, *command, "--device", "tpu", "--db", str(tmp_path / "w.duckdb"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'tpu' is not one of" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("before", "message"),
    [
        (["--limit", "3"], "--limit belongs after 'compare'"),
        (["--no-truncate"], "--truncate/--no-truncate belongs after 'compare'"),
        (["--db", "OTHER"], "--db belongs after 'compare'"),
        (["--thumbnails", "5"], "--thumbnails is an option of bare `attnwh ingest`"),
    ],
)
def test_options_before_a_subcommand_are_refused(monkeypatch, capsys, tmp_path, before, message):
    db = tmp_path / "w.duckdb"
    monkeypatch.chdir(tmp_path)
    code, out, err = run(monkeypatch, capsys, "ingest", *before, "compare", "--tuned", "some-model", "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert err.startswith("attnwh: error:") and out == ""
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the warehouse


def test_attnwh_db_from_the_environment_is_no_option_before_a_subcommand(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("ATTNWH_DB", str(tmp_path / "w.duckdb"))
    code, _, err = run(monkeypatch, capsys, "ingest", "relations")
    assert code == 2 and "give --conllu FILE, --framenet FILE or both" in err, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "--dataset-config", "sst2"], "--dataset-config goes with --dataset"),
        (
            ["ingest", "compare", "--tuned", "x", "--text-column", "s"],
            "--text-column names a column of --data or --dataset",
        ),
        (["ingest", "ablation", "--model", "x", "--label-column", "l", "--task", "sentiment"], "--label-column"),
        (["patterns", "reclassify", "--model-id", "1"], "--model-id picks a trained CNN"),
        (["finetune", "--out", "tuned", "--task", "sst2,rte"], "attnwh finetune trains on one task"),
    ],
)
def test_options_that_would_be_ignored_are_refused(monkeypatch, capsys, tmp_path, args, message):
    db = tmp_path / "w.duckdb"
    code, _, err = run(monkeypatch, capsys, *args, "--db", str(db))
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not db.exists()


def test_the_shard_options_say_which_count_from_0_and_which_from_1():
    commands = _commands()
    for path in ("attnwh ingest", "attnwh ingest compare", "attnwh ingest ablation"):
        command = commands[path]
        assert "I counted from 1" in _param(command, "shard").help, path
        assert "I counted from 0" in _param(command, "shard_index").help, path
        assert _param(command, "shards").opts == ["--shards"], path
        names = [p.name for p in command.params]
        assert names.index("shard") + 1 == names.index("shard_index") == names.index("shards") - 1, path
    assert _param(commands["attnwh study"], "shard_index") is None  # the study takes no static shard
