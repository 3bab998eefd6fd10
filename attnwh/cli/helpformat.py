"""How `--help` looks: typer's rich panels, with the descriptions given the width.

Typer's option table has a column for each parameter's type (`<list[str]>`, `<int range>
[x>=1]`, and `<bool>` even for flags) and one for `--no-` forms; at 80 columns they leave the
descriptions about 20 characters and cut long words with "…". Here the help is drawn from
copies of the parameters that show no type (a choice's values go into its description), and a
flag's two forms share one cell, one above the other. Parsing uses the parameters themselves.

Every command and group of the app is made with :class:`HelpCommand` or :class:`HelpGroup`.
"""

from __future__ import annotations

import copy
import enum
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

_DRAWING = "attnwh.drawing_help"  # in ctx.meta while the help is drawn


def _no_type(self: Any, ctx: Any) -> str | None:
    return None


def _no_range(self: Any) -> str | None:
    return None


# A parameter as the help shows it: no type column, no range. (Not a shared mixin: a copy can
# take a subclass as its class only if the subclass adds nothing but methods.)
class _ShownOption(TyperOption):
    display_type_rich = _no_type
    _get_number_range_help_str = _no_range
    flag_default: str | None = None  # a two-form flag's default, named as typer names it

    def _get_default_string(self, *, ctx: Any, show_default_is_str: bool, default_value: Any) -> str:
        if self.flag_default is not None:
            return self.flag_default
        return super()._get_default_string(
            ctx=ctx, show_default_is_str=show_default_is_str, default_value=default_value
        )


class _ShownArgument(TyperArgument):
    display_type_rich = _no_type
    _get_number_range_help_str = _no_range


def _choices(param: TyperOption | TyperArgument) -> list[str]:
    choices = param.type_descriptor.choices if param.type_descriptor.is_choice else None
    return [c.value if isinstance(c, enum.Enum) else str(c) for c in choices or ()]


def shown(param: Any) -> Any:
    """The copy of `param` that the help draws."""
    if not isinstance(param, (TyperOption, TyperArgument)):
        return param
    copied: Any = copy.copy(param)  # given a subclass of its class below: typed loosely
    copied.__class__ = _ShownOption if isinstance(param, TyperOption) else _ShownArgument
    choices = _choices(param)
    if choices and not all(c in (param.help or "") for c in choices):
        copied.help = f"{(param.help or '').rstrip()} One of: {', '.join(choices)}.".lstrip()
    if isinstance(param, TyperOption) and param.secondary_opts and all(o.startswith("--") for o in param.opts):
        # `--truncate` above `--no-truncate` in the name column, rather than a column of its own.
        copied.flag_default = (param.opts if param.default else param.secondary_opts)[0].removeprefix("--")
        copied.opts = ["\n".join([*param.opts, *param.secondary_opts])]
        copied.secondary_opts = []
    return copied


class _ShowsHelp:
    """Draws the help from :func:`shown` copies of the parameters."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        ctx.meta[_DRAWING] = True
        try:
            super().format_help(ctx, formatter)  # type: ignore[misc]
        finally:
            ctx.meta.pop(_DRAWING, None)

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        return [shown(p) for p in params] if ctx.meta.get(_DRAWING) else params


class HelpCommand(_ShowsHelp, TyperCommand):
    """A command whose --help gives the descriptions the width."""


class HelpGroup(_ShowsHelp, TyperGroup):
    """A group whose --help gives the descriptions the width."""
