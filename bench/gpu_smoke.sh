#!/usr/bin/env bash
# GPU smoke check (bench/gpu_smoke.py): run from the repository root on a machine with an NVIDIA GPU and
# PyTorch; under 5 minutes. Makes the labs' venv with the system's PyTorch visible (no network needed
# when the packages are already installed), then runs the checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv
  .venv/bin/python -m pip install -q -c constraints.txt -r requirements.txt -e . || true
fi
exec .venv/bin/python bench/gpu_smoke.py "$@"
