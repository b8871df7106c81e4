"""`labs run --html` (make html): an executed run rendered as static pages with an index, readable without running."""

import re

import pytest

from labs_lib import cli
from labs_lib.errors import BadInput
from labs_lib.html_report import render


@pytest.mark.notebook
def test_a_quick_run_renders_as_pages_with_figures_and_an_index(tmp_path, capsys):
    assert cli.main(["run", "--only", "01,07", "--engine", "llamacpp", "--html", "--out", str(tmp_path)]) == 0
    assert f"readable without running: {tmp_path / 'html' / 'index.html'}" in capsys.readouterr().out
    index = (tmp_path / "html" / "index.html").read_text()
    linked = re.findall(r'<a href="([^"]+)">', index)
    assert linked == ["01_kv_cache_memory.html", "07_articles_checked.html"] and index.count("<td>ok</td>") == 2
    lab01, appendix = ((tmp_path / "html" / name).read_text() for name in linked)
    assert lab01.count("data:image/png;base64,") >= 3 and "KV-cache memory math" in lab01  # its figures, embedded
    assert "computed now" in appendix and "not written yet" not in lab01


def test_a_folder_without_executed_notebooks_is_one_line(tmp_path):
    with pytest.raises(BadInput, match="allowed: a folder of executed notebooks"):
        render(tmp_path)
