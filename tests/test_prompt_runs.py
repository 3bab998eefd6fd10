"""Runs read through a GLUE prompt on a tiny Llama: `attnwh ingest --prompt` measures the
statistics of the rendered prompts (equal to HF eager output_attentions over the prompt's
token ids, which it stores for `attnwh show`), reads the prompt's answer in the same pass
(equal to the eager model's label-word logits), records the prompt and resumes by it; the
prompted ablation sweep and prompted statistics in static shards merge to the single
process's rows. (On Ray: tests/test_ray_engine.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS
from attnwh.ingest.sources.files import load_sample
from attnwh.ingest.sources.prompts import make_prompt
from helpers import run
from test_decoder_ablation import HEADS, LAYERS, make_causal_lm
from test_decoders import check_example, decoder_reference
from test_shards import DECODER_STATS, assert_same_rows, fetch, merge, sharded

LIMIT = 4  # examples per sample task: sentiment (single sentences) and entailment (pairs)
PROMPT = ["--prompt", "--label-words", "the,dog", "--shots", "1", "--shot-seed", "3"]
COMMON = ["--limit", str(LIMIT), "--batch-size", "3", "--device", "cpu", "--thumbnails", "2"]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    # 512 positions: the tiny byte-level vocabulary makes long prompts, none cut here.
    return make_causal_lm("llama", tmp_path_factory.mktemp("prompted-llama"), positions=512)


@pytest.fixture(scope="module")
def prompted_db(lm, tmp_path_factory) -> Path:
    """A warehouse of `attnwh ingest --prompt` on both sample tasks."""
    from helpers import cli_main

    db = tmp_path_factory.mktemp("prompted") / "w.duckdb"
    cli_main("ingest", "--model", str(lm), "--db", str(db), *PROMPT, *COMMON)
    return db


def stats_of(db: Path, run_id: int) -> dict[int, np.ndarray]:
    """Each example's (layer, head, column) values of run `run_id`, NULL as NaN."""
    columns = ", ".join(OBSERVED_COLUMNS)
    with duckdb.connect(str(db), read_only=True) as con:
        found = con.execute(
            f"SELECT example_id, layer, head, {columns} FROM head_stats WHERE run_id = ? ORDER BY ALL", [run_id]
        ).fetchall()
    out: dict[int, np.ndarray] = {}
    for example_id, layer, head, *values in found:
        grid = out.setdefault(example_id, np.full((LAYERS, HEADS, len(OBSERVED_COLUMNS)), np.nan))
        grid[layer, head] = [np.nan if v is None else v for v in values]
    return out


