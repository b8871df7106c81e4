"""Shared test helpers. Tests use real engines and real files; nothing is faked."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run the long randomized variants")
    parser.addoption(
        "--fast-tier",
        action="store_true",
        help="only tests that start no engine, notebook, vLLM or browser; one that starts an engine anyway fails",
    )
    parser.addoption(
        "--engine-tier",
        action="store_true",
        help="only the tests --fast-tier leaves out (make test runs the fast tier, then this: no test runs twice)",
    )
    parser.addoption("--suite-report", metavar="PATH", help="also write the time per file and the engine starts as JSON")


# A test that starts any of these is not in the fast tier (make test-fast).
HEAVY_MARKS = ("engine", "vllm", "notebook", "browser")


@pytest.fixture(scope="session")
def starts_engine():
    """Requested by every fixture that starts an engine: the tests using it, directly or through other
    fixtures, are marked `engine` at collection (and so left out of the fast tier)."""


@pytest.fixture
def vllm_installed() -> Path:
    """For a test that needs vLLM installed but starts nothing: it is marked `vllm` (out of the fast tier, which
    CI runs before `make setup-vllm`), skipped without vLLM, failed in CI without it (require_vllm). Its value is
    the installed vLLM's package folder, asked of vLLM's own Python: $LABS_VLLM_PYTHON may name any interpreter
    (a conda env's, a wrapper script), not only a venv's bin/python beside lib/python3*/site-packages."""
    require_vllm()
    from labs_lib.engines.vllm import find_vllm, package_dir

    folder = package_dir(find_vllm())
    assert folder, "the installed vLLM's Python could not say where its package is"
    return folder


@pytest.fixture(scope="session")
def starts_vllm(starts_engine):
    """Requested by every fixture that starts vLLM: its tests are marked `vllm` (and `engine`)."""


def pytest_configure(config):
    """This run's engine starts are told apart from those of anything beside it (another test run, a lab): each
    start records $LABS_STARTED_BY, which kernels and commands inherit."""
    from labs_lib.engines.base import STARTED_BY_VARIABLE

    os.environ[STARTED_BY_VARIABLE] = f"pytest-{os.getpid()}"


def this_runs_starts(since: float) -> list[dict]:
    """Engine starts since unix time `since` by this pytest run, its kernels and its commands."""
    from labs_lib.engines.base import STARTED_BY_VARIABLE, read_starts

    return read_starts(since, by=os.environ[STARTED_BY_VARIABLE])


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if "starts_engine" in used:
            item.add_marker(pytest.mark.engine)
        if "starts_vllm" in used or "vllm_installed" in used:
            item.add_marker(pytest.mark.vllm)
    fast, engines = config.getoption("--fast-tier"), config.getoption("--engine-tier")
    if fast and engines:
        raise pytest.UsageError("--fast-tier and --engine-tier are the two halves of the suite: give one of them")
    if fast or engines:
        heavy = {id(item) for item in items if any(mark in item.keywords for mark in HEAVY_MARKS)}
        left_out = [item for item in items if (id(item) in heavy) == fast]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if (id(item) in heavy) != fast]
    if not config.getoption("--run-slow"):
        skip = pytest.mark.skip(reason="long variant: run with --run-slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_engine(request):
    """In the fast tier, a test that started an engine (any process: engines record each start) fails
    and says how to mark it."""
    if not request.config.getoption("--fast-tier"):
        yield
        return
    since = time.time()
    yield
    started = this_runs_starts(since)
    if started:
        kinds = ", ".join(sorted({row["kind"] for row in started}))
        pytest.fail(
            f"{request.node.nodeid} started {len(started)} engine(s) ({kinds}) in the fast tier: "
            "start it through a fixture that requests starts_engine (or mark the test engine)"
        )


# --- the suite's time per file and its engine starts (printed after every run that is not the fast tier) ---

_TIMES: dict[str, float] = {}
_STARTS: list[dict] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    since = time.time()
    yield
    path = item.nodeid.split("::")[0]
    _TIMES[path] = _TIMES.get(path, 0.0) + time.time() - since
    _STARTS.extend({**row, "test": item.nodeid} for row in this_runs_starts(since))


def suite_summary() -> dict:
    """Seconds per test file, and engine starts per kind (count, seconds in all, slowest)."""
    kinds: dict[str, dict] = {}
    for row in _STARTS:
        k = kinds.setdefault(row["kind"], {"starts": 0, "seconds": 0.0, "slowest_s": 0.0, "failed": 0})
        k["starts"] += 1
        k["seconds"] = round(k["seconds"] + row["start_s"], 1)
        k["slowest_s"] = max(k["slowest_s"], row["start_s"])
        k["failed"] += not row["ok"]
    per_file = {path: round(s, 1) for path, s in sorted(_TIMES.items(), key=lambda kv: -kv[1])}
    return {"seconds_by_file": per_file, "engine_starts": kinds, "starts": _STARTS}


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("--fast-tier") or not _TIMES:
        return
    summary = suite_summary()
    write = terminalreporter.write_line
    terminalreporter.section("suite time")
    write("seconds by file: " + ", ".join(f"{Path(p).name} {s:.0f}" for p, s in summary["seconds_by_file"].items()))
    for kind, k in summary["engine_starts"].items():
        write(
            f"engine starts, {kind}: {k['starts']} ({k['failed']} failed), {k['seconds']:.0f} s in all, slowest {k['slowest_s']:.0f} s"
        )
    if config.getoption("--suite-report"):
        Path(config.getoption("--suite-report")).write_text(json.dumps(summary, indent=1))


def run_cli(*args: str, env: dict | None = None, timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess:
    """`python -m labs_lib ARGS` in a subprocess, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "labs_lib", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=full_env,
        timeout=timeout,
        input=input,
    )


