"""Massive activations (Sun et al. 2024): the scan against a plain numpy scan of eager
`output_hidden_states`, example by example and unpadded; injected huge values are found where
they were put; the named query against a count made in Python; the report's cells."""

from __future__ import annotations

import unicodedata

import numpy as np
import polars as pl
import pytest
import torch
from transformers import AutoModel

from attnwh.ingest.measures import massive
from attnwh.ingest.model.encoding import TokenKinds, collate, encode_task
from attnwh.ingest.model.loading import forward_inputs, load_model
from attnwh.ingest.sources.examples import Example, TaskData

PAIRS = [
    ("The quick brown fox jumps over the lazy dog.", "A film!"),
    ("Is this the station?", "Cheap tickets (only five dollars) sold out in minutes."),
    ("She said that the weather would turn cold.", "It stayed warm."),
    ("Two people walk along the river.", "The dog follows them, quietly, all the way home; everyone cheered!"),
]


def pair_task() -> TaskData:
    examples = tuple(Example(i, None, a, b, None) for i, (a, b) in enumerate(PAIRS))
    return TaskData("test", "pair", "dev", examples, None, "test")


def reference_kinds(tokenizer, ids: list[int]) -> list[str]:
    """Each token's kind, decided from its text here rather than by TokenKinds."""
    kinds = []
    for token_id in ids:
        if token_id == tokenizer.cls_token_id:
            kinds.append("[CLS]")
        elif token_id == tokenizer.sep_token_id:
            kinds.append("[SEP]")
        else:
            text = "" if token_id in tokenizer.all_special_ids else tokenizer.decode([token_id]).strip()
            text = text.removeprefix("##").strip()
            punct = bool(text) and all(unicodedata.category(c).startswith("P") for c in text)
            kinds.append("punctuation" if punct else "other")
    return kinds


def numpy_scan(hidden: list[np.ndarray], kinds: list[str], top_k: int = massive.TOP_K) -> list[dict]:
    """Per layer of one unpadded example ((n, D) arrays): the top_k magnitudes, where they
    sit and the median, written out plainly. Ties: the earlier flattened entry first."""
    out = []
    for h in hidden:
        flat = np.abs(h.astype(np.float32)).ravel()
        order = np.argsort(-flat, kind="stable")[:top_k]
        positions = order // h.shape[1]
        out.append(
            {
                "magnitude": flat[order],
                "dim": order % h.shape[1],
                "position": positions,
                "token_kind": [kinds[p] for p in positions],
                "median": np.median(flat),
            }
        )
    return out


def scanned(result: dict[str, np.ndarray], row: int, layer: int) -> dict[str, np.ndarray]:
    chosen = (result["row"] == row) & (result["layer"] == layer)
    return {name: values[chosen] for name, values in result.items()}


def assert_same(found: dict[str, np.ndarray], want: dict) -> None:
    np.testing.assert_allclose(found["magnitude"], want["magnitude"], rtol=1e-5, atol=0)
    np.testing.assert_array_equal(found["dim"], want["dim"])
    np.testing.assert_array_equal(found["position"], want["position"])
    assert list(found["token_kind"]) == want["token_kind"]
    np.testing.assert_allclose(found["median"], want["median"], rtol=1e-5, atol=0)
    np.testing.assert_array_equal(found["rank"], np.arange(1, len(want["magnitude"]) + 1))


def padded_batch(path):
    """The pair task as one padded batch through attnwh's encoder: (encoder, encoded, batch,
    layer outputs, masks)."""
    encoder = load_model(str(path), device="cpu")
    encoded = encode_task(encoder.tokenizer, pair_task(), encoder.max_length)
    batch = collate(encoded, list(range(len(PAIRS))), encoder.tokenizer.pad_token_id, encoder.device)
    with torch.inference_mode():
        out = encoder.model(**forward_inputs(encoder.model, batch), output_hidden_states=True)
    masks = TokenKinds(encoder.tokenizer).masks(batch["input_ids"])
    return encoder, encoded, batch, [h.clone() for h in out.hidden_states[1:]], masks


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_scan_matches_numpy_on_eager_hidden_states(tiny_model_dir, family):
    path = tiny_model_dir(family)
    encoder, encoded, batch, hidden, masks = padded_batch(path)
    lengths = batch["attention_mask"].sum(-1)
    assert lengths.min() < lengths.max()  # the batch is padded
    result = massive.scan(hidden, batch["attention_mask"].bool(), *masks)
    assert {len(v) for v in result.values()} == {len(PAIRS) * len(hidden) * massive.TOP_K}
    assert result["magnitude"].dtype == np.float32 and result["median"].dtype == np.float32
    eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    seen_kinds = set()
    for i in range(len(PAIRS)):
        ids = encoded.input_ids[i].tolist()
        inputs = {"input_ids": torch.tensor([ids])}
        if encoded.token_type_ids is not None and family == "bert":
            inputs["token_type_ids"] = torch.tensor([encoded.token_type_ids[i].tolist()])
        with torch.no_grad():
            states = eager(**inputs, output_hidden_states=True).hidden_states[1:]
        want = numpy_scan([s[0].numpy() for s in states], reference_kinds(encoder.tokenizer, ids))
        for layer, expected in enumerate(want):
            found = scanned(result, i, layer)
            assert_same(found, expected)
            seen_kinds |= set(found["token_kind"])
    assert len(seen_kinds) >= 2  # the kinds are not all one value, or their check would prove little


