"""The embedded llama.cpp engine, for real: lifecycle, failures, KV layout vs its own log, serve."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import REPO, as_from_a_terminal, fake_key, launchers, wait_until_gone, write_notebook

from labs_lib.engines import EngineConfig, port_is_free
from labs_lib.engines.llamacpp import LlamaCppEngine, first_error, parse_allocation
from labs_lib.engines.model_files import default_model_path
from labs_lib.errors import BadInput, EngineError
from labs_lib.kv_math import llamacpp_layout
from labs_lib.models import load_model

pytestmark = pytest.mark.engine


def gone(pid: int, within_s: float = 5.0) -> bool:
    """True once `pid` has exited (a zombie awaiting its reaper counts as exited)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def engine(starts_engine):
    with LlamaCppEngine(EngineConfig(ctx=4096, parallel=2)) as e:
        yield e


def test_start_stop_cycles_leave_no_process_and_no_port():
    for _ in range(2):
        e = LlamaCppEngine(EngineConfig()).start()
        pid, port = e.pid, e.port
        assert not port_is_free(port)
        assert httpx.get(e.root_url + "/health").json() == {"status": "ok"}
        e.stop()
        assert gone(pid) and port_is_free(port)
    e.stop()  # twice is fine


def test_context_manager_stops_on_error():
    with pytest.raises(RuntimeError), LlamaCppEngine(EngineConfig()) as e:
        pid = e.pid
        raise RuntimeError("boom")
    assert gone(pid)


def test_the_lab_stack_taken_again_stops_the_engine_it_held_even_while_referred_to():
    """A participant re-runs the cell that starts the lab's engine (`stack = lab_stack()`) after later cells kept a
    reference to the engine (lab 02's `kv_engine = server`): the engine the old stack held stops at once, rather than
    running until the kernel ends beside the new one."""
    from labs_lib.endpoints import lab_stack

    kept = lab_stack().enter_context(LlamaCppEngine(EngineConfig()))  # the reference a later cell keeps
    pid = kept.pid
    again = lab_stack()
    assert gone(pid)
    new = again.enter_context(LlamaCppEngine(EngineConfig()))
    assert new.proc.poll() is None  # the one the lab uses now runs
    again.close()  # the lab's last cell
    assert gone(new.pid)


def test_quantized_v_without_flash_attention_fails_fast_with_the_engines_words():
    start = time.monotonic()
    with pytest.raises(EngineError, match="quantized V cache requires flash_attn"):
        LlamaCppEngine(EngineConfig(kv_cache_dtype="q8_0", flash_attention=False)).start()
    assert time.monotonic() - start < 30


def test_context_too_large_for_the_memory_limit_fails_with_allocation_error():
    with pytest.raises(EngineError, match=r"insufficient memory|failed to allocate"):
        LlamaCppEngine(EngineConfig(ctx=2_000_000, memory_limit_mib=2048)).start()


def test_bad_config_is_refused_before_launch(tmp_path):
    with pytest.raises(BadInput, match=r"existing \.gguf"):
        LlamaCppEngine(EngineConfig(model=str(tmp_path / "missing.gguf")))
    with pytest.raises(BadInput, match="q8_0"):
        LlamaCppEngine(EngineConfig(kv_cache_dtype="fp7"))
    with pytest.raises(BadInput, match="parallel"):
        LlamaCppEngine(EngineConfig(parallel=0))
    with pytest.raises(BadInput, match="NO_SUCH_KEY_VAR"):
        LlamaCppEngine(EngineConfig(api_key_env="NO_SUCH_KEY_VAR"))


def test_interrupted_stream_still_lets_the_engine_stop_within_seconds():
    e = LlamaCppEngine(EngineConfig()).start()
    lines: list[str] = []

    def stream():
        try:
            with httpx.stream(
                "POST",
                e.base_url + "/chat/completions",
                timeout=60,
                json={
                    "model": e.model_id,
                    "messages": [{"role": "user", "content": "Tell a long story"}],
                    "max_tokens": 2000,
                    "stream": True,
                },
            ) as r:
                for line in r.iter_lines():
                    lines.append(line)
        except httpx.HTTPError as exc:
            lines.append(f"error {type(exc).__name__}")

    reader = threading.Thread(target=stream)
    reader.start()
    deadline = time.monotonic() + 30
    while len(lines) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(lines) >= 5, "the stream never started"
    pid, port = e.pid, e.port
    start = time.monotonic()
    e.stop()
    assert time.monotonic() - start < 5 and gone(pid) and port_is_free(port)
    reader.join(10)
    assert lines[-1].startswith("error") or lines[-1] == "data: [DONE]"


