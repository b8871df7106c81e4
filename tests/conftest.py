"""Shared test helpers. Tests use real engines and real files; nothing is faked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run the long randomized variants")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long variant: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def run_cli(*args: str, env: dict | None = None, timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess:
    """`python -m labs_lib ARGS` in a subprocess, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "labs_lib", *args], capture_output=True, text=True, cwd=REPO,
                          env=full_env, timeout=timeout, input=input)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit status 2, no traceback, one line on stderr naming the bad value."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle.lower() in err.lower(), (needle, err)
