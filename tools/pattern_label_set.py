"""Build the hand-labelled set of real attention maps (docs/pattern_labels.md).

The maps come from one warehouse holding each model's ingest of GLUE dev sets with whole
maps kept (`attnwh ingest --model M --glue-dir DIR --task sst2,rte,mrpc,stsb,qnli --limit
150 --thumbnails 80 --map-tokens 192`); a map is named by its model (the last part of the
stored name), task, example, layer and head. This tool picks the maps and draws them for
labelling by eye, in a seeded order per pass (sixteen to an image; maps over 64 tokens six to
an image, larger), so that a pass can be labelled without the page and without seeing
another pass. One round of labelling:

    python tools/pattern_label_set.py sample W.duckdb picked.csv --model M --tasks sst2,rte
    python tools/pattern_label_set.py blocks W.duckdb picked.csv      (block candidates, added)
    python tools/pattern_label_set.py grids W.duckdb picked.csv --seed 1 --out pass1/
    (look at pass1/grid-NNN.png, write pass1/labels.csv: grid,cell,type)
    python tools/pattern_label_set.py grids W.duckdb picked.csv --seed 2 --out pass2/
    python tools/pattern_label_set.py agree pass1 pass2
    python tools/pattern_label_set.py disputes W.duckdb picked.csv pass1 pass2 --out settled/
    (a third look at the maps the passes disagree on: settled/labels.csv)
    python tools/pattern_label_set.py final picked.csv pass1 pass2 settled labels.csv --round N [--append]
    python tools/pattern_label_set.py examples W.duckdb labels.csv --out docs/pattern_labels

The set made this way ships in tools/label_set/ (labels.csv, and per round roundN/ with its
picked maps and passes; docs/pattern_labels.md). To use it, rebuild the maps and import the
labels into that warehouse:

    attnwh ingest --db W.duckdb --model M --glue-dir DIR --task sst2,rte,mrpc,stsb,qnli \
        --limit 150 --thumbnails 80 --map-tokens 192          (once per model of the set)
    python tools/pattern_label_set.py export W.duckdb tools/label_set/labels.csv labels-W.csv
    attnwh patterns import-labels labels-W.csv --db W.duckdb

The default pattern classifier is fitted to that warehouse's labels (and synthetic anchor
maps) and written where attnwh ships it with

    python tools/pattern_label_set.py model W.duckdb

Each tile is one map, rows = queries and columns = keys, darker = more attention (scaled to
the map's largest weight); ticks above and left of it mark special tokens (red) and
punctuation (orange) positions. Tiles are numbered in reading order. Neither the model, nor
the rules' or the classifier's type, is drawn.
"""

from __future__ import annotations

import argparse
import csv
import struct
import unicodedata
import zlib
from pathlib import Path

import duckdb
import numpy as np

TYPES = ("heterogeneous", "vertical", "diagonal", "vertical+diagonal", "block")
TILE, PAD, TICK = 232, 14, 5
# Maps longer than this are drawn six to an image, on tiles of LONG_TILE pixels (two or
# more pixels per token up to 195 tokens), so that one token's column stays visible.
LONG_TOKENS, LONG_TILE = 64, 400


