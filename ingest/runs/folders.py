"""Checks of the folders a run writes into. Plain paths, no torch: they run before a
command loads a model, so a wrong --out fails at once."""

from __future__ import annotations

from pathlib import Path

from attnwh.errors import UsageError


def check_folder(label: str, folder: Path) -> None:
    """Refuse a folder to be created where a file is in the way (`folder` or a parent);
    `label` names it in the message (the option and its value)."""
    for path in (folder, *folder.parents):
        if path.is_dir():
            return
        if path.exists():
            where = "" if path == folder else f": {path}"
            raise UsageError(f"{label}{where} exists and is not a folder")


def check_out_dir(out_dir: Path, label: str | None = None) -> None:
    """Refuse to write a model over a folder that holds something other than a model;
    `label` names it in the message (default: `--out <out_dir>`)."""
    label = label or f"--out {out_dir}"
    check_folder(label, out_dir)
    # The checkpoint of an interrupted fine-tuning (attnwh-checkpoint/) is what a rerun resumes.
    held = [p.name for p in out_dir.iterdir()] if out_dir.is_dir() else []
    if held and held != ["attnwh-checkpoint"] and not (out_dir / "config.json").exists():
        raise UsageError(f"{label} is a non-empty folder that holds no model; choose another")
