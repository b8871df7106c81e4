"""Seed 003's printed code (data/article_code/), judged as written: the files are the article's text (its `=` signs
and quotes, lost in the seed's text, put back and nothing else), the load script never applies its CONCURRENCY, and
the launcher, run in the installed vLLM, does not start (the engine tier; no model is loaded, no GPU needed)."""

import re

import pytest
from conftest import REPO

from labs_lib import article_code

SEED = REPO.parent / "shared" / "seeds" / "003_9a9947c0c12e23f1.txt"


def _bare(text: str) -> str:
    """The text as the seed keeps it: no whitespace, no `=`, `+` or quotes."""
    return re.sub(r"[\s=+\"']", "", text)


@pytest.mark.parametrize("name", ["seed003_launcher.txt", "seed003_load.txt"])
def test_the_code_is_the_articles(name):
    if not SEED.exists():
        pytest.skip("the seeds live in ../shared beside the checkout")
    assert _bare((article_code.CODE_DIR / name).read_text()) in _bare(SEED.read_text())


def test_the_load_script_never_applies_its_concurrency():
    assert article_code.assigned_never_read("seed003_load.txt") == ["CONCURRENCY"]
    assert article_code.gathered_at_once("seed003_load.txt")
    row = article_code.article_code_table().set_index("claim").iloc[1]
    assert row["computed"] == "up to 100 at once" and row["verdict"] == "does not hold", row


def test_the_launcher_as_printed_does_not_start(vllm_installed):
    where, runs = article_code.launcher_runs()
    assert where.startswith("vllm")
    # as printed: vLLM V1 has no swap space; without that line, run_server is handed engine args, not its CLI's
    assert runs[0].removed is None and "unexpected keyword argument 'swap_space'" in runs[0].error
    assert runs[1].removed == "swap_space=16," and runs[-1].error and "unexpected keyword" not in runs[-1].error
    row = article_code.article_code_table().set_index("claim").iloc[0]
    assert row["computed"] == "does not start" and row["verdict"] == "does not hold" and "swap_space" in row["why"]


def test_an_attempt_that_never_ends_is_a_launcher_that_started():
    """The driver prints a line as each attempt begins and one as it ends; one begun and never ended was serving
    when it was stopped (a vLLM whose launcher works)."""
    lines = ['{"removed": null}', '{"error": "TypeError: no swap_space"}', '{"removed": "swap_space=16,"}', "INFO noise"]
    runs = article_code._attempts("\n".join(lines))
    assert [(r.removed, r.error) for r in runs] == [(None, "TypeError: no swap_space"), ("swap_space=16,", None)]


def test_seed_001s_bench_is_the_articles_own_and_counts_no_token():
    """The script as printed (line breaks and indentation put back, every other character the seed's), read: it prints
    TTFT and total latency, and counts nothing a throughput needs."""
    import re

    from labs_lib.article_code import CODE_DIR, _bench_row, counts_tokens, printed_labels

    seed = REPO.parent / "shared" / "seeds" / "001_db7333d266339ee5.txt"
    if seed.exists():
        printed = next(line for line in seed.read_text().splitlines() if "def bench(" in line)
        assert re.sub(r"\s+", "", printed) == re.sub(r"\s+", "", (CODE_DIR / "seed001_bench.txt").read_text())
    assert printed_labels("seed001_bench.txt") == ["TTFT 均值", "TTFT P50", "总延迟均值"]
    assert counts_tokens("seed001_bench.txt") is False and counts_tokens("seed003_load.txt") is True
    judged = _bench_row()
    assert judged["verdict"] == "does not hold" and "no throughput" in judged["why"]


def test_the_launch_commands_are_the_articles_and_each_flag_is_judged_by_the_list():
    shipped = frozenset((REPO / "data" / "vllm_serve_flags_0.33.0.txt").read_text().split())
    commands = article_code.launch_commands("s001-launch-commands")
    assert len(commands) == 5 and all(c.startswith(article_code.LAUNCHER) for c in commands)
    if SEED.parent.exists():
        assert all(c in (SEED.parent / "001_db7333d266339ee5.txt").read_text() for c in commands)
    assert article_code._launch_row("s001-launch-commands", "0.33.0", shipped)["verdict"] == "holds"
    # what-if: a version without the attention-backend flag refuses the FLASH_ATTN, AWQ and fp8 commands
    older = article_code._launch_row("s001-launch-commands", "x", shipped - {"--attention-backend"})
    assert older["verdict"] == "does not hold" and older["computed"] == "refused: --attention-backend", older
    assert "--served-model-name" in article_code._launch_row("s002-launch-commands", "0.33.0", shipped)["why"]


def test_the_backend_flags_two_names_are_judged_by_the_list():
    shipped = frozenset((REPO / "data" / "vllm_serve_flags_0.33.0.txt").read_text().split())
    row = article_code._backend_flag_row("0.33.0", shipped)
    assert row["verdict"] == "depends" and row["computed"] == "--attention-backend accepted, --backend refused"
    neither = article_code._backend_flag_row("x", shipped - {"--attention-backend"})
    assert neither["verdict"] == "does not hold", neither


def test_the_articles_launcher_module_still_serves_and_warns_in_the_installed_vllm(vllm_installed):
    """The launch rows' evidence: `python -m vllm.entrypoints.openai.api_server` runs the server, with a warning that
    the command is deprecated (read in the installed vLLM's own source)."""
    source = (vllm_installed / "entrypoints" / "openai" / "api_server.py").read_text()
    main = source.split('if __name__ == "__main__":', 1)[1]
    assert "command is deprecated" in main and "main()" in main


def test_seed_002s_load_script_is_the_articles_and_never_checks_a_status(monkeypatch, tmp_path):
    seed = REPO.parent / "shared" / "seeds" / "002_383503d8c2e9eb2f.txt"
    printed = (article_code.CODE_DIR / "seed002_load.txt").read_text()
    if seed.exists():  # its line breaks and indentation put back, the same characters otherwise
        assert re.sub(r"\s+", "", printed) in re.sub(r"\s+", "", seed.read_text())
    assert article_code._load_script_row()["verdict"] == "depends"
    (tmp_path / "seed002_load.txt").write_text(
        printed.replace("    ) as resp:\n", "    ) as resp:\n        resp.raise_for_status()\n")
    )
    monkeypatch.setattr(article_code, "CODE_DIR", tmp_path)
    assert article_code._load_script_row()["verdict"] == "holds"


def test_seed_001s_two_bench_calls_change_the_model_too(monkeypatch, tmp_path):
    assert article_code.call_arguments("seed001_bench.txt", "bench")[0]["base_url"] == "http://localhost:8000/v1"
    row = article_code._bench_switch_row()
    assert row["computed"] == "api_key, base_url, model" and row["verdict"] == "depends"
    same_model = (article_code.CODE_DIR / "seed001_bench.txt").read_text().replace('"你选的模型ID"', '"Qwen/Qwen2.5-7B-Instruct"')
    (tmp_path / "seed001_bench.txt").write_text(same_model)
    monkeypatch.setattr(article_code, "CODE_DIR", tmp_path)
    assert article_code._bench_switch_row()["verdict"] == "holds"
