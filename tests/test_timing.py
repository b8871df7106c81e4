"""The timing definitions, the stream parser, summaries and the articles' snippets (no server needed)."""

import json

import numpy as np
import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labs_lib import naive
from labs_lib.load import SLO, summarize
from labs_lib.timing import RequestRecord, RequestSpec, StreamTimer, metrics_from_times

REAL = json.loads((FIXTURES / "streams" / "llamacpp_chat.json").read_text())
REAL_VLLM = json.loads((FIXTURES / "streams" / "vllm_chat_0.32.0.json").read_text())  # tools/record_stream.py


def chunk(content=None, role=None, finish=None) -> str:
    delta = {}
    if role:
        delta["role"] = role
        delta["content"] = content if content is not None else ""
    elif content is not None:
        delta["content"] = content
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE = "data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}})

# Constructed: a server that sends its role-only chunk at once, before prefill, as a gateway may (seed 000 warns of
# it). vLLM and llama.cpp do not: they send the role with the first token (the recordings REAL and REAL_VLLM).
ROLE_EARLY = [
    (0.005, chunk(role="assistant")),
    (0.300, chunk("Hello")),
    (0.320, chunk(" there")),
    (0.340, chunk(",")),
    (0.360, chunk(" friend")),
    (0.361, chunk(finish="length")),
    (0.362, USAGE),
    (0.363, "data: [DONE]"),
]


def feed(trace, **kw) -> RequestRecord:
    timer = StreamTimer(**kw)
    for t, line in trace:
        timer.feed(line, t)
    return timer.finish()


def test_ttft_ignores_the_role_only_chunk():
    rec = feed(ROLE_EARLY)
    assert rec.ttft_ms == pytest.approx(300.0)
    # vLLM's benchmark client's TTFT, recorded beside: the role-only chunk ends it; the usage chunk (choices [])
    # never does
    assert rec.ttft_first_choice_ms == pytest.approx(5.0)
    assert feed(ROLE_EARLY[1:]).ttft_first_choice_ms == pytest.approx(300.0)
    assert feed([(0.1, USAGE), (0.2, "data: [DONE]")]).ttft_first_choice_ms is None
    assert naive.seed001_first_chunk(ROLE_EARLY, 0.363)["ttft_ms"] == pytest.approx(5.0)  # the article's way


def test_vllm_clients_itl_counts_every_chunk_with_choices():
    """vllm bench serve's ITL (vllm/benchmarks/lib/endpoint_request_func.py): a gap between every two chunks whose
    `choices` is non-empty, the role chunk and the text-less finish chunk included; the usage chunk (choices []) is
    not one. The harness's ITL keeps only the gaps between chunks with text."""
    rec = feed(ROLE_EARLY)
    assert rec.itl_ms == pytest.approx([20, 20, 20])
    assert rec.itl_choice_chunks_ms == pytest.approx([295, 20, 20, 20, 1])
    assert feed([(0.1, USAGE), (0.2, "data: [DONE]")]).itl_choice_chunks_ms == []
    from labs_lib.load import definition_forms

    forms = definition_forms(rec)  # lab 02's table: the same request both ways, one row each
    harness, client = forms.index
    assert forms.loc[harness, "TTFT ms"] == pytest.approx(300) and forms.loc[client, "TTFT ms"] == pytest.approx(5)
    assert list(forms["ITL gaps"]) == [3, 5]
    assert forms.loc[client, "ITL min ms"] == pytest.approx(1) and forms.loc[harness, "ITL p50 ms"] == pytest.approx(20)


def test_definitions_on_a_constructed_stream():
    rec = feed(ROLE_EARLY)
    assert rec.e2e_ms == pytest.approx(360.0)  # last token-bearing chunk, not the usage chunk
    assert rec.output_tokens == 4 and not rec.tokens_estimated
    assert rec.tpot_ms == pytest.approx((360 - 300) / 3)
    assert rec.itl_ms == pytest.approx([20, 20, 20])
    assert rec.finish_reason == "length" and rec.text == "Hello there, friend" and rec.ok


