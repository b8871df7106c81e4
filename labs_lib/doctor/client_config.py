"""`doctor --config PATH`: the three-piece check (base URL, key, model) of a client's configuration file,
and OAuth/API-key conflicts, read in each tool's documented format (not the articles' guesses).

- OpenAI-SDK style JSON or TOML: base_url / api_key / model (common spellings accepted). The SDK
  appends /chat/completions, so the base URL ends in /v1.
- Claude Code settings.json: an "env" block with ANTHROPIC_BASE_URL (the root: Claude Code appends
  /v1/messages and speaks the Anthropic Messages API), ANTHROPIC_AUTH_TOKEN (sent as
  "Authorization: Bearer", takes priority) or ANTHROPIC_API_KEY (sent as x-api-key), ANTHROPIC_MODEL;
  or "apiKeyHelper". Keys such as "apiProvider"/"baseUrl"/"apiKey" are not Claude Code settings.
- Codex config.toml: model, model_provider, [model_providers.<id>] with base_url (ending in /v1:
  Codex appends /responses), env_key (the NAME of the variable holding the key) and
  wire_api = "responses". Codex auth.json: OPENAI_API_KEY and/or "tokens" from a ChatGPT login;
  with both, preferred_auth_method (config.toml) decides.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import BadInput, read_user_file
from ..keys import mask
from .report import Check, Report

OPENAI_KEYS = {
    "base_url": ("base_url", "baseURL", "baseUrl", "api_base", "openai_base_url", "endpoint"),
    "api_key": ("api_key", "apiKey", "openai_api_key", "key"),
    "model": ("model", "model_id", "modelId", "model_name"),
}


def _load(path: Path) -> dict:
    text = read_user_file(path, "--config", "config file")
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        raise BadInput("--config", str(path), f"it is not valid {kind} ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(data, dict):
        raise BadInput("--config", str(path), "allowed: a JSON object or TOML table at the top level")
    return data


def _url_check(name: str, url: object, *, want_v1: bool, appends: str) -> Check:
    if not url:
        return Check(
            name,
            "fail",
            "no base URL",
            "the client will use its default service, not yours",
            f"set the base URL (the client appends {appends})",
        )
    parts = urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Check(name, "fail", f"{url!r}", "not an http(s) URL", "write it as https://host/path")
    ends_v1 = parts.path.rstrip("/").endswith("/v1")
    if want_v1 and not ends_v1:
        return Check(
            name,
            "warn",
            f"{url} -> requests go to {str(url).rstrip('/')}{appends}",
            f"this client appends only {appends}; OpenAI-compatible services serve it under /v1",
            "end the base URL in /v1",
        )
    if not want_v1 and ends_v1:
        return Check(
            name,
            "warn",
            f"{url} -> requests go to {str(url).rstrip('/')}{appends}",
            f"this client appends {appends} itself, so /v1 appears twice",
            "drop the trailing /v1",
        )
    return Check(name, "ok", f"{url} -> {str(url).rstrip('/')}{appends}")


def _inline_key(name: str, key: object) -> Check:
    if not key:
        return Check(
            name,
            "fail",
            "no key",
            "requests carry no key: a hosted service answers 401",
            "provide the key (better: through an environment variable)",
        )
    key = str(key)
    if key.startswith(("$", "${")):
        var = key.strip("${}")
        value = os.environ.get(var)
        return Check(
            name,
            "ok" if value else "fail",
            f"from ${var}: {mask(value) if value else 'not set'}",
            "" if value else f"{var} is not set here",
            "" if value else f"export {var}=<your key>",
        )
    if key in ("EMPTY", "not-needed", "sk-xxx", "sk-你的Key", "sk-your-taotoken-key") or "your" in key.lower() or "你的" in key:
        return Check(
            name,
            "fail",
            f"placeholder key {key!r}",
            "the key is a placeholder copied from an example",
            "paste your real key, or use an environment variable",
        )
    return Check(
        name,
        "warn",
        f"inline key {mask(key)}",
        "the key is stored in plain text in the file (easy to commit or share)",
        "keep it in an environment variable (and out of version control)",
    )


def _model_check(name: str, model: object) -> Check:
    if not model:
        return Check(name, "fail", "no model", "requests need a model id", "set the model id the service lists under /v1/models")
    if "你的" in str(model) or "your" in str(model).lower():
        return Check(
            name,
            "fail",
            f"placeholder model {model!r}",
            "the model id is a placeholder",
            "use an id from the service's model list",
        )
    return Check(name, "ok", f"model {model!r}")


def _openai_style(data: dict, path: Path) -> list[Check]:
    def pick(field: str):
        return next((data[k] for k in OPENAI_KEYS[field] if k in data), None)

    flat = (
        data
        if any(k in data for ks in OPENAI_KEYS.values() for k in ks)
        else next(
            (v for v in data.values() if isinstance(v, dict) and any(k in v for ks in OPENAI_KEYS.values() for k in ks)), data
        )
    )
    data = flat
    if not any(k in data for ks in OPENAI_KEYS.values() for k in ks):
        return [
            Check(
                "format",
                "fail",
                f"{path.name}: keys {sorted(data)[:6]}",
                "no format the doctor knows: not an OpenAI-SDK, Claude Code or Codex configuration",
                "check it against the documentation of the tool that reads it",
            )
        ]
    return [
        Check("format", "ok", f"{path.name}: OpenAI-SDK style (base_url / api_key / model)"),
        _url_check("base URL", pick("base_url"), want_v1=True, appends="/chat/completions"),
        _inline_key("key", pick("api_key")),
        _model_check("model", pick("model")),
    ]


def _claude_code(data: dict, path: Path) -> list[Check]:
    env = data.get("env") or {}
    checks = [Check("format", "ok", f"{path.name}: Claude Code settings (env block)")]
    base = env.get("ANTHROPIC_BASE_URL") or os.environ.get("ANTHROPIC_BASE_URL")
    checks.append(
        _url_check("base URL", base, want_v1=False, appends="/v1/messages")
        if base
        else Check("base URL", "ok", "no ANTHROPIC_BASE_URL: Claude Code talks to Anthropic's own API")
    )
    token, key, helper = env.get("ANTHROPIC_AUTH_TOKEN"), env.get("ANTHROPIC_API_KEY"), data.get("apiKeyHelper")
    if helper:
        checks.append(Check("key", "ok", f"apiKeyHelper {helper!r} supplies the key"))
    elif token or key:
        checks.append(_inline_key("key", token or key))
    else:
        checks.append(
            Check(
                "key",
                "warn" if base else "ok",
                "no key in the env block: Claude Code uses its login (OAuth) or the shell's variables",
                "a gateway needs a key; the Claude.ai login is not sent to it" if base else "",
                "put ANTHROPIC_AUTH_TOKEN (Bearer) or ANTHROPIC_API_KEY (x-api-key) in env" if base else "",
            )
        )
    if token and key:
        checks.append(
            Check(
                "OAuth/API-key conflict",
                "warn",
                "both ANTHROPIC_AUTH_TOKEN and ANTHROPIC_API_KEY are set",
                "both an Authorization: Bearer and an x-api-key header are sent; a gateway may read the wrong one",
                "keep only the one your gateway documents (usually ANTHROPIC_AUTH_TOKEN)",
            )
        )
    elif key and not base:
        checks.append(
            Check(
                "OAuth/API-key conflict",
                "warn",
                "ANTHROPIC_API_KEY set with no gateway",
                "if you are also logged in (claude.ai), Claude Code warns 'Auth conflict' and uses the API key (billed per use)",
                "remove ANTHROPIC_API_KEY to use your subscription, or /logout to use the key",
            )
        )
    else:
        checks.append(Check("OAuth/API-key conflict", "ok", "one way to authenticate"))
    checks.append(
        _model_check("model", env.get("ANTHROPIC_MODEL"))
        if env.get("ANTHROPIC_MODEL")
        else Check("model", "ok", "no ANTHROPIC_MODEL: Claude Code picks its default model names, which a gateway must accept")
    )
    if base:
        checks.append(
            Check(
                "protocol",
                "warn",
                f"Claude Code will POST Anthropic Messages requests to {str(base).rstrip('/')}/v1/messages",
                "an OpenAI-compatible /v1/chat/completions endpoint is not enough",
                "use a gateway URL that serves the Anthropic API",
            )
        )
    return checks


def _codex_config(data: dict, path: Path) -> list[Check]:
    provider_id = data.get("model_provider", "openai")
    providers = data.get("model_providers") or {}
    checks = [Check("format", "ok", f"{path.name}: Codex config.toml (model_provider = {provider_id!r})")]
    if provider_id == "openai" and provider_id not in providers:
        checks.append(Check("base URL", "ok", "built-in OpenAI provider (api.openai.com)"))
        checks.append(Check("key", "ok", "OPENAI_API_KEY or the ChatGPT login (auth.json)"))
    elif provider_id not in providers:
        checks.append(
            Check(
                "base URL",
                "fail",
                f"model_provider = {provider_id!r} but no [model_providers.{provider_id}] table",
                "Codex cannot find the provider",
                f"add [model_providers.{provider_id}] with base_url, env_key and wire_api",
            )
        )
    else:
        p = providers[provider_id]
        checks.append(_url_check("base URL", p.get("base_url"), want_v1=True, appends="/responses"))
        env_key = p.get("env_key")
        if env_key:
            value = os.environ.get(env_key)
            checks.append(
                Check(
                    "key",
                    "ok" if value else "fail",
                    f"env_key = {env_key!r}: {mask(value) if value else 'not set here'}",
                    "" if value else "Codex reads the key from that variable at start-up",
                    "" if value else f"export {env_key}=<your key>",
                )
            )
        else:
            checks.append(
                Check(
                    "key",
                    "warn",
                    "no env_key",
                    "without env_key Codex sends no key to a custom provider (unless requires_openai_auth)",
                    'add env_key = "NAME_OF_YOUR_KEY_VARIABLE"',
                )
            )
        wire = p.get("wire_api")
        checks.append(
            Check(
                "wire_api",
                "ok" if wire == "responses" else "warn",
                f"wire_api = {wire!r}",
                "" if wire == "responses" else "current Codex releases speak only the Responses API",
                "" if wire == "responses" else 'set wire_api = "responses" and check the provider serves /v1/responses',
            )
        )
    checks.append(
        _model_check("model", data.get("model"))
        if data.get("model")
        else Check("model", "ok", "no model: Codex uses its default (which a custom provider must serve)")
    )
    preferred = data.get("preferred_auth_method") or data.get("forced_login_method")
    checks.append(
        Check(
            "OAuth/API-key conflict",
            "ok",
            f"preferred auth: {preferred}" if preferred else "no preference set (ChatGPT login is preferred when present)",
        )
    )
    return checks


def _codex_auth(data: dict, path: Path) -> list[Check]:
    key, tokens = data.get("OPENAI_API_KEY"), data.get("tokens")
    checks = [Check("format", "ok", f"{path.name}: Codex auth.json")]
    if key:
        checks.append(Check("key", "ok", f"OPENAI_API_KEY {mask(str(key))}"))
    if tokens:
        checks.append(Check("login", "ok", "ChatGPT login tokens present"))
    if key and tokens:
        checks.append(
            Check(
                "OAuth/API-key conflict",
                "warn",
                "both a ChatGPT login and OPENAI_API_KEY",
                'Codex prefers the ChatGPT login unless preferred_auth_method = "apikey"; a custom provider uses its env_key instead',
                "set preferred_auth_method in config.toml, or remove the one you do not use (codex logout)",
            )
        )
    if not key and not tokens:
        checks.append(
            Check(
                "key",
                "fail",
                "neither OPENAI_API_KEY nor a login",
                "Codex has no credentials",
                "codex login, or set OPENAI_API_KEY",
            )
        )
    return checks


def check_config(path: str | Path) -> Report:
    """Check one client configuration file; the report's endpoint is the file."""
    path = Path(path)
    data = _load(path)
    report = Report({"base_url": str(path), "model": None, "api_key": "(in file)"})
    if path.name == "auth.json" or "OPENAI_API_KEY" in data or "tokens" in data:
        checks = _codex_auth(data, path)
    elif path.suffix == ".toml" and ("model_providers" in data or "model_provider" in data):
        checks = _codex_config(data, path)
    elif isinstance(data.get("env"), dict) or "apiKeyHelper" in data:
        checks = _claude_code(data, path)
    elif "apiProvider" in data:  # the source articles' invented "Claude Code" settings
        checks = [
            Check(
                "format",
                "fail",
                f"{path.name}: keys {sorted(set(data) & {'apiProvider', 'baseUrl', 'apiKey', 'model'})}",
                "these are not Claude Code settings (seen in the source articles); Claude Code ignores them",
                'use an env block: {"env": {"ANTHROPIC_BASE_URL": …, "ANTHROPIC_AUTH_TOKEN": …, "ANTHROPIC_MODEL": …}}',
            )
        ]
    elif path.name == "auth.json":
        checks = _codex_auth(data, path)
    else:
        checks = _openai_style(data, path)
    if path.name == "auth.json" and {"base_url", "api_key"} & set(data):
        checks.insert(
            1,
            Check(
                "format",
                "fail",
                "auth.json with base_url/api_key keys (as in the source articles)",
                "Codex's auth.json holds OPENAI_API_KEY or login tokens; base_url belongs in config.toml",
                "move base_url into [model_providers.<id>] of ~/.codex/config.toml and the key into env_key's variable",
            ),
        )
    report.checks.extend(checks)
    return report
