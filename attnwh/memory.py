"""Peak resident memory of a stretch of work, such as one stage of `attnwh study`.

The operating system keeps only a process's lifetime peak (`ru_maxrss`), which cannot tell one
stage from the next. So a daemon thread samples this process's resident set from
`/proc/self/statm` every `interval` seconds while the stretch runs and keeps the largest
value; a peak shorter than the interval can be missed. Without `/proc` (not Linux) the
lifetime peak is all there is, and the result says so. Worker processes (Ray actors) are not
counted.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from pathlib import Path
from types import TracebackType

_STATM = Path("/proc/self/statm")


def resident_bytes() -> int | None:
    """This process's resident set now, or None where /proc is not there."""
    try:
        return int(_STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def lifetime_peak_bytes() -> int:
    """The largest resident set this process has had (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class PeakMemory:
    """``with PeakMemory() as peak: ...`` then ``peak.bytes``: the largest resident set seen
    while the block ran (sampled); ``peak.sampled`` is False where only the lifetime peak was
    available."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.bytes = 0
        self.sampled = resident_bytes() is not None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while True:
            now = resident_bytes()
            if now is not None:
                self.bytes = max(self.bytes, now)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakMemory:
        if self.sampled:
            self._thread = threading.Thread(target=self._sample, name="attnwh-peak-memory", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            now = resident_bytes()
            self.bytes = max(self.bytes, now or 0)
        else:
            self.bytes = lifetime_peak_bytes()


def gib(n: int) -> str:
    """Bytes as GiB for a progress line, e.g. '2.31 GiB'."""
    return f"{n / 2**30:.2f} GiB"
