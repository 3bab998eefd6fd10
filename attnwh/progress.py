"""Progress bars and Ctrl-C for the long commands (ingest, compare, relations, ablation,
finetune, study): one look for every bar, one way to stop.

rich.progress is imported when a bar is first shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType

from attnwh.errors import Interrupted
from attnwh.memory import gib
from attnwh.sql import status

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn

    from attnwh.options import DataSource
    from attnwh.study import StageResult

T = TypeVar("T")


# The bar's width: at most BAR_MAX columns, and left out when fewer than BAR_MIN are free.
BAR_MAX = 40
BAR_MIN = 10


def rate_text(task: Any, unit: str) -> str:
    """The mean rate of a rich task since it started (units done over its seconds): per second
    while at least one unit a second, else seconds per unit, so that a slow fine-tuning step
    reads "12.3 s/step" rather than "0.1 step/s" or "0.0 step/s"."""
    seconds = task.finished_time if task.finished else task.elapsed
    if not task.completed or not seconds:
        return f"– {unit}/s"
    rate = task.completed / seconds
    return f"{rate:.1f} {unit}/s" if rate >= 1 else f"{seconds / task.completed:.1f} s/{unit}"


def make_progress(console: Console, unit: str = "ex", stat: ProgressColumn | None = None) -> Progress:
    """A progress display: name, bar, done/total, `stat` (default: speed in `unit`/s), elapsed,
    eta; fitted to the width it is drawn at (:class:`FittedRows`)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class Speed(ProgressColumn):
        """The mean rate since the bar started, as the summary line computes it (units done
        over the run's seconds); rich's own estimate over its last samples shows nothing
        until two updates have come and then differs from the summary."""

        def render(self, task: Any) -> Text:
            return Text(rate_text(task, unit), style="cyan")

    class Eta(ProgressColumn):
        """Time left at the mean rate since the bar started. Rich's own estimate needs several
        updates within its last 30 s, so a bar updated once a batch of a slow stage (a sweep of a
        12-layer model: a batch every 40 s) would never show one."""

        def render(self, task: Any) -> Text:
            if task.finished:
                return Text("0:00:00", style="cyan")
            seconds = task.elapsed
            if not task.total or not task.completed or not seconds:
                return Text("-:--:--", style="cyan")
            left = round((task.total - task.completed) * seconds / task.completed)
            return Text(f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}", style="cyan")

    class Fitted(Progress):
        def get_renderables(self) -> Iterator[RenderableType]:
            yield FittedRows(self.columns, self.tasks)

    return Fitted(
        TextColumn("{task.description}"),
        BarColumn(bar_width=None),  # as wide as FittedRows makes its column
        MofNCompleteColumn(),
        stat or Speed(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        Eta(),
        console=console,
    )


class FittedRows:
    """The rows of a :func:`make_progress` display at the width they are drawn at (a narrow
    terminal; a log, which rich draws 80 columns wide): the counters, rate and times always
    whole; the bar narrower first, then left out (under BAR_MIN columns); then the
    description cut with an ellipsis. Rich's own table would cut every column alike."""

    def __init__(self, columns: Sequence[Any], tasks: Sequence[Any]) -> None:
        self.description, self.bar, *self.numbers = columns
        self.tasks = [task for task in tasks if task.visible]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        from rich.table import Table
        from rich.text import Text

        rows = [[column(task) for column in self.numbers] for task in self.tasks]
        widths = [max((console.measure(row[i]).maximum for row in rows), default=0) for i in range(len(self.numbers))]
        free = options.max_width - sum(widths) - len(widths)  # a space before each number
        described = max((cell_len(task.description) for task in self.tasks), default=0)
        bar = min(BAR_MAX, free - described - 1)
        table = Table.grid(padding=(0, 1))
        table.add_column(width=max(1, min(described, free)), no_wrap=True, overflow="ellipsis")
        if bar >= BAR_MIN:
            table.add_column(width=bar, no_wrap=True)
        for width in widths:
            table.add_column(width=width, no_wrap=True)
        for task, row in zip(self.tasks, rows, strict=True):
            # Text, not markup: a task name like "[x]" is shown as it is.
            bars = [self.bar(task)] if bar >= BAR_MIN else []
            table.add_row(Text(task.description), *bars, *row)
        yield table


# How often a bar drawn into a log reports how far it is, in seconds.
LOG_EVERY = 60.0


class Bars:
    """A bar per task, shown from the first `start` until `close`: `start` and `advance` are the
    callbacks the ingest loops take. Each bar is also the status `attnwh status` shows of a
    command writing a warehouse (attnwh.sql.status).

    Where stderr is not a terminal (a log: nohup, a batch job, CI) rich draws no live bar, only
    the finished bars at `close`; a stage of a study on a 12-layer model can then say nothing
    for an hour. There the current bar is printed as a line every `log_every` seconds, with
    its count, rate, elapsed time and eta."""

    def __init__(
        self, console: Console, unit: str = "ex", stat: ProgressColumn | None = None, log_every: float = LOG_EVERY
    ) -> None:
        self._make = lambda: make_progress(console, unit, stat)
        self._unit = unit
        self._console = console
        self._log_every = log_every
        self._logged = 0.0
        self._progress: Progress | None = None
        self._current: Any = None

    def start(self, name: str, total: int | None, **fields: Any) -> None:
        if self._progress is None:
            self._progress = self._make()
            self._progress.start()
        self._current = self._progress.add_task(name, total=total, **fields)
        self._logged = time.monotonic()
        status.on_bar(name, total, self._unit)

    def _log(self) -> None:
        if self._console.is_terminal or self._progress is None:
            return
        now = time.monotonic()
        if now - self._logged < self._log_every:
            return
        self._logged = now
        task = next(t for t in self._progress.tasks if t.id == self._current)
        self._console.print(FittedRows(self._progress.columns, [task]))

    def starter(self, name: str) -> Callable[[int], None]:
        """`start` for loops whose callback takes only the total."""
        return lambda total: self.start(name, total)

    def advance(self, n: int) -> None:
        if self._progress is not None and self._current is not None:
            self._progress.advance(self._current, n)
            self._log()
            status.on_progress(advance=n)

    def update(self, completed: int, total: int | None, **fields: Any) -> None:
        if self._progress is not None and self._current is not None:
            self._progress.update(self._current, completed=completed, total=total, **fields)
            self._log()
            status.on_progress(done=completed, total=total)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._current = None
            status.on_bars_closed()

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def interrupts_as(message: str | Callable[[], str]) -> Iterator[None]:
    """Ctrl-C in the block becomes :class:`Interrupted` (one line, exit 130) saying what was
    kept; `message` may be a function, for a message that depends on how far the block got."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(message() if callable(message) else message) from None


def resume_message(db: object) -> str:
    """What Ctrl-C says where rerunning resumes (ingest, compare, ablation)."""
    return f"interrupted; rerun the same command to resume (the work so far is in {db})"


@contextmanager
def loading(
    console: Console,
    db: Path | None,
    source: DataSource | None = None,
    what: str = "model",
    models: Sequence[str | None] = (),
) -> Iterator[None]:
    """Refuse bad data options, a warehouse another process holds (`db`; None: a command that
    writes none) and `models` that cannot
    load (a missing folder; a hub name not cached while the hub is offline) before anything
    loads, then show a status line while the block loads data and models. All of it without
    torch: the block should read its data before importing the model libraries, so bad input
    fails at once."""
    if source is not None:
        source.check()
    from attnwh.ingest.model.available import check_model
    from attnwh.sql import warehouse

    if db is not None:
        warehouse.check_writable(db)
    for model in models:
        check_model(model)
    with console.status(f"Loading data and {what}…"):
        yield


def run_resumable(console: Console, db: Path, work: Callable[[Bars], Sequence[T]]) -> tuple[Sequence[T], float]:
    """`work(bars)` under a bar per task, where rerunning resumes (what is done so far is in
    `db`, the warehouse or a shard folder); returns its summaries and seconds."""
    started = time.perf_counter()
    with Bars(console) as bars, interrupts_as(resume_message(db)):
        summaries = work(bars)
    return summaries, time.perf_counter() - started


def steps_column() -> ProgressColumn:
    """The stat column of a fine-tuning bar, which counts optimizer steps: their mean speed
    (`rate_text`) and the running loss (the task field `loss`, "–" until the first step)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Steps(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{rate_text(task, 'step')} · loss {task.fields.get('loss', '–')}", style="cyan", no_wrap=True)

    return Steps()


class StudyHooks:
    """Stage headers on stderr, a progress bar per task, a line per stage outcome. Fine-tuning
    bars count optimizer steps (step/s and the loss); the others count examples (ex/s)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.examples = Bars(console)
        self.steps = Bars(console, unit="step", stat=steps_column())
        self.bars = self.examples  # the bars of the current stage

    def stage(self, name: str, index: int, total: int) -> None:
        from attnwh.study import STAGE_HELP

        self.close()
        self.bars = self.steps if name == "finetune" else self.examples
        self.console.print(f"[bold]stage {index}/{total}: {name}[/] — {STAGE_HELP[name]}", highlight=False)
        status.on_stage(name, index, total)

    def stage_done(self, result: StageResult) -> None:
        self.close()
        status.on_stage_done(result.outcome)
        for line in result.detail:
            self.console.print(f"  {line}", highlight=False)
        peak = f"peak memory {gib(result.peak_bytes)}" + ("" if result.peak_sampled else " (the process's so far)")
        self.console.print(f"  {result.stage} {result.outcome} in {result.seconds:.1f} s, {peak}", highlight=False)

    def start(self, name: str, total: int | None) -> None:
        self.bars.start(name, total)

    def advance(self, n: int) -> None:
        self.bars.advance(n)

    def step(self, step: int, total: int, loss: float) -> None:
        self.bars.update(step, total, loss=f"{loss:.4f}")

    def note(self, text: str) -> None:
        self.console.print(f"  {text}", highlight=False)

    def close(self) -> None:
        self.examples.close()
        self.steps.close()

    def __enter__(self) -> StudyHooks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
