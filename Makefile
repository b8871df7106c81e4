# The two commands a participant needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done

.PHONY: setup run test lab lint clean

setup: $(STAMP)

# Re-runs only when the requirements or the package metadata change.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (LLM Inference Labs)" >/dev/null
	@touch $(STAMP)

run: setup
	$(PY) -m labs_lib run $(ARGS)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
