"""Tuning sweeps: engine configurations x workloads, one results row per point, resumable.

A grid (YAML file or dict):

    name: batching
    engine: llamacpp            # or vllm (the CLI's --engine overrides)
    model: null                 # vLLM: an HF id; llama.cpp: a GGUF path (null: the shipped Gemma)
    base: {ctx: 4096}           # EngineConfig fields shared by every point
    axes: {parallel: [1, 4]}    # EngineConfig fields to vary: the cartesian product
    workloads:                  # each runs on every configuration, at each load level
      - {name: chat, concurrency: [1, 4, 8], requests: 16, prompt_tokens: 128, max_tokens: 64}
    quick: {axes: …, workloads: …}   # replacements used with --quick (CI)

A point is (configuration, workload, load level). Each finished point is appended to a JSONL file
at once (fsync'd); a re-run with the same file skips the points that succeeded and retries those that failed
(their newer row is the one read). A configuration that fails to start, or a point that times out, becomes a
row with the error and the engine's log tail. One run writes a results file at a time: a second run of the same
file (another notebook, another terminal) is refused in one line naming the process that holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import hashlib
import itertools
import json
import os
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from .endpoints import endpoint_for
from .energy import joules_between, read_energy
from .engines import KINDS, Engine, EngineConfig, engine_class, make_engine
from .engines.metrics import delta, scrape
from .errors import (
    BadInput,
    EngineError,
    LabsError,
    ResultsNotSaved,
    positive_int,
    positive_number,
    read_user_file,
    writable_path,
)
from .gpu import read_gpus
from .lengths import length_distribution, trace_requests
from .load import SLO, run_conversations, run_load, summarize, warm_up
from .paths import DATA_DIR
from .prompts import PromptFactory
from .timing import RequestSpec

SCHEMA = "labs-sweep/1"
CONFIG_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}
# what a point keeps of each request: what an SLO reads (lab 04 computes goodput again from them, with the
# participant's function); the summary holds the rest
REQUEST_FIELDS = ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens", "error")
YOUR_EXPERIMENT = ("knob", "values", "concurrency", "long_prompt_tokens", "slo_ttft_ms", "slo_tpot_ms")
MAX_YOUR_POINTS = 4  # values, and load levels: each value is an engine start


@dataclass(frozen=True)
class Workload:
    """Requests to send at each load level (closed loop at each concurrency, or open loop at each rate)."""

    name: str = "chat"
    concurrency: tuple[int, ...] = (1,)
    rate: tuple[float, ...] = ()
    requests: int = 16
    prompt_tokens: int = 128
    max_tokens: int = 64
    shared_prefix_tokens: int = 0  # a common system prompt (prefix caching)
    prefix_groups: int = 1  # that many different system prompts, taken in turn (N prefixes x M suffixes)
    long_prompt_tokens: int = 0  # every long_every-th request gets a prompt this long (chunked prefill)
    long_every: int = 0
    turns: int = 1  # > 1: `requests` conversations of this many questions, each turn with the conversation so far
    lengths: str | None = None  # a trace in data/length_distributions.json: each request's lengths drawn from it
    length_scale: float = 1.0  # both drawn lengths multiplied by this (0.25 on a CPU)
    length_cap: int = 0  # with lengths: prompt + output at most this (the engine's context per request); 0: none

    def levels(self) -> list[dict]:
        if self.rate:
            return [{"request_rate": r} for r in self.rate]
        return [{"concurrency": c} for c in self.concurrency]


def _workload_key(workload: Workload) -> dict:
    """The workload's fields, less those at a default added after sweeps were first written: a point measured
    before `turns` or `lengths` existed keeps its id, so a resumed sweep finds it."""
    key = asdict(workload)
    for name, default in (("turns", 1), ("lengths", None), ("length_scale", 1.0), ("length_cap", 0)):
        if key[name] == default:
            del key[name]
    return key


@dataclass(frozen=True)
class Point:
    config: dict  # EngineConfig fields (base + this point's axes values)
    workload: Workload | None  # None: start, record the allocation, stop
    level: dict = field(default_factory=dict)

    def point_id(self, engine: str) -> str:
        key = json.dumps(
            {
                "engine": engine,
                "config": self.config,
                "workload": _workload_key(self.workload) if self.workload else None,
                "level": self.level,
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha1(key.encode()).hexdigest()[:16]


@dataclass
class Grid:
    name: str
    engine: str
    base: dict
    axes: dict[str, list]
    workloads: list[Workload]
    model: str | None = None
    variants: list[dict] = field(default_factory=list)  # explicit configurations, each over base (x axes)
    # why this grid turns nothing at this size (its `quick: {skip: …}`): an engine start per configuration
    # costs a minute on vLLM, so a quick run may leave a knob to the full one; "" when it runs
    skipped: str = ""

    def configs(self) -> list[dict]:
        keys = list(self.axes)
        combos = list(itertools.product(*(self.axes[k] for k in keys))) if keys else [()]
        out = []
        for variant in self.variants or [{}]:
            for values in combos:
                cfg = {**self.base, **variant, **dict(zip(keys, values, strict=True))}
                if self.model is not None:
                    cfg.setdefault("model", self.model)  # a variant may name its own (quantized) model
                out.append(cfg)
        return out

    def one_point(self, config: dict, concurrency: int) -> Grid:
        """This grid turned to one configuration (`config`'s fields over base; no axes) at one concurrency of its
        first workload: a re-run with a knob changed, named for the change, so it gets its own results file."""
        unknown = sorted(set(config) - CONFIG_FIELDS)
        if unknown:
            raise BadInput("config field", unknown[0], "allowed: " + ", ".join(sorted(CONFIG_FIELDS)))
        if not self.workloads:
            raise BadInput("grid", self.name, "allowed: a grid with a workload to run at one concurrency")
        level = positive_int("concurrency", concurrency, maximum=100_000)
        workload = dataclasses.replace(self.workloads[0], concurrency=(level,), rate=())
        name = "-".join([self.name, *(f"{k}{v}" for k, v in config.items()), f"c{level}"])
        grid = dataclasses.replace(self, name=name, base={**self.base, **config}, axes={}, variants=[], workloads=[workload])
        for cfg in grid.configs():
            EngineConfig(**cfg).validated()
        return grid

    def experiment(self) -> dict | None:
        """This grid as a participant's experiment is written (lab 04): its one knob and values, its first
        workload's concurrency levels and long prompt; None for a grid of variants (the GPU's chunked prefill)."""
        if len(self.axes) != 1 or self.variants or not self.workloads:
            return None
        ((knob, values),) = self.axes.items()
        load = self.workloads[0]
        return {
            "knob": knob,
            "values": list(values),
            "concurrency": list(load.concurrency),
            "long_prompt_tokens": load.long_prompt_tokens,
        }

    def yours(self, experiment: dict | str, slo: SLO) -> tuple[Grid, SLO]:
        """This grid with a participant's experiment in place of its own (lab 04): one knob (an EngineConfig field)
        over their values, their concurrency levels and long prompt on the grid's first workload, judged by their
        SLO (`slo`'s limits where they set none). "show": the grid's own experiment (`experiment()`), run the same
        way (a grid of variants, as it is). Named for the experiment, so a changed one gets its own results file; a bad value is refused in one
        line, before anything starts."""
        shown = isinstance(experiment, str) and experiment.strip().lower() == "show"
        if shown:
            own = self.experiment()
            if own is None:  # not one knob: the grid runs as it is
                return self, slo
            experiment = own
        if not isinstance(experiment, dict):
            raise BadInput("experiment", experiment, 'allowed: "show", or a dict with ' + ", ".join(YOUR_EXPERIMENT))
        unknown = sorted(set(experiment) - set(YOUR_EXPERIMENT))
        missing = [k for k in ("knob", "values", "concurrency") if k not in experiment]
        if unknown or missing:
            bad = unknown[0] if unknown else f"(no {missing[0]})"
            raise BadInput("experiment key", bad, "allowed: " + ", ".join(YOUR_EXPERIMENT))
        knob, values, levels = experiment["knob"], experiment["values"], experiment["concurrency"]
        if knob not in CONFIG_FIELDS:
            raise BadInput("knob", knob, "allowed: an engine setting, one of " + ", ".join(sorted(CONFIG_FIELDS)))
        for what, given in (("values", values), ("concurrency", levels)):
            if not isinstance(given, list) or not 1 <= len(given) <= MAX_YOUR_POINTS:
                raise BadInput(what, given, f"allowed: a list of 1 to {MAX_YOUR_POINTS} values (each value is an engine start)")
        if not self.workloads:
            raise BadInput("grid", self.name, "allowed: a grid with a workload to load")
        load = {"concurrency": levels, **{k: experiment[k] for k in ("long_prompt_tokens",) if k in experiment}}
        workload = _workload({**_workload_key(self.workloads[0]), **load}, "experiment")
        limits = {
            k: positive_number(f"slo_{k}", experiment[f"slo_{k}"]) for k in ("ttft_ms", "tpot_ms") if f"slo_{k}" in experiment
        }
        tag = "own" if shown else hashlib.sha1(json.dumps(experiment, sort_keys=True, default=str).encode()).hexdigest()[:8]
        grid = dataclasses.replace(
            self,
            name=f"{self.name}-yours-{tag}",
            axes={knob: list(values)},
            variants=[],
            workloads=[workload],
            skipped=self.skipped if shown else "",  # yours runs whatever the size: you chose it
        )
        for cfg in grid.configs():
            EngineConfig(**cfg).validated()
        return grid, dataclasses.replace(slo, **limits)

    def points(self) -> list[Point]:
        pts = []
        for cfg in self.configs():
            if not self.workloads:
                pts.append(Point(cfg, None, {}))
            for wl in self.workloads:
                pts.extend(Point(cfg, wl, level) for level in wl.levels())
        return pts


def _workload(raw: object, where: str) -> Workload:
    if not isinstance(raw, dict):
        raise BadInput(f"{where}", raw, "allowed: a mapping of workload fields")
    known = {f.name for f in dataclasses.fields(Workload)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise BadInput(f"{where} field", unknown[0], "allowed: " + ", ".join(sorted(known)))
    values = dict(raw)
    for key in ("concurrency", "rate"):
        if key in values:
            v = values[key]
            v = v if isinstance(v, (list, tuple)) else [v]
            conv = positive_int if key == "concurrency" else positive_number
            values[key] = tuple(conv(f"{where}.{key}", x) for x in v)
    for key in ("requests", "prompt_tokens", "max_tokens", "prefix_groups", "turns"):
        if key in values:
            values[key] = positive_int(f"{where}.{key}", values[key], maximum=1_000_000)
    if values.get("turns", 1) > 1:  # a conversation waits for each answer: closed loop, its own prompts
        clash = next((k for k in ("rate", "shared_prefix_tokens", "long_prompt_tokens") if values.get(k)), None)
        if clash:
            raise BadInput(f"{where}.turns", values["turns"], f"allowed with concurrency levels alone, not with {clash}")
    for key in ("shared_prefix_tokens", "long_prompt_tokens", "long_every"):
        if key in values:
            values[key] = positive_int(f"{where}.{key}", values[key], minimum=0, maximum=1_000_000)
    if values.get("lengths") is not None:  # a trace gives each request's whole prompt and its output length
        length_distribution(values["lengths"])
        values["length_scale"] = positive_number(f"{where}.length_scale", values.get("length_scale", 1.0))
        values["length_cap"] = positive_int(f"{where}.length_cap", values.get("length_cap", 0), minimum=0, maximum=10_000_000)
        plain = {"turns": 1, "shared_prefix_tokens": 0, "long_prompt_tokens": 0}  # what a trace's requests keep
        clash = next((k for k, v in plain.items() if values.get(k, v) != v), None)
        if clash:
            raise BadInput(f"{where}.lengths", values["lengths"], f"allowed without {clash}")
    return Workload(**values)


def load_grid(source: str | Path | dict, *, quick: bool = False, engine: str | None = None, model: str | None = None) -> Grid:
    """A Grid from a YAML file or a dict, validated (one line naming any bad value)."""
    if isinstance(source, dict):
        raw, label = source, source.get("name", "grid")
    else:
        path = Path(source)
        text = read_user_file(path, "grid file", "YAML grid (see data/grids/)")
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise BadInput(
                "grid file", str(path), f"it is not readable YAML ({type(exc).__name__}); allowed: a YAML grid"
            ) from None
        label = path.stem
    if not isinstance(raw, dict):
        raise BadInput("grid", label, "allowed: a mapping with engine, base, axes and workloads")
    allowed_keys = ("name", "engine", "model", "base", "axes", "variants", "workloads", "quick", "description")
    unknown = sorted(set(raw) - set(allowed_keys))
    if unknown:
        raise BadInput("grid key", unknown[0], "allowed: " + ", ".join(allowed_keys))
    skipped = ""
    if quick and isinstance(raw.get("quick"), dict):
        skipped = str(raw["quick"].get("skip") or "")
        raw = {**raw, **{k: v for k, v in raw["quick"].items() if k != "skip"}}
    kind = engine or raw.get("engine") or "llamacpp"
    if kind not in KINDS:
        raise BadInput("engine", kind, "allowed: " + ", ".join(KINDS))
    base = raw.get("base") or {}
    axes = raw.get("axes") or {}
    variants = raw.get("variants") or []
    if not isinstance(variants, list):
        raise BadInput("variants", variants, "allowed: a list of mappings of EngineConfig fields")
    for section, mapping in (("base", base), ("axes", axes), *((f"variants[{i}]", v) for i, v in enumerate(variants))):
        if not isinstance(mapping, dict):
            raise BadInput(section, mapping, "allowed: a mapping of EngineConfig fields")
        bad = sorted(set(mapping) - CONFIG_FIELDS)
        if bad:
            raise BadInput(f"{section} field", bad[0], "allowed: " + ", ".join(sorted(CONFIG_FIELDS)))
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise BadInput(f"axes.{key}", values, "allowed: a non-empty list of values")
    workloads = [_workload(w, f"workloads[{i}]") for i, w in enumerate(raw.get("workloads") or [])]
    grid = Grid(
        name=str(raw.get("name") or label),
        engine=kind,
        base=dict(base),
        axes=dict(axes),
        workloads=workloads,
        model=model if model is not None else raw.get("model"),
        variants=[dict(v) for v in variants],
        skipped=skipped,
    )
    for cfg in grid.configs():  # every configuration must be a valid EngineConfig
        EngineConfig(**cfg).validated()
    return grid


# ---------------------------------------------------------------- results file


def _dump(row: dict) -> str:
    return json.dumps(row, default=str, separators=(",", ":"))


def read_rows(path: str | Path, *, repair: bool = False) -> list[dict]:
    """Rows of a results file. A torn last line (a run killed mid-write) is dropped with a warning
    (and cut from the file when repair=True); anything else unreadable is an error."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    complete_until_end = lines[-1] == ""
    lines = lines[:-1] if complete_until_end else lines
    rows, torn = [], False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                warnings.warn(f"{path}: dropped a torn last line (the run was interrupted while writing it)", stacklevel=2)
                torn = True
                if repair:
                    good = "".join(ln + "\n" for ln in lines[:i])
                    tmp = path.with_suffix(path.suffix + ".tmp")
                    tmp.write_text(good)
                    os.replace(tmp, path)
                break
            raise BadInput(
                "results file", str(path), f"line {i + 1} is not JSON; allowed: a sweep results file (JSONL)"
            ) from None
        if not isinstance(row, dict) or row.get("schema") != SCHEMA:
            found = row.get("schema") if isinstance(row, dict) else type(row).__name__
            raise BadInput(
                "results file",
                str(path),
                f"line {i + 1} has schema {found!r}, not {SCHEMA!r}; allowed: a file "
                "written by this sweep runner (choose another --out)",
            )
        rows.append(row)
    if repair and rows and not torn and not complete_until_end:  # last line complete but unterminated: terminate it
        with path.open("a") as f:
            f.write("\n")
    return rows


def append_row(path: Path, row: dict) -> None:
    """One line, whole or not at all: a write that fails (disk full) is cut back, the rows before it stay."""
    line = (_dump(row) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ResultsNotSaved(f"{path}: {exc.strerror or exc}; nothing was lost, re-run to resume") from None
    size = os.fstat(fd).st_size
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        kept = len(read_rows(path)) if path.exists() else 0
        raise ResultsNotSaved(
            f"{path}: {exc.strerror or exc} while saving a point; the {kept} row(s) before it are intact; "
            "make room and re-run the same command to resume"
        ) from None
    finally:
        os.close(fd)


def latest_rows(rows: list[dict]) -> list[dict]:
    """One row per point, the newest (a failed point retried later appends its new row), in the order the points
    were first measured."""
    latest: dict[str, dict] = {}
    for row in rows:
        latest.pop(row["point_id"], None)  # re-inserted: the newest row, at the end
        latest[row["point_id"]] = row
    return list(latest.values())


def load_results(path: str | Path) -> pd.DataFrame:
    """One row per point (its newest): config.*, workload, level, status, error, summary.*, allocation.*, metrics.*"""
    rows = latest_rows(read_rows(path))
    if not rows:
        return pd.DataFrame()
    flat = pd.json_normalize(rows, sep=".")
    return flat


@contextlib.contextmanager
def writing(path: Path):
    """Hold `path` for this run's writes: a lock file beside it (`<name>.lock`, holding the PID), taken without
    waiting. A second run of the same results file (another notebook's kernel, another terminal) gets one line
    naming the process that writes it, instead of interleaving its rows with this run's. The lock is the kernel's:
    it goes with the process, however that ends."""
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            raise LabsError(
                f"{path} is being written by another run (PID {holder}): let it finish, or stop it (its notebook's "
                f"Kernel -> Shut Down, or kill {holder}), then run this again"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------- running


def _specs(workload: Workload, factory: PromptFactory, seed: int = 0) -> tuple[list[RequestSpec], list[bool]]:
    if workload.lengths is not None:
        specs = trace_requests(
            factory, workload.lengths, workload.requests, seed=seed, scale=workload.length_scale, cap=workload.length_cap
        )
        return specs, [False] * len(specs)
    prompts = factory.prompts(
        workload.requests,
        workload.prompt_tokens,
        shared_prefix_tokens=workload.shared_prefix_tokens,
        prefix_groups=workload.prefix_groups,
    )
    is_long = [
        bool(workload.long_prompt_tokens and workload.long_every and i % workload.long_every == workload.long_every - 1)
        for i in range(workload.requests)
    ]
    specs = [
        RequestSpec(factory.prompt(workload.long_prompt_tokens) if long else p, workload.max_tokens, ignore_eos=True)
        for p, long in zip(prompts, is_long, strict=True)
    ]
    return specs, is_long


def _interesting(metrics: dict[str, float]) -> dict[str, float]:
    skip = ("_bucket", "_created", "_sum", "_count")
    return {k: round(v, 6) for k, v in metrics.items() if k.startswith(("llamacpp:", "vllm:")) and not k.endswith(skip)}


def _memory(engine) -> dict:
    readings, why = read_gpus()
    out = {"engine_rss_bytes": engine.resident_bytes()}
    if readings:
        out["gpu_memory_used_bytes"] = [g.memory_used_bytes for g in readings]
        out["gpu_utilization_pct"] = [g.utilization_pct for g in readings]
    else:
        out["gpu"] = why
    return out


async def _run_point(engine, kind: str, point: Point, slo: SLO | None, timeout_s: float) -> dict:
    row: dict = {
        "allocation": engine.allocation.to_dict() if engine.allocation else None,
        "memory": None,
        "summary": None,
        "metrics": None,
        "energy": None,  # joules over the load, from the machine's energy counter where one is readable (energy.py)
    }
    if point.workload is None:
        row["memory"] = _memory(engine)
        return row
    endpoint = endpoint_for(engine)
    seed = int(point.point_id(kind)[:8], 16)  # the same prompts and lengths in every process (hash() is salted)
    factory = PromptFactory(engine.prompt_tokenizer(), seed=seed)
    await warm_up(endpoint)
    before = scrape(engine.root_url, endpoint.headers())
    settings, w = {"workload": point.workload.name}, point.workload
    is_long: list[bool] = []  # which requests are the long ones (chunked-prefill workloads)
    if w.turns > 1:
        asked = factory.conversations(w.requests, w.turns, w.prompt_tokens)
        talks = [[RequestSpec(q, w.max_tokens, ignore_eos=True) for q in c] for c in asked]
        load = run_conversations(
            endpoint, talks, concurrency=point.level["concurrency"], slo=slo, progress=False, settings=settings
        )
    else:
        specs, is_long = _specs(w, factory, seed=seed)
        load = run_load(
            endpoint,
            specs,
            concurrency=point.level.get("concurrency"),
            rate=point.level.get("request_rate"),
            slo=slo,
            progress=False,
            settings=settings,
        )
    energy_before, no_energy = read_energy()
    result = await asyncio.wait_for(load, timeout=timeout_s)
    energy_after, no_energy = read_energy() if energy_before else (None, no_energy)  # a counter gone mid-load says why
    row["energy"] = (
        {"joules": joules_between(energy_before, energy_after), "source": energy_before.source}
        if energy_before and energy_after
        else {"joules": None, "source": no_energy}
    )
    row["metrics"] = _interesting(delta(before, scrape(engine.root_url, endpoint.headers())))
    row["memory"] = _memory(engine)
    summary = result.row()
    if any(is_long):
        short = [r for r, long in zip(result.records, is_long, strict=True) if not long]
        long_ = [r for r, long in zip(result.records, is_long, strict=True) if long]
        s_short, s_long = summarize(short, result.duration_s), summarize(long_, result.duration_s)
        summary |= {
            "short_p50_ttft_ms": s_short.ttft_ms.p50,
            "short_p99_ttft_ms": s_short.ttft_ms.p99,
            "long_p50_ttft_ms": s_long.ttft_ms.p50,
        }
    row["summary"] = summary
    row["errors"] = result.summary.errors
    row["requests"] = [{k: getattr(r, k) for k in REQUEST_FIELDS} for r in result.records]
    return row


class KeptEngine:
    """At most one running engine, kept between sweeps for the next grid that starts the same configuration.

    Lab 04's vLLM grids save two vLLM starts this way (kv_pool's 0.25 GiB pool is batching's max_num_seqs 8, and
    batching's max_num_seqs 1 is prefix_cache's point with prefix caching on).
    Use it as a context manager, or call close(): the engine is stopped then, or when a different configuration
    is asked for, or (as every engine) when the Python process ends."""

    def __init__(self) -> None:
        self._held: tuple[str, EngineConfig, Engine] | None = None

    def holds(self, kind: str, config: EngineConfig) -> bool:
        held = self._held
        return held is not None and held[0] == kind and held[1] == config and held[2].is_running()

    def take(self, kind: str, config: EngineConfig) -> Engine | None:
        """The kept engine when it runs this configuration (it is the caller's then); else None, and it is stopped."""
        if self._held is not None and self.holds(kind, config):
            engine, self._held = self._held[2], None
            return engine
        self.close()
        return None

    def holds_engine(self, engine: Engine) -> bool:
        return self._held is not None and self._held[2] is engine

    def hold(self, kind: str, config: EngineConfig, engine: Engine) -> bool:
        """Keep `engine` for the next sweep (any engine held before is stopped); True."""
        self.close()
        self._held = (kind, config, engine)
        return True

    def close(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held[2].stop()

    def __enter__(self) -> KeptEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def _point_row(
    engine: Engine, grid: Grid, point: Point, start_error: str | None, reused: bool, slo: SLO | None, timeout_s: float
) -> dict:
    """One results row: the point measured on `engine`, or failed with its reason (failures are data)."""
    row = {
        "schema": SCHEMA,
        "point_id": point.point_id(grid.engine),
        "grid": grid.name,
        "engine": grid.engine,
        "config": point.config,
        "workload": asdict(point.workload) if point.workload else None,
        "level": point.level,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "status": "ok",
        "error": None,
        "log_tail": None,
        "engine_start_s": engine.started_s,
        "engine_reused": reused,  # kept running from the previous grid (same configuration)
    }
    if start_error:
        row |= {
            "status": "failed",
            "error": f"engine did not start: {start_error}",
            "log_tail": engine.log_tail(15),
        }
    else:
        try:
            row |= await _run_point(engine, grid.engine, point, slo, timeout_s)
        except TimeoutError:
            row |= {
                "status": "failed",
                "error": f"point timed out after {timeout_s:.0f} s",
                "log_tail": engine.log_tail(15),
            }
        except LabsError as exc:
            row |= {"status": "failed", "error": str(exc), "log_tail": engine.log_tail(15)}
        if row["status"] == "ok" and not engine.is_running():
            row |= {
                "status": "failed",
                "error": "the engine died during the point",
                "log_tail": engine.log_tail(15),
            }
    return row


async def sweep_loop(configs: list, start: Callable, measure: Callable, stop: Callable) -> None:
    """A sweep's loop, one engine at a time: for each configuration, `engine = start(config)`, then `await
    measure(config, engine, None)`, then `stop(config, engine)` — always, also when the measurement fails or is
    interrupted. An engine that does not start (start raises LabsError) has nothing to stop: its configuration is
    measured as failed, `await measure(config, None, reason)`, and the loop goes on."""
    for config in configs:
        try:
            engine = start(config)
        except LabsError as exc:
            await measure(config, None, str(exc))
            continue
        try:
            await measure(config, engine, None)
        finally:
            stop(config, engine)


SweepLoop = Callable[[list, Callable, Callable, Callable], Awaitable[None]]  # sweep_loop's signature


async def run_sweep(
    grid: Grid,
    out_path: str | Path,
    *,
    slo: SLO | None = None,
    point_timeout_s: float = 900.0,
    start_timeout_s: float | None = None,
    progress: bool = True,
    keep: KeptEngine | None = None,
    loop: SweepLoop = sweep_loop,
    fresh: bool = False,
) -> pd.DataFrame:
    """Run every point that out_path does not hold a success for (a failed point is tried again), one engine per
    configuration, through `loop` (lab 04's participant's own, or the library's sweep_loop); returns all results
    (the newest row per point) as a DataFrame. `fresh`: start out_path empty (its earlier points are measured
    again). Only one run writes out_path at a time (`writing`).

    With `keep`, an engine kept running by the previous sweep serves this grid's points of the same configuration
    (as one engine serves all the workloads of one configuration), and this sweep's last engine is kept for the
    next; `keep.close()` (or `with KeptEngine() as keep`) stops it."""
    out_path = writable_path("results file", out_path)  # before any engine starts
    with writing(out_path):
        if fresh:
            out_path.unlink(missing_ok=True)
        return await _run_points(grid, out_path, slo, point_timeout_s, start_timeout_s, progress, keep, loop)


async def _run_points(
    grid: Grid,
    out_path: Path,
    slo: SLO | None,
    point_timeout_s: float,
    start_timeout_s: float | None,
    progress: bool,
    keep: KeptEngine | None,
    loop: SweepLoop,
) -> pd.DataFrame:
    from .progress import bar as tqdm

    done = {r["point_id"] for r in read_rows(out_path, repair=True) if r.get("status") == "ok"}
    points = [p for p in grid.points() if p.point_id(grid.engine) not in done]
    bar = tqdm(total=len(points), desc=f"sweep {grid.name}", unit="point", disable=not progress)
    by_config: dict[str, list[Point]] = {}
    for p in points:
        by_config.setdefault(json.dumps(p.config, sort_keys=True, default=str), []).append(p)
    groups = [(EngineConfig(**group[0].config), group) for group in by_config.values()]
    if keep is not None:  # the configuration of the engine kept running goes first; it is handed on after the last
        groups.sort(key=lambda group: not keep.holds(grid.engine, group[0]))
    configs = [config for config, _ in groups]
    made: dict[int, tuple[Engine, bool]] = {}  # by position in configs: its engine, and whether it was kept running

    def at(config: EngineConfig) -> int:  # the loop hands back the very objects it was given
        return next(i for i, c in enumerate(configs) if c is config)

    def start(config: EngineConfig) -> Engine:
        kept = keep.take(grid.engine, config) if keep is not None else None
        engine = kept or make_engine(grid.engine, config)
        made[at(config)] = (engine, kept is not None)
        if kept is None:
            try:
                engine.start(**({"timeout_s": start_timeout_s} if start_timeout_s else {}))
            except (LabsError, OSError) as exc:
                engine.stop()  # a half-started server leaves nothing behind
                raise EngineError(str(exc)) from exc
        return engine

    async def measure(config: EngineConfig, engine: Engine | None, start_error: str | None) -> None:
        i = at(config)
        # a failed start's engine still has its log (a loop that reports a failure without a start: an engine never started)
        engine_or_log, reused = made.get(i) or (make_engine(grid.engine, config), False)
        for point in groups[i][1]:
            t0 = time.perf_counter()
            row = await _point_row(engine_or_log, grid, point, start_error, reused, slo, point_timeout_s)
            row["wall_s"] = round(time.perf_counter() - t0, 3)
            append_row(out_path, row)
            bar.update(1)

    def stop(config: EngineConfig, engine: Engine) -> None:
        if keep is not None and config is configs[-1] and engine.is_running():
            keep.hold(grid.engine, config, engine)
        else:
            engine.stop()

    try:  # the bar ends before any error is printed, so the error is a line of its own
        await loop(configs, start, measure, stop)
    finally:
        bar.close()
        for engine, _ in made.values():  # whatever the loop left running (a loop that forgot to stop one)
            if engine.is_running() and not (keep is not None and keep.holds_engine(engine)):
                engine.stop()
    return load_results(out_path)


def defaults_note(grid: Grid) -> str:
    """One line: each knob this grid sets or turns beside the engine's own default for it, and whether the grid's
    first configuration (its baseline) is that default. "" when the engine states no defaults."""
    defaults = engine_class(grid.engine).DEFAULTS
    baseline = grid.configs()[0]
    parts = []
    for knob, (default, where) in defaults.items():
        if knob not in baseline:
            continue
        turned = grid.axes.get(knob)
        shown = f"turns {', '.join(map(str, turned))}" if turned else f"sets {baseline[knob]}"
        off = "" if default == "by card" or baseline[knob] == default else " (the baseline is not the default)"
        parts.append(f"{knob} {shown}; {grid.engine}'s default {default}: {where}{off}")
    return "; ".join(parts)


DEVICES = ("cpu", "gpu")  # the machines a dry run writes commands for (VLLMInstall.device's values)


def dry_run(grid: Grid, device: str | None = None) -> list[str]:
    """The command each configuration would start, and its number of points: on this machine (device None) or on
    `device` ("cpu", "gpu"): a GPU grid read on a CPU shows with "gpu" what a card runs, not the CPU's own KV pool
    and eager mode."""
    if device not in (None, *DEVICES):
        raise BadInput("device", device, "allowed: None (this machine), " + " or ".join(map(repr, DEVICES)))
    lines = []
    points = grid.points()
    for cfg in grid.configs():
        n = sum(1 for p in points if p.config == cfg)
        cmd, warning = engine_class(grid.engine).command_for(EngineConfig(**cfg), device)
        lines.append(f"{cmd}   # {n} point(s)" + (f"   # {warning}" if warning else ""))
    return lines


def grid_configs(kind: str) -> list[tuple[str, EngineConfig]]:
    """(grid file, configuration) for every configuration of every grid in data/grids/ that engine `kind` runs,
    quick and full; not the articles' own grids (article_*.yaml), whose removed flags lab 04 reports."""
    found = []
    for path in sorted(p for p in (DATA_DIR / "grids").glob("*.yaml") if not p.name.startswith("article_")):
        for quick in (False, True):
            grid = load_grid(path, quick=quick)
            if grid.engine == kind:
                found += [(path.name, EngineConfig(**cfg)) for cfg in grid.configs()]
    return found
