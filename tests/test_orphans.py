"""No server outlives its run: the runner, a sweep and `serve` are interrupted (SIGINT), terminated
(SIGTERM) and killed (SIGKILL) mid-start-up and mid-stream; afterwards no process they started remains
(engines, kernels) and the engine's port is free. Every process is found through an environment tag,
so a re-parented orphan is found too. The randomized variants (random moments, repeated) need
--run-slow."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import REPO, TAG_VARIABLE, engine_pids, listening_ports, tagged_pids, wait_until_gone

from labs_lib.engines import free_port, port_is_free

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
GONE_WITHIN_S = 20.0  # a SIGKILLed parent is noticed by the engine's watch thread within seconds


def launch(args: list[str], tag: str) -> subprocess.Popen:
    env = {**os.environ, TAG_VARIABLE: tag, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "labs_lib", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stream_in_background(base_url: str, first_token: threading.Event) -> threading.Thread:
    """A long streamed request that sets first_token when text arrives and ends however the server ends."""

    def run():
        body = {
            "model": "gemma-3-270m",
            "messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": 2000,
            "ignore_eos": True,
            "stream": True,
        }
        try:
            with httpx.stream("POST", base_url + "/chat/completions", json=body, timeout=60) as resp:
                for line in resp.iter_lines():
                    if '"content"' in line:
                        first_token.set()
        except httpx.HTTPError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def assert_nothing_left(proc: subprocess.Popen, tag: str, ports: set[int]) -> None:
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the tool itself did not exit: {proc.args}") from None
    alive = wait_until_gone(tag, GONE_WITHIN_S)
    details = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:120] for p in alive if Path(f"/proc/{p}").exists()]
    for pid in alive:  # leave the machine clean for the next test before failing
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running {GONE_WITHIN_S:.0f} s after the tool ended: {details}"
    for port in ports:
        assert wait_for(lambda port=port: port_is_free(port), 10, f"port {port} to be free")


def serve_then_signal(sig: signal.Signals, moment: str, tag: str, delay_s: float = 0.0) -> None:
    port = free_port()
    proc = launch(["serve", "--port", str(port), "--ctx", "1024"], tag)
    if moment == "start-up":
        wait_for(lambda: engine_pids(tag), 60, "the engine process")
        time.sleep(delay_s)
    else:
        wait_for(lambda: _healthy(port), 90, "the engine to be ready")
        first = threading.Event()
        stream_in_background(f"http://127.0.0.1:{port}/v1", first)
        assert first.wait(60), "no token streamed"
        time.sleep(delay_s)
    proc.send_signal(sig)
    assert_nothing_left(proc, tag, {port})


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def sweep_then_signal(sig: signal.Signals, tmp_path: Path, tag: str, delay_s: float = 2.0) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "name: orphan\nengine: llamacpp\nbase: {ctx: 1024}\naxes: {parallel: [1, 2]}\n"
        "workloads: [{name: long, concurrency: [1], requests: 4, prompt_tokens: 16, max_tokens: 128}]\n"
    )
    proc = launch(["sweep", "--grid", str(grid), "--out", str(tmp_path / "rows.jsonl")], tag)
    pids = wait_for(lambda: engine_pids(tag), 90, "the sweep's engine")
    ports = wait_for(lambda: listening_ports(pids), 60, "the engine's port")
    time.sleep(delay_s)  # mid-point: the engine is loaded or streaming
    proc.send_signal(sig)
    assert_nothing_left(proc, tag, ports)


def runner_then_signal(sig: signal.Signals, tmp_path: Path, tag: str, delay_s: float = 1.0) -> None:
    proc = launch(["run", "--only", "05", "--out", str(tmp_path / "runs")], tag)
    pids = wait_for(lambda: engine_pids(tag), 180, "the notebook's engine")
    ports = wait_for(lambda: listening_ports(pids), 60, "the engine's port")
    assert len(tagged_pids(tag)) >= 3  # runner, kernel, engine
    time.sleep(delay_s)
    proc.send_signal(sig)
    assert_nothing_left(proc, tag, ports)


@pytest.mark.parametrize("moment", ["start-up", "mid-stream"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_serve(sig, moment):
    serve_then_signal(SIGNALS[sig], moment, f"serve-{sig}-{moment}-{os.getpid()}")


@pytest.mark.parametrize("sig", SIGNALS)
def test_sweep_mid_point(sig, tmp_path):
    sweep_then_signal(SIGNALS[sig], tmp_path, f"sweep-{sig}-{os.getpid()}")


@pytest.mark.parametrize("sig", SIGNALS)
def test_runner_mid_notebook(sig, tmp_path):
    runner_then_signal(SIGNALS[sig], tmp_path, f"runner-{sig}-{os.getpid()}")


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(12))
def test_random_tool_signal_and_moment(trial, tmp_path):
    rng = random.Random(trial)
    sig = SIGNALS[rng.choice(list(SIGNALS))]
    tool = rng.choice(["serve", "sweep", "runner"])
    tag = f"random-{trial}-{os.getpid()}"
    if tool == "serve":
        serve_then_signal(sig, rng.choice(["start-up", "mid-stream"]), tag, delay_s=rng.uniform(0, 2))
    elif tool == "sweep":
        sweep_then_signal(sig, tmp_path, tag, delay_s=rng.uniform(0, 8))
    else:
        runner_then_signal(sig, tmp_path, tag, delay_s=rng.uniform(0, 10))
