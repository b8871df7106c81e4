"""The articles' printed code, run and read as written (data/article_code/): a launcher that does not start is a
verdict, and so is a setting a script assigns and never uses.

Seed 003's launcher runs in the installed vLLM's own interpreter (`python -c`, offline: nothing is downloaded), once
as printed and once with each refused keyword argument taken out, until it reaches a failure of another kind; each
failure is one line. Its model path (a 70B checkpoint) cannot exist here: where the shipped model's copy for vLLM has
been built, that path stands in, so the run gets past the model to the launcher's own calls. The result depends
only on the vLLM installed, so it is kept in the cache per version.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
from dataclasses import asdict, dataclass

import pandas as pd

from .paths import DATA_DIR, cache_dir

CODE_DIR = DATA_DIR / "article_code"
ARTICLE_MODEL_PATH = "/data/models/llama-2-70b-chat-hf"

# Runs the launcher's text as a main module would, then again without the keyword argument it was refused; prints a
# JSON line as each attempt begins ({"removed": the line taken out, or null}) and one as it ends ({"error": "Type:
# message"}). An attempt that never ends has started a server: the caller stops it (its whole process group).
_DRIVER = r"""
import json, re, sys
text = sys.stdin.read()
removed = None
for attempt in range(4):
    print(json.dumps({"removed": removed}), flush=True)
    try:
        exec(compile(text, "seed003_launcher.py", "exec"), {"__name__": "__main__"})
        error = "it returned without serving"
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    print(json.dumps({"error": error}), flush=True)
    bad = re.search(r"unexpected keyword argument '(\w+)'", error)
    if not bad:
        break
    removed = next(line.strip() for line in text.splitlines() if line.strip().startswith(bad.group(1) + "="))
    text = "\n".join(line for line in text.splitlines() if line.strip() != removed)
"""


@dataclass(frozen=True)
class LauncherRun:
    """One attempt at seed 003's launcher: the line taken out before it (None: as printed) and how it ended."""

    removed: str | None
    error: str | None  # "TypeError: …" (one line); None: still serving when stopped (it started)


def launcher_runs(timeout_s: float = 300.0) -> tuple[str, list[LauncherRun]] | None:
    """(what it ran on, each attempt) for seed 003's launcher; None where vLLM is not installed (make setup-vllm).
    An import of vLLM, about 10 s on 2 cores, the first time for each installed version."""
    from .engines.model_files import hf_model_dir
    from .engines.vllm import find_vllm

    found = find_vllm()
    if found is None:
        return None
    text = (CODE_DIR / "seed003_launcher.txt").read_text()
    stand_in = (hf_model_dir() / "config.json").exists()  # the article's 70B path cannot exist here
    if stand_in:
        text = text.replace(ARTICLE_MODEL_PATH, str(hf_model_dir()))
    where = f"{found.distribution} {found.version}" + (", the shipped model in place of its 70B path" if stand_in else "")
    kept = cache_dir() / f"seed003_launcher_{found.distribution}_{found.version}_{'shipped' if stand_in else 'printed'}.json"
    if kept.exists():
        return where, [LauncherRun(**r) for r in json.loads(kept.read_text())]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        [found.python, "-c", _DRIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # a launcher that works starts a server and its processes: all stopped together
    )
    try:
        out, err = proc.communicate(text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    runs = _attempts(out)
    if not runs:
        runs = [LauncherRun(None, "the interpreter itself failed: " + (err.strip().splitlines() or ["no output"])[-1])]
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps([asdict(r) for r in runs]))
    return where, runs


def _attempts(out: str) -> list[LauncherRun]:
    """The driver's lines as attempts; one begun and never ended was serving when it was stopped (error None)."""
    runs: list[LauncherRun] = []
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if "removed" in event:
            runs.append(LauncherRun(event["removed"], None))
        elif runs:
            runs[-1] = LauncherRun(runs[-1].removed, event["error"])
    return runs


def assigned_never_read(name: str) -> list[str]:
    """Module-level names the script data/article_code/<name> assigns and never reads (settings it never applies)."""
    tree = ast.parse((CODE_DIR / name).read_text())
    assigned = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return [n for n in assigned if n not in read]


