"""The articles' claims about what a gateway answers (TaoToken's base URLs, a reply's choices and headers, the bodies
of an unknown model and of an impossible max_tokens), asked of TaoToken itself where TAOTOKEN_API_KEY and
TAOTOKEN_MODEL are set; and the troubleshooting claims lab 06 measures on its own engines (what answers 401, what
vLLM says to a model name it does not serve).

The same requests can be sent to any server (`gateway_answers`): lab 06 shows the embedded engine's answers beside
TaoToken's, so the difference between a lenient local server and a gateway is seen, not told."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass

import pandas as pd

from ..claims import row
from ..keys import read_key
from ..redact import redact
from .troubleshoot import SAME_ON_VLLM, Outcome

# the articles' paths under a gateway's root (TaoToken: https://taotoken.net): seed 000's mistake, seed 001's, and
# the full path seed 000 itself gives
ARTICLE_PATHS = {"no /api": "/v1/chat/completions", "no /v1": "/api/chat/completions", "documented": "/api/v1/chat/completions"}
UNKNOWN_MODEL = "labs-no-such-model"
IMPOSSIBLE_MAX_TOKENS = 10_000_000  # more than any model's context
GATEWAY_CLAIMS = (
    "s000-no-api-404",
    "s001-no-v1-404",
    "s000-curl-answers",
    "s000-timing-header",
    "s000-model-not-found",
    "s000-max-tokens-too-large",
)
NEEDS_TAOTOKEN = "needs TaoToken: set TAOTOKEN_API_KEY and TAOTOKEN_MODEL, and run lab 06 again (the requests it sends are listed in its section 13)"


@dataclass(frozen=True)
class Answer:
    """What a server answered one chat request: HTTP status (None: nothing answered, `body` says why), the body in
    one line (keys masked, at most 300 characters), whether it holds `choices`, and the response headers that name
    a time (x-…-time, server-timing, …-ms)."""

    status: int | None
    body: str
    has_choices: bool
    timing_headers: tuple[str, ...]


def ask(url: str, key: str | None, model: str | None, max_tokens: int = 8, timeout_s: float = 30.0) -> Answer:
    """One unstreamed chat request to the full `url`, as curl in the articles sends it."""
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": max_tokens}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        resp = httpx.post(url, json=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return Answer(None, redact(f"{type(exc).__name__}: {exc}")[:300], False, ())
    try:
        parsed = resp.json()
    except ValueError:
        parsed = None
    timing = tuple(h for h in resp.headers if re.search(r"time|timing|-ms$|duration", h, re.I))
    return Answer(
        resp.status_code,
        " ".join(redact(resp.text).split())[:300],
        isinstance(parsed, dict) and bool(parsed.get("choices")),
        timing,
    )


def gateway_answers(root_url: str, key: str | None, model: str | None) -> dict[str, Answer]:
    """The articles' requests to the server at `root_url`: its three base-URL paths, then at the documented one an
    unknown model and a max_tokens no model takes."""
    root = root_url.rstrip("/")
    answers = {name: ask(root + path, key, model) for name, path in ARTICLE_PATHS.items()}
    documented = root + ARTICLE_PATHS["documented"]
    answers["unknown model"] = ask(documented, key, UNKNOWN_MODEL)
    answers["max_tokens too large"] = ask(documented, key, model, max_tokens=IMPOSSIBLE_MAX_TOKENS)
    return answers


def taotoken_answers() -> dict[str, Answer] | None:
    """gateway_answers from TaoToken (TAOTOKEN_BASE_URL's host, else taotoken.net), or None without a key and model."""
    from ..endpoints import resolve

    key, model = read_key("TAOTOKEN_API_KEY"), os.environ.get("TAOTOKEN_MODEL")
    if not key or not model:
        return None
    return gateway_answers(resolve("taotoken").root_url, key, model)


def _said(a: Answer) -> str:
    return f"HTTP {a.status}: {a.body[:100]}" if a.status is not None else f"not reproduced: {a.body[:100]}"


def gateway_rows(answers: dict[str, Answer] | None, server: str = "TaoToken") -> list[dict]:
    """The articles' gateway claims judged on `answers` (gateway_answers of `server`); without them, each is
    "cannot be checked here" with what would check it."""
    if answers is None:
        return [row(cid, "not testable here", "", None, NEEDS_TAOTOKEN) for cid in GATEWAY_CLAIMS]

    def judged(cid: str, a: Answer, unit: str, holds: bool | None, why: str) -> dict:
        reached = a.status is not None
        return row(cid, _said(a), unit, holds if reached else None, f"{server}: {why}" if reached else a.body)

    no_api, no_v1, good = answers["no /api"], answers["no /v1"], answers["documented"]
    unknown, huge = answers["unknown model"], answers["max_tokens too large"]

    def worded(a: Answer, words: str) -> bool | None:
        """True: an error in the article's words; None: an error in others; False: no error at all."""
        return (True if words in a.body.lower() else None) if (a.status or 0) >= 400 else False

    return [
        judged("s000-no-api-404", no_api, ARTICLE_PATHS["no /api"], no_api.status == 404, "the root without /api"),
        judged("s001-no-v1-404", no_v1, ARTICLE_PATHS["no /v1"], no_v1.status == 404, "/api without /v1"),
        judged(
            "s000-curl-answers",
            good,
            ARTICLE_PATHS["documented"],
            good.status == 200 and good.has_choices,
            "the article's request, with your key and model: a reply with choices is a working setup",
        ),
        row(
            "s000-timing-header",
            (", ".join(good.timing_headers) or "no header names a time") if good.status is not None else _said(good),
            "response headers",
            bool(good.timing_headers) if good.status is not None else None,
            f"{server}'s headers on the article's request; TTFT needs the client's own clock either way (lab 02's timer)"
            if good.status is not None
            else good.body,
        ),
        judged(
            "s000-model-not-found",
            unknown,
            f"model {UNKNOWN_MODEL!r}",
            worded(unknown, "model not found"),
            "an error in other words is still the model's (the status says so); no error means the name is ignored",
        ),
        judged(
            "s000-max-tokens-too-large",
            huge,
            f"max_tokens {IMPOSSIBLE_MAX_TOKENS:,}",
            worded(huge, "max_tokens"),
            "refused, clamped to the context, or passed on to the model's provider: each gateway decides",
        ),
    ]


def local_rows(seen: dict[str, Outcome], vllm_unknown: Outcome | None, vllm_recorded: dict) -> list[dict]:
    """The 401 causes reproduced on the embedded engine (lab 06 section 1: a wrong key, no key, the key without
    "Bearer "), and what vLLM answers a model name it does not serve (section 10, or its recorded 0.33.0 body)."""
    causes = [seen[what] for what in ("wrong key", "no key sent", "key without Bearer") if what in seen]
    refused = [o for o in causes if not o.ok and o.status == 401]
    if vllm_unknown is not None and vllm_unknown.status is not None:
        status, words, how = vllm_unknown.status, vllm_unknown.words, "measured"
    else:
        body = vllm_recorded["model_not_found_404"]
        status, words, how = body["error"]["code"], json.dumps(body), "recorded from vLLM 0.33.0 (data/vllm_errors_0.33.0.json)"
    return [
        row(
            "s000-401-causes",
            "; ".join(f"{o.what}: {'served' if o.ok else f'HTTP {o.status}'}" for o in causes) or "not reproduced",
            "the embedded engine, with a key of its own",
            (len(refused) == len(causes) or (None if refused else False)) if causes else None,
            "what the embedded llama.cpp answered each; vLLM refuses a header without the Bearer scheme too (its "
            "AuthenticationMiddleware, vllm/entrypoints/serve/middleware/authenticate.py), so a malformed header is a "
            "cause on one server and not on another. A 401 alone cannot tell the causes apart: the doctor checks each in "
            "turn. A deleted or expired key needs the provider's console",
        ),
        row(
            "s002-served-model-name",
            f"HTTP {status}: {words[:100]}",
            f"vLLM, a model name it does not serve ({how})",
            status == 404,
            "vLLM answers a name outside --served-model-name with 404 NotFoundError, 'The model … does not exist': the "
            "cause the article names, in other words (search the body for the model, not for 'model not found')",
        ),
    ]


SEED003_CONFIGS = ("article_seed003_client.json", "article_seed003_provider.toml", "article_seed003_vscode_settings.json")


def seed003_configs_row() -> dict:
    """Seed 003's three client configurations (JSON, TOML, editor settings) through the doctor's three-piece check:
    what would stop each from reaching TaoToken, the placeholder key aside (a reader puts theirs in)."""
    from ..paths import DATA_DIR
    from .client_config import check_config

    problems = {}
    for name in SEED003_CONFIGS:
        report = check_config(DATA_DIR / "client_configs" / name)
        problems[name] = [f"{c.name}: {c.cause}" for c in report.checks if c.status in ("fail", "warn") and c.name != "key"]
    return row(
        "s003-client-configs",
        "; ".join(f"{name}: {', '.join(p.split(':')[0] for p in found) or 'ok'}" for name, found in problems.items()),
        "the doctor's findings, the placeholder key aside",
        not any(problems.values()),
        " | ".join(f"{name}: {found[0]}" for name, found in problems.items() if found)
        or "each would reach TaoToken with a real key",
    )


def answers_table(answers: dict[str, Answer]) -> pd.DataFrame:
    """gateway_answers as a table, one request a row."""
    return pd.DataFrame([{"request": name, **asdict(a)} for name, a in answers.items()])


def gateway_article_checks(
    outcomes: list[Outcome], vllm_outcomes: list[Outcome], vllm_recorded: dict, answers: dict[str, Answer] | None
) -> pd.DataFrame:
    """Lab 06's rows for these claims: the local ones from its runs, the gateway ones from TaoToken's `answers`
    (taotoken_answers(); None without its key)."""
    vllm_unknown = next((o for o in vllm_outcomes if o.what == SAME_ON_VLLM["unknown model"]), None)
    return pd.DataFrame(
        [*local_rows({o.what: o for o in outcomes}, vllm_unknown, vllm_recorded), seed003_configs_row(), *gateway_rows(answers)]
    )
