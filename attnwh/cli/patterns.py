"""`attnwh patterns`: re-label stored maps, import hand labels, train the pattern CNN.

Pattern types are assigned during `attnwh ingest` (rules in `patterns.py`); these commands
work on the warehouse alone and never load an encoder. torch is imported inside the command
bodies, so `attnwh --help` stays fast.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from attnwh.cli.helpformat import HelpCommand, HelpGroup
from attnwh.cli.output import results_console
from attnwh.errors import UsageError
from attnwh.options import DEFAULT_DB, ReadDbOpt

patterns_app = typer.Typer(
    cls=HelpGroup,
    help="Attention pattern types (Kovaleva et al.): label stored maps by eye, import the labels, re-label maps, train a CNN.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

RunOpt = Annotated[list[int] | None, typer.Option("--run", help="Only this run (repeatable); default: every run.")]


class Order(str, enum.Enum):
    random = "random"
    uncertain = "uncertain"


class Classifier(str, enum.Enum):
    learned = "learned"
    rules = "rules"
    cnn = "cnn"


def _open(db: Path):
    from attnwh.sql import warehouse

    if not db.exists():
        raise UsageError(f"no warehouse at {db}; create one with `attnwh ingest`")
    return warehouse.connect(db)


def _thresholds(settings: list[str] | None, base=None):
    from attnwh.ingest.measures import patterns

    values = (base or patterns.THRESHOLDS).as_dict()
    for item in settings or []:
        name, _, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in values or not value:
            raise UsageError(f"--set takes NAME=VALUE with NAME one of {', '.join(values)}; got {item!r}")
        try:
            values[name] = float(value)
        except ValueError:
            raise UsageError(f"--set {name}: {value!r} is not a number") from None
    return patterns.Thresholds(**values)


@patterns_app.command(cls=HelpCommand)
def reclassify(
    classifier: Annotated[
        Classifier,
        typer.Option(
            help="learned: the shipped classifier trained on hand labels of real maps, which ingests use "
            "(every head_stats row with look features); rules: the rules, from every head_stats row's stored "
            "features (implied by --set and --thresholds); cnn: label every stored thumbnail with a trained CNN."
        ),
    ] = Classifier.learned,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Rules only: override a threshold for this relabelling, e.g. --set vertical=0.5 "
            "(names: vertical, diagonal, mixed_vertical, mixed_diagonal, block).",
        ),
    ] = None,
    thresholds_name: Annotated[
        str | None,
        typer.Option(
            "--thresholds",
            help="Rules only: a threshold set fitted by `attnwh patterns calibrate` (or 'default', the shipped one); "
            "--set then overrides single thresholds of it.",
        ),
    ] = None,
    model_id: Annotated[int | None, typer.Option(help="CNN only: which trained model (default: the latest).")] = None,
    run: RunOpt = None,
    db: ReadDbOpt = DEFAULT_DB,
) -> None:
    """Re-label stored maps without running the model: from the features stored in head_stats with the shipped classifier (the default, as at ingest) or with the rules (after their thresholds changed, or with a fitted threshold set), or with a trained CNN from the stored thumbnails (into pattern_thumbnails.cnn_pattern; `attnwh query pattern_frequency -p classifier=cnn` reads them)."""
    if (set_ or thresholds_name) and classifier is Classifier.cnn:
        raise UsageError("--set and --thresholds change the rules' thresholds; they do not apply to --classifier cnn")
    if model_id is not None and classifier is not Classifier.cnn:
        raise UsageError("--model-id picks a trained CNN; it applies to --classifier cnn only")
    if set_ or thresholds_name:
        classifier = Classifier.rules
    from attnwh.ingest.measures import pattern_model
    from attnwh.ingest.runs import patterns as pattern_store

    con = _open(db)
    try:
        if classifier is Classifier.rules:
            base = pattern_store.threshold_set(con, thresholds_name) if thresholds_name else None
            thresholds = _thresholds(set_, base)
            counts = pattern_store.reclassify(con, thresholds, run)
            source = "rules " + ", ".join(f"{k}={v:g}" for k, v in thresholds.as_dict().items())
        elif classifier is Classifier.learned:
            counts = pattern_store.reclassify(con, pattern_model.default(), run)
            source = "the shipped classifier"
        else:
            chosen, counts = pattern_store.reclassify_cnn(con, model_id, run)
            source = f"CNN {chosen}"
    finally:
        con.close()
    total = sum(counts.values())
    shares = ", ".join(f"{name} {n / total:.1%}" if total else f"{name} 0" for name, n in counts.items())
    results_console().print(f"{total:,} maps labelled by {source}: {shares}", highlight=False)


@patterns_app.command(cls=HelpCommand)
def label(
    out: Annotated[Path, typer.Argument(metavar="HTML", help="The page to write, e.g. label.html.")],
    run: RunOpt = None,
    task: Annotated[str | None, typer.Option(help="Only maps of this task.")] = None,
    layer: Annotated[int | None, typer.Option(min=0, help="Only maps of this layer (0-based).")] = None,
    type_: Annotated[str | None, typer.Option("--type", help="Only maps of this stored type, e.g. vertical.")] = None,
    order: Annotated[
        Order,
        typer.Option(help="random: a seeded sample; uncertain: the maps with the smallest stored margin first."),
    ] = Order.random,
    limit: Annotated[int, typer.Option(min=1, help="Maps on the page.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the random order.")] = 0,
    db: ReadDbOpt = DEFAULT_DB,
) -> None:
    """Write an offline HTML page for labelling stored maps by eye: each map drawn large with its tokens on the axes (the whole map where ingest kept it, for inputs of up to 64 tokens or `attnwh ingest --map-tokens N`, else the 32 x 32 thumbnail; + and - zoom, the pointer's cell is named under the map), one key per type, labels saved as you go, and an export as the CSV that `attnwh patterns import-labels` reads. Maps come from each statistics run's thumbnail sample (`attnwh ingest --thumbnails N`)."""
    from attnwh.ingest.runs import patterns as pattern_store
    from attnwh.reports.labelling import label_page

    con = _open(db)
    try:
        maps = pattern_store.label_sample(
            con, runs=run, task=task, layer=layer, pattern=type_, order=order.value, limit=limit, seed=seed
        )
    finally:
        con.close()
    if not maps:
        raise UsageError("no stored maps match; ingest with --thumbnails N (and check --run, --task, --layer, --type)")
    whole = sum(bool(m["whole"]) for m in maps)
    try:
        out.write_text(label_page(maps, f"attnwh: label {len(maps)} attention maps"), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    results_console().print(
        f"{len(maps)} maps ({whole} whole, {len(maps) - whole} thumbnails) written to {out}; "
        f"label them in a browser, export, then `attnwh patterns import-labels labels.csv`",
        highlight=False,
    )


@patterns_app.command("import-labels", cls=HelpCommand)
def import_labels(
    csv_file: Annotated[Path, typer.Argument(metavar="CSV", help="Columns run, example, layer, head, type.")],
    db: ReadDbOpt = DEFAULT_DB,
) -> None:
    """Import hand labels of attention maps from a CSV file with columns run (run_id), example (example_id), layer, head and type (heterogeneous, vertical, diagonal, vertical+diagonal, block) into pattern_labels; labels of the same maps are replaced."""
    from attnwh.ingest.runs import patterns as pattern_store

    con = _open(db)
    try:
        n = pattern_store.import_labels(con, csv_file)
    finally:
        con.close()
    results_console().print(f"{n} labels imported from {csv_file} into {db.resolve()}", highlight=False)


@patterns_app.command(cls=HelpCommand)
def calibrate(
    name: Annotated[str, typer.Option(help="Name to store the fitted thresholds under.")] = "fitted",
    folds: Annotated[int, typer.Option(min=2, help="k of the seeded stratified k-fold cross-validation.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the folds (and of the CNN).")] = 0,
    cnn: Annotated[bool, typer.Option(help="Also cross-validate the CNN on the same folds.")] = True,
    epochs: Annotated[int, typer.Option(min=1, help="CNN: passes over each fold's training maps.")] = 60,
    db: ReadDbOpt = DEFAULT_DB,
) -> None:
    """Fit the rules' thresholds to the hand labels in the warehouse (`attnwh patterns import-labels`) by maximising macro-F1; report the cross-validated macro-F1 and agreement of the shipped rules, the fitted rules, the shipped classifier, its training procedure (nested cross-validation) and the CNN on the same seeded folds; read the procedure's held-out types per model and per length band (up to 64 tokens, longer), and, where the labels hold maps of two models or more, trained on the other models' labels only and scored on each model's; and store the thresholds fitted to all labels as a named set for `attnwh patterns reclassify --thresholds NAME`."""
    from rich.table import Table

    from attnwh.ingest.measures import patterns
    from attnwh.ingest.runs import patterns as pattern_store

    con = _open(db)
    try:
        result = pattern_store.calibrate(con, name, folds=folds, seed=seed, cnn=cnn, epochs=epochs)
    finally:
        con.close()
    console = results_console()
    console.print(
        f"{result.n_labels} labelled maps, {result.folds} stratified folds (seed {result.seed}); "
        "scores of held-out predictions except where marked",
        highlight=False,
    )
    table = Table("classifier", "macro-F1", "agreement")
    for s in result.scores:
        mark = "" if s.held_out else " *"
        table.add_row(s.name + mark, f"{s.macro_f1:.3f}", f"{s.agreement:.3f}")
    console.print(table)
    if not all(s.held_out for s in result.scores):
        console.print(
            "* fitted once, not per fold: held out only if these are not the labels it was trained on "
            "(the shipped set of docs/pattern_labels.md is)",
            highlight=False,
        )
    best = max((s for s in result.scores if s.held_out), key=lambda s: s.macro_f1)
    confusion = Table(
        f"label \\ {best.name}", *(t[:12] for t in patterns.PATTERN_TYPES), title="held-out confusion of the best"
    )
    for code, row in enumerate(best.confusion):
        if row.sum():
            confusion.add_row(patterns.PATTERN_TYPES[code], *(str(int(v)) for v in row))
    console.print(confusion)
    parts = [
        *(("model", k, v) for k, v in result.by_model.items()),
        *(("length", k, v) for k, v in result.by_length.items()),
        *(("across models", k, v) for k, v in result.across_models.items()),
    ]
    if parts:
        block = patterns.PATTERN_TYPES.index("block")
        table = Table(
            "read on", "maps", "macro-F1", "agreement", "block F1",
            title="the default classifier's training procedure by model and length (nested, held out) "
            "and trained on the other models' labels only",
        )  # fmt: skip
        for kind, key, s in parts:
            f1 = s.f1_of(block)
            where = f"{key} (trained on the others)" if kind == "across models" else f"{kind} {key}"
            row = (str(int(s.confusion.sum())), f"{s.macro_f1:.3f}", f"{s.agreement:.3f}")
            table.add_row(where, *row, "–" if f1 is None else f"{f1:.3f}")
        console.print(table)
    fitted = ", ".join(f"{k}={v:g}" for k, v in result.thresholds.as_dict().items())
    console.print(
        f"thresholds fitted to all {result.n_labels} labels, stored as {result.name!r}: {fitted}; "
        f"apply with `attnwh patterns reclassify --thresholds {result.name}`",
        highlight=False,
    )


@patterns_app.command(cls=HelpCommand)
def train(
    seed: Annotated[int, typer.Option(help="Seed of the split, the initialisation and the batch order.")] = 42,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the training maps.")] = 60,
    test_share: Annotated[float, typer.Option(min=0.05, max=0.9, help="Share of each type's maps held out.")] = 0.25,
    db: ReadDbOpt = DEFAULT_DB,
) -> None:
    """Train a small CNN on the thumbnails of labelled maps (Kovaleva et al.'s classifier), report its held-out macro F1 against the labels next to that of the rules on the same maps, and store the model and both scores in pattern_models. `attnwh patterns reclassify --classifier cnn` then applies it."""
    from attnwh.ingest.runs import patterns as pattern_store

    con = _open(db)
    try:
        result = pattern_store.train_cnn(con, seed=seed, epochs=epochs, test_share=test_share)
    finally:
        con.close()
    results_console().print(
        f"pattern CNN {result.model_id}: {result.n_labelled} labelled maps, {result.n_train} train / "
        f"{result.n_test} held out; held-out macro F1: CNN {result.f1_cnn:.3f}, rules {result.f1_rules:.3f}",
        highlight=False,
    )
