"""Benchmark: what storing a relations run through the engine costs, measured in one run.

`attnwh ingest relations --conllu` on one model and the same sentences, two ways:

- measure: the measurement alone (`dependencies.measure` over all the sentences, then the
  rows of dependency_heads, dependency_baselines and feature_attention built from its counts),
  which is what a relations run did before it went through the engine, less its one write;
- attnwh: the run as `attnwh ingest relations` stores it (`ingest_relations`): units of 64
  sentences, each unit's running totals committed with its done marks, then the finish that
  sums them and writes the tables, into a fresh warehouse each repeat.

They take turns (`common.alternate`), --repeats times after a warm-up round. Printed: each
one's best seconds and its ratio to the measurement (best against best, and the median of the
per-repeat ratios with their range), and whether both give the same counts per relation,
layer and head.

Usage: ``python bench/relations.py [--model DIR] [--conllu FILE] [--limit 1000]`` (default: the
bundled MiniLM on the UD English-EWT dev set in ../shared/data/ud).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import duckdb
from common import alternate, print_ratios

from attnwh.ingest.measures import dependencies
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs import relations
from attnwh.ingest.sources.examples import seeded_sample

SHARED_UD = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "en_ewt-ud-dev.conllu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="encoder or decoder (default: the bundled MiniLM)")
    parser.add_argument("--conllu", type=Path, default=SHARED_UD)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    encoder = load_model(args.model, args.device)
    sentences = seeded_sample(dependencies.read_conllu(args.conllu), args.limit, 42)
    options = relations.RelationsOptions(limit=args.limit, batch_size=args.batch_size)
    task = relations.dependencies_task(encoder, args.conllu, sentences, args.limit, 42)
    scratch = Path(tempfile.mkdtemp(prefix="bench-relations-"))
    found: dict[str, object] = {}

    def measure(repeat: int) -> None:
        result = dependencies.measure(encoder, sentences, args.batch_size)
        rows = result.counts.head_rows()
        result.counts.baseline_rows()
        if result.features is not None:
            result.features.rows()
        found["measure"] = sorted(
            zip(rows["relation"], rows["direction"], rows["layer"], rows["head"], rows["correct"])
        )

    def stored(repeat: int) -> None:
        db = scratch / f"r{repeat}.duckdb"
        relations.ingest_relations(db, encoder, [task], options)
        with duckdb.connect(str(db), read_only=True) as con:
            found["attnwh"] = sorted(
                con.execute("SELECT relation, direction, layer, head, correct FROM dependency_heads").fetchall()
            )

    times = alternate({"measure": measure, "attnwh": stored}, args.repeats)
    print(f"{encoder.name}: {len(sentences)} sentences of {args.conllu.name}, batch {args.batch_size}")
    print_ratios(times, "measure", len(sentences))
    same = found["measure"] == [tuple(r) for r in found["attnwh"]]  # type: ignore[union-attr]
    print(f"same counts per relation, direction, layer and head: {same}")


if __name__ == "__main__":
    main()
