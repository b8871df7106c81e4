"""The doctor and diagnose(), each verdict tested against the real failure (real engine, real SDK exceptions)."""

import json
import os
import re
import subprocess
import sys
import time

import httpx
import openai
import pytest
from conftest import DOCTOR_TIMEOUT, REPO, assert_one_line_error, fake_key, run_cli

from labs_lib.doctor import check_config, diagnose, run_doctor
from labs_lib.doctor.troubleshoot import attempt
from labs_lib.endpoints import Endpoint, endpoint_for
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.paths import DATA_DIR

SLOW_S = 300.0  # bounds a hang; a busy 2-core machine can take many seconds for one short answer

KEY = fake_key("doctor-canary-")


@pytest.fixture(scope="module")
def engine(starts_engine):
    os.environ["LABS_DOCTOR_KEY"] = KEY
    with LlamaCppEngine(EngineConfig(ctx=1024, api_key_env="LABS_DOCTOR_KEY")) as e:
        yield e
    os.environ.pop("LABS_DOCTOR_KEY", None)


def client(e, **kw):
    return openai.OpenAI(**{"base_url": e.base_url, "api_key": KEY, "max_retries": 0, **kw})


def chat(c, model="gemma-3-270m", **kw):
    return c.chat.completions.create(**{"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, **kw})


# ---- the doctor's verdicts on broken setups (pytest marks: a real engine)

pytestmark = pytest.mark.engine


def test_healthy_setup_passes_every_check(engine):
    report = run_doctor(endpoint_for(engine), timeout_s=SLOW_S)
    assert report.ok and [c.status for c in report.checks].count("fail") == 0
    names = [c.name for c in report.checks]
    assert [n.split(" ")[0] for n in names] == ["1", "1", "1", "2", "2", "3", "4", "5", "6", "7", "8"]
    assert "exceed" in report.checks[-1].evidence  # the over-long request really was refused


def test_lab05_exercise_setups_fail_at_the_steps_the_lab_grades_by(engine):
    """Lab 06's exercises are graded by Report.first_failed_step on these two setups: a misspelled host name fails
    reachability (2) before any request; no key variable on a loopback address is let through configuration and
    the server's 401 fails authentication (4)."""
    ep = endpoint_for(engine)
    typo = run_doctor(Endpoint("x", ep.base_url.replace("127.0.0.1", "locahost", 1), ep.model, None), timeout_s=SLOW_S)
    assert "locahost" in typo.endpoint["base_url"] and typo.first_failed_step == 2, typo.text()
    assert typo.first_failure.name.startswith("2 reachability: DNS"), typo.text()
    no_key = run_doctor(Endpoint("x", ep.base_url, ep.model, None), timeout_s=SLOW_S)
    assert no_key.first_failed_step == 4 and no_key.first_failure.name == "4 authentication", no_key.text()
    assert run_doctor(ep, timeout_s=SLOW_S).first_failed_step is None


@pytest.mark.parametrize(
    "setup,check,cause",
    [
        ("wrong key", "4 authentication", "rejected the key"),
        ("unset key variable", "1 configuration: key", "holds no key"),
        ("quoted key", "1 configuration: key", "extra characters"),
        ("dead port", "2 reachability: TCP", "nothing is listening"),
        ("proxy", "2 reachability: TCP", "proxy"),
    ],
)
def test_doctor_names_the_real_cause(engine, monkeypatch, setup, check, cause):
    ep = endpoint_for(engine)
    env = {"wrong key": ("LABS_DOCTOR_WRONG", fake_key("wrong-")), "quoted key": ("LABS_DOCTOR_QUOTED", f'"{KEY}"')}
    if setup in env:
        name, value = env[setup]
        monkeypatch.setenv(name, value)
        ep = Endpoint("x", ep.base_url, ep.model, name)
    elif setup == "unset key variable":
        monkeypatch.delenv("LABS_DOCTOR_UNSET", raising=False)
        ep = Endpoint("x", ep.base_url, ep.model, "LABS_DOCTOR_UNSET")
    elif setup == "dead port":
        ep = Endpoint("x", "http://127.0.0.1:9/v1", ep.model, ep.api_key_env)
    elif setup == "proxy":
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
    report = run_doctor(ep, timeout_s=SLOW_S)
    failed = report.first_failure
    assert failed is not None and failed.name == check and cause in failed.cause, report.text()
    assert KEY not in json.dumps(report.to_dict())
    # ...and the real client call fails the same way
    key = os.environ.get(ep.api_key_env or "", "") or "none"
    outcome = attempt(setup, lambda: chat(openai.OpenAI(base_url=ep.base_url, api_key=key, max_retries=0)))
    assert not outcome.ok
    expected = {
        "wrong key": "auth",
        "unset key variable": "auth",
        "quoted key": "auth",
        "dead port": "connection_refused",
        "proxy": "proxy",
    }
    assert outcome.diagnosis.code == expected[setup]


def test_proxy_fixed_by_no_proxy(engine, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    report = run_doctor(endpoint_for(engine), timeout_s=SLOW_S)
    assert report.ok and "directly" in report.checks[2].evidence


def test_lenient_server_is_flagged_for_unknown_models_and_missing_v1(engine):
    ep = endpoint_for(engine)
    unknown = run_doctor(Endpoint("x", ep.base_url, "gpt-9", ep.api_key_env), timeout_s=SLOW_S)
    model = next(c for c in unknown.checks if c.name == "5 model")
    assert unknown.ok and model.status == "warn" and "ignores unknown model names" in model.cause and "gemma-3-270m" in model.fix
    no_v1 = run_doctor(Endpoint("x", ep.root_url, ep.model, ep.api_key_env), timeout_s=SLOW_S)
    assert no_v1.checks[1].status == "warn" and no_v1.checks[1].fix.endswith("/v1")


# ---- diagnose() on real exceptions


def test_diagnose_real_sdk_and_user_code_failures(engine):
    c = client(engine)
    cases = {
        "context_exceeded": lambda: chat(c, messages=[{"role": "user", "content": "word " * 1200}]),
        "timeout": lambda: chat(client(engine, timeout=0.05), max_tokens=100),
        "choices_missing": lambda: httpx.post(
            engine.base_url + "/chat/completions",
            headers={"Authorization": "Bearer sk-nope-000000"},
            json={"messages": [{"role": "user", "content": "Hi"}]},
            timeout=SLOW_S,
        ).json()["choices"],
        "choices_empty": lambda: [ch.choices[0] for ch in chat(c, stream=True, stream_options={"include_usage": True})],
        "stream_as_json": lambda: httpx.post(
            engine.base_url + "/chat/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": True},
            timeout=SLOW_S,
        ).json(),
    }
    for code, call in cases.items():
        outcome = attempt(code, call)
        assert not outcome.ok and outcome.diagnosis.code == code, (code, outcome)
    assert diagnose(chat(c, max_tokens=2).choices[0].finish_reason).code == "truncated"


def test_diagnose_engine_start_failures():
    outcome = attempt("q8_0 V", lambda: LlamaCppEngine(EngineConfig(kv_cache_dtype="q8_0", flash_attention=False)).start())
    assert outcome.diagnosis.code == "engine_flag" and "flash_attn" in outcome.error
    outcome = attempt("too big", lambda: LlamaCppEngine(EngineConfig(ctx=2_000_000, memory_limit_mib=2048)).start())
    assert outcome.diagnosis.code == "engine_memory"


# ---- the CLI: exit 0 against a healthy serve, 1 against a broken one, 2 on bad usage


def test_doctor_cli_against_serve():
    env = {**os.environ, "LABS_DOCTOR_CLI_KEY": KEY}
    serve = subprocess.Popen(
        [sys.executable, "-m", "labs_lib", "serve", "--api-key-env", "LABS_DOCTOR_CLI_KEY", "--ctx", "1024"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        base = None
        deadline = time.monotonic() + 60
        while base is None and time.monotonic() < deadline:
            if m := re.match(r"OpenAI base URL:\s+(\S+)", serve.stdout.readline()):
                base = m.group(1)
        healthy = run_cli(
            "doctor",
            "--base-url",
            base,
            "--api-key-env",
            "LABS_DOCTOR_CLI_KEY",
            "--model",
            "gemma-3-270m",
            *DOCTOR_TIMEOUT,
            "--json",
            env={"LABS_DOCTOR_CLI_KEY": KEY},
        )
        assert healthy.returncode == 0, healthy.stdout
        out = json.loads(healthy.stdout)
        assert out["ok"] is True and {c["name"] for c in out["checks"]} >= {"4 authentication", "7 streaming"}
        assert set(out["checks"][0]) == {"name", "status", "evidence", "cause", "fix"}
        broken = run_cli(
            "doctor",
            "--base-url",
            base,
            "--api-key-env",
            "LABS_DOCTOR_CLI_WRONG",
            *DOCTOR_TIMEOUT,
            env={"LABS_DOCTOR_CLI_WRONG": fake_key("wrong-")},
        )
        assert broken.returncode == 1 and "4 authentication" in broken.stdout
        assert KEY not in healthy.stdout + broken.stdout
    finally:
        serve.terminate()
        serve.wait(15)


@pytest.mark.parametrize(
    "args,needle",
    [
        ([], "--endpoint"),
        (["--endpoint", "local"], "local"),
        (["--base-url", "not a url"], "not a url"),
        (["--config", "/nonexistent/settings.json"], "settings.json"),
    ],
)
def test_doctor_bad_usage_exits_2(args, needle):
    assert_one_line_error(run_cli("doctor", *args), needle)


# ---- client configuration files


@pytest.mark.parametrize(
    "name,failing",
    [
        ("article_seed002_claude_settings.json", "format"),  # not Claude Code's format
        ("auth.json", "format"),  # base_url in Codex's auth.json
        ("article_seed002_client.json", "key"),  # placeholder key
        ("article_seed003_provider.toml", "key"),
        ("article_seed003_client.json", "key"),
        ("article_seed003_vscode_settings.json", "format"),  # no tool's format the doctor knows
    ],
)
def test_article_configs_fail_the_three_piece_check(name, failing):
    report = check_config(DATA_DIR / "client_configs" / name)
    assert not report.ok and report.first_failure.name == failing
    if name.startswith("article_seed00") and name.endswith((".json", ".toml")) and not ("claude" in name or "vscode" in name):
        assert next(c for c in report.checks if c.name == "base URL").status == "warn"  # no /v1


def test_documented_configs_pass(monkeypatch):
    monkeypatch.setenv("TAOTOKEN_API_KEY", fake_key("config-test-"))
    for name in ("documented_codex_config.toml", "documented_openai_client.json", "documented_claude_settings.json"):
        assert check_config(DATA_DIR / "client_configs" / name).ok, name


def test_oauth_api_key_conflicts(tmp_path):
    claude = tmp_path / "settings.json"
    claude.write_text(
        json.dumps(
            {
                "env": {
                    "ANTHROPIC_BASE_URL": "https://gw.example.com",
                    "ANTHROPIC_AUTH_TOKEN": "tok-aaaaaaaaaaaa",
                    "ANTHROPIC_API_KEY": "key-bbbbbbbbbbbb",
                }
            }
        )
    )
    conflict = next(c for c in check_config(claude).checks if c.name == "OAuth/API-key conflict")
    assert conflict.status == "warn" and "both" in conflict.evidence
    codex = tmp_path / "auth.json"
    codex.write_text(json.dumps({"OPENAI_API_KEY": "key-cccccccccccc", "tokens": {"id_token": "x", "access_token": "y"}}))
    conflict = next(c for c in check_config(codex).checks if c.name == "OAuth/API-key conflict")
    assert conflict.status == "warn" and "preferred_auth_method" in conflict.cause
    bad_wire = tmp_path / "config.toml"
    bad_wire.write_text(
        'model = "m"\nmodel_provider = "p"\n[model_providers.p]\nbase_url = "https://x.example.com/v1"\nenv_key = "X"\nwire_api = "chat"\n'
    )
    assert any(c.name == "wire_api" and c.status == "warn" for c in check_config(bad_wire).checks)


def test_config_file_errors(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert_one_line_error(run_cli("doctor", "--config", str(broken)), "broken.json")
    exit_code = run_cli("doctor", "--config", str(DATA_DIR / "client_configs" / "auth.json")).returncode
    assert exit_code == 1


def test_an_sdk_without_a_key_is_diagnosed_as_no_key_sent(monkeypatch):
    """The OpenAI SDK refuses to build a client without a key: a client-side failure, not a 401."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(openai.OpenAIError) as caught:
        openai.OpenAI(base_url="http://127.0.0.1:9/v1")
    assert diagnose(caught.value).code == "no_key"


def test_the_sdk_refuses_a_client_with_no_key_and_the_environment_is_restored(monkeypatch):
    """Why keyless local servers get a placeholder key: the SDK's own refusal, read with its key variables hidden."""
    from labs_lib.doctor.troubleshoot import sdk_without_a_key

    monkeypatch.setenv("OPENAI_API_KEY", "kept-for-the-test")
    said = sdk_without_a_key()
    assert "api_key" in said and "OPENAI_API_KEY" in said, said
    assert os.environ["OPENAI_API_KEY"] == "kept-for-the-test"


def test_a_report_becomes_one_row_naming_its_first_failure_else_its_first_warning():
    from labs_lib.doctor import Check, Report
    from labs_lib.doctor.troubleshoot import reports_table

    warn = Check("stream", "warn", "no usage chunk", cause="the server sends none", fix="count chunks")
    fail = Check("auth", "fail", "HTTP 401", cause="wrong key", fix="set the key")
    table = reports_table({"warned": Report({}, [warn]), "failed": Report({}, [warn, fail]), "healthy": Report({})})
    rows = table.set_index("setup").to_dict("index")
    assert rows["failed"]["first finding"] == "auth" and rows["failed"]["verdict"] == "fail"
    assert rows["warned"]["first finding"] == "stream" and rows["warned"]["fix"] == "count chunks"
    assert rows["healthy"] == {"verdict": "ok", "first finding": "-", "cause": "", "fix": ""}


def test_each_failure_is_named_by_the_participants_classify_before_the_doctor():
    import httpx

    from labs_lib.cores.lab06 import classify
    from labs_lib.doctor.troubleshoot import attempt, table

    refused = attempt("dead port", lambda: httpx.get("http://127.0.0.1:9/v1/models", timeout=30))
    body = attempt("an error body indexed", lambda: {"error": {"message": "x"}}["choices"])
    fine = attempt("fine", lambda: "ok")
    assert refused.status is None and "ConnectError" in refused.words
    rows = table([refused, body, fine], classify).to_dict("records")
    assert [r["named by classify"] for r in rows] == ["connection_refused", "unknown", ""]
    assert [r["doctor's code"] for r in rows] == ["connection_refused", "choices_missing", ""]
    assert list(rows[0]).index("named by classify") < list(rows[0]).index("doctor's code")
    assert "named by classify" not in table([refused]).columns  # without it, the doctor's table as before


@pytest.mark.parametrize("empty_served", [True, False])
def test_seed_001s_two_empty_key_sentences_are_judged_apart_from_what_vllm_served(empty_served, monkeypatch):
    """ "EMPTY is enough, the local service checks no key" holds where vLLM served EMPTY; "a 401 from a local vLLM
    usually means the key was not EMPTY" does not hold where vLLM served every key it was sent. Without vLLM's
    outcomes neither can be judged here."""
    from labs_lib.claims import claim
    from labs_lib.doctor.troubleshoot import Outcome, connection_article_checks

    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)
    outcomes = [
        Outcome("vLLM: the right URL and model (api_key 'none')", True),
        Outcome("vLLM: api_key 'EMPTY', as seed 001 writes it", empty_served),
    ]
    body = {"error": "Unauthorized"}
    table = connection_article_checks("sk-wrong", "Invalid API Key", body, outcomes).set_index("claim")
    assert table.loc[claim("s001-api-key-empty")["claim"], "verdict"] == ("holds" if empty_served else "does not hold")
    assert table.loc[claim("s001-401-not-empty")["claim"], "verdict"] == ("does not hold" if empty_served else "depends")
    assert "Missing credentials" in table.loc[claim("s001-api-key-empty")["claim"], "why"]  # the SDK's own words
    untested = connection_article_checks("sk-wrong", "Invalid API Key", body, []).set_index("claim")
    for claim_id in ("s001-api-key-empty", "s001-401-not-empty"):
        assert untested.loc[claim(claim_id)["claim"], "verdict"] == "cannot be checked here"  # vLLM did not run
        assert "needs vLLM" in untested.loc[claim(claim_id)["claim"], "why"]
    assert untested.loc[claim("s000-401-body")["claim"], "computed"] == "not testable here"  # only TaoToken can say


def _failure(what, error_type, error="x"):
    from labs_lib.doctor.troubleshoot import Outcome

    return Outcome(what, False, None, error_type, error)


def test_the_articles_readings_of_failures_follow_what_was_reproduced():
    """failure_rows judges the articles' troubleshooting sentences by the failures lab 06 reproduced: move what came
    back and the verdict moves (the inputs here are shaped as lab 06's own Outcomes)."""
    from labs_lib.doctor.troubleshoot import failure_rows

    as_seen = {
        o.what: o
        for o in (
            _failure("dead port", "openai.APIConnectionError", "Connection error."),
            _failure("HTTP_PROXY set to a closed port", "openai.APIConnectionError", "Connection error."),
            _failure("choices of an error body", "builtins.KeyError", "'choices'"),
            _failure("choices of the usage-only chunk", "builtins.IndexError", "list index out of range"),
            _failure("choices of None", "builtins.AttributeError", "'NoneType' object has no attribute 'choices'"),
            _failure("resp.json() on a stream", "json.decoder.JSONDecodeError", "Extra data"),
        )
    }
    v = {r["id"]: r["verdict"] for r in failure_rows(as_seen, "length")}
    assert v == {
        "s000-refused-message": "holds",
        "s001-refused-cause": "depends",  # the proxy gave the same error with the server up
        "s002-refused-cause": "depends",
        "s000-proxy-not-running": "holds",
        "s003-proxy-not-running": "holds",
        "s000-choices-errors": "holds",
        "s000-choices-cause": "depends",
        "s003-choices-shape": "depends",
        "s001-nonetype-choices": "does not hold",
        "s002-keyerror-choices": "holds",
        "s000-stream-not-json": "holds",
        "s000-finish-length": "holds",
    }
    other = dict(as_seen)
    other["dead port"] = _failure("dead port", "openai.APITimeoutError", "Request timed out.")
    other["choices of the usage-only chunk"] = _failure("choices of the usage-only chunk", "builtins.AttributeError")
    w = {r["id"]: r["verdict"] for r in failure_rows(other, "stop")}
    assert w["s000-refused-message"] == "does not hold" and w["s001-refused-cause"] == "holds"
    assert w["s001-nonetype-choices"] == "holds" and w["s000-finish-length"] == "does not hold"
    assert {r["verdict"] for r in failure_rows({}, None)} == {"cannot be checked here"}  # nothing reproduced
    other["HTTP_PROXY set to a closed port"] = _failure("HTTP_PROXY set to a closed port", "openai.APITimeoutError")
    assert {r["id"]: r["verdict"] for r in failure_rows(other, "stop")}["s003-proxy-not-running"] == "does not hold"


def test_a_wrong_path_is_judged_by_what_vllm_answered():
    """Seed 000 counts a wrong base-URL path among the causes of a connection error; vLLM's answer to a base URL
    without /v1 (lab 06 section 10) says whether the request reached the server."""
    from labs_lib.doctor.troubleshoot import Outcome, _wrong_path_row

    answered = Outcome("vLLM: base URL without /v1", False, None, "openai.NotFoundError", "Error code: 404", status=404)
    assert _wrong_path_row(answered)["verdict"] == "does not hold"
    unreached = Outcome("vLLM: base URL without /v1", False, None, "openai.APIConnectionError", "Connection error.")
    assert _wrong_path_row(unreached)["verdict"] == "depends"
    assert _wrong_path_row(None)["verdict"] == "cannot be checked here"  # section 10 did not run


def test_lab06s_snippets_fail_as_written_and_work_fixed(monkeypatch, capsys):
    """Lab 06's fix-it cells, run in the lab's own setup (its import, parameter and engine cells): each snippet as
    written fails as its user would see it, named by the doctor; its fix (cores.FIXES, what the runner fills in)
    works against the same engine."""
    from labs_lib import cores

    monkeypatch.setenv("LAB06_API_KEY", fake_key("lab06-"))
    cells = json.loads((REPO / "notebooks" / "06_troubleshooting.ipynb").read_text())["cells"]
    sources = ["".join(c["source"]) if c["cell_type"] == "code" else "" for c in cells]
    setup = next(i for i, s in enumerate(sources) if "stack = lab_stack()" in s)
    namespace: dict = {}
    for source in sources[: setup + 1]:  # imports, parameters, P, the engine with its key, client() and chat()
        exec(compile(source, "<cell>", "exec"), namespace)
    namespace["classify"] = cores.CORES["classify"].reference
    try:
        fix_its = [s for c, s in zip(cells, sources, strict=True) if cores.FIX_TAG in c["metadata"].get("tags", [])]
        assert sorted(cores.snippet_in(s) for s in fix_its) == sorted(cores.FIXES)
        expected = {"snippet_key": "auth", "snippet_stream": "delta_without_text", "snippet_long_document": "context_exceeded"}
        for source in fix_its:
            name = cores.snippet_in(source)
            exec(compile(source, "<cell>", "exec"), namespace)
            broken = namespace["fix_it"](name, namespace[name], namespace["classify"])
            assert not broken.ok and broken.diagnosis.code == expected[name], (name, broken)
            exec(compile(cores.FIXES[name], "<fix>", "exec"), namespace)
            fixed = namespace["fix_it"](name, namespace[name], namespace["classify"])
            assert fixed.ok and fixed.result, (name, fixed)
        assert f"{name}: works: the reply is" in capsys.readouterr().out
    finally:
        namespace["stack"].close()


def test_the_articles_gateway_requests_are_judged_on_what_a_server_answers(engine):
    """The requests seed 000 and 001 make of TaoToken, sent to the embedded engine (its root standing for
    https://taotoken.net): the verdicts follow what it answered, and the key never shows in what comes back."""
    from labs_lib.doctor.gateway_checks import GATEWAY_CLAIMS, answers_table, gateway_answers, gateway_rows

    answers = gateway_answers(engine.root_url, KEY, "gemma-3-270m")
    assert KEY not in repr(answers)
    shown = answers_table(answers)  # what lab 06 displays of TaoToken's answers, here the engine's
    assert list(shown["request"]) == list(answers) and list(shown["status"]) == [a.status for a in answers.values()]
    assert answers["no /api"].status == 200 and answers["no /api"].has_choices  # llama.cpp serves /v1/chat/completions
    assert answers["documented"].status == 404 and not answers["documented"].has_choices  # it has no /api prefix
    v = {r["id"]: r["verdict"] for r in gateway_rows(answers, "the embedded llama.cpp")}
    assert v["s000-no-api-404"] == "does not hold" and v["s000-curl-answers"] == "does not hold"
    assert v["s001-no-v1-404"] == ("holds" if answers["no /v1"].status == 404 else "does not hold")
    assert {r["verdict"] for r in gateway_rows(None)} == {"cannot be checked here"}
    assert [r["id"] for r in gateway_rows(None)] == list(GATEWAY_CLAIMS)


def test_every_401_cause_lab06_reproduces_is_a_401(engine):
    from labs_lib.doctor.gateway_checks import local_rows
    from labs_lib.doctor.troubleshoot import attempt

    c = client(engine)
    seen = {
        o.what: o
        for o in (
            attempt("wrong key", lambda: chat(client(engine, api_key="sk-wrong-0"))),
            attempt("no key sent", lambda: chat(c, extra_headers={"Authorization": openai.omit})),
            attempt("key without Bearer", lambda: chat(c, extra_headers={"Authorization": KEY})),
        )
    }
    assert seen["wrong key"].status == seen["no key sent"].status == 401
    assert seen["key without Bearer"].ok  # llama.cpp takes the bare key; vLLM's middleware would not
    bodies = json.loads((DATA_DIR / "vllm_errors_0.33.0.json").read_text())
    rows = {r["id"]: r for r in local_rows(seen, None, bodies)}
    assert rows["s000-401-causes"]["verdict"] == "depends"
    assert rows["s002-served-model-name"]["verdict"] == "holds" and "recorded" in rows["s002-served-model-name"]["unit"]
    seen.pop("key without Bearer")  # the two causes this server refuses: each a 401
    assert local_rows(seen, None, bodies)[0]["verdict"] == "holds"
    assert local_rows({}, None, bodies)[0]["verdict"] == "cannot be checked here"


def test_the_reference_classify_names_llamacpps_own_words_as_the_doctor_does():
    """Lab 06 runs on llama.cpp: its context error and its start-up failure were "unknown" to the reference classify
    (which knew vLLM's wording only), beside the doctor's context_exceeded and engine_memory."""
    from labs_lib.cores.lab06 import LLAMACPP_NO_MEMORY, LLAMACPP_TOO_LONG, classify

    too_long = diagnose({"error": {"message": LLAMACPP_TOO_LONG, "code": 400}}).code
    assert classify(400, LLAMACPP_TOO_LONG) == too_long == "context_exceeded"
    assert classify(None, LLAMACPP_NO_MEMORY) == diagnose(LLAMACPP_NO_MEMORY).code == "engine_memory"
