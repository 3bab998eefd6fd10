"""Benchmark: attnwh's in-model statistics against the usual ways, measured in one run.

Three ways to get per-head statistics for the same batches of one task:

- plain: the model's own forward pass (sdpa), no statistics at all — the floor;
- attnwh: the registered attention function reducing maps on the device (all 11 statistics);
- eager maps: ``output_attentions=True`` on the eager path, then the same reductions on the
  returned maps (weight shares only: the maps alone do not give the norm-weighted shares).

Prints seconds (best of --repeats) and ratios to the eager-maps baseline and to plain.
Usage: ``python bench/ingest.py [--model DIR] [--glue-dir ../shared/data/glue --task sst2] [--limit 872]``
(default model: the bundled MiniLM; a family without sdpa, such as MPNet, runs plain on its
own attention).
"""

from __future__ import annotations

import time

import torch
from common import load_task, task_parser
from transformers import AutoModel

from attnwh.ingest.encoder.encoding import TokenKinds, collate, encode_task, length_buckets
from attnwh.ingest.encoder.loading import bundled_model_path, load_encoder
from attnwh.ingest.runs.loop import StatisticsCapture


def eager_maps_statistics(model, kinds: TokenKinds, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Weight-share statistics from the full maps returned by output_attentions=True."""
    out = model(**batch, output_attentions=True)
    real = batch["attention_mask"].float()
    rows = real / real.sum(-1, keepdim=True)
    targets = torch.stack(kinds.masks(batch["input_ids"]), -1).float()[:, None]
    per_layer = []
    for a in out.attentions:
        shares = (a @ targets).unbind(-1)
        diag = a.diagonal(dim1=-2, dim2=-1)
        prev = torch.nn.functional.pad(a.diagonal(-1, -2, -1), (1, 0))
        nxt = torch.nn.functional.pad(a.diagonal(1, -2, -1) * real[:, None, 1:], (0, 1))
        ent = -torch.special.xlogy(a, a).sum(-1)
        stacked = torch.stack([*shares, diag, prev, nxt, ent, a.amax(-1)], -1)
        per_layer.append(torch.einsum("bhsk,bs->bhk", stacked, rows))
    return torch.stack(per_layer, 1).cpu()


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def plain_model(source: str):
    """The model's own forward pass: sdpa where the family has it, else its only attention."""
    try:
        return AutoModel.from_pretrained(source, attn_implementation="sdpa")
    except ValueError:
        return AutoModel.from_pretrained(source)


def main() -> None:
    args = task_parser(__doc__.splitlines()[0]).parse_args()
    data = load_task(args)
    data = data.sample(args.limit, 42)
    encoder = load_encoder(args.model, args.device)
    source = args.model or str(bundled_model_path())
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    batches = [
        collate(encoded, b, encoder.tokenizer.pad_token_id, encoder.device)
        for b in length_buckets(encoded.n_tokens, range(len(data.examples)), args.batch_size)
    ]
    capture = StatisticsCapture(encoder)
    plain = plain_model(source).to(encoder.device).eval()
    eager = AutoModel.from_pretrained(source, attn_implementation="eager").to(encoder.device).eval()
    kinds = TokenKinds(encoder.tokenizer, causal=encoder.causal)  # a decoder: the first token, no [SEP]

    def run_plain():
        with torch.inference_mode():
            for b in batches:
                plain(**b)

    def run_attnwh():
        for b in batches:
            capture.run(b)

    def run_eager():
        with torch.inference_mode():
            for b in batches:
                eager_maps_statistics(eager, kinds, b)

    run_attnwh(), run_eager(), run_plain()  # warm-up
    timings = {
        "plain (no statistics)": best_of(args.repeats, run_plain),
        "attnwh": best_of(args.repeats, run_attnwh),
        "eager maps (baseline)": best_of(args.repeats, run_eager),
    }
    n = len(data.examples)
    print(
        f"{data.task}/{data.split}: {n} examples, {len(batches)} batches, device {encoder.device}, "
        f"mean length {encoded.n_tokens.mean():.1f} tokens"
    )
    base = timings["eager maps (baseline)"]
    for name, seconds in timings.items():
        print(
            f"{name:24s} {seconds:7.3f} s  {n / seconds:8.1f} ex/s  "
            f"ratio to baseline {seconds / base:5.2f}  to plain {seconds / timings['plain (no statistics)']:5.2f}"
        )


if __name__ == "__main__":
    main()
