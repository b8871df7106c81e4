"""The timing harness and `bench` against the real embedded engine."""

import itertools
import json
import math
import re
import subprocess
import sys
import time

import pytest
from conftest import REPO, assert_one_line_error, fake_key, run_cli

from labs_lib.endpoints import Endpoint, endpoint_for, resolve
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.engines.metrics import delta, scrape, token_counts
from labs_lib.errors import BadInput
from labs_lib.load import run_blocking, run_load
from labs_lib.prompts import PromptFactory, engine_tokenizer
from labs_lib.timing import RequestSpec, measure

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engine(starts_engine):
    with LlamaCppEngine(EngineConfig(ctx=4096, parallel=4)) as e:
        yield e


def test_prompts_have_the_requested_token_length(engine):
    factory = PromptFactory(engine_tokenizer(engine.root_url), seed=3)
    for n in (16, 100):
        prompt = factory.prompt(n)
        ids = (
            __import__("httpx")
            .post(engine.root_url + "/tokenize", json={"content": prompt, "add_special": False})
            .json()["tokens"]
        )
        assert abs(len(ids) - n) <= 2  # the cut text re-tokenizes to within a token or two of n
    a, b = factory.prompts(2, 50)
    assert a != b


def test_role_chunk_is_not_ttft_on_the_real_engine(engine):
    rec, timer = measure(endpoint_for(engine), RequestSpec("Hello there", 8, ignore_eos=True), keep_trace=True)
    role_t = next(t for t, line in timer.trace if '"role":"assistant"' in line)
    content_t = next(t for t, line in timer.trace if '"content":"' in line and '"role"' not in line)
    assert rec.ttft_ms == pytest.approx(content_t * 1000) and role_t <= content_t
    assert rec.ttft_first_choice_ms == pytest.approx(role_t * 1000)  # vLLM's client's TTFT, recorded beside


def test_harness_token_counts_equal_the_engines_metrics(engine):
    ep = endpoint_for(engine)
    factory = PromptFactory(engine_tokenizer(engine.root_url), seed=1)
    specs = [RequestSpec(p, 16, ignore_eos=True) for p in factory.prompts(8, 40)]
    before = scrape(engine.root_url)
    result = run_blocking(run_load(ep, specs, concurrency=4, progress=False))
    counted = token_counts(delta(before, scrape(engine.root_url)), "llamacpp")
    ok = [r for r in result.records if r.ok]
    assert len(ok) == 8
    assert sum(r.output_tokens for r in ok) == counted["output_tokens"] == 8 * 16
    assert sum(r.prompt_tokens for r in ok) == counted["prompt_tokens"]


def test_the_articles_snippets_replayed_as_written(engine):
    """What the seeds receive: without stream_options the server sends the harness's stream less its usage-only
    chunk (so the streamed snippets are applied to that); seed 003's unstreamed request gets the whole answer as
    one line."""
    from labs_lib import experiments, naive
    from labs_lib.sse import chunk_kind

    ep = endpoint_for(engine)
    prompts = PromptFactory(engine_tokenizer(engine.root_url), seed=3).prompts(2, 32)
    traced = experiments.traced_requests(ep, prompts, 12, extra=engine.uncached_body)
    for (rec, timer), prompt in zip(traced, prompts, strict=True):
        assert rec.ok and rec.output_tokens == 12, rec.error
        plain, plain_timer = measure(
            ep, RequestSpec(prompt, 12, ignore_eos=True, include_usage=False, extra=engine.uncached_body), keep_trace=True
        )
        assert plain.ok and plain.tokens_estimated, plain.error
        kinds = [chunk_kind(line) for _, line in plain_timer.trace]
        assert kinds == [chunk_kind(line) for _, line in naive.as_the_seed_receives(timer.trace)]
        assert "usage" in [chunk_kind(line) for _, line in timer.trace] and "usage" not in kinds
    unstreamed = experiments.unstreamed_requests(ep, prompts, 12, extra=engine.uncached_body)
    for lines, _ in unstreamed:
        assert len(lines) == 1, lines  # one JSON body: the first line seed 003 times is the whole answer
        assert json.loads(lines[0][1])["usage"]["completion_tokens"] == 12
    table = experiments.naive_vs_harness(traced, unstreamed).set_index("method")
    assert table.loc["seed 003: unstreamed lines", "output_tokens"] == 1
    assert (
        table.loc["seed 002: data lines", "output_tokens"] > table.loc["harness (vllm bench serve definitions)", "output_tokens"]
    )


