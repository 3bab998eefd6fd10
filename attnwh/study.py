"""The whole study in one call: ingest a pre-trained encoder or decoder, fine-tune it on each task,
ingest the tuned models, compare them with the base, sweep head ablations with
significance, and write the report (`attnwh study`).

Every stage reuses the library entry point of its own command (`attnwh ingest`, `attnwh
finetune`, `attnwh ingest compare`, `attnwh ingest ablation`, `attnwh report`), so a stage's
rows are exactly those of that command with the same settings, and the stages resume the
way those commands do: runs are found by their run keys (model weights, examples, settings),
so a complete run is skipped and an interrupted one resumes. Fine-tuning is the exception,
since a half-trained model is not saved: a tuned model folder is reused when its
`attnwh_finetune.json` says it was trained from the same base weights, on the same task, with
the same settings; otherwise it is trained (again).

Everything that can be wrong with the input (options, data, the base model's name, the output
folders) is checked by :func:`check_study`, without torch, before :meth:`Study.__init__` loads
the base model and before any stage runs or the warehouse is opened.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from attnwh.errors import DataError, UsageError
from attnwh.ingest.runs.engine import EngineOptions
from attnwh.ingest.runs.folders import check_folder, check_out_dir
from attnwh.ingest.sources.examples import TaskData
from attnwh.sql import warehouse

# The model libraries (torch, transformers) load in Study.__init__, after check_study: bad
# options, data and output folders fail at once. The modules below import them.
if TYPE_CHECKING:
    from attnwh.ingest.model.loading import LoadedModel
    from attnwh.ingest.runs.ablation import AblationSummary
    from attnwh.ingest.runs.finetune import FinetuneOptions, FinetuneResult, LineageExtra
    from attnwh.ingest.runs.loop import IngestOptions, RunSummary
    from attnwh.ingest.runs.prepared import Prepared

# The stages, in order, with their help and method: STAGE_TABLE (and STAGES, STAGE_HELP) below
# the Study class.
CPU_MAX_TRAIN_EXAMPLES = 1000  # the default train sample on a CPU; a GPU trains on every example
DEFAULT_LIMIT = 200
DEFAULT_ABLATION_LIMIT = 100  # without --limit; with one, the sweep uses it too
STUDY_KEY = "study"  # the study's part of attnwh_finetune.json
# Without a data source: the sample task MiniLM learns in a CPU minute (0.93 accuracy after 3
# epochs on 1000 examples). The sample entailment task stays at chance with that budget (0.50,
# also at lr 1e-4) and needs about 8 epochs on 2000 examples; `--tasks entailment` asks for it.
DEFAULT_SAMPLE_TASKS: tuple[str, ...] = ("sentiment",)


@dataclass(frozen=True)
class StudyOptions:
    """Settings of a study; None means the documented default."""

    model: str | None = None  # hub name, folder or GGUF file of the pre-trained model; None: the bundled MiniLM
    tasks: tuple[str, ...] = ()  # empty: the sample tasks (or --data's own name)
    glue_dir: Path | None = None
    dataset: str | None = None
    dataset_config: str | None = None
    data: Path | None = None  # a local train file (with eval_data)
    eval_data: Path | None = None
    text_column: str | None = None
    pair_column: str | None = None
    label_column: str | None = None
    train_split: str = "train"
    eval_split: str = "dev"
    limit: int | None = DEFAULT_LIMIT  # eval examples per task for ingest and compare
    ablation_limit: int | None = DEFAULT_ABLATION_LIMIT
    max_train_examples: int | None = None  # None: every train example
    epochs: float = 3.0
    lr: float = 5e-5
    finetune_max_length: int = 128
    batch_size: int = 32
    micro_batch_size: int | None = None  # fine-tuning: examples per forward and backward
    checkpoint_steps: int | None = None  # fine-tuning checkpoints: every so many steps
    checkpoint_minutes: float | None = 10.0  # … and every so many minutes
    precision: str = "float32"  # fine-tuning: float32 or bfloat16 autocast
    max_length: int | None = None  # ingest/compare/ablation truncation; None: the model's limit
    seed: int = 42
    modes: tuple[str, ...] = ("uniform",)
    resamples: int = 1000
    top_k: int = 10
    importance: bool = True
    value_zeroing: str | None = None  # "layer" or "head": value zeroing in the statistics ingests
    attention_memory: int | None = None  # bytes of maps alive at once; None: sized from the device
    configs_per_pass: int | None = None  # None: 8 on a GPU, 1 on a CPU
    thumbnails: int = 20
    device: str = "auto"
    db: Path = Path("attnwh.duckdb")
    report: Path = Path("report.html")
    out_dir: Path | None = None  # None: attnwh-models/ beside the warehouse
    force: frozenset[str] = frozenset()
    command: str | None = None  # recorded with every run
    engine: EngineOptions = EngineOptions()  # where ingest, compare and the ablation sweep run

    @property
    def models_dir(self) -> Path:
        return self.out_dir if self.out_dir is not None else self.db.parent / "attnwh-models"


@dataclass(frozen=True)
class StudyTask:
    name: str
    train: TaskData  # already sampled to max_train_examples
    eval: TaskData  # the whole eval split (each stage samples its own limit)

    @property
    def regression(self) -> bool:
        return self.eval.labels is None

    @property
    def metric(self) -> str:
        from attnwh.ingest.measures.metrics import metrics_for

        return metrics_for(self.name, self.regression)[0]


@dataclass(frozen=True)
class TaskOutcome:
    """What a stage did for one task (for the report stage: its file)."""

    subject: str  # the task, with the ablation mode; or the report's path
    outcome: str  # e.g. "run 3 already complete", "kept", "trained in 2.1 s, accuracy 0.5000 (run 4)"
    wrote: bool  # False: everything was already there

    @property
    def line(self) -> str:
        return f"{self.subject}: {self.outcome}"


@dataclass
class StageResult:
    stage: str
    outcome: str = "done"  # "done", "skipped" (everything was already there), "partly done"
    tasks: list[TaskOutcome] = field(default_factory=list)
    seconds: float = 0.0
    # The largest resident memory of this process while the stage ran (`memory.PeakMemory`,
    # sampled); peak_sampled False: the process's lifetime peak, where it cannot be sampled.
    peak_bytes: int = 0
    peak_sampled: bool = True

    def add(self, subject: str, outcome: str, wrote: bool) -> None:
        self.tasks.append(TaskOutcome(subject, outcome, wrote))

    @property
    def detail(self) -> list[str]:
        """One line per task, for display."""
        return [t.line for t in self.tasks]

    @property
    def wrote_nothing(self) -> bool:
        """Whether the stage had tasks and found every one already done."""
        return bool(self.tasks) and not any(t.wrote for t in self.tasks)


@dataclass(frozen=True)
class TaskSummary:
    task: str
    metric: str
    score: float | None
    changed_layer: tuple[int, float] | None  # layer, mean cosine
    helpful_head: tuple[int, int, float, float | None] | None  # layer, head, delta, adjusted p
    sinks: tuple[int, float, float | None] | None = None  # sink heads disabled together: count, delta, p
    sinks_note: str | None = None  # why there is no sinks combination (AblationSummary.sinks_note)
    score_examples: int | None = None  # examples the fine-tuned score was measured on
    ablation_examples: int | None = None  # examples the ablation sweep was scored on
    mode: str | None = None  # the ablation mode of helpful_head and sinks


class StudyHooks(Protocol):
    """What the study reports while it runs; the command line shows it (attnwh/cli/study.py),
    tests ignore it (:class:`QuietHooks`, the default)."""

    def stage(self, name: str, index: int, total: int) -> None:
        """A stage begins."""

    def stage_done(self, result: StageResult) -> None:
        """A stage ended."""

    def start(self, name: str, total: int | None) -> None:
        """A bar of `total` units (examples or steps) begins."""

    def advance(self, n: int) -> None:
        """The current bar moved by n units."""

    def step(self, step: int, total: int, loss: float) -> None:
        """Fine-tuning progress."""

    def note(self, text: str) -> None:
        """A line worth showing."""


class QuietHooks(StudyHooks):
    """Hooks that show nothing."""

    def stage(self, name: str, index: int, total: int) -> None:
        pass

    def stage_done(self, result: StageResult) -> None:
        pass

    def start(self, name: str, total: int | None) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def step(self, step: int, total: int, loss: float) -> None:
        pass

    def note(self, text: str) -> None:
        pass


def parse_force(names: Sequence[str]) -> frozenset[str]:
    """The --force stages (comma-separated or repeated); an unknown name is a usage error."""
    wanted = {n.strip() for item in names for n in item.split(",") if n.strip()}
    unknown = sorted(wanted - set(STAGES))
    if unknown:
        raise UsageError(f"unknown stage {unknown[0]!r} for --force; the stages are {', '.join(STAGES)}")
    return frozenset(wanted)


def load_study_tasks(options: StudyOptions) -> list[StudyTask]:
    """Every task's train and eval split from the data options; raises before anything heavy."""
    from attnwh.ingest.sources.tasks import check_sources, load_tasks

    tasks = list(dict.fromkeys(t.strip() for item in options.tasks for t in item.split(",") if t.strip()))
    check_sources(options.glue_dir, options.dataset, options.data)
    sources = [s for s in (options.glue_dir, options.dataset, options.data) if s is not None]
    if options.eval_data is not None and options.data is None:
        raise UsageError("--eval-data goes with --data (the train file)")

    def load(task: str | None, split: str, file: Path | None) -> TaskData:
        config = options.dataset_config or (task if options.dataset is not None else None)
        return load_tasks(
            [task] if task else None,
            options.glue_dir,
            options.dataset,
            config,
            file,
            options.text_column,
            options.pair_column,
            options.label_column,
            split,
        )[0]

    if options.glue_dir is not None and not tasks:
        raise UsageError("--glue-dir needs --tasks (e.g. --tasks sst2,mrpc,rte)")
    if options.dataset is not None:
        if not tasks:
            raise UsageError("--dataset needs --tasks (e.g. --dataset nyu-mll/glue --tasks sst2,rte)")
        if options.dataset_config is not None and len(tasks) > 1:
            raise UsageError(
                "--dataset-config names one task's configuration; give one task, or leave it out "
                "to use each task name as its configuration"
            )
    if options.data is not None:
        if options.eval_data is None or options.label_column is None or options.text_column is None:
            raise UsageError("--data needs --eval-data, --text-column and --label-column (train and score files)")
        if len(tasks) > 1:
            raise UsageError("--data holds one task; name it with a single --tasks")
        if not tasks:
            from attnwh.ingest.sources.files import file_task_name

            tasks = [file_task_name(options.data)]  # imdb/train.csv and imdb/dev.csv: imdb
    if not sources:
        tasks = tasks or list(DEFAULT_SAMPLE_TASKS)
    out = []
    for task in tasks:
        # The eval split first: an error that is not about the train split (no such folder or
        # task) is shown as it is, without the hint below.
        evaluation = load(task, options.eval_split, options.eval_data)
        try:
            train = load(task, options.train_split, options.data)
        except DataError as exc:
            if not _split_missing(options, task, options.train_split, exc):
                raise
            raise DataError(
                f"{exc} — the study fine-tunes on each task's {options.train_split} split; leave {task} out of --tasks"
            ) from None
        if options.data is not None:  # files are named after themselves; the study's name wins
            train = dataclasses.replace(train, task=task)
            evaluation = dataclasses.replace(evaluation, task=task)
        if train.labels != evaluation.labels:
            raise DataError(f"train and {options.eval_split} of {task} have different label sets")
        for split in (train, evaluation):
            if not split.examples:
                raise DataError(f"task {task} ({split.split}) has no examples")
            if any(e.label is None for e in split.examples):
                raise DataError(f"{task} ({split.split}) has unlabelled examples; the study needs labels")
        out.append(StudyTask(train.task, train.sample(options.max_train_examples, options.seed), evaluation))
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise UsageError(f"task {names[0]!r} is named twice in --tasks")
    return out