def test_injected_huge_values_are_found_where_they_were_put(tiny_model_dir):
    encoder, encoded, batch, hidden, masks = padded_batch(tiny_model_dir("bert"))
    cls, sep, punct = masks
    real = batch["attention_mask"].bool()
    lengths = real.sum(-1)
    last = len(hidden) - 1
    second_sep = int(sep[0].nonzero()[-1])
    comma = int(punct[3].nonzero()[0])
    hidden[last][0, second_sep, 5] = -4000.0  # negative: the magnitude counts
    hidden[0][1, 0, 17] = 2500.0
    hidden[0][3, comma, 30] = 900.0
    hidden[0][3, 2, 30] = 900.0  # a tie: both come first, in either order
    # Padding never counts, however large: the shortest row gets a huge value past its end.
    short = int(lengths.argmin())
    hidden[last][short, int(lengths[short]), 3] = 1e6
    result = massive.scan(hidden, real, cls, sep, punct)

    def top(row: int, layer: int, rank: int = 1) -> tuple:
        found = scanned(result, row, layer)
        k = rank - 1
        return found["magnitude"][k], found["dim"][k], found["position"][k], found["token_kind"][k]

    assert top(0, last) == (4000.0, 5, second_sep, "[SEP]")
    assert top(1, 0) == (2500.0, 17, 0, "[CLS]")
    kinds = {comma: "punctuation", 2: reference_kinds(encoder.tokenizer, encoded.input_ids[3].tolist())[2]}
    assert {top(3, 0), top(3, 0, 2)} == {(900.0, 30, p, kind) for p, kind in kinds.items()}
    assert scanned(result, short, last)["magnitude"].max() < 1e6
    # Every (row, layer) but the tie still equals the plain scan of the same tensors, cropped.
    for i in range(len(PAIRS)):
        n = int(lengths[i])
        kinds_i = reference_kinds(encoder.tokenizer, encoded.input_ids[i].tolist())
        for layer, expected in enumerate(numpy_scan([h[i, :n].numpy() for h in hidden], kinds_i)):
            if (i, layer) != (3, 0):
                assert_same(scanned(result, i, layer), expected)


def test_short_rows_ties_and_repeated_medians():
    generator = torch.Generator().manual_seed(0)
    hidden = [torch.randn(5, 7, 3, generator=generator) * 2 for _ in range(2)]
    # Few distinct values: the middle values repeat, around and across the middle places.
    hidden.append(torch.randint(-3, 4, (5, 7, 3), generator=generator).float())
    real = torch.zeros(5, 7, dtype=torch.bool)
    for row, n in enumerate([7, 4, 1, 0, 6]):  # odd and even counts n · 3; a row with no real token
        real[row, :n] = True
    hidden[1][4, :, :] = 1.5  # all equal: any 8 of them may rank first
    # Row 1 of the first layer: 12 real magnitudes, only two above 0, so the top 8 ties real
    # zeros with the padding's; every kept entry must still be a real one.
    hidden[0][1] = 0.0
    hidden[0][1, 0, 0], hidden[0][1, 2, 1] = 4.0, -2.0
    cls = torch.zeros_like(real)
    cls[:, 0] = real[:, 0]
    sep, punct = torch.zeros_like(real), torch.zeros_like(real)
    result = massive.scan(hidden, real, cls, sep, punct)
    assert 3 not in set(result["row"])  # no real token, no row
    assert int(((result["row"] == 2) & (result["layer"] == 0)).sum()) == 3  # 1 token × 3 dims < top_k
    for row in (0, 1, 2, 4):
        n = int(real[row].sum())
        for layer, h in enumerate(hidden):
            found = scanned(result, row, layer)
            (want,) = numpy_scan([h[row, :n].numpy()], ["[CLS]"] + ["other"] * (n - 1))
            if layer == 0 and row != 1:  # distinct values: the same entries in the same order
                assert_same(found, want)
            # With ties, which equal entry comes first is topk's choice; magnitudes and the
            # median are the same whatever it picks, and each entry is where it says.
            np.testing.assert_array_equal(found["magnitude"], want["magnitude"])
            assert found["median"][0] == want["median"]
            entries = np.abs(h[row, :n].numpy())
            np.testing.assert_array_equal(entries[found["position"], found["dim"]], found["magnitude"])
            assert len(set(zip(found["position"], found["dim"], strict=True))) == len(found["position"])
    assert set(scanned(result, 4, 1)["magnitude"]) == {1.5}
    assert massive.scan([], real, cls, sep, punct)["row"].shape == (0,)


