"""llama.cpp's native HTTP API (/tokenize, /completion), the one client the labs use for it.

The OpenAI-compatible routes go through labs_lib.timing; these native ones give what the OpenAI API
does not: token pieces, token ids in and out, grammar-forced decoding with per-token log-probs.
Loopback only in practice, so no environment proxy is consulted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx

from ..sse import events

TIMEOUT_S = 600.0


class LlamaCppAPI:
    """A llama.cpp server at `root_url` (scheme://host:port), with the headers its key needs."""

    def __init__(self, root_url: str, headers: dict[str, str] | None = None, timeout_s: float = TIMEOUT_S):
        self.root_url, self.headers, self.timeout_s = root_url.rstrip("/"), dict(headers or {}), timeout_s

    def _post(self, path: str, body: dict, timeout_s: float | None = None) -> dict:
        resp = httpx.post(
            self.root_url + path, json=body, headers=self.headers, timeout=timeout_s or self.timeout_s, trust_env=False
        )
        resp.raise_for_status()
        return resp.json()

    def tokenize(self, text: str, *, add_special: bool = False, timeout_s: float = 60.0) -> list[int]:
        """Token ids of `text` (with BOS first when add_special)."""
        tokens = self._post("/tokenize", {"content": text, "add_special": add_special}, timeout_s)["tokens"]
        return [t if isinstance(t, int) else t["id"] for t in tokens]

    def pieces(self, text: str, *, timeout_s: float = 30.0) -> list[str]:
        """The text's token pieces; their concatenation is the text."""
        tokens = self._post("/tokenize", {"content": text, "with_pieces": True, "add_special": False}, timeout_s)["tokens"]
        return [t["piece"] if isinstance(t["piece"], str) else bytes(t["piece"]).decode(errors="replace") for t in tokens]

    def completion(self, body: dict) -> dict:
        """POST /completion (not streamed)."""
        return self._post("/completion", body)

    def stream_completion(self, body: dict, client: httpx.Client | None = None) -> Iterator[tuple[float, dict]]:
        """(seconds after sending, chunk) for each streamed /completion chunk."""
        own = client is None
        client = client or httpx.Client(timeout=self.timeout_s, trust_env=False, headers={"Connection": "close"})
        try:
            start = time.perf_counter()
            with client.stream(
                "POST", self.root_url + "/completion", json={**body, "stream": True}, headers=self.headers
            ) as resp:
                resp.raise_for_status()
                for chunk in events(resp.iter_lines()):
                    if isinstance(chunk, dict):
                        yield time.perf_counter() - start, chunk
        finally:
            if own:
                client.close()
