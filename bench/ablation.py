"""Benchmark: the sweeps with prefix caching against the naive sweeps, in one run.

Three sweeps (``--sweep``):

- ``classifier`` (default): the head sweep of a fine-tuned classifier, below;
- ``loss``: the head sweep of a causal language model scored by next-token loss on text
  (the baseline, L×H heads and L whole layers), per sequence in nats;
- ``restriction``: the ranking of the whole-context restriction, every key/value group
  restricted alone to 4 sinks and a window of 64, plus the unrestricted model.

For ``loss`` and ``restriction`` the model is a causal LM (``--model``: a folder, hub name or
GGUF file; default: SmolLM2-135M where tools/fetch_smollm2.py put it) on the bundled prose
cut into ``--max-length`` tokens; naive and prefix-cached alternate batch by batch, the
model's loading left out, and every loss is compared bit for bit.

The sweep is every configuration of `attnwh ingest ablation` (the baseline, L×H heads and
L whole layers, mode uniform) on a fine-tuned classifier:

- naive: one full forward pass per configuration (the baseline of the ratio);
- attnwh: the layers below a configuration's first disabled layer are not recomputed but
  taken from one pass with nothing disabled (`AblationSweep`, prefix caching).

Both run on the same batches, interleaved batch by batch (which goes first alternates) so that
machine noise hits both alike. A third timing is the sweep as `attnwh ingest ablation` stores
it: units, parts, Arrow tables and DuckDB transactions into a fresh warehouse, the statistics
and combinations that follow the sweep left out (they are not part of the 79 configurations).
Each of --repeats repeats times all three; printed are the median ratios to the naive sweep
with their range, the arithmetic floor of prefix caching (layer passes done / layer passes of
the naive sweep), and whether every prediction is identical.

Usage: ``python bench/ablation.py --model DIR [--glue-dir ../shared/data/glue --task sst2]
[--limit N]``, DIR a classifier fine-tuned on the task (e.g. by `attnwh finetune`). Without
--model, MiniLM is first fine-tuned on 2000 SST-2 training examples (one epoch, lr 1e-4).
``python bench/ablation.py --sweep loss [--model FILE.gguf] [--limit 8 --max-length 128]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from attnwh.ingest.measures.ablation import AblationSweep, sweep_configurations
from attnwh.ingest.model.encoding import collate, encode_task, length_buckets
from attnwh.ingest.model.loading import load_model
from attnwh.ingest.runs import ablation as ablation_runs
from attnwh.ingest.runs.finetune import FinetuneOptions, finetune
from attnwh.ingest.runs.loop import IngestOptions
from attnwh.ingest.sources import files as loaders

SHARED_GLUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="fine-tuned classifier directory")
    parser.add_argument("--glue-dir", type=Path, default=SHARED_GLUE)
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--configs-per-pass", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sweep", choices=("classifier", "loss", "restriction"), default="classifier")
    parser.add_argument("--max-length", type=int, default=128, help="loss, restriction: tokens per sequence")
    args = parser.parse_args()
    if args.sweep != "classifier":
        decoder_sweeps(args)
        return

    model = args.model
    if model is None:
        model = tempfile.mkdtemp(prefix="attnwh-bench-")
        print(f"fine-tuning MiniLM on 2000 {args.task} training examples into {model} …", flush=True)
        train = loaders.load_glue(args.glue_dir, args.task, "train").sample(2000, 42)
        dev = loaders.load_glue(args.glue_dir, args.task, "dev")
        result = finetune(None, train, dev, Path(model), FinetuneOptions(epochs=1, learning_rate=1e-4), args.device)
        print(f"  dev {result.scores} after {result.train_seconds:.0f} s")

    data = loaders.load_glue(args.glue_dir, args.task, "dev").sample(args.limit, 42)
    encoder = load_model(model, args.device)
    encoded = encode_task(encoder.tokenizer, data, 128)
    configs = sweep_configurations(encoder.num_layers, encoder.num_heads)
    naive = AblationSweep(encoder, "uniform", prefix_cache=False)
    cached = AblationSweep(encoder, "uniform", prefix_cache=True, configs_per_pass=args.configs_per_pass)
    batches = list(length_buckets(encoded.n_tokens, range(len(data.examples)), args.batch_size))

    first = collate(encoded, batches[0], encoder.tokenizer.pad_token_id, encoder.device)
    naive.logits(first, configs[:3]), cached.logits(first, configs[:3])  # warm-up
    same, worst = True, 0.0
    ratios: dict[str, list[float]] = {"attnwh": [], "stored": []}
    totals = {"naive": [], "attnwh": [], "stored": []}
    for repeat in range(args.repeats):
        times = {"naive": 0.0, "attnwh": 0.0}
        for indices in batches:
            batch = collate(encoded, indices, encoder.tokenizer.pad_token_id, encoder.device)
            found = {}
            for name in ("naive", "attnwh") if repeat % 2 == 0 else ("attnwh", "naive"):
                start = time.perf_counter()
                found[name] = (naive if name == "naive" else cached).logits(batch, configs)
                times[name] += time.perf_counter() - start
            same &= bool(np.array_equal(found["naive"].argmax(-1), found["attnwh"].argmax(-1)))
            worst = max(worst, float(np.abs(found["naive"] - found["attnwh"]).max()))
        times["stored"] = stored_sweep(encoder, data, args)
        for name, seconds in times.items():
            totals[name].append(seconds)
        for name in ratios:
            ratios[name].append(times[name] / times["naive"])
        print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()), flush=True)

    L = encoder.num_layers
    passes = L + sum(L - c.start(L) for c in configs)
    print(
        f"{data.task}/{data.split}: {len(data.examples)} examples, {len(configs)} configurations "
        f"({L} layers × {encoder.num_heads} heads + {L} layers + baseline), device {encoder.device}, "
        f"{args.configs_per_pass} configuration(s) per pass"
    )
    print(f"naive sweep (baseline)          median {statistics.median(totals['naive']):7.1f} s")
    for name, label in (("attnwh", "attnwh (prefix cache)"), ("stored", "attnwh ingest (sweep stored)")):
        found = ratios[name]
        print(
            f"{label:31} median {statistics.median(totals[name]):7.1f} s   ratio median "
            f"{statistics.median(found):.3f} [{min(found):.3f}, {max(found):.3f}] over {len(found)} repeats"
        )
    print(
        f"arithmetic floor of prefix caching: {passes}/{len(configs) * L} layer passes = "
        f"{passes / (len(configs) * L):.3f}"
    )
    print(f"identical predictions: {'yes' if same else 'NO'}; largest logit difference {worst:.2e}")


SMOLLM2 = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def decoder_sweeps(args: argparse.Namespace) -> None:
    """--sweep loss or restriction: naive against prefix-cached, batch by batch."""
    import torch

    from attnwh.ingest.measures import restriction as rs
    from attnwh.ingest.measures.lm_loss import token_losses
    from attnwh.ingest.sources.text import cut_documents, load_sample_text

    encoder = load_model(args.model or str(SMOLLM2), args.device, language_model=True)
    cut = cut_documents(load_sample_text("prose"), encoder.tokenizer, args.max_length)
    sequences = [e.token_ids for e in cut.examples if e.token_ids and len(e.token_ids) == args.max_length]
    sequences = sequences[: args.limit or 8]
    batch_size = min(args.batch_size, 4)
    batches = []
    for lo in range(0, len(sequences), batch_size):
        ids = torch.tensor(sequences[lo : lo + batch_size], device=encoder.device)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    config = encoder.model.config
    L = int(config.num_hidden_layers)
    if args.sweep == "loss":
        configs = sweep_configurations(encoder.attention_layers, encoder.num_heads)
        sweeps = {
            name: AblationSweep(encoder, "uniform", prefix_cache=cache, scorer=token_losses)
            for name, cache in (("naive", False), ("attnwh", True))
        }

        def run(name: str, batch: dict) -> np.ndarray:
            return sweeps[name].logits(batch, configs)

        starts = [c.start(L) for c in configs]
        what = f"{len(configs)} configurations ({L} layers × {encoder.num_heads} heads + {L} layers + baseline)"
    else:
        groups = int(getattr(config, "num_key_value_heads", None) or encoder.num_heads)
        sets = [set(), *({(layer, g)} for layer in rs.cache_layers(config) for g in range(groups))]

        def run(name: str, batch: dict) -> np.ndarray:
            found = rs.restricted_lm_loss(encoder.model, batch, sets, prefix_cache=name == "attnwh")
            return np.stack([found.nats, found.correct.astype(np.float64)])

        starts = [min((layer for layer, _ in chosen), default=L) for chosen in sets]
        what = f"{len(sets)} restriction sets (the unrestricted model and {L} layers × {groups} key/value groups alone)"
    warm = {"input_ids": batches[0]["input_ids"][:1, :16], "attention_mask": batches[0]["attention_mask"][:1, :16]}
    run("naive", warm), run("attnwh", warm)  # warm-up, on a short input
    same = True
    ratios, totals = [], {"naive": [], "attnwh": []}
    for repeat in range(args.repeats):
        times = {"naive": 0.0, "attnwh": 0.0}
        for batch in batches:
            found = {}
            for name in ("naive", "attnwh") if repeat % 2 == 0 else ("attnwh", "naive"):
                start = time.perf_counter()
                found[name] = run(name, batch)
                times[name] += time.perf_counter() - start
            same &= bool(np.array_equal(found["naive"], found["attnwh"]))
        for name, seconds in times.items():
            totals[name].append(seconds)
        ratios.append(times["attnwh"] / times["naive"])
        print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()), flush=True)
    # The unchanged model's pass, then each configuration from its first changed layer.
    passes = L + sum(L - s for s in starts)
    print(
        f"{args.sweep} sweep of {encoder.name} on {len(sequences)} sequences of {args.max_length} tokens "
        f"(batches of {batch_size}), device {encoder.device}: {what}"
    )
    print(f"naive sweep (baseline)   median {statistics.median(totals['naive']):7.1f} s")
    print(
        f"attnwh (prefix cache)    median {statistics.median(totals['attnwh']):7.1f} s   ratio median "
        f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] over {len(ratios)} repeats"
    )
    print(
        f"arithmetic floor of the layers: {passes}/{len(starts) * L} layer passes = {passes / (len(starts) * L):.3f} "
        "(the language-model head and the loss run once per configuration either way)"
    )
    print(f"identical losses{' and hits' if args.sweep == 'restriction' else ''}: {'yes' if same else 'NO'}")


def stored_sweep(encoder, data, args) -> float:
    """Seconds of the sweep stage of `attnwh ingest ablation` (units, parts, storing) into a
    fresh warehouse; the significance tests and combinations after it are patched out."""
    options = IngestOptions(batch_size=args.batch_size, max_length=128)
    settings = ablation_runs.AblationOptions(mode="uniform", importance=False, configs_per_pass=args.configs_per_pass)
    prepared = ablation_runs.prepare_ablation(encoder, [data], options, settings)
    with tempfile.TemporaryDirectory() as folder, mock.patch.object(ablation_runs, "_finish"):
        start = time.perf_counter()
        ablation_runs.ingest_ablation(Path(folder) / "w.duckdb", encoder, prepared, options, settings)
        return time.perf_counter() - start


if __name__ == "__main__":
    main()
