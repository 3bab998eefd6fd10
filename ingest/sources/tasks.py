"""Choosing the tasks a command reads: one data source (GLUE folder, Hugging Face dataset,
local file) or, without one, the bundled sample corpus."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnwh.errors import UsageError
from attnwh.ingest.sources.examples import TaskData


def check_sources(glue_dir: Path | None, dataset: str | None, data: Path | None) -> None:
    """Refuse more than one data source, before anything is loaded."""
    if sum(s is not None for s in (glue_dir, dataset, data)) > 1:
        raise UsageError("give at most one of --glue-dir, --dataset and --data")


def load_tasks(
    task: list[str] | None,
    glue_dir: Path | None,
    dataset: str | None,
    dataset_config: str | None,
    data: Path | None,
    text_column: str | None,
    pair_column: str | None,
    label_column: str | None,
    split: str | None,
) -> list[TaskData]:
    """The tasks named by the data options (one source; the bundled sample without one)."""
    from attnwh.ingest.sources import files as loaders

    check_sources(glue_dir, dataset, data)
    tasks = [t.strip() for item in task or [] for t in item.split(",") if t.strip()]
    if glue_dir is not None:
        if not tasks:
            raise UsageError("--glue-dir needs --task (e.g. --task sst2,rte)")
        return [loaders.load_glue(glue_dir, t, split or "dev") for t in tasks]
    if dataset is not None:
        names: Sequence[str | None] = tasks or [None]
        if len(names) > 1:
            raise UsageError("--dataset reads one task at a time; pick its configuration with --dataset-config")
        from attnwh.ingest.sources.hub import load_hub

        return [load_hub(dataset, dataset_config, split or "dev", names[0], text_column, pair_column, label_column)]
    if data is not None:
        if text_column is None:
            raise UsageError("--data needs --text-column (and --pair-column / --label-column when present)")
        if len(tasks) > 1:
            raise UsageError("--data holds one task; name it with a single --task")
        return [
            loaders.load_file(data, text_column, pair_column, label_column, tasks[0] if tasks else None, split or "all")
        ]
    return [loaders.load_sample(t, split or "dev") for t in tasks or list(loaders.SAMPLE_TASKS)]
