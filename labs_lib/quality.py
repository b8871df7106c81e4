"""Quality of a model variant, measured: exact teacher-forced log-probabilities of a fixed text.

llama.cpp: the text's token ids are forced with a grammar (`root ::= <[id1]> <[id2]> …`) while the
server reports, for each position, the log-probability of the forced token from the raw logits and
its own top-1 choice (`n_probs`). vLLM: `prompt_logprobs` on /v1/completions. From these:
mean NLL (nats/token), perplexity = exp(NLL), and agreement with a reference variant: top-1 agreement,
mean |Δ log-prob|, and the length of the identical greedy prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx
import numpy as np

from .errors import LabsError


@dataclass
class Scores:
    token_ids: list[int]  # the scored text's tokens (BOS excluded)
    logprobs: np.ndarray  # log p(token_i | BOS, tokens_<i), natural log
    top1_ids: list[int]  # the model's own most likely token at each position

    @property
    def nll(self) -> float:
        return float(-self.logprobs.mean())

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    @property
    def top1_accuracy(self) -> float:
        return float(np.mean([a == b for a, b in zip(self.top1_ids, self.token_ids, strict=True)]))


def text_tokens(root_url: str, text: str, max_tokens: int | None = None, headers: dict | None = None) -> tuple[int, list[int]]:
    """(BOS id, the text's token ids) from a llama.cpp server's tokenizer."""
    resp = httpx.post(f"{root_url}/tokenize", json={"content": text, "add_special": True}, headers=headers or {}, timeout=60, trust_env=False)
    resp.raise_for_status()
    ids = [t if isinstance(t, int) else t["id"] for t in resp.json()["tokens"]]
    return ids[0], ids[1:][:max_tokens] if max_tokens else ids[1:]


def score_llamacpp(root_url: str, bos: int, token_ids: list[int], *, headers: dict | None = None, timeout_s: float = 600) -> Scores:
    """Teacher-forced log-probs of token_ids after BOS, one decode step per token (exact, no sampling)."""
    grammar = "root ::= " + " ".join(f"<[{i}]>" for i in token_ids)
    body = {"prompt": [bos], "n_predict": len(token_ids), "grammar": grammar, "n_probs": 1, "temperature": 0,
            "cache_prompt": False, "return_tokens": True}
    resp = httpx.post(f"{root_url}/completion", json=body, headers=headers or {}, timeout=timeout_s, trust_env=False)
    resp.raise_for_status()
    probs = resp.json()["completion_probabilities"]
    got = [p["id"] for p in probs]
    if got != token_ids:
        raise LabsError(f"the grammar did not force the text: got {len(got)} tokens, {sum(a != b for a, b in zip(got, token_ids, strict=False))} differ")
    return Scores(token_ids, np.array([p["logprob"] for p in probs]), [p["top_logprobs"][0]["id"] for p in probs])


def score_vllm(base_url: str, model: str, bos: int | None, token_ids: list[int], *, headers: dict | None = None,
               timeout_s: float = 600) -> Scores:
    """The same from vLLM's prompt_logprobs (each position's dict holds the prompt token and the top-1)."""
    prompt = ([bos] if bos is not None else []) + token_ids
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}
    resp = httpx.post(f"{base_url}/completions", json=body, headers=headers or {}, timeout=timeout_s)
    resp.raise_for_status()
    per_position = resp.json()["choices"][0]["prompt_logprobs"][len(prompt) - len(token_ids):]
    logprobs, top1 = [], []
    for token, options in zip(token_ids, per_position, strict=True):
        logprobs.append(options[str(token)]["logprob"])
        top1.append(int(min(options, key=lambda k: options[k].get("rank") or 1e9)))
    return Scores(token_ids, np.array(logprobs), top1)


def greedy_tokens(root_url: str, prompt_ids: list[int], n: int, headers: dict | None = None) -> list[int]:
    body = {"prompt": prompt_ids, "n_predict": n, "temperature": 0, "cache_prompt": False, "return_tokens": True, "ignore_eos": True}
    resp = httpx.post(f"{root_url}/completion", json=body, headers=headers or {}, timeout=600, trust_env=False)
    resp.raise_for_status()
    return resp.json()["tokens"]


def identical_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def agreement(reference: Scores, other: Scores) -> dict[str, float]:
    """How closely `other` follows `reference` on the same text."""
    return {"delta_nll": other.nll - reference.nll,
            "top1_agreement": float(np.mean([a == b for a, b in zip(reference.top1_ids, other.top1_ids, strict=True)])),
            "mean_abs_delta_logprob": float(np.mean(np.abs(reference.logprobs - other.logprobs)))}
