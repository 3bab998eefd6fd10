"""Shared fixtures: tiny random-weight models per family, built once per session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Under pytest-xdist (.ci/run: one worker per core) each worker computes on one thread: two
# workers of two threads each on two cores would make every thread wait for the others.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
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


@pytest.fixture(scope="session", autouse=True)
def gguf_cache_of_the_session(tmp_path_factory) -> Iterator[Path]:
    """GGUF files loaded by the tests are dequantised into a cache folder of the session's own
    (attnwh.ingest.model.gguf_cache), never into the user's ~/.cache: a test sees the cache
    its own loads built, and leaves nothing behind."""
    folder = tmp_path_factory.mktemp("gguf-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNWH_CACHE", str(folder))
        yield folder


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (.ci/run), files that hold a test marked slow are handed out first:
    workers take whole files (--dist loadfile) in collection order, and a long file taken last
    would keep one worker busy while the other waits. A plain run keeps pytest's order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: a file's tests keep their order


# What .ci/run installs or fetches. Without it a test skips on a developer's machine; in CI
# (ATTNWH_REQUIRE_ALL=1, which .ci/run sets unless ATTNWH_ALLOW_MISSING=1) such a skip fails:
# a run that could not fetch a model must not go green with its tests left out.
REQUIRED_IN_CI = (
    "all-mpnet-base-v2",
    "SmolLM2-135M",
    "Gemma 3 270M",
    "Chromium",
    "extra is not installed",
    "playwright is not installed",
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("ATTNWH_REQUIRE_ALL") == "1":
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if any(needed in reason for needed in REQUIRED_IN_CI):
            report.outcome = "failed"
            report.longrepr = f"required in CI (ATTNWH_REQUIRE_ALL=1), but {reason}"