def _split_missing(options: StudyOptions, task: str, split: str, error: DataError) -> bool:
    """Whether `error`, raised loading `split` of `task`, says that the split does not exist
    (as QNLI's train split is missing from a dev-only GLUE folder), rather than that the data is
    unreadable or that the task or folder does not exist."""
    if options.data is not None:  # a file given by name: its own error says it all
        return False
    if options.glue_dir is not None:
        from attnwh.ingest.sources import glue

        spec = glue.glue_task(task)
        try:
            name = glue._glue_split(spec, split)
        except DataError:
            return True
        folder = glue._task_folder(options.glue_dir, spec)
        return not (folder / spec.files[name]).is_file()
    if options.dataset is not None:
        return f"has no split {split!r}" in str(error)
    from attnwh.ingest.sources.files import SAMPLE_SPLITS

    return split.strip().lower() not in SAMPLE_SPLITS


def _lineage_settings(options: StudyOptions, task: StudyTask, base: LoadedModel, ft: FinetuneOptions) -> dict:
    """What a saved tuned model must have been trained with to be reused."""
    return {
        "base_weights_hash": base.weights_hash,
        "task": task.name,
        "options": json.loads(json.dumps(asdict(ft))),
        STUDY_KEY: {
            "max_train_examples": options.max_train_examples,
            "train": [task.train.dataset, task.train.split, task.train.source, len(task.train.examples)],
        },
    }


