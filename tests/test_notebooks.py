"""Every lab notebook, executed headlessly through the runner with the CPU defaults (quick), with
canary keys in the environment: a "TaoToken" that is really a second embedded engine requiring the
TaoToken canary (so lab 02's remote section runs and sends it), a VLLM_API_KEY canary, and lab 06's
engine key. No canary, and no unmasked sk- string, may reach an executed notebook's outputs or
metadata, the runner's printed lines, or an engine log.

Labs 02-05 on the embedded engine run whole in JupyterLab (tests/test_browser.py) wherever a browser can, so they run
headless here only where none can: one run of each path, not two (about four minutes of a CI run). Their headless
runs on vLLM (test_lab_runs_on_vllm) carry the canaries and lab 02's TaoToken section."""

import json
import re
import secrets
import time

import pytest
from conftest import (
    REPO,
    browser_missing,
    files_changed_since,
    find_leaks,
    make_canaries,
    notebook_outputs_and_metadata,
    require_vllm,
)

from labs_lib import cli, cores, runner
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.engines.vllm import find_vllm
from labs_lib.paths import RESULTS_DIR, cache_dir


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


@pytest.fixture
def core_calls(tmp_path, monkeypatch):
    """A file the lab's kernel notes each call of a function a build-it check kept (cores.base.CALLS_VARIABLE)."""
    calls = tmp_path / "core-calls.txt"
    monkeypatch.setenv(cores.base.CALLS_VARIABLE, str(calls))
    return calls


def _runs_on_the_participants_code(lab: str, calls) -> None:
    """Filled in, every build-it of the lab passed its check, and the lab called each of them again afterwards: the
    curves, loads, sweeps and scores came from the participant's functions, not the library's."""
    called = set(calls.read_text().split()) if calls.exists() else set()
    unused = sorted(set(cores.BY_LAB[lab]) - called)
    assert not unused, f"lab {lab} checks these and never calls them again: {unused}"


IN_THE_BROWSER = ("03", "04", "05")  # run whole in JupyterLab by tests/test_browser.py, on the embedded engine


AS_WRITTEN = ("01", "02")  # `labs run --as-written`, build-its left unwritten (lab 02 filled in: test_lab_runs_on_vllm)


