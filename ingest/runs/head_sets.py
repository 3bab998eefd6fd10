"""Sets of heads disabled together, as configurations of the loss sweep (`attnwh ingest
ablation --disable-top / --random-heads / --heads`): Wu et al. (2025) disable the top-k
retrieval heads and compare with k random heads; a set is scored exactly as the sweep's own
configurations (per sequence and span, tested against the baseline over sequences).

- **top** (``--disable-top retrieval:10``): the k heads with the highest mean of a role score
  (head_roles, `attnwh ingest roles`) in the model's latest complete head-roles run that
  defines the score, in the same warehouse (ties: lower layer, then lower head first);
- **random** (``--random-heads 10 --draws 5``): k heads drawn uniformly without replacement
  from every head of the model's attention layers, the top sets' heads left out, one draw
  after the other from ``numpy.random.default_rng(seed)``;
- **heads** (``--heads 18.6,17.3``): the heads listed.

Each becomes a :class:`Configuration` of kind ``set`` with its label ("top-10 retrieval",
"random-10" with its draw, "heads 17.3,18.6"). Everything here is checked before the sweep
writes anything. No torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnwh.errors import UsageError
from attnwh.ingest.measures.ablation import Configuration, sweep_configurations
from attnwh.sql.head_sets import SCORES as ROLE_SCORES  # the head_roles scores a top set may rank by

SET_KIND = "set"
_TOP = re.compile(r"^\s*([a-z_]+)\s*:\s*(\d+)\s*$")
_HEAD = re.compile(r"^\s*(\d+)\s*[.-]\s*(\d+)\s*$")

Head = tuple[int, int]


@dataclass(frozen=True)
class HeadSets:
    """Which configurations a loss sweep scores besides the baseline: every head and layer
    (`sweep`), and the sets (checked with :func:`parse_top`, :func:`parse_heads`)."""

    sweep: bool = True
    top: tuple[tuple[str, int], ...] = ()  # (role score, k)
    random_k: int | None = None
    draws: int = 1
    heads: tuple[tuple[Head, ...], ...] = ()  # explicit sets, each as given (deduplicated, sorted)

    @property
    def any(self) -> bool:
        return bool(self.top or self.random_k or self.heads)

    @property
    def default(self) -> bool:
        """The plain sweep: nothing here changes the run's identity."""
        return self.sweep and not self.any


def parse_top(text: str) -> tuple[str, int]:
    """``--disable-top ROLE:K`` as (role score, k); refused in one line unless ROLE is a
    head_roles score and K a whole number of at least 1."""
    match = _TOP.match(text)
    if not match or match.group(1) not in ROLE_SCORES or int(match.group(2)) < 1:
        raise UsageError(
            f"--disable-top {text!r}: give ROLE:K, ROLE one of {', '.join(ROLE_SCORES)} and K at least 1 "
            "(e.g. retrieval:10)"
        )
    return match.group(1), int(match.group(2))


def parse_heads(text: str) -> tuple[Head, ...]:
    """``--heads 18.6,17.3`` (layer.head, 0-based; layer-head also read) as sorted pairs."""
    found = [_HEAD.match(part) for part in text.split(",") if part.strip()]
    if not found or not all(found):
        raise UsageError(f"--heads {text!r}: give heads as LAYER.HEAD, comma-separated, 0-based (e.g. 18.6,17.3)")
    return tuple(sorted({(int(m.group(1)), int(m.group(2))) for m in found if m}))


def head_label(heads: Sequence[Head]) -> str:
    return ",".join(f"{layer}.{head}" for layer, head in heads)


def set_configurations(
    sets: HeadSets,
    layers: Sequence[int],
    num_heads: int,
    seed: int,
    db: Path | None,
    weights_hash: str,
    model: str,
) -> list[Configuration]:
    """The sets as configurations (top, then random draws, then the lists given), their heads
    checked against the model's `layers` (attention layers, by the model's numbers) and
    `num_heads`; top sets read from the warehouse at `db`."""
    every = [(layer, head) for layer in layers for head in range(num_heads)]
    out: list[Configuration] = []
    excluded: set[Head] = set()
    for role, k in sets.top:
        if k > len(every):
            raise UsageError(f"--disable-top {role}:{k}: the model has {len(every)} heads")
        run_id, heads = top_heads(db, weights_hash, model, role, k)
        excluded |= set(heads)
        out.append(Configuration(SET_KIND, tuple(sorted(heads)), k=k, label=f"top-{k} {role}", roles_run=run_id))
    if sets.random_k:
        pool = [h for h in every if h not in excluded]
        if sets.random_k > len(pool):
            left = " outside the top sets" if excluded else ""
            raise UsageError(f"--random-heads {sets.random_k}: the model has {len(pool)} heads{left}")
        rng = np.random.default_rng(seed)
        for draw in range(1, sets.draws + 1):
            chosen = rng.choice(len(pool), size=sets.random_k, replace=False)
            drawn = tuple(sorted(pool[int(i)] for i in chosen))
            out.append(Configuration(SET_KIND, drawn, k=sets.random_k, label=f"random-{sets.random_k}", draw=draw))
    valid = set(every)
    for given in sets.heads:
        outside = [h for h in given if h not in valid]
        if outside:
            layer, head = outside[0]
            raise UsageError(
                f"--heads {head_label(given)}: the model has no head {layer}.{head} (layers "
                f"{_span(layers)}, heads 0 to {num_heads - 1})"
            )
        out.append(Configuration(SET_KIND, given, k=len(given), label=f"heads {head_label(given)}"))
    return out


def configurations(
    sets: HeadSets, layers: Sequence[int], num_heads: int, chosen: Sequence[Configuration]
) -> list[Configuration]:
    """A loss sweep's configurations in order: the baseline (id 0), every head and layer
    where `sets.sweep`, then the `chosen` sets (:func:`set_configurations`)."""
    base = sweep_configurations(layers, num_heads) if sets.sweep else sweep_configurations([], num_heads)
    return [*base, *chosen]


def top_heads(db: Path | None, weights_hash: str, model: str, role: str, k: int) -> tuple[int, list[Head]]:
    """The run and the k heads of the highest mean `role` score in the latest complete
    head-roles run of these weights in the warehouse at `db` that defines the score."""
    from attnwh.sql import head_sets as stored
    from attnwh.sql import warehouse

    missing = (
        f"--disable-top {role}:{k}: no head-roles run of {model} with {role} scores in {db}; "
        f"run `attnwh ingest roles --model {model}` on this warehouse first"
    )
    if db is None or not Path(db).exists():
        raise UsageError(missing)
    con = warehouse.connect(db, read_only=True)
    try:
        found = stored.latest_ranking(con, weights_hash, role)
    finally:
        con.close()
    if found is None:
        raise UsageError(missing)
    run_id, ranked = found
    return run_id, ranked[:k]


def _span(numbers: Sequence[int]) -> str:
    return f"0 to {len(numbers) - 1}" if list(numbers) == list(range(len(numbers))) else ", ".join(map(str, numbers))


__all__ = [
    "ROLE_SCORES",
    "SET_KIND",
    "HeadSets",
    "configurations",
    "head_label",
    "parse_heads",
    "parse_top",
    "set_configurations",
    "top_heads",
]
