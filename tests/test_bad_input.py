"""Malformed input, across the CLI, the library and notebook parameters: each gives one line naming
the bad value and what is allowed (CLI: exit 2), never a traceback, and nothing already saved is
lost. docs/reliability.md counts the rows of these tables."""

from __future__ import annotations

import hashlib
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import assert_one_line_error, fake_key, run_cli

from labs_lib import runner
from labs_lib.endpoints import Endpoint, resolve
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.errors import BadInput
from labs_lib.kv_math import kv_cache, plan_capacity
from labs_lib.load import run_blocking, run_load
from labs_lib.models import load_model
from labs_lib.sweep import load_grid
from labs_lib.timing import RequestSpec

KEY = fake_key("pasted")


def files(tmp: Path) -> dict[str, str]:
    (tmp / "bad.yaml").write_text("name: [unclosed\n")
    (tmp / "axis.yaml").write_text(
        "name: x\nengine: llamacpp\nbase: {ctx: 512}\naxes: {warp_drive: [1, 2]}\nworkloads: "
        "[{name: w, concurrency: [1], requests: 1, prompt_tokens: 8, max_tokens: 4}]\n"
    )
    (tmp / "bad.json").write_text("{not json")
    (tmp / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))  # no layers, no heads
    (tmp / "truncated.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 5)  # the header of a GGUF, cut short
    (tmp / "notgguf.gguf").write_bytes(b"<!DOCTYPE html> a download that went wrong " * 4)
    return {k: str(tmp / k) for k in ("bad.yaml", "axis.yaml", "bad.json", "config.json", "truncated.gguf", "notgguf.gguf")}


# (id, argv with {file} placeholders, words the one line must contain)
CLI_CASES = [
    ("kv unknown model", ["kv", "--model", "llama-9-1t", "--seq-len", "128"], ["llama-9-1t"]),
    ("kv zero seq-len", ["kv", "--model", "llama-2-7b", "--seq-len", "0"], ["0", "seq"]),
    ("kv negative batch", ["kv", "--model", "llama-2-7b", "--seq-len", "128", "--batch", "-3"], ["-3"]),
    ("kv non-numeric seq-len", ["kv", "--model", "llama-2-7b", "--seq-len", "lots"], ["lots"]),
    ("kv huge batch", ["kv", "--model", "llama-2-7b", "--seq-len", "128", "--batch", "1000000000000"], ["1000000000000"]),
    ("kv unknown dtype", ["kv", "--model", "llama-2-7b", "--seq-len", "128", "--kv-dtype", "fp7"], ["fp7"]),
    ("kv tp that splits no heads", ["kv", "--model", "llama-2-7b", "--seq-len", "128", "--tp", "3"], ["3"]),
    ("kv truncated GGUF", ["kv", "--model", "{truncated.gguf}", "--seq-len", "128"], ["truncated.gguf"]),
    ("kv file that is not a GGUF", ["kv", "--model", "{notgguf.gguf}", "--seq-len", "128"], ["notgguf.gguf"]),
    ("kv invalid HF config", ["kv", "--model", "{config.json}", "--seq-len", "128"], ["config.json"]),
    (
        "capacity utilization over 1",
        ["capacity", "--model", "llama-2-7b", "--gpu", "H100-SXM", "--max-model-len", "4096", "--gpu-memory-utilization", "1.5"],
        ["1.5"],
    ),
    ("capacity unknown GPU", ["capacity", "--model", "llama-2-7b", "--max-model-len", "4096", "--gpu", "RTX-9090"], ["RTX-9090"]),
    ("bench unknown endpoint", ["bench", "--endpoint", "nowhere"], ["nowhere"]),
    ("bench malformed URL", ["bench", "--base-url", "ftp://example"], ["ftp://example"]),
    ("bench port out of range", ["bench", "--base-url", "http://localhost:99999/v1"], ["99999"]),
    ("bench zero concurrency", ["bench", "--base-url", "http://127.0.0.1:9/v1", "--concurrency", "0"], ["0"]),
    ("bench non-numeric concurrency", ["bench", "--base-url", "http://127.0.0.1:9/v1", "--concurrency", "1,x"], ["x"]),
    ("bench unknown engine", ["bench", "--endpoint", "local", "--engine", "tgi"], ["tgi"]),
    ("bench zero turns", ["bench", "--base-url", "http://127.0.0.1:9/v1", "--turns", "0"], ["--turns", "0"]),
    (
        "bench unknown lengths",
        ["bench", "--base-url", "http://127.0.0.1:9/v1", "--lengths", "sharegpt"],
        ["sharegpt", "azure-conv-2023"],
    ),
    (
        "bench zero length scale",
        ["bench", "--base-url", "http://127.0.0.1:9/v1", "--lengths", "azure-conv-2023", "--length-scale", "0"],
        ["--length-scale", "0"],
    ),
    (
        "bench lengths with the capacity search",
        [
            "bench",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--lengths",
            "azure-conv-2023",
            "--slo-capacity",
            "--slo-ttft-ms",
            "500",
        ],
        ["--lengths", "--slo-capacity"],
    ),
    (
        "bench lengths with turns",
        ["bench", "--base-url", "http://127.0.0.1:9/v1", "--lengths", "azure-conv-2023", "--turns", "2"],
        ["--lengths", "--turns"],
    ),
    (
        "bench turns with a rate",
        ["bench", "--base-url", "http://127.0.0.1:9/v1", "--turns", "3", "--rate", "2"],
        ["--turns", "--rate"],
    ),
    (
        "bench key pasted as the variable name",
        ["bench", "--endpoint", "taotoken", "--api-key-env", KEY],
        ["key variable", "masked"],
    ),
    ("sweep missing grid", ["sweep", "--grid", "/nonexistent/grid.yaml"], ["/nonexistent/grid.yaml"]),
    ("sweep invalid YAML", ["sweep", "--grid", "{bad.yaml}"], ["bad.yaml"]),
    ("sweep unknown axis", ["sweep", "--grid", "{axis.yaml}"], ["warp_drive"]),
    ("run unknown lab", ["run", "--only", "09"], ["09"]),
    ("run bad notebook parameter", ["run", "--only", "01", "-p", "seq_len", "-5"], ["seq_len", "-5"]),
    ("run notebook URL parameter", ["run", "--only", "02", "-p", "endpoint", "ftp://x"], ["ftp://x"]),
    ("run notebook list parameter", ["run", "--only", "05", "-p", "variants", '["Q3"]'], ["Q3"]),
    ("run secret parameter", ["run", "-p", "api_key", KEY], ["api_key"]),
    ("quant unknown variant", ["quant", "--variants", "Q3_K", "--quick"], ["Q3_K"]),
    ("doctor missing config", ["doctor", "--config", "/nonexistent/config.toml"], ["/nonexistent/config.toml"]),
    ("doctor invalid config", ["doctor", "--config", "{bad.json}"], ["bad.json"]),
    ("doctor non-numeric timeout", ["doctor", "--base-url", "http://127.0.0.1:9/v1", "--timeout", "abc"], ["--timeout", "abc"]),
    ("doctor zero timeout", ["doctor", "--base-url", "http://127.0.0.1:9/v1", "--timeout", "0"], ["--timeout", "0"]),
    ("serve negative timeout", ["serve", "--timeout", "-5"], ["--timeout", "-5"]),
    ("serve zero context", ["serve", "--ctx", "0"], ["0"]),
    ("serve unknown KV type", ["serve", "--kv-dtype", "q2"], ["q2"]),
    ("serve unknown engine", ["serve", "--engine", "tgi"], ["tgi", "llamacpp, vllm"]),
    ("serve llama.cpp option on vLLM", ["serve", "--engine", "vllm", "--ctx", "1024"], ["--ctx", "--engine llamacpp only"]),
    ("serve vLLM option on llama.cpp", ["serve", "--max-num-seqs", "2"], ["--max-num-seqs", "--engine vllm only"]),
]


@pytest.fixture(scope="module")
def cli_answers(request, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """The selected CLI cases, run four at a time (each is a fresh interpreter, most of its second spent importing:
    one after another they were the fast tier's largest share). Each case gets a folder of its own files."""
    selected = {item.callspec.id for item in request.session.items if getattr(item, "originalname", "") == "test_cli"}

    cases = [c for c in CLI_CASES if c[0] in selected]
    folders = {c[0]: tmp_path_factory.mktemp("cli") for c in cases}  # here, not in the threads: mktemp is not thread-safe

    def answer(case: tuple) -> subprocess.CompletedProcess:
        paths = files(folders[case[0]])
        argv = [paths[a[1:-1]] if a.startswith("{") and a[1:-1] in paths else a for a in case[1]]
        return run_cli(*argv, timeout=120)

    with ThreadPoolExecutor(4) as pool:
        return dict(zip([c[0] for c in cases], pool.map(answer, cases), strict=True))


@pytest.mark.parametrize("case_id, needles", [(c[0], c[2]) for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli(case_id, needles, cli_answers):
    done = cli_answers[case_id]
    assert_one_line_error(done, *needles)
    assert KEY not in done.stderr + done.stdout


LIBRARY_CASES = [
    ("kv_cache zero batch", lambda: kv_cache("llama-2-7b", 1024, 0, "fp16"), "0"),
    ("kv_cache unknown dtype", lambda: kv_cache("llama-2-7b", 1024, 1, "int3"), "int3"),
    ("plan_capacity negative memory", lambda: plan_capacity("llama-2-7b", available_kv_gib=-1, max_model_len=4096), "-1"),
    ("EngineConfig negative ctx", lambda: EngineConfig(ctx=-1).validated(), "-1"),
    ("llama.cpp engine unknown KV type", lambda: LlamaCppEngine(EngineConfig(kv_cache_dtype="q2")), "q2"),
    ("load_model unknown", lambda: load_model("gpt-7"), "gpt-7"),
    ("resolve malformed URL", lambda: resolve("http://"), "http://"),
    ("run_load no requests", lambda: run_blocking(run_load(Endpoint("x", "http://127.0.0.1:9/v1", "m"), [], concurrency=1)), "0"),
    (
        "run_load zero rate",
        lambda: run_blocking(run_load(Endpoint("x", "http://127.0.0.1:9/v1", "m"), [RequestSpec("x")], rate=0)),
        "0",
    ),
    (
        "load_grid empty axis",
        lambda: load_grid(
            {
                "name": "g",
                "engine": "llamacpp",
                "axes": {"parallel": []},
                "workloads": [{"name": "w", "concurrency": [1], "requests": 1}],
            }
        ),
        "parallel",
    ),
]


@pytest.mark.parametrize("call, needle", [c[1:] for c in LIBRARY_CASES], ids=[c[0] for c in LIBRARY_CASES])
def test_library(call, needle):
    with pytest.raises(BadInput) as info:
        call()
    message = str(info.value)
    assert len(message.splitlines()) == 1 and needle in message and "allowed" in message


NOTEBOOK_CASES = [
    ("lab01 zero seq_len", "01", {"seq_len": 0}, "seq_len"),
    ("lab01 unknown model", "01", {"model": "nope-13b"}, "nope-13b"),
    ("lab02 non-numeric repeats", "02", {"repeats": "three"}, "three"),
    ("lab03 empty concurrency list", "03", {"concurrency_levels": []}, "concurrency_levels"),
    ("lab03 an unknown trace", "03", {"lengths": "no-such-trace"}, "no-such-trace"),
    ("lab04 negative SLO", "04", {"slo_ttft_ms": -100}, "-100"),
    ("lab04 a device that costs nothing", "04", {"usd_per_device_hour": 0}, "usd_per_device_hour"),
    ("lab05 unknown KV dtype", "05", {"kv_dtypes": ["q2"]}, "q2"),
    ("lab06 tiny context", "06", {"ctx_per_request": 8}, "8"),
    ("any lab: quick not a flag", "04", {"quick": "perhaps"}, "perhaps"),
]


@pytest.mark.parametrize("lab, values, needle", [c[1:] for c in NOTEBOOK_CASES], ids=[c[0] for c in NOTEBOOK_CASES])
def test_notebook_parameters(lab, values, needle):
    notebook = runner.discover(lab)[0]
    with pytest.raises(BadInput) as info:  # the runner's own check: the notebook's defaults, overridden by `values`
        runner.check_parameters(notebook, runner.declared_parameters(notebook), values)
    assert len(str(info.value).splitlines()) == 1 and needle in str(info.value)


def test_there_are_at_least_25_cases():
    assert len(CLI_CASES) + len(LIBRARY_CASES) + len(NOTEBOOK_CASES) >= 25


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_nothing_saved_is_lost(tmp_path):
    """A results file of another schema is refused, not overwritten; a bad sweep, bench or run leaves
    existing results and executed notebooks as they were."""
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(json.dumps({"schema": "someone-else/2", "x": 1}) + "\n")
    grid = Path(__file__).resolve().parents[1] / "data" / "grids" / "cpu_batching.yaml"
    before = digest(foreign)
    assert_one_line_error(run_cli("sweep", "--grid", str(grid), "--quick", "--out", str(foreign)), "schema")
    assert digest(foreign) == before

    saved = tmp_path / "bench.json"
    saved.write_text('{"kept": true}')
    assert_one_line_error(
        run_cli("bench", "--base-url", "http://127.0.0.1:9/v1", "--concurrency", "-1", "--out", str(saved)), "-1"
    )
    assert saved.read_text() == '{"kept": true}'

    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "01_kv_cache_memory.ipynb").write_text("an earlier executed copy")
    assert_one_line_error(run_cli("run", "--only", "01", "-p", "batch", "0", "--out", str(runs)), "batch")
    assert (runs / "01_kv_cache_memory.ipynb").read_text() == "an earlier executed copy"