def gathered_at_once(name: str) -> bool:
    """Whether the script hands every request to asyncio.gather at once (no semaphore, no worker pool)."""
    text = (CODE_DIR / name).read_text()
    return "asyncio.gather(*tasks)" in text and not re.search(r"Semaphore|Queue\(", text)


def printed_labels(name: str) -> list[str]:
    """The labels the script data/article_code/<name> prints: the text of each f-string of a print() before its first
    placeholder."""
    tree = ast.parse((CODE_DIR / name).read_text())
    labels = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print" and node.args:
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
                labels.append(str(first.values[0].value).rstrip(": "))
    return labels


def counts_tokens(name: str) -> bool:
    """Whether the script reads a token count anywhere: `usage`, or a counter it adds to as chunks arrive."""
    text = (CODE_DIR / name).read_text()
    tree = ast.parse(text)
    return "usage" in text or any(isinstance(n, ast.AugAssign) for n in ast.walk(tree))


def call_arguments(name: str, function: str) -> list[dict[str, object]]:
    """Each module-level call of `function` in data/article_code/<name>: its arguments by the parameter names of the
    script's own `def` (literal values only, as printed)."""
    tree = ast.parse((CODE_DIR / name).read_text())
    params = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function).args.args
    calls = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", None) == function
    ]
    return [
        {
            **{p.arg: ast.literal_eval(a) for p, a in zip(params, c.args, strict=False)},
            **{k.arg: ast.literal_eval(k.value) for k in c.keywords if k.arg},
        }
        for c in calls
    ]


def checks_status(name: str) -> bool:
    """Whether the script looks at a reply's HTTP status anywhere (resp.status, raise_for_status, status_code)."""
    return bool(re.search(r"\.status\b|raise_for_status|status_code", (CODE_DIR / name).read_text()))


def _bench_switch_row() -> dict:
    """Seed 001's "the script runs against local vLLM and TaoToken by changing base_url and api_key": what its own two
    calls of bench() change."""
    from .claims import row

    calls = call_arguments("seed001_bench.txt", "bench")
    changed = sorted({k for call in calls for k in call if any(other.get(k) != call[k] for other in calls)})
    return row(
        "s001-bench-switch",
        ", ".join(changed),
        f"what its {len(calls)} calls of bench() change",
        set(changed) <= {"base_url", "api_key"} or None,
        "read as printed: bench() takes the endpoint as arguments and nothing in it is tied to one server, but its own "
        "calls change the model as well: the model id is the third thing to switch (each server names its models its "
        "own way)",
    )


def _load_script_row() -> dict:
    """Seed 002's aiohttp load script, "it prints throughput and TTFT percentiles at each concurrency", as printed."""
    from .claims import row

    checked = checks_status("seed002_load.txt")
    return row(
        "s002-load-script",
        "checks each reply's status" if checked else "never checks a reply's status",
        "",
        True if checked else None,
        "read as printed (its line breaks put back): against a server that answers, it prints throughput and TTFT P50 "
        "and P99 at each concurrency. A refused request (401, 404) is counted as one with no TTFT and no tokens, and "
        "when every request is refused statistics.median raises on the empty list; its 'tokens' are SSE lines (lab 02 "
        "counts how far off that is), and its P99 of 50 requests is the slowest one",
    )


def _bench_row() -> dict:
    from .claims import row

    labels = printed_labels("seed001_bench.txt")
    counted = counts_tokens("seed001_bench.txt")
    return row(
        "s001-bench-throughput",
        "prints " + ", ".join(labels),
        "",
        counted,
        "read as printed: it counts no token (no usage, no counter; its content check is a `pass`), so it can give "
        "TTFT and total latency but no throughput, which the article's success test then asks to triple"
        if not counted
        else "read as printed: it counts tokens, so throughput can be computed",
    )


LAUNCHER = "python -m vllm.entrypoints.openai.api_server"  # the articles' launcher: `vllm serve`'s parser behind it


def command_flags(command: str) -> list[str]:
    """The `--flags` a printed shell command passes, in order (their values not included)."""
    return re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command)


