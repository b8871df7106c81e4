"""The doctor: the checks a serving engineer runs, in order, each with its evidence, cause and fix.

1 configuration (key, base URL, proxy variables) -> 2 reachability (DNS, TCP, the proxy) ->
3 the service answers -> 4 authentication -> 5 the model exists -> 6 a tiny completion ->
7 a tiny stream -> 8 limits. A check that cannot run because an earlier one failed is "skipped".
Requests go out the way the OpenAI SDK sends them (environment proxies honoured), so the doctor sees
what the user's code sees.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import socket
import time
from urllib.parse import urlsplit

import httpx

from .. import sse
from ..endpoints import Endpoint
from ..keys import mask
from ..redact import redact
from .report import Check, Report
from .rules import RULES, diagnose, proxy_for


def _short(resp: httpx.Response, limit: int = 160) -> str:
    return f"HTTP {resp.status_code}: {redact(resp.text[:limit]).strip()}"


# ---------------------------------------------------------------- 1. configuration


def check_key(endpoint: Endpoint) -> Check:
    name = "1 configuration: key"
    var = endpoint.api_key_env
    if var is None:
        return Check(
            name,
            "ok" if endpoint.is_loopback else "warn",
            "no key variable configured: requests carry no Authorization header",
            "" if endpoint.is_loopback else "a remote service almost always needs a key",
            "" if endpoint.is_loopback else "pass --api-key-env NAME with the variable that holds your key",
        )
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return Check(
            name,
            "fail",
            f"${var} is {'empty' if raw is not None else 'not set'}",
            f"the key variable {var} holds no key",
            f"export {var}=<your key> in the shell (or notebook environment) that runs the client",
        )
    problems = []
    if raw != raw.strip():
        problems.append("leading/trailing whitespace or a newline")
    inner = raw.strip()
    if inner[:1] in "'\"" or inner[-1:] in "'\"":
        problems.append("quote characters")
    if inner.lower().startswith("bearer "):
        problems.append("a 'Bearer ' prefix (the client adds it)")
    evidence = f"${var} = {mask(inner)} ({len(inner)} characters)"
    if problems:
        return Check(
            name,
            "fail",
            evidence + "; contains " + ", ".join(problems),
            "the key is sent with extra characters, so the server rejects it (401)",
            f"set {var} to the bare key",
        )
    return Check(name, "ok", evidence)


def check_base_url(endpoint: Endpoint) -> Check:
    name = "1 configuration: base URL"
    parts = urlsplit(endpoint.base_url)
    path = parts.path.rstrip("/")
    calls = endpoint.base_url.rstrip("/") + "/chat/completions"
    if path.endswith(("/chat/completions", "/completions")):
        return Check(
            name,
            "fail",
            f"{endpoint.base_url}: the SDK would call {calls}",
            "the base URL already ends in the endpoint path",
            "give the SDK the part before /chat/completions, ending in /v1",
        )
    if not path.endswith("/v1"):
        fixed = f"{parts.scheme}://{parts.netloc}{path}/v1"
        return Check(
            name,
            "warn",
            f"{endpoint.base_url}: the SDK calls {calls} (it appends only /chat/completions)",
            "OpenAI-compatible servers (vLLM, llama.cpp, TaoToken) serve /v1/chat/completions; without /v1 most answer 404",
            f"use {fixed}",
        )
    return Check(name, "ok", f"{endpoint.base_url} -> {calls}")


def check_proxy(endpoint: Endpoint) -> Check:
    name = "1 configuration: proxy variables"
    names = [n for n in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy") if os.environ.get(n)]
    no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    proxy = proxy_for(endpoint.base_url)
    if not names:
        return Check(name, "ok", "no proxy variables set: requests go directly")
    evidence = f"{', '.join(names)} set; NO_PROXY={no_proxy or '(unset)'}; this URL goes " + (
        f"through {redact(proxy)}" if proxy else "directly"
    )
    if proxy and endpoint.is_loopback:
        return Check(
            name,
            "warn",
            evidence,
            "a local server is being reached through a proxy, which cannot see your machine's localhost",
            "add the host to NO_PROXY, e.g. NO_PROXY=localhost,127.0.0.1",
        )
    return Check(name, "ok", evidence)


# ---------------------------------------------------------------- 2. reachability


def check_reach(endpoint: Endpoint, timeout_s: float) -> list[Check]:
    parts = urlsplit(endpoint.base_url)
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    proxy = proxy_for(endpoint.base_url)
    if proxy:
        p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
        host, port, what = p.hostname, p.port or 8080, f"the proxy {p.hostname}:{p.port or 8080}"
    else:
        what = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return [Check.from_rule("2 reachability: DNS", "fail", "proxy" if proxy else "dns", f"{host}: {exc}")]
    addr = infos[0][4]
    checks = [Check("2 reachability: DNS", "ok", f"{host} -> {addr[0]}")]
    start = time.perf_counter()
    try:
        with socket.create_connection((str(addr[0]), port), timeout=timeout_s):
            pass
        checks.append(Check("2 reachability: TCP", "ok", f"connected to {what} in {(time.perf_counter() - start) * 1000:.0f} ms"))
    except OSError as exc:
        code = "proxy" if proxy else ("timeout" if isinstance(exc, (TimeoutError, socket.timeout)) else "connection_refused")
        checks.append(Check.from_rule("2 reachability: TCP", "fail", code, f"{what}: {exc}"))
    return checks


# ---------------------------------------------------------------- 3-8. the service


def _models(client: httpx.Client, endpoint: Endpoint) -> tuple[httpx.Response | None, str | None]:
    try:
        return client.get(endpoint.base_url + "/models", headers=endpoint.headers()), None
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _model_ids(resp: httpx.Response) -> list[str]:
    try:
        data = resp.json().get("data", [])
    except (ValueError, AttributeError):
        return []
    ids = []
    for m in data:
        ids.append(m.get("id"))
        ids.extend(m.get("aliases") or [])
    return [i for i in dict.fromkeys(ids) if i]


def _context_length(resp: httpx.Response, model: str | None) -> int | None:
    try:
        data = resp.json().get("data", [])
    except (ValueError, AttributeError):
        return None
    for m in data:
        if model in (None, m.get("id")) or model in (m.get("aliases") or []):
            meta = m.get("meta") or {}
            value = m.get("max_model_len") or meta.get("n_ctx") or m.get("context_length")
            return int(value) if value else None
    return None


def _chat(client: httpx.Client, endpoint: Endpoint, model: str | None, **body) -> httpx.Response:
    payload = {"model": model, "messages": [{"role": "user", "content": body.pop("content", "Say OK.")}], "max_tokens": 8, **body}
    return client.post(endpoint.base_url + "/chat/completions", json=payload, headers=endpoint.headers())


LATER_CHECKS = ("3 service answers", "4 authentication", "5 model", "6 completion", "7 streaming", "8 limits")


def _skip_after(report: Report, last: str, reason: str) -> Report:
    """Marks every check after `last` skipped, with the reason; returns the report."""
    for name in LATER_CHECKS[LATER_CHECKS.index(last) + 1 :]:
        report.checks.append(Check(name, "skipped", reason))
    return report


def run_doctor(endpoint: Endpoint, *, timeout_s: float = 15.0, probe_limits: bool | None = None) -> Report:
    """Every check, in order. probe_limits (default: only for loopback endpoints) sends an over-long request."""
    report = Report(endpoint.describe())
    add = report.checks.append
    add(check_key(endpoint))
    add(check_base_url(endpoint))
    add(check_proxy(endpoint))
    reach = check_reach(endpoint, min(timeout_s, 5.0))
    report.checks.extend(reach)
    if any(c.status == "fail" for c in reach) or report.checks[0].status == "fail":
        for name in LATER_CHECKS:
            add(Check(name, "skipped", "an earlier check failed"))
        return report
    # as the SDK does: environment proxies apply. Connection: close because llama.cpp closes each connection after a
    # streamed response while advertising keep-alive, so a reused pooled connection can be dead.
    with httpx.Client(timeout=timeout_s, trust_env=True, headers={"Connection": "close"}) as client:
        models_resp = _service_checks(client, endpoint, report)
        if models_resp is None:
            return report
        found, model = _model_check(client, endpoint, models_resp, report)
        if not found:
            return _skip_after(report, "5 model", "the model does not exist")
        add(_completion_check(client, endpoint, model))
        add(_streaming_check(client, endpoint, model))
        limits = probe_limits if probe_limits is not None else endpoint.is_loopback
        add(_limits_check(client, endpoint, model, _context_length(models_resp, model), limits))
    return report


def _service_checks(client: httpx.Client, endpoint: Endpoint, report: Report) -> httpx.Response | None:
    """Checks 3 (the service answers GET /models) and 4 (authentication); the /models response, or None to stop."""
    add = report.checks.append
    health = None
    with contextlib.suppress(httpx.HTTPError):
        health = client.get(endpoint.root_url + "/health")
    resp, error = _models(client, endpoint)
    if resp is None:
        d = diagnose(error)
        add(Check("3 service answers", "fail", redact(error), d.cause, d.fix))
        _skip_after(report, "3 service answers", "the service did not answer")
        return None
    health_note = f"; /health {health.status_code}" if health is not None and health.status_code != 404 else ""
    if resp.status_code == 404:
        add(Check.from_rule("3 service answers", "fail", "base_url_path", f"GET {endpoint.base_url}/models -> " + _short(resp)))
        _skip_after(report, "3 service answers", "the base URL's path does not exist")
        return None
    status3 = "ok" if resp.status_code in (200, 401, 403) else "warn"
    add(
        Check(
            "3 service answers",
            status3,
            f"GET /models -> HTTP {resp.status_code}{health_note}",
            "" if status3 == "ok" else RULES["server_error"][0],
            "" if status3 == "ok" else RULES["server_error"][1],
        )
    )
    if resp.status_code in (401, 403):
        code = "auth" if resp.status_code == 401 else "forbidden"
        add(Check.from_rule("4 authentication", "fail", code, f"key {endpoint.masked_key} -> " + _short(resp)))
        _skip_after(report, "4 authentication", "not authenticated")
        return None
    add(Check("4 authentication", "ok", f"key {endpoint.masked_key} accepted" if endpoint.api_key else "no key needed"))
    return resp


def _model_check(
    client: httpx.Client, endpoint: Endpoint, models_resp: httpx.Response, report: Report
) -> tuple[bool, str | None]:
    """Check 5: the model is listed (or the server serves it anyway). (found, the model id later checks use)."""
    add = report.checks.append
    ids = _model_ids(models_resp)
    model = endpoint.model
    if model is None:
        add(
            Check(
                "5 model",
                "warn",
                f"no model given; the server lists {ids[:5]}",
                "requests without a model id fail on most services",
                f"pass --model (e.g. {ids[0] if ids else 'an id from /v1/models'})",
            )
        )
        return True, ids[0] if ids else None
    if model in ids:
        add(Check("5 model", "ok", f"{model!r} is listed by /models"))
        return True, model
    probe = _chat(client, endpoint, model)
    near = difflib.get_close_matches(model, ids, n=3, cutoff=0.3) or ids[:3]
    if probe.status_code == 200:
        served = probe.json().get("model")
        add(
            Check(
                "5 model",
                "warn",
                f"{model!r} is not listed ({ids[:5]}), yet the server answered 200 with model {served!r}",
                "this server ignores unknown model names and serves its one model (llama.cpp does); vLLM and TaoToken answer 404",
                f"use a listed id: {', '.join(near)}",
            )
        )
        return True, model
    d = diagnose(_short(probe))
    add(
        Check(
            "5 model",
            "fail",
            f"{model!r} is not listed; a request with it -> {_short(probe)}",
            RULES["model_not_found"][0],
            f"use one of: {', '.join(near)}" if near else d.fix,
        )
    )
    return False, model


def _completion_check(client: httpx.Client, endpoint: Endpoint, model: str | None) -> Check:
    """Check 6: a tiny non-streamed completion, with its usage block."""
    try:
        r = _chat(client, endpoint, model)
    except httpx.HTTPError as exc:
        d = diagnose(exc)
        return Check("6 completion", "fail", redact(f"{type(exc).__name__}: {exc}"), d.cause, d.fix)
    if r.status_code != 200:
        d = diagnose(_short(r))
        return Check("6 completion", "fail", _short(r), d.cause, d.fix)
    body = r.json()
    choices = body.get("choices") or []
    if not choices:
        return Check.from_rule("6 completion", "fail", "choices_missing", json.dumps(body)[:200])
    finish = choices[0].get("finish_reason")
    text = (choices[0].get("message") or {}).get("content") or ""
    usage = body.get("usage") or {}
    note = "" if usage else "; no usage block"
    return Check(
        "6 completion",
        "ok" if usage else "warn",
        f"choices[0].message.content={text[:40]!r}, finish_reason={finish!r}, usage={usage.get('prompt_tokens')}+{usage.get('completion_tokens')}{note}",
        "" if usage else "the server reports no token usage",
        "" if usage else "count tokens another way (lab 02)",
    )


def _streaming_check(client: httpx.Client, endpoint: Endpoint, model: str | None) -> Check:
    """Check 7: a tiny stream, its SSE events counted by kind (role, content, usage, [DONE])."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Count to five."}],
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    try:
        with client.stream("POST", endpoint.base_url + "/chat/completions", json=body, headers=endpoint.headers()) as s:
            ctype = s.headers.get("content-type", "")
            if s.status_code != 200:
                s.read()
                d = diagnose(_short(s))
                return Check("7 streaming", "fail", _short(s), d.cause, d.fix)
            if "event-stream" not in ctype:
                s.read()
                return Check.from_rule(
                    "7 streaming", "fail", "stream_as_json", f"stream=true answered with content-type {ctype!r}"
                )
            events, kinds = _count_stream_events(s.iter_lines())
    except (httpx.HTTPError, ValueError) as exc:
        d = diagnose(exc)
        return Check("7 streaming", "fail", redact(f"{type(exc).__name__}: {exc}"), d.cause, d.fix)
    ok = kinds["content"] > 0 and kinds["done"] == 1
    complete = ok and kinds["usage"]
    cause, fix = (
        RULES["stream_cut"]
        if not ok
        else ("no usage chunk: the server ignores stream_options", "count token-bearing chunks, marked estimated")
    )
    return Check(
        "7 streaming",
        "ok" if complete else ("warn" if ok else "fail"),
        f"{events} SSE events: role chunk {kinds['role']}, content chunks {kinds['content']}, usage chunk {kinds['usage']}, [DONE] {kinds['done']}",
        "" if complete else cause,
        "" if complete else fix,
    )


