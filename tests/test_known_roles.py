"""attnwh on the model whose answer is known: the two-layer attention-only decoder of
tests/fixtures/induction-2l (tools/train_induction.py), whose induction head and the
previous-token head it composes with are named in its known_answer.json (found there from
eager maps, independently of attnwh).

End to end through the CLI: `ingest roles` ranks that induction head first by induction
score and that previous-token head first by previous-token score; `ingest ablation --probe
induction` finds that disabling either raises the loss on the repeated halves by more than
1 nat while the first halves barely move; `ingest restriction` on repeated text finds that
restricting layer 0 (previous-token heads: their keys are within the window) costs nothing,
while the induction layer needs the whole context.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import torch

from helpers import cli_main

FIXTURE = Path(__file__).parent / "fixtures" / "induction-2l"
KNOWN: dict[str, Any] = json.loads((FIXTURE / "known_answer.json").read_text(encoding="utf-8"))
INDUCTION = tuple(KNOWN["induction_head"])
PREVIOUS = tuple(KNOWN["previous_token_head"])
HALF = 12  # words per half of the repeated text: longer than the restriction's window of 8


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """A model this small only synchronises a second intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("known")
    db = tmp / "known.duckdb"
    common = ("--model", str(FIXTURE), "--db", str(db))
    cli_main("ingest", "roles", *common, "--probes", "induction", "--examples", "16", "--repeat-length", "20")
    cli_main("ingest", "ablation", *common, "--probe", "induction", "--repeat-length", "20", "--limit", "16")
    # Random words, each half said twice, as one document; the model was trained on 64 words.
    rng = random.Random(0)
    words = []
    for _ in range(40):
        half = [f"t{rng.randrange(100)}" for _ in range(HALF)]
        words += half + half
    text = tmp / "repeated.txt"
    text.write_text(" ".join(words) + "\n", encoding="utf-8")
    cli_main(
        "ingest", "restriction", *common, "--text", str(text), "--sink-tokens", "1", "--window", "8",
        "--context-length", str(4 * HALF), "--needles", "0",
    )  # fmt: skip
    return db


def _rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_roles_rank_the_known_heads_first(warehouse):
    means = _rows(
        warehouse,
        "SELECT layer, head, avg(induction), avg(previous_token) FROM head_roles GROUP BY ALL ORDER BY layer, head",
    )
    # The fixture's two induction heads score 0.968 and 0.959 on its own probes: a margin too
    # small to rank them apart on 16 others. attnwh must find the same set, each head's score
    # close to the fixture's, and nothing else near it.
    known = KNOWN["scores"]
    for name, column in (("induction", 2), ("previous_token", 3)):
        found = {(r[0], r[1]) for r in means if r[column] > 0.5}
        expected = {(k, h) for k, row in enumerate(known[name]) for h, v in enumerate(row) if v > 0.5}
        assert found == expected, (name, found, expected)
        for layer, head, *scores in means:
            assert scores[column - 2] == pytest.approx(known[name][layer][head], abs=0.1), (name, layer, head)
    # Layer 0 holds no induction head: its keys cannot yet know what followed a token.
    assert all(r[2] < 0.05 for r in means if r[0] == 0)


def test_disabling_either_known_head_breaks_the_repeat_not_the_first_half(warehouse):
    effects = {
        (layer, head, metric): (delta, low)
        for layer, head, metric, delta, low in _rows(
            warehouse,
            "SELECT c.layer, c.head, a.metric, a.delta, a.ci_low FROM ablations AS a "
            "JOIN ablation_configs AS c USING (run_id, config_id) WHERE c.kind = 'head'",
        )
    }
    for layer, head in (INDUCTION, PREVIOUS):
        delta, low = effects[(layer, head, "loss:repeat")]
        assert delta > 1.0 and low > 1.0, (layer, head, delta, low)
        assert abs(effects[(layer, head, "loss:first")][0]) < 0.1


def test_the_induction_layer_needs_the_whole_context_and_layer_0_does_not(warehouse):
    groups = _rows(warehouse, "SELECT layer, kv_group, delta FROM restriction_groups ORDER BY rank")
    plan = {k: (delta, [g["layer"] for g in chosen]) for k, chosen, delta in _rows(
        warehouse, "SELECT k, groups, delta FROM restriction_plan")}  # fmt: skip
    # The most harmed group is the induction head's (one query head per key/value group here).
    assert (groups[-1][0], groups[-1][1]) == INDUCTION and groups[-1][2] > 0.5
    # Both layer-0 groups restricted together: their keys are within the window; nothing lost.
    delta, layers = plan[2]
    assert layers == [0, 0] and abs(delta) < 0.02
    assert plan[len(groups)][0] > 0.5


def test_a_window_one_key_short_of_the_induction_distance_breaks_it(warehouse, tmp_path):
    """On text whose halves repeat after HALF words, the induction head of a row in a second
    half reads the key HALF − 1 tokens back (the word after the earlier occurrence). A window
    of W keeps keys fewer than W back: W = HALF keeps it and the induction group's loss does
    not rise (here it falls by 0.12 nats: far keys only distract); W = HALF − 1 drops it and
    the loss rises by 0.94. An off-by-one in the window fails one."""
    text = warehouse.parent / "repeated.txt"
    deltas = {}
    for window in (HALF - 1, HALF):
        db = tmp_path / f"w{window}.duckdb"
        cli_main(
            "ingest", "restriction", "--model", str(FIXTURE), "--db", str(db), "--text", str(text),
            "--sink-tokens", "1", "--window", str(window), "--context-length", str(4 * HALF), "--needles", "0",
        )  # fmt: skip
        (deltas[window],) = _rows(
            db, f"SELECT delta FROM restriction_groups WHERE layer = {INDUCTION[0]} AND kv_group = {INDUCTION[1]}"
        )[0]
    assert deltas[HALF - 1] > 0.5 and deltas[HALF] < 0.1, deltas