def test_open_loop_rate_is_poisson_and_seeded(engine):
    ep = endpoint_for(engine)
    specs = [RequestSpec(f"Count {i}", 2) for i in range(12)]
    result = run_blocking(run_load(ep, specs, rate=8.0, seed=7, progress=False))
    sent = sorted(r.sent_s for r in result.records)
    assert result.summary.completed == 12 and result.row()["request_rate"] == 8.0
    assert 0.5 < sent[-1] < 4.0  # 11 gaps of mean 1/8 s


def test_failures_are_records_not_exceptions(engine):
    dead = Endpoint("dead", "http://127.0.0.1:9/v1", "x")
    rec, _ = measure(dead, RequestSpec("hi", 2))
    assert not rec.ok and "ConnectError" in rec.error
    too_long = RequestSpec("word " * 3000, 2)
    rec, _ = measure(endpoint_for(engine), too_long)
    assert not rec.ok and rec.error.startswith("HTTP 400")


def test_saved_results_hold_no_key(tmp_path, monkeypatch):
    monkeypatch.setenv("LABS_HARNESS_KEY", fake_key("harness-canary-"))
    with LlamaCppEngine(EngineConfig(api_key_env="LABS_HARNESS_KEY")) as e:
        result = run_blocking(run_load(endpoint_for(e), [RequestSpec("hi", 2)], concurrency=1, progress=False))
        assert result.records[0].ok
        paths = result.save(tmp_path / "run")
    for path in paths:
        assert "canary" not in path.read_text()


