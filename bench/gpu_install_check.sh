#!/usr/bin/env bash
# The GPU set (requirements-gpu.txt, installed from its hashed lock locks/gpu-linux-x86_64.txt) checked on this CPU machine: the CUDA
# vLLM wheels install anywhere (about 9 GB), so what a GPU instance's `make setup-gpu` installs, imports,
# converts and passes to `vllm serve` is checked here. One line per check, then PASS or FAIL.
#
#   bench/gpu_install_check.sh                # into a throwaway venv (default /tmp/labs-gpu-check), removed after
#   KEEP=1 bench/gpu_install_check.sh         # keep the venv
#
# Record the result in docs/performance.md §7 (tests/test_project.py fails when the GPU set changes after it).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${GPU_CHECK_VENV:-/tmp/labs-gpu-check}
LOCKFILE=locks/gpu-linux-x86_64.txt  # what make setup-gpu installs on an x86_64 instance (make lock writes it)
fails=0
check() {  # check NAME COMMAND...: one line, PASS or FAIL with the command's last line
  local name=$1; shift
  local started=$SECONDS out
  if out=$("$@" 2>&1); then echo "PASS  $name ($((SECONDS - started)) s)"; else
    echo "FAIL  $name ($((SECONDS - started)) s): $(printf '%s' "$out" | tail -1)"; fails=$((fails + 1)); fi
}
rm -rf "$VENV" && python3 -m venv "$VENV"
check "install the GPU set (--require-hashes -r $LOCKFILE)" "$VENV/bin/python" -m pip install -q --require-hashes -r "$LOCKFILE"
check "install the project (--no-deps -e .)" "$VENV/bin/python" -m pip install -q --no-deps -e .
echo "      venv size: $(du -sh "$VENV" | cut -f1)"
check "import what the labs import on the GPU path" "$VENV/bin/python" -c "
import vllm, torch, transformers, accelerate, gguf, pynvml
import labs_lib.engines.vllm, labs_lib.quant_compare, labs_lib.sweep, labs_lib.runner, labs_lib.gpu, labs_lib.doctor.checks
print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
# argument parsing needs no GPU, but vLLM infers a device to build its defaults: on this CPU machine, say which
VLLM_TARGET_DEVICE=cpu "$VENV/bin/vllm" serve --help=all > /tmp/gpu-check-help.txt 2>&1
check "every flag the project can emit is in this vLLM's serve --help=all" "$VENV/bin/python" bench/gpu_flags_check.py /tmp/gpu-check-help.txt
out=$(mktemp -d)
check "convert the shipped GGUF with this transformers (CPU)" env CUDA_VISIBLE_DEVICES= "$VENV/bin/python" labs_lib/engines/hf_convert.py \
  "$("$VENV/bin/python" -c 'from labs_lib.engines.model_files import default_model_path; print(default_model_path())')" "$out/gemma-3-270m"
rm -rf "$out"
echo "      set: $(cat requirements.txt requirements-gpu.txt "$LOCKFILE" | sha256sum | cut -c1-16) (sha256 of requirements.txt, requirements-gpu.txt and $LOCKFILE; docs/performance.md §7 records it)"
[ "${KEEP:-0}" = 1 ] || rm -rf "$VENV"
if [ $fails = 0 ]; then echo PASS; else echo "FAIL ($fails)"; exit 1; fi
