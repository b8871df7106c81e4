"""`labs run`: execute the lab notebooks headlessly with papermill.

Executed copies go to runs/<timestamp>/ (runs/latest points at the newest). A parameter whose
name or value looks like a secret is refused: papermill writes every parameter into the
executed notebook, so keys travel only through environment variables.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .errors import BadInput, writable_path
from .params import check_notebook, engine_name
from .paths import CHECKOUT_DIR, KERNEL_DISPLAY_NAME, KERNEL_NAME, NOTEBOOKS_DIR, PROJECT_DIR, cache_dir, runs_dir
from .progress import ENV as PROGRESS_ENV
from .progress import bar as progress_bar
from .redact import looks_like_key

SECRET_NAME = re.compile(r"key|token|secret|passw|credential|auth|bearer", re.IGNORECASE)
CELL_TIMEOUT_S = 1800


@dataclass
class NotebookResult:
    name: str
    status: str  # "ok" or "failed"
    wall_s: float
    output: Path
    error: str | None = None
    cell_source: str | None = None


def discover(only: str | None = None, folder: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The lab notebooks (NN_name.ipynb) in order, or those whose number is in `only` ("01,03")."""
    found = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not only:
        return found
    wanted = [w.strip().zfill(2) for w in str(only).split(",") if w.strip()]
    numbers = {p.name[:2]: p for p in found}
    unknown = [w for w in wanted if w not in numbers]
    if unknown or not wanted:
        raise BadInput("--only", only, "allowed: comma-separated lab numbers among " + ", ".join(numbers))
    return [numbers[w] for w in wanted]


