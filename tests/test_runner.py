"""The headless runner's parsing and refusals (notebook execution itself: test_notebooks.py)."""

import ast
import os

import pytest
from conftest import assert_one_line_error, fake_key, run_cli

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
