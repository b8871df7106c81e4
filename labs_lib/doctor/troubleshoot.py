"""Lab 06's helpers: run a call that may fail, keep what the user would see and the diagnosis; the same failures
on vLLM; the doctor's reports as rows; the articles' connection claims judged."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from ..redact import redact
from .report import Report
from .rules import Diagnosis, diagnose, status_and_text

ERROR_CHARS = 1000  # what the user sees of a failure: a vLLM refusal (engines.vllm.REASON_CHARS) and its log's path

Classify = Callable[[int | None, str], str]  # (HTTP status or None, the words that came back) -> a failure's code


@dataclass
class Outcome:
    what: str
    ok: bool
    result: object = None
    error_type: str | None = None  # the exception's class, as a traceback would name it
    error: str | None = None  # its message (keys masked)
    diagnosis: Diagnosis | None = None
    elapsed_s: float = 0.0  # how long the user waited for the answer or the error
    status: int | None = None  # the HTTP status that came back (None: no HTTP answer)
    words: str = ""  # what came back in words: the error body, or the exception chain (keys masked)

    def row(self, classify: Classify | None = None) -> dict:
        """The call as a row: what the user saw, then (given `classify`) the name it gives the failure, then the
        doctor's code, cause and fix."""
        d = self.diagnosis
        named = {"named by classify": classify(self.status, self.words) if classify and not self.ok else ""}
        return {
            "what": self.what,
            "outcome": "ok" if self.ok else self.error_type,
            "status": self.status or "",
            "what the user sees": "" if self.ok else self.error,
            **(named if classify else {}),
            "doctor's code": d.code if d else "",
            "cause": d.cause if d else "",
            "fix": d.fix if d else "",
            "seconds": round(self.elapsed_s, 3),
        }


def attempt(what: str, call: Callable[[], object]) -> Outcome:
    """Run `call`; a failure is caught, kept and diagnosed (a notebook cell must not die on it)."""
    start = time.perf_counter()
    try:
        result = call()
        return Outcome(what, True, result, elapsed_s=time.perf_counter() - start)
    except Exception as exc:  # every failure the labs demonstrate is data, never a crash
        cls = type(exc)
        status, words = status_and_text(exc)
        return Outcome(
            what,
            False,
            None,
            f"{cls.__module__}.{cls.__qualname__}",
            textwrap.shorten(redact(exc), ERROR_CHARS, placeholder=" …"),  # whole words: vLLM's suggested fix comes last
            diagnose(exc),
            time.perf_counter() - start,
            status,
            redact(words),
        )


def fix_it(what: str, snippet: Callable[[], object], classify: Classify) -> Outcome:
    """Run a client snippet as the participant left it: its reply once it works; else what its user sees, the name
    `classify` gives the failure, and the doctor's cause and fix. Edit the snippet and run both cells again."""
    o = attempt(what, snippet)
    if o.ok:
        print(f"{what}: works: the reply is {o.result!r}")
        return o
    print(f"{what}: fails: {o.error_type}: {o.error}")
    named = o.row(classify)["named by classify"]
    whose = "your" if classify.__module__ == "__main__" else "the library's"  # as cores.whose says it
    print(f"  {whose} classify names it {named!r}" + (f"; the doctor says {o.diagnosis}" if o.diagnosis else ""))
    return o


def table(outcomes: list[Outcome], classify: Classify | None = None) -> pd.DataFrame:
    """A row per call (Outcome.row); with `classify` (lab 06's participant's, once checked) each failure is named by
    it before the doctor's diagnosis."""
    return pd.DataFrame([o.row(classify) for o in outcomes])


