"""Benchmark: attnwh's in-model statistics against the usual ways, measured in one run.

Three ways to get per-head statistics for the same batches of one task:

- plain: the model's own forward pass (sdpa), no statistics at all — the floor;
- attnwh: the registered attention function reducing maps on the device (all 11 statistics);
- eager maps: ``output_attentions=True`` on the eager path, then the same reductions on the
  returned maps (weight shares only: the maps alone do not give the norm-weighted shares).

The three take turns, --repeats times after a warm-up round (`common.alternate`), so that a
slow spell of a shared machine falls on each alike. Prints each one's best seconds and its
ratios to the eager-maps baseline and to plain: best against best, and the median over
repeats of the ratio within each repeat, with its range.
Usage: ``python bench/ingest.py [--model DIR | FILE.gguf] [--glue-dir ../shared/data/glue --task sst2] [--limit 872]``
(default model: the bundled MiniLM). Plain and eager are copies of the model attnwh loaded,
switched to sdpa and eager attention, so a decoder read from a GGUF file (SmolLM2-135M:
``--model models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf``) is timed the same way; a
family without sdpa, such as MPNet, runs plain on its own attention. On a decoder the
baseline's targets are the first token and punctuation (no [SEP]).
"""

from __future__ import annotations

import torch
from common import alternate, load_task, print_ratios, task_parser, with_attention

from attnwh.ingest.model.encoding import TokenKinds, collate, encode_task, length_buckets
from attnwh.ingest.model.loading import load_model
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


def main() -> None:
    args = task_parser(__doc__.splitlines()[0]).parse_args()
    data = load_task(args)
    data = data.sample(args.limit, 42)
    encoder = load_model(args.model, args.device)
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    batches = [
        collate(encoded, b, encoder.tokenizer.pad_token_id, encoder.device)
        for b in length_buckets(encoded.n_tokens, range(len(data.examples)), args.batch_size)
    ]
    capture = StatisticsCapture(encoder)
    plain = with_attention(encoder.model, "sdpa")
    eager = with_attention(encoder.model, "eager")
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

    # alternate() warms each up once, then runs them in turn, the order flipping every repeat.
    times = alternate(
        {
            "eager maps (baseline)": lambda repeat: run_eager(),
            "attnwh": lambda repeat: run_attnwh(),
            "plain (no statistics)": lambda repeat: run_plain(),
        },
        args.repeats,
    )
    print(
        f"{encoder.name} ({encoder.family}, {encoder.num_layers} layers × {encoder.num_heads} heads): "
        f"{data.task}/{data.split}: {len(data.examples)} examples, {len(batches)} batches, device {encoder.device}, "
        f"mean length {encoded.n_tokens.mean():.1f} tokens; {args.repeats} alternated repeats"
    )
    print_ratios(times, "eager maps (baseline)", len(data.examples))
    print("against plain:")
    print_ratios(times, "plain (no statistics)", len(data.examples))


if __name__ == "__main__":
    main()
