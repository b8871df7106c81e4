"""Exercises give hints before answers: the expected value appears only after two misses or when asked."""

from labs_lib import notebook as lab


def test_hints_come_before_the_answer(capsys):
    lab._misses.clear()
    assert lab.check_exercise("t1", None, 1234.5, hint="divide") is None
    assert "1,234" not in (out := capsys.readouterr().out) and "Hint: divide" in out
    assert lab.check_exercise("t1", 10, 1234.5, hint="divide") is False
    assert "1,234" not in (out := capsys.readouterr().out) and "Hint: divide" in out and "Try again" in out
    assert lab.check_exercise("t1", 11, 1234.5, hint="divide") is False
    assert "The answer is 1,234" in capsys.readouterr().out  # the second miss shows it
    assert lab.check_exercise("t1", 1235, 1234.5) is True
    assert "correct" in capsys.readouterr().out


def test_show_asks_for_the_answer_and_names_compare_without_case(capsys):
    lab._misses.clear()
    assert lab.check_exercise("t2", "show", 0.25) is False and "0.25" in capsys.readouterr().out
    assert lab.check_exercise("t3", "q8_0", "Q8_0") is True
    assert lab.check_exercise("t4", "Q4_0", "Q8_0", hint="lowest perplexity") is False
    out = capsys.readouterr().out
    assert "Q8_0" not in out.split("not quite")[-1] and "lowest perplexity" in out
    assert lab.check_exercise("t5", "twelve", 12.0) is False  # not a number: a miss, not a traceback


def test_a_measured_interval_accepts_any_answer_inside_it(capsys):
    lab._misses.clear()
    interval = (1.012, 1.047)
    assert lab.check_exercise("t6", 1.02, interval) is True
    assert lab.check_exercise("t6", 1.047, interval) is True  # the ends belong to it
    assert lab.check_exercise("t7", 1.05, interval) is False  # within 1% of the high end, still outside
    assert "1.012" not in capsys.readouterr().out.split("t7")[-1]  # a first miss does not give it away
    assert lab.check_exercise("t7", "show", interval) is False
    assert "[1.012, 1.047]" in capsys.readouterr().out


def test_a_list_of_names_accepts_any_of_them(capsys):
    lab._misses.clear()
    tied = ["Q8_0", "F16"]  # e.g. every variant whose interval overlaps the best one's
    assert lab.check_exercise("t8", "f16", tied) is True
    assert lab.check_exercise("t8", "Q4_0", tied) is False
    assert lab.check_exercise("t8", "Q4_0", tied) is False
    assert "any of Q8_0, F16" in capsys.readouterr().out


def test_the_prediction_written_before_the_run_is_compared_once_answered(capsys):
    lab._misses.clear()
    assert lab.check_exercise("p1", None, 480.0, prediction=120) is None
    assert "120" not in capsys.readouterr().out  # nothing about the prediction before an answer
    assert lab.check_exercise("p1", 100, 480.0, prediction=120) is False
    assert "prediction" not in capsys.readouterr().out  # nor after a first miss: it would hint at the answer
    assert lab.check_exercise("p1", 481, 480.0, prediction=120) is True
    assert "Your prediction before the run was 120: 0.25x the measured 480" in capsys.readouterr().out
    assert lab.check_exercise("p2", "show", "Q8_0", prediction="q8_0") is False
    assert "was right" in capsys.readouterr().out
    assert lab.check_exercise("p3", 1.02, (1.01, 1.05)) is True
    assert "No prediction written before the run" in capsys.readouterr().out
    lab.predict("p4", 1.2)  # the prediction cell of the exercise's section
    assert "without a reason" in capsys.readouterr().out
    assert lab.check_exercise("p4", 1.02, (1.01, 1.05)) is True
    assert "Your prediction before the run was 1.2; the run says anything in [1.01, 1.05]" in capsys.readouterr().out
    lab.predict("p5", (4e9, "70B has 80 layers of 8 KV heads"))  # with its reason
    assert "Prediction recorded, with its reason" in capsys.readouterr().out
    assert lab.check_exercise("p5", 5.0e9, 5.0e9) is True
    out = capsys.readouterr().out
    assert "Your prediction before the run was 4e+09: 0.80x the measured 5e+09" in out
    assert "Your reason then: '70B has 80 layers of 8 KV heads'" in out
    lab.predict("p6", None)
    assert "No prediction yet" in capsys.readouterr().out


