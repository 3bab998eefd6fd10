#!/usr/bin/env bash
# SmolLM2-135M-Instruct read by attnwh, as in docs/results/smollm2-135m.md, then the page
# itself: statistics on 200 SST-2 dev examples and on the bundled prose sample, the zero-shot
# prompted SST-2 sweep of every head and layer on 100 of those examples and the statistics
# of those 100 prompts. Every
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

step stats-sst2 "$A" ingest --model "$MODEL" --glue-dir "$GLUE" --task sst2 --limit 200 --db smol.duckdb || exit 1
step stats-prose "$A" ingest --model "$MODEL" --task prose --db smol.duckdb || exit 1
step sweep-sst2 "$A" ingest ablation --model "$MODEL" --glue-dir "$GLUE" --task sst2 --prompt --limit 100 \
    --db smol.duckdb || exit 1
# The statistics of the same 100 prompts (and the answers, read in the same pass). In the
# order the page was made: after the sweep, whose sinks combination therefore read the
# statistics of the bare sentences; sink_vs_ablation now prefers these.
step stats-sst2-prompt "$A" ingest --model "$MODEL" --glue-dir "$GLUE" --task sst2 --prompt --limit 100 \
    --db smol.duckdb || exit 1
"${PYTHON:-python}" "$ROOT/tools/decoder_results_page.py" --db smol.duckdb --name SmolLM2-135M-Instruct \
    --model "$MODEL" --time-dir . --out "$ROOT/docs/results/smollm2-135m.md"