@pytest.mark.parametrize("layers_per_chunk", [1, 2])
def test_scan_in_chunks_of_layers_equals_one_pass(monkeypatch, layers_per_chunk):
    """Where a batch's layers do not fit in one working copy, the scan takes them a few at a
    time (here 1 or 2 of 3, by lowering the limit) and must find the same rows."""
    generator = torch.Generator().manual_seed(3)
    hidden = [torch.randn(4, 6, 5, generator=generator) for _ in range(3)]
    real = torch.zeros(4, 6, dtype=torch.bool)
    for row, n in enumerate([6, 3, 1, 5]):
        real[row, :n] = True
    masks = (real & (torch.arange(6) == 0), torch.zeros_like(real), torch.zeros_like(real))
    whole = massive.scan(hidden, real, *masks)
    monkeypatch.setattr(massive, "_CHUNK_ENTRIES", layers_per_chunk * 4 * 6 * 5)
    chunked = massive.scan(hidden, real, *masks)
    assert set(chunked) == set(whole) and len(whole["row"]) == 3 * (8 + 8 + 5 + 8)
    for name, values in whole.items():
        np.testing.assert_array_equal(chunked[name], values)


@pytest.mark.parametrize("kind", ["spread", "ties", "zeros", "straddling"])
def test_exact_medians_equal_numpy_at_any_two_places(kind):
    """The radix selection against np.sort, at the two middle places and at arbitrary ones:
    values over many octaves, heavy ties, zeros (padding's value), and rows whose two places
    fall in different buckets."""
    rng = np.random.default_rng(1)
    rows, width = 9, 301
    if kind == "spread":
        values = np.exp(rng.uniform(-30, 30, (rows, width)))
    elif kind == "ties":
        values = rng.integers(0, 4, (rows, width)).astype(np.float64) * 0.75
    elif kind == "zeros":
        values = np.where(rng.random((rows, width)) < 0.6, 0.0, rng.random((rows, width)))
    else:  # the lower half 1.0 and the upper half 4.0: the middle places are octaves apart
        values = np.sort(np.repeat([[1.0, 4.0]], rows, axis=0).repeat((width + 1) // 2, axis=1)[:, :width])
        values = rng.permuted(values, axis=1)
    values = values.astype(np.float32)
    lower = torch.from_numpy(rng.integers(0, width, rows))
    lower[:3] = torch.tensor([(width - 1) // 2, 0, width - 1])
    upper = torch.clamp(lower + torch.from_numpy(rng.integers(0, 2, rows)), max=width - 1)
    upper[0] = lower[0] + 1  # the places just below and above the middle
    found = massive.exact_medians(torch.from_numpy(values), lower, upper).numpy()
    ordered = np.sort(values, axis=1)
    at = np.arange(rows)
    want = (ordered[at, lower.numpy()] + ordered[at, upper.numpy()]) / 2
    np.testing.assert_array_equal(found, want.astype(np.float32))
    middle = massive.exact_medians(torch.from_numpy(values), *(torch.full((rows,), i) for i in (150, 150)))
    np.testing.assert_array_equal(middle.numpy(), np.median(values, axis=1).astype(np.float32))


def test_scan_works_in_float32_for_half_precision_inputs():
    hidden = [torch.tensor([[[1.0, -300.0], [0.5, 2.0]]], dtype=torch.bfloat16)]
    real = torch.ones(1, 2, dtype=torch.bool)
    none = torch.zeros_like(real)
    result = massive.scan(hidden, real, none, none, none, top_k=2)
    assert result["magnitude"].dtype == np.float32 and list(result["magnitude"]) == [300.0, 2.0]
    assert result["median"][0] == pytest.approx(1.5)  # the mean of the two middle values of 4
    assert list(result["token_kind"]) == ["other", "other"]


# ---------------------------------------------------------------- the named query


def _warehouse(path):
    """Two statistics runs (two models, two tasks) with massive_activations rows drawn at
    random, a known part of them massive; returns the rows as (run_id, example, layer, rank,
    magnitude, dim, position, kind, median) tuples and {run_id: (model, task)}."""
    from attnwh.sql import warehouse
    from fixtures.synthetic_warehouse import _create_run

    rng = np.random.default_rng(7)
    con = warehouse.connect(path)
    rows = []
    runs = {}
    try:
        for m, (name, task) in enumerate([("demo/bert", "rte"), ("demo/roberta", "sst2")], start=1):
            con.execute(
                "INSERT INTO models (model_id, name, weights_hash, family, architecture, num_layers, num_heads,"
                " hidden_size, max_length, added_at) VALUES (?, ?, ?, 'bert', 'BertModel', 3, 4, 64, 512,"
                " TIMESTAMP '2025-01-01 00:00:00')",
                [m, name, f"{m:064x}"],
            )
            run_id = _create_run(con, "statistics", m, "demo", task, 12, 1)
            runs[run_id] = (name, task)
            for example in range(12):
                for layer in range(3):
                    # float32 values, as stored (REAL), so Python and DuckDB compare the same numbers.
                    median = float(np.float32(rng.uniform(0.05, 0.4)))
                    magnitudes = np.sort(rng.uniform(1, 600, size=8).astype(np.float32))[::-1]
                    for rank, magnitude in enumerate(magnitudes, start=1):
                        dim = int(rng.choice([3, 9, 40])) if rank <= 3 else int(rng.integers(0, 64))
                        kind = str(rng.choice(["[CLS]", "[SEP]", "punctuation", "other"]))
                        rows.append((run_id, example, layer, rank, float(magnitude), dim, rank, kind, median))
        con.executemany("INSERT INTO massive_activations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    finally:
        con.close()
    return rows, runs


def expected_groups(rows, runs, min_magnitude: float, ratio: float) -> dict[tuple, dict]:
    """(run, layer, dim, kind) -> the query's numbers, counted in Python from the rows."""
    scanned_examples = {run: len({r[1] for r in rows if r[0] == run}) for run in runs}
    hits = [r for r in rows if r[4] > min_magnitude and r[4] > ratio * r[8]]
    out: dict[tuple, dict] = {}
    for run, example, layer, _, magnitude, dim, _, kind, median in hits:
        group = out.setdefault(
            (run, layer, dim, kind), {"magnitudes": [], "medians": [], "examples": set(), "dim_examples": set()}
        )
        group["magnitudes"].append(magnitude)
        group["medians"].append(median)
        group["examples"].add(example)
    for (run, layer, dim, _), group in out.items():
        group["dim_examples"] = {r[1] for r in hits if (r[0], r[2], r[5]) == (run, layer, dim)}
        group["run_examples"] = scanned_examples[run]
    return out


@pytest.fixture(scope="module")
def massive_warehouse(tmp_path_factory):
    path = tmp_path_factory.mktemp("massive") / "w.duckdb"
    rows, runs = _warehouse(path)
    return path, rows, runs


@pytest.mark.parametrize(
    ("params", "min_magnitude", "ratio"),
    [
        ({}, 100.0, 1000.0),
        ({"min_magnitude": "300", "ratio": "2500"}, 300.0, 2500.0),
        ({"task": "sst2"}, 100, 1000),
        ({"model": "demo/bert"}, 100, 1000),
    ],
)
def test_query_counts_and_shares_match_python(massive_warehouse, params, min_magnitude, ratio):
    from attnwh.sql import queries, warehouse

    path, rows, runs = massive_warehouse
    con = warehouse.connect(path, read_only=True)
    try:
        found = queries.run_query(con, queries.get_query("massive_activations"), params).to_pylist()
    finally:
        con.close()
    want = expected_groups(rows, runs, min_magnitude, ratio)
    for index, name in enumerate(("model", "task")):
        if name in params:
            want = {k: v for k, v in want.items() if runs[k[0]][index] == params[name]}
    assert len(found) == len(want) and len(want) >= 10  # some entries pass the thresholds, not all
    assert len(want) < len({(r[0], r[2], r[5], r[7]) for r in rows})
    for row in found:
        group = want[(row["run_id"], row["layer"], row["dim"], row["token_kind"])]
        assert (row["model"], row["task"], row["split"]) == (*runs[row["run_id"]], "dev")
        assert row["massive"] == len(group["magnitudes"])
        assert row["examples"] == len(group["examples"]) and row["run_examples"] == group["run_examples"] == 12
        assert row["example_share"] == pytest.approx(len(group["examples"]) / 12)
        assert row["dim_example_share"] == pytest.approx(len(group["dim_examples"]) / 12)
        assert row["mean_magnitude"] == pytest.approx(np.mean(group["magnitudes"]), rel=1e-5)
        assert row["max_magnitude"] == pytest.approx(max(group["magnitudes"]), rel=1e-6)
        assert row["mean_median"] == pytest.approx(np.mean(group["medians"]), rel=1e-5)
        ratios = np.array(group["magnitudes"]) / np.array(group["medians"])
        assert row["mean_ratio"] == pytest.approx(ratios.mean(), rel=1e-5)
        assert (row["min_magnitude"], row["ratio"]) == (min_magnitude, ratio)
    # Ordered by run, then layer, then the most entries first.
    keys = [(r["model"], r["task"], r["run_id"], r["layer"], -r["massive"]) for r in found]
    assert keys == sorted(keys)


def test_query_refuses_a_threshold_that_is_not_a_number(monkeypatch, capsys, massive_warehouse):
    from helpers import run

    code, _, err = run(
        monkeypatch, capsys, "query", "massive_activations", "--db", str(massive_warehouse[0]), "-p", "ratio=lots"
    )
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "lots" in lines[0]


# ---------------------------------------------------------------- the report


def test_report_cells_sum_the_kinds_of_a_dimension():
    from attnwh.reports import charts

    base = {"model": "demo/bert", "task": "rte", "split": "dev", "run_id": 1, "layer": 2, "run_examples": 10}
    frame = pl.DataFrame(
        [
            {**base, "dim": 9, "token_kind": "[CLS]", "massive": 1, "dim_example_share": 0.4, "max_magnitude": 300.0,
             "mean_ratio": 1000.0},
            {**base, "dim": 9, "token_kind": "[SEP]", "massive": 3, "dim_example_share": 0.4, "max_magnitude": 500.0,
             "mean_ratio": 2000.0},
            {**base, "dim": 40, "token_kind": "punctuation", "massive": 2, "dim_example_share": 0.2,
             "max_magnitude": 200.0, "mean_ratio": 1500.0},
        ]
    )  # fmt: skip
    cells = charts.massive_cells(frame).sort("dim")
    assert cells["dim"].to_list() == [9, 40]
    assert cells["kinds"].to_list() == ["[SEP] 3 · [CLS] 1", "punctuation 2"]
    assert cells["letter"].to_list() == ["S", "P"]
    assert cells["massive"].to_list() == [4, 2] and cells["max_magnitude"].to_list() == [500.0, 200.0]
    assert cells["mean_ratio"].to_list() == pytest.approx([(1000 + 3 * 2000) / 4, 1500])
    assert cells["dim_example_share"].to_list() == [0.4, 0.2]
    assert charts.massive_activations(frame).to_dict()["facet"]["field"] == "panel"


def test_report_section_draws_from_the_synthetic_warehouse(tmp_path):
    from attnwh.reports.build import build_report
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path / "w.duckdb"
    build_synthetic_warehouse(db, examples=4, layers=3, heads=4)
    report = build_report(db)
    section = next(s for s in report.sections if s.section.id == "massive-activations")
    assert section.note is None and [b.id for b in section.blocks] == ["chart-massive-activations"]
    ids = [s.section.id for s in report.sections]
    assert ids.index("massive-activations") == ids.index("pattern-gallery") + 1
    spec = section.blocks[0].spec()
    values = next(iter(spec["datasets"].values()))
    assert {v["letter"] for v in values} == {"S", "C", "P"} and all(0 < v["dim_example_share"] <= 1 for v in values)
    assert "is empty" not in section.blocks[0].caption


def test_report_section_says_when_nothing_is_massive(tmp_path):
    import duckdb

    from attnwh.reports.build import build_report
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path / "w.duckdb"
    build_synthetic_warehouse(db, examples=4, layers=3, heads=4)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE massive_activations SET magnitude = magnitude / 10")  # all stay below 100
    section = next(s for s in build_report(db).sections if s.section.id == "massive-activations")
    # A sentence in place of a chart that would be a legend alone, and not a section with data.
    assert section.blocks == [] and section.looked and section.note.startswith("No massive activations found")