def check_study(options: StudyOptions) -> list[StudyTask]:
    """Everything that can be wrong with the options, the data, the base model's name and the
    output paths, checked without torch or transformers; returns the tasks, read."""
    from attnwh.ingest.model.available import check_model

    parse_force(sorted(options.force))
    if options.report.is_dir():
        raise UsageError(f"--report {options.report} is a folder; give a file name such as report.html")
    if options.ablation_limit is not None and options.ablation_limit < 2:
        raise UsageError("--ablation-limit must be at least 2 examples")
    for mode in options.modes:
        if mode not in ("uniform", "zero"):
            raise UsageError(f"unknown ablation mode {mode!r}; choose uniform or zero")
    check_folder(f"--out-dir {options.models_dir}", options.models_dir)
    warehouse.check_writable(options.db)
    check_model(options.model)
    tasks = load_study_tasks(options)
    for task in tasks:
        tuned = options.models_dir / task.name
        check_out_dir(tuned, f"--out-dir {options.models_dir}: {tuned}")
    return tasks


class Study:
    """A study ready to run: options checked, data and base model loaded."""

    def __init__(
        self, options: StudyOptions, hooks: StudyHooks | None = None, tasks: Sequence[StudyTask] | None = None
    ) -> None:
        """`tasks`: what :func:`check_study` returned for these options, or for them with no
        max_train_examples (checked and read here when not given)."""
        self.options = options
        self.hooks: StudyHooks = hooks or QuietHooks()
        self.tasks = [
            dataclasses.replace(t, train=t.train.sample(options.max_train_examples, options.seed))
            for t in (tasks if tasks is not None else check_study(options))
        ]
        from attnwh.ingest.model.loading import load_model, read_config, require_every_layer
        from attnwh.ingest.runs.finetune import FinetuneOptions, check_sequence_classifier
        from attnwh.ingest.runs.loop import IngestOptions, prepare_tasks

        # What would stop a later stage is refused before the first: a family with no sequence
        # classifier to fine-tune, a hybrid whose tuned classifier cannot be swept.
        check_sequence_classifier(read_config(options.model), options.model)
        self.base = load_model(options.model, options.device)  # an encoder or a decoder
        require_every_layer(self.base, "the study's ablation sweep")
        self.finetune_options = FinetuneOptions(
            epochs=options.epochs,
            learning_rate=options.lr,
            batch_size=options.batch_size,
            max_length=options.finetune_max_length,
            seed=options.seed,
            precision=options.precision,
        )
        self.ingest = IngestOptions(
            limit=options.limit,
            seed=options.seed,
            max_length=options.max_length,
            batch_size=options.batch_size,
            command=options.command,
            thumbnails=options.thumbnails,
            value_zeroing=options.value_zeroing,
            attention_memory=options.attention_memory,
        )
        # Fail on lengths now rather than after fine-tuning: the limit, and the attention
        # memory of the statistics and of the comparison (the tuned models have the base's shape).
        from attnwh.ingest.measures.change import ChangeCapture
        from attnwh.ingest.runs.ablation import AblationOptions, check_ablation_fits
        from attnwh.ingest.runs.loop import StatisticsCapture, check_fits

        prepared = prepare_tasks(self.base, [t.eval for t in self.tasks], self.ingest)
        check_fits(StatisticsCapture(self.base, attention_memory=options.attention_memory), prepared)
        check_fits(ChangeCapture(self.base, self.base, options.attention_memory), prepared)
        check_ablation_fits(
            self.base,
            prepared,
            AblationOptions(importance=options.importance, attention_memory=options.attention_memory),
        )
        self._tuned: dict[str, LoadedModel] = {}
        self.run_ids: dict[tuple[str, str], int] = {}  # (stage, task) -> run id of this study's run
        self.sinks_notes: dict[tuple[str, str], str | None] = {}  # (ablation stage, task) -> why no sinks
        self.trained: dict[str, FinetuneResult] = {}
        self.wrote_anything = False

    # -- helpers ---------------------------------------------------------------------------

    def tuned_dir(self, task: StudyTask) -> Path:
        return self.options.models_dir / task.name

    def tuned(self, task: StudyTask) -> LoadedModel:
        from attnwh.ingest.model.loading import load_model

        if task.name not in self._tuned:
            self._tuned[task.name] = load_model(str(self.tuned_dir(task)), self.options.device)
        return self._tuned[task.name]

    def _ingest(self, stage: str) -> IngestOptions:
        return dataclasses.replace(self.ingest, replace=stage in self.options.force)

    def _record(self, stage: str, summaries: Sequence[RunSummary | AblationSummary], result: StageResult) -> None:
        from attnwh.ingest.runs.ablation import AblationSummary

        for s in summaries:
            self.run_ids[(stage, s.task)] = s.run_id
            wrote = s.outcome != "already complete"
            self.wrote_anything |= wrote
            mode = f" · {s.mode}" if isinstance(s, AblationSummary) else ""
            if isinstance(s, AblationSummary):
                self.sinks_notes[(stage, s.task)] = s.sinks_note
            result.add(f"{s.task}{mode}", f"run {s.run_id} {s.outcome}", wrote)

    # -- stages ----------------------------------------------------------------------------

    def run(self) -> list[StageResult]:
        """Run every stage in order; returns what each did."""
        import time

        from attnwh.memory import PeakMemory

        results = []
        for index, stage in enumerate(STAGE_TABLE, start=1):
            self.hooks.stage(stage.name, index, len(STAGE_TABLE))
            started = time.perf_counter()
            result = StageResult(stage.name)
            with PeakMemory() as peak:
                stage.run(self, result)
            result.seconds = time.perf_counter() - started
            result.peak_bytes, result.peak_sampled = peak.bytes, peak.sampled
            if result.outcome == "done" and result.wrote_nothing:
                result.outcome = "skipped"
            self.hooks.stage_done(result)
            results.append(result)
        return results

    def _run(self, prepared: Prepared) -> Sequence[Any]:
        """A stage's work, prepared by its run kind as for its command, into the study's warehouse."""
        return prepared.ingest(self.options.db, self.options.engine, self.hooks.start, self.hooks.advance)

    def stage_ingest_base(self, result: StageResult) -> None:
        from attnwh.ingest.runs.loop import prepare_statistics

        prepared = prepare_statistics(self.base, [t.eval for t in self.tasks], self._ingest("ingest-base"))
        self._record("ingest-base", self._run(prepared), result)

    def stage_finetune(self, result: StageResult) -> None:
        from attnwh.ingest.model.loading import LINEAGE_FILE
        from attnwh.ingest.runs.finetune import Checkpoints, finetune

        forced = "finetune" in self.options.force
        for task in self.tasks:
            out = self.tuned_dir(task)
            wanted = _lineage_settings(self.options, task, self.base, self.finetune_options)
            saved = _read_json(out / LINEAGE_FILE)
            if not forced and saved is not None and _lineage_matches(saved, wanted):
                self._record_saved(task, saved)
                result.add(task.name, "kept", wrote=False)
                continue
            if saved is not None and not forced:
                self.hooks.note(f"{task.name}: the model in {out} was trained differently; training again")
            self._tuned.pop(task.name, None)
            self.hooks.start(f"fine-tuning {task.name}, {len(task.train.examples)} examples", None)
            # finetune writes its note, with the study's part, once and after the model files: a
            # folder whose note lacks this part was not finished by the study, and is trained again.
            trained = finetune(
                self.options.model,
                task.train,
                task.eval,
                out,
                self.finetune_options,
                self.options.device,
                self.hooks.step,
                _study_lineage(wanted[STUDY_KEY]),
                Checkpoints(
                    self.options.micro_batch_size, self.options.checkpoint_steps, self.options.checkpoint_minutes
                ),
            )
            if trained.resumed_from:
                self.hooks.note(f"{task.name}: resumed from the checkpoint at step {trained.resumed_from}")
            self.trained[task.name] = trained
            run_id = self._store_finetune(task, trained)
            self.wrote_anything = True
            scores = ", ".join(f"{k} {v:.4f}" for k, v in trained.scores.items())
            result.add(task.name, f"trained in {trained.train_seconds:.1f} s, {scores} (run {run_id})", wrote=True)

    def _store_finetune(self, task: StudyTask, trained: FinetuneResult) -> int:
        from attnwh.ingest.runs.finetune import record

        con = warehouse.connect(self.options.db)
        try:
            run_id = record(
                con,
                trained,
                self.finetune_options,
                self.base.facts(),
                self.tuned(task).facts(),
                task.train,
                str(self.base.device),
                self.options.command,
                self.options.max_train_examples,
            )
        finally:
            con.close()
        self.run_ids[("finetune", task.name)] = run_id
        return run_id

    def _record_saved(self, task: StudyTask, saved: dict) -> None:
        """A reused model whose fine-tuning is not in this warehouse (another --db) gets
        its run from the saved note, so the warehouse always holds the tuned model's scores."""
        tuned = self.tuned(task)
        con = warehouse.connect(self.options.db)
        try:
            row = warehouse.first_row(
                con,
                "SELECT max(r.run_id) FROM runs r JOIN models m USING (model_id) "
                "WHERE r.kind = 'finetune' AND m.weights_hash = ? AND m.name = ?",
                [tuned.weights_hash, tuned.name],
            )
        finally:
            con.close()
        if row and row[0] is not None:
            self.run_ids[("finetune", task.name)] = row[0]
            return
        from attnwh.ingest.runs.finetune import FinetuneResult

        note = saved.get(STUDY_KEY, {})
        result = FinetuneResult(
            out_dir=self.tuned_dir(task),
            base_name=saved.get("base", self.base.name),
            base_weights_hash=self.base.weights_hash,
            tuned_weights_hash=tuned.weights_hash,
            task=task.name,
            train_examples=note.get("train_examples", len(task.train.examples)),
            dev_examples=note.get("dev_examples", len(task.eval.examples)),
            train_seconds=note.get("train_seconds", 0.0),
            final_loss=note.get("final_loss"),
            scores=saved.get("scores", {}),
            started_at=_read_time(note.get("started_at")),
            finished_at=_read_time(note.get("finished_at")),
            dev_split=task.eval.split,
        )
        self._store_finetune(task, result)
        self.wrote_anything = True

    def stage_ingest_tuned(self, result: StageResult) -> None:
        from attnwh.ingest.runs.loop import prepare_statistics

        for task in self.tasks:
            prepared = prepare_statistics(self.tuned(task), [task.eval], self._ingest("ingest-tuned"))
            self._record("ingest-tuned", self._run(prepared), result)

    def stage_compare(self, result: StageResult) -> None:
        from attnwh.ingest.runs.loop import prepare_compare

        for task in self.tasks:
            prepared = prepare_compare(self.base, self.tuned(task), [task.eval], self._ingest("compare"))
            self._record("compare", self._run(prepared), result)

    def stage_ablation(self, result: StageResult) -> None:
        from attnwh.ingest.runs.ablation import AblationOptions, prepare_task_sweep

        options = dataclasses.replace(self._ingest("ablation"), limit=self.options.ablation_limit)
        settings = [
            AblationOptions(
                mode=mode,
                top_k=self.options.top_k,
                n_resamples=self.options.resamples,
                importance=self.options.importance,
                configs_per_pass=self.options.configs_per_pass or 0,
                attention_memory=self.options.attention_memory,
            )
            for mode in self.options.modes
        ]
        for task in self.tasks:
            prepared = prepare_task_sweep(self.tuned(task), [task.eval], settings, options)
            # One sweep per mode, in order: their summaries name it.
            summaries = list(self._run(prepared))
            for summary in summaries:
                self._record(f"ablation:{summary.mode}", [summary], result)

    def stage_report(self, result: StageResult) -> None:
        from attnwh.reports.build import build_report, write_html

        target = self.options.report
        if target.exists() and not self.wrote_anything and "report" not in self.options.force:
            result.add(str(target), "kept", wrote=False)
            return
        built = build_report(self.options.db, token_maps=True)
        write_html(built, target)
        drawn = sum(1 for s in built.sections if not s.note)
        result.add(
            str(target),
            f"{len(built.charts())} charts, {drawn} of {len(built.sections)} sections with data",
            wrote=True,
        )

    # -- summary ---------------------------------------------------------------------------

    def summary(self) -> list[TaskSummary]:
        """Per task: the tuned model's score, the layer that changed most, the head whose
        disabling helped most and the sink heads disabled together (first mode), read back
        from the warehouse by the named query study_summary for this study's runs."""
        from attnwh.sql.queries import get_query, run_query

        query = get_query("study_summary")
        first_mode = f"ablation:{self.options.modes[0]}"
        con = warehouse.connect(self.options.db, read_only=True)
        try:
            out = []
            for task in self.tasks:
                # Run ids start at 1: 0 selects no run for a stage that has not run in this study.
                runs = {
                    param: self.run_ids.get((stage, task.name), 0)
                    for param, stage in (
                        ("finetune_run", "finetune"),
                        ("compare_run", "compare"),
                        ("ablation_run", first_mode),
                    )
                }
                rows = run_query(con, query, {"metric": task.metric, **runs}).to_pylist()
                note = self.sinks_notes.get((first_mode, task.name))
                out.append(_task_summary(task, rows[0] if rows else {}, note))
            return out
        finally:
            con.close()


