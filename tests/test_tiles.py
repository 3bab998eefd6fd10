"""Attention observed in tiles of query rows gives what the whole maps give.

Every family that goes through attnwh's attention function is run on a padded batch of
inputs of a few hundred tokens (a single text and a sentence pair, with a short example
whose whole maps are kept) once with whole maps and once per tile height (1, 7 and 64 rows,
none of which divides the lengths); every stored value must agree within 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS, HeadStatistics
from attnwh.ingest.model import capture
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.model.tiles import ROW_BLOCK
from attnwh.ingest.runs.loop import StatisticsCapture
from tiny_models import CORPUS, make_tiny

MARGIN = OBSERVED_COLUMNS.index("pattern_margin")
# Look features that count cells, rows or columns above a level, and how many there are.
COUNTED = {
    OBSERVED_COLUMNS.index("look_col_cover"): lambda n: n,
    OBSERVED_COLUMNS.index("look_cols_dark"): lambda n: n,
    **{OBSERVED_COLUMNS.index(f"look_dark_{level}"): lambda n: n * n for level in ("02", "05", "10", "25", "50")},
}
TILED_FAMILIES = ("bert", "roberta", "distilbert", "electra", "albert", "modernbert")
POSITIONS = 320
ROWS = (50, 120, 200)


@pytest.fixture(scope="module")
def long_models(tmp_path_factory):
    cache = {}

    def build(family: str):
        if family not in cache:
            cache[family] = make_tiny(family, tmp_path_factory.mktemp(f"{family}-long"), positions=POSITIONS)
        return cache[family]

    return build


def long_batch(tokenizer) -> dict[str, torch.Tensor]:
    """Three rows, right-padded: a long single text, a long pair and a short text."""
    text = " ".join(CORPUS[:14])
    first, second = " ".join(CORPUS[:7]), " ".join(CORPUS[9:15])
    rows = [
        tokenizer(text, truncation=True, max_length=POSITIONS - 40),
        tokenizer(first, second, truncation=True, max_length=POSITIONS - 20),
        tokenizer(CORPUS[2]),
    ]
    width = max(len(r["input_ids"]) for r in rows)
    batch: dict[str, torch.Tensor] = {}
    for name in rows[0]:
        pad = tokenizer.pad_token_id if name == "input_ids" else 0
        batch[name] = torch.tensor([r[name] + [pad] * (width - len(r[name])) for r in rows])
    return batch


def run(capture_: StatisticsCapture, batch: dict[str, torch.Tensor], rows: int | None):
    with capture.attention_memory(rows=rows):
        stats = capture_.run(batch, thumbnail_rows=[0, 1, 2])
    mixing = capture_.observer.collect_mixing()
    chosen, lengths, thumbs = capture_.observer.collect_thumbnails()
    kept_rows, maps = capture_.observer.collect_maps()
    return stats, mixing, (chosen, lengths, thumbs), (kept_rows, maps)


@pytest.mark.parametrize("family", TILED_FAMILIES)
def test_tiles_give_what_whole_maps_give(long_models, family):
    encoder = load_model(str(long_models(family)), device="cpu")
    batch = long_batch(encoder.tokenizer)
    lengths = batch["attention_mask"].sum(-1).tolist()
    assert min(lengths[:2]) > 200 and lengths[2] < 64, lengths
    statistics = StatisticsCapture(encoder)
    whole = run(statistics, batch, None)
    assert whole[0].shape[:3] == (3, encoder.num_layers, encoder.num_heads)
    assert whole[1] is not None or family == "modernbert"
    for rows in (1, 7, 64):
        tiled = run(statistics, batch, rows)
        measured = [i for i in range(MARGIN) if i not in COUNTED]
        np.testing.assert_allclose(
            tiled[0][..., measured], whole[0][..., measured], rtol=1e-6, atol=1e-6, err_msg=f"tiles of {rows}"
        )
        # Shares of cells (or rows, or columns) above a level of the map's largest weight: a
        # weight within float32 rounding of a level may be counted on one path and not the
        # other (a weight of a row computed alone differs from the same row computed with
        # others by an ulp). At most two such cells per map.
        n = np.array(lengths, dtype=np.float64)[:, None, None]
        for i, cells in COUNTED.items():
            gap = np.abs(tiled[0][..., i] - whole[0][..., i])
            assert (gap <= 2 / cells(n) + 1e-6).all(), (OBSERVED_COLUMNS[i], gap.max(), rows)
        # The margin is the classifier's, from log ratios of features floored at 1e-3: it
        # moves up to a thousand times as much as the features (which agree within 1e-6).
        np.testing.assert_allclose(tiled[0][..., MARGIN], whole[0][..., MARGIN], atol=1e-4, err_msg="margin")
        if whole[1] is not None:
            for got, expected in zip(tiled[1], whole[1]):
                np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=f"mixing, tiles of {rows}")
        assert tiled[2][:2] == whole[2][:2]
        np.testing.assert_allclose(tiled[2][2], whole[2][2], rtol=1e-6, atol=1e-6, err_msg="thumbnails")
        assert tiled[3][0] == whole[3][0] == [2]
        np.testing.assert_allclose(tiled[3][1][0], whole[3][1][0], rtol=1e-6, atol=1e-6, err_msg="kept maps")


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_statistics_do_not_depend_on_the_budget(long_models, family):
    """Budgets that give tiles of 16, 48 and 112 rows store the same float32 value of every
    head statistic, pattern feature and margin (ModernBERT: global and sliding-window layers,
    the second reading the first's outputs). The margin amplifies a feature's last bit up to
    a thousand times, so only equal features keep it equal."""
    encoder = load_model(str(long_models(family)), device="cpu")
    batch = long_batch(encoder.tokenizer)
    batch_size, length = batch["input_ids"].shape
    per_row = capture.map_bytes(batch_size, encoder.num_heads, 1, length, StatisticsCapture(encoder).observer)
    first, *others = (budget_run(encoder, batch, rows * per_row + per_row // 2) for rows in ROWS)
    for rows, stats in zip(ROWS[1:], others):
        for i, name in enumerate(OBSERVED_COLUMNS):
            np.testing.assert_array_equal(
                stats[..., i], first[..., i], err_msg=f"{name}, tiles of {ROWS[0]} and {rows}"
            )


def budget_run(encoder, batch: dict[str, torch.Tensor], budget: int):
    """The statistics of `batch` under `budget` bytes, checking that the budget gave tiles of
    whole blocks of rows."""
    heights = []
    tile_rows = capture.tile_rows

    def recorded(*args):
        heights.append(tile_rows(*args))
        return heights[-1]

    length = batch["input_ids"].shape[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(capture, "tile_rows", recorded)
        out = StatisticsCapture(encoder, attention_memory=budget).run(batch)
    assert heights and all(h < length and h % ROW_BLOCK == 0 for h in heights), heights
    return out


def test_tiled_layers_never_hold_whole_maps(long_models):
    """With tiles of 7 rows no tensor of a layer's whole maps (batch × heads × n × n) is made:
    the largest float tensor the attention function or the observer creates is a tile."""
    encoder = load_model(str(long_models("bert")), device="cpu")
    batch = long_batch(encoder.tokenizer)
    n = batch["input_ids"].shape[1]
    statistics = StatisticsCapture(encoder)
    largest = []

    class Sizes(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dim() > 1 and out.shape[-1] == n and out.dtype.is_floating_point:
                largest.append(tuple(out.shape))
            return out

    with Sizes():
        run(statistics, batch, 7)
    # Nothing holds more than a tile's cells (batch × heads × 7 rows × n keys) or the keys
    # (batch × heads × head width × n); whole maps would be n / 7 times as large.
    width = max(7, encoder.model.config.hidden_size // encoder.num_heads)
    cells = [int(np.prod(shape)) for shape in largest]
    assert largest and max(cells) <= 3 * encoder.num_heads * width * n, max(largest, key=np.prod)
    assert 3 * encoder.num_heads * n * n > 20 * max(cells)


def test_budget_decides_the_tile_height():
    # 2 × 12 heads × 4,096 keys × (12 + 16) bytes per cell = 2.75 MiB a row.
    observer = type("Reader", (), {"cell_bytes": 16})()
    per_row = capture.map_bytes(2, 12, 1, 4096, observer)
    assert per_row == 2 * 12 * 4096 * 28
    with capture.attention_memory(budget=100 * per_row):
        # Whole blocks of rows (`tiles.ROW_BLOCK`), so that sums over rows take the same blocks.
        assert capture.tile_rows(2, 12, 4096, 4096, observer) == 96
        assert capture.tile_rows(2, 12, 64, 64, observer) == 64  # short inputs: whole maps
    with capture.attention_memory(budget=1):
        assert capture.tile_rows(2, 12, 4096, 4096, observer) == 1
    assert capture.tile_rows(2, 12, 4096, 4096, observer) == 4096  # no budget set
    assert capture.default_budget("cpu") >= capture.DEFAULT_FLOOR


# ---------------------------------------------------------------- the budget on the command line


def write_long_texts(path, n: int = 5):
    """A TSV of n texts of about 200 to 280 tokens each (the tiny tokenizers' own sentences)."""
    lines = ["sentence\tlabel"]
    for i in range(n):
        lines.append(" ".join(CORPUS[i : i + 11 + i % 3]) + f"\t{i % 2}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def stored(db, table: str, columns: str) -> tuple[list[str], list[tuple]]:
    """The column names and the rows of `table`, in order."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        result = con.execute(f"SELECT {columns} FROM {table} ORDER BY ALL")
        return [d[0] for d in result.description], result.fetchall()


def test_budget_tiles_and_splits_batches_and_stores_the_same_rows(long_models, tmp_path, monkeypatch, capsys):
    from helpers import run as run_cli

    data = write_long_texts(tmp_path / "long.tsv")
    model = str(long_models("bert"))
    dbs = {}
    for name, extra in (("whole", []), ("tiled", ["--attention-memory", "1M"])):
        dbs[name] = tmp_path / f"{name}.duckdb"
        code, out, err = run_cli(
            monkeypatch, capsys, "ingest", "--model", model, "--data", str(data), "--text-column", "sentence", "--db", str(dbs[name]),
            "--device", "cpu", "--thumbnails", "5", *extra,
        )  # fmt: skip
        assert code == 0, err
    # 1 MiB holds no batch of these inputs in tiles of 64 rows: each example runs alone, in tiles.
    tokens = [n for (n,) in stored(dbs["tiled"], "run_examples", "n_tokens")[1]]
    reader = type("Reader", (), {"cell_bytes": HeadStatistics.cell_bytes})()
    assert min(tokens) > 150
    assert capture.batch_rows(2**20, 4, min(tokens), reader, True) == 1
    assert capture.map_bytes(1, 4, min(tokens), min(tokens), reader) > 2**20
    # As in the test above: counted look features may differ by a cell or two near a level,
    # and the margin moves with them; every other value within 1e-5 (1e-6 for lists).
    shortest = min(tokens)
    tolerance = {OBSERVED_COLUMNS[i]: 2 / cells(shortest) + 1e-6 for i, cells in COUNTED.items()}
    tolerance["pattern_margin"] = 1e-4
    for table in ("head_stats", "head_mixing", "layer_mixing", "pattern_thumbnails", "massive_activations"):
        (names, whole), (_, tiled) = (stored(dbs[name], table, "* EXCLUDE (run_id)") for name in ("whole", "tiled"))
        assert len(whole) == len(tiled) > 0, table
        for a, b in zip(whole, tiled):
            for name, x, y in zip(names, a, b):
                if isinstance(x, float):
                    assert abs(x - y) <= tolerance.get(name, 1e-5), (table, name, a[:3])
                elif isinstance(x, list):
                    np.testing.assert_allclose(x, y, atol=1e-6, err_msg=table)
                else:
                    assert x == y, (table, name, a[:3])


@pytest.mark.parametrize("family", ["mpnet", "deberta-v2"])
def test_maps_kept_whole_over_the_budget_are_refused_in_one_line(tmp_path, monkeypatch, capsys, family):
    from helpers import run as run_cli

    model = make_tiny(family, tmp_path / family, positions=POSITIONS)
    capsys.readouterr()  # saving the model may draw a progress bar
    db = tmp_path / "w.duckdb"
    data = write_long_texts(tmp_path / "long.tsv")
    args = ["ingest", "--model", str(model), "--data", str(data), "--text-column", "sentence", "--db", str(db)]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--attention-memory", "1M")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "1 MiB" in lines[0] and "--max-length" in lines[0], err
    assert not db.exists()
    # Under a budget that holds their maps, the same inputs go through.
    code, _, err = run_cli(monkeypatch, capsys, *args, "--attention-memory", "64M")
    assert code == 0, err


@pytest.mark.parametrize("size", ["lots", "12Q", "100"])
def test_a_bad_size_is_refused_before_any_work(tmp_path, monkeypatch, capsys, size):
    from helpers import run as run_cli

    code, _, err = run_cli(
        monkeypatch, capsys, "ingest", "--db", str(tmp_path / "w.duckdb"), "--attention-memory", size
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--attention-memory" in err, err
    assert not (tmp_path / "w.duckdb").exists()


def test_sizes_read_as_powers_of_1024():
    from attnwh.options import parse_memory

    assert parse_memory("256M") == 256 * 2**20
    assert parse_memory("2G") == parse_memory("2GiB") == 2 * 2**30
    assert parse_memory("1.5g") == 3 * 2**29
    assert parse_memory(None) is None


# ---------------------------------------------------------------- head disabling in tiles


@pytest.mark.parametrize("family", ["bert", "modernbert"])
@pytest.mark.parametrize("mode", ["uniform", "zero"])
def test_disabling_heads_in_tiles_gives_the_whole_maps_logits(tmp_path, family, mode):
    """The ablation sweep (prefix cache on) with layers in tiles of 7 rows gives the logits of
    whole maps: padding, a pair, and on ModernBERT local layers whose window crosses tiles."""
    from attnwh.ingest.measures.ablation import AblationSweep, sweep_configurations

    model = make_tiny(family, tmp_path / family, classifier=True, positions=POSITIONS)
    encoder = load_model(str(model), device="cpu")
    batch = long_batch(encoder.tokenizer)
    configs = sweep_configurations(encoder.num_layers, encoder.num_heads)
    sweep = AblationSweep(encoder, mode)
    whole = sweep.logits(batch, configs)
    with capture.attention_memory(rows=7):
        tiled = sweep.logits(batch, configs)
    np.testing.assert_allclose(tiled, whole, rtol=1e-6, atol=1e-6)
    assert (tiled.argmax(-1) == whole.argmax(-1)).all()
    # Disabling must change the logits by far more than the tolerance, or the comparison
    # proves little (a random classifier's logits move little).
    assert np.abs(whole[1:] - whole[0]).max() > 20 * np.abs(tiled - whole).max() + 2e-5


def test_ablation_under_a_budget_tiles_splits_and_refuses_importance(tmp_path, monkeypatch, capsys):
    from helpers import run as run_cli

    model = make_tiny("bert", tmp_path / "bert", classifier=True, positions=POSITIONS)
    capsys.readouterr()  # saving the model may draw a progress bar
    data = write_long_texts(tmp_path / "long.tsv")
    args = ["ingest", "ablation", "--model", str(model), "--data", str(data), "--text-column", "sentence"]
    args += ["--label-column", "label", "--resamples", "100"]
    db = tmp_path / "refused.duckdb"
    code, _, err = run_cli(monkeypatch, capsys, *args, "--db", str(db), "--attention-memory", "1M")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--no-importance" in err, err
    assert not db.exists()
    predictions = {}
    for name, extra in (("whole", []), ("tiled", ["--attention-memory", "1M"])):
        db = tmp_path / f"{name}.duckdb"
        code, _, err = run_cli(monkeypatch, capsys, *args, "--db", str(db), "--no-importance", *extra)
        assert code == 0, err
        predictions[name] = stored(db, "ablation_predictions", "config_id, example_id, prediction")[1]
    assert len(predictions["whole"]) >= 5 * (1 + 2 * 4 + 2)  # the sweep, then combinations
    assert predictions["tiled"] == predictions["whole"]


def tuned_of(family: str, base, out):
    """Another seed's weights of `family`, with the base model's tokenizer (the seed also
    draws the tiny tokenizers' vocabulary)."""
    from transformers import AutoTokenizer

    tuned = make_tiny(family, out, positions=POSITIONS, seed=1)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(tuned))
    return tuned


def reference_cosines(base, tuned, batch) -> np.ndarray:
    """(batch, layer, head) cosines of the two models' maps cropped to the real tokens, from
    HF's `output_attentions=True` on the eager path, one example at a time."""
    from transformers import AutoModel

    models = [AutoModel.from_pretrained(str(path), attn_implementation="eager").eval() for path in (base, tuned)]
    out = []
    for row in range(batch["input_ids"].shape[0]):
        n = int(batch["attention_mask"][row].sum())
        single = {k: v[row : row + 1, :n] for k, v in batch.items()}
        with torch.no_grad():
            maps = [torch.stack(m(**single, output_attentions=True).attentions)[:, 0] for m in models]
        a, b = (m.flatten(-2).double() for m in maps)  # (layer, head, n²)
        out.append((a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)))
    return torch.stack(out).numpy()


@pytest.mark.parametrize("family", TILED_FAMILIES)
def test_comparison_in_tiles_gives_the_whole_maps_cosines(long_models, tmp_path, family):
    from attnwh.ingest.measures.change import ChangeCapture

    base_path = long_models(family)
    tuned_path = tuned_of(family, base_path, tmp_path / "tuned")
    base, tuned = (load_model(str(p), device="cpu") for p in (base_path, tuned_path))
    batch = long_batch(tuned.tokenizer)
    compare = ChangeCapture(base, tuned)
    whole = compare.run(batch)[..., 0]
    np.testing.assert_allclose(whole, reference_cosines(base_path, tuned_path, batch), atol=1e-6)
    assert (whole < 0.9999).any()  # the models differ: the check is not of a map with itself
    for rows in (1, 7, 64):
        with capture.attention_memory(rows=rows):
            tiled = compare.run(batch)[..., 0]
        np.testing.assert_allclose(tiled, whole, rtol=1e-6, atol=1e-6, err_msg=f"tiles of {rows}")


def test_tiled_comparison_keeps_queries_and_keys_not_maps(long_models, tmp_path):
    """In tiles of 7 rows neither pass makes a float tensor larger than a tile: the base
    model's layers are kept as what rebuilds their tiles, not as maps."""
    from attnwh.ingest.measures.change import ChangeCapture

    base = load_model(str(long_models("bert")), device="cpu")
    tuned = load_model(str(tuned_of("bert", long_models("bert"), tmp_path / "tuned")), device="cpu")
    batch = long_batch(tuned.tokenizer)
    n = batch["input_ids"].shape[1]
    compare = ChangeCapture(base, tuned)
    largest = []

    class Sizes(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dim() > 1 and out.shape[-1] == n and out.dtype.is_floating_point:
                largest.append(int(np.prod(out.shape)))
            return out

    with Sizes(), capture.attention_memory(rows=7):
        compare.run(batch)
    width = max(7, base.model.config.hidden_size // base.num_heads)
    assert largest and max(largest) <= 3 * base.num_heads * width * n
    assert 3 * base.num_heads * n * n > 20 * max(largest)


def test_comparison_under_a_budget_stores_the_same_cosines(long_models, tmp_path, monkeypatch, capsys):
    from helpers import run as run_cli

    data = write_long_texts(tmp_path / "long.tsv")
    base = str(long_models("bert"))
    tuned = str(tuned_of("bert", base, tmp_path / "tuned"))
    capsys.readouterr()
    dbs = {}
    for name, extra in (("whole", []), ("tiled", ["--attention-memory", "1M"])):
        dbs[name] = tmp_path / f"{name}.duckdb"
        code, _, err = run_cli(
            monkeypatch, capsys, "ingest", "compare", "--base", base, "--tuned", tuned, "--data", str(data),
            "--text-column", "sentence", "--db", str(dbs[name]), "--device", "cpu", *extra,
        )  # fmt: skip
        assert code == 0, err
    # 1 MiB holds not even one example's base maps of every layer: each example runs alone, in tiles.
    from attnwh.ingest.measures.change import KeepTiles

    shortest = min(n for (n,) in stored(dbs["tiled"], "run_examples", "n_tokens")[1])
    assert capture.map_bytes(1, 4, 64, shortest, KeepTiles(2 * 4 + 36)) > 2**20
    (_, whole), (_, tiled) = (
        stored(dbs[name], "attention_change", "* EXCLUDE (run_id)") for name in ("whole", "tiled")
    )
    assert len(whole) == len(tiled) == 5 * 2 * 4
    for a, b in zip(whole, tiled):
        assert a[:-1] == b[:-1] and abs(a[-1] - b[-1]) <= 1e-6, (a, b)


@pytest.fixture(scope="module")
def long_maps_warehouse(long_models, tmp_path_factory):
    """A warehouse of the tiny BERT over five ~200–280-token texts, ingested twice: with the
    default --map-tokens (no whole maps of such inputs) and with --map-tokens 300, both under
    a 1 MiB budget (tiled)."""
    from helpers import cli_main

    folder = tmp_path_factory.mktemp("long-maps")
    data = write_long_texts(folder / "long.tsv")
    db = folder / "w.duckdb"
    model = str(long_models("bert"))
    base = ["ingest", "--model", model, "--data", str(data), "--text-column", "sentence", "--db", str(db)]
    for extra in ([], ["--map-tokens", "300"]):
        cli_main(*base, "--device", "cpu", "--thumbnails", "5", "--attention-memory", "1M", *extra)
    return db, model, data


def test_map_tokens_keeps_whole_long_maps_equal_to_eager_ones(long_maps_warehouse):
    """`--map-tokens 300` keeps every head's whole map of the sampled long inputs, assembled
    from tiles, equal to HF's eager `output_attentions` within 1e-6, with the tokens; the
    default keeps none of them; the two settings are two runs, not one run redone."""
    import duckdb
    from transformers import AutoModel, AutoTokenizer

    db, model, _ = long_maps_warehouse
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT run_id, status FROM runs WHERE kind = 'statistics' ORDER BY 1").fetchall()
        per_run = dict(con.execute("SELECT run_id, count(*) FROM pattern_maps GROUP BY 1").fetchall())
        longest = con.execute("SELECT max(n_tokens) FROM pattern_thumbnails").fetchone()[0]
        kept = con.execute(
            "SELECT m.layer, m.head, m.n_tokens, m.attention, t.tokens, e.text_a FROM pattern_maps AS m"
            " JOIN example_tokens AS t USING (run_id, example_id) JOIN examples AS e USING (example_id)"
            " ORDER BY m.example_id, m.layer, m.head"
        ).fetchall()
    assert [status for _, status in runs] == ["complete", "complete"]
    assert per_run == {runs[1][0]: 5 * 2 * 4} and 200 < longest <= 300
    tokenizer = AutoTokenizer.from_pretrained(model)
    eager = AutoModel.from_pretrained(model, attn_implementation="eager").eval()
    for layer, head, n, attention, tokens, text in kept:
        inputs = tokenizer(text, return_tensors="pt")
        assert tokens == tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist()) and n > 64
        with torch.no_grad():
            maps = eager(**inputs, output_attentions=True).attentions
        np.testing.assert_allclose(np.array(attention).reshape(n, n), maps[layer][0, head].numpy(), atol=1e-6)
