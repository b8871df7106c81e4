"""The headless runner's parsing and refusals (notebook execution itself: test_notebooks.py)."""

import ast
import os
from pathlib import Path

import pytest
from conftest import assert_one_line_error, fake_key, run_cli, write_notebook

from labs_lib import runner
from labs_lib.errors import BadInput


def test_discover_orders_and_filters():
    found = runner.discover()
    assert [p.name[:2] for p in found] == sorted(p.name[:2] for p in found) and found
    assert runner.discover("1")[0].name.startswith("01_")
    with pytest.raises(BadInput, match="99"):
        runner.discover("01,99")


def test_the_parameters_read_without_papermill_are_papermills():
    """declared_parameters reads each lab's parameters cell itself (the runner imports papermill only after every
    check): the same names, in the same order, with the same values as papermill.inspect_notebook."""
    import papermill

    for notebook in runner.discover():
        theirs, ours = papermill.inspect_notebook(str(notebook)), runner.declared_parameters(notebook)
        assert list(ours) == list(theirs) and ours, notebook.name
        for name, info in theirs.items():
            assert ast.literal_eval(ours[name]["default"]) == ast.literal_eval(str(info["default"])), (notebook.name, name)


@pytest.mark.parametrize(
    "text,value",
    [
        ("true", True),
        ("False", False),
        ("12", 12),
        ("0.5", 0.5),
        ("[1, 2]", [1, 2]),
        ("llama-2-7b", "llama-2-7b"),
        ("none", None),
    ],
)
def test_parse_value(text, value):
    assert runner.parse_value(text) == value


@pytest.mark.parametrize("name", ["api_key", "TAOTOKEN_API_KEY", "token", "password", "auth_header"])
def test_secret_named_parameters_are_refused(name):
    with pytest.raises(BadInput, match="environment"):
        runner.refuse_secrets({name: "x"})


def test_secret_looking_values_are_refused_and_not_echoed():
    key = fake_key("abcdefgh")
    with pytest.raises(BadInput) as info:
        runner.refuse_secrets({"model": key})
    assert key not in str(info.value)


def test_cli_refuses_secret_parameter_before_running():
    key = fake_key("canary-")
    proc = run_cli("run", "--only", "01", "-p", "api_key", key)
    assert_one_line_error(proc, "api_key", "environment")
    assert key not in proc.stdout + proc.stderr


def test_cli_unknown_parameter_and_lab():
    assert_one_line_error(run_cli("run", "--only", "01", "-p", "no_such_param", "1"), "no_such_param")
    assert_one_line_error(run_cli("run", "--only", "42"), "42")
    assert_one_line_error(run_cli("run", "--only", "01", "--engine", "tgi"), "tgi")


def test_kernels_of_a_headless_run_draw_text_bars_and_the_setting_goes_with_the_run(monkeypatch):
    """A saved notebook shows a bar's final state only if the bar was text (a widget saves its first frame):
    the runner's kernels get LABS_PROGRESS=text, and the caller's process is as it was afterwards."""
    import io

    import tqdm.std
    from tqdm.notebook import tqdm_notebook

    from labs_lib import progress

    monkeypatch.delenv(progress.ENV, raising=False)
    with runner._text_progress_in_kernels():
        assert os.environ[progress.ENV] == "text"
        out = io.StringIO()
        with progress.bar(total=3, desc="sweep demo", file=out) as b:
            assert type(b) is tqdm.std.tqdm and not isinstance(b, tqdm_notebook)
            b.update(3)
        assert "sweep demo: 100%" in out.getvalue().split("\r")[-1]
    assert progress.ENV not in os.environ


def test_two_kernels_never_share_a_socket_and_none_is_left_in_the_working_directory(tmp_path, monkeypatch):
    """The runner's kernels talk over IPC sockets. Two kernel managers, as two runs started at once in one checkout
    make them, write their connection files before either kernel binds: each gets sockets of its own, outside the
    notebooks' folder, and its private folder goes when the kernel is cleaned up."""
    monkeypatch.chdir(tmp_path)  # jupyter_client's default put the sockets here ("kernel-ipc-1" …)
    manager_class = runner._kernel_manager_class()["kernel_manager_class"]
    managers = [manager_class(kernel_name="python3") for _ in range(2)]
    sockets = []
    for km in managers:
        km.write_connection_file()
        sockets.append({f"{km.ip}-{port}" for port in km.ports})
    try:
        assert not sockets[0] & sockets[1], sockets
        assert all(Path(s).is_absolute() and Path(s).parent != tmp_path for s in sockets[0] | sockets[1])
    finally:
        for km in managers:
            km.cleanup_connection_file()
            km.cleanup_ipc_files()
    assert not any(Path(next(iter(s))).parent.exists() for s in sockets)


@pytest.mark.notebook
def test_two_runs_started_together_in_one_folder_each_run_their_own_kernel(tmp_path):
    """Two `labs run`s started at the same moment (a lab run beside a test run, two terminals) in one folder: each
    notebook runs in its own kernel and prints what it was given."""
    import subprocess
    import sys

    go = tmp_path / "go"
    for name in ("a", "b"):
        write_notebook(tmp_path / f"9{name}_side_by_side.ipynb", f"print('ran {name}')")
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom labs_lib import runner\n"
        "while not Path(sys.argv[2]).exists(): time.sleep(0.01)\n"  # both wait for one moment to start
        "r = runner.run_series([Path(sys.argv[1])], out_dir=Path(sys.argv[1]).parent / Path(sys.argv[1]).stem,"
        " progress=False)[0]\nprint(r.status, r.error)"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / f"9{name}_side_by_side.ipynb"), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("a", "b")
    ]
    go.touch()
    printed = [run.communicate(timeout=300)[0] for run in runs]
    for name, text in zip(("a", "b"), printed, strict=True):
        assert "ok None" in text, text
        executed = (tmp_path / f"9{name}_side_by_side" / f"9{name}_side_by_side.ipynb").read_text()
        assert f"ran {name}" in executed
