"""Building the `attnwh` commands from the API's functions (attnwh.api): typer reads each
function's own signature, whose options are declared once in :mod:`attnwh.options`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import typer

from attnwh.errors import UsageError


def cli_command(
    function: Callable[..., Any], show: Callable[[Any], None], context: bool = False
) -> Callable[..., None]:
    """The command for an API function (attnwh.api): typer reads the function's own signature,
    so the options and their defaults are declared once; `show` prints what it returned. With
    `context`, the command also takes typer's context first and passes it to `show` along with
    a function that runs the API call (a group's callback decides whether to run it)."""
    signature = inspect.signature(function, eval_str=True)  # the annotations as objects, for typer
    params = list(signature.parameters.values())
    annotations = {p.name: p.annotation for p in params}
    if context:
        params.insert(0, inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context))
        annotations = {"ctx": typer.Context, **annotations}

    def command(**kwargs: Any) -> None:
        if context:
            ctx = kwargs.pop("ctx")
            show((ctx, lambda: function(**kwargs)))
        else:
            show(function(**kwargs))

    command.__name__ = function.__name__
    command.__qualname__ = function.__qualname__
    command.__doc__ = function.__doc__
    command.__module__ = function.__module__
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = annotations
    return command


def refuse_options_before(ctx: typer.Context, subcommand: str) -> None:
    """Options typed between a group (`ingest`, `report`) and its subcommand are the bare
    group command's, which does not run then: refuse them instead of ignoring them (the
    environment's ATTNWH_DB is no mistake)."""
    bare = f"bare `attnwh {ctx.info_name}`"
    for param in ctx.command.params:
        # By name: typer ships its own copy of click, whose ParameterSource is not click's.
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is None or source.name != "COMMANDLINE":
            continue
        name = "/".join([*param.opts, *param.secondary_opts])
        sub = ctx.command.get_command(ctx, subcommand)  # type: ignore[attr-defined]  # a group's context
        if sub is not None and any(p.name == param.name for p in sub.params):
            raise UsageError(f"{name} belongs after '{subcommand}' (options before a subcommand are those of {bare})")
        raise UsageError(f"{name} is an option of {bare}; '{subcommand}' does not take it")