def _png(image: np.ndarray, path: Path) -> None:
    height, width, _ = image.shape
    raw = b"".join(b"\x00" + image[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    )


def _kind(token: str) -> str:
    if token in ("[CLS]", "[SEP]", "<s>", "</s>"):
        return "special"
    text = token.removeprefix("##")
    if text and all(unicodedata.category(c).startswith("P") for c in text):
        return "punct"
    return "other"


KEY = ("model", "task", "example", "layer", "head")
# A map's model is the last part of its stored name (a hub name's or a folder's).
MODEL = "regexp_extract(mo.name, '[^/]+$')"
# Every whole map: its key, length and run.
MAPS = (
    f"SELECT {MODEL} AS model, r.task, m.example_id, m.layer, m.head, m.n_tokens, m.run_id FROM pattern_maps AS m"
    " JOIN runs AS r USING (run_id) JOIN models AS mo ON mo.model_id = r.model_id"
)


def _key(r: dict) -> tuple:
    return (r["model"], r["task"], int(r["example"]), int(r["layer"]), int(r["head"]))


def _write_picked(out: Path, picked: list[tuple], append: bool) -> None:
    """`picked`: (model, task, example, layer, head, source) rows; with `append`, added to
    `out` (maps already in it are not added twice)."""
    old = []
    if append and out.exists():
        with out.open() as handle:
            old = [(*_key(r), r["source"]) for r in csv.DictReader(handle)]
    seen = {row[:5] for row in old}
    fresh = sorted({row for row in picked if row[:5] not in seen})
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*KEY, "source"])
        writer.writerows(old + fresh)
    print(f"{len(fresh)} maps added → {out} ({len(old) + len(fresh)} in all)")


def _spread(rows: list[tuple], want: int, rng: np.random.Generator) -> list[tuple]:
    """`want` rows drawn without replacement, spread evenly over the layers (row[3])."""
    layers = sorted({r[3] for r in rows})
    picked = []
    for k, layer in enumerate(layers):
        pool = [r for r in rows if r[3] == layer]
        n = want // len(layers) + (1 if k < want % len(layers) else 0)
        picked += [pool[int(i)] for i in rng.choice(len(pool), size=min(n, len(pool)), replace=False)]
    return picked


def sample(
    db: Path,
    out: Path,
    per_task: int,
    seed: int,
    model: str | None = None,
    tasks: list[str] | None = None,
    tokens: tuple[int, int] = (6, 64),
    source: str = "random",
    append: bool = False,
) -> None:
    """Per model and task, `per_task` maps spread evenly over layers (seeded), of whole maps
    with `tokens` (least, most) real tokens: at least 6 (shorter maps cannot be judged)."""
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(f"SELECT * FROM ({MAPS}) WHERE n_tokens BETWEEN ? AND ? ORDER BY ALL", list(tokens)).fetchall()
    rows = [r[:5] for r in rows if (model is None or r[0] == model) and (tasks is None or r[1] in tasks)]
    rng = np.random.default_rng(seed)
    picked = []
    for group in sorted({r[:2] for r in rows}):
        picked += _spread([r for r in rows if r[:2] == group], per_task, rng)
    _write_picked(out, [(*r, source) for r in picked], append)


def _within(attention: np.ndarray, tokens: list[str]) -> float:
    """The within-sentence mass of a sentence pair's map as people see a block: for each
    sentence, the mean over its ordinary rows of the weight on its own tokens and its closing
    separator; the smaller of the two (0 unless the input is a pair)."""
    special = [i for i, t in enumerate(tokens) if _kind(t) == "special"]
    # The sentences lie between specials with a gap: [CLS] A [SEP] ([SEP]) B [SEP].
    spans = [(a + 1, b) for a, b in zip(special, special[1:], strict=False) if b > a + 1]
    if len(spans) != 2:
        return 0.0
    shares = []
    for start, stop in spans:  # keys start..stop: the sentence and its closing separator
        shares.append(float(attention[start:stop, start : stop + 1].sum(1).mean()))
    return min(shares)


# How blocks() measures a pair's within-sentence mass: with the rules' B (ordinary keys only;
# the maps' D < 0.4; top B ≥ 0.45, near misses 0.3–0.45), as round 2 of the shipped set was
# picked, or as people see a block (`_within`, separators included; D < 0.15; top ≥ 0.6,
# near misses 0.4–0.6), as round 3 was, after round 2's candidates were nearly all diagonal.
MASSES = {"rules": (0.4, 0.45, 0.3), "sentence": (0.15, 0.6, 0.4)}


