"""Class mode (issue 25): a teacher's session and students' sessions through AppTest over the in-process class
store; the view and reveal rules without Streamlit."""

from __future__ import annotations

import json

import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT, plotly_array, shown_figures
from viz_model import load_model
from viz_ui.app.navigation import PAGES
from viz_ui.app.layout import CLASSROOM_PANEL
from viz_ui.classroom import ClassStoreUnavailable, class_store
from viz_ui.classroom.reveal import (answer_probabilities, continuation, normalise_answer, reveal_figure,
                                     top_answers)
from viz_ui.classroom.view import keys_to_reset, make_view, student_params, valid_code

TEXT = "Once upon a time, there was a little"


def session(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run(at) -> AppTest:
    """A rerun of a session (or of a widget's session after a change): the student's poll runs inline in every full
    run (the browser's timer cannot tick in AppTest)."""
    at = at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def texts(at: AppTest) -> str:
    return " ".join(m.value for m in (*at.markdown, *at.caption, *at.warning))


def open_classroom(at: AppTest) -> AppTest:
    """Unfold the sidebar's Classroom expander, as a click on it does: it is lazy (its controls are drawn while it
    is open), so a rerun draws them."""
    at.session_state[CLASSROOM_PANEL] = True
    return run(at)


def test_the_classroom_expander_draws_its_controls_only_while_open():
    at = session()
    assert [e.label for e in at.sidebar.expander][-1] == "Classroom"  # below the navigation's sections
    shown = lambda: {w.key for w in (*at.button, *at.toggle, *at.radio, *at.slider)}
    assert not shown() & {"class_start", "lecture", "theme", "scale", "export"}  # closed: none drawn
    open_classroom(at)
    assert {"class_start", "lecture", "theme", "scale", "export"} <= shown()
    run(at.toggle(key="lecture").set_value(True))
    at.session_state[CLASSROOM_PANEL] = False  # folded again: the choice stays, in the session and in the link
    run(at)
    assert "lecture" not in shown() and at.query_params["lecture"] == "true"
    assert not at.get("download_button")  # lecture mode hides every download: the value still applies
    at.switch_page("pages/attention.py")
    run(at)
    assert at.query_params["lecture"] == "true" and not at.get("download_button")


def start_class() -> tuple[AppTest, str]:
    teacher = open_classroom(session())
    run(teacher.button(key="class_start").click())
    code = teacher.query_params["class"]
    assert valid_code(code) == code and teacher.query_params["teach"]
    return teacher, code


# --- the view and reveal rules ----------------------------------------------------------------------------------

def test_a_view_leaves_out_the_class_and_each_screens_display():
    view = make_view("pages/attention.py", {"class": "ABCDEF", "teach": "secret", "lecture": "true", "theme": "dark",
                                            "head": "2", "text": "short"}, {"text": "the long text", "layer": 3})
    assert view == {"page": "pages/attention.py", "params": {"head": "2", "text": "the long text", "layer": "3"}}
    link = student_params(view["params"], {"theme": "dark", "head": "7", "teach": "x"}, "ABCDEF")
    assert link == {"head": "2", "text": "the long text", "layer": "3", "theme": "dark", "class": "ABCDEF"}
    assert keys_to_reset({"temperature": "0.5"}, {"head": "2"}, {"lecture": "true", "class": "A"}) == {"temperature",
                                                                                                      "head"}


@pytest.mark.parametrize("typed, code", [(" k7qx2m ", "K7QX2M"), ("K7QX2", None), ("K7QX2O", None),
                                         ("<b>x</b>", None), (None, None), ("K7QX2M7", None)])
def test_class_codes_are_six_letters_and_digits_without_look_alikes(typed, code):
    assert valid_code(typed) == code


def test_answers_are_counted_as_typed_less_whitespace_and_continue_the_text_with_a_space():
    assert normalise_answer("  big \n dog ") == "big dog" and len(normalise_answer("x" * 500)) == 200
    assert normalise_answer("The") != normalise_answer("the")
    assert continuation("a little", "girl") == " girl" and continuation("a little ", "girl") == "girl"
    assert continuation("a little", ".") == "." and continuation("", "girl") == "girl"
    assert top_answers({"b": 2, "a": 2, "c": 5, "d": 1}, k=3) == ([("c", 5), ("a", 2), ("b", 2)], 1)


def test_the_model_side_is_the_chain_rule_of_the_models_own_next_token_probabilities():
    model, tok = load_model()
    prefix = tok.encode(TEXT).ids
    answers = ["girl", "dog named Max", "."]
    got = answer_probabilities(model, tok, prefix, TEXT, answers)
    for answer, (p, n) in zip(answers, got):
        ids = tok.encode(continuation(TEXT, answer), add_special_tokens=False).ids
        expected, seen = 1.0, list(prefix)
        for t in ids:  # one forward pass per token, reading the recorded hook_probs at the last position
            _, cache = model.run_with_cache(torch.tensor([seen]))
            expected *= float(cache["hook_probs"][0, -1, t])
            seen.append(t)
        assert n == len(ids) and p == pytest.approx(expected, rel=1e-4)
    assert got[1][1] > 1 and got[0][1] == 1


def test_the_reveal_figure_shows_answers_as_plain_text():
    fig = reveal_figure([("<b>mat</b>", 2), ("rug", 1)], 3, [0.25, None], "3 answers", correct="rug")
    data = json.loads(fig.to_json())
    assert data["layout"]["yaxis"]["ticktext"] == ["&lt;b&gt;mat&lt;/b&gt;", "rug"]
    assert data["data"][0]["text"] == ["2 · 67%", "1 · 33%"] and data["data"][1]["text"] == ["25.0%", "n/a"]
    assert data["data"][0]["marker"]["color"] == ["#1f77b4", "#1a7f37"]


# --- following --------------------------------------------------------------------------------------------------

def test_students_follow_the_teachers_text_page_and_head_and_may_stop_and_catch_up():
    teacher, code = start_class()
    link = teacher.sidebar.code[0].value
    assert link.endswith(f"/?class={code}") and "teach" not in link
    assert all("teach=" not in c.value for c in teacher.sidebar.code)  # nor the "Link to this view"
    student = session({"class": code})
    assert f"Following class {code}" in texts(student) and "teach" not in student.query_params
    assert class_store().followers(code) == 1 and f"Class **{code}** · 0 students" in texts(teacher)

    run(teacher.text_area(key="text").set_value(TEXT))
    assert run(student).text_area(key="text").value == TEXT and student.query_params["class"] == code
    teacher.switch_page("pages/attention.py").run()
    run(teacher.selectbox(key="head").set_value(5))
    run(student)
    assert student.title[0].value == "Attention" and student.selectbox(key="head").value == 5
    assert student.query_params["head"] == "5" and student.query_params["class"] == code

    run(button(student, "Stop following").click())
    assert class_store().followers(code) == 0
    run(teacher.selectbox(key="head").set_value(1))
    assert run(student).selectbox(key="head").value == 5 and "Exploring on your own" in texts(student)
    run(button(student, "Catch up").click())
    assert student.selectbox(key="head").value == 1 and f"Following class {code}" in texts(student)


def test_a_view_whose_rerun_was_lost_is_applied_again(monkeypatch):
    """The rerun a student's poll asks for (the teacher's page and link) can be replaced by one the browser asked for
    meanwhile with its old page and link (Streamlit merges pending rerun requests, the newer page and query string
    winning). Emulated: the poll applies the view but its rerun does nothing, and the next run comes for another
    page with the old link. That run notices and applies the view again: the teacher's page, head and text."""
    import streamlit as st

    teacher, code = start_class()
    student = session({"class": code})
    teacher.switch_page("pages/attention.py").run()
    run(teacher.selectbox(key="head").set_value(5))
    run(student)
    assert student.title[0].value == "Attention" and student.selectbox(key="head").value == 5
    old = dict(student.query_params)
    run(teacher.text_area(key="text").set_value(TEXT))
    run(teacher.selectbox(key="head").set_value(2))
    with monkeypatch.context() as lost:
        lost.setattr(st, "switch_page", lambda *args, **kwargs: None)
        lost.setattr(st, "rerun", lambda *args, **kwargs: None)
        run(student)  # the poll applied the new view; its rerun never came
    student.query_params.clear()
    student.query_params.update(old)  # the browser's request: the old link, and another page
    student.switch_page("pages/tokens.py")
    run(student)
    assert student.title[0].value == "Attention" and student.selectbox(key="head").value == 2
    assert student.query_params["head"] == "2" and student.text_area(key="text").value == TEXT
    assert student.query_params["class"] == code and f"Following class {code}" in texts(student)


def test_a_poll_asks_again_for_the_full_run_an_applied_view_never_got():
    """A student's poll applied a view (its page and link) and asked for a full run that never came (no later run
    checks it): after WAIT_POLLS more polls without a full run, a poll asks again, at most MAX_ATTEMPTS times in
    all; a full run (check_applied) resets the count; a student exploring on their own is left alone."""
    from viz_ui.classroom.follow import MAX_ATTEMPTS, WAIT_POLLS, rerun_overdue
    from viz_ui.classroom.session import ClassSession
    cls = ClassSession("ABC234", "student", expect=("pages/attention.py", {"head": "2"}), attempts=1)
    asked = [rerun_overdue(cls) for _ in range(3 * (WAIT_POLLS + 1))]
    assert asked == ([False] * WAIT_POLLS + [True]) * (MAX_ATTEMPTS - 1) + [False] * (WAIT_POLLS + 1)
    assert cls.expect is None and cls.attempts == 0  # given up: Catch up applies the view again
    assert not any(rerun_overdue(cls) for _ in range(5))  # nothing applied: nothing to ask for
    exploring = ClassSession("ABC234", "student", following=False, expect=("pages/tokens.py", {}), attempts=1)
    assert not any(rerun_overdue(exploring) for _ in range(5))


def test_a_wrong_or_ended_class_is_one_line_and_the_app_goes_on():
    student = session({"class": "ZZZZZZ"})
    assert [w.value for w in student.warning] == [
        "There is no class ZZZZZZ: the code is wrong, or the class has ended."]
    assert "class" not in student.query_params and student.title
    bad = session({"class": "<img src=x>"})
    assert "is not a class code" in bad.warning[0].value and "\\<img src" in bad.warning[0].value  # plain text
    teacher, code = start_class()
    student = session({"class": code})
    run(button(teacher, "End the class").click())
    run(student)
    assert f"Class {code} has ended." in texts(student) and "class" not in student.query_params


def test_every_page_publishes_the_teachers_view_in_the_run_that_shows_it():
    """The students' bell rings for a published view only: a page that left it for the teacher's next tick (every
    TICK_SECONDS, in the browser) made the class wait up to a second longer (bench/class_live.py: page → tokens,
    first student after 1.3 s while the teacher's run took 46 ms). AppTest never ticks."""
    teacher, code = start_class()
    for page in [p for p, _, _ in PAGES[1:]] + ["app.py"]:
        run(teacher.switch_page(page))
        view = class_store().view(code)
        assert view["page"] == page, (page, view)
        link = make_view(page, dict(teacher.query_params), {})["params"]
        assert link.items() <= view["params"].items(), (page, link, view)  # the link as the run left it


def test_the_teachers_link_resumes_teaching_in_a_new_session_without_a_new_version():
    teacher, code = start_class()
    token, version = teacher.query_params["teach"], class_store().version(code)
    again = open_classroom(session({"class": code, "teach": token}))
    assert f"Teaching class **{code}**" in texts(again) and class_store().version(code) == version
    thief = session({"class": code, "teach": "not-the-token"})
    run(thief.text_area(key="text").set_value("a change"))
    assert class_store().view(code)["params"]["text"] != "a change"


# --- predict, then reveal -------------------------------------------------------------------------------------

def test_a_next_token_question_is_answered_anonymously_and_revealed_beside_the_model():
    teacher, code = start_class()
    run(teacher.text_area(key="text").set_value(TEXT))
    students = [session({"class": code}) for _ in range(3)]
    run(button(teacher, "Ask").click())
    for s, answer in zip(students, ["girl", " girl ", "<b>dog</b>"]):
        run(s)
        qid = class_store().question(code)["id"]
        s.text_input(key=f"class_a_{qid}").set_value(answer)
        run(button(s, "Send").click())
    assert class_store().tally(code, qid) == {"girl": 2, "<b>dog</b>": 1}
    assert "**3** answers so far." in texts(run(teacher))
    run(button(teacher, "Reveal").click())
    model, tok = load_model()
    expected = answer_probabilities(model, tok, tok.encode(TEXT).ids, TEXT, ["girl", "<b>dog</b>"])
    for screen in (teacher, *[run(s) for s in students]):
        fig = next(f for f in shown_figures(screen) if f["layout"]["title"]["text"] == "3 answers")
        assert fig["layout"]["yaxis"]["ticktext"] == ["girl", "&lt;b&gt;dog&lt;/b&gt;"]
        assert fig["data"][0]["text"] == ["2 · 67%", "1 · 33%"]
        assert plotly_array(fig["data"][1]["x"]) == pytest.approx([p for p, _ in expected], rel=1e-4)


def test_a_multiple_choice_question_lists_every_choice_and_marks_the_correct_one():
    teacher, code = start_class()
    student = session({"class": code})
    teacher.radio(key="class_q_kind").set_value("choice")
    teacher.text_input(key="class_q_prompt").set_value("Which head copies?")
    teacher.text_area(key="class_q_choices").set_value("L0H1\n*L1H3\nL2H0")
    run(button(teacher, "Ask").click())
    run(student)
    qid = class_store().question(code)["id"]
    student.radio(key=f"class_a_{qid}").set_value("L1H3")
    run(button(student, "Send").click())
    run(button(run(teacher), "Reveal").click())
    fig = shown_figures(run(student))[0]
    assert fig["layout"]["yaxis"]["ticktext"] == ["L0H1", "L1H3", "L2H0"] and len(fig["data"]) == 1
    assert fig["data"][0]["text"] == ["0 · 0%", "1 · 100%", "0 · 0%"]
    assert "Correct: “L1H3”" in " ".join(c.value for c in student.caption)


@pytest.mark.parametrize("setting, seconds", [(None, 1.0), ("2.5", 2.5), ("0.1", 1.0), ("often", 1.0)])
def test_the_poll_period_is_read_from_the_environment_within_bounds(monkeypatch, setting, seconds):
    from viz_ui.classroom.follow import _poll_seconds
    if setting is None:
        monkeypatch.delenv("VIZ_CLASS_POLL_SECONDS", raising=False)
    else:
        monkeypatch.setenv("VIZ_CLASS_POLL_SECONDS", setting)
    assert _poll_seconds() == seconds


def test_a_store_that_stops_answering_is_one_line_that_goes_away(monkeypatch):
    teacher, code = start_class()
    student = session({"class": code})
    store = class_store()
    real = store.version

    def down(code):
        raise ClassStoreUnavailable("Redis is restarting")
    monkeypatch.setattr(store, "version", down)
    run(student)
    assert "did not answer the last check" in texts(student) and f"Following class {code}" in texts(student)
    monkeypatch.setattr(store, "version", real)
    run(teacher.text_area(key="text").set_value(TEXT))
    run(student)
    assert "did not answer" not in texts(student) and student.text_area(key="text").value == TEXT
