"""Nothing saved is lost when the disk says no. A results path that is a directory, on a read-only file
system or on a full disk is one line and exit 2 before any engine starts; a disk that fills mid-sweep
stops the sweep (exit 1, one line) with the rows already written intact, and the same command resumes.
Read-only and full disks are real: small tmpfs mounts (root, as on the CI machine)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, assert_one_line_error, run_cli


@contextlib.contextmanager
def tmpfs(path: Path, size_kib: int, *, read_only: bool = False):
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kib}k" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path) -> Path:
    """Write until the file system says ENOSPC; the filler's path (delete it to make room)."""
    filler = folder / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    return filler


GRID = (
    "name: disk\nengine: llamacpp\nbase: {ctx: 512}\naxes: {parallel: [1, 2, 3]}\n"
    "workloads: [{name: w, concurrency: [1], requests: 3, prompt_tokens: 16, max_tokens: 48}]\n"
)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A labs cache of this test's own: an engine started by anything else on the machine logs elsewhere."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("LABS_CACHE_DIR", str(folder))
    return folder


def no_engine_started(cache: Path) -> bool:
    return not [p for p in (cache / "logs").glob("*") if p.is_file()]


def test_a_directory_as_the_results_file(tmp_path, private_cache):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    assert_one_line_error(run_cli("sweep", "--grid", str(grid), "--out", str(tmp_path)), str(tmp_path), "directory")
    assert_one_line_error(run_cli("bench", "--endpoint", "local", "--out", str(tmp_path), "--requests", "1"), "directory")
    assert_one_line_error(run_cli("run", "--only", "01", "--out", str(grid)), "is a file")
    assert no_engine_started(private_cache)


def test_a_read_only_file_system(tmp_path, private_cache):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    with tmpfs(tmp_path / "ro", 64, read_only=True) as ro:
        sweep = run_cli("sweep", "--grid", str(grid), "--out", str(ro / "rows.jsonl"))
        bench = run_cli("bench", "--endpoint", "local", "--out", str(ro / "bench.json"), "--requests", "1")
        runs = run_cli("run", "--only", "01", "--out", str(ro / "runs"))
    for done in (sweep, bench, runs):
        assert_one_line_error(done, "read-only file system")
    assert no_engine_started(private_cache)


def test_a_full_disk_before_the_run(tmp_path, private_cache):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    with tmpfs(tmp_path / "full", 256) as full:
        fill(full)
        sweep = run_cli("sweep", "--grid", str(grid), "--out", str(full / "rows.jsonl"))
        bench = run_cli("bench", "--endpoint", "local", "--out", str(full / "bench.json"), "--requests", "1")
    for done in (sweep, bench):
        assert_one_line_error(done, "full")
    assert no_engine_started(private_cache)


@pytest.mark.engine
def test_the_disk_fills_mid_sweep_rows_stay_and_the_sweep_resumes(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    with tmpfs(tmp_path / "disk", 2048) as disk:
        out = disk / "rows.jsonl"
        command = [sys.executable, "-m", "labs_lib", "sweep", "--grid", str(grid), "--out", str(out)]
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 900  # bounds a hang; the event is the first row on disk
        while not (out.exists() and out.read_text().count("\n") >= 1) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        filler = fill(disk)
        stdout, stderr = proc.communicate(timeout=900)
        kept = [json.loads(line) for line in out.read_text().splitlines()]
        assert proc.returncode == 1, (stdout, stderr)
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]  # the rest is the progress bar
        assert "Traceback" not in stderr and len(errors) == 1, stderr
        assert "intact" in errors[0] and "resume" in errors[0] and str(out) in errors[0], errors
        assert 1 <= len(kept) < 3 and all(r["status"] == "ok" for r in kept)
        os.remove(filler)
        again = run_cli("sweep", "--grid", str(grid), "--out", str(out), timeout=900)
        assert again.returncode == 0, again.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[: len(kept)] == kept  # what was saved before the disk filled is untouched
    assert len(rows) == 3 and len({r["point_id"] for r in rows}) == 3