@dataclass(frozen=True)
class Stage:
    name: str
    help: str
    run: Callable[[Study, StageResult], None]


STAGE_TABLE: tuple[Stage, ...] = (
    Stage("ingest-base", "head statistics of the pre-trained model on each task's eval split", Study.stage_ingest_base),
    Stage(
        "finetune", "fine-tune the model on each task's train split, score it on the eval split", Study.stage_finetune
    ),
    Stage("ingest-tuned", "head statistics of each fine-tuned model", Study.stage_ingest_tuned),
    Stage("compare", "how each head's attention changed through fine-tuning (cosine of the maps)", Study.stage_compare),
    Stage("ablation", "disable every head and layer of each tuned model, with significance", Study.stage_ablation),
    Stage("report", "the HTML report of the whole warehouse", Study.stage_report),
)
STAGES: tuple[str, ...] = tuple(stage.name for stage in STAGE_TABLE)
STAGE_HELP: dict[str, str] = {stage.name: stage.help for stage in STAGE_TABLE}


def _task_summary(task: StudyTask, row: dict, sinks_note: str | None = None) -> TaskSummary:
    """A study_summary row as a TaskSummary ({}: nothing found)."""
    changed = None if row.get("changed_layer") is None else (row["changed_layer"], row["mean_cosine"])
    helpful = (
        None
        if row.get("helpful_layer") is None
        else (row["helpful_layer"], row["helpful_head"], row["helpful_delta"], row["helpful_p_adjusted"])
    )
    sinks = None if row.get("sink_heads") is None else (row["sink_heads"], row["sinks_delta"], row["sinks_p_value"])
    return TaskSummary(
        task.name,
        task.metric,
        row.get("score"),
        changed,
        helpful,
        sinks,
        sinks_note,
        row.get("score_examples"),
        row.get("ablation_examples"),
        row.get("mode"),
    )


