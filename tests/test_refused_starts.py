"""Labs 02-06 on a GPU instance whose card another engine holds: every vLLM start is refused with vLLM 0.33's own
"Free memory on device …" error (tests/fixtures/vllm/refusing_python, the CUDA build as the labs find it; no GPU
needed). Labs 04 and 05 complete, each configuration that could not start a row with vLLM's reason; labs 02 and 06,
which need their one engine, stop with that reason in one line — never a KeyError or an IndexError."""

import json
from pathlib import Path

import pytest

from labs_lib import runner
from labs_lib.engines.vllm import find_vllm

REFUSING = Path(__file__).parent / "fixtures" / "vllm" / "refusing_python"
REFUSAL = "Free memory on device cuda:0"


@pytest.fixture
def card_held(vllm_installed, starts_engine, monkeypatch):
    """vLLM found as the CUDA build, refusing every start; the shipped model's conversion (once, cached) runs in
    the vLLM installed here."""
    real = find_vllm().python
    monkeypatch.setenv("REFUSING_VLLM_REAL_PYTHON", real)
    monkeypatch.setenv("LABS_VLLM_PYTHON", str(REFUSING))


def _outputs(notebook: Path) -> tuple[str, list[dict]]:
    cells = json.loads(notebook.read_text())["cells"]
    outputs = [o for c in cells for o in c.get("outputs", [])]
    text = "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in outputs)
    return text, outputs


@pytest.mark.notebook
@pytest.mark.parametrize("lab", ["04", "05"])
def test_a_sweep_lab_completes_with_each_refused_configuration_a_row(lab, card_held, tmp_path):
    result = runner.run_series(runner.discover(lab), engine="vllm", quick=True, out_dir=tmp_path, progress=False)[0]
    assert result.status == "ok", f"{result.error}\n{result.cell_source}"
    text, outputs = _outputs(result.output)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert REFUSAL in text  # each failed configuration's row carries vLLM's own reason
    assert "engine did not start" in text if lab == "04" else "vllm failed to start" in text
    assert ("no Pareto front: no configuration started" if lab == "04" else "nothing to plot: no configuration started") in text


@pytest.mark.notebook
@pytest.mark.parametrize("lab", ["02", "06"])
def test_a_one_engine_lab_stops_with_the_reason_in_one_line(lab, card_held, tmp_path):
    result = runner.run_series(runner.discover(lab), engine="vllm", quick=True, out_dir=tmp_path, progress=False)[0]
    assert result.status == "failed"
    assert result.error.startswith("EngineError: vllm failed to start: ValueError: " + REFUSAL), result.error
    assert "stop that engine" in result.error and "\n" not in result.error.strip()
    _, outputs = _outputs(result.output)
    shown = [o for o in outputs if o.get("name") == "stderr" and REFUSAL in "".join(o.get("text", ""))]
    assert len(shown) == 1 and "".join(shown[0]["text"]).strip().count("\n") == 0  # one line, no traceback