def test_bench_cli_against_a_running_serve(tmp_path):
    serve = subprocess.Popen(
        [sys.executable, "-m", "labs_lib", "serve", "--parallel", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    try:
        base = None
        deadline = time.monotonic() + 60
        while base is None and time.monotonic() < deadline:
            line = serve.stdout.readline()
            if m := re.match(r"OpenAI base URL:\s+(\S+)", line):
                base = m.group(1)
        assert base
        out_file = tmp_path / "bench.json"
        proc = run_cli(
            "bench",
            "--base-url",
            base,
            "--concurrency",
            "1,2",
            "--requests",
            "4",
            "--prompt-tokens",
            "32",
            "--max-tokens",
            "8",
            "--repeats",
            "2",
            "--out",
            str(out_file),
            "--json",
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert [r["concurrency"] for r in out["results"]] == [1, 1, 2, 2]  # each level run twice
        for r in out["results"]:
            assert r["completed"] == 4 and r["failed"] == 0 and r["total_output_tokens"] == 32
            for key in ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p50_itl_ms"):
                assert r[key] > 0
        # per level: each metric over both runs, inside its interval from resampling whole runs
        assert [row["level"] for row in out["intervals"]] == ["c=1", "c=2"]
        for row in out["intervals"]:
            for point, low, high in (v for k, v in row.items() if k != "level"):
                assert low <= point <= high or math.isclose(point, low) or math.isclose(point, high), row
        assert json.loads(out_file.read_text())["results"] == out["results"]
        assert (tmp_path / "bench-c1-run1.csv").exists() and (tmp_path / "bench-c2-run2.csv").exists()
        # two system prompts of 64 tokens taken in turn before 32-token prompts: the server counts both parts
        args = ("--concurrency", "1", "--requests", "4", "--prompt-tokens", "32", "--max-tokens", "4", "--json")
        prefixed = run_cli("bench", "--base-url", base, *args, "--shared-prefix-tokens", "64", "--prefix-groups", "2")
        assert prefixed.returncode == 0, prefixed.stderr
        shown = json.loads(prefixed.stdout)
        assert (shown["settings"]["shared_prefix_tokens"], shown["settings"]["prefix_groups"]) == (64, 2)
        assert shown["results"][0]["completed"] == 4 and shown["results"][0]["total_input_tokens"] >= 4 * (64 + 32)
    finally:
        serve.terminate()
        serve.wait(15)


def test_bench_wrong_key_fails_every_request_and_exits_1(monkeypatch):
    monkeypatch.setenv("LABS_BENCH_SERVER_KEY", fake_key("right-key-"))
    wrong = fake_key("wrong-key-")
    with LlamaCppEngine(EngineConfig(api_key_env="LABS_BENCH_SERVER_KEY")) as e:
        proc = run_cli(
            "bench",
            "--base-url",
            e.base_url,
            "--model",
            e.model_id,
            "--api-key-env",
            "WRONG_KEY",
            "--requests",
            "2",
            "--json",
            env={"WRONG_KEY": wrong},
        )
    assert proc.returncode == 1 and "401" in proc.stderr
    assert wrong not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args,needles",
    [
        (["bench", "--endpoint", "nowhere"], ["nowhere", "taotoken"]),
        (["bench", "--base-url", "localhost:8000/v1"], ["localhost:8000/v1", "http"]),
        (["bench", "--base-url", "http://127.0.0.1:1/v1", "--api-key-env", "NOT_SET_VAR_XYZ"], ["NOT_SET_VAR_XYZ"]),
        (["bench", "--endpoint", "taotoken"], ["TAOTOKEN_API_KEY"]),
        (["bench", "--endpoint", "local", "--concurrency", "0"], ["--concurrency"]),
        (["bench", "--endpoint", "local", "--requests", "many"], ["many"]),
        (["bench"], ["--endpoint"]),
        (["bench", "--endpoint", "local", "--repeats", "0"], ["--repeats"]),
        (["bench", "--endpoint", "local", "--shared-prefix-tokens", "64", "--prefix-groups", "0"], ["--prefix-groups"]),
        (["bench", "--endpoint", "local", "--shared-prefix-tokens", "-5"], ["--shared-prefix-tokens", "-5"]),
    ],
)
def test_bench_bad_input(args, needles):
    env = {"TAOTOKEN_API_KEY": ""} if "taotoken" in args else None
    assert_one_line_error(run_cli(*args, env=env), *needles)


def test_endpoint_resolution():
    assert resolve("taotoken").base_url == "https://taotoken.net/api/v1"
    assert resolve("http://localhost:8000/v1/").base_url == "http://localhost:8000/v1"
    assert resolve("http://127.0.0.1:8000/v1").is_loopback and not resolve("https://taotoken.net/api/v1").is_loopback
    with pytest.raises(BadInput):
        resolve("ftp://x")


def test_a_conversation_grows_turn_by_turn_and_reads_its_history_from_the_cache(engine):
    """2 conversations of 3 turns (load.run_conversations): each turn's prompt holds the earlier turns and their
    answers, so the server reads more tokens each turn, and the history it has just seen is served from its cache."""
    from labs_lib.load import run_conversations

    factory = PromptFactory(engine_tokenizer(engine.root_url), seed=11)
    talks = [[RequestSpec(q, 16, ignore_eos=True) for q in c] for c in factory.conversations(2, 3, 40)]
    result = run_blocking(run_conversations(endpoint_for(engine), talks, concurrency=2, progress=False))
    assert result.summary.completed == 6 and result.settings["turns_not_sent"] == 0, result.summary.errors
    assert sorted(r.request_id for r in result.records) == list(range(6))  # one id per turn, none shared
    for c in range(2):
        turns = sorted((r for r in result.records if r.conversation == c), key=lambda r: r.turn)
        assert [r.turn for r in turns] == [0, 1, 2]
        # each turn reads the one before it whole (its prompt and 16-token answer) and then 40 new tokens
        for before, after in itertools.pairwise(turns):
            assert after.prompt_tokens >= before.prompt_tokens + 16 + 40, (before.prompt_tokens, after.prompt_tokens)
            assert (after.cached_tokens or 0) >= before.prompt_tokens * 0.8, (after.cached_tokens, before.prompt_tokens)
