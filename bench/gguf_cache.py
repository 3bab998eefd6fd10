"""Benchmark: attnwh's load of a GGUF file the first time (the GGUF cache empty: the file is
parsed, dequantised and saved as the cache's entry, which the load then reads) against a later
load (the entry there: no GGUF parsing), in one run.

Each is the whole ``load_model(FILE)`` that every command makes (config, tokenizer, weights,
the weights hash and the check that attnwh reads every layer), on the CPU. A first load gets a
fresh, empty temporary cache folder (``ATTNWH_CACHE``); a cached load gets a folder whose entry
was built before the timing. What the process remembers between loads (the file's digest, the
entries it verified) is forgotten before each, so every load does what a new process would.
With ``--uncached``, a third variant: the load as attnwh made it before it had a cache (the
file read by transformers each time). The variants take turns, their order flipping every
repeat, after one warm-up round (`common.alternate`). Printed per variant: its median and
range of seconds, and the ratio of the first load to the cached one as the median over
repeats of the ratio within a repeat, with the range.

Usage: ``python bench/gguf_cache.py [--model models/gemma3-270m/gemma-3-270m-q4_k_m.gguf]
[--repeats 3] [--uncached]`` (the default model: ``python tools/fetch_gemma3.py`` first).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from common import alternate

from attnwh.ingest.model import gguf_cache
from attnwh.ingest.model.loading import load_model

GEMMA3 = Path(__file__).resolve().parents[1] / "models" / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"


def forget() -> None:
    """What a new process would not know: the file's digest and the entries verified."""
    gguf_cache._file_digests.clear()
    gguf_cache._verified.clear()


def loader(model: str, folder: Callable[[], Path], cached: bool = True, drop: bool = False) -> Callable[[int], None]:
    """One load of `model` with the cache in `folder()` (removed afterwards with `drop`); with
    `cached` False, past the cache altogether."""

    def load(repeat: int) -> None:
        place = folder()
        os.environ[gguf_cache.ENV] = str(place)
        forget()
        ensure, find = gguf_cache.ensure, gguf_cache.find
        if not cached:
            gguf_cache.ensure = gguf_cache.find = lambda source: None  # type: ignore[assignment]
        try:
            loaded = load_model(model, device="cpu")
        finally:
            gguf_cache.ensure, gguf_cache.find = ensure, find  # type: ignore[method-assign]
        del loaded
        gc.collect()  # a gigabyte of float32 weights: not kept into the next load
        if drop:
            shutil.rmtree(place)  # and a gigabyte on disk per first load

    return load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(GEMMA3), help="a GGUF file of a decoder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--uncached", action="store_true", help="time the load without any cache too")
    args = parser.parse_args()
    if args.model == str(GEMMA3) and not GEMMA3.is_file():
        raise SystemExit(f"error: no model at {GEMMA3}: python tools/fetch_gemma3.py")
    with tempfile.TemporaryDirectory(prefix="attnwh-bench-gguf-") as tmp:
        built = Path(tmp) / "built"
        os.environ[gguf_cache.ENV] = str(built)
        forget()
        if gguf_cache.ensure(args.model) is None:
            raise SystemExit(f"error: {args.model} could not be cached")
        size = sum(p.stat().st_size for p in built.rglob("*") if p.is_file())

        runs = {
            "first load": loader(args.model, lambda: Path(tempfile.mkdtemp(prefix="first-", dir=tmp)), drop=True),
            "cached load": loader(args.model, lambda: built),
        }
        if args.uncached:
            runs["without a cache"] = loader(args.model, lambda: built, cached=False)
        times = alternate(runs, args.repeats)
    print(
        f"{Path(args.model).name}: {Path(args.model).stat().st_size / 1e6:.0f} MB; its cache entry {size / 1e6:.0f} MB"
    )
    for name, seconds in times.items():
        print(f"{name:16s} median {statistics.median(seconds):7.2f} s  [{min(seconds):.2f}, {max(seconds):.2f}]")
    for name in [n for n in times if n != "cached load"]:
        ratios = sorted(a / b for a, b in zip(times[name], times["cached load"], strict=True))
        print(
            f"{name} / cached load: median {statistics.median(ratios):.1f} × [{ratios[0]:.1f}, {ratios[-1]:.1f}]"
            f" over {len(ratios)} repeats"
        )


if __name__ == "__main__":
    main()
