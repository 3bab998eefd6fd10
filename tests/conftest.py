"""Shared fixtures: tiny random-weight models per family, built once per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Ray (the optional engine) reports no usage, and a local instance listens on 127.0.0.1 only:
# both are read when Ray is first imported.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
sys.path.insert(0, str(Path(__file__).parent))

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A function family -> directory of a saved tiny model (cached per session)."""
    import transformers

    from tiny_models import make_tiny

    transformers.utils.logging.disable_progress_bar()

    cache: dict[tuple, Path] = {}

    def build(family: str = "bert", classifier: bool = False) -> Path:
        key = (family, classifier)
        if key not in cache:
            cache[key] = make_tiny(
                family, tmp_path_factory.mktemp(f"{family}{'-cls' if classifier else ''}"), classifier
            )
        return cache[key]

    return build


@pytest.fixture
def pairs(tmp_path) -> Path:
    """A 24-row sentence-pair TSV (premise, hypothesis, label yes/no)."""
    from helpers import write_pairs

    return write_pairs(tmp_path / "pairs.tsv")


@pytest.fixture(scope="session")
def tiny_gemma2(tmp_path_factory) -> Path:
    """A tiny Gemma 2 decoder (2 layers, 4 query heads on 2 key/value heads): grouped-query
    attention, sliding windows on every other layer and soft-capped logits at once."""
    from tiny_models import make_tiny_decoder

    return make_tiny_decoder("gemma2", tmp_path_factory.mktemp("gemma2"), layers=2, heads=4)
