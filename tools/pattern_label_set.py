"""Build the hand-labelled set of real attention maps (docs/pattern_labels.md).

The maps come from a warehouse of the bundled MiniLM over GLUE dev sets, ingested with
whole maps kept (`attnwh ingest --glue-dir DIR --task sst2,rte,mrpc --limit 150
--thumbnails 80`). This tool picks the maps and draws them for labelling by eye, sixteen to
an image, in a seeded order per pass, so that a pass can be labelled without the page and
without seeing another pass:

    python tools/pattern_label_set.py sample W.duckdb picked.csv
    python tools/pattern_label_set.py grids W.duckdb picked.csv --seed 1 --out pass1/
    (look at pass1/grid-NNN.png, write pass1/labels.csv: grid,cell,type)
    python tools/pattern_label_set.py grids W.duckdb picked.csv --seed 2 --out pass2/
    python tools/pattern_label_set.py agree pass1 pass2
    python tools/pattern_label_set.py disputes W.duckdb picked.csv pass1 pass2 --out settled/
    (a third look at the maps the passes disagree on: settled/labels.csv)
    python tools/pattern_label_set.py final picked.csv pass1 pass2 settled labels.csv
    python tools/pattern_label_set.py examples W.duckdb labels.csv --out docs/pattern_labels

The set made this way ships in tools/label_set/ (docs/pattern_labels.md). To use it, rebuild
the maps and import the labels into that warehouse:

    attnwh ingest --db W.duckdb --glue-dir DIR --task sst2,rte,mrpc --limit 150 --thumbnails 80
    python tools/pattern_label_set.py export W.duckdb tools/label_set/labels.csv labels-W.csv
    attnwh patterns import-labels labels-W.csv --db W.duckdb

The default pattern classifier is fitted to that warehouse's labels (and synthetic anchor
maps) and written where attnwh ships it with

    python tools/pattern_label_set.py model W.duckdb

Each tile is one map, rows = queries and columns = keys, darker = more attention (scaled to
the map's largest weight); ticks above and left of it mark [CLS]/[SEP] (red) and punctuation
(orange) positions. Tiles are numbered 1-16 in reading order. The rules' type is never drawn.
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


def sample(db: Path, out: Path, per_task: int, seed: int) -> None:
    """Per task, maps spread evenly over layers (seeded); whole maps only (≤ 64 tokens), and
    inputs of at least 6 tokens (shorter maps cannot be judged)."""
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "SELECT r.task, m.example_id, m.layer, m.head FROM pattern_maps AS m JOIN runs AS r USING (run_id)"
        " WHERE m.n_tokens >= 6 ORDER BY ALL"
    ).fetchall()
    rng = np.random.default_rng(seed)
    picked = []
    tasks = sorted({r[0] for r in rows})
    layers = sorted({r[2] for r in rows})
    for task in tasks:
        for layer in layers:
            pool = [r for r in rows if r[0] == task and r[2] == layer]
            want = per_task // len(layers) + (1 if layer < per_task % len(layers) else 0)
            for i in rng.choice(len(pool), size=min(want, len(pool)), replace=False):
                picked.append(pool[int(i)])
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["task", "example", "layer", "head"])
        writer.writerows(sorted(picked))
    print(f"{len(picked)} maps → {out}")


def _sheet(con: duckdb.DuckDBPyConnection, keys: list[tuple | None], columns: int, path: Path) -> None:
    """Draw the maps `keys` (task, example, layer, head; None leaves a place empty) as tiles,
    `columns` to a row, in reading order, into a PNG at `path`."""
    rows = (len(keys) + columns - 1) // columns
    image = np.full((rows * (TILE + PAD) + PAD, columns * (TILE + PAD) + PAD, 3), 255, np.uint8)
    for c, key in enumerate(keys):
        if key is None:
            continue
        task, example, layer, head = key
        attention, n, tokens = con.execute(
            "SELECT m.attention, m.n_tokens, t.tokens FROM pattern_maps AS m JOIN runs AS r USING (run_id)"
            " JOIN example_tokens AS t USING (run_id, example_id)"
            " WHERE r.task = ? AND m.example_id = ? AND m.layer = ? AND m.head = ?",
            [task, example, layer, head],
        ).fetchone()
        a = np.array(attention, np.float32).reshape(n, n)
        x = np.clip(a / max(float(a.max()), 1e-9), 0, 1)
        colour = np.stack([255 - 222 * x, 255 - 180 * x, 255 - 100 * x], -1).astype(np.uint8)
        cell = (TILE - 2 * TICK) // n
        tile = np.repeat(np.repeat(colour, cell, 0), cell, 1)
        top = PAD + (c // columns) * (TILE + PAD) + 2 * TICK
        left = PAD + (c % columns) * (TILE + PAD) + 2 * TICK
        image[top : top + n * cell, left : left + n * cell] = tile
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


def grids(db: Path, picked: Path, seed: int, out: Path, only: set[tuple] | None = None) -> None:
    con = duckdb.connect(str(db), read_only=True)
    with picked.open() as handle:
        keys = [(r["task"], int(r["example"]), int(r["layer"]), int(r["head"])) for r in csv.DictReader(handle)]
    if only is not None:
        keys = [k for k in keys if k in only]
    order = [keys[int(k)] for k in np.random.default_rng(seed).permutation(len(keys))]
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for g in range(0, len(order), 16):
        chunk = order[g : g + 16]
        _sheet(con, chunk, 4, out / f"grid-{g // 16 + 1:03d}.png")
        index.extend((g // 16 + 1, c + 1, *key) for c, key in enumerate(chunk))
    with (out / "index.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["grid", "cell", "task", "example", "layer", "head"])
        writer.writerows(index)
    print(f"{len(index)} maps in {len(range(0, len(order), 16))} grids → {out}")


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
        keys: list[tuple | None] = [(r["task"], int(r["example"]), int(r["layer"]), int(r["head"])) for r in first]
        keys += [None] * (4 - len(keys))  # the settled ones start the second row
        keys += [(r["task"], int(r["example"]), int(r["layer"]), int(r["head"])) for r in second]
        path = out / f"{name.replace('+', '-')}.png"
        _sheet(con, keys, 4, path)
        print(f"{name}: {len(first)} agreed, {len(second)} settled → {path}")


def _labels(folder: Path) -> dict[tuple, str]:
    with (folder / "index.csv").open() as handle:
        where = {
            (int(r["grid"]), int(r["cell"])): (r["task"], int(r["example"]), int(r["layer"]), int(r["head"]))
            for r in csv.DictReader(handle)
        }
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


def final(picked: Path, first: Path, second: Path, settled: Path, out: Path) -> None:
    """The label set: per picked map both passes' labels and the final one (the passes' label
    where they agree, else the third look's)."""
    a, b, c = _labels(first), _labels(second), _labels(settled)
    with picked.open() as handle:
        rows = list(csv.DictReader(handle))
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["task", "example", "layer", "head", "source", "pass1", "pass2", "type"])
        for r in rows:
            k = (r["task"], int(r["example"]), int(r["layer"]), int(r["head"]))
            writer.writerow([*k, r["source"], a[k], b[k], a[k] if a[k] == b[k] else c[k]])
    print(f"{len(rows)} maps → {out}")


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
                " WHERE r.task = ? AND t.example_id = ? AND t.layer = ? AND t.head = ?",
                [r["task"], int(r["example"]), int(r["layer"]), int(r["head"])],
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
    observed = synthetic_maps.features(maps)[:, [OBSERVED_COLUMNS.index(c) for c in columns]]
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
        sample(args.db, args.out, args.per_task, args.seed)
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
        final(args.picked, args.first, args.second, args.settled, args.out)
    else:
        agree(args.first, args.second)


if __name__ == "__main__":
    main()