# the doctor's --timeout in tests against live engines: it bounds a hang. Its default, 15 s per request, is
# for people; with both cores busy one 8-token answer has taken longer (bench/busy_runs.py found it).
DOCTOR_TIMEOUT = ("--timeout", "300")


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit status 2, no traceback, one line on stderr naming the bad value."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle.lower() in err.lower(), (needle, err)


# --- reliability helpers: canary keys, leak search, processes tagged through their environment ---

UNMASKED_KEY = re.compile(r"\bsk-(?!…)[A-Za-z0-9_\-]{6,}")
KEY_VARIABLES = ("TAOTOKEN_API_KEY", "VLLM_API_KEY", "LAB06_API_KEY")


def fake_key(label: str) -> str:
    """A key-shaped fake, made at run time: no key-like string is written into the repository."""
    return "sk-" + label + secrets.token_hex(12)


def make_canaries() -> dict[str, str]:
    """A distinctive fake key per variable: anything that prints or saves one is caught by its value."""
    return {name: fake_key("canary" + name.split("_")[0].lower()) for name in KEY_VARIABLES}


def find_leaks(text: str, canaries: dict[str, str]) -> list[str]:
    """Canary values (whole, or the middle third of one), and any unmasked sk- string, found in text."""
    found = [f"canary {name}" for name, value in canaries.items() if value in text or value[10:26] in text]
    found += [f"unmasked key-like string {m!r}" for m in UNMASKED_KEY.findall(text)]
    return found


def notebook_outputs_and_metadata(path: Path) -> str:
    """An executed notebook without its cell sources (sources hold literal fake keys the labs send on purpose)."""
    nb = json.loads(Path(path).read_text())
    parts = [json.dumps(nb.get("metadata", {}))]
    for cell in nb["cells"]:
        parts += [json.dumps(cell.get("metadata", {})), json.dumps(cell.get("outputs", []))]
    return "\n".join(parts)


def files_changed_since(folder: Path, since: float) -> list[Path]:
    return [p for p in Path(folder).rglob("*") if p.is_file() and p.stat().st_mtime >= since] if Path(folder).exists() else []


TAG_VARIABLE = "LABS_TEST_TAG"


def as_from_a_terminal() -> None:
    """preexec_fn for a tool the tests interrupt: a suite started in the background (nohup, `&`, some CI
    runners) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler; the tool runs
    as it would from a terminal, where Ctrl-C works."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tagged_pids(tag: str) -> list[int]:
    """Processes whose environment carries LABS_TEST_TAG=tag: a tool and everything it started, even
    after re-parenting (kernels, engines, their helpers)."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if needle in (proc / "environ").read_bytes().split(b"\0"):
                    state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":  # a zombie holds nothing; its parent reaps it
                        pids.append(int(proc.name))
            except OSError:
                pass
    return pids


ENGINE_PROCESSES = (b"llamacpp_launcher", b"vllm.entrypoints.openai.api_server", b"VLLM::EngineCore")


def engine_pids(tag: str, names: tuple[bytes, ...] = ENGINE_PROCESSES) -> list[int]:
    """Tagged engine processes: llama.cpp's launcher, vLLM's API server and its engine core."""
    out = []
    for pid in tagged_pids(tag):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if any(name in cmdline for name in names):
            out.append(pid)
    return out


@pytest.fixture
def own_tag(monkeypatch) -> str:
    """A tag every process this test starts carries (LABS_TEST_TAG, inherited by engines, kernels and commands),
    so the test counts its own engines only, whatever else runs on the machine."""
    tag = "t" + secrets.token_hex(6)
    monkeypatch.setenv(TAG_VARIABLE, tag)
    return tag


def launchers(tag: str) -> set[int]:
    """The llama.cpp launchers (one per embedded engine) among the processes tagged `tag`."""
    return set(engine_pids(tag, (b"llamacpp_launcher",)))


def wait_for(condition, timeout_s: float, what: str, poll_s: float = 0.05):
    """condition()'s first truthy value, polled until timeout_s (a bound on a hang, not a guess of speed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def write_notebook(path, *sources: str) -> None:
    """A notebook at `path` whose code cells hold `sources`, on the plain python3 kernel (for the runner's own tests)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


def wait_until_gone(tag: str, timeout_s: float = 20.0, alive=tagged_pids) -> list[int]:
    """Tagged processes still alive after timeout_s (empty: all gone); `alive` narrows them (launchers: engines)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(tag):
            return []
        time.sleep(0.2)
    return list(alive(tag))


def listening_ports(pids: list[int]) -> set[int]:
    import psutil

    ports = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error, OSError):
            ports |= {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    return ports


def require_vllm() -> None:
    """Skip without vLLM (make setup-vllm installs it); in CI, where make test installs it, fail instead."""
    from labs_lib.engines.vllm import find_vllm

    if find_vllm() is None:
        if os.environ.get("CI"):
            pytest.fail("vLLM is not installed in CI: make test must run make setup-vllm first")
        pytest.skip("vLLM is not installed: make setup-vllm")


CHROMIUM = os.environ.get("LABS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
HOW_TO_GET_A_BROWSER = "install a browser: apt-get install chromium (as root), and pip install playwright"


def browser_missing() -> str | None:
    """What tests/test_browser.py lacks here (Playwright, or Chromium's path), or None when it can run."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright"
    return None if Path(CHROMIUM).exists() else CHROMIUM
