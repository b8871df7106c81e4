"""Secrets never leak: canary keys through bench, sweep and doctor (the notebooks are covered by
test_notebooks.py), on success and on failure; every printed line, results file and engine log is
searched for them and for any unmasked sk- string. Keys of every shape (sk-, bare hex, a short key
with another provider's prefix, a whole "Bearer …" value) pass a gateway that echoes credentials."""

import json
import secrets
import time

import pytest
from conftest import DOCTOR_TIMEOUT, fake_key, files_changed_since, find_leaks, make_canaries, run_cli
from fault_proxy import FaultProxy

from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.paths import cache_dir


@pytest.fixture(scope="module")
def keyed(starts_engine):
    """An embedded engine that requires the VLLM_API_KEY canary, plus the canaries and a start time."""
    keys = make_canaries()
    started = time.time()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in keys.items():
            mp.setenv(name, value)
        with LlamaCppEngine(EngineConfig(ctx=1024, parallel=2, api_key_env="VLLM_API_KEY")) as engine:
            mp.setenv("TAOTOKEN_BASE_URL", engine.base_url)  # TaoToken's name, this engine's address: a wrong key
            yield keys, engine, started


def assert_clean(keys, *texts):
    for text in texts:
        assert not find_leaks(text, keys), find_leaks(text, keys)


def test_the_leak_search_finds_what_it_looks_for():
    keys = make_canaries()
    assert find_leaks(f"Authorization: Bearer {keys['VLLM_API_KEY']}", keys) == [
        "canary VLLM_API_KEY",
        f"unmasked key-like string {keys['VLLM_API_KEY']!r}",
    ]
    assert find_leaks("key sk-…a1b2 (masked)", keys) == []
    stray = fake_key("proj-")
    assert find_leaks(stray, {}) == [f"unmasked key-like string {stray!r}"]


def test_bench_right_and_wrong_key(keyed, tmp_path):
    keys, engine, _ = keyed
    good = run_cli(
        "bench",
        "--base-url",
        engine.base_url,
        "--api-key-env",
        "VLLM_API_KEY",
        "--concurrency",
        "1,2",
        "--requests",
        "2",
        "--max-tokens",
        "4",
        "--prompt-tokens",
        "16",
        "--out",
        str(tmp_path / "good.json"),
    )
    assert good.returncode == 0, good.stderr
    wrong = run_cli(
        "bench",
        "--endpoint",
        "taotoken",
        "--model",
        engine.model_id,
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--max-tokens",
        "4",
        "--prompt-tokens",
        "16",
        "--out",
        str(tmp_path / "wrong.json"),
        "--json",
    )
    assert wrong.returncode == 1 and "401" in wrong.stdout + wrong.stderr
    saved = [p.read_text() for p in tmp_path.iterdir()]
    assert len(saved) >= 4  # a summary JSON and a per-request CSV for each run
    assert_clean(keys, good.stdout, good.stderr, wrong.stdout, wrong.stderr, *saved)