def parse_value(text: str) -> object:
    """A -p value as papermill would take it: bool, int, float, JSON list/dict, else the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if text.strip()[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text


def refuse_secrets(params: dict[str, object]) -> None:
    for name, value in params.items():
        if SECRET_NAME.search(name):
            raise BadInput(
                "parameter",
                name,
                "its name looks like a secret; allowed: put keys in environment variables "
                "(e.g. TAOTOKEN_API_KEY) — papermill saves parameters into every executed notebook",
            )
        if looks_like_key(value):
            raise BadInput(
                f"parameter {name}", "<hidden: looks like a key>", "allowed: non-secret values; keys go in environment variables"
            )


def declared_parameters(path: Path) -> dict[str, dict]:
    """Names and default source text in a notebook's parameters cell (the code cell tagged `parameters`), as
    papermill.inspect_notebook reads them, without importing papermill (a second of imports before a bad value can
    be refused)."""
    cells = json.loads(path.read_text())["cells"]
    cell = next((c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        return {}
    source = "".join(cell["source"])
    declared: dict[str, dict] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                declared[target.id] = {"name": target.id, "default": ast.get_source_segment(source, value)}
    return declared


def check_parameters(notebook: Path, declared: dict[str, dict], given: dict[str, object]) -> None:
    """Validate a notebook's parameters (its defaults, overridden by `given`) with the lab's own
    validator, before any kernel starts: a bad value is one line (BadInput), not a failed run."""

    values: dict[str, object] = {}
    for name, info in declared.items():
        # a default the parameters cell computes is left out: the notebook validates it itself
        with contextlib.suppress(ValueError, SyntaxError):
            values[name] = ast.literal_eval(str(info.get("default")))
    values.update(given)
    check_notebook(notebook.stem[:2], values)


def _failure_details(output: Path, exc: Exception) -> tuple[str, str | None]:
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    source = None
    try:
        nb = json.loads(output.read_text())
        for cell in nb["cells"]:
            outputs = cell.get("outputs", [])
            failed = (cell.get("metadata", {}).get("papermill") or {}).get("exception")
            if cell["cell_type"] == "code" and (failed or any(o.get("output_type") == "error" for o in outputs)):
                source = "".join(cell["source"])
                if not str(evalue).strip():  # a LabsError the notebook showed as one line on stderr
                    shown = [o for o in outputs if o.get("name") == "stderr"]
                    if shown:
                        text = "".join(shown[-1].get("text", "")).strip().splitlines()
                        return (text[-1] if text else f"{ename}: {evalue}"), source
                break
    except (OSError, ValueError, KeyError):
        pass
    return f"{ename}: {evalue}", source


def _print_failure(result: NotebookResult, stream=sys.stdout) -> None:
    bar = "-" * 72
    lines = [bar, f"FAILED {result.name} after {result.wall_s:.1f} s", "failing cell:"]
    source = (result.cell_source or "(not found)").splitlines()
    lines += ["    " + s for s in source[:30]] + (["    …"] if len(source) > 30 else [])
    lines += ["error:", "    " + (result.error or "?"), f"executed notebook: {result.output}", bar]
    print("\n".join(lines), file=stream, flush=True)


def _kernel_env() -> None:
    """Make the kernel the notebooks name (paths.KERNEL_NAME) this interpreter, wherever the labs are installed (a
    checkout's venv, a conda env, a wheel): its kernelspec is written to the cache, first on JUPYTER_PATH."""
    folder = cache_dir() / "jupyter"
    spec = folder / "kernels" / KERNEL_NAME / "kernel.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.write_text(json.dumps({"argv": argv, "display_name": KERNEL_DISPLAY_NAME, "language": "python"}, indent=1))
    paths = [str(folder)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


@contextlib.contextmanager
def _text_progress_in_kernels():
    """The kernels started meanwhile draw text bars (labs_lib.progress): a saved notebook shows their final state.
    The runner's own process keeps its setting once the series ends."""
    before = os.environ.get(PROGRESS_ENV)
    os.environ[PROGRESS_ENV] = "text"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = before


def _kernel_manager_class() -> dict:
    """nbclient's kernel manager with IPC sockets: same-machine only, no TCP ports (nor warnings about them), each
    kernel's sockets in a private folder of its own.

    nbclient still creates, owns and shuts down each kernel."""
    if os.name != "posix":
        return {}
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import CaselessStrEnum, default

    class IPCKernelManager(AsyncKernelManager):
        transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc")

        @default("ip")
        def _ip_default(self) -> str:
            # jupyter_client's default, "kernel-ipc" in the kernel's working directory (notebooks/), numbers the
            # sockets by the files already there; two runs starting kernels there at once take the same numbers,
            # and one kernel then receives the other's messages
            return str(Path(tempfile.mkdtemp(prefix="labs-kernel-")) / "ipc")

        def cleanup_ipc_files(self) -> None:
            super().cleanup_ipc_files()
            with contextlib.suppress(OSError):
                Path(self.ip).parent.rmdir()

    return {"kernel_manager_class": IPCKernelManager}


def _filled_in(notebook: Path, folder: Path) -> Path:
    """A copy of `notebook` in `folder` whose build-it cells hold the library's reference (cores.fill_in) and
    whose exercises and design tasks ask to be shown their answers (notebook.show_answers)."""
    from . import cores  # here: it imports the measurement modules, which `labs run`'s checks need not wait for
    from .notebook import show_answers

    nb = json.loads(notebook.read_text())
    cores.fill_in(nb["cells"])
    show_answers(nb["cells"])
    copy = folder / notebook.name
    copy.write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    return copy


def _name_the_input(output: Path, notebook: Path) -> None:
    """papermill records the path it read; a filled-in run read a temporary copy: record the notebook instead."""
    try:
        executed = json.loads(output.read_text())
    except (OSError, ValueError):  # no output yet (the run failed before papermill wrote one)
        return
    executed["metadata"].setdefault("papermill", {})["input_path"] = str(notebook)
    executed["metadata"]["papermill"]["build_it"] = "filled in with the library's reference; answers shown"
    output.write_text(json.dumps(executed, indent=1, ensure_ascii=False))


def run_series(
    notebooks: list[Path],
    *,
    params: dict[str, object] | None = None,
    engine: str = "auto",
    quick: bool = True,
    out_dir: Path | None = None,
    progress: bool = True,
    fill_in: bool = True,
) -> list[NotebookResult]:
    """Execute `notebooks` in order. Each gets the parameters it declares; all get quick/interactive/engine. With
    `fill_in`, each build-it cell holds the library's reference (cores.fill_in) and each exercise and design task
    asks for its answer (notebook.show_answers); else it runs as written."""
    params = dict(params or {})
    refuse_secrets(params)
    engine = engine_name(engine)
    declared = {nb: declared_parameters(nb) for nb in notebooks}
    everywhere = set().union(*[set(d) for d in declared.values()]) if declared else set()
    unknown = sorted(set(params) - everywhere)
    if unknown:
        raise BadInput("parameter", unknown[0], "allowed: " + ", ".join(sorted(everywhere)))
    given = {"quick": quick, "interactive": False, "engine": engine, **params}
    for nb in notebooks:
        check_parameters(nb, declared[nb], {k: v for k, v in given.items() if k in declared[nb]})
    if out_dir is not None:
        out_dir = writable_path("--out", out_dir, folder=True)  # before any kernel or engine starts
    if out_dir is None:
        out_dir = writable_path("runs folder", runs_dir() / datetime.now().strftime("%Y%m%d-%H%M%S"), folder=True)
        latest = out_dir.parent / "latest"
        out_dir.mkdir(parents=True, exist_ok=True)
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(out_dir.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    import papermill  # after every check: a bad value is refused without its second of imports

    _kernel_env()
    results = []
    bar = progress_bar(notebooks, desc="labs", unit="notebook", disable=not progress, file=sys.stderr)
    # a filled-in run reads a copy of each notebook; the copies go when the series ends, however it ends
    with tempfile.TemporaryDirectory(prefix="labs-filled-in-") as filled, _text_progress_in_kernels():
        filled_dir = Path(filled)
        for nb in bar:
            bar.set_postfix_str(nb.stem)
            mine = {k: v for k, v in given.items() if k in declared[nb]}
            output = out_dir / nb.name
            start = time.perf_counter()
            try:
                papermill.execute_notebook(
                    str(_filled_in(nb, filled_dir) if fill_in else nb),
                    str(output),
                    parameters=mine,
                    kernel_name=KERNEL_NAME,
                    # a checkout's notebooks run in notebooks/; an installed package's in the working directory, so
                    # that what they write (results/) lands there and never in site-packages
                    cwd=str(nb.parent if CHECKOUT_DIR else PROJECT_DIR),
                    progress_bar=False,
                    log_output=False,
                    # a bar's updates saved as one stream with its carriage returns applied: its final state
                    coalesce_streams=True,
                    execution_timeout=CELL_TIMEOUT_S,
                    **_kernel_manager_class(),
                )
                result = NotebookResult(nb.stem, "ok", time.perf_counter() - start, output)
            except Exception as exc:  # papermill's PapermillExecutionError, a dead kernel, a timeout
                error, source = _failure_details(output, exc)
                result = NotebookResult(nb.stem, "failed", time.perf_counter() - start, output, error, source)
            finally:
                if fill_in:
                    _name_the_input(output, nb)
            results.append(result)
            bar.write(f"  {result.status:<6} {result.name:<28} {result.wall_s:7.1f} s  {result.output}", file=sys.stdout)
            if result.status != "ok":
                _print_failure(result)
    bar.close()
    return results