def test_a_reference_run_asks_every_unanswered_exercise_and_design_task_for_its_answer():
    cells = [
        {"cell_type": "code", "source": ["answer_1 = None  # ms\n", "answer_12 = None\n", "answer_3 = 4.5\n"]},
        {"cell_type": "code", "source": 'design = None  # e.g. {"gpu": "L4"}\nif answer_1 is None:\n    design_strict = None\n'},
        {"cell_type": "markdown", "source": "answer_1 = None (a sentence, not code)"},
        {"cell_type": "code", "source": "my_design = None\nold_answer_1 = None\ndesign_strict = None\n"},
    ]
    assert lab.show_answers(cells) == 4
    assert cells[0]["source"] == 'answer_1 = "show"  # ms\nanswer_12 = "show"\nanswer_3 = 4.5\n'  # an answer stays
    # a line inside a block is the notebook's own logic, not an answer to fill in
    assert cells[1]["source"] == 'design = "show"  # e.g. {"gpu": "L4"}\nif answer_1 is None:\n    design_strict = None\n'
    assert cells[2]["source"] == "answer_1 = None (a sentence, not code)"
    assert cells[3]["source"] == 'my_design = None\nold_answer_1 = None\ndesign_strict = "show"\n'
    # as ruff formats an answer line whose comment is too long for one line
    wrapped = [{"cell_type": "code", "source": "answer_q7 = (\n    None  # one or two sentences: why …\n)\n"}]
    assert (
        lab.show_answers(wrapped) == 1 and wrapped[0]["source"] == 'answer_q7 = (\n    "show"  # one or two sentences: why …\n)\n'
    )


def test_every_answer_line_of_the_labs_is_one_a_reference_run_fills_and_the_study_time_counts():
    """An exercise or design line indented in a block is neither shown its answer by `labs run` nor counted in the
    lab's stated time: each lab's sits at the top level of its cell."""
    import json
    import re

    from conftest import REPO

    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        anywhere = re.findall(r"^[ \t]*(?:answer_\w+|design\w*) = (?:\(\s*)?None\b", code, re.MULTILINE)
        assert len(anywhere) == len(lab.UNANSWERED.findall(code)), path.name


def test_an_interval_is_labelled_by_what_it_is(capsys):
    """Lab 01's exercise 2 grades by the planner's range (its overhead estimate's ends), not a measured confidence
    interval: the answer shown names the interval the caller says it is, and no other."""
    from labs_lib import notebook as lab

    assert lab.check_exercise("i1", "show", (3.8, 6.8), interval_is="the planner's range") is False
    out = capsys.readouterr().out
    assert "anything in [3.8, 6.8] (the planner's range)" in out and "95%" not in out
    assert lab.check_exercise("i2", "show", (0.01, 0.02), interval_is="the measured 95% interval") is False
    assert "(the measured 95% interval)" in capsys.readouterr().out


def test_a_section_prediction_is_set_beside_its_measurement(capsys):
    from labs_lib import notebook

    notebook.predict("9.x", (4.0, "half the bits"))
    notebook.takeaway("9.x", 16.0, "the error ratio")
    out = capsys.readouterr().out
    assert "Prediction recorded, with its reason." in out and "the error ratio = 16." in out
    assert "0.25x the measured 16" in out and "'half the bits'" in out
    notebook.predict("9.c", (2.0, "my reason"))
    notebook.takeaway("9.c", 1.19, "a roof ratio from the catalogue", computed=True)
    out = capsys.readouterr().out
    assert out.startswith("Prediction recorded") and "Computed in this run: a roof ratio from the catalogue = 1.19." in out
    assert "1.68x the computed 1.19" in out and "measured" not in out  # nothing was measured: the run computed it
    notebook.predict("9.y", 3.0)
    notebook.takeaway("9.z", 2.0, "something else")
    out = capsys.readouterr().out
    assert "without a reason" in out and "No prediction written before the run" in out


def test_an_inline_question_marks_the_ideas_a_good_answer_names(capsys):
    from labs_lib import notebook

    names = {"the queue": ("queue", "wait"), "one at a time": ("one at a time", "alone")}
    notebook.inline_question("2.q", None, "They queue.", names)
    notebook.inline_question("2.q", "Requests WAIT behind the others.", "They queue.", names)
    notebook.inline_question("2.q", "show", "They queue.", names)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Question 2.q: not answered yet") and len(out) == 4
    assert "the queue: yours names it" in out[1] and "one at a time: not in yours" in out[1]
    assert out[2] == "  Reference answer (2.q): They queue." and out[3] == out[2]