def test_multi_token_chunks_separate_itl_from_tpot():
    trace = [
        (0.1, chunk("ab")),
        (0.2, chunk("cd")),
        (0.3, chunk("ef")),
        (0.31, USAGE.replace('"completion_tokens": 4', '"completion_tokens": 6')),
        (0.32, "data: [DONE]"),
    ]
    rec = feed(trace)
    assert rec.output_tokens == 6 and rec.chunks == 3
    assert np.median(rec.itl_ms) == pytest.approx(100) and rec.tpot_ms == pytest.approx(200 / 5)


def test_no_usage_means_counted_chunks_marked_estimated():
    trace = [t for t in ROLE_EARLY if "usage" not in t[1]]
    rec = feed(trace)
    assert rec.tokens_estimated and rec.output_tokens == 4


def test_cut_stream_and_error_chunks_are_recorded_failures():
    cut = feed(ROLE_EARLY[:3])
    assert not cut.ok and "before [DONE]" in cut.error and "usage" in cut.error
    err = feed([(0.1, 'data: {"error": {"message": "boom"}}'), (0.2, "data: [DONE]")])
    assert not err.ok and "boom" in err.error


def test_a_real_llamacpp_stream():
    rec = feed(REAL["trace"])
    assert rec.ok and rec.output_tokens == 12 and rec.chunks == 12
    first_content = next(t for t, line in REAL["trace"] if '"content":"' in line and '"content":""' not in line)
    assert rec.ttft_ms == pytest.approx(first_content * 1000)
    assert rec.server_prompt_ms is not None and rec.server_decode_tokens == 12


def test_a_real_vllm_stream_sends_its_role_with_the_first_token():
    """vLLM 0.32's stream, recorded: the role chunk comes after prefill, with the first token, so TTFT at the first
    chunk (vLLM's client, seed 001) and at the first content (the harness) agree to the millisecond here; ROLE_EARLY
    above is the case where they do not."""
    rec = feed(REAL_VLLM["trace"])
    assert rec.ok and rec.output_tokens == 12 and not rec.tokens_estimated and rec.finish_reason == "length"
    role_s = next(t for t, line in REAL_VLLM["trace"] if '"role":"assistant"' in line)
    first_content_s = next(t for t, line in REAL_VLLM["trace"] if '"content":"' in line and '"content":""' not in line)
    assert 0 <= first_content_s - role_s < 0.005 and rec.ttft_ms == pytest.approx(first_content_s * 1000)
    assert rec.ttft_first_choice_ms == pytest.approx(rec.ttft_ms, abs=5.0)
    assert len(rec.itl_ms) == 11 and rec.tpot_ms == pytest.approx((rec.e2e_ms - rec.ttft_ms) / 11)


def test_metrics_from_times_edge_cases():
    assert metrics_from_times([], 0) == (None, None, None, [])
    ttft, tpot, e2e, itl = metrics_from_times([0.5], 1)
    assert (ttft, tpot, e2e, itl) == (500, None, 500, [])


def test_summary_statistics_and_goodput():
    recs = [
        RequestRecord(
            request_id=i, ttft_ms=t, tpot_ms=10.0, e2e_ms=t + 100, itl_ms=[10.0] * 3, prompt_tokens=10, output_tokens=11
        )
        for i, t in enumerate([100.0, 200.0, 300.0, 400.0])
    ]
    recs.append(RequestRecord(request_id=9, error="HTTP 500: boom"))
    s = summarize(recs, duration_s=2.0, slo=SLO(ttft_ms=250))
    assert (s.completed, s.failed) == (4, 1)
    assert s.output_throughput == pytest.approx(44 / 2) and s.total_token_throughput == pytest.approx(84 / 2)
    assert s.ttft_ms.p50 == pytest.approx(250) and s.ttft_ms.p99 == pytest.approx(np.percentile([100, 200, 300, 400], 99))
    assert s.goodput == pytest.approx(2 / 2.0) and s.errors == {"HTTP 500: boom": 1}
    flat = s.flat()  # the columns tables and results files use, named as `vllm bench serve` names them
    assert flat["p50_ttft_ms"] == s.ttft_ms.p50 and flat["mean_itl_ms"] == pytest.approx(10.0) and "errors" not in flat


