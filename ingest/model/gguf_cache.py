"""The GGUF cache: each GGUF file dequantised once.

transformers parses a GGUF file (its tokenizer included) and dequantises its weights to
float32 every time it loads one: attnwh's load of Gemma 3 270M's 253 MB file took 94 s on a
busy 2-core CPU, against 7.6 s from the cache (``bench/gguf_cache.py``). attnwh does that once
per file and keeps the result as an ordinary transformers folder (``config.json``, float32
``model.safetensors``, the tokenizer's files) named by the file's SHA-256 — the same digest
``sha256sum`` prints — in the cache folder (:func:`root`): ``$ATTNWH_CACHE`` if set, else
``$XDG_CACHE_HOME/attnwh/gguf``, else ``~/.cache/attnwh/gguf``. Later loads of the file,
under any path or name, read that folder instead. Deleting the folder (or one entry) clears
the cache; the next load builds the entry again.

The model read from an entry is the one the file gives: the same float32 tensors, so the
same weights hash (``models.weights_hash``, a hash of the dequantised tensors) and stored runs
still match; ``models.name`` and ``models.folder`` stay the .gguf file's.

An entry is used only when whole and current. It is built in a temporary folder beside the
entries and renamed into place once complete, so an interrupted build leaves no entry; its
manifest (:data:`MANIFEST`) lists every file with its size and SHA-256 and the versions of
transformers and gguf that dequantised it. An entry whose files do not match their manifest
(damaged, truncated, half deleted), that has no readable manifest, or that other versions
made is not used: the next load builds it again in its place. Where the cache cannot be
written (a read-only home, a full disk) the file is loaded directly, as without a cache, after
one warning line on stderr.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from attnwh.ingest.model import gguf

ENV = "ATTNWH_CACHE"
MANIFEST = "attnwh_gguf.json"  # written last: an entry without it was never finished
FORMAT = 1  # the layout of an entry; another number is a stale entry
BUILDING = ".building-"  # a temporary folder an entry is built in, then renamed
# The libraries that turn the file into tensors: transformers maps names and shapes, gguf's
# numpy code dequantises. Another version of either could give other tensors.
LIBRARIES = ("transformers", "gguf")

# A digest computed once per process for a file as it is now (its stat says so): read_config
# and load_model both look the entry up for one load.
_file_digests: dict[tuple[str, int, int, int, int], str] = {}
_verified: dict[Path, tuple[tuple[str, int, int, int], ...]] = {}


def root() -> Path:
    """The folder that holds the entries: ``$ATTNWH_CACHE``, else ``$XDG_CACHE_HOME/attnwh/gguf``,
    else ``~/.cache/attnwh/gguf``."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "attnwh" / "gguf"
    return Path.home() / ".cache" / "attnwh" / "gguf"


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of the file `path` (hex), the name of its entry; about 0.2 s for 253 MB."""
    resolved = Path(path).expanduser().resolve()
    stat = resolved.stat()
    key = (str(resolved), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _file_digests:
        _file_digests[key] = _sha256(resolved)
    return _file_digests[key]


def entry_folder(source: str | Path) -> Path:
    """Where the entry of the GGUF file `source` is, or would be."""
    return root() / file_sha256(source)


def find(source: str) -> Path | None:
    """The entry of the GGUF file `source` when it is whole and current, else None (none yet,
    or one to build again)."""
    try:
        folder = entry_folder(source)
    except OSError:
        return None  # an unreadable file: gguf's checks say so in one line
    return folder if _is_whole(folder, file_sha256(source)) else None


def ensure(source: str) -> Path | None:
    """The entry of the GGUF file `source`, built first when there is none (the file checked
    whole first: a damaged file is one ModelError line); None where the cache cannot be
    written or the file's model cannot be kept as plain weights (then load the file itself)."""
    found = find(source)
    if found is not None:
        return found
    gguf.check_contents(source)
    return _build(Path(source).expanduser())


def pretrained_arguments(source: str, build: bool = False) -> tuple[str, dict[str, Any]]:
    """What ``from_pretrained`` takes for `source`: for a GGUF file with an entry (built first
    with `build`), ``(entry folder, {})``; for one without, the file itself as
    ``gguf.pretrained_arguments`` gives it, ``(folder, {"gguf_file": name})``; anything else
    unchanged."""
    if not gguf.is_gguf(source):
        return source, {}
    gguf.check_file(source)  # missing or foreign: one line, before any digest
    # A file whose digest names a whole entry is byte for byte the one the entry was built
    # from, which loaded whole then: its layout needs no second reading.
    folder = ensure(source) if build else find(source)
    if folder is None:
        return gguf.pretrained_arguments(source)
    return str(folder), {}


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in LIBRARIES}


