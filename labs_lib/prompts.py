"""Prompts at controlled token lengths, cut from the prose the project ships (data/texts/).

With a tokenizer (the engine's /tokenize), a prompt of n tokens is exactly n tokens of corpus
text (the chat template adds its own few). Without one, pieces are words and the length is
approximate; `usage.prompt_tokens` in every record says what the server counted.
Each request starts at a different offset, so prompts differ and a prompt cache cannot
answer them (unless a shared prefix is asked for).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache

import numpy as np

from .engines.llamacpp_api import LlamaCppAPI
from .errors import positive_int
from .paths import DATA_DIR

Tokenizer = Callable[[str], list[str]]  # text -> token pieces (their concatenation is the text)
WORDS_PER_TOKEN = 0.75  # English prose, for the word fallback


@cache
def corpus_text(name: str = "corpus.txt") -> str:
    return (DATA_DIR / "texts" / name).read_text()


def language_texts() -> tuple[dict[str, str], dict[str, str]]:
    """(prompts, texts) by language from data/texts/chars_per_token.json: the same request in Chinese (seed 003's
    own prompt) and English, and one paragraph of the same content in each."""
    data = json.loads((DATA_DIR / "texts" / "chars_per_token.json").read_text())
    return data["prompts"], data["texts"]


def engine_tokenizer(root_url: str, headers: dict[str, str] | None = None, timeout_s: float = 30.0) -> Tokenizer:
    """Token pieces from a llama.cpp server's /tokenize."""
    api = LlamaCppAPI(root_url, headers)
    return lambda text: api.pieces(text, timeout_s=timeout_s)


def token_ids(root_url: str, text: str, headers: dict[str, str] | None = None) -> list[int]:
    return LlamaCppAPI(root_url, headers).tokenize(text)


class PromptFactory:
    """Distinct prompts of a given token length from the corpus."""

    def __init__(self, tokenizer: Tokenizer | None = None, *, seed: int = 0, corpus: str = "corpus.txt"):
        text = " ".join(corpus_text(corpus).split())
        self.exact = tokenizer is not None
        self.pieces = tokenizer(text) if tokenizer else re.findall(r"\S+\s*", text)
        self.rng = np.random.default_rng(seed)

    def _span(self, start: int, n_pieces: int) -> str:
        k = len(self.pieces)
        return "".join(self.pieces[(start + i) % k] for i in range(n_pieces)).strip()

    def _count(self, n_tokens: int) -> int:
        return n_tokens if self.exact else max(1, round(n_tokens * WORDS_PER_TOKEN))

    def prompt(self, n_tokens: int, start: int | None = None) -> str:
        n_tokens = positive_int("prompt tokens", n_tokens, maximum=1_000_000)
        start = int(self.rng.integers(len(self.pieces))) if start is None else start
        return self._span(start, self._count(n_tokens))

    def prompts(self, count: int, n_tokens: int, *, shared_prefix_tokens: int = 0, prefix_groups: int = 1) -> list[str]:
        """`count` prompts, each a distinct n_tokens after a shared prefix of shared_prefix_tokens: `prefix_groups`
        different prefixes (N system prompts x M suffixes, as vLLM's prefix_repetition dataset, which shuffles
        them), taken in turn, so request i carries prefix i mod N."""
        count = positive_int("requests", count, maximum=1_000_000)
        groups = positive_int("prefix groups", prefix_groups, maximum=1_000)
        prefixes = [""] * groups
        if shared_prefix_tokens:  # the groups start evenly apart in the corpus: distinct texts, not one shifted
            n = self._count(shared_prefix_tokens)
            prefixes = [self._span(g * len(self.pieces) // groups, n) + "\n\n" for g in range(groups)]
        return [prefixes[i % groups] + self.prompt(n_tokens) for i in range(count)]

    def conversations(self, count: int, turns: int, n_tokens: int) -> list[list[str]]:
        """`count` conversations of `turns` questions, each question a distinct n_tokens (load.run_conversations
        sends each turn after the whole conversation so far, so what the server reads grows turn by turn)."""
        turns = positive_int("turns", turns, maximum=1_000)
        asked = self.prompts(positive_int("conversations", count, maximum=1_000_000) * turns, n_tokens)
        return [asked[c * turns : (c + 1) * turns] for c in range(count)]
