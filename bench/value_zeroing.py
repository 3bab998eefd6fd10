"""Benchmark: value zeroing batched in attnwh against the brute force, measured in one run.

Two ways to get the value-zeroing shares (all heads zeroed at once) of the same examples:

- attnwh: :class:`ValueZeroing` ("layer"): one reference pass, then per layer every
  (example, token) variant as a row of one batched recomputation of that layer alone;
- brute force (baseline): per example alone, per layer and per token, one forward of the
  layer module with a hook on its value projection zeroing that token's value vector,
  compared with the unchanged output (Mohebbi et al.'s procedure, one variant at a time).

Prints seconds (best of --repeats), the ratio to the brute force, and the largest
difference between the two (shares and matrices), which must be rounding only.
Usage: ``python bench/value_zeroing.py [--glue-dir ../shared/data/glue --task sst2] [--limit 32]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModel

from attnwh.ingest.measures.value_zeroing import ValueZeroing
from attnwh.ingest.model.encoding import TokenKinds, collate, encode_task, length_buckets
from attnwh.ingest.model.loading import bundled_model_path, load_model
from attnwh.ingest.sources import files as loaders


def brute_force_matrix(model: Any, ids: torch.Tensor, depth_count: int) -> list[np.ndarray]:
    """Per layer, the normalised (n, n) matrix of one unpadded example (ids: (1, n)), one
    layer forward per zeroed token (a BERT-style eager model: MiniLM)."""
    hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    n = ids.shape[1]
    out = []
    for depth in range(depth_count):
        layer = model.encoder.layer[depth]
        y = layer_output(layer, hidden[depth])  # (n, D)
        rows = []
        for j in range(n):

            def zero(module: torch.nn.Module, args: object, value: torch.Tensor, j: int = j) -> torch.Tensor:
                value = value.clone()
                value[:, j] = 0
                return value

            hook = layer.attention.self.value.register_forward_hook(zero)
            try:
                changed = layer_output(layer, hidden[depth])
            finally:
                hook.remove()
            rows.append(1 - torch.nn.functional.cosine_similarity(changed, y, dim=-1))
        c = torch.stack(rows, dim=1).numpy()  # (i, j)
        out.append(c / c.sum(1, keepdims=True))
    return out


def layer_output(layer: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The layer's output for one example, (n, D) in float64 (a tensor, or a tuple holding it)."""
    out = layer(hidden)
    return (out[0] if isinstance(out, tuple) else out)[0].double()


def shares(c: np.ndarray, cls: np.ndarray, sep: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """VZ_COLUMNS of one (n, n) matrix: means over its rows."""
    n = len(c)
    prev = np.array([c[i, i - 1] if i > 0 else 0.0 for i in range(n)])
    nxt = np.array([c[i, i + 1] if i < n - 1 else 0.0 for i in range(n)])
    return np.array(
        [(c @ cls).mean(), (c @ sep).mean(), (c @ punct).mean(), np.diag(c).mean(), prev.mean(), nxt.mean()]
    )


def best_of(repeats: int, fn) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", type=Path, default=Path("../shared/data/glue"))
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-rows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.glue_dir.is_dir():
        data = loaders.load_glue(args.glue_dir, args.task, "dev")
    else:
        data = loaders.load_sample("sentiment", "dev")
    data = data.sample(args.limit, 42)
    encoder = load_model(None, args.device)
    encoded = encode_task(encoder.tokenizer, data, encoder.max_length)
    order = list(length_buckets(encoded.n_tokens, range(len(data.examples)), args.batch_size))
    batches = [collate(encoded, b, encoder.tokenizer.pad_token_id, encoder.device) for b in order]
    kinds = TokenKinds(encoder.tokenizer)
    masks = [kinds.masks(b["input_ids"]) for b in batches]
    vz = ValueZeroing(encoder, "layer", max_rows=args.max_rows)
    eager = AutoModel.from_pretrained(bundled_model_path(), attn_implementation="eager").to(encoder.device).eval()
    L = encoder.num_layers

    def run_attnwh() -> list[np.ndarray]:
        return [vz.run(b, b["attention_mask"].bool(), *m) for b, m in zip(batches, masks, strict=True)]

    def run_brute() -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        all_shares, all_matrices = [], []
        with torch.inference_mode():
            for b, (cls, sep, punct) in zip(batches, masks, strict=True):
                out = np.empty((len(b["input_ids"]), L, 1, 6), np.float32)
                for row in range(len(b["input_ids"])):
                    n = int(b["attention_mask"][row].sum())
                    matrices = brute_force_matrix(eager, b["input_ids"][row : row + 1, :n], L)
                    t = [m[row, :n].double().cpu().numpy() for m in (cls, sep, punct)]
                    for depth, c in enumerate(matrices):
                        out[row, depth, 0] = shares(c, *t)
                    all_matrices.append(matrices)
                all_shares.append(out)
        return all_shares, all_matrices

    run_attnwh(), run_brute()  # warm-up
    attnwh_s, ours = best_of(args.repeats, run_attnwh)
    brute_s, (theirs, brute_matrices) = best_of(args.repeats, run_brute)

    share_diff = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))
    matrix_diff, k = 0.0, 0
    for b in batches:
        mine = vz.matrices(b)
        for row in range(len(b["input_ids"])):
            n = int(b["attention_mask"][row].sum())
            for depth in range(L):
                ours_c = mine[depth][row, :n, :n].cpu().double().numpy()
                matrix_diff = max(matrix_diff, float(np.abs(ours_c - brute_matrices[k][depth]).max()))
            k += 1

    n = len(data.examples)
    zeroed = int(encoded.n_tokens.sum()) * L
    print(
        f"{data.task}/{data.split}: {n} examples, {len(batches)} batches, device {encoder.device}, "
        f"{torch.get_num_threads()} threads, mean length {encoded.n_tokens.mean():.1f} tokens, "
        f"{zeroed} zeroed (token, layer) variants"
    )
    print(f"{'brute force (baseline)':24s} {brute_s:7.3f} s  {n / brute_s:8.1f} ex/s  ratio to baseline 1.00")
    print(
        f"{'attnwh ValueZeroing':24s} {attnwh_s:7.3f} s  {n / attnwh_s:8.1f} ex/s  ratio to baseline {attnwh_s / brute_s:5.3f}"
    )
    print(f"speed-up {brute_s / attnwh_s:.1f}x; max abs diff: shares {share_diff:.2e}, matrices {matrix_diff:.2e}")


if __name__ == "__main__":
    main()