def _signature(folder: Path, names: list[str]) -> tuple[tuple[str, int, int, int], ...]:
    stats = [(name, (folder / name).stat()) for name in names]
    return tuple((name, s.st_ino, s.st_size, s.st_mtime_ns) for name, s in stats)


def _is_whole(folder: Path, digest: str) -> bool:
    """Whether `folder` is a finished entry of the file `digest`, made by these library
    versions, every file as its manifest lists it (hashed once per process while unchanged)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files: dict[str, dict[str, Any]] = manifest["files"]
        if manifest["format"] != FORMAT or manifest["gguf"]["sha256"] != digest or manifest["versions"] != _versions():
            return False
        signature = _signature(folder, sorted(files))
        if _verified.get(folder) == signature:
            return True
        for name, facts in files.items():
            path = folder / name
            if path.stat().st_size != facts["bytes"] or _sha256(path) != facts["sha256"]:
                return False
    # Anything unreadable or malformed (a missing file, a manifest cut short or edited) is an
    # entry to build again, not an error for the user.
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    _verified[folder] = signature
    return True


def _build(source: Path) -> Path | None:
    """Dequantise `source` once and install its entry; None (after one warning line) where the
    cache cannot be written or the weights stay packed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    digest = file_sha256(source)
    place = root()
    try:
        place.mkdir(parents=True, exist_ok=True)
        _sweep(place)
        building = Path(tempfile.mkdtemp(prefix=f"{BUILDING}{socket.gethostname()}-{os.getpid()}-", dir=place))
    except OSError as exc:
        _warn(f"cannot write the GGUF cache at {place} ({exc.strerror or exc}); loading {source} without it")
        return None
    print(f"attnwh: note: dequantising {source.name} once, into the GGUF cache {place / digest}", file=sys.stderr)
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        # The load attnwh then makes from the file itself says what is wrong, in its words.
        except (OSError, ValueError, ImportError, KeyError, TypeError):
            return None
        if not _plain_weights(model):
            return None
        try:
            model.save_pretrained(building)
            tokenizer.save_pretrained(building)
            del model
            _write_manifest(building, digest, source)
            building.chmod(0o755)  # mkdtemp's 0700 would keep a shared cache to its builder
            return _install(building, place / digest, digest)
        except OSError as exc:
            _warn(f"cannot write the GGUF cache at {place} ({exc.strerror or exc}); loading {source} without it")
            return None
    finally:
        shutil.rmtree(building, ignore_errors=True)  # gone once renamed; else what was left half made


def _plain_weights(model: Any) -> bool:
    """Drop the GGUF quantizer's mark from a model whose every tensor was dequantised, which
    ``save_pretrained`` otherwise refuses (and a saved config would ask for the file again);
    False where some weights stay packed in GGUF blocks and cannot be saved as float32."""
    if any(type(m).__name__.startswith("Gguf") for m in model.modules()):
        return False
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    return True


def _write_manifest(folder: Path, digest: str, source: Path) -> None:
    files = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(folder.iterdir()) if p.is_file()}
    manifest = {
        "format": FORMAT,
        "gguf": {"sha256": digest, "bytes": source.stat().st_size, "name": source.name},
        "versions": _versions(),
        "files": files,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def _install(building: Path, target: Path, digest: str) -> Path:
    """Rename the finished `building` to `target`. Another process may have installed the same
    entry meanwhile (then it is used and this one dropped), or a stale entry may be there (then
    it is set aside and removed)."""
    files = sorted(p.name for p in building.iterdir() if p.name != MANIFEST)
    for _ in range(2):
        try:
            building.rename(target)
            _verified[target] = _signature(target, files)  # just written and hashed: whole
            return target
        except OSError:
            if _is_whole(target, digest):
                return target
            stale = target.with_name(f"{BUILDING}{socket.gethostname()}-{os.getpid()}-stale-{target.name}")
            with contextlib.suppress(FileNotFoundError):
                target.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
    building.rename(target)
    return target


def _sweep(place: Path) -> None:
    """Remove the temporary folders of builds on this machine whose process is gone (killed
    mid-build): an interrupted build leaves no entry, and its gigabyte goes too."""
    host = socket.gethostname()
    for folder in place.glob(f"{BUILDING}{host}-*"):
        pid = folder.name.removeprefix(f"{BUILDING}{host}-").split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _warn(message: str) -> None:
    print(f"attnwh: warning: {message}", file=sys.stderr)