def test_child_exits_when_its_parent_is_killed():
    code = (
        "import sys; from labs_lib.engines.llamacpp import LlamaCppEngine; e = LlamaCppEngine().start(); "
        "print(e.pid, e.port, flush=True); import time; time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        child, port = map(int, parent.stdout.readline().split())
        parent.kill()
        parent.wait(5)
        assert gone(child, within_s=5), "the engine outlived its SIGKILLed parent"
        time.sleep(0.2)
        assert port_is_free(port)
    finally:
        parent.kill()


MATRIX = [  # ctx, parallel, ubatch, K/V type, swa_full, kv_unified
    (4096, 2, 512, "f16", False, False),
    (1000, 3, 512, "f16", False, False),
    (300, 1, 512, "f16", False, False),
    (8192, 1, 128, "q8_0", False, False),
    (2048, 4, 256, "q4_0", False, False),
    (6000, 2, 512, "q8_0", True, False),
    (4096, 4, 512, "f16", False, True),
]


@pytest.mark.parametrize("ctx,parallel,ubatch,kv,swa_full,unified", MATRIX)
def test_engine_layout_math_equals_the_logged_kv_sizes(ctx, parallel, ubatch, kv, swa_full, unified):
    config = EngineConfig(
        ctx=ctx, parallel=parallel, ubatch_tokens=ubatch, kv_cache_dtype=kv, swa_full=swa_full, kv_unified=unified
    )
    with LlamaCppEngine(config) as e:
        logged = e.allocation
    spec = load_model(str(default_model_path()))
    computed = llamacpp_layout(spec, ctx, parallel, ubatch=ubatch, type_k=kv, swa_full=swa_full, kv_unified=unified)
    assert (logged.n_ctx, logged.n_ctx_seq) == (computed.n_ctx, computed.n_ctx_seq)
    assert len(logged.caches) == len(computed.caches) == 2
    for got, want in zip(logged.caches, computed.caches, strict=True):
        assert (got.kind, got.cells, got.layers, got.seqs) == (want.kind, want.cells, want.layers, want.streams)
        assert got.k_mib == f"{want.k_bytes / 2**20:.2f}" and got.v_mib == f"{want.v_bytes / 2**20:.2f}"
        assert got.size_mib == f"{want.kv_bytes / 2**20:.2f}"
        assert got.type_k == kv


def test_cli_kv_engine_mode_agrees_with_a_running_engine():
    from conftest import run_cli

    out = run_cli(
        "kv",
        "--model",
        str(default_model_path()),
        "--engine",
        "llamacpp",
        "--ctx",
        "8192",
        "--parallel",
        "2",
        "--kv-dtype",
        "q8_0",
        "--json",
    )
    import json

    layout = json.loads(out.stdout)
    with LlamaCppEngine(EngineConfig(ctx=8192, parallel=2, kv_cache_dtype="q8_0")) as e:
        logged_mib = e.allocation.kv_mib
    assert f"{layout['kv_bytes'] / 2**20:.2f}" == f"{logged_mib:.2f}"


def test_chat_template_is_gemmas(engine):
    prompt = httpx.post(engine.root_url + "/apply-template", json={"messages": [{"role": "user", "content": "Hi"}]}).json()[
        "prompt"
    ]
    assert prompt == "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_model_card_and_alias(engine):
    models = httpx.get(engine.base_url + "/models").json()["data"]
    assert models[0]["id"] == "gemma-3-270m" and models[0]["meta"]["n_params"] == 268_098_176


def test_prompt_cache_off_recomputes_every_prompt():
    body = {"messages": [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 8}], "max_tokens": 2}
    with LlamaCppEngine(EngineConfig(prompt_cache=False)) as e:
        for _ in range(2):
            timings = httpx.post(e.base_url + "/chat/completions", json=body, timeout=60).json()["timings"]
            assert timings["cache_n"] == 0
    with LlamaCppEngine(EngineConfig(prompt_cache=True)) as e:
        cached = [
            httpx.post(e.base_url + "/chat/completions", json=body, timeout=60).json()["timings"]["cache_n"] for _ in range(2)
        ]
        assert cached[0] == 0 and cached[1] > 50


