"""What every bench script prints: the machine, the commit, the date, its ratios and a verdict."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

from labs_lib.paths import PROJECT_DIR


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_DIR), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(PROJECT_DIR), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return out.stdout.strip() + ("+changes" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def header(title: str) -> None:
    mem = memory_gib()
    print(f"# {title}")
    print(
        f"date {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} · commit {commit()} · "
        f"{os.cpu_count()} CPUs ({cpu_model()}) · {mem:.0f} GiB RAM · Python {platform.python_version()}"
        if mem
        else f"date {dt.datetime.now(dt.UTC):%Y-%m-%d} · commit {commit()} · {os.cpu_count()} CPUs"
    )
    sys.stdout.flush()


def verdict(checks: dict[str, bool]) -> int:
    """Print one line per goal, then PASS or FAIL; returns the exit status (0 pass, 1 fail)."""
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'MISSED'}] {name}")
    passed = all(checks.values())
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1