def _count_stream_events(lines) -> tuple[int, dict[str, int]]:
    """(SSE data events, counts by kind); ValueError on a chunk that is not a JSON object."""
    events, kinds = 0, {"role": 0, "content": 0, "usage": 0, "done": 0}
    for line in lines:
        obj = sse.payload(line)
        if obj is None:
            continue
        events += 1
        if obj == sse.DONE:
            kinds["done"] += 1
            continue
        if not isinstance(obj, dict):
            raise ValueError(f"stream chunk is not a JSON object: {line[:80]!r}")
        if obj.get("usage") and not obj.get("choices"):
            kinds["usage"] += 1
        for ch in obj.get("choices") or []:
            delta = ch.get("delta") or {}
            kinds["role"] += bool(delta.get("role"))
            kinds["content"] += bool(delta.get("content"))
    return events, kinds


def _limits_check(client: httpx.Client, endpoint: Endpoint, model: str | None, ctx: int | None, probe: bool) -> Check:
    """Check 8: the context length; with probe, an over-long request must be refused with HTTP 400."""
    if not probe:
        return Check(
            "8 limits",
            "ok" if ctx else "skipped",
            f"context length {ctx:,} tokens per request (reported by /models); over-long request not sent to a remote service"
            if ctx
            else "the service reports no context length; over-long request not sent to a remote service",
        )
    if not ctx:
        return Check("8 limits", "skipped", "the service reports no context length")
    try:
        r = _chat(client, endpoint, model, content="word " * (ctx + 64), max_tokens=4)
    except httpx.HTTPError as exc:
        return Check(
            "8 limits",
            "warn",
            redact(f"{type(exc).__name__}: {exc}"),
            "an over-long request broke the connection",
            "check the server log",
        )
    if r.status_code == 400:
        return Check(
            "8 limits", "ok", f"context length {ctx:,} tokens per request; a {ctx + 64:,}-word prompt -> {_short(r, 200)}"
        )
    return Check(
        "8 limits",
        "warn",
        f"context length {ctx:,}; a longer prompt -> HTTP {r.status_code}",
        "the server accepted a prompt longer than its context: it truncates or shifts context silently",
        "keep prompt + max_tokens under the context length yourself",
    )
