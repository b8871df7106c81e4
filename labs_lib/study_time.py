"""How long a lab takes to work through, from its own cells: its words read at WORDS_PER_MINUTE, plus minutes for
each build-it, fix-it, exercise, design task and prediction it asks for. Each notebook states its plan from this (with its
run time added); tests/test_project.py holds each statement to at least this estimate and the README's table to the
notebooks."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .notebook import UNANSWERED

WORDS_PER_MINUTE = 200  # prose read closely, tables and code included as words
BUILD_IT_MIN = 12  # read the task, write the function, run the check, fix what it names (10-20 minutes)
EXERCISE_MIN = 5
DESIGN_TASK_MIN = 10
PREDICTION_MIN = 2  # a value and a reason, written before the section runs
FIX_IT_MIN = 4  # run a broken snippet, read the diagnosis, edit a line or two, run again
BUILD_IT_TAG = "build-it"
FIX_IT_TAG = "fix-it"


@dataclass(frozen=True)
class StudyTime:
    """Minutes to work through one lab, engine time not included."""

    words: int
    build_its: int
    exercises: int
    design_tasks: int
    predictions: int
    fix_its: int = 0

    @property
    def reading_min(self) -> float:
        return self.words / WORDS_PER_MINUTE

    @property
    def writing_min(self) -> float:
        return (
            self.build_its * BUILD_IT_MIN
            + self.exercises * EXERCISE_MIN
            + self.design_tasks * DESIGN_TASK_MIN
            + self.predictions * PREDICTION_MIN
            + self.fix_its * FIX_IT_MIN
        )

    @property
    def total_min(self) -> int:
        """Reading and writing, rounded up to 5 minutes."""
        return 5 * math.ceil((self.reading_min + self.writing_min) / 5)


def study_time(notebook: Path) -> StudyTime:
    """A notebook's StudyTime: the words of its markdown and code cells (the participant reads both), its build-it
    cells, its fix-it cells, its exercises (`answer_… = None` lines), design tasks (`design… = None`) and predictions
    (each `lab.predict(` of a section)."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    code = "\n".join(s for c, s in zip(cells, sources, strict=True) if c["cell_type"] == "code")
    return StudyTime(
        words=sum(len(re.findall(r"[\w'’]+", s)) for s in sources),
        build_its=sum(BUILD_IT_TAG in c["metadata"].get("tags", []) for c in cells),
        exercises=sum(m.group(2).startswith("answer_") for m in UNANSWERED.finditer(code)),
        design_tasks=sum(m.group(2).startswith("design") for m in UNANSWERED.finditer(code)),
        predictions=code.count("lab.predict("),
        fix_its=sum(FIX_IT_TAG in c["metadata"].get("tags", []) for c in cells),
    )


PLAN = re.compile(r"plan (\d+) minutes to work through it")
SPLIT = re.compile(r"plan \d+ minutes to work through it \((\d+) reading, (\d+) writing and predicting")


def stated_plan_min(notebook: Path) -> int | None:
    """The minutes a notebook's introduction tells the participant to plan ("plan N minutes to work through it")."""
    found = PLAN.search("".join(json.loads(Path(notebook).read_text())["cells"][0]["source"]))
    return int(found.group(1)) if found else None


def stated_split_min(notebook: Path) -> tuple[int, int] | None:
    """The (reading, writing) minutes a notebook's introduction states beside its plan, if it states them."""
    found = SPLIT.search("".join(json.loads(Path(notebook).read_text())["cells"][0]["source"]))
    return (int(found.group(1)), int(found.group(2))) if found else None
