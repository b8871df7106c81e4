"""The retry loop over real failures: a port nobody listens on refuses at once, and the rule decides the rest."""

import openai

from labs_lib.doctor.retry import MAX_RETRIES, retry_delay, retrying


def _dead_port_call():
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-none", max_retries=0)
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1)


def test_a_refused_connection_is_sent_again_as_the_rule_says_and_the_waits_add_up():
    retried = retrying("dead port", _dead_port_call, retry_delay)
    assert len(retried.outcomes) == MAX_RETRIES + 1
    assert all(o.status is None and o.error_type == "openai.APIConnectionError" for o in retried.outcomes)
    assert retried.waited_s == sum(retry_delay(None, n) for n in range(MAX_RETRIES))
    row = retried.row()
    assert row["attempts"] == 3 and row["total s"] >= row["waited s"] > 0


def test_a_rule_that_says_stop_sends_the_request_once():
    asked = []

    def never(status, retries_done):
        asked.append((status, retries_done))

    retried = retrying("dead port", _dead_port_call, never)
    assert len(retried.outcomes) == 1 and retried.waited_s == 0 and asked == [(None, 0)]