def blocks(
    db: Path, out: Path, per_task: int, near: int, seed: int, model: str | None, tasks: list[str], mass: str
) -> None:
    """Block candidates of sentence pairs, found by their within-sentence mass (`MASSES`),
    leaving out maps whose diagonal band holds much of it (in-sentence trivially): per model
    and task the `per_task` maps with the largest mass (source pairs-block), and `near` near
    misses at random (pairs-near). Appended to `out`."""
    band, top_at, near_at = MASSES[mass]
    con = duckdb.connect(str(db), read_only=True)
    whole = mass == "sentence"
    rows = con.execute(
        "SELECT w.model, w.task, w.example_id, w.layer, w.head, p.block"
        + (", m.attention, w.n_tokens, t.tokens" if whole else "")
        + f" FROM ({MAPS}) AS w JOIN head_patterns AS p USING (run_id, example_id, layer, head)"
        + (
            " JOIN pattern_maps AS m USING (run_id, example_id, layer, head)"
            " JOIN example_tokens AS t USING (run_id, example_id)"
            if whole
            else ""
        )
        + " WHERE w.n_tokens >= 6 AND p.block > 0 AND p.band < ? AND list_contains(?, w.task)"
        + ("" if model is None else " AND w.model = ?")
        + " ORDER BY ALL",
        [band, tasks] + ([] if model is None else [model]),
    ).fetchall()
    if whole:
        rows = [(*r[:5], _within(np.asarray(r[6], np.float32).reshape(r[7], r[7]), r[8])) for r in rows]
    rng = np.random.default_rng(seed)
    picked = []
    for group in sorted({r[:2] for r in rows}):
        pool = [r for r in rows if r[:2] == group]
        top = sorted((r for r in pool if r[5] >= top_at), key=lambda r: -r[5])[:per_task]
        misses = [r for r in pool if near_at <= r[5] < top_at]
        picked += [(*r[:5], "pairs-block") for r in top]
        picked += [(*misses[int(i)][:5], "pairs-near") for i in rng.choice(len(misses), min(near, len(misses)), False)]
    _write_picked(out, picked, append=True)


