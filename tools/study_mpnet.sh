#!/usr/bin/env bash
# The paper's study on the real all-mpnet-base-v2 (12 layers x 12 heads), as in
# docs/results/all-mpnet-base-v2.md, then the page itself. Every step skips what is done, so
# rerunning after an interruption resumes. On a 2-core CPU it takes about three hours
# alone; run it where nothing else competes for the cores.
#
#   bash tools/study_mpnet.sh [WORK_DIR]    (default: study-mpnet/ in the repository root)
#
# Needs the model (python tools/fetch_all_mpnet.py) and ../shared/data (GLUE, UD, FrameNet).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mkdir -p "${1:-$ROOT/study-mpnet}" && cd "${1:-$ROOT/study-mpnet}" && pwd)"
DATA="$ROOT/../shared/data"
MODEL="$ROOT/models/all-mpnet-base-v2"
A="${ATTNWH:-attnwh}"
export HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
cd "$WORK"
[ -d "$MODEL" ] || { echo "no model at $MODEL: python tools/fetch_all_mpnet.py" >&2; exit 2; }
TASKS=(sst2 mrpc rte stsb)
TRAIN=(--max-train-examples 1000 --epochs 3 --lr 3e-5)

# A step runs once: its time and peak memory go to time-NAME.txt, done-NAME marks it finished.
step() {
    local name=$1
    shift
    [ -f "done-$name" ] && return 0
    /usr/bin/time -v -o "time-$name.txt" "$@" && touch "done-$name"
}

# The study: statistics of the pre-trained model, fine-tuning, the tuned models' statistics,
# the compare and every task's sweep (the stderr log gives each stage's time and memory).
step study "$A" study --model "$MODEL" --glue-dir "$DATA/glue" --tasks "$(IFS=,; echo "${TASKS[*]}")" \
    --limit 200 --ablation-limit 200 --max-length 128 "${TRAIN[@]}" \
    --db study.duckdb --out-dir models --report report.html 2>> study.log || exit 1
# Table 1: the encoder with an untrained head, and the same architecture trained from scratch.
for t in "${TASKS[@]}"; do
    step "untrained-$t" "$A" finetune --model "$MODEL" --glue-dir "$DATA/glue" --task "$t" --epochs 0 --max-train-examples 1000 \
        --out "models/untrained-$t" --db study.duckdb || exit 1
done
for t in sst2 stsb; do
    step "scratch-$t" "$A" finetune --model "$MODEL" --glue-dir "$DATA/glue" --task "$t" --from-scratch \
        "${TRAIN[@]}" --out "models/scratch-$t" --db study.duckdb || exit 1
done
# Dependency and FrameNet heads of the pre-trained model.
step relations-ud "$A" ingest relations --model "$MODEL" --conllu "$DATA/ud/en_ewt-ud-dev.conllu" --db study.duckdb || exit 1
step relations-framenet "$A" ingest relations --model "$MODEL" \
    --framenet "$DATA/framenet/fn1.7.dev.opensesame.conll" --db study.duckdb || exit 1
"$A" report --db study.duckdb --out report.html
"$A" report results --page study --db study.duckdb --name all-mpnet-base-v2 --log study.log --time-dir . \
    --out "$ROOT/docs/results/all-mpnet-base-v2.md"