def test_statistics_are_those_of_the_rendered_prompt_and_the_answer_is_the_eager_models(lm, prompted_db):
    tokenizer = AutoTokenizer.from_pretrained(lm)
    eager = AutoModelForCausalLM.from_pretrained(lm, attn_implementation="eager").eval()
    runs = fetch(prompted_db, "SELECT run_id, task, kind, prompt FROM runs ORDER BY run_id")
    assert [(task, kind) for _, task, kind, _ in runs] == [("sentiment", "statistics"), ("entailment", "statistics")]
    for run_id, task, _, described in runs:
        prompt_json = json.loads(described)
        assert prompt_json["label_words"] == [" the", " dog"] and prompt_json["shots"] == 1
        assert prompt_json["seed"] == 3 and len(prompt_json["shot_examples"]) == 1
        # The prompt rendered here, independently: the same shots (seed 3, the train split).
        dev = load_sample(task, "dev")
        prompt = make_prompt(dev, 1, load_sample(task, "train"), 3, [" the", " dog"])
        by_position = {e.position: e for e in dev.examples}
        stored = fetch(
            prompted_db,
            "SELECT x.example_id, e.position, x.token_ids, e.label_id FROM run_examples AS x "
            f"JOIN examples AS e USING (example_id) WHERE run_id = {run_id} ORDER BY e.position",
        )
        assert len(stored) == LIMIT
        assert fetch(prompted_db, f"SELECT n_truncated FROM runs WHERE run_id = {run_id}") == [(0,)]
        stats = stats_of(prompted_db, run_id)
        answers = dict(
            (e, (p, c, logits))
            for e, p, c, logits in fetch(
                prompted_db,
                f"SELECT example_id, prediction, correct, logits FROM prompt_predictions WHERE run_id = {run_id}",
            )
        )
        assert answers.keys() == stats.keys() == {e for e, *_ in stored}
        label_ids = prompt_json["label_token_ids"]
        correct = []
        for example_id, position, ids, gold in stored:
            text = prompt.prefix + prompt.template.render(by_position[position])
            assert "Answer:" in text or "Sentiment:" in text
            expected_ids = [tokenizer.bos_token_id] + tokenizer(prompt.prefix, add_special_tokens=False)["input_ids"]
            expected_ids += tokenizer(prompt.template.render(by_position[position]), add_special_tokens=False)[
                "input_ids"
            ]
            assert ids == expected_ids
            check_example("llama", stats[example_id], decoder_reference(eager, tokenizer, ids), f"{task} {position}")
            with torch.no_grad():
                logits = eager(input_ids=torch.tensor([ids])).logits[0, -1, label_ids].numpy()
            prediction, right, stored_logits = answers[example_id]
            np.testing.assert_allclose(stored_logits, logits, atol=1e-5, rtol=0)
            assert prediction == int(np.argmax(logits)) and right == (prediction == gold)
            correct.append(right)
        assert fetch(prompted_db, f"SELECT metric, value, n_examples FROM scores WHERE run_id = {run_id}") == [
            ("accuracy", pytest.approx(np.mean(correct)), LIMIT)
        ]


