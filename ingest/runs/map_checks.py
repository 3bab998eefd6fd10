"""The lenses of `attnwh show` and what a page of a run's maps can ask for, checked from the
warehouse alone: no torch, no model, so that a wrong layer or lens is one line at once rather
than after the model loads."""

from __future__ import annotations

from pathlib import Path

from attnwh.errors import UsageError
from attnwh.sql import warehouse

HEAD_LENSES: tuple[str, ...] = ("weights", "norm", "post_ln")
LENSES: tuple[str, ...] = (*HEAD_LENSES, "block")
# Lenses after residual and LayerNorm: a post-LN formula (an encoder's); decoders are pre-LN.
POST_LN_LENSES = frozenset({"post_ln", "block"})


def check_view(db: Path, run_id: int, layer: int | None, lens: str) -> None:
    """What the warehouse already says about a page of run `run_id`'s maps, checked before
    its model loads: the run exists, `lens` is one attnwh draws and the model can have, and
    `layer` is one of its layers with maps (a hybrid's other layers have none)."""
    if lens not in LENSES:
        raise UsageError(f"no lens {lens!r}; choose one of {', '.join(LENSES)}")
    con = warehouse.connect(Path(db), read_only=True)
    try:
        row = warehouse.first_row(
            con,
            "SELECT m.model_id, m.name, m.num_layers, coalesce(m.causal, false) FROM runs AS r "
            "JOIN models AS m USING (model_id) WHERE r.run_id = ?",
            [run_id],
        )
        if row is None:
            raise UsageError(f"no run {run_id} in {db}; `attnwh query runs` lists them")
        model_id, name, num_layers, causal = row
        others = dict(
            con.execute("SELECT layer, kind FROM model_layers WHERE model_id = ? AND NOT read", [model_id]).fetchall()
        )
    finally:
        con.close()
    if causal and lens in POST_LN_LENSES:
        raise UsageError(
            f"no lens {lens!r} for {name}: it is a decoder (pre-LN), whose lenses are {', '.join(HEAD_LENSES[:2])}"
        )
    if layer is None:
        return
    if not 0 <= layer < num_layers:
        raise UsageError(f"layer {layer} is not one of {name}'s {num_layers} layers (0 to {num_layers - 1})")
    if layer in others:
        read = [k for k in range(num_layers) if k not in others]
        raise UsageError(
            f"layer {layer} of {name} is {others[layer]}, not softmax attention: it has no maps "
            f"(its attention layers: {', '.join(map(str, read))})"
        )