def time_to_error_figure(outcomes: list[Outcome]):
    """How long each call took to come back, failure or not: some fail fast, a timeout costs the whole timeout."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.35 * len(outcomes) + 1.2))
    names = [o.what for o in outcomes]
    ax.barh(names, [max(o.elapsed_s * 1000, 0.1) for o in outcomes], color=["C2" if o.ok else "C3" for o in outcomes])
    for y, o in enumerate(outcomes):
        ax.text(
            max(o.elapsed_s * 1000, 0.1),
            y,
            f" {o.elapsed_s * 1000:,.0f} ms" + ("" if o.ok or o.diagnosis is None else f"  {o.diagnosis.code}"),
            va="center",
            fontsize=8,
        )
    ax.set(
        xscale="log", xlabel="ms until the answer or the error (log scale)", title="How long each failure takes to reach the user"
    )
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def unauthorized_body(base_url: str, model: str | None, wrong_key: str, timeout_s: float = 15.0) -> tuple[int | None, str]:
    """What a server answers to a chat request with a wrong key: (HTTP status, its body in one line, keys masked,
    cut to 300 characters), or (None, the transport error) when it cannot be reached."""
    import httpx

    try:
        resp = _post_chat(base_url.rstrip("/"), {"Authorization": f"Bearer {wrong_key}"}, model or "any", "Hi", 1, timeout_s)
    except httpx.HTTPError as exc:
        return None, redact(f"{type(exc).__name__}: {exc}")[:300]
    return resp.status_code, " ".join(redact(resp.text).split())[:300]


def sdk_without_a_key() -> str:
    """What the OpenAI SDK says to a client made with no key and none in the environment: why examples for keyless
    local servers pass a placeholder ("EMPTY", "none") at all. The SDK's key variables are hidden for the call only."""
    import os

    import openai

    saved = {name: os.environ.pop(name) for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY") if name in os.environ}
    try:
        openai.OpenAI(base_url="http://127.0.0.1:1/v1", api_key=None)
        return "accepted (no key needed)"
    except openai.OpenAIError as exc:
        return str(exc)
    finally:
        os.environ.update(saved)


def first_finding(report: Report) -> dict:
    """A doctor's report in one row: its verdict, and its first failing check (else first warning) with cause and fix."""
    first = report.first_failure or next((c for c in report.checks if c.status == "warn"), None)
    return {
        "verdict": "ok" if report.ok else "fail",
        "first finding": first.name if first else "-",
        "cause": first.cause if first else "",
        "fix": first.fix if first else "",
    }


def reports_table(reports: dict[str, Report]) -> pd.DataFrame:
    """One row per setup the doctor examined (section 11)."""
    return pd.DataFrame([{"setup": name, **first_finding(report)} for name, report in reports.items()])


def _post_chat(url: str, headers: dict[str, str], model: str | None, content: str, max_tokens: int, timeout_s: float = 120):
    """One unstreamed chat request to `url`/chat/completions, as a plain client sends it: the response, whatever its
    status (a transport failure raises httpx's error)."""
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    return httpx.post(url + "/chat/completions", headers=headers, timeout=timeout_s, json=body)


# each request of the comparison, and the vLLM call of vllm_failures() that sends the same one
SAME_ON_VLLM = {
    "unknown model": "vLLM: unknown model name",
    "no /v1": "vLLM: base URL without /v1",
    "max_tokens": "vLLM: max_tokens beyond the context",
}


def lenient_and_strict(
    endpoint, ctx_tokens: int, llama_401: str, vllm_bodies: dict, vllm_outcomes: list[Outcome] | None = None
) -> pd.DataFrame:
    """The same requests to the embedded llama.cpp (`endpoint`, a context of `ctx_tokens`), measured, beside vLLM's
    answers: measured by `vllm_outcomes` (vllm_failures(), where vLLM is installed), else its recorded bodies
    (`vllm_bodies`, data/vllm_errors_0.33.0.json), else "needs vLLM". The wrong key is always the recorded 401: the
    vLLM of vllm_failures() checks no key."""
    headers = endpoint.headers()
    unknown = _post_chat(endpoint.base_url, headers, "gpt-9", "Hi", 2)
    no_v1 = _post_chat(endpoint.root_url, headers, endpoint.model, "Hi", 2)
    # a prompt that nearly fills the context, so the clamped generation is short
    huge = _post_chat(endpoint.base_url, headers, endpoint.model, "word " * (ctx_tokens - 60), 10 * ctx_tokens)
    huge_said = f"HTTP {huge.status_code}"
    if huge.status_code == 200:
        huge_said += f", finish_reason {huge.json()['choices'][0]['finish_reason']!r}"
    on_vllm = {o.what: o for o in vllm_outcomes or []}

    def vllm_said(request: str, recorded: str | None) -> str:
        o = on_vllm.get(SAME_ON_VLLM[request])
        if o is not None:
            return f"measured: served ({o.result})" if o.ok else f"measured: HTTP {o.status} {o.words[:120]}"
        return f"recorded: {recorded}" if recorded else "needs vLLM (make setup-vllm) to measure"

    rows = [
        (
            "unknown model 'gpt-9'",
            f"HTTP {unknown.status_code}, served {unknown.json().get('model')!r}",
            vllm_said("unknown model", f"HTTP 404 {json.dumps(vllm_bodies['model_not_found_404'])}"),
        ),
        ("POST /chat/completions (no /v1)", f"HTTP {no_v1.status_code}", vllm_said("no /v1", None)),
        (f"max_tokens = {10 * ctx_tokens} (beyond the context)", huge_said, vllm_said("max_tokens", None)),
        ("wrong key", f"HTTP 401 {llama_401[:60]}", f"recorded: HTTP 401 {json.dumps(vllm_bodies['unauthorized_401'])}"),
    ]
    return pd.DataFrame(rows, columns=["request", "llama.cpp (measured)", "vLLM"])


def vllm_failures() -> list[Outcome]:
    """The failures of section 10 produced on vLLM itself (needs vLLM installed; two starts, the first refused):
    a KV pool too small for one request of max_model_len, the fix its message suggests, an unknown model, a base
    URL without /v1, max_tokens past max_model_len, then the right request with the key "none" and with seed 001's "EMPTY" (no --api-key given)."""
    import openai
    from openai.types.chat import ChatCompletionMessageParam

    from ..engines import EngineConfig, make_engine

    refused = attempt(
        "vLLM: 0.02 GiB of KV for max_model_len 32768",
        lambda: make_engine("vllm", EngineConfig(max_model_len=32768, kv_cache_gib=0.02)).start(),
    )
    with make_engine("vllm", EngineConfig(max_model_len=512, kv_cache_gib=0.02)) as v:

        def chat(base_url: str, key: str = "none", model: str = v.model_id, max_tokens: int = 2):
            client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
            hi: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
            answer = client.chat.completions.create(model=model, messages=hi, max_tokens=max_tokens)
            return answer.choices[0].finish_reason

        return [
            refused,
            attempt("vLLM: the same pool, max_model_len 512", lambda: v.allocation_lines()[0]),
            attempt(SAME_ON_VLLM["unknown model"], lambda: chat(v.base_url, model="gpt-9")),
            attempt(SAME_ON_VLLM["no /v1"], lambda: chat(v.root_url)),
            attempt(SAME_ON_VLLM["max_tokens"], lambda: chat(v.base_url, max_tokens=10 * 512)),
            attempt("vLLM: the right URL and model (api_key 'none')", lambda: chat(v.base_url)),
            attempt("vLLM: api_key 'EMPTY', as seed 001 writes it", lambda: chat(v.base_url, key="EMPTY")),
        ]


def _taotoken_401(wrong_key: str) -> tuple[str, bool | None, str]:
    """TaoToken's answer to a wrong key, asked only where TAOTOKEN_API_KEY is set (never that key: `wrong_key`)."""
    from ..endpoints import resolve
    from ..keys import read_key

    if not read_key("TAOTOKEN_API_KEY"):
        return "not testable here", None, "needs TaoToken: set TAOTOKEN_API_KEY (a wrong key is what gets sent)"
    remote = resolve("taotoken")
    status, body = unauthorized_body(remote.base_url, remote.model, wrong_key)
    holds = None if status is None else bool(status == 401 and "Invalid API key" in body)
    return body, holds, f"TaoToken answered HTTP {status}" if status else "TaoToken could not be reached"


def sdk_url(base_url: str, path: str = "/chat/completions") -> str:
    """The URL the installed OpenAI SDK sends a request to, from its own code (the client's _prepare_url)."""
    import openai

    return str(openai.OpenAI(api_key="unused", base_url=base_url)._prepare_url(path))


def connection_article_checks(
    wrong_key: str,
    llama_401: str,
    vllm_401: dict,
    vllm_outcomes: list[Outcome],
    outcomes: list[Outcome] | None = None,
    finish_reason: str | None = None,
) -> pd.DataFrame:
    """The articles' claims about base URLs, keys, the 401 body and the failures this lab reproduces, judged by
    this lab's runs (`llama_401`: what llama.cpp said to a wrong key; `vllm_outcomes`: vllm_failures(), empty where
    vLLM is not installed; `outcomes`: sections 2-8's calls, by their `what`; `finish_reason`: section 5's reply's,
    cut by max_tokens) and by the installed SDK's own code."""
    from ..claims import row

    body, holds, why = _taotoken_401(wrong_key)
    served = {o.what[6:]: o.ok for o in vllm_outcomes if "api_key" in o.what}
    any_key = bool(served) and all(served.values())
    keys_seen = "; ".join(f"{what}: {'served' if ok else 'refused'}" for what, ok in served.items()) or "not testable here"
    api, v1 = sdk_url("https://taotoken.net/api"), sdk_url("https://taotoken.net/api/v1")
    documented = "https://taotoken.net/api/v1/chat/completions"  # the full path seed 000 itself gives
    return pd.DataFrame(
        [
            row(
                "s000-base-url-api",
                f"the SDK would call {api}",
                "URL",
                api == documented,
                f"the installed OpenAI SDK joins its base_url and /chat/completions, nothing more; the article's own full "
                f"path is {documented}: base_url must end in /v1",
            ),
            row(
                "s001-base-url-v1",
                v1,
                "URL",
                v1 == documented,
                "the installed SDK's URL for this base_url, against the full path the articles give (TaoToken's own docs not "
                "checked here)",
            ),
            row(
                "s000-401-body",
                body,
                "body",
                holds,
                f"{why}; the local servers word theirs differently (llama.cpp: {llama_401[:60]}; vLLM: "
                f"{json.dumps(vllm_401)[:80]}): read the status code, not the text",
            ),
            row(
                "s001-api-key-empty",
                keys_seen,
                "keys",
                next((ok for what, ok in served.items() if "'EMPTY'" in what), None),
                "a vLLM started without --api-key checks no key: EMPTY is served like any other. The placeholder is there "
                f"for the SDK, which refuses to build a client without a key: {sdk_without_a_key()[:70]}"
                if served
                else "needs vLLM (make setup-vllm): section 10's vLLM part did not run",
            ),
            row(
                "s001-401-not-empty",
                keys_seen,
                "keys",
                False if any_key else None,
                "a vLLM started without --api-key served every key here, so a 401 from it never means 'not EMPTY'; "
                f"started with one (VLLM_API_KEY), it refuses EMPTY like any wrong key ({json.dumps(vllm_401)}, "
                "recorded): a 401 means the key is not the server's"
                if any_key
                else "needs vLLM (make setup-vllm): section 10's vLLM part did not run",
            ),
            *failure_rows({o.what: o for o in outcomes or []}, finish_reason),
            _wrong_path_row(next((o for o in vllm_outcomes if o.what == SAME_ON_VLLM["no /v1"]), None)),
        ]
    )


def _wrong_path_row(no_v1: Outcome | None) -> dict:
    """Seed 000's "a wrong base-URL path is a cause of the connection error", against vLLM's answer to a base URL
    without /v1 (section 10)."""
    from ..claims import row

    answered = bool(no_v1 and not no_v1.ok and no_v1.status is not None)
    return row(
        "s000-wrong-path-connection-error",
        f"HTTP {no_v1.status}: {no_v1.error_type}" if answered and no_v1 else _seen(no_v1),
        "vLLM, base URL without /v1",
        False if answered else None,
        "a server that is up answers a wrong path (vLLM: 404; llama.cpp serves /chat/completions without /v1, section "
        "10): the request reached it, so it is never a connection error, which means nothing answered"
        if answered
        else "needs vLLM (make setup-vllm): section 10's vLLM part did not run",
    )


def _seen(o: Outcome | None) -> str:
    return f"{o.error_type}: {o.error}"[:120] if o and not o.ok else "succeeded" if o else "not reproduced in this run"


def failure_rows(seen: dict[str, Outcome], finish_reason: str | None) -> list[dict]:
    """The articles' troubleshooting statements against the failures reproduced here (`seen`, by Outcome.what: lab
    06's sections 2-7): what the user sees, and what it is said to mean."""
    from ..claims import row

    dead, proxied = seen.get("dead port"), seen.get("HTTP_PROXY set to a closed port")
    reading = {k: seen.get(k) for k in ("choices of an error body", "choices of the usage-only chunk", "choices of None")}
    as_json = seen.get("resp.json() on a stream")
    kinds = {k: o.error_type.rsplit(".", 1)[-1] for k, o in reading.items() if o and not o.ok and o.error_type}
    nonetype = reading["choices of None"]
    return [
        row(
            "s000-refused-message",
            _seen(dead),
            "the exception at a closed port",
            bool(dead.error_type == "openai.APIConnectionError" and "Connection error" in str(dead.error)) if dead else None,
            "the SDK wraps httpx's ConnectError ([Errno 111] Connection refused, in its chain) in APIConnectionError",
        ),
        *_connection_rows(dead, proxied),
        row(
            "s000-choices-errors",
            ", ".join(f"{k}: {v}" for k, v in kinds.items()) or "not reproduced",
            "exceptions",
            {"KeyError", "IndexError"} <= set(kinds.values()) if kinds else None,
            "an error body read as a success raises KeyError: 'choices'; a usage-only stream chunk (choices == []) "
            "IndexError; a swallowed exception a third kind",
        ),
        *(
            row(
                cid,
                f"{sum(v == 'KeyError' for v in kinds.values())} of {len(kinds)} reproduced ways is an error body"
                if kinds
                else "not reproduced",
                "",
                None if len(kinds) > 1 else (True if kinds else None),
                "depends: an error body without choices is one way; a usage-only stream chunk and a helper that returns "
                "None on failure are others, and the SDK itself raises before any choices are read (an APIStatusError)",
            )
            for cid in ("s000-choices-cause", "s003-choices-shape")
        ),
        row(
            "s001-nonetype-choices",
            _seen(nonetype),
            "",
            # it holds only if an unexpected chunk is what raises it; reproduced, it is the None a helper returned
            kinds.get("choices of the usage-only chunk") == "AttributeError" if nonetype and len(kinds) > 1 else None,
            "that message comes from reading .choices of None, which a helper returns when it swallows an exception; an "
            "unexpected chunk raises IndexError here, and a truncated reply raises nothing (finish_reason says length)",
        ),
        row(
            "s002-keyerror-choices",
            _seen(reading["choices of an error body"]),
            "",
            kinds.get("choices of an error body") == "KeyError" if kinds else None,
            "the body of a refused request is an error object ({'error': ...}), with no choices",
        ),
        row(
            "s000-stream-not-json",
            _seen(as_json),
            "",
            bool(as_json and not as_json.ok) if as_json else None,
            "a streamed body is lines of 'data: {...}' events, not one JSON document: iterate the events",
        ),
        row(
            "s000-finish-length",
            finish_reason or "not measured",
            "finish_reason with max_tokens=5",
            finish_reason == "length" if finish_reason else None,
            "a reply cut by max_tokens ends with finish_reason 'length' (a finished one 'stop')",
        ),
    ]


def _connection_rows(dead: Outcome | None, proxied: Outcome | None) -> list[dict]:
    """The articles' readings of a refused connection (two causes) and of a proxy that is not running, against the
    closed port and the proxy variable lab 06 reproduced."""
    from ..claims import row

    refused_same = bool(dead and proxied and not dead.ok and dead.error_type == proxied.error_type)
    return [
        *(
            row(
                cid,
                f"closed port: {_seen(dead)[:60]}; proxy variable to a closed port: {_seen(proxied)[:60]}"
                if dead or proxied
                else "not reproduced in this run",
                "",
                None if refused_same else (True if dead and proxied else None),
                "depends: a proxy variable pointing at a closed port raises the same error with the server up and the "
                "port right (section 3); only the environment tells them apart"
                if refused_same
                else "the two causes were not both reproduced, or they differ here",
            )
            for cid in ("s001-refused-cause", "s002-refused-cause")
        ),
        *(
            row(
                cid,
                _seen(proxied),
                "with HTTP_PROXY to a closed port",
                bool(proxied.error_type == "openai.APIConnectionError")
                if proxied and not proxied.ok
                else (False if proxied else None),
                "the SDK's httpx client reads HTTP_PROXY/HTTPS_PROXY/ALL_PROXY from the environment and sends every request "
                "to that proxy, a local server's included unless NO_PROXY covers it; a proxy that is not running refuses",
            )
            for cid in ("s000-proxy-not-running", "s003-proxy-not-running")
        ),
    ]