def _sheet(
    con: duckdb.DuckDBPyConnection, keys: list[tuple | None], columns: int, path: Path, tile: int = TILE
) -> None:
    """Draw the maps `keys` (model, task, example, layer, head; None leaves a place empty) as
    tiles of `tile` pixels, `columns` to a row, in reading order, into a PNG at `path`."""
    rows = (len(keys) + columns - 1) // columns
    image = np.full((rows * (tile + PAD) + PAD, columns * (tile + PAD) + PAD, 3), 255, np.uint8)
    for c, key in enumerate(keys):
        if key is None:
            continue
        attention, n, tokens = con.execute(
            "SELECT m.attention, m.n_tokens, t.tokens FROM pattern_maps AS m JOIN runs AS r USING (run_id)"
            " JOIN models AS mo ON mo.model_id = r.model_id JOIN example_tokens AS t USING (run_id, example_id)"
            f" WHERE {MODEL} = ? AND r.task = ? AND m.example_id = ? AND m.layer = ? AND m.head = ? LIMIT 1",
            list(key),
        ).fetchone()
        a = np.array(attention, np.float32).reshape(n, n)
        x = np.clip(a / max(float(a.max()), 1e-9), 0, 1)
        colour = np.stack([255 - 222 * x, 255 - 180 * x, 255 - 100 * x], -1).astype(np.uint8)
        cell = (tile - 2 * TICK) // n
        pixels = np.repeat(np.repeat(colour, cell, 0), cell, 1)
        top = PAD + (c // columns) * (tile + PAD) + 2 * TICK
        left = PAD + (c % columns) * (tile + PAD) + 2 * TICK
        image[top : top + n * cell, left : left + n * cell] = pixels
        image[top - 1, left - 1 : left + n * cell + 1] = 150
        image[top + n * cell, left - 1 : left + n * cell + 1] = 150
        image[top - 1 : top + n * cell + 1, left - 1] = 150
        image[top - 1 : top + n * cell + 1, left + n * cell] = 150
        for position, token in enumerate(tokens):
            kind = _kind(token)
            if kind == "other":
                continue
            mark = (220, 30, 30) if kind == "special" else (240, 150, 0)
            image[top - 2 * TICK : top - 2, left + position * cell : left + (position + 1) * cell] = mark
            image[top + position * cell : top + (position + 1) * cell, left - 2 * TICK : left - 2] = mark
    _png(image, path)


def _lengths(con: duckdb.DuckDBPyConnection) -> dict[tuple, int]:
    return {r[:5]: r[5] for r in con.execute(MAPS).fetchall()}  # first run wins: the same map


def grids(db: Path, picked: Path, seed: int, out: Path, only: set[tuple] | None = None) -> None:
    """The picked maps in a seeded order, sixteen to an image (4 × 4), those longer than
    LONG_TOKENS six to an image on larger tiles (3 × 2), after the short ones."""
    con = duckdb.connect(str(db), read_only=True)
    with picked.open() as handle:
        keys = [_key(r) for r in csv.DictReader(handle)]
    if only is not None:
        keys = [k for k in keys if k in only]
    order = [keys[int(k)] for k in np.random.default_rng(seed).permutation(len(keys))]
    length = _lengths(con)
    out.mkdir(parents=True, exist_ok=True)
    index: list[tuple] = []
    sheets = 0
    for group, per, columns, tile in (
        ([k for k in order if length[k] <= LONG_TOKENS], 16, 4, TILE),
        ([k for k in order if length[k] > LONG_TOKENS], 6, 3, LONG_TILE),
    ):
        for g in range(0, len(group), per):
            sheets += 1
            chunk = group[g : g + per]
            _sheet(con, list(chunk), columns, out / f"grid-{sheets:03d}.png", tile)
            index.extend((sheets, c + 1, *key) for c, key in enumerate(chunk))
    with (out / "index.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["grid", "cell", *KEY])
        writer.writerows(index)
    print(f"{len(index)} maps in {sheets} grids → {out}")


def examples(db: Path, labels: Path, out: Path, seed: int) -> None:
    """The protocol's example maps, one image per type: a row of four maps both passes gave
    that type, then a row of up to four the passes disagreed on that were settled as it."""
    con = duckdb.connect(str(db), read_only=True)
    with labels.open() as handle:
        rows = list(csv.DictReader(handle))
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    for name in TYPES:
        agreed = [r for r in rows if r["type"] == name and r["pass1"] == r["pass2"] == name]
        settled = [r for r in rows if r["type"] == name and r["pass1"] != r["pass2"]]
        first = [agreed[int(i)] for i in rng.permutation(len(agreed))[:4]]
        second = [settled[int(i)] for i in rng.permutation(len(settled))[:4]]
        keys: list[tuple | None] = [_key(r) for r in first]
        keys += [None] * (4 - len(keys))  # the settled ones start the second row
        keys += [_key(r) for r in second]
        path = out / f"{name.replace('+', '-')}.png"
        _sheet(con, keys, 4, path)
        print(f"{name}: {len(first)} agreed, {len(second)} settled → {path}")


def _labels(folder: Path) -> dict[tuple, str]:
    with (folder / "index.csv").open() as handle:
        where = {(int(r["grid"]), int(r["cell"])): _key(r) for r in csv.DictReader(handle)}
    with (folder / "labels.csv").open() as handle:
        labels = {}
        for r in csv.DictReader(handle):
            name = r["type"].strip()
            if name not in TYPES and name != "skip":
                raise SystemExit(f"{folder}/labels.csv: unknown type {name!r}")
            labels[where[(int(r["grid"]), int(r["cell"]))]] = name
    return labels


def agree(first: Path, second: Path) -> None:
    from sklearn.metrics import cohen_kappa_score, confusion_matrix

    a, b = _labels(first), _labels(second)
    both = sorted(k for k in a if k in b and a[k] != "skip" and b[k] != "skip")
    x, y = [a[k] for k in both], [b[k] for k in both]
    print(
        f"{len(both)} maps labelled in both passes; agreement {np.mean([p == q for p, q in zip(x, y)]):.3f};"
        f" Cohen's kappa {cohen_kappa_score(x, y):.3f}"
    )
    print("rows: first pass, columns: second pass", TYPES)
    print(confusion_matrix(x, y, labels=list(TYPES)))


def disputes(db: Path, picked: Path, first: Path, second: Path, out: Path) -> None:
    """Grids of the maps the two passes label differently, in another order, for a third look
    that settles them (its labels.csv, like a pass's)."""
    a, b = _labels(first), _labels(second)
    grids(db, picked, 3, out, only={k for k in a if a[k] != b.get(k)})


def final(
    picked: Path, first: Path, second: Path, settled: Path, out: Path, append: bool = False, round_: int = 1
) -> None:
    """The label set: per picked map both passes' labels and the final one (the passes' label
    where they agree, else the third look's), and which labelling round they come from; with
    `append`, added after the rows in `out` (another round). Maps a pass skipped are left out."""
    a, b, c = _labels(first), _labels(second), _labels(settled)
    with picked.open() as handle:
        rows = list(csv.DictReader(handle))
    old = []
    if append:
        with out.open() as handle:
            old = list(csv.reader(handle))[1:]
    written = 0
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*KEY, "source", "round", "pass1", "pass2", "type"])
        writer.writerows(old)
        for r in rows:
            k = _key(r)
            if "skip" in (a[k], b[k]) or (a[k] != b[k] and c[k] == "skip"):
                continue
            writer.writerow([*k, r["source"], round_, a[k], b[k], a[k] if a[k] == b[k] else c[k]])
            written += 1
    print(f"{written} maps → {out}")


