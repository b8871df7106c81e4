#!/usr/bin/env bash
# The GPU device check (bench/gpu_smoke.py), each tier under 8 minutes, one line per check, then PASS or FAIL.
#   bench/gpu_smoke.sh            tier 1, a bare GPU image: its own python (PyTorch, transformers, numpy), no venv,
#                                 no install, no network; the project runs from here with PYTHONPATH=.
#   bench/gpu_smoke.sh vllm       tier 2, a GPU instance after `make setup-gpu`: .venv's vLLM serves the shipped model
#   bench/gpu_smoke.sh vllm --labs  tier 2 and labs 01-06 quick on vLLM
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-bare}" = vllm ]; then
  shift
  exec .venv/bin/python bench/gpu_smoke.py --tier vllm "$@"
fi
[ "${1:-}" = bare ] && shift
PYTHONPATH=. exec "${PYTHON:-python3}" bench/gpu_smoke.py --tier bare "$@"