def test_request_body():
    body = RequestSpec("hi", 5, system="be brief", ignore_eos=True, extra={"cache_prompt": False}).body("m")
    assert body["messages"][0] == {"role": "system", "content": "be brief"} and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["cache_prompt"] is False and body["model"] == "m"
    assert RequestSpec([1, 2, 3], 1, api="completions").body(None)["prompt"] == [1, 2, 3]


def test_naive_methods_overcount_on_a_real_stream():
    trace, end = REAL["trace"], REAL["end_s"]
    seen = naive.as_the_seed_receives(trace)  # no seed asked for the usage chunk: it is the one line taken out
    assert len(seen) == len(trace) - 1 and not any('"choices":[]' in line.replace(" ", "") for _, line in seen)
    assert naive.seed002_data_lines(seen, end)["output_tokens"] == 12 + 2  # role and finish chunks counted
    assert naive.seed004_lines_tpot(seen, end)["output_tokens"] == 12 + 3  # and [DONE]
    assert naive.seed002_data_lines(trace, end)["output_tokens"] == 12 + 3  # with the usage chunk, one more
    text = "".join(
        json.loads(line[5:])["choices"][0]["delta"].get("content") or ""
        for _, line in trace
        if line.startswith("data: {") and json.loads(line[5:])["choices"]
    )
    assert naive.seed000_len_over_1_5(seen, end)["output_tokens"] == pytest.approx(len(text) / 1.5)


def test_seed003_unstreamed_times_the_whole_body():
    """Seed 003's script as written gets one JSON body: the first line is the answer, one line one 'token'."""
    body = [(0.84, b'{"choices":[{"message":{"content":"..."}}],"usage":{"completion_tokens":64}}')]
    got = naive.seed003_unstreamed(body, 0.84)
    assert got == {
        "ttft_ms": pytest.approx(840),
        "output_tokens": 1,
        "decode_tokens_per_s": pytest.approx(1 / 0.84),
        "end_ms": pytest.approx(840),
    }
    assert naive.seed003_unstreamed([], 0.1)["ttft_ms"] is None


