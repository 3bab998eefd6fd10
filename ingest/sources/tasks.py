"""Choosing the tasks a command reads: one data source (GLUE folder, Hugging Face dataset,
local file, plain text for language modelling) or, without one, the bundled sample corpus."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnwh.errors import UsageError
from attnwh.ingest.sources.examples import TaskData


def check_sources(glue_dir: Path | None, dataset: str | None, data: Path | None, text: str | None = None) -> None:
    """Refuse more than one data source, before anything is loaded."""
    if sum(s is not None for s in (glue_dir, dataset, data, text)) > 1:
        raise UsageError("give at most one of --glue-dir, --dataset, --data and --text")


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
    *,
    text: str | None = None,
    stride: int = 0,
    documents: str | None = None,
) -> list[TaskData]:
    """The tasks named by the data options (one source; the bundled sample without one).
    `text` names plain text for language modelling (`text.py`: a file, a dataset folder or
    name), cut with `stride` once the model is known; `dataset_config`, `text_column` and
    `split` apply to it too."""
    from attnwh.ingest.sources import files as loaders

    check_sources(glue_dir, dataset, data, text)
    tasks = [t.strip() for item in task or [] for t in item.split(",") if t.strip()]
    if text is not None:
        if len(tasks) > 1:
            raise UsageError("--text holds one task; name it with a single --task")
        from attnwh.ingest.sources.text import load_text

        task_name = tasks[0] if tasks else None
        return [
            load_text(
                text,
                text_column=text_column,
                split=split,
                dataset_config=dataset_config,
                stride=stride,
                documents=documents,
                task=task_name,
            )
        ]
    if stride and (glue_dir is not None or dataset is not None or data is not None):
        raise UsageError("--stride cuts plain text: give --text rather than --glue-dir, --dataset or --data")
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
    loaded = [loaders.load_sample(t, split or "dev", stride) for t in tasks or list(loaders.SAMPLE_TASKS)]
    if stride and all(t.text is None for t in loaded):
        raise UsageError("--stride cuts plain text: give --text (or the text sample, --task prose)")
    return loaded
