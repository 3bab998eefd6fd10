"""The sink_heads named query (Gu et al. 2025's Sink^eps over stored statistics) against the
same count made with numpy from the raw head_stats rows."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from helpers import ingest_args, run


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, tiny_model_dir):
    import sys

    from _pytest.monkeypatch import MonkeyPatch

    from helpers import write_pairs

    tmp = tmp_path_factory.mktemp("sinks")
    db = tmp / "w.duckdb"
    with MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["attnwh", *ingest_args(tiny_model_dir("bert"), write_pairs(tmp / "p.tsv", 12), db)])
        from attnwh import cli

        try:
            cli.main()
        except SystemExit as exc:
            assert exc.code == 0
    return db


def expected(db, eps: float) -> dict[tuple[int, str], tuple[int, str | None]]:
    """(layer, token) -> (sink heads, their numbers) from the raw rows."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT layer, head, to_cls, to_sep, to_punct FROM head_stats").fetchnumpy()
    out = {}
    for layer in np.unique(rows["layer"]):
        for token, column in (("[CLS]", "to_cls"), ("[SEP]", "to_sep"), ("punctuation", "to_punct")):
            heads = sorted(
                int(h)
                for h in np.unique(rows["head"])
                if rows[column][(rows["layer"] == layer) & (rows["head"] == h)].astype(np.float64).mean() > eps
            )
            out[(int(layer), token)] = (len(heads), ",".join(map(str, heads)) or None)
    return out


@pytest.mark.parametrize("eps", [None, 0.1, 0.05])
def test_sink_heads_match_a_count_from_the_raw_rows(monkeypatch, capsys, warehouse, eps):
    from attnwh.sql import queries
    from attnwh.sql import warehouse as wh

    con = wh.connect(warehouse, read_only=True)
    try:
        params = {} if eps is None else {"eps": str(eps)}
        found = queries.run_query(con, queries.get_query("sink_heads"), params).to_pylist()
    finally:
        con.close()
    want = expected(warehouse, 0.3 if eps is None else eps)
    assert len(found) == len(want) == 2 * 3  # 2 layers × 3 token kinds
    for row in found:
        n, which = want[(row["layer"], row["token"])]
        assert (row["sink_heads"], row["which_heads"]) == (n, which), row
        assert row["heads"] == 4 and row["sink_share"] == pytest.approx(n / 4)
        assert row["eps"] == pytest.approx(0.3 if eps is None else eps)
    if eps == 0.05:  # a threshold low enough that some heads are sinks: the test is not vacuous
        assert sum(r["sink_heads"] for r in found) > 0


def test_a_threshold_that_is_not_a_number_is_one_line(monkeypatch, capsys, warehouse):
    code, _, err = run(monkeypatch, capsys, "query", "sink_heads", "--db", str(warehouse), "-p", "eps=abc")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "abc" in lines[0]
