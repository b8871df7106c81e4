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