def _shows_what_every_run_must(executed: dict, lab: str, outputs: str, as_written: bool = False) -> None:
    """No error output; figures drawn headless too; each build-it cell checked (filled in by the runner: it agrees
    with the library; as written: "not written yet", and the lab went on); lab 02's TaoToken section ran with the
    canary key, accepted."""
    names = [cores.defined_in("".join(c["source"])) for c in executed["cells"] if cores.TAG in c["metadata"].get("tags", [])]
    assert None not in names
    for name in names:
        verdict = f"{name}: not written yet" if as_written else f"{name}: agrees with the library on all"
        assert verdict in outputs, verdict
    fix_its = [c for c in executed["cells"] if cores.FIX_TAG in c["metadata"].get("tags", [])]
    if fix_its:  # filled in, each snippet's fix works; as written, each snippet fails and is diagnosed
        assert outputs.count(": fails: " if as_written else ": works: the reply is") >= len(fix_its), lab
    assert not [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    # a claim's id is the appendix's bookkeeping: no table or line a learner reads shows one (lab 07 numbers its rows)
    claim_ids = re.findall(r"\bs00\d-[a-z0-9][\w-]*", outputs)
    assert not claim_ids, claim_ids[:3]
    # a check that prints its verdict shows no bare echo of its return value under it
    echoes = [
        "".join(c["source"]).splitlines()[-1]
        for c in executed["cells"]
        for o in c.get("outputs", [])
        if o.get("output_type") == "execute_result" and "".join(o["data"].get("text/plain", "")) in ("True", "False", "None")
    ]
    assert not echoes, echoes
    # progress bars drawn as text (the runner's LABS_PROGRESS): a widget would be saved at its first frame, "0%"
    widgets = [
        o
        for c in executed["cells"]
        for o in c.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert not widgets, [w["data"].get("text/plain") for w in widgets][:3]
    # and saved as one stream per cell with the carriage returns applied: each bar reads its final state
    streams = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "stream"]
    assert not [o for o in streams if re.search("\r(?!\n)", "".join(o["text"]))], "a bar's intermediate frames were saved"
    images = [o for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "every lab draws its figures headless too"
    if lab == "07":  # the appendix computed the KV and settings verdicts, and read lab 06's record (run just before)
        assert "computed now" in outputs and "seed 004" in outputs
        assert "measured in lab 06" in outputs or not (RESULTS_DIR / "articles" / "lab06.json").exists()
    if lab == "02":  # the canary run is a test only if the key was used, and accepted
        assert "taotoken" in outputs and "TaoToken: not measured" not in outputs and "TaoToken: skipped" not in outputs


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", runner.discover(), ids=lambda p: p.stem)
def test_notebook_runs_headlessly(notebook, tmp_path, canaries, capsys, monkeypatch, core_calls):
    if notebook.stem.startswith(IN_THE_BROWSER) and not browser_missing():
        pytest.skip("run whole on the embedded engine in JupyterLab by tests/test_browser.py")
    lab06_key = None
    if notebook.stem.startswith("06"):
        # Lab 06 sends, refuses and diagnoses its key; here the key is short and has another provider's prefix,
        # so only the masking of the exact value read from the environment (redact.remember) can hide it.
        lab06_key = "gsk_" + secrets.token_hex(8)
        monkeypatch.setenv("LAB06_API_KEY", lab06_key)
        canaries = {**canaries, "LAB06_API_KEY": lab06_key}
    started = time.time()
    lab, as_written = notebook.stem[:2], notebook.stem.startswith(AS_WRITTEN)
    if as_written:
        assert cli.main(["run", "--only", lab, "--as-written", "--out", str(tmp_path)]) == 0
        output = tmp_path / notebook.name
    else:
        # the embedded engine, as in the browser (lab 04's "auto" would take vLLM where installed)
        result = runner.run_series([notebook], engine="llamacpp", quick=True, out_dir=tmp_path, progress=False)[0]
        assert result.status == "ok", f"{result.error}\n{result.cell_source}"
        output = result.output
    outputs = _check_no_leaks(output, capsys, canaries, started)
    _shows_what_every_run_must(json.loads(output.read_text()), lab, outputs, as_written)
    if not as_written and lab in cores.BY_LAB:
        _runs_on_the_participants_code(lab, core_calls)
    if lab == "01":  # the formula the lab goes on with reproduces every published per-token figure
        assert re.search(r"kv_bytes_per_sequence \((?:yours|the library's)\) matches (\d+) of \1 published", outputs)
    if lab06_key:  # the key was used and shown, masked (outputs are JSON text)
        assert json.dumps("gs…" + lab06_key[-4:])[1:-1] in outputs
        if find_vllm():  # seed 001's api_key="EMPTY", judged by what vLLM served and what the SDK refuses
            assert "a vLLM started without --api-key served every key here, so a 401 from it never means" in outputs
            assert "The placeholder is there for the SDK, which refuses to build a client without a key" in outputs
            assert "measured: HTTP 404" in outputs  # the vLLM column of section 10's comparison, from vLLM itself
            assert "or decreasing `max_model_len`" in outputs  # the refused start's reason, with vLLM's fix, whole


@pytest.mark.notebook
def test_lab06_as_written_on_a_laptop_without_vllm(tmp_path, canaries, capsys, monkeypatch):
    """Lab 06 as most participants first run it: every fix-it and build-it left unwritten, and no vLLM installed
    (no `make setup-vllm`). Each snippet fails and is diagnosed, the lab goes on with the library's functions, and
    section 10 sets the embedded engine's measured answers beside the bodies recorded from vLLM's own code. The
    filled-in run with vLLM's failures produced live is test_notebook_runs_headlessly's."""
    monkeypatch.setenv("LABS_VLLM_PYTHON", str(tmp_path / "no-vllm" / "python"))  # as where vLLM was never installed
    started = time.time()
    assert cli.main(["run", "--only", "06", "--as-written", "--out", str(tmp_path)]) == 0
    output = tmp_path / "06_troubleshooting.ipynb"
    outputs = _check_no_leaks(output, capsys, canaries, started)
    _shows_what_every_run_must(json.loads(output.read_text()), "06", outputs, as_written=True)
    assert "vLLM section not run: vLLM is not installed here" in outputs
    assert "recorded: HTTP 404" in outputs and "recorded: HTTP 401" in outputs  # vLLM's column, from its recorded bodies
    assert "a vLLM started without --api-key served every key here" not in outputs  # only a live vLLM can say that


ON_VLLM = {  # what each lab must show when vLLM (on CPU here) is its engine
    "02": ("started vllm", "role-only chunk at", "ttft_first_choice_ms_p50"),
    "03": ("started vllm", "the harness's token counts equal the engine's /metrics counters", "the rates were chosen by bracket"),
    "04": (
        "grids data/grids/vllm_cpu_*.yaml",
        "planned max concurrency",
        "nothing to turn here",
        "kv_dtype: not turned now",
        "hit rate, one prompt minus three (",  # section 3's takeaway: one system prompt against three in turn
        "three_system_prompts",
        "tok/s per user at the busiest point (",  # section 9's takeaway
        "at $0.08 per device-hour (usd_per_device_hour, as given): cheapest $",
    ),
    # sections 2, 5 and 6 and exercise 1 in vLLM's form (quant_views): bytes stored, the pool's tokens, TPOT by bytes
    "05": ("engine vllm", "float32 weights left out", "bits per weight", "tokens / 16-bit", "TPOT predicted by bytes"),
}
# lab 04 priced as a participant on a 2-vCPU cloud machine would price it (AWS m7g.large on demand, us-east-1, June
# 2026: 0.0816 USD an hour): section 9's cost per token runs on vLLM; the llama.cpp run in the browser has no price
ON_VLLM_PARAMS = {"04": {"usd_per_device_hour": 0.0816}}


@pytest.mark.notebook
@pytest.mark.vllm
@pytest.mark.parametrize("lab", sorted(ON_VLLM))
def test_lab_runs_on_vllm(lab, tmp_path, canaries, capsys, core_calls):
    """The labs with an engine parameter on vLLM (on CPU it serves the same Gemma 3 270M): each lab's vLLM path runs
    end to end, and no canary leaks. Lab 04 runs as a participant opens it, engine "auto" (vLLM wherever it is
    installed) at its default sizes; labs 02, 03 and 05 name vLLM (their "auto" takes it on a GPU only, and their
    default here, llama.cpp, is test_notebook_runs_headlessly's and the browser's)."""
    require_vllm()
    started = time.time()
    engine = "auto" if lab == "04" else "vllm"
    result = runner.run_series(
        runner.discover(lab), params=ON_VLLM_PARAMS.get(lab), engine=engine, quick=True, out_dir=tmp_path, progress=False
    )[0]
    assert result.status == "ok", f"{result.error}\n{result.cell_source}"
    outputs = _check_no_leaks(result.output, capsys, canaries, started)
    _shows_what_every_run_must(json.loads(result.output.read_text()), lab, outputs)
    _runs_on_the_participants_code(lab, core_calls)
    assert "vllm-cpu" in outputs
    for needle in ON_VLLM[lab]:
        assert needle in outputs, needle


@pytest.mark.notebook
def test_the_readmes_documented_parameters_run(tmp_path, capsys, core_calls):
    """A valid non-default parameter, as the README documents it: lab 01 planned for Llama-3.1-8B at 8,192 tokens
    (`labs run --only 01 -p model llama-3.1-8b -p seq_len 8192`) runs whole and uses them."""
    readme = (REPO / "README.md").read_text()
    assert "labs run --only 01 -p model llama-3.1-8b -p seq_len 8192" in readme
    args = ["run", "--only", "01", "-p", "model", "llama-3.1-8b", "-p", "seq_len", "8192", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    outputs = (tmp_path / "01_kv_cache_memory.ipynb").read_text()
    assert "Llama-3.1-8B, 8,192 tokens, 2 bytes per value" in outputs
    _runs_on_the_participants_code("01", core_calls)  # the one filled-in run of lab 01 (the others run it as written)