def _study_lineage(study_part: dict) -> LineageExtra:
    """The study's part of a tuned model's lineage note: the settings it was trained with
    and what the training gave."""

    def extra(trained: FinetuneResult) -> dict[str, object]:
        return {
            STUDY_KEY: {
                **study_part,
                "tuned_weights_hash": trained.tuned_weights_hash,
                "train_examples": trained.train_examples,
                "dev_examples": trained.dev_examples,
                "train_seconds": trained.train_seconds,
                "final_loss": trained.final_loss,
                "started_at": trained.started_at.isoformat() if trained.started_at else None,
                "finished_at": trained.finished_at.isoformat() if trained.finished_at else None,
            }
        }

    return extra


def _read_time(value: object) -> datetime | None:
    """A time saved in a lineage note (ISO 8601), or None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _lineage_matches(saved: dict, wanted: dict) -> bool:
    """Whether a saved note has every wanted setting (the study's part may hold more)."""
    study = saved.get(STUDY_KEY)
    if not isinstance(study, dict):
        return False
    # A note written before an option existed was trained with its default (precision).
    options = saved.get("options")
    if isinstance(options, dict):
        saved = {**saved, "options": {**FINETUNE_DEFAULTS, **options}}
    return all(saved.get(k) == v for k, v in wanted.items() if k != STUDY_KEY) and all(
        study.get(k) == v for k, v in wanted[STUDY_KEY].items()
    )


# The fine-tuning options added since the first notes, with the value they then had.
FINETUNE_DEFAULTS = {"precision": "float32"}


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def is_significant(p_adjusted: float | None, alpha: float = 0.05) -> bool:
    return p_adjusted is not None and not math.isnan(p_adjusted) and p_adjusted < alpha
