#!/usr/bin/env bash
# For a machine with a GPU: the side-by-side decode benchmark and the quick sweep on CUDA, in
# well under five minutes once the quick model is in the store (training runs on the CPU).
#   bash benchmarks/gpu_check.sh [STORE_URL]
set -euo pipefail
cd "$(dirname "$0")/.."
DB=${1:-sqlite:///gpu-check.db}
PYTHON=${PYTHON:-.venv/bin/python}
"$PYTHON" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: this check is for a GPU machine"
print("cuda device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PY
"$PYTHON" -m cli.main train --preset quick --db "$DB"
time "$PYTHON" benchmarks/decode_vs_transformers.py --device cuda --db "$DB"
time "$PYTHON" -m cli.main run --preset quick --device cuda --db "$DB"
"$PYTHON" -m cli.main export --db "$DB" --format csv --out gpu-check.csv
echo "gpu check done: gpu-check.csv holds the measurements"
