"""docs/workshop.md's pre-flight checklist runs as written: each `labs` line on this machine (the GPU instance's
line is parsed: its vLLM bench is the one tests/test_vllm_live.py runs), and the guide's lab plans are the
notebooks' own."""

import re
import shlex

import pytest
from conftest import REPO

from labs_lib import cli
from labs_lib.runner import discover
from labs_lib.study_time import stated_plan_min

GUIDE = (REPO / "docs" / "workshop.md").read_text()


def _preflight() -> list[tuple[list[str], str]]:
    block = GUIDE.split("## Pre-flight", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = []
    for line in block.strip().splitlines():
        command, _, comment = line.partition("#")
        words = shlex.split(command)
        assert words[0] == "labs", line
        lines.append((words[1:], comment))
    return lines


def test_the_guide_states_each_labs_own_plan():
    for nb in discover():
        assert re.search(rf"\| {int(nb.name[:2]):02d} [^|]+\| {stated_plan_min(nb)} min \|", GUIDE), nb.name


@pytest.mark.notebook
def test_the_preflight_checklist_runs_as_written(tmp_path, capsys):
    checklist = _preflight()
    assert len(checklist) >= 3
    for args, comment in checklist:
        if "on a GPU instance" in comment:
            parsed = cli.build_parser().parse_args(args)  # the vLLM path itself: tests/test_vllm_live.py
            assert parsed.command == "bench" and parsed.engine == "vllm"
            continue
        if args[0] == "run":
            args = [*args, "--out", str(tmp_path)]  # runs/<time> otherwise
        assert cli.main(args) == 0, args
    said = capsys.readouterr().out
    assert "verdict: nothing failed" in said and "TTFT" in said and "readable without running" in said
