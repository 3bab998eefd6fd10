"""`attnwh finetune`: fine-tune an encoder or a decoder on a task and record it in the warehouse
(attnwh.api.finetune); this module prints the scores and where the model went."""

from __future__ import annotations

from attnwh import api
from attnwh.cli.options import cli_command
from attnwh.cli.output import results_console


def show_finetune(done: api.Finetuned) -> None:
    result = done.result
    scores = ", ".join(f"{k} {v:.4f}" for k, v in result.scores.items())
    # No loss: no step was taken (--epochs 0), the head is as initialised.
    trained = (
        "not trained (epochs 0)"
        if result.final_loss is None
        else f"trained on {result.train_examples} examples in {result.train_seconds:.1f} s"
    )
    results_console().print(
        f"{done.task}: {trained}; "
        f"{done.split} ({result.dev_examples}): {scores}\nsaved to {done.out.resolve()}; run {done.run_id} in "
        f"{done.db.resolve()}",
        highlight=False,
    )


finetune = cli_command(api.finetune, show_finetune)
