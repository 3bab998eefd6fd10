#!/usr/bin/env bash
# The benchmarks on a CUDA GPU, in one short run: long inputs on ModernBERT-base's shape (peak
# torch.cuda.max_memory_allocated and time of the sdpa and eager forwards and of attnwh's
# statistics, 1k to 8k tokens) and the GLUE-length ingest against the bare forward. Run from
# the repository root with the project installed: bash bench/gpu.sh [GLUE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'bench/gpu.sh: no CUDA device')"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true
python bench/long.py --device cuda --shape base --lengths 1024,2048,4096,8192 --chart long-memory-gpu.png
glue="${1:-../shared/data/glue}"
if [ -d "$glue" ]; then
    python bench/ingest.py --device cuda --glue-dir "$glue" --task sst2 --repeats 5
else
    python bench/ingest.py --device cuda --repeats 5
fi
