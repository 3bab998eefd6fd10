"""`attnwh report results --page decoder` on a tiny Llama read as the SmolLM2 page reads the real one:
statistics of the sample sentiment task, a prompted ablation sweep of it, the page written
with its parity check and charts; its numbers are the warehouse's, read here with plain SQL."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from helpers import cli_main
from test_decoder_ablation import HEADS, LAYERS, SWEEP, make_causal_lm


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("decoder-page")
    lm = make_causal_lm("llama", tmp, positions=256)
    db = tmp / "w.duckdb"
    common = ["--model", str(lm), "--task", "sentiment", "--db", str(db)]
    cli_main("ingest", *common, "--limit", "6", "--batch-size", "4", "--device", "cpu")
    cli_main(
        "ingest",
        *common,
        "--limit",
        "6",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--prompt",
        "--label-words",
        "the,dog",
    )
    cli_main("ingest", "ablation", *common, "--prompt", "--label-words", "the,dog", *SWEEP)
    out = tmp / "results" / "tiny.md"
    cli_main("report", "results", "--page", "decoder", "--db", str(db), "--name", "tiny-llama", "--model", str(lm),
             "--out", str(out))  # fmt: skip
    return db, out.read_text(encoding="utf-8")


def sql(db: Path, text: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(text).fetchall()


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_every_section_is_written_with_its_charts(page):
    db, text = page
    for title in (
        "Parity with transformers",
        "The first token by layer",
        "Sink heads",
        "Massive activations",
        "The task through a prompt",
        "Disabling heads and layers",
    ):
        assert f"\n## {title}\n" in text, title
    assert f"a llama decoder of {LAYERS} layers × {HEADS} query heads on 2 key/value heads" in text
    for chart in ("chart-special-tokens-layers", "chart-attention-sinks", "chart-ablation-heads"):
        link = re.search(rf"!\[{chart}\]\((\S+)\)", text)
        assert link and (db.parent / "results" / link[1]).stat().st_size > 1000, chart


def test_parity_is_within_float_rounding(page):
    _, text = page
    lines = section(text, "Parity with transformers").splitlines()
    row = lines[next(i for i, line in enumerate(lines) if line.startswith("| ---")) + 1]
    values = [float(v) for v in row.strip("| ").split(" | ")]
    assert len(values) == 4 and max(values) < 1e-5


def test_first_token_shares_and_sinks_are_the_warehouses(page):
    db, text = page
    per_layer = sql(
        db,
        "SELECT layer, avg(to_cls) FROM head_stats JOIN runs USING (run_id) WHERE kind = 'statistics' "
        "AND prompt IS NULL GROUP BY layer ORDER BY layer",
    )
    body = section(text, "The first token by layer")
    for layer, share in per_layer:
        assert f"| {layer} | {share:.3f} · " in body
    [(sinks,)] = sql(
        db,
        "SELECT count(*) FROM (SELECT layer, head FROM head_stats JOIN runs USING (run_id) "
        "WHERE kind = 'statistics' AND prompt IS NULL GROUP BY layer, head HAVING avg(to_cls) > 0.3)",
    )
    assert f"On sentiment: {sinks} of {LAYERS * HEADS} heads" in section(text, "Sink heads")
    assert "| layer | sentiment | sentiment prompts |" in body


def test_prompted_accuracy_and_ablation_counts_are_the_warehouses(page):
    db, text = page
    [(accuracy, n)] = sql(
        db,
        "SELECT avg(p.correct::INT), count(*) FROM ablation_predictions AS p JOIN ablation_configs AS c "
        "USING (run_id, config_id) WHERE c.kind = 'baseline'",
    )
    prompt = section(text, "The task through a prompt")
    assert f"On {n} dev examples" in prompt and f"**accuracy {accuracy:.3f}**" in prompt
    assert "`Review: {text_a}⏎Sentiment:`, label words ` the`, ` dog`" in prompt
    # The prompted statistics run read the same answers in its own pass.
    [(run, read)] = sql(db, "SELECT run_id, avg(correct::INT) FROM prompt_predictions GROUP BY run_id")
    assert read == pytest.approx(accuracy) and f"statistics run {run} through the same prompt" in prompt
    assert f"accuracy {read:.3f} on its {n} examples" in prompt
    sweep = section(text, "Disabling heads and layers")
    assert f"{LAYERS * HEADS} heads and {LAYERS} layers tested" in sweep
    [(worst_layer, worst)] = sql(
        db,
        "SELECT c.layer, avg(p.correct::INT) FROM ablation_predictions AS p JOIN ablation_configs AS c "
        "USING (run_id, config_id) WHERE c.kind = 'layer' GROUP BY c.layer ORDER BY c.layer LIMIT 1",
    )
    assert f"| {worst_layer} | {worst:.3f} | {worst - accuracy:+.3f} |" in sweep


def test_sink_scores_of_a_decoders_sweep_name_its_first_token(page):
    """sink_vs_ablation pairs the sweep with the statistics run on its examples; a decoder's
    largest share is its first token's or punctuation's, never [CLS] or [SEP]."""
    from attnwh.api import Warehouse

    db, _ = page
    frame = Warehouse(db).query("sink_vs_ablation")
    assert frame.height == LAYERS * HEADS and frame["to_sep"].is_null().all()
    assert set(frame["sink_kind"]) <= {"first token", "punctuation"} and "first token" in set(frame["sink_kind"])
