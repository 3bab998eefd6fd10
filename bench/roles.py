"""Benchmark: what a decoder's head-roles probes and restriction sweep cost against its
statistics ingest, in one run, each writing into a fresh warehouse as the commands do:

- statistics (the baseline): `attnwh ingest --task prose --limit P` — every stored measure of
  P paragraphs of the bundled prose sample;
- roles: `attnwh ingest roles` — I induction probes (m random tokens twice) and N needle
  probes of C tokens;
- restriction: `attnwh ingest restriction --context-length R --limit S` — every key/value
  group restricted alone, then the default grid of k together (L·G + 1 + 11 sets, each a
  forward pass over the S sequences), no needle probes.

Each model is loaded once, outside the timing. The three take turns, their order flipping
every repeat, after one warm-up round (`common.alternate`). Printed per variant: its best
time, the tokens its forward passes read, and its time against the statistics ingest as the
median over repeats of the ratio within a repeat, with the range — per run and per token read.

Usage: ``python bench/roles.py [--model models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf]
[--repeats 5]`` (the default model: `python tools/fetch_smollm2.py` first).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common import alternate

from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs import restriction as restriction_runs
from attnwh.ingest.runs import roles as role_runs
from attnwh.ingest.runs.loop import IngestOptions, StatisticsCapture, ingest_runs, prepare_tasks
from attnwh.ingest.sources import files as loaders
from attnwh.ingest.sources.text import load_sample_text

SMOLLM2 = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(SMOLLM2), help="a decoder: hub name, folder or GGUF file")
    parser.add_argument("--paragraphs", type=int, default=16, help="P: prose paragraphs of the statistics ingest")
    parser.add_argument("--induction", type=int, default=8, help="I: induction probes")
    parser.add_argument("--repeat-length", type=int, default=50, help="m: random tokens of an induction probe")
    parser.add_argument("--needles", type=int, default=2, help="N: needle probes")
    parser.add_argument("--needle-length", type=int, default=512, help="C: tokens of a needle probe")
    parser.add_argument("--context-length", type=int, default=128, help="R: tokens of a restriction sequence")
    parser.add_argument("--sequences", type=int, default=2, help="S: restriction sequences")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    if args.model == str(SMOLLM2) and not SMOLLM2.is_file():
        raise SystemExit(f"error: no model at {SMOLLM2}: python tools/fetch_smollm2.py")

    # Statistics: the prose paragraphs, as `attnwh ingest --task prose` reads them.
    stats_encoder = load_model(args.model, args.device)
    options = IngestOptions(limit=args.paragraphs, batch_size=8)
    (prepared,) = prepare_tasks(stats_encoder, [loaders.load_sample("prose", "dev")], options)
    capture = StatisticsCapture(stats_encoder)
    stats_tokens = int(prepared.encoded.n_tokens.sum())

    # Roles: both probe kinds, as `attnwh ingest roles --probes induction,needle` builds them.
    role_encoder = load_model(args.model, args.device, "float32")
    documents = tuple(e.text_a for e in load_sample_text(role_runs.ROLE_TEXT_DEFAULT).examples)
    plans = [
        role_runs.RoleSettings("induction", args.induction, 0, 64, repeat_length=args.repeat_length),
        role_runs.RoleSettings(
            "needle",
            args.needles,
            0,
            64,
            context_length=args.needle_length,
            depths=(0.0, 0.5, 1.0),
            text_name="sample:prose",
            documents=documents,
        ),
    ]
    made = [plan.build(role_encoder) for plan in plans]
    role_tokens = sum(len(p) for probes in made for p in probes)

    # Restriction: the default grid, no needles.
    lm = load_model(args.model, args.device, language_model=True)
    restriction_options = restriction_runs.RestrictionOptions(
        context_length=args.context_length, limit=args.sequences, batch_size=args.sequences
    )
    text = restriction_runs.read_text(None)
    cut = restriction_runs.cut_text(text, lm.tokenizer, restriction_options)
    config = lm.model.config
    groups = int(config.num_hidden_layers) * int(getattr(config, "num_key_value_heads", None) or lm.num_heads)
    sets = 1 + groups + len(restriction_runs.default_grid(groups))
    restriction_tokens = sets * sum(len(s) for s in cut.sequences)

    with tempfile.TemporaryDirectory() as tmp:

        def fresh(name: str, repeat: int) -> Path:
            return Path(tmp) / f"{name}-{repeat}.duckdb"

        runs = {
            "statistics": lambda r: ingest_runs(fresh("statistics", r), capture, [prepared], options),
            "roles": lambda r: [
                role_runs.ingest_roles(fresh("roles", r), role_encoder, plan, probes)
                for plan, probes in zip(plans, made, strict=True)
            ],
            "restriction": lambda r: restriction_runs.ingest_restriction(
                fresh("restriction", r), lm, cut, restriction_options
            ),
        }
        times = alternate(runs, args.repeats)

    tokens = {"statistics": stats_tokens, "roles": role_tokens, "restriction": restriction_tokens}
    print(
        f"{Path(args.model).name}: statistics of {len(prepared.example_ids)} prose paragraphs; roles on "
        f"{args.induction} induction probes (m = {args.repeat_length}) and {args.needles} needle probes of "
        f"{args.needle_length} tokens; restriction of {len(cut.sequences)} sequences of {args.context_length} "
        f"tokens under {sets} sets. {args.repeats} repeats, alternated."
    )
    base = times["statistics"]
    for name, seconds in times.items():
        ratios = sorted(s / b for s, b in zip(seconds, base, strict=True))
        per_token = sorted(r * tokens["statistics"] / tokens[name] for r in ratios)
        print(
            f"{name:12s} best {min(seconds):7.2f} s  {tokens[name]:8,d} tokens read  "
            f"time / statistics: median {statistics.median(ratios):6.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]  "
            f"per token: median {statistics.median(per_token):5.2f} [{per_token[0]:.2f}, {per_token[-1]:.2f}]"
        )


if __name__ == "__main__":
    main()
