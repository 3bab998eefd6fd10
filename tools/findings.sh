#!/usr/bin/env bash
# The findings of attention research on SmolLM2-135M and Gemma 3 270M side by side, as in
# docs/results/findings.md, then the page itself. Both decoders are read on the same text
# (the bundled prose sample) and the same seeded probes, into one warehouse: statistics;
# head roles on induction and needle probes, and on random tokens and text of 64 tokens; which
# key/value groups need the whole context (2 sequences of 1,024 tokens); streaming with 0, 1
# and 4 sinks; massive activations set to zero and to their mean; the loss by position (the
# in-context learning score); the top-10 retrieval heads against 10 random heads (5 draws) on
# pass-key probes of 256 and 512 tokens. Every step skips what is done, so rerunning after an
# interruption resumes.
#
#   bash tools/findings.sh [WORK_DIR]    (default: findings/ in the repository root)
#
# Needs the models: python tools/fetch_smollm2.py; python tools/fetch_gemma3.py.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mkdir -p "${1:-$ROOT/findings}" && cd "${1:-$ROOT/findings}" && pwd)"
A="${ATTNWH:-attnwh}"
DB="$WORK/findings.duckdb"
export HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
cd "$WORK"
declare -A MODELS=(
    [smollm2-135m]="$ROOT/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
    [gemma-3]="$ROOT/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf"
)
for name in "${!MODELS[@]}"; do
    [ -f "${MODELS[$name]}" ] || { echo "no model at ${MODELS[$name]}: see tools/fetch_*.py" >&2; exit 2; }
done

# A step runs once: its time and peak memory go to times/time-NAME.txt, done-NAME marks it.
mkdir -p times
step() {
    local name=$1
    shift
    [ -f "done-$name" ] && return 0
    /usr/bin/time -v -o "times/time-$name.txt" "$@" && touch "done-$name"
}

# One model after the other for each measurement, so that an interrupted run has each finding
# on both models or on neither.
for name in smollm2-135m gemma-3; do
    m=(--model "${MODELS[$name]}" --device cpu --db "$DB")
    step "$name-stats" "$A" ingest "${m[@]}" --task prose || exit 1
    step "$name-roles" "$A" ingest roles "${m[@]}" --examples 20 || exit 1
    step "$name-restriction" "$A" ingest restriction "${m[@]}" --limit 2 --needles 0 || exit 1
    step "$name-roles-random-text" "$A" ingest roles "${m[@]}" --probes random,text --examples 20 || exit 1
done
for name in smollm2-135m gemma-3; do
    m=(--model "${MODELS[$name]}" --device cpu --db "$DB")
    step "$name-streaming" "$A" ingest streaming "${m[@]}" --sink-tokens 0,1,4 --window 64 \
        --context-lengths 256,512,1024 --limit 8 || exit 1
done
for name in smollm2-135m gemma-3; do
    m=(--model "${MODELS[$name]}" --device cpu --db "$DB")
    step "$name-massive-ablation" "$A" ingest massive-ablation "${m[@]}" --context-length 256 --limit 20 || exit 1
done
for name in smollm2-135m gemma-3; do
    m=(--model "${MODELS[$name]}" --device cpu --db "$DB")
    step "$name-loss-curve" "$A" ingest loss-curve "${m[@]}" --context-length 512 --limit 40 || exit 1
done
for length in 256 512; do
    for name in smollm2-135m gemma-3; do
        m=(--model "${MODELS[$name]}" --device cpu --db "$DB")
        step "$name-passkey-$length" "$A" ingest ablation "${m[@]}" --probe passkey --max-length "$length" \
            --limit 20 --mode zero --no-sweep --disable-top retrieval:10 --random-heads 10 --draws 5 || exit 1
    done
done
"$A" report results --page findings --db "$DB" --time-dir times --out "$ROOT/docs/results/findings.md"
