"""The appendix's gathering of verdicts (labs_lib/articles.py): each teaching lab answers at most three of the
articles' claims itself; the appendix takes a verdict computed now over a lab's record, a record over nothing, and
names the lab that measures what no record holds yet."""

import json
import re

import pandas as pd
import pytest
from conftest import REPO

from labs_lib import articles
from labs_lib.claims import claims, row
from labs_lib.errors import BadInput

LABS = ["01", "02", "04", "05", "06"]


@pytest.mark.parametrize("lab", LABS)
def test_a_teaching_lab_shows_at_most_three_claims_and_records_the_rest(lab):
    mine = articles.lesson_ids(lab)
    assert 1 <= len(mine) <= articles.LESSON_CLAIMS_MAX, mine
    notebook = json.loads(next((REPO / "notebooks").glob(f"{lab}_*.ipynb")).read_text())
    source = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert re.search(rf'articles\.lesson\(\w+, "{lab}"\)', source)
    if lab != "01":  # lab 01's verdicts are computed, and the appendix computes them afresh
        assert f'articles.record("{lab}", ' in source


def test_every_article_is_introduced_and_every_claim_belongs_to_one():
    seeds = [a["seed"] for a in articles.articles()]
    assert seeds == sorted({c["seed"][:3] for c in claims()})
    assert all(a["heading"] and a["english"] and a["argues"] for a in articles.articles())


def test_the_appendix_takes_computed_over_recorded_over_nothing(tmp_path, capsys):
    timing = [c["id"] for c in claims("02")]
    measured = pd.DataFrame(
        [row(timing[0], 12, "%", False, "as recorded"), row("s000-llama7b-2048", 9.0, "GiB", False, "a stale record")]
    )
    path = articles.record("02", measured, "llamacpp", folder=tmp_path)
    assert json.loads(path.read_text())["engine"] == "llamacpp"
    computed_now = pd.DataFrame([row("s000-llama7b-2048", 1.0, "GiB", True, "computed")])
    table = articles.gathered([computed_now], folder=tmp_path).set_index("id")
    assert len(table) == len(claims())
    assert table.loc[timing[0], "verdict"] == "does not hold" and "lab 02 on llamacpp" in table.loc[timing[0], "judged"]
    assert table.loc["s000-llama7b-2048", "verdict"] == "holds" and table.loc["s000-llama7b-2048", "judged"] == "computed now"
    waiting = table.loc[timing[1]]
    assert waiting["verdict"] == articles.NOT_MEASURED and "lab 02" in waiting["why"]
    shown = articles.lesson(measured, "02")
    assert len(shown) == len(set(measured["id"]) & set(articles.lesson_ids("02"))) and "appendix" in capsys.readouterr().out


def test_a_lab_shows_its_claims_without_ids_or_empty_columns(capsys):
    """A learner reads the claim, its article and the verdict; the claim's id is the appendix's bookkeeping, and a
    column that is empty in every row (a qualitative claim states no value) is noise."""
    mine = articles.lesson_ids("02")
    measured = pd.DataFrame(
        [row(mine[0], "seen in this run", "", True, "a role chunk came first")]
        + [row(c["id"], 3.0, "%", False, "elsewhere") for c in claims("02") if c["id"] not in mine]
    )
    shown = articles.lesson(measured, "02")
    assert len(shown) == 1 and list(shown.index) == [0], shown
    assert "id" not in shown.columns and not shown.isna().all().any(), shown.columns
    assert shown.loc[0, "claim"] == next(c["claim"] for c in claims("02") if c["id"] == mine[0])
    assert "of the" in capsys.readouterr().out


def test_a_record_for_a_lab_that_does_not_exist_is_one_line(tmp_path):
    with pytest.raises(BadInput, match=r"'07'.*allowed: 01, 02, 03, 04, 05, 06"):
        articles.record("07", pd.DataFrame(), "llamacpp", folder=tmp_path)


SEEDS_DIR = REPO.parent / "shared" / "seeds"


def test_every_sentence_of_every_article_is_mapped():
    """data/claims_index.json holds each article's sentences, in order, as the splitter cuts them today, and each is
    mapped: to claim ids, to a checkable statement not judged yet, or to one of the named reasons."""
    index = articles.sentence_index()
    assert sorted(index["articles"]) == [a["seed"] for a in articles.articles()]
    known = {c["id"] for c in claims()}
    for seed, entries in index["articles"].items():
        for n, e in enumerate(entries):
            where = f"seed {seed}, sentence {n}: {e['text'][:40]}"
            assert ("not" in e) != ("ids" in e or "unjudged" in e), where  # exactly one kind of mapping
            assert e.get("not", "banner") in index["reasons"], where
            assert set(e.get("ids", [])) <= known, where
            assert e.get("ids", True) and e.get("unjudged", True), where  # no empty id list, no empty statement
        paths = list(SEEDS_DIR.glob(f"{seed}_*.txt"))
        if not paths:
            pytest.skip("the seeds live in ../shared beside the checkout")
        cut = articles.sentences(paths[0].read_text())
        assert [e["text"] for e in entries] == cut, f"seed {seed}: the index is not the article's sentences"


def test_every_claim_is_found_where_its_quote_is():
    index = articles.sentence_index()["articles"]
    for c in claims():
        seed = c["seed"][:3]
        carrying = [e["text"] for e in index[seed] if c["id"] in e.get("ids", [])]
        parts = [p.strip() for p in c["quote"].split("…") if p.strip()]
        # a quote that runs over a sentence end is found in the sentences that carry it, joined
        joined = "".join(carrying)
        assert carrying and all(p in joined or any(t in p for t in carrying) for p in parts), c["id"]


def test_the_coverage_counts_the_index():
    cover = articles.index_coverage()
    entries = articles.sentence_index()["articles"]
    assert cover["sentences"].sum() == sum(len(e) for e in entries.values())
    assert (cover["judged"] + cover["not judged yet"] == cover["checkable"]).all()
    assert set(articles.unjudged()["statement"]) == {e["unjudged"] for es in entries.values() for e in es if "unjudged" in e}


def test_the_appendix_shows_each_articles_claims_numbered_without_ids():
    """Lab 07 shows every claim of an article with its verdict and evidence; a learner finds a row by its number in
    the article, not by the appendix's bookkeeping id."""
    table = articles.gathered([])
    shown = articles.of_article(table, "002")
    assert len(shown) == sum(c["seed"].startswith("002") for c in claims()) > 0
    assert list(shown.index) == list(range(1, len(shown) + 1)) and shown.index.name == "#"
    assert "id" not in shown.columns and "seed" not in shown.columns
    assert list(shown["concept"]) == sorted(shown["concept"])  # grouped by the lesson that teaches it
    assert not shown.apply(lambda col: col.astype(str).str.fullmatch(r"s00\d-[\w-]+")).any().any()