def launch_commands(claim_id: str) -> list[str]:
    """The printed vLLM launch commands of the article sentences that carry `claim_id` (data/claims_index.json)."""
    from .articles import sentence_index

    seed = claim_id[1:4]
    entries = sentence_index()["articles"][seed]
    return [e["text"] for e in entries if claim_id in e.get("ids", []) and LAUNCHER in e["text"]]


def _launch_row(claim_id: str, version: str, flags: frozenset[str]) -> dict:
    from .claims import row

    commands = launch_commands(claim_id)
    passed = [f for c in commands for f in command_flags(c)]
    refused = sorted({f for f in passed if f not in flags})
    return row(
        claim_id,
        f"refused: {', '.join(refused)}" if refused else f"all {len(set(passed))} flags accepted",
        "",
        not refused,
        f"the {len(commands)} commands' flags ({', '.join(dict.fromkeys(passed))}) against vLLM {version}'s own "
        f"`--help=all` (their values are checked when the engine starts). `{LAUNCHER}` still runs the server in vLLM 0.32 but warns that it is deprecated: `vllm serve`",
    )


def _backend_flag_row(version: str, flags: frozenset[str]) -> dict:
    from .claims import row

    named = {flag: flag in flags for flag in ("--attention-backend", "--backend")}
    return row(
        "s001-backend-flag-name",
        ", ".join(f"{flag} {'accepted' if ok else 'refused'}" for flag, ok in named.items()),
        "",
        None if any(named.values()) else False,
        f"depends on the version, as the article says: in vLLM {version}'s own `--help=all` "
        + " and ".join(f"{flag} is {'a flag' if ok else 'not a flag'}" for flag, ok in named.items())
        + "; its advice (read your version's --help) is the check",
    )


def article_code_table() -> pd.DataFrame:
    """The articles' printed code judged as written: seed 003's launcher run in the installed vLLM, its load script
    read, seed 001's benchmark read, and seeds 001's and 002's launch commands' flags against vLLM's own list."""
    from .claims import row

    ran = launcher_runs()
    if ran is None:
        launcher = row(
            "s003-launcher-as-written",
            "not testable here",
            "",
            None,
            "needs vLLM installed (make setup-vllm); no GPU is needed: it fails before any model is loaded",
        )
    else:
        version, runs = ran
        tried = "; ".join(
            (f"without `{r.removed.rstrip(',')}`: " if r.removed else "as printed: ")
            + (r.error or "it was serving when stopped").rstrip(".")
            for r in runs
        )
        launcher = row(
            "s003-launcher-as-written",
            "does not start" if runs[-1].error else "starts",
            "",
            runs[-1].error is None,
            f"on {version}, {tried}. run_server takes the parsed `vllm serve` arguments (an argparse Namespace), not "
            "engine args; `vllm serve` with the same flags (less --swap-space, gone from vLLM V1) is the launcher that works",
        )
    unused = assigned_never_read("seed003_load.txt")
    at_once = gathered_at_once("seed003_load.txt")
    concurrency = row(
        "s003-load-concurrency",
        "up to 100 at once" if at_once and "CONCURRENCY" in unused else "as set",
        "requests",
        "CONCURRENCY" not in unused,
        f"the script assigns {', '.join(unused) or 'nothing'} and never reads it: it hands all 256 requests to "
        "asyncio.gather at once, and aiohttp's default connector opens at most 100 connections, so up to 100 are in "
        "flight (the rest wait for a connection, a wait its TTFT counts); an asyncio.Semaphore(CONCURRENCY) would apply it",
    )
    from .engines.vllm import known_flags

    version, flags = known_flags()  # the installed vLLM's, else vLLM 0.33.0's (data/vllm_serve_flags_0.33.0.txt)
    launches = [_launch_row(i, version, flags) for i in ("s001-launch-commands", "s002-launch-commands")]
    return pd.DataFrame(
        [
            launcher,
            concurrency,
            _bench_row(),
            _bench_switch_row(),
            _load_script_row(),
            *launches,
            _backend_flag_row(version, flags),
        ]
    )
