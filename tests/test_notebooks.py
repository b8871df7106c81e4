"""Every lab notebook, executed headlessly through the runner with the CPU defaults (quick)."""

import json

import pytest

from labs_lib import runner


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", runner.discover(), ids=lambda p: p.stem)
def test_notebook_runs_headlessly(notebook, tmp_path):
    results = runner.run_series([notebook], quick=True, out_dir=tmp_path, progress=False)
    result = results[0]
    assert result.status == "ok", f"{result.error}\n{result.cell_source}"
    executed = json.loads(result.output.read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    images = [o for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "every lab draws its figures headless too"
