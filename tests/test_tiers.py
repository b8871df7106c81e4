"""The fast tier (make test-fast) tells the truth: a test that starts an engine is left out when a fixture it
uses requests starts_engine, and fails when it starts one unmarked. Run as a user runs it, in a subprocess."""

import os
import re
import subprocess
import sys

from conftest import REPO

SNEAKY = """
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
import pytest


@pytest.fixture
def engine(starts_engine):
    with LlamaCppEngine(EngineConfig(ctx=512)) as e:
        yield e


def test_marked_through_its_fixture(engine):
    assert engine.is_running()


def test_unmarked_inline_start():
    with LlamaCppEngine(EngineConfig(ctx=512)) as e:
        assert e.is_running()


def test_no_engine():
    assert 1 + 1 == 2
"""


def test_the_fast_tier_leaves_out_marked_engine_tests_and_fails_an_unmarked_one(tmp_path, starts_engine):
    (tmp_path / "test_sneaky.py").write_text(SNEAKY)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--fast-tier", "-p", "conftest", "-q", "-p", "no:cacheprovider", "test_sneaky.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO / "tests")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_sneaky.py::test_unmarked_inline_start started 1 engine(s) (llamacpp) in the fast tier" in out, out
    # the unmarked start passes its body, then fails the tier; the marked one never runs
    assert re.search(r"\b2 passed, 1 deselected\b.*\b1 error\b", out), out


def collected(*option_sets: tuple[str, ...]) -> list[set[str]]:
    """The test ids pytest collects with each set of options: the collections run at once, each in a subprocess
    (one takes ~5 s of imports; side by side they share the two cores)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *options, "tests"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for options in option_sets
    ]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-2000:] + err[-2000:]
        ids.append({line for line in out.splitlines() if "::" in line})
    return ids


def test_make_test_runs_each_test_once_fast_tier_first():
    """make test is the fast tier, then --engine-tier: together the whole suite, no test in both halves, and the
    engine tier holds every notebook, browser and vLLM test."""
    whole, fast, engines = collected((), ("--fast-tier",), ("--engine-tier",))
    assert fast and engines and not fast & engines, sorted(fast & engines)[:5]
    assert fast | engines == whole, sorted(whole - (fast | engines))[:5]
    assert {
        t for t in whole if t.startswith(("tests/test_notebooks.py", "tests/test_browser.py", "tests/test_vllm_live.py"))
    } <= engines
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    assert recipe.index("--fast-tier") < recipe.index("--engine-tier"), recipe
