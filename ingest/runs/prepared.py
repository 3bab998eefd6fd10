"""A command's work once checked and set up by its run kind's `prepare_*` (statistics,
compare, relations, roles, the restriction, the sweeps): the line that says what it will do,
and how to run it into a warehouse or write one static shard of it. The API runs it the same
way for every kind (`attnwh.api`), so the checks and the setup of a kind live with the kind,
not with the command."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnwh.ingest.model.loading import LoadedModel
    from attnwh.ingest.runs.engine import EngineOptions

# A bar begins (its name and total), and moves by so many examples.
OnStart = Callable[[str, int], None]
OnBatch = Callable[[int], None]


@dataclass(frozen=True)
class Prepared:
    """`header`: one line on the model and the work (rich markup). `ingest(db, engine, on_start,
    on_batch)` stores the runs and returns their summaries; `shard(engine, on_start, on_batch)`
    writes static shard `engine.shard` and returns the slices' summaries."""

    header: str
    ingest: Callable[[Path, EngineOptions, OnStart | None, OnBatch | None], Sequence[Any]]
    shard: Callable[[EngineOptions, OnStart | None, OnBatch | None], Sequence[Any]]

    @classmethod
    def one_run(
        cls,
        header: str,
        ingest: Callable[..., Any],
        shard: Callable[..., Sequence[Any]],
        *arguments: Any,
    ) -> Prepared:
        """The work of a kind that stores one run: `ingest(db, *arguments, on_start, on_batch,
        engine)` returns its summary, `shard(*arguments, engine, on_start, on_batch)` the
        slices' summaries (the restriction, streaming, massive-ablation and loss-curve kinds)."""
        return cls(
            header,
            lambda db, engine, on_start, on_batch: [ingest(db, *arguments, on_start, on_batch, engine)],
            lambda engine, on_start, on_batch: shard(*arguments, engine, on_start, on_batch),
        )


def loaded(
    model: str | LoadedModel | None, device: str = "auto", dtype: str = "float32", language_model: bool = False
) -> LoadedModel:
    """`model` itself when it is loaded already (the study loads its models once for every
    stage), else the model of that name (`load_model`; None: the bundled MiniLM)."""
    from attnwh.ingest.model.loading import LoadedModel, load_model

    if isinstance(model, LoadedModel):
        return model
    return load_model(model, device, dtype, language_model=language_model)


def model_line(encoder: LoadedModel) -> str:
    """The model as a command's first line names it."""
    return (
        f"[bold]{encoder.name}[/] ({encoder.family}, {encoder.num_layers} layers × {encoder.num_heads} heads) "
        f"on {encoder.device}"
    )
