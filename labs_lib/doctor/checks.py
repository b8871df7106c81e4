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
        with socket.create_connection((addr[0], port), timeout=timeout_s):
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


def run_doctor(endpoint: Endpoint, *, timeout_s: float = 15.0, probe_limits: bool | None = None) -> Report:
    """Every check, in order. probe_limits (default: only for loopback endpoints) sends an over-long request."""
    report = Report(endpoint.describe())
    add = report.checks.append
    add(check_key(endpoint))
    add(check_base_url(endpoint))
    add(check_proxy(endpoint))
    reach = check_reach(endpoint, min(timeout_s, 5.0))
    report.checks.extend(reach)
    later = ("3 service answers", "4 authentication", "5 model", "6 completion", "7 streaming", "8 limits")
    if any(c.status == "fail" for c in reach) or report.checks[0].status == "fail":
        for name in later:
            add(Check(name, "skipped", "an earlier check failed"))
        return report
    # as the SDK does: environment proxies apply. Connection: close because llama.cpp closes each connection after a
    # streamed response while advertising keep-alive, so a reused pooled connection can be dead.
    with httpx.Client(timeout=timeout_s, trust_env=True, headers={"Connection": "close"}) as client:
        health = None
        with contextlib.suppress(httpx.HTTPError):
            health = client.get(endpoint.root_url + "/health")
        resp, error = _models(client, endpoint)
        if resp is None:
            d = diagnose(error)
            add(Check("3 service answers", "fail", redact(error), d.cause, d.fix))
            for name in later[1:]:
                add(Check(name, "skipped", "the service did not answer"))
            return report
        health_note = f"; /health {health.status_code}" if health is not None and health.status_code != 404 else ""
        if resp.status_code == 404:
            add(
                Check.from_rule(
                    "3 service answers", "fail", "base_url_path", f"GET {endpoint.base_url}/models -> " + _short(resp)
                )
            )
            for name in later[1:]:
                add(Check(name, "skipped", "the base URL's path does not exist"))
            return report
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
            for name in later[2:]:
                add(Check(name, "skipped", "not authenticated"))
            return report
        add(Check("4 authentication", "ok", f"key {endpoint.masked_key} accepted" if endpoint.api_key else "no key needed"))
        ids = _model_ids(resp)
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
            model = ids[0] if ids else None
        elif model in ids:
            add(Check("5 model", "ok", f"{model!r} is listed by /models"))
        else:
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
            else:
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
                for name in later[3:]:
                    add(Check(name, "skipped", "the model does not exist"))
                return report
        _completion_checks(
            client, endpoint, model, resp, report, probe_limits if probe_limits is not None else endpoint.is_loopback
        )
    return report


def _completion_checks(client, endpoint: Endpoint, model: str | None, models_resp, report: Report, probe_limits: bool) -> None:
    add = report.checks.append
    try:
        r = _chat(client, endpoint, model)
    except httpx.HTTPError as exc:
        d = diagnose(exc)
        add(Check("6 completion", "fail", redact(f"{type(exc).__name__}: {exc}"), d.cause, d.fix))
        return
    if r.status_code != 200:
        d = diagnose(_short(r))
        add(Check("6 completion", "fail", _short(r), d.cause, d.fix))
    else:
        body = r.json()
        choices = body.get("choices") or []
        if not choices:
            add(Check.from_rule("6 completion", "fail", "choices_missing", json.dumps(body)[:200]))
        else:
            finish = choices[0].get("finish_reason")
            text = (choices[0].get("message") or {}).get("content") or ""
            usage = body.get("usage") or {}
            note = "" if usage else "; no usage block"
            add(
                Check(
                    "6 completion",
                    "ok" if usage else "warn",
                    f"choices[0].message.content={text[:40]!r}, finish_reason={finish!r}, usage={usage.get('prompt_tokens')}+{usage.get('completion_tokens')}{note}",
                    "" if usage else "the server reports no token usage",
                    "" if usage else "count tokens another way (lab 02)",
                )
            )
    try:
        lines, kinds = [], {"role": 0, "content": 0, "usage": 0, "done": 0}
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "Count to five."}],
            "max_tokens": 8,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with client.stream("POST", endpoint.base_url + "/chat/completions", json=body, headers=endpoint.headers()) as s:
            ctype = s.headers.get("content-type", "")
            if s.status_code != 200:
                s.read()
                d = diagnose(_short(s))
                add(Check("7 streaming", "fail", _short(s), d.cause, d.fix))
            elif "event-stream" not in ctype:
                s.read()
                add(Check.from_rule("7 streaming", "fail", "stream_as_json", f"stream=true answered with content-type {ctype!r}"))
            else:
                for line in s.iter_lines():
                    obj = sse.payload(line)
                    if obj is None:
                        continue
                    lines.append(line)
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
                ok = kinds["content"] > 0 and kinds["done"] == 1
                add(
                    Check(
                        "7 streaming",
                        "ok" if ok and kinds["usage"] else ("warn" if ok else "fail"),
                        f"{len(lines)} SSE events: role chunk {kinds['role']}, content chunks {kinds['content']}, usage chunk {kinds['usage']}, [DONE] {kinds['done']}",
                        ""
                        if ok and kinds["usage"]
                        else (RULES["stream_cut"][0] if not ok else "no usage chunk: the server ignores stream_options"),
                        ""
                        if ok and kinds["usage"]
                        else (RULES["stream_cut"][1] if not ok else "count token-bearing chunks, marked estimated"),
                    )
                )
    except (httpx.HTTPError, ValueError) as exc:
        d = diagnose(exc)
        add(Check("7 streaming", "fail", redact(f"{type(exc).__name__}: {exc}"), d.cause, d.fix))
    ctx = _context_length(models_resp, model)
    if not probe_limits:
        add(
            Check(
                "8 limits",
                "ok" if ctx else "skipped",
                f"context length {ctx:,} tokens per request (reported by /models); over-long request not sent to a remote service"
                if ctx
                else "the service reports no context length; over-long request not sent to a remote service",
            )
        )
        return
    if not ctx:
        add(Check("8 limits", "skipped", "the service reports no context length"))
        return
    try:
        r = _chat(client, endpoint, model, content="word " * (ctx + 64), max_tokens=4)
    except httpx.HTTPError as exc:
        add(
            Check(
                "8 limits",
                "warn",
                redact(f"{type(exc).__name__}: {exc}"),
                "an over-long request broke the connection",
                "check the server log",
            )
        )
        return
    if r.status_code == 400:
        add(Check("8 limits", "ok", f"context length {ctx:,} tokens per request; a {ctx + 64:,}-word prompt -> {_short(r, 200)}"))
    else:
        add(
            Check(
                "8 limits",
                "warn",
                f"context length {ctx:,}; a longer prompt -> HTTP {r.status_code}",
                "the server accepted a prompt longer than its context: it truncates or shifts context silently",
                "keep prompt + max_tokens under the context length yourself",
            )
        )