def test_sweep_with_a_keyed_engine(keyed, tmp_path):
    keys, _, _ = keyed
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "name: keyed\nengine: llamacpp\nbase: {ctx: 512, api_key_env: LAB06_API_KEY}\naxes: {parallel: [1]}\n"
        "workloads: [{name: tiny, concurrency: [1], requests: 2, prompt_tokens: 16, max_tokens: 4}]\n"
    )
    out = tmp_path / "rows.jsonl"
    done = run_cli("sweep", "--grid", str(grid), "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(r["status"] == "ok" for r in rows)  # the key worked, so it was really sent
    assert_clean(keys, done.stdout, done.stderr, out.read_text())


def test_doctor_right_wrong_and_config_file(keyed, tmp_path):
    keys, engine, _ = keyed
    right = run_cli(
        "doctor",
        "--base-url",
        engine.base_url,
        "--api-key-env",
        "VLLM_API_KEY",
        "--model",
        engine.model_id,
        *DOCTOR_TIMEOUT,
        "--json",
    )
    assert right.returncode == 0, right.stdout
    wrong = run_cli(
        "doctor", "--base-url", engine.base_url, "--api-key-env", "TAOTOKEN_API_KEY", "--model", engine.model_id, *DOCTOR_TIMEOUT
    )
    assert wrong.returncode == 1 and "auth" in wrong.stdout.lower()
    # a config file with the key pasted in (the articles' way): reported masked, never echoed
    config = tmp_path / "client.json"
    config.write_text(json.dumps({"base_url": engine.base_url, "api_key": keys["LAB06_API_KEY"], "model": engine.model_id}))
    pasted = run_cli("doctor", "--config", str(config), "--json")
    assert pasted.returncode in (0, 1)
    assert_clean(keys, right.stdout, right.stderr, wrong.stdout, wrong.stderr, pasted.stdout, pasted.stderr)


def test_no_engine_log_holds_a_canary(keyed):
    """Last in this file: every log written while the tests above ran, the keyed engine's included."""
    keys, engine, started = keyed
    logs = files_changed_since(cache_dir() / "logs", started)
    assert logs
    for log in logs:
        assert_clean(keys, log.read_text(errors="replace"))
    assert_clean(keys, engine.log_text())


KEY_FORMS = {  # made at run time; the engine requires the bare token, the client's variable holds the form
    "sk-prefixed": lambda: fake_key("form"),
    "bare hex": lambda: secrets.token_hex(20),
    "another provider's prefix, short": lambda: "gsk_" + secrets.token_hex(8),
    "a whole 'Bearer …' value": lambda: "Bearer " + secrets.token_hex(16),
}


def bare(value: str) -> str:
    return value.removeprefix("Bearer ")


@pytest.mark.parametrize("form", KEY_FORMS)
def test_keys_of_every_form_are_never_shown_even_when_a_gateway_echoes_them(form, tmp_path, monkeypatch, starts_engine):
    """bench and doctor through a gateway that quotes back the credentials it received: the right key, a
    wrong key of the same form, and a key pasted into a client config; no output, file or log shows one."""
    right, wrong = KEY_FORMS[form](), KEY_FORMS[form]()
    monkeypatch.setenv("FORM_ENGINE_KEY", bare(right))
    monkeypatch.setenv("FORM_RIGHT_KEY", right)
    monkeypatch.setenv("FORM_WRONG_KEY", wrong)
    canaries = {"right": bare(right), "wrong": bare(wrong)}
    started = time.time()
    with LlamaCppEngine(EngineConfig(ctx=512, parallel=1, api_key_env="FORM_ENGINE_KEY")) as engine:
        with FaultProxy(engine.port, "echo_auth") as gateway:
            common = ["--base-url", gateway.base_url, "--model", engine.model_id]
            doctor = ["doctor", *common, *DOCTOR_TIMEOUT]
            shape = ["--concurrency", "1", "--requests", "1", "--max-tokens", "2", "--prompt-tokens", "8"]
            runs = {
                "bench right": run_cli(
                    "bench", *common, "--api-key-env", "FORM_RIGHT_KEY", *shape, "--out", str(tmp_path / "r.json")
                ),
                "bench wrong": run_cli(
                    "bench", *common, "--api-key-env", "FORM_WRONG_KEY", *shape, "--out", str(tmp_path / "w.json")
                ),
                "doctor wrong": run_cli(*doctor, "--api-key-env", "FORM_WRONG_KEY"),
                "doctor wrong json": run_cli(*doctor, "--api-key-env", "FORM_WRONG_KEY", "--json"),
            }
            config = tmp_path / "client.json"
            config.write_text(json.dumps({"base_url": gateway.base_url, "api_key": wrong, "model": engine.model_id}))
            runs["doctor config"] = run_cli("doctor", "--config", str(config), "--json")
            echoed = gateway.echoed
        engine_log = engine.log_text()
    # the gateway really quoted the wrong key back: the test can fail
    assert any(canaries["wrong"] in body for body in echoed), echoed
    bearer = form.startswith("a whole")  # sent as "Bearer Bearer …", as the OpenAI SDK would: refused, and diagnosed
    assert runs["bench right"].returncode == (1 if bearer else 0), runs["bench right"].stdout
    assert runs["bench wrong"].returncode == 1 and runs["doctor wrong"].returncode == 1
    if bearer:
        assert "'Bearer ' prefix" in runs["doctor wrong"].stdout
    saved = [p.read_text() for p in tmp_path.iterdir() if p.suffix in (".json", ".csv") and p.name != "client.json"]
    assert saved
    logs = [p.read_text(errors="replace") for p in files_changed_since(cache_dir() / "logs", started)]
    for name, done in runs.items():
        assert not find_leaks(done.stdout + done.stderr, canaries), (name, find_leaks(done.stdout + done.stderr, canaries))
    assert_clean(canaries, *saved, *logs, engine_log)