def test_show_redraws_the_prompt_of_a_pair_example(prompted_db, lm):
    """An entailment pair read through its prompt is one segment: the page's tokens are the
    stored prompt's, not the pair's text tokenized again."""
    from attnwh.api import Warehouse

    [(run_id, example_id, ids)] = fetch(
        prompted_db,
        "SELECT run_id, example_id, token_ids FROM run_examples JOIN runs USING (run_id) "
        "WHERE task = 'entailment' ORDER BY example_id LIMIT 1",
    )
    maps = Warehouse(prompted_db).example_maps(run_id, example_id, model=str(lm), device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(lm)
    assert maps.tokens == tokenizer.convert_ids_to_tokens(ids) and len(ids) > 40
    assert maps.maps["weights"].shape[-1] == len(ids)


def test_a_rerun_resumes_by_its_prompt_and_another_prompt_is_another_run(
    lm, prompted_db, tmp_path, monkeypatch, capsys
):
    db = tmp_path / "w.duckdb"
    db.write_bytes(prompted_db.read_bytes())
    before = fetch(db, "SELECT count(*) FROM head_stats"), fetch(db, "SELECT * FROM prompt_predictions ORDER BY ALL")
    code, out, err = run(monkeypatch, capsys, "ingest", "--model", str(lm), "--db", str(db), *PROMPT, *COMMON)
    assert code == 0, err
    assert out.count("already complete") == 2
    # Interrupted after some examples: the rerun writes the others only.
    with duckdb.connect(str(db)) as con:
        dropped = "example_id IN (SELECT example_id FROM run_examples WHERE run_id = 1 ORDER BY example_id LIMIT 2)"
        for table in ("head_stats", "prompt_predictions", "pattern_thumbnails", "massive_activations"):
            con.execute(f"DELETE FROM {table} WHERE run_id = 1 AND {dropped}")
        con.execute(f"DELETE FROM run_examples WHERE run_id = 1 AND {dropped}")
        con.execute("DELETE FROM scores WHERE run_id = 1")
        con.execute("UPDATE runs SET status = 'interrupted' WHERE run_id = 1")
    code, out, err = run(monkeypatch, capsys, "ingest", "--model", str(lm), "--db", str(db), *PROMPT, *COMMON)
    assert code == 0, err
    assert "resumed" in out and "already complete" in out
    after = fetch(db, "SELECT count(*) FROM head_stats"), fetch(db, "SELECT * FROM prompt_predictions ORDER BY ALL")
    assert after[0] == before[0] and len(after[1]) == len(before[1])
    for a, b in zip(after[1], before[1]):
        assert a[:4] == b[:4]
        np.testing.assert_allclose(a[4], b[4], atol=1e-6)
    assert fetch(db, "SELECT count(*) FROM scores") == [(2,)]
    # Another prompt (other label words) is another run; the plain statistics are another still.
    code, out, err = run(monkeypatch, capsys, "ingest", "--model", str(lm), "--db", str(db), "--task", "sentiment",
                         "--prompt", "--label-words", "a,dog", *COMMON)  # fmt: skip
    assert code == 0, err
    code, out, err = run(monkeypatch, capsys, "ingest", "--model", str(lm), "--db", str(db), "--task", "sentiment",
                         *COMMON)  # fmt: skip
    assert code == 0, err
    assert "prompt accuracy" not in out
    words = fetch(db, "SELECT prompt->>'label_words' FROM runs WHERE task = 'sentiment' ORDER BY run_id")
    assert words == [('[" the"," dog"]',), ('[" a"," dog"]',), (None,)]
    assert fetch(db, "SELECT count(*) FROM prompt_predictions WHERE run_id = 4") == [(0,)]
    # A sweep through the first prompt takes its sink heads from the statistics of that prompt,
    # not from the later runs of the bare sentences or of another prompt.
    sweep = ["ingest", "ablation", "--model", str(lm), "--db", str(db), "--task", "sentiment", *PROMPT, *COMMON[:6]]
    code, out, err = run(monkeypatch, capsys, *sweep, "--resamples", "100", "--top-k", "1", "--no-importance")
    assert code == 0, err
    [(sweep_run,)] = fetch(db, "SELECT run_id FROM runs WHERE kind = 'ablation'")
    assert {
        s for (s,) in fetch(db, f"SELECT statistics_run FROM ablation_sink_scores WHERE ablation_run = {sweep_run}")
    } == {1}


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ("encoder", ["--task", "sentiment"], "is an encoder"),
        ("classifier", ["--task", "sentiment"], "is a fine-tuned classifier"),
        ("lm", ["--task", "stsb", "--glue-dir", "{glue}"], "stsb is a regression task"),
        ("lm", ["--text", "{text}"], "--text is plain text with no labels"),
        ("lm", ["--shots", "1"], "--shots, --shot-seed and --label-words go with --prompt"),
    ],
)
def test_ingest_refuses_what_cannot_be_read_through_a_prompt_in_one_line(
    lm, tmp_path, monkeypatch, capsys, model, extra, message
):
    from test_decoder_ablation import make_decoder_classifier
    from tiny_models import make_tiny

    folder = {
        "lm": lambda: lm,
        "classifier": lambda: make_decoder_classifier("gpt2", tmp_path),
        "encoder": lambda: make_tiny("bert", tmp_path / "bert"),
    }[model]()
    sts = tmp_path / "glue" / "STS-B"
    sts.mkdir(parents=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    (sts / "dev.tsv").write_text(header + "0\tg\tf\t2012\t0\tnone\tnone\tA dog.\tThe dog.\t3.800\n")
    (tmp_path / "prose.txt").write_text("Plain text has no labels.\n\nNone at all.\n")
    extra = [e.format(glue=tmp_path / "glue", text=tmp_path / "prose.txt") for e in extra]
    prompt = [] if "--shots" in extra else ["--prompt"]
    db = tmp_path / "w.duckdb"
    capsys.readouterr()  # what building the models printed
    code, out, err = run(monkeypatch, capsys, "ingest", "--model", str(folder), "--db", str(db), *prompt, *extra)
    assert code != 0
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not db.exists()


def test_a_prompted_sweep_in_static_shards_merges_to_the_single_process_rows(lm, tmp_path, monkeypatch, capsys):
    """Two `--shard` processes each render the prompts (the same shots, seed 3), load the
    language-model head and write their units; merged, the sweep's predictions and, once
    finished, its scores are the single process's."""
    args = ["ingest", "ablation", "--model", str(lm), "--task", "sentiment", *PROMPT, "--device", "cpu"]
    args += ["--limit", "6", "--batch-size", "3", "--resamples", "100", "--top-k", "2", "--no-importance"]
    single, merged, shard_dir = tmp_path / "single.duckdb", tmp_path / "merged.duckdb", tmp_path / "shards"
    code, _, err = run(monkeypatch, capsys, *args, "--db", str(single))
    assert code == 0, err
    sharded(monkeypatch, capsys, args, shard_dir, 2)
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    code, out, err = run(monkeypatch, capsys, *args, "--db", str(merged))  # the finish
    assert code == 0, err
    assert fetch(merged, "SELECT status, prompt IS NOT NULL FROM runs") == [("complete", True)]
    assert fetch(single, "SELECT run_key, prompt FROM runs") == fetch(merged, "SELECT run_key, prompt FROM runs")
    predictions = "SELECT config_id, example_id, prediction, correct FROM ablation_predictions ORDER BY ALL"
    assert len(fetch(single, predictions)) >= 6 * (1 + LAYERS * HEADS + LAYERS)
    assert fetch(single, predictions) == fetch(merged, predictions)
    scores = "SELECT config_id, metric, value, baseline, delta, ci_low, ci_high, p_value FROM ablations ORDER BY ALL"
    a, b = fetch(single, scores), fetch(merged, scores)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x[:2] == y[:2]
        np.testing.assert_allclose(np.array(x[2:], float), np.array(y[2:], float), atol=1e-12, equal_nan=True)


def test_prompted_statistics_in_static_shards_merge_to_the_single_process_rows(lm, tmp_path, monkeypatch, capsys):
    """The statistics and the prompt's answers of two shards merged, with the accuracy in scores."""
    stats = ["ingest", "--model", str(lm), "--task", "sentiment", *PROMPT, *COMMON]
    single, merged, shard_dir = tmp_path / "s1.duckdb", tmp_path / "m1.duckdb", tmp_path / "shards1"
    code, _, err = run(monkeypatch, capsys, *stats, "--db", str(single))
    assert code == 0, err
    sharded(monkeypatch, capsys, stats, shard_dir, 2)
    code, out, err = merge(monkeypatch, capsys, shard_dir, merged)
    assert code == 0, err
    assert_same_rows(single, merged, "head_stats", DECODER_STATS, LIMIT * LAYERS * HEADS)
    answers = "SELECT example_id, prediction, correct FROM prompt_predictions ORDER BY ALL"
    assert len(fetch(single, answers)) == LIMIT and fetch(single, answers) == fetch(merged, answers)
    assert fetch(single, "SELECT metric, value FROM scores") == fetch(merged, "SELECT metric, value FROM scores")


def test_a_worker_built_from_the_spec_reads_the_prompts_answers_as_the_driver(lm):
    """What a Ray worker of a prompted statistics run builds from its WorkerSpec: the model
    with its language-model head and each run's label words, giving the driver's rows."""
    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.runs.engine import build_worker, capture_spec
    from attnwh.ingest.runs.loop import IngestOptions, StatisticsCapture, _plan, prepare_tasks
    from attnwh.ingest.runs.prompted import prompted_task
    from attnwh.ingest.runs.units import CaptureWorker

    encoder = load_model(str(lm), "cpu", language_model=True)
    options = IngestOptions(limit=3, thumbnails=0)
    data = load_sample("sentiment", "dev")
    [task] = prepare_tasks(encoder, [data], options)
    task = prompted_task(encoder, task, make_prompt(task.data, 0, None, 42, [" the", " dog"]), options)
    capture = StatisticsCapture.for_options(encoder, options, [task])
    spec = capture_spec(capture)
    assert spec.language_model and spec.settings["label_ids"] == {
        task.run_key: task.identity["prompt"]["label_token_ids"]
    }
    worker = build_worker(spec, "cpu")
    [unit] = _plan(task, options, frozenset())
    here, there = CaptureWorker(capture).compute(unit), worker.compute(unit)
    assert here.tables["prompt_predictions"].num_rows == 3
    assert here.tables["prompt_predictions"].equals(there.tables["prompt_predictions"])
    assert here.tables["head_stats"].equals(there.tables["head_stats"])