def test_api_key_is_enforced_and_never_logged(monkeypatch):
    monkeypatch.setenv("LABS_ENGINE_TEST_KEY", fake_key("enginetest-canary-"))
    with LlamaCppEngine(EngineConfig(api_key_env="LABS_ENGINE_TEST_KEY")) as e:
        body = {"model": e.model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        assert httpx.post(e.base_url + "/chat/completions", json=body, timeout=300).status_code == 401
        ok = httpx.post(
            e.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {e.api_key}"}, timeout=300
        )  # the timeout bounds a hang: a busy 2-core machine can take long for one short answer
        assert ok.status_code == 200
        argv = Path(f"/proc/{e.pid}/cmdline").read_bytes().decode(errors="replace")
    assert "canary" not in argv and "canary" not in e.log_text()


def test_log_parsers_on_their_own():
    text = (
        "0.02.335.232 E llama_init_from_model: quantized V cache requires flash_attn to be enabled\n"
        "0.02.335.245 E cmn  common_init_: failed to create context\n"
    )
    assert first_error(text) == "llama_init_from_model: quantized V cache requires flash_attn to be enabled"
    alloc = parse_allocation(
        "0.1 I llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells\n"
        "0.2 I llama_kv_cache: size =   30.00 MiB (  1024 cells,  15 layers,  2/2 seqs), "
        "K (f16):   15.00 MiB, V (f16):   15.00 MiB\n"
    )
    assert alloc.caches[0].kind == "swa" and alloc.caches[0].cells == 1024 and alloc.kv_mib == 30.0


def _serve(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "labs_lib", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        preexec_fn=as_from_a_terminal,
    )


def _read_until(proc: subprocess.Popen, marker: str, timeout_s: float = 60) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if marker in line:
            return lines
    raise AssertionError("serve never printed " + marker + ": " + "\n".join(lines))


def test_serve_answers_the_openai_sdk_with_streaming_and_usage():
    from openai import OpenAI

    key = fake_key("servetest-canary-")
    proc = _serve("--parallel", "2", "--api-key-env", "LABS_SERVE_KEY", env={"LABS_SERVE_KEY": key})
    try:
        lines = _read_until(proc, "Ctrl-C to stop")
        text = "\n".join(lines)
        base_url = next(ln.split(": ", 1)[1].strip() for ln in lines if ln.startswith("OpenAI base URL"))
        assert f"sk-…{key[-4:]}" in text and key not in text and "KV cache: 42.00 MiB" in text
        client = OpenAI(base_url=base_url, api_key=key, max_retries=0)
        stream = client.chat.completions.create(
            model="gemma-3-270m",
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
        assert sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) >= 1
        child = int(next(p for p in os.listdir("/proc") if p.isdigit() and _is_launcher_of(int(p), proc.pid)))
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0 and "stopped." in out
        assert gone(child)
    finally:
        proc.kill()


def test_serve_sigterm_stops_cleanly():
    proc = _serve()
    try:
        _read_until(proc, "Ctrl-C to stop")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0 and "stopped." in out
    finally:
        proc.kill()


def test_serve_bad_input_is_one_line():
    from conftest import assert_one_line_error, run_cli

    assert_one_line_error(run_cli("serve", "--api-key-env", "NOT_SET_ANYWHERE_123"), "NOT_SET_ANYWHERE_123")
    assert_one_line_error(run_cli("serve", "--ctx", "-1"), "ctx")
    assert_one_line_error(run_cli("serve", "--kv-dtype", "fp7"), "fp7")


def _is_launcher_of(pid: int, parent: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return int(stat.split(")")[-1].split()[1]) == parent and b"llamacpp_launcher" in cmd


def test_a_run_reads_its_own_engine_starts_and_no_log_of_the_last_hour_is_pruned(tmp_path, monkeypatch):
    """Two runs side by side (two test runs, a lab beside a test) each count their own engine starts, and one run's pruning never
    takes a log the other may still read."""
    from labs_lib.engines import base

    monkeypatch.setenv("LABS_CACHE_DIR", str(tmp_path))
    logs = tmp_path / "logs"
    logs.mkdir()
    for who, kind in (("a", "vllm"), ("b", "llamacpp"), ("a", "llamacpp")):
        monkeypatch.setenv(base.STARTED_BY_VARIABLE, who)
        base._record_start(logs, kind, 1.0, True)
    assert [r["kind"] for r in base.read_starts(0, by="a")] == ["vllm", "llamacpp"]
    assert [r["kind"] for r in base.read_starts(0)] == ["vllm", "llamacpp", "llamacpp"]
    old = time.time() - 2 * base.LOG_KEEP_S
    for i in range(5):
        (logs / f"{i}.log").write_text("an engine's log")
        if i < 3:  # three logs of yesterday's runs, two of runs still going
            os.utime(logs / f"{i}.log", (old - i, old - i))
    base._prune(logs, keep=1)
    assert sorted(p.name for p in logs.glob("*.log")) == ["3.log", "4.log"]


@pytest.mark.parametrize(
    "last_cell,expect",
    [
        ("print('done; engine left running on purpose')", "ok"),  # kernel shutdown at the end
        ("raise ValueError('a failed run')", "failed"),  # a failed run
        ("import time; time.sleep(600)", "failed"),  # a cell interrupted by the cell timeout
    ],
)
def test_no_engine_outlives_a_notebook_run(tmp_path, monkeypatch, own_tag, last_cell, expect):
    from labs_lib import runner

    monkeypatch.setattr(runner, "CELL_TIMEOUT_S", 20)
    nb = tmp_path / "99_engine_lifecycle.ipynb"
    write_notebook(
        nb,
        "from labs_lib.engines.llamacpp import LlamaCppEngine\nengine = LlamaCppEngine().start()\nprint(engine.pid)",
        last_cell,
    )
    result = runner.run_series([nb], out_dir=tmp_path / "out", progress=False)[0]
    assert result.status == expect
    assert not wait_until_gone(own_tag, 10, alive=launchers), "an engine outlived its notebook"