def export(db: Path, labels: Path, out: Path) -> None:
    """The label set as the CSV `attnwh patterns import-labels` reads for warehouse `db`:
    each task's map keys under the run of that task that holds the map."""
    con = duckdb.connect(str(db), read_only=True)
    with labels.open() as handle:
        rows = list(csv.DictReader(handle))
    written = missing = 0
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "example", "layer", "head", "type"])
        for r in rows:
            found = con.execute(
                "SELECT min(t.run_id) FROM pattern_thumbnails AS t JOIN runs AS r USING (run_id)"
                f" JOIN models AS mo ON mo.model_id = r.model_id WHERE {MODEL} = ? AND r.task = ?"
                " AND t.example_id = ? AND t.layer = ? AND t.head = ?",
                list(_key(r)),
            ).fetchone()
            if found is None or found[0] is None:
                missing += 1
                continue
            writer.writerow([found[0], r["example"], r["layer"], r["head"], r["type"]])
            written += 1
    print(f"{written} labels → {out}" + (f"; {missing} maps are not in {db}" if missing else ""))


ANCHORS_PER_TYPE, ANCHOR_SEED = 20, 5


def model(db: Path, out: Path | None = None) -> None:
    """Fit the default pattern classifier (attnwh.ingest.measures.pattern_model) to the labels
    imported into warehouse `db` and the synthetic anchors, and write its weights and anchors
    to `out` (default: where attnwh ships them)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from attnwh.ingest.measures import pattern_model, patterns
    from attnwh.ingest.measures.statistics import OBSERVED_COLUMNS
    from fixtures import synthetic_maps

    columns = (*patterns.FEATURE_COLUMNS, *patterns.LOOK_COLUMNS)
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        f"SELECT l.pattern, {', '.join('s.' + c for c in columns)} FROM pattern_labels AS l"
        " JOIN head_stats AS s USING (run_id, example_id, layer, head)"
        " ORDER BY l.run_id, l.example_id, l.layer, l.head"
    ).fetchall()
    labels = np.array([r[0] for r in rows], np.int64)
    x = pattern_model.features_of([r[1:] for r in rows])
    maps = synthetic_maps.generate(ANCHORS_PER_TYPE, ANCHOR_SEED)
    observed = synthetic_maps.features(maps, classifier=patterns.THRESHOLDS)
    observed = observed[:, [OBSERVED_COLUMNS.index(c) for c in columns]]
    anchors = (pattern_model.features_of(observed), np.array([m.label for m in maps], np.int64))
    fitted = pattern_model.fit_selected(x, labels, 0, anchors)
    out = out or pattern_model.SHIPPED
    out.write_text(fitted.to_json(anchors) + "\n", encoding="utf-8")
    print(f"{fitted.name} fitted to {len(labels)} labels and {len(anchors[1])} anchors → {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("db", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--per-task", type=int, default=144)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--model", help="only maps of this model (the last part of its stored name)")
    s.add_argument("--tasks", type=lambda v: v.split(","), help="only these tasks, comma-separated")
    s.add_argument("--tokens", type=lambda v: tuple(int(x) for x in v.split("-")), default=(6, 64), help="6-64")
    s.add_argument("--source", default="random")
    s.add_argument("--append", action="store_true", help="add to OUT's maps")
    k = sub.add_parser("blocks")
    k.add_argument("db", type=Path)
    k.add_argument("out", type=Path)
    k.add_argument("--per-task", type=int, default=12)
    k.add_argument("--near", type=int, default=6)
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--model")
    k.add_argument("--tasks", type=lambda v: v.split(","), default=["mrpc", "rte", "stsb", "qnli"])
    k.add_argument("--mass", choices=sorted(MASSES), default="sentence")
    g = sub.add_parser("grids")
    g.add_argument("db", type=Path)
    g.add_argument("picked", type=Path)
    g.add_argument("--seed", type=int, required=True)
    g.add_argument("--out", type=Path, required=True)
    a = sub.add_parser("agree")
    a.add_argument("first", type=Path)
    a.add_argument("second", type=Path)
    d = sub.add_parser("disputes")
    d.add_argument("db", type=Path)
    d.add_argument("picked", type=Path)
    d.add_argument("first", type=Path)
    d.add_argument("second", type=Path)
    d.add_argument("--out", type=Path, required=True)
    f = sub.add_parser("final")
    f.add_argument("picked", type=Path)
    f.add_argument("first", type=Path)
    f.add_argument("second", type=Path)
    f.add_argument("settled", type=Path)
    f.add_argument("out", type=Path)
    f.add_argument("--append", action="store_true", help="add to the labels in OUT")
    f.add_argument("--round", type=int, default=1, dest="round_", help="the labelling round of these passes")
    x = sub.add_parser("examples")
    x.add_argument("db", type=Path)
    x.add_argument("labels", type=Path)
    x.add_argument("--out", type=Path, required=True)
    x.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("export")
    e.add_argument("db", type=Path)
    e.add_argument("labels", type=Path)
    e.add_argument("out", type=Path)
    m = sub.add_parser("model")
    m.add_argument("db", type=Path)
    m.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.command == "sample":
        sample(
            args.db, args.out, args.per_task, args.seed, args.model, args.tasks, args.tokens, args.source, args.append
        )
    elif args.command == "blocks":
        blocks(args.db, args.out, args.per_task, args.near, args.seed, args.model, args.tasks, args.mass)
    elif args.command == "grids":
        grids(args.db, args.picked, args.seed, args.out)
    elif args.command == "disputes":
        disputes(args.db, args.picked, args.first, args.second, args.out)
    elif args.command == "examples":
        examples(args.db, args.labels, args.out, args.seed)
    elif args.command == "export":
        export(args.db, args.labels, args.out)
    elif args.command == "model":
        model(args.db, args.out)
    elif args.command == "final":
        final(args.picked, args.first, args.second, args.settled, args.out, args.append, args.round_)
    else:
        agree(args.first, args.second)


if __name__ == "__main__":
    main()
