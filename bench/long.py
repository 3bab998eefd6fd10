"""Benchmark: long inputs. Peak memory and time of attnwh's statistics against the model's
own forward passes, at 1k, 2k, 4k and 8k tokens (or the lengths given), in one run.

`--family modernbert` (the default) is a random-initialised ModernBERT (8,192 positions, a
local window of 128 tokens on every other layer): `--shape narrow` (4 layers, 12 heads,
width 384: minutes on a CPU) or `--shape base` (ModernBERT-base's 22 layers, 12 heads, width
768). `--family llama` is a random-initialised Llama decoder with grouped-query attention
(8 query heads on 2 key/value heads, 4:1, head size 64, 16,384 positions) and SmolLM2's
tokenizer (`python tools/fetch_smollm2.py` first): `--shape narrow` (4 layers, width 512) or
`--shape base` (16 layers). `--family gemma3` is a random-initialised Gemma 3 with Gemma 3
270M's attention (4 query heads on 1 key/value head of size 256, a 512-token sliding window on
five layers of every six, width 640) and the same tokenizer: `--shape narrow` (6 layers) or
`--shape base` (18, as Gemma 3 270M). A decoder's maps are causal, so attnwh's tiles hold only
the keys their rows see. Per length, each variant runs in its own process over the same inputs (`--inputs`
random token sequences, one per batch, after one untimed warm-up step), so each peak is that
variant's alone:

- sdpa: transformers' forward with scaled-dot-product attention (memory linear in n on a
  CPU and a GPU): the floor;
- eager: transformers' eager forward, which materialises every layer's maps;
- attnwh: `StatisticsCapture.run` (every stored measure: statistics, pattern and look
  features, mixing, massive activations) under the default attention memory budget, or
  `--attention-memory`;
- check (not timed): attnwh's statistics under the budget against the same statistics with a
  budget that holds each layer's whole map, on the first input; the largest difference is
  printed. Run only at lengths whose whole maps take at most `--check-limit` bytes.

The eager forward is left out at lengths whose maps of one layer exceed `--eager-limit`
bytes (it holds them, and their softmax, whole).

Peak memory is the process's peak resident set on a CPU (it includes Python, torch and the
model, the same in every variant) and `torch.cuda.max_memory_allocated` on a GPU. Prints a
table, the ratios the targets read (attnwh's peak / sdpa's, attnwh's time / eager's, and the
growth of attnwh's peak from 4k to 8k) and writes a line chart of peak memory against length
(`--chart`, PNG). Usage: ``python bench/long.py [--family llama] [--shape narrow] [--lengths 1024,2048,4096,8192]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("sdpa", "eager", "attnwh", "check")
SHAPES = {
    "modernbert": {
        "narrow": {"num_hidden_layers": 4, "hidden_size": 384, "intermediate_size": 576},
        "base": {"num_hidden_layers": 22, "hidden_size": 768, "intermediate_size": 1152},
    },
    "llama": {
        "narrow": {"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 1536},
        "base": {"num_hidden_layers": 16, "hidden_size": 512, "intermediate_size": 1536},
    },
    "gemma3": {
        "narrow": {"num_hidden_layers": 6, "hidden_size": 640, "intermediate_size": 2048},
        "base": {"num_hidden_layers": 18, "hidden_size": 640, "intermediate_size": 2048},
    },
}
# Query heads per family, for the size of one layer's maps.
HEADS = {"modernbert": 12, "llama": 8, "gemma3": 4}
SMOLLM2 = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def build_model(family: str, shape: str, folder: Path) -> None:
    """Save a seeded random model of `family` and `shape` with its tokenizer."""
    if family == "llama":
        build_llama(shape, folder)
    elif family == "gemma3":
        build_gemma3(shape, folder)
    else:
        build_modernbert(shape, folder)


def smollm2_tokenizer(family: str):
    """SmolLM2's tokenizer, reading 16,384 tokens (the decoder families' vocabulary)."""
    from transformers import AutoTokenizer

    if not SMOLLM2.is_file():
        sys.exit(
            f"bench/long.py: --family {family} takes SmolLM2's tokenizer from {SMOLLM2}: run tools/fetch_smollm2.py"
        )
    tokenizer = AutoTokenizer.from_pretrained(SMOLLM2.parent, gguf_file=SMOLLM2.name)
    tokenizer.model_max_length = 16384
    return tokenizer


def save_decoder(model_class, config_class, shape: dict, tokenizer, folder: Path, **attention) -> None:
    """A seeded random decoder of `model_class` with `attention` settings and `shape`, reading
    16,384 positions of `tokenizer`'s vocabulary, saved with the tokenizer."""
    import torch

    config = config_class(
        vocab_size=len(tokenizer),
        max_position_embeddings=16384,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **attention,
        **shape,
    )
    torch.manual_seed(0)
    model_class(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def build_llama(shape: str, folder: Path) -> None:
    """A seeded random Llama with grouped-query attention (4 query heads per key/value head)
    and SmolLM2's tokenizer."""
    from transformers import LlamaConfig, LlamaModel

    save_decoder(
        LlamaModel,
        LlamaConfig,
        SHAPES["llama"][shape],
        smollm2_tokenizer("llama"),
        folder,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
    )


def build_gemma3(shape: str, folder: Path) -> None:
    """A seeded random Gemma 3 of Gemma 3 270M's attention (4 query heads on one key/value head
    of size 256, a 512-token sliding window on five layers of every six) and SmolLM2's
    tokenizer (Gemma's own vocabulary of 262,144 would only widen the embeddings)."""
    from transformers import Gemma3TextConfig, Gemma3TextModel

    layers = SHAPES["gemma3"][shape]["num_hidden_layers"]
    save_decoder(
        Gemma3TextModel,
        Gemma3TextConfig,
        SHAPES["gemma3"][shape],
        smollm2_tokenizer("gemma3"),
        folder,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=512,
        layer_types=["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(layers)],
    )


def build_modernbert(shape: str, folder: Path) -> None:
    """Save a seeded random ModernBERT of `shape` with the bundled model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertModel

    from attnwh.ingest.model.loading import bundled_model_path

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_path())
    tokenizer.model_max_length = 8192
    config = ModernBertConfig(
        vocab_size=len(tokenizer),
        num_attention_heads=12,
        max_position_embeddings=8192,
        local_attention=128,
        global_attn_every_n_layers=2,
        pad_token_id=tokenizer.pad_token_id,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        **SHAPES["modernbert"][shape],
    )
    torch.manual_seed(0)
    ModernBertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def inputs(tokenizer, length: int, count: int, device, causal: bool) -> list[dict]:
    """`count` seeded random inputs of `length` tokens: [CLS], ordinary pieces, [SEP] for an
    encoder; ordinary pieces only for a decoder (the first is its sink token)."""
    import torch

    generator = torch.Generator().manual_seed(length)
    specials = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(1000, len(tokenizer)) if i not in specials])
    out = []
    for _ in range(count):
        body = ordinary[torch.randint(len(ordinary), (length - (0 if causal else 2),), generator=generator)]
        ends = ([], []) if causal else ([tokenizer.cls_token_id], [tokenizer.sep_token_id])
        ids = torch.cat([torch.tensor(ends[0], dtype=torch.long), body, torch.tensor(ends[1], dtype=torch.long)])
        out.append({"input_ids": ids[None].to(device), "attention_mask": torch.ones_like(ids)[None].to(device)})
    return out


def child(args: argparse.Namespace) -> None:
    """One variant at one length, in this process; prints its seconds and peak memory as JSON."""
    import torch
    from transformers import AutoModel

    from attnwh.ingest.model.loading import load_model
    from attnwh.ingest.runs.loop import StatisticsCapture

    encoder = load_model(str(args.model), args.device)
    device = encoder.device
    batches = inputs(encoder.tokenizer, args.length, args.inputs, device, encoder.causal)
    if args.variant == "check":
        import numpy as np

        tiled = StatisticsCapture(encoder, attention_memory=args.attention_memory).run(batches[0])
        whole = StatisticsCapture(encoder, attention_memory=2**62).run(batches[0])
        print(json.dumps({"max_diff": float(np.nanmax(np.abs(tiled - whole)))}))
        return
    if args.variant == "attnwh":
        statistics = StatisticsCapture(encoder, attention_memory=args.attention_memory)

        def step(batch: dict) -> None:
            statistics.run(batch)
    else:
        model = AutoModel.from_pretrained(args.model, attn_implementation=args.variant).to(device).eval()
        del encoder

        def step(batch: dict) -> None:
            with torch.inference_mode():
                model(**batch)

    # One untimed step first: the timings are of the steady state, after torch.compile's
    # compilation of attnwh's fused reductions (seconds, once per process) and the first
    # allocations; the peak includes it.
    step(batches[0])
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for batch in batches:
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": time.perf_counter() - start, "peak": peak}))


def map_bytes(args: argparse.Namespace, length: int) -> int:
    """Bytes of one layer's whole float32 maps of one input."""
    return HEADS[args.family] * length * length * 4


def measure(args: argparse.Namespace, folder: Path, variant: str, length: int) -> dict:
    if variant == "eager" and map_bytes(args, length) > args.eager_limit:
        return {"error": "skipped (maps too big)"}
    if variant == "check" and map_bytes(args, length) > args.check_limit:
        return {"error": "skipped (maps too big)"}
    command = [
        sys.executable,
        __file__,
        "--child",
        "--model",
        str(folder),
        "--variant",
        variant,
        "--length",
        str(length),
        "--inputs",
        str(args.inputs),
        "--device",
        args.device,
    ]
    if args.attention_memory:
        command += ["--attention-memory", str(args.attention_memory)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def chart(results: dict[tuple[str, int], dict], path: Path, title: str) -> None:
    import altair as alt
    import polars as pl

    rows = [
        {"variant": variant, "tokens": length, "peak GiB": r["peak"] / 2**30}
        for (variant, length), r in results.items()
        if "peak" in r
    ]
    line = (
        alt.Chart(pl.DataFrame(rows))
        .mark_line(point=True)
        .encode(x=alt.X("tokens:Q"), y=alt.Y("peak GiB:Q"), color="variant:N")
        .properties(title=title, width=420, height=280)
    )
    line.save(str(path), ppi=150)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(SHAPES), default="modernbert")
    parser.add_argument("--shape", choices=("narrow", "base"), default="narrow")
    parser.add_argument("--lengths", default="1024,2048,4096,8192")
    parser.add_argument("--inputs", type=int, default=2, help="inputs per length, one per batch")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--attention-memory", type=int, default=None, help="bytes (default: attnwh's default)")
    parser.add_argument("--chart", type=Path, default=Path("long-memory.png"))
    gib = 2**30
    parser.add_argument("--eager-limit", type=int, default=4 * gib, help="bytes of one layer's maps (default 4 GiB)")
    parser.add_argument("--check-limit", type=int, default=2 * gib, help="bytes of one layer's maps (default 2 GiB)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    lengths = [int(n) for n in args.lengths.split(",")]
    variants = args.variants.split(",")
    results: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / f"{args.family}-{args.shape}"
        build_model(args.family, args.shape, folder)
        shape = SHAPES[args.family][args.shape]
        print(f"{args.family} {args.shape} ({shape}), {args.inputs} inputs per length, {args.device}")
        print(f"{'tokens':>6}  " + "  ".join(f"{v:>22}" for v in variants))
        for length in lengths:
            cells = []
            for variant in variants:
                results[variant, length] = r = measure(args, folder, variant, length)
                if "max_diff" in r:
                    cells.append(f"max diff {r['max_diff']:.1e}")
                else:
                    cells.append(
                        f"{r['peak'] / 2**30:7.2f} GiB {r['seconds']:8.1f} s" if "peak" in r else r["error"][:22]
                    )
            print(f"{length:>6}  " + "  ".join(f"{c:>22}" for c in cells), flush=True)

    def ratio(a: tuple[str, int], b: tuple[str, int], key: str) -> str:
        if key in results.get(a, {}) and key in results.get(b, {}):
            return f"{results[a][key] / results[b][key]:.2f}"
        return "n/a"

    for length in lengths:
        print(
            f"{length:>6} tokens: attnwh peak / sdpa peak {ratio(('attnwh', length), ('sdpa', length), 'peak')}, "
            f"attnwh time / eager time {ratio(('attnwh', length), ('eager', length), 'seconds')}, "
            f"attnwh time / sdpa time {ratio(('attnwh', length), ('sdpa', length), 'seconds')}"
        )
    for small, large in zip(lengths, lengths[1:]):
        print(f"attnwh peak {large} / {small} tokens: {ratio(('attnwh', large), ('attnwh', small), 'peak')}")
    chart(results, args.chart, f"Peak memory against length, {args.family} {args.shape} ({args.device})")
    print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
