"""The labs as participants use them: JupyterLab from the project's environment in headless Chromium.
Lab 01 is opened and run whole with interactive=True; every control of its explorer is moved, and after
each move the figure must change and the readouts must equal the library's numbers for the values the
page shows. Labs 03, 04 and 05 are run whole (quick sizes, the embedded engine) and their explorers'
controls moved; each readout must equal what the test computes from the results the run wrote (lab 03's
request records, lab 04's sweeps, lab 05's comparison). Lab 04 is interrupted once mid-sweep (Kernel -> Interrupt) and
run on from that cell: no engine outlives the interrupt and the sweep resumes. Lab 03's kernel is restarted once its
engine runs (no engine outlives the old kernel; Run All works on the new one), interrupted mid-load, and, once done,
its engine's cell re-run twice out of order and then its last cell (one engine, then none). These are labs 03-05's runs on the embedded engine: the
headless runner runs them too only where no browser can (tests/test_notebooks.py). No cell may show an error. Screenshots of each state go to runs/browser/. Afterwards JupyterLab, its kernels and the
engines they started are gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import (
    CHROMIUM,
    HOW_TO_GET_A_BROWSER,
    REPO,
    TAG_VARIABLE,
    browser_missing,
    launchers,
    listening_ports,
    tagged_pids,
    wait_for,
    wait_until_gone,
)

from labs_lib.engines import free_port, guard
from labs_lib.paths import DATA_DIR, runs_dir
from labs_lib.sweep import load_grid, read_rows
from labs_lib.widgets import explorer_state

pytestmark = pytest.mark.browser
SHOTS = runs_dir() / "browser"
LOAD_S = 300  # bounds on a hang (JupyterLab's first start builds its workspace; a busy CI machine is slow)


def require_browser():
    missing = browser_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing} is missing in CI: {HOW_TO_GET_A_BROWSER}")
        pytest.skip(f"{missing} is missing: {HOW_TO_GET_A_BROWSER}")


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """JupyterLab on a free port with a random token, over a copy of the notebooks (autosave must not
    write outputs into the committed ones); every process it starts carries an environment tag."""
    require_browser()
    root = tmp_path_factory.mktemp("lab")
    for nb in (REPO / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, root / nb.name)
    # labs 03-05 at their default sizes (quick), on the embedded engine: the copy's parameters cell, as a participant
    # would edit it ("auto" takes vLLM where installed; that default is run by test_notebooks.test_lab_runs_on_vllm)
    for name in ("03_load_testing.ipynb", "04_vllm_tuning_sweeps.ipynb", "05_quantization.ipynb"):
        text = (root / name).read_text()
        assert '"quick = True' in text and '"engine = \\"auto\\"' in text, name
        (root / name).write_text(text.replace('"engine = \\"auto\\"', '"engine = \\"llamacpp\\"', 1))
    port, token, tag = free_port(), secrets.token_hex(16), f"browser-{os.getpid()}"
    # under the labs' own guard: if this test process dies (a CI timeout, a kill), JupyterLab and its kernels go too
    command = [
        sys.executable,
        str(Path(guard.__file__)),
        "--",
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        f"--port={port}",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run commands as the menus do
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]
    env = {**os.environ, TAG_VARIABLE: tag, guard.PARENT_PID_VARIABLE: str(os.getpid())}
    log = (root / "jupyterlab.log").open("w")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + LOAD_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/api/status", params={"token": token}, timeout=5, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert server.poll() is None, (root / "jupyterlab.log").read_text()[-2000:]
        time.sleep(0.5)
    else:
        raise AssertionError("JupyterLab did not answer within the limit")
    yield base, token, tag
    server.send_signal(signal.SIGTERM)  # Jupyter's server shuts its kernels down and exits on SIGTERM
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        raise
    finally:
        log.close()
    left = wait_until_gone(tag, 30)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after JupyterLab stopped: {left}"


def _shown(page) -> dict:
    """The explorer's values as the page shows them, and its readout and image. textContent, not innerText:
    JupyterLab skips rendering cells out of view, and innerText is then empty."""
    box = page.locator(".kv-explorer")
    selects = box.locator("select")
    readouts = box.locator(".widget-readout")
    return {
        "model": selects.nth(0).input_value(),
        "gpu": selects.nth(1).input_value(),
        "kv_dtype": selects.nth(2).input_value(),
        "gpu_memory_utilization": float(readouts.nth(0).text_content()),
        "seq_len": int(readouts.nth(1).text_content().replace(",", "")),
        "batch": int(readouts.nth(2).text_content()),
        "readout": box.locator(".kv-readout").text_content(),
        "image": box.locator("img").get_attribute("src"),
    }


def _agrees_with_the_library(shown: dict) -> None:
    s = explorer_state(
        shown["model"], shown["gpu"], shown["kv_dtype"], shown["gpu_memory_utilization"], shown["seq_len"], shown["batch"]
    )
    text = " ".join(shown["readout"].split())
    assert f"KV cache size {s.kv_cache_tokens:,} tokens" in text, (text, s)
    assert f"{s.max_concurrency:,.2f}x" in text and f"{s.kv_bytes / 2**30:,.2f} GiB" in text, (text, s)
    assert f"{s.kv_pool_bytes / 2**30:,.2f} GiB" in text, (text, s)
    assert ("does not fit" in text) == (not s.fits), (text, s)
    low, high = s.max_concurrency_range
    assert f"{low:,.2f} to {high:,.2f} over the overhead's estimate" in text, (text, s)


def launch(page, command: str) -> None:
    """Start a JupyterLab command as its menu item does, without waiting for it (evaluate would wait for its
    promise: Run All's settles when the last cell has run). window.labsRun.state leaves 'running' when this
    command's promise settles; a command launched later replaces window.labsRun."""
    page.evaluate(
        """command => {
            const run = {command, state: 'running'};
            window.labsRun = run;
            window.jupyterapp.commands.execute(command).then(() => { run.state = 'done'; }, e => { run.state = 'failed: ' + e; });
        }""",
        command,
    )


def run_all(page, base: str, token: str, notebook: str, ready: str, limit_s: float = LOAD_S, during=None) -> None:
    """Open a notebook, wait for its kernel, Run All as the menu does (then `during(page)`, when given), wait for
    `ready` and an idle kernel."""
    # a workspace of its own: JupyterLab restores the last workspace, and an earlier notebook would be the current one
    page.goto(f"{base}/lab/workspaces/{Path(notebook).stem}/tree/{notebook}?reset&token={token}")
    page.wait_for_function("window.jupyterapp && document.querySelector('.jp-Notebook')", timeout=LOAD_S * 1000)
    # the kernel must be up before Run All, or the run is queued behind its start
    page.wait_for_function(
        "(() => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
        " && w.sessionContext.session.kernel.status === 'idle'; })()",
        timeout=LOAD_S * 1000,
    )
    current = "window.jupyterapp.shell.currentWidget"
    assert page.evaluate(f"{current}.context.path") == notebook, "Run All would go to another notebook"
    launch(page, "notebook:run-all-cells")
    if during is not None:
        during(page)
    page.wait_for_selector(ready, timeout=limit_s * 1000)
    page.wait_for_function("window.labsRun.state !== 'running'", timeout=limit_s * 1000)
    status = f"{current}.sessionContext.session.kernel.status"
    wait_for(lambda: page.evaluate(status) == "idle", limit_s, "the run", 0.2)
    assert page.locator('[data-mime-type="application/vnd.jupyter.error"]').count() == 0, "a cell shows an error"


@contextlib.contextmanager
def explorer_after_run_all(jupyterlab, notebook: str, css: str, readout: str, limit_s: float = LOAD_S, during=None):
    """Headless Chromium on `notebook`, Run All done (run_all, with `during`), the explorer `css` scrolled into
    view: yields (page, explorer locator); afterwards no cell may show an error, and the browser is closed."""
    from playwright.sync_api import sync_playwright

    base, token, _ = jupyterlab
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            run_all(page, base, token, notebook, f"{css} {readout}", limit_s, during)
            explorer = page.locator(css)
            explorer.scroll_into_view_if_needed()
            yield page, explorer
            assert page.locator('[data-mime-type="application/vnd.jupyter.error"]').count() == 0, "a cell shows an error"
        finally:
            browser.close()


def test_lab01_explorer_in_jupyterlab(jupyterlab):
    tag = jupyterlab[2]
    with explorer_after_run_all(jupyterlab, "01_kv_cache_memory.ipynb", ".kv-explorer", ".kv-readout") as (page, explorer):
        first = _shown(page)
        _agrees_with_the_library(first)
        explorer.screenshot(path=str(SHOTS / "00-start.png"))
        if os.environ.get("LABS_SCREENSHOT"):
            explorer.screenshot(path=os.environ["LABS_SCREENSHOT"])

        def move(step: str, act) -> dict:
            before = _shown(page)
            act()
            after = wait_for(
                lambda: (s := _shown(page))["image"] != before["image"] and s["readout"] != before["readout"] and s, 60, step, 0.2
            )
            _agrees_with_the_library(after)
            explorer.screenshot(path=str(SHOTS / f"{step}.png"))
            return after

        selects = explorer.locator("select")
        move("01-model", lambda: selects.nth(0).select_option("Qwen2.5-7B"))
        move("02-gpu", lambda: selects.nth(1).select_option("H100-SXM"))
        move("03-kv-dtype", lambda: selects.nth(2).select_option("fp8"))
        handles = explorer.locator(".noUi-handle")
        for i, (name, key) in enumerate(
            (("04-utilization", "ArrowRight"), ("05-seq-len", "ArrowRight"), ("06-batch", "ArrowRight"))
        ):
            handles.nth(i).focus()
            moved = move(name, lambda key=key, i=i: handles.nth(i).press(key))
            assert moved != first
        for k in range(4):  # and on along the log scale: each step doubles the context
            handles.nth(1).focus()
            last = move(f"07-seq-len-{k}", lambda: handles.nth(1).press("ArrowRight"))
        assert last["seq_len"] >= 32 * first["seq_len"]
        assert not re.search(r"Traceback|Error:", page.locator(".kv-explorer").text_content())
    assert tagged_pids(tag)  # the server and its kernel are still up here; the fixture stops them and checks


ERROR_CELL = """(() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const outputs = c => c.model.type === 'code' ? Array.from({length: c.model.outputs.length}, (_, k) => c.model.outputs.get(k)) : [];
  const i = nb.widgets.findIndex(c => outputs(c).some(o => o.type === 'error'));
  if (i < 0) return null;
  nb.activeCellIndex = i;
  return {index: i, ename: outputs(nb.widgets[i]).find(o => o.type === 'error').toJSON().ename};
})()"""


def interrupt_mid_sweep_then_resume(tag: str, results: Path, kept_rows: list):
    """What `during` does in lab 04: once the batching sweep has saved its first point, Kernel -> Interrupt as the
    menu does; the run stops at that cell with the interrupt shown, and no engine is left running (the sweep's
    loop stops its engine in a finally). Then Run All Below from that cell: its sweep resumes (the saved row is
    kept, `kept_rows` gets it) and the lab runs to its end."""
    results.unlink(missing_ok=True)

    def during(page) -> None:
        kept_rows.extend(wait_for(lambda: read_rows(results) if results.exists() else [], 600, "the first saved point", 0.2))
        page.evaluate("window.jupyterapp.commands.execute('notebook:interrupt-kernel')")  # its promise: the request sent
        page.wait_for_function("window.labsRun.state !== 'running'", timeout=120_000)  # Run All stopped at the error
        status = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        wait_for(lambda: page.evaluate(ERROR_CELL) and page.evaluate(status) == "idle", 120, "the interrupt shown", 0.2)
        stopped = page.evaluate(ERROR_CELL)
        assert stopped["ename"] in ("KeyboardInterrupt", "CancelledError"), stopped
        assert "batching" in page.locator(".jp-Notebook .jp-Cell").nth(stopped["index"]).text_content(), stopped
        assert not wait_until_gone(tag, 60, alive=launchers), "an engine outlived Kernel -> Interrupt"
        launch(page, "notebook:run-all-below")

    return during


RUNNING_CELL = """(() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const i = nb.widgets.findIndex(c => c.model.type === 'code' && c.model.executionState === 'running');
  return i < 0 ? null : {index: i, source: nb.widgets[i].model.sharedModel.getSource()};
})()"""


def _slots_processing(tag: str) -> int:
    """Requests the llama.cpp servers of this JupyterLab's kernels are decoding now (their /slots)."""
    busy = 0
    for port in listening_ports(launchers(tag)):
        with contextlib.suppress(httpx.HTTPError, ValueError):
            busy += sum(bool(s.get("is_processing")) for s in httpx.get(f"http://127.0.0.1:{port}/slots", timeout=5).json())
    return busy


def interrupt_mid_load_then_run_on(tag: str, cell_needle: str = "concurrency_sweep("):
    """What `during` does in lab 03: once the concurrency sweep's load generator has requests in the engine's slots,
    Kernel -> Interrupt as the menu does; the run stops at that cell with the interrupt shown, the lab's engine is
    still the only one running (the lab goes on using it) and it is left decoding nothing (the cancelled requests
    closed their streams). Then Run All Below from that cell: the sweep runs again and the lab runs to its end."""

    def during(page) -> None:
        def mid_load() -> bool:
            running = page.evaluate(RUNNING_CELL)
            return bool(running and cell_needle in running["source"] and _slots_processing(tag))

        wait_for(mid_load, 600, "the concurrency sweep's requests in the engine", 0.1)
        engines = launchers(tag)
        page.evaluate("window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
        page.wait_for_function("window.labsRun.state !== 'running'", timeout=120_000)
        status = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        wait_for(lambda: page.evaluate(ERROR_CELL) and page.evaluate(status) == "idle", 120, "the interrupt shown", 0.2)
        stopped = page.evaluate(ERROR_CELL)
        assert stopped["ename"] in ("KeyboardInterrupt", "CancelledError"), stopped
        assert cell_needle in page.locator(".jp-Notebook .jp-Cell").nth(stopped["index"]).text_content(), stopped
        assert launchers(tag) == engines and len(engines) == 1, (engines, launchers(tag))
        wait_for(lambda: _slots_processing(tag) == 0, 60, "the interrupted requests to leave the engine", 0.2)
        launch(page, "notebook:run-all-below")

    return during


def restart_once_its_engine_runs_then(tag: str, after, start_needle: str = "stack = lab_stack()"):
    """What `during` does first in lab 03: once the lab's engine is up and a later cell runs, Kernel -> Restart
    Kernel as the menu does (its dialog accepted); the engine the old kernel held open across cells (in an ExitStack
    closed only by the last cell) is gone with that kernel, and no other is running. Then Run All from the top on the
    new kernel, and `after(page)` for the rest of the run."""

    def during(page) -> None:
        holds = (
            "n => window.jupyterapp.shell.currentWidget.content.widgets.some(c => c.model.sharedModel.getSource().includes(n))"
        )
        assert page.evaluate(holds, start_needle), f"no cell holds {start_needle!r}: the restart would not wait for it"

        def past_its_start() -> bool:
            running = page.evaluate(RUNNING_CELL)
            return bool(running and start_needle not in running["source"] and len(launchers(tag)) == 1)

        wait_for(past_its_start, 600, "the lab's engine running and a later cell started", 0.1)
        # the menu's item; it asks first, and its promise waits for the answer, so it is not awaited here
        page.evaluate("() => { window.jupyterapp.commands.execute('kernelmenu:restart'); }")
        page.locator(".jp-Dialog .jp-mod-accept").click()
        assert not wait_until_gone(tag, 60, alive=launchers), "an engine outlived Kernel -> Restart"
        status = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
        wait_for(lambda: page.evaluate(status) == "idle", 120, "the restarted kernel", 0.2)
        launch(page, "notebook:run-all-cells")
        after(page)

    return during


def test_lab04_sweep_explorer_in_jupyterlab(jupyterlab):
    """Lab 04 run whole in the browser (quick sizes, the embedded engine), interrupted once mid-sweep and run on
    from that cell (interrupt_mid_sweep_then_resume), then its sweep explorer: each dropdown redraws, and the
    readout counts the points the library finds in the sweeps the run wrote."""
    import pandas as pd

    from labs_lib import sweep_views as views
    from labs_lib.paths import RESULTS_DIR
    from labs_lib.sweep import load_results

    results, kept_rows = RESULTS_DIR / "lab04" / "batching-llamacpp-quick.jsonl", []
    during = interrupt_mid_sweep_then_resume(jupyterlab[2], results, kept_rows)
    with explorer_after_run_all(
        jupyterlab, "04_vllm_tuning_sweeps.ipynb", ".sweep-explorer", ".sweep-readout", limit_s=900, during=during
    ) as (_page, explorer):
        resumed = read_rows(results)
        assert resumed[: len(kept_rows)] == kept_rows, "the rows saved before the interrupt are kept as they were"
        ids = [r["point_id"] for r in resumed]
        assert len(ids) == len(set(ids)) == len(load_grid(DATA_DIR / "grids" / "cpu_batching.yaml", quick=True).points())
        # the explorer's experiments (other files in results/, a one-point re-run's from earlier versions, are not
        # shown); section 4's is the participant's experiment, here unwritten: the lab's own, run as "show" runs it
        shown_in = ("kv_pool", "batching", "prefix_cache", "chunked_prefill-yours-own", "kv_dtype", "flash_attention")
        files = [
            f for f in sorted((RESULTS_DIR / "lab04").glob("*-llamacpp-quick.jsonl")) if f.name.split("-llamacpp")[0] in shown_in
        ]
        measured = pd.concat(
            [views.load_table(load_results(f)).assign(experiment=f.name.split("-llamacpp")[0].split("-yours")[0]) for f in files],
            ignore_index=True,
        )
        selects = explorer.locator("select")

        def shown_now():
            return explorer.locator("img").get_attribute("src"), explorer.locator(".sweep-readout").text_content()

        for i, (name, value) in enumerate((("x", "concurrency"), ("y", "TTFT p50"), ("colour", "config"))):
            before = shown_now()
            selects.nth(i).select_option(value)
            now = wait_for(lambda before=before: (n := shown_now())[0] != before[0] and n, 60, f"a redraw after {name}", 0.2)
            x, y, colour = (selects.nth(k).input_value() for k in range(3))
            shown = measured.dropna(subset=[x, y])
            assert f"{len(shown)} measured points" in now[1], now[1]
            assert f"{shown[colour].nunique()} series by {colour}" in now[1], now[1]
            explorer.screenshot(path=str(SHOTS / f"lab04-{i + 1}-{name}.png"))


def _moved(explorer, shown_now, act, what: str):
    """Do `act`, then wait until the explorer's image and readout have both changed; the new readout."""
    before = shown_now()
    act()
    return wait_for(lambda: (n := shown_now())[0] != before[0] and n[1] != before[1] and n, 60, f"a redraw after {what}", 0.2)[1]


def test_lab03_latency_explorer_in_jupyterlab(jupyterlab):
    """Lab 03 in the browser (quick sizes, the embedded engine): its kernel restarted once the engine runs, then run
    whole, interrupted mid-load and run on (restart_once_its_engine_runs_then), then its latency explorer: metric,
    percentile and concurrency moved; each readout equals the percentile the test takes (numpy, as vLLM's
    benchmark does) over the request records the run saved."""

    import numpy as np
    import pandas as pd

    from labs_lib.paths import RESULTS_DIR

    started = time.time()
    during = restart_once_its_engine_runs_then(jupyterlab[2], interrupt_mid_load_then_run_on(jupyterlab[2]))
    with explorer_after_run_all(
        jupyterlab, "03_load_testing.ipynb", ".latency-explorer", ".latency-readout", limit_s=900, during=during
    ) as (page, explorer):

        def shown_now():
            return explorer.locator("img").get_attribute("src"), " ".join(
                explorer.locator(".latency-readout").text_content().split()
            )

        def agrees(readout: str) -> None:
            metric = explorer.locator("select").evaluate("s => s.selectedOptions[0].textContent").lower()
            marks = explorer.locator(".widget-readout")
            percentile, level = float(marks.nth(0).text_content().lstrip("p")), int(marks.nth(1).text_content())
            saved = RESULTS_DIR / "lab03" / f"concurrency-{level}-llamacpp.csv"  # auto: the embedded engine on a CPU
            assert saved.stat().st_mtime >= started, f"{saved} was not written by this run"
            ok = pd.read_csv(saved)
            ok = ok[ok.error.isna()]
            values = [g for cell in ok.itl_ms for g in json.loads(cell)] if metric == "itl" else list(ok[f"{metric}_ms"])
            expected = (
                f"c={level}:",
                f"{len(values)} {metric.upper()} values",
                f"p{percentile:g} {np.percentile(values, percentile):,.1f} ms",
            )
            assert all(part in readout for part in expected), (readout, expected)

        agrees(shown_now()[1])
        explorer.screenshot(path=str(SHOTS / "lab03-0-start.png"))
        handles = explorer.locator(".noUi-handle")
        steps = [
            ("metric", lambda: explorer.locator("select").select_option("TPOT")),
            ("percentile", lambda: (handles.nth(0).focus(), handles.nth(0).press("ArrowLeft"))),
            ("concurrency", lambda: (handles.nth(1).focus(), handles.nth(1).press("ArrowLeft"))),
            ("metric-itl", lambda: explorer.locator("select").select_option("ITL")),
        ]
        for i, (name, act) in enumerate(steps):
            agrees(_moved(explorer, shown_now, act, name))
            explorer.screenshot(path=str(SHOTS / f"lab03-{i + 1}-{name}.png"))
        out_of_order(page, jupyterlab[2])


def out_of_order(page, tag: str) -> None:
    """Lab 03 done (its last cell stopped the engine), cells re-run out of order as a participant might: the engine's
    cell twice, then the last cell. Exactly one engine runs after each run of the engine's cell (the second run
    stops the first run's engine: endpoints.lab_stack), and none after the last cell."""
    for _ in range(2):
        run_cell_alone(page, "stack = lab_stack()")
        wait_for(lambda: len(launchers(tag)) == 1, 60, "exactly one engine", 0.2)
    run_cell_alone(page, "stack.close()")
    assert not wait_until_gone(tag, 60, alive=launchers), "an engine outlived the lab's last cell"


def run_cell_alone(page, needle: str) -> None:
    """Select the code cell whose source holds `needle` and run it alone (Run -> Run Selected Cell and Do not
    Advance), waiting for an idle kernel; no cell may show an error."""
    index = page.evaluate(
        """needle => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            const i = nb.widgets.findIndex(c => c.model.type === 'code' && c.model.sharedModel.getSource().includes(needle));
            if (i >= 0) { nb.activeCellIndex = i; nb.deselectAll(); }
            return i;
        }""",
        needle,
    )
    assert index >= 0, f"no code cell holds {needle!r}"
    launch(page, "notebook:run-cell")
    page.wait_for_function("window.labsRun.state !== 'running'", timeout=LOAD_S * 1000)
    status = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
    wait_for(lambda: page.evaluate(status) == "idle", LOAD_S, "the cell's run", 0.2)
    assert page.locator('[data-mime-type="application/vnd.jupyter.error"]').count() == 0, "a cell shows an error"


def test_lab05_quant_explorer_in_jupyterlab(jupyterlab):
    """Lab 05 run whole in the browser (quick sizes, the embedded engine), then its configuration explorer:
    the chosen rows and the quality measure changed; each readout names the best of the chosen rows as the
    test finds it in the comparison the run saved."""
    import pandas as pd

    from labs_lib.paths import RESULTS_DIR
    from labs_lib.quant_compare import QUALITY, config_labels

    started = time.time()
    with explorer_after_run_all(jupyterlab, "05_quantization.ipynb", ".quant-explorer", ".quant-readout", limit_s=1200) as (
        _page,
        explorer,
    ):
        saved = RESULTS_DIR / "lab05" / "configurations-llamacpp.csv"
        assert saved.stat().st_mtime >= started, f"{saved} was not written by this run"
        compared = pd.read_csv(saved)
        compared = compared.set_index(config_labels(compared))
        chooser, quality = explorer.locator("select").nth(0), explorer.locator("select").nth(1)

        def shown_now():
            return explorer.locator("img").get_attribute("src"), " ".join(
                explorer.locator(".quant-readout").text_content().split()
            )

        def agrees(readout: str) -> None:
            chosen = chooser.evaluate("s => Array.from(s.selectedOptions).map(o => o.textContent)")
            measure = quality.evaluate("s => s.selectedOptions[0].textContent")
            rows = compared.loc[chosen]
            rows = rows[rows.index != rows.reference][measure] if measure != "perplexity" else rows[measure]  # vs itself
            best = rows.idxmin() if QUALITY[measure] == "lower" else rows.idxmax()
            assert f"{len(chosen)} configurations; best by {measure}" in readout and f": {best}" in readout, (readout, best)

        agrees(shown_now()[1])
        explorer.screenshot(path=str(SHOTS / "lab05-0-start.png"))
        labels = list(compared.index)
        steps = [
            ("chosen", lambda: chooser.select_option(labels[-2:])),
            ("quality", lambda: quality.select_option("top1_agreement")),
            ("chosen-three", lambda: chooser.select_option(labels[1:4])),
        ]
        for i, (name, act) in enumerate(steps):
            agrees(_moved(explorer, shown_now, act, name))
            explorer.screenshot(path=str(SHOTS / f"lab05-{i + 1}-{name}.png"))
