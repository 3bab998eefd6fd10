#!/usr/bin/env bash
# SmolLM2-135M-Instruct read by attnwh, as in docs/results/smollm2-135m-roles.md and
# docs/results/smollm2-135m.md, then the pages themselves. The first: statistics of the
# bundled prose sample, every head's role scores on seeded probes, every head and layer
# disabled and scored by next-token loss, and which key/value groups need the whole context
# at 2,048 tokens. The second: statistics on 200 SST-2 dev examples, the zero-shot prompted
# SST-2 sweep of every head and layer on 100 of those examples and the statistics of those
# 100 prompts. Every
# step skips what is done, so rerunning after an interruption resumes.
#
#   bash tools/study_smollm2.sh [WORK_DIR]    (default: study-smollm2/ in the repository root)
#
# Needs the model (python tools/fetch_smollm2.py) and ../shared/data/glue.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mkdir -p "${1:-$ROOT/study-smollm2}" && cd "${1:-$ROOT/study-smollm2}" && pwd)"
GLUE="$ROOT/../shared/data/glue"
MODEL="$ROOT/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
A="${ATTNWH:-attnwh}"
export HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
cd "$WORK"
[ -f "$MODEL" ] || { echo "no model at $MODEL: python tools/fetch_smollm2.py" >&2; exit 2; }

# A step runs once: its time and peak memory go to time-NAME.txt, done-NAME marks it finished.
step() {
    local name=$1
    shift
    [ -f "done-$name" ] && return 0
    /usr/bin/time -v -o "time-$name.txt" "$@" && touch "done-$name"
}

# Head roles, the loss sweep and the restriction first (their page needs only the prose
# statistics), then the SST-2 statistics and sweep of the main page.
step stats-prose "$A" ingest --model "$MODEL" --task prose --db smol.duckdb || exit 1
# Head roles: 20 induction probes (the default 50 random tokens twice) and 20 needle
# probes of 1,024 tokens cut from the bundled prose, the needle at depths 0 to 100 %.
step roles "$A" ingest roles --model "$MODEL" --probes induction,needle --examples 20 --db smol.duckdb || exit 1
# Every head and layer disabled, scored by next-token loss on 16 paragraphs of the prose
# sample. 16 sequences and 2^16 resamples make the sign-flip test exact, its smallest p
# 2^-15, small enough to pass Benjamini–Hochberg over 300 configurations.
step loss-sweep "$A" ingest ablation --model "$MODEL" --task prose --limit 16 --resamples 65536 \
    --db smol.duckdb || exit 1
# Which key/value groups need the whole context, at 2,048 tokens: one sequence of the prose,
# 102 restriction sets, each a forward pass of about 15 s on a 2-core CPU. No needle probes:
# each would add another 102 passes (--needles 1: about 25 min more).
step restriction "$A" ingest restriction --model "$MODEL" --context-length 2048 --limit 1 --needles 0 \
    --db smol.duckdb || exit 1
"$A" report results --page roles --db smol.duckdb --name SmolLM2-135M-Instruct \
    --time-dir . --companion smollm2-135m.md --out "$ROOT/docs/results/smollm2-135m-roles.md" || exit 1

step stats-sst2 "$A" ingest --model "$MODEL" --glue-dir "$GLUE" --task sst2 --limit 200 --db smol.duckdb || exit 1
step sweep-sst2 "$A" ingest ablation --model "$MODEL" --glue-dir "$GLUE" --task sst2 --prompt --limit 100 \
    --db smol.duckdb || exit 1
# The statistics of the same 100 prompts (and the answers, read in the same pass). In the
# order the page was made: after the sweep, whose sinks combination therefore read the
# statistics of the bare sentences; sink_vs_ablation now prefers these.
step stats-sst2-prompt "$A" ingest --model "$MODEL" --glue-dir "$GLUE" --task sst2 --prompt --limit 100 \
    --db smol.duckdb || exit 1
"$A" report results --page decoder --db smol.duckdb --name SmolLM2-135M-Instruct \
    --model "$MODEL" --time-dir . --companion smollm2-135m-roles.md --out "$ROOT/docs/results/smollm2-135m.md"
