"""Error types shared by every attnwh stage.

Library code raises these; the command line turns them into one line on stderr and a
non-zero exit (1 for a runtime failure, 2 for bad usage), never a traceback.
"""

from __future__ import annotations


class AttnwhError(Exception):
    """A failure the user can act on; its message is shown as one line."""

    exit_code: int = 1


class UsageError(AttnwhError):
    """The command was given input it cannot use (bad option, missing file, bad data)."""

    exit_code = 2


class DataError(UsageError):
    """A dataset is missing, empty or malformed."""


class ModelError(UsageError):
    """A model cannot be loaded, or is not a supported encoder."""


class DatabaseInUseError(AttnwhError):
    """Another process holds the DuckDB file open for writing."""


class Interrupted(AttnwhError):
    """The user stopped a long command; what was committed is kept."""

    exit_code = 130