def test_network_reads_split_anywhere_give_the_same_record():
    """feed_bytes: lines cut across reads, CRLF endings, a last line without its newline."""
    body = "".join(line + "\r\n\r\n" for _, line in ROLE_EARLY).encode()
    whole = StreamTimer()
    whole.feed_bytes(body, 0.5)
    expected = whole.finish()
    last_token_line_end = body.index(b"friend") + body[body.index(b"friend") :].index(b"\n")
    for cut in (1, 7, 50, len(body) // 2, len(body) - 3):
        timer = StreamTimer()
        timer.feed_bytes(body[:cut], 0.1)
        timer.feed_bytes(body[cut:].rstrip(b"\r\n"), 0.2)  # the stream closes without a final newline
        rec = timer.finish()
        assert (rec.text, rec.output_tokens, rec.finish_reason, rec.ok) == (expected.text, 4, "length", True), cut
        # a line completed by the second read carries the second read's time
        assert rec.e2e_ms == pytest.approx(100.0 if cut > last_token_line_end else 200.0), cut


def test_one_clock_reading_per_network_read():
    timer = StreamTimer()
    timer.feed_bytes(("\n\n".join(line for _, line in ROLE_EARLY[1:4]) + "\n\n").encode(), 0.3)
    timer.feed_bytes(("\n\n".join(line for _, line in ROLE_EARLY[4:]) + "\n\n").encode(), 0.36)
    rec = timer.finish()
    assert rec.itl_ms == pytest.approx([0, 0, 60]) and rec.ttft_ms == pytest.approx(300)


def test_unparseable_and_error_chunks_become_record_errors():
    rec = feed([(0.1, chunk("a")), (0.2, "data: {not json"), (0.3, "data: [DONE]")])
    assert not rec.ok and "unparseable stream chunk" in rec.error
    err = "data: " + json.dumps({"error": {"message": "out of KV cache", "code": 500}})
    rec = feed([(0.1, chunk("a")), (0.2, err), (0.3, "data: [DONE]")])
    assert rec.error == "server error in stream: out of KV cache"


# ---- any malformed stream is a record, never a crash (issue 15)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["choices", "delta", "content", "usage", "text", "completion_tokens", "error", "timings", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=64), max_size=6))
def test_arbitrary_bytes_never_crash_the_reader(reads):
    timer = StreamTimer()
    for i, data in enumerate(reads):
        timer.feed_bytes(data, 0.01 * i)
    rec = timer.finish()
    assert rec.ok or (isinstance(rec.error, str) and "\n" not in rec.error)


@settings(max_examples=400, deadline=None)
@given(st.lists(JSON, max_size=5), st.booleans())
def test_arbitrary_json_chunks_become_a_record(chunks, done):
    timer = StreamTimer()
    for i, obj in enumerate(chunks):
        timer.feed("data: " + json.dumps(obj), 0.01 * i)
    if done:
        timer.feed("data: [DONE]", 1.0)
    rec = timer.finish()
    assert rec.ok or isinstance(rec.error, str)
    if rec.ok:  # a record that claims success is internally consistent
        assert rec.output_tokens is not None and rec.output_tokens >= rec.chunks


@pytest.mark.parametrize(
    "lines,reason",
    [
        (['data: {"choices":[{"delta":"x"}]}', "data: [DONE]"], "malformed stream chunk"),  # issue 15's AttributeError
        (['data: {"choices":[{"delta":{"content":5}}]}', "data: [DONE]"], "malformed stream chunk"),
        (
            [
                'data: {"choices":[{"delta":{"content":"a"}}]}',
                'data: {"choices":[],"usage":{"completion_tokens":0}}',
                "data: [DONE]",
            ],
            "usage reports 0 completion tokens for 1",
        ),
        (['data: {"choices":[{"delta":{"content":"a"}}]}', "<html><title>502 Bad Gateway</title></html>"], "before [DONE]"),
    ],
)
def test_odd_streams_give_one_line_reasons(lines, reason):
    timer = StreamTimer()
    for i, line in enumerate(lines):
        timer.feed(line, 0.01 * i)
    rec = timer.finish()
    assert not rec.ok and reason in rec.error, rec.error


def test_real_stream_variants_parse_the_same():
    """CRLF line ends, a keep-alive comment, `data:` without a space and a 1 MB chunk all read as plain SSE."""
    big = "y" * 1_000_000
    body = (
        ": keep-alive\r\n\r\n"
        'data:{"choices":[{"delta":{"content":"a"}}]}\r\n\r\n'
        f'data: {{"choices":[{{"delta":{{"content":"{big}"}}}}]}}\r\n\r\n'
        'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\r\n\r\n'
        "data: [DONE]\r\n\r\n"
    ).encode()
    timer = StreamTimer()
    for i in range(0, len(body), 4096):  # cut anywhere, as network reads are
        timer.feed_bytes(body[i : i + 4096], i / 1e6)
    rec = timer.finish()
    assert rec.ok, rec.error
    assert rec.chunks == 2 and rec.output_tokens == 2 and rec.text == "a" + big


def test_each_sse_line_of_a_chat_stream_has_a_kind():
    from labs_lib.sse import chunk_kind

    role = 'data: {"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
    lines = {
        role: "role",
        'data: {"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}': "content",
        'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}': "finish",
        'data: {"choices":[],"usage":{"completion_tokens":2}}': "usage",
        "data: [DONE]": "[DONE]",
        "data: {not json": "other",
        ": keep-alive": "other",
    }
    assert {line: chunk_kind(line) for line in lines} == lines
