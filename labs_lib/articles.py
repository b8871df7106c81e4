"""The five source articles and every verdict on their claims, gathered for the appendix lab ("The articles, checked").

A teaching lab shows only its own questions (`lesson`: the claims marked "lesson" in data/claims.json, at most three)
and records its whole table of measured verdicts (`record`: results/articles/labNN.json, with the engine and time).
The appendix computes afresh what needs no engine and reads the rest from those records (`gathered`)."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pandas as pd

from .claims import claims
from .errors import BadInput
from .paths import DATA_DIR, RESULTS_DIR

RECORDS_DIR = RESULTS_DIR / "articles"
LESSON_CLAIMS_MAX = 3  # a teaching lab answers at most this many of the articles' claims itself
CONCEPTS = {
    "01": "KV-cache memory",
    "02": "streaming timing",
    "03": "load testing",
    "04": "vLLM tuning",
    "05": "quantization",
    "06": "troubleshooting",
}
NOT_MEASURED = "not measured yet"


@cache
def articles() -> tuple[dict, ...]:
    """Each article: seed ("000"), its first heading as printed, an English rendering, what it argues."""
    return tuple(json.loads((DATA_DIR / "articles.json").read_text())["articles"])


def sentences(text: str) -> list[str]:
    """An article's sentences, in order: split at each line end and after 。！？, stripped, empty ones dropped. The
    unit data/claims_index.json maps (a code snippet, which carries no such mark, stays one piece)."""
    return [part.strip() for line in text.splitlines() for part in re.split(r"(?<=[。！？])", line) if part.strip()]


@cache
def sentence_index() -> dict:
    """data/claims_index.json: every sentence of each article ("000" …) with the claim ids it carries, a checkable
    statement not judged yet (`unjudged`), or why nothing in it can be checked (`not`)."""
    return json.loads((DATA_DIR / "claims_index.json").read_text())


def index_coverage() -> pd.DataFrame:
    """Per article: its sentences, how many carry something checkable, how many of those are judged (carry a claim
    id of claims.json), and how many are checkable but not judged yet."""
    rows = []
    for seed, entries in sentence_index()["articles"].items():
        checkable = [e for e in entries if "ids" in e or "unjudged" in e]
        rows.append(
            {
                "seed": seed,
                "sentences": len(entries),
                "checkable": len(checkable),
                "judged": sum("ids" in e for e in checkable),
                "not judged yet": sum("unjudged" in e and "ids" not in e for e in checkable),
                "claims": len({i for e in entries for i in e.get("ids", [])}),
            }
        )
    return pd.DataFrame(rows).set_index("seed")


def unjudged() -> pd.DataFrame:
    """The articles' checkable statements that no claim of claims.json judges yet, once each (an article that
    repeats one lists it once), with the sentences that state it."""
    rows: dict[tuple[str, str], list[str]] = {}
    for seed, entries in sentence_index()["articles"].items():
        for e in entries:
            if "unjudged" in e:
                rows.setdefault((seed, e["unjudged"]), []).append(e["text"])
    return pd.DataFrame(
        [{"seed": seed, "statement": what, "quote": " … ".join(texts)} for (seed, what), texts in rows.items()],
        columns=["seed", "statement", "quote"],
    )


def lesson_ids(lab: str) -> list[str]:
    """The ids of the claims lab `lab` answers in its own sections (data/claims.json's "lesson": true)."""
    return [c["id"] for c in claims(lab) if c.get("lesson")]


def lesson(checks: pd.DataFrame, lab: str) -> pd.DataFrame:
    """The rows of `checks` that are lab `lab`'s own questions, as a learner reads them: no claim id, and no column
    that is empty in every row (a qualitative claim states no value, so it is off by nothing); the rest of the
    claims are the appendix lab's to show."""
    mine = checks[checks["id"].isin(lesson_ids(lab))]
    print(
        f"{len(mine)} of the {len(checks)} claims judged here are this lab's questions; "
        "the appendix lab, 07 The articles, checked, shows every one with its evidence."
    )
    return mine.drop(columns="id").dropna(axis=1, how="all").reset_index(drop=True)


def record(lab: str, checks: pd.DataFrame, engine: str, folder: Path | None = None) -> Path:
    """Save lab `lab`'s table of measured verdicts for the appendix: one file per lab, the latest run's."""
    if lab not in CONCEPTS:
        raise BadInput("lab", lab, "allowed: " + ", ".join(CONCEPTS))
    folder = folder or RECORDS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"lab{lab}.json"
    measured_at = datetime.now(UTC).isoformat(timespec="seconds")
    rows = json.loads(checks.to_json(orient="records", force_ascii=False))
    # whole or not at all: the appendix may read it while another run of the lab writes it
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"lab": lab, "engine": engine, "measured_at": measured_at, "rows": rows}, ensure_ascii=False))
    os.replace(tmp, path)
    return path


def recorded(folder: Path | None = None) -> dict[str, dict]:
    """Every recorded verdict by claim id, with where it was measured ("lab 02 on llamacpp, 2026-12-04T15:40")."""
    found: dict[str, dict] = {}
    for path in sorted((folder or RECORDS_DIR).glob("lab*.json")):
        saved = json.loads(path.read_text())
        where = f"measured in lab {saved['lab']} on {saved['engine']}, {saved['measured_at'][:16].replace('T', ' ')} UTC"
        found.update({r["id"]: {**r, "judged": where} for r in saved["rows"]})
    return found


def gathered(computed: list[pd.DataFrame], folder: Path | None = None) -> pd.DataFrame:
    """Every claim of data/claims.json, one row each: its verdict from `computed` (tables judged just now), else from
    a lab's record, else NOT_MEASURED with the lab that measures it."""
    now = {r["id"]: {**r, "judged": "computed now"} for table in computed for r in table.to_dict("records")}
    found = recorded(folder) | now
    rows = []
    for c in claims():
        r = found.get(c["id"]) or {
            "verdict": NOT_MEASURED,
            "computed": "",
            "unit": "",
            "why": f"lab {c['lab']} measures these: run it, then this appendix again",
            "judged": "",
        }
        rows.append(
            {
                "id": c["id"],
                "seed": c["seed"][:3],
                "concept": CONCEPTS[c["lab"]],
                "quote": c["quote"],
                "claim": c["claim"],
                "verdict": r["verdict"],
                "computed": f"{r['computed']} {r['unit']}".strip(),
                "why": r["why"],
                "judged": r["judged"],
            }
        )
    return pd.DataFrame(rows)


def of_article(table: pd.DataFrame, seed: str) -> pd.DataFrame:
    """One article's claims from a gathered table, as a learner reads them: grouped by concept and numbered from 1
    within the article; the claim id (bookkeeping) and the seed (the article itself) are left out."""
    mine = table[table["seed"] == seed].sort_values("concept", kind="stable").drop(columns=["id", "seed"])
    return mine.set_index(pd.RangeIndex(1, len(mine) + 1, name="#"))


def coverage(table: pd.DataFrame) -> pd.DataFrame:
    """Claims per article by verdict (a gathered table)."""
    counts = table.pivot_table(index="seed", columns="verdict", values="id", aggfunc="count", fill_value=0)
    counts["claims"] = counts.sum(axis=1)
    return counts
