"""Lab 02's take-home streaming timer, run as a participant copies it out of the notebook: against a real
engine it reports TTFT, TPOT and the server's token count, and a wrong key is an HTTP 401 at once, not a
TypeError about a missing usage chunk."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import REPO, fake_key

from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine

pytestmark = pytest.mark.engine


def take_home_timer():
    """The notebook cell's `time_stream` (its own cell: the lab's call to it is the next one)."""
    cells = json.loads((REPO / "notebooks" / "02_streaming_timing.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if c["cell_type"] == "code" and "def time_stream(" in "".join(c["source"]))
    namespace: dict = {}
    assert "\nmine = " not in source  # the cell holds the function alone: what a participant copies out
    exec(source, namespace)  # the function is self-contained: json, time, httpx
    return namespace["time_stream"]


def test_the_take_home_timer_measures_and_names_a_wrong_key(monkeypatch):
    time_stream = take_home_timer()
    monkeypatch.setenv("LABS_TIMER_TEST_KEY", fake_key("timertest"))
    with LlamaCppEngine(EngineConfig(api_key_env="LABS_TIMER_TEST_KEY")) as engine:
        got = time_stream(engine.base_url, engine.model_id, "Name three colours.", 8, engine.api_key)
        with pytest.raises(httpx.HTTPStatusError) as wrong:
            time_stream(engine.base_url, engine.model_id, "Name three colours.", 8, "not-the-key")
        one = time_stream(engine.base_url, engine.model_id, "Name three colours.", 1, engine.api_key)
    assert wrong.value.response.status_code == 401
    assert 1 <= got["tokens"] <= 8  # the server's count (usage), not chunks
    assert got["ttft_ms"] > 0 and got["tpot_ms"] >= 0
    # one token has no time between tokens: no TPOT (the lab's goodput build-it calls a TPOT of 0 here a mistake)
    assert one["tokens"] == 1 and one["ttft_ms"] > 0 and one["tpot_ms"] is None
