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
