"""Benchmark: the decoder run kinds that score next-token loss under a change, each as `attnwh
ingest` stores it, against the plain forward passes it cannot do without, in one run.

Kinds (``--kinds``, default all four), each on the bundled prose cut into ``--max-length``
tokens (at most ``--limit`` sequences, ``--batch-size`` per pass):

- ``streaming``: every key/value group keeps S sinks and a window of 64, for S = 0 and 4,
  beside the model as it is (`attnwh ingest streaming`): 3 passes;
- ``massive-ablation``: the scan for massive activations, then the model as it is, with them
  set to zero and set to their mean (`attnwh ingest massive-ablation`): 4 passes;
- ``loss-curve``: the loss at every position (`attnwh ingest loss-curve`): 1 pass;
- ``head-sets``: the loss sweep's baseline and 5 draws of 10 random heads, without the sweep
  (`attnwh ingest ablation --task prose --random-heads 10 --draws 5 --no-sweep`): 6 passes.

Per kind, two ways over the same sequences and batches:

- floor (the baseline): transformers' own forward pass (sdpa) and its next-token loss, once
  per pass the kind needs (above) — what any tool computing these losses must do;
- attnwh: the whole stored run into a fresh warehouse (prepare, every unit, the tests and the
  results), the model loaded once beforehand.

They take turns, --repeats times after a warm-up round (`common.alternate`). Prints each one's
best seconds and the ratio attnwh / floor: best against best, and the median over repeats of
the ratio within each repeat, with its range.

Usage: ``python bench/decoder_runs.py [--model FILE.gguf|DIR] [--kinds streaming,loss-curve]
[--limit 4 --max-length 128]`` (default model: SmolLM2-135M where tools/fetch_smollm2.py put it).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

import torch
from common import alternate, print_ratios, with_attention

from attnwh.ingest.model import loading
from attnwh.ingest.model.loading import LoadedModel, load_model
from attnwh.ingest.runs.engine import EngineOptions
from attnwh.ingest.runs.prepared import Prepared

SMOLLM2 = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf"
KINDS = ("streaming", "massive-ablation", "loss-curve", "head-sets")


@dataclasses.dataclass(frozen=True)
class Kind:
    """A run kind set up for timing: how to prepare its run, the sequences it reads and the
    forward passes over them it needs at least."""

    prepare: Callable[[], Prepared]
    sequences: list[Sequence[int]]
    passes: int


def streaming(name: str, encoder: LoadedModel, args: argparse.Namespace) -> Kind:
    from attnwh.ingest.runs import streaming as runs_of
    from attnwh.ingest.runs.restriction import read_text

    options = runs_of.StreamingOptions(
        sinks=(0, 4), window=64, context_lengths=(args.max_length,), limit=args.limit, batch_size=args.batch_size
    )
    cut = runs_of.cut_lengths(read_text(None), encoder.tokenizer, options)
    return Kind(
        lambda: runs_of.prepare_streaming(name, None, options, args.device, (args.max_length,), 1),
        list(cut.sequences[args.max_length]),
        1 + len(options.sinks),
    )


def massive_ablation(name: str, encoder: LoadedModel, args: argparse.Namespace) -> Kind:
    from attnwh.ingest.measures.massive_ablation import INTERVENTIONS
    from attnwh.ingest.runs import massive_ablation as runs_of
    from attnwh.ingest.runs.restriction import RestrictionOptions, cut_text, read_text

    options = runs_of.MassiveAblationOptions(limit=args.limit, batch_size=args.batch_size)
    cutting = RestrictionOptions(context_length=args.max_length, limit=args.limit, needles=0)
    cut = cut_text(read_text(None), encoder.tokenizer, cutting)
    return Kind(
        lambda: runs_of.prepare_massive_ablation(name, None, options, args.device, args.max_length),
        list(cut.sequences),
        1 + len(INTERVENTIONS),
    )


def loss_curve(name: str, encoder: LoadedModel, args: argparse.Namespace) -> Kind:
    from attnwh.ingest.runs import loss_curve as runs_of
    from attnwh.ingest.runs.restriction import read_text

    options = runs_of.LossCurveOptions(limit=args.limit, batch_size=args.batch_size)
    cut = runs_of.cut_sequences(read_text(None), encoder.tokenizer, args.max_length, args.limit)
    return Kind(
        lambda: runs_of.prepare_loss_curve(name, None, options, args.device, args.max_length),
        [e.token_ids for e in cut.examples if e.token_ids is not None],
        1,
    )


def head_sets(name: str, encoder: LoadedModel, args: argparse.Namespace, db: Path) -> Kind:
    from attnwh.ingest.runs.ablation import AblationOptions
    from attnwh.ingest.runs.head_sets import HeadSets
    from attnwh.ingest.runs.loop import IngestOptions
    from attnwh.ingest.runs.loss_ablation import prepare_loss_ablation, prepare_loss_sweep
    from attnwh.ingest.sources.files import load_sample

    sets = HeadSets(sweep=False, random_k=10, draws=5)
    tasks = [load_sample("prose", "dev")]
    options = IngestOptions(limit=args.limit, max_length=args.max_length, batch_size=args.batch_size)
    settings = [AblationOptions(mode="uniform", configs_per_pass=1)]
    # The sequences the sweep reads: its own preparation of the text, without the sets.
    (task,) = prepare_loss_ablation(encoder, tasks, options, settings[0])
    return Kind(
        lambda: prepare_loss_sweep(name, tasks, settings, options, device=args.device, sets=sets, db=db),
        [ids.tolist() for ids in task.task.encoded.input_ids],
        1 + sets.draws,
    )


def floor(model: torch.nn.Module, sequences: list[Sequence[int]], batch_size: int, passes: int) -> None:
    """The plain forward pass and next-token loss over `sequences`, `passes` times; a shorter
    sequence is padded on the right and its padding masked, as attnwh batches it."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        for _ in range(passes):
            for lo in range(0, len(sequences), batch_size):
                chunk = sequences[lo : lo + batch_size]
                n = max(len(s) for s in chunk)
                ids = torch.zeros(len(chunk), n, dtype=torch.long, device=device)
                mask = torch.zeros_like(ids)
                for row, s in enumerate(chunk):
                    ids[row, : len(s)] = torch.tensor(s)
                    mask[row, : len(s)] = 1
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
                targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
                torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="causal LM: folder, hub name or GGUF file")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--limit", type=int, default=4, help="sequences per kind")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kind {unknown[0]!r}; choose from {', '.join(KINDS)}")

    name = args.model or str(SMOLLM2)
    encoder = load_model(name, args.device, language_model=True)
    plain = with_attention(encoder.model, "sdpa")
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(loading, "load_model", lambda *a, **k: encoder):
        # Every prepare loads the model by name; the patch hands it the one loaded above.
        makers = {
            "streaming": streaming,
            "massive-ablation": massive_ablation,
            "loss-curve": loss_curve,
            "head-sets": lambda n, e, a: head_sets(n, e, a, Path(tmp) / "sets.duckdb"),
        }
        for kind in kinds:
            setup = makers[kind](name, encoder, args)

            def run_attnwh(repeat: int, setup: Kind = setup, kind: str = kind) -> None:
                db = Path(tmp) / f"{kind}-{repeat}.duckdb"
                setup.prepare().ingest(db, EngineOptions(), None, None)

            def run_floor(repeat: int, setup: Kind = setup) -> None:
                floor(plain, setup.sequences, args.batch_size, setup.passes)

            times = alternate({"floor (baseline)": run_floor, f"attnwh {kind}": run_attnwh}, args.repeats)
            print(
                f"{kind}: {encoder.name} on {len(setup.sequences)} sequences of up to {args.max_length} tokens "
                f"(batches of {args.batch_size}), {setup.passes} passes, device {encoder.device}, "
                f"{args.repeats} alternated repeats"
            )
            print_ratios(times, "floor (baseline)", len(setup.sequences))


if __name__ == "__main__":
    main()
