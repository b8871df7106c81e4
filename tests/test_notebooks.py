"""Every lab notebook, executed headlessly through the runner with the CPU defaults (quick), with
canary keys in the environment: a "TaoToken" that is really a second embedded engine requiring the
TaoToken canary (so lab 02's remote section runs and sends it), a VLLM_API_KEY canary, and lab 05's
engine key. No canary, and no unmasked sk- string, may reach an executed notebook's outputs or
metadata, the runner's printed lines, or an engine log."""

import json
import time

import pytest
from conftest import files_changed_since, find_leaks, make_canaries, notebook_outputs_and_metadata

from labs_lib import runner
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.paths import cache_dir


@pytest.fixture(scope="module")
def canaries():
    keys = make_canaries()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in keys.items():
            mp.setenv(name, value)
        with LlamaCppEngine(EngineConfig(ctx=1024, parallel=1, api_key_env="TAOTOKEN_API_KEY")) as remote:
            mp.setenv("TAOTOKEN_BASE_URL", remote.base_url)
            mp.setenv("TAOTOKEN_MODEL", remote.model_id)
            yield keys


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", runner.discover(), ids=lambda p: p.stem)
def test_notebook_runs_headlessly(notebook, tmp_path, canaries, capsys):
    started = time.time()
    results = runner.run_series([notebook], quick=True, out_dir=tmp_path, progress=False)
    result = results[0]
    assert result.status == "ok", f"{result.error}\n{result.cell_source}"
    executed = json.loads(result.output.read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    images = [o for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "every lab draws its figures headless too"

    printed = capsys.readouterr()
    outputs = notebook_outputs_and_metadata(result.output)
    assert not find_leaks(outputs, canaries)
    assert not find_leaks(printed.out + printed.err, canaries)
    for log in files_changed_since(cache_dir() / "logs", started):
        assert not find_leaks(log.read_text(errors="replace"), canaries), log
    if notebook.stem.startswith("02"):  # the canary run is a test only if the key was used, and accepted
        assert "taotoken" in outputs and "TaoToken: not measured" not in outputs and "TaoToken: skipped" not in outputs
