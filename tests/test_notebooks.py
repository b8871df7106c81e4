"""Every lab notebook, executed headlessly through the runner with the CPU defaults (quick), with
canary keys in the environment: a "TaoToken" that is really a second embedded engine requiring the
TaoToken canary (so lab 02's remote section runs and sends it), a VLLM_API_KEY canary, and lab 05's
engine key. No canary, and no unmasked sk- string, may reach an executed notebook's outputs or
metadata, the runner's printed lines, or an engine log."""

import json
import secrets
import time

import pytest
from conftest import files_changed_since, find_leaks, make_canaries, notebook_outputs_and_metadata, require_vllm

from labs_lib import runner
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.paths import cache_dir


@pytest.fixture(scope="module")
def canaries(starts_engine):
    keys = make_canaries()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in keys.items():
            mp.setenv(name, value)
        with LlamaCppEngine(EngineConfig(ctx=1024, parallel=1, api_key_env="TAOTOKEN_API_KEY")) as remote:
            mp.setenv("TAOTOKEN_BASE_URL", remote.base_url)
            mp.setenv("TAOTOKEN_MODEL", remote.model_id)
            yield keys


def _check_no_leaks(output, capsys, canaries, started: float) -> str:
    """No canary in the executed notebook, what the runner printed, or an engine log written since `started`."""
    printed = capsys.readouterr()
    outputs = notebook_outputs_and_metadata(output)
    assert not find_leaks(outputs, canaries)
    assert not find_leaks(printed.out + printed.err, canaries)
    for log in files_changed_since(cache_dir() / "logs", started):
        assert not find_leaks(log.read_text(errors="replace"), canaries), log
    return outputs


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", runner.discover(), ids=lambda p: p.stem)
def test_notebook_runs_headlessly(notebook, tmp_path, canaries, capsys, monkeypatch):
    lab05_key = None
    if notebook.stem.startswith("05"):
        # Lab 05 sends, refuses and diagnoses its key; here the key is short and has another provider's prefix,
        # so only the masking of the exact value read from the environment (redact.remember) can hide it.
        lab05_key = "gsk_" + secrets.token_hex(8)
        monkeypatch.setenv("LAB05_API_KEY", lab05_key)
        canaries = {**canaries, "LAB05_API_KEY": lab05_key}
    started = time.time()
    results = runner.run_series([notebook], quick=True, out_dir=tmp_path, progress=False)
    result = results[0]
    assert result.status == "ok", f"{result.error}\n{result.cell_source}"
    executed = json.loads(result.output.read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    images = [o for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "every lab draws its figures headless too"

    outputs = _check_no_leaks(result.output, capsys, canaries, started)
    if notebook.stem.startswith("02"):  # the canary run is a test only if the key was used, and accepted
        assert "taotoken" in outputs and "TaoToken: not measured" not in outputs and "TaoToken: skipped" not in outputs
    if lab05_key:  # the key was used and shown, masked (outputs are JSON text)
        assert json.dumps("gs…" + lab05_key[-4:])[1:-1] in outputs


ON_VLLM = {  # what each lab must show when vLLM (on CPU here) is its engine
    "02": ("started vllm", "role-only chunk at", "the harness's token counts equal the engine's /metrics counters"),
    "03": ("grids data/grids/vllm_cpu_*.yaml", "planned max concurrency", "nothing to turn here", "kv_dtype: not turned now"),
    "04": ("engine vllm", "gemma-3-270m", "float32 weights left out", "fp8"),
}


@pytest.mark.notebook
@pytest.mark.vllm
@pytest.mark.parametrize("lab", sorted(ON_VLLM))
def test_lab_runs_on_vllm(lab, tmp_path, canaries, capsys):
    """The labs with an engine parameter, run with engine="vllm": vLLM on CPU serves the same Gemma 3
    270M; each lab's vLLM path runs end to end, and no canary leaks."""
    require_vllm()
    started = time.time()
    result = runner.run_series(runner.discover(lab), engine="vllm", quick=True, out_dir=tmp_path, progress=False)[0]
    assert result.status == "ok", f"{result.error}\n{result.cell_source}"
    executed = json.loads(result.output.read_text())
    assert not [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    outputs = _check_no_leaks(result.output, capsys, canaries, started)
    assert "vllm-cpu" in outputs
    for needle in ON_VLLM[lab]:
        assert needle in outputs, needle
