"""Predict, then reveal: the teacher asks (the next token of the current text, or a multiple choice), students
answer on their screens, the teacher reveals the class's answers beside the model's own probabilities.

Anonymous: the store keeps one answer per (random) student id and gives back tallies only. Every question and
answer string is shown as plain text.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from viz_ui.analysis.text import error_line, plain
from viz_ui.app.state import available_models, get_trace, get_vocab_labels, resolve
from viz_ui.classroom import ClassStoreUnavailable, class_store
from viz_ui.classroom.reveal import MAX_BARS, answer_probabilities, normalise_answer, reveal_figure, top_answers
from viz_ui.classroom.session import ClassSession, current, store_error

LIVE_SECONDS = 2.0  # how often the teacher's "N answered" is refreshed
MAX_CONTEXT = 12_000  # characters of text a next-token question carries (the store takes ≤ 16 KB a question)
NEXT_TOKEN, CHOICE = "next_token", "choice"
TAIL = 80  # characters of the text shown before "…?" to a student


def ask_form(cls: ClassSession) -> None:
    """The teacher's question form (in the Classroom expander)."""
    with st.form("class_ask", border=False):
        st.markdown("**Ask the class**")
        kind = st.radio("Question", [NEXT_TOKEN, CHOICE], key="class_q_kind", horizontal=True,
                        format_func={NEXT_TOKEN: "Which token comes next?", CHOICE: "Multiple choice"}.get)
        prompt = st.text_input("Question text (optional for the next token)", key="class_q_prompt", max_chars=500)
        choices = st.text_area("Choices, one a line (multiple choice); start the correct one with *",
                               key="class_q_choices", height=110, placeholder="*L1H3\nL0H2\nL2H0")
        tokens = st.checkbox("The choices are next tokens: show the model's probabilities", key="class_q_tokens")
        if st.form_submit_button("Ask", icon=":material/help:"):
            _ask(cls, kind, prompt, choices, tokens)


def _ask(cls: ClassSession, kind: str, prompt: str, choices: str, tokens: bool) -> None:
    state = st.session_state
    text, model = str(state.get("_text") or ""), str(state.get("_model") or "")
    question: dict = {"kind": kind, "prompt": " ".join(prompt.split())[:500]}
    if kind == NEXT_TOKEN:
        if not text.strip():
            st.error("Type a text first: the question is about the token after its last one.")
            return
        question["prompt"] = question["prompt"] or "Which token comes next?"
    else:
        lines = [line.strip() for line in choices.splitlines() if line.strip()]
        correct = next((line[1:].strip() for line in lines if line.startswith("*")), None)
        options = list(dict.fromkeys(line.lstrip("*").strip() for line in lines))
        options = [o for o in options if o]
        if not 2 <= len(options) <= 12 or any(len(o) > 200 for o in options):
            st.error("Give 2 to 12 choices, one a line, each at most 200 characters.")
            return
        question.update(choices=options, correct=correct, tokens=bool(tokens))
        question["prompt"] = question["prompt"] or "Which one?"
    if kind == NEXT_TOKEN or tokens:
        if len(text) > MAX_CONTEXT:
            st.error(f"The text is too long for a question about it (over {MAX_CONTEXT:,} characters).")
            return
        question["context"] = {"model": model, "text": text}
    try:
        class_store().ask(cls.code, cls.token, question)
    except (KeyError, PermissionError, ValueError, TypeError, ClassStoreUnavailable, OSError) as exc:
        st.error(f"The question was not asked: {plain(store_error(exc))}")
        return
    cls.hidden = None


def question_area(state, show_figure) -> None:
    """The current question above the page, on every screen of the class (call once per full run):
    the teacher sees how many answered and Reveal, a student the answer box, everyone the reveal.
    ``show_figure``: :func:`viz_ui.app.layout.show_figure` (passed in: the layout calls this module, so this module
    does not import the layout)."""
    cls = current()
    if cls is None:
        return
    try:
        question = class_store().question(cls.code)
    except (KeyError, ClassStoreUnavailable, OSError):
        return  # the bar and the poll say it
    if not question:
        return
    cls.question_changed(question)
    if cls.hidden == question["id"]:
        return
    box = st.container(border=True)
    with box:
        top, hide = st.columns([6, 1], vertical_alignment="center")
        top.markdown(f":material/help: **{plain(question.get('prompt'), 500)}**")
        hide.button("Hide", key=f"class_hide_{question['id']}", type="tertiary", icon=":material/close:",
                    on_click=lambda qid=question["id"]: setattr(cls, "hidden", qid))
        context = question.get("context") or {}
        if question.get("kind") == NEXT_TOKEN and context.get("text"):
            cut = "…" if len(context["text"]) > TAIL else ""
            st.caption(f"After the text’s last token: “{cut}{plain(context['text'][-TAIL:], None)}”")
        if question.get("revealed"):
            _reveal(cls, question, state, show_figure)
        elif cls.teacher:
            _teacher_live(question["id"])
        else:
            _answer_box(question)


@st.fragment(run_every=LIVE_SECONDS)
def _teacher_live(qid: str) -> None:
    cls = current()
    if cls is None:
        return
    try:
        n = sum(class_store().tally(cls.code, qid).values())
    except (KeyError, ValueError, ClassStoreUnavailable, OSError) as exc:
        st.caption(plain(store_error(exc)))
        return
    left, right = st.columns([3, 1], vertical_alignment="center")
    left.markdown(f"**{n}** answer{'s' * (n != 1)} so far.")
    if right.button("Reveal", key=f"class_reveal_{qid}", type="primary", icon=":material/visibility:"):
        try:
            class_store().reveal(cls.code, cls.token, qid)
        except (KeyError, PermissionError, ValueError, ClassStoreUnavailable, OSError) as exc:
            st.error(f"Not revealed: {plain(store_error(exc))}")
            return
        st.rerun()


@st.fragment
def _answer_box(question: dict) -> None:
    """A student's answer (a fragment: sending it does not rerun the page); a second answer replaces the first."""
    cls = current()
    if cls is None:
        return
    qid = question["id"]
    with st.form(f"class_answer_{qid}", border=False, enter_to_submit=True):
        if question.get("kind") == CHOICE:
            value = st.radio("Your answer", question.get("choices") or [], index=None, key=f"class_a_{qid}",
                             format_func=lambda c: plain(c, None))
        else:
            value = st.text_input("Your answer: the next token", key=f"class_a_{qid}", max_chars=200,
                                  placeholder="e.g. girl")
        sent = st.form_submit_button("Send", icon=":material/send:")
    if sent:
        answer = normalise_answer(value)
        if not answer:
            st.caption("Type or pick an answer first.")
        else:
            try:
                class_store().answer(cls.code, qid, cls.student_id, answer)
                cls.answers[qid] = answer
            except (KeyError, ValueError, TypeError, ClassStoreUnavailable, OSError) as exc:
                st.error(f"Not sent: {plain(store_error(exc))}")
    if qid in cls.answers:
        st.caption(f"Sent: “{plain(cls.answers[qid], None)}”. You may change it until the teacher reveals.")


@st.cache_data(max_entries=64, ttl=3600, show_spinner=False)
def _model_side(path: str, text: str, answers: tuple[str, ...]) -> tuple[list[tuple[float | None, int]],
                                                                       list[tuple[str, float]]]:
    """The model at ``path`` after ``text``: :func:`answer_probabilities` of ``answers``, and its own three most
    likely next tokens ``(label, probability)`` (computed once per server for a whole class)."""
    model, tokenizer = resolve(path)
    trace = get_trace(path, text)
    if trace.is_encoder_decoder or type(tokenizer).__name__ == "IdTokenizer":
        raise ValueError("this model's answers cannot be tokenised as a continuation of the text")
    probs = answer_probabilities(model, tokenizer, [int(i) for i in trace.ids], text, list(answers))
    logits = np.asarray(trace.arrays["hook_logits"][-1], dtype=np.float64)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    labels = get_vocab_labels(path)
    top = [(labels[i], float(p[i])) for i in np.argsort(-p)[:3]]
    return probs, top


def _reveal(cls: ClassSession, question: dict, state, show_figure) -> None:
    try:
        tally = class_store().tally(cls.code, question["id"])
    except (KeyError, ValueError, ClassStoreUnavailable, OSError) as exc:
        st.caption(plain(store_error(exc)))
        return
    total = sum(tally.values())
    if question.get("kind") == CHOICE:  # every choice has a row, answered or not, in the teacher's order
        answers = [(c, tally.get(c, 0)) for c in question.get("choices") or []]
        other = 0
    else:
        answers, other = top_answers(tally)
    if not total:
        st.markdown("Nobody answered.")
        return
    probs, note = None, ""
    context = question.get("context") or {}
    if context and (question.get("kind") == NEXT_TOKEN or question.get("tokens")):
        path = available_models().get(context.get("model", ""))
        try:
            if path is None:
                raise ValueError(f"the model {context.get('model')!r} is not on this server")
            computed, top = _model_side(path, context.get("text", ""), tuple(a for a, _ in answers))
            probs = [p for p, _ in computed]
            multi = sum(1 for _, n in computed if n > 1)
            note = (" A several-token answer's probability is the product of its tokens' probabilities (chain rule)."
                    if multi else "")
            note += " The model's own top 3: " + ", ".join(f"“{plain(label, 60)}” {p:.1%}" for label, p in top)
            note += "."
        except Exception as exc:  # noqa: BLE001: any failure of the model is one line, not a traceback
            st.caption(f"The model's probabilities are not shown: {plain(error_line(exc))}.")
    fig = reveal_figure(answers, total, probs, f"{total} answer{'s' * (total != 1)}", question.get("correct"))
    show_figure(fig, state, "class_answers")
    words = (f"The {MAX_BARS} most frequent answers of {total}; {other} other." if other else "")
    if probs is not None:
        words += (" The model's bar: its probability of writing the answer next (a space is put before an answer "
                  "that starts with a letter or digit)." + note)
    if words:
        st.caption(words.strip())
    if question.get("correct"):
        st.caption(f"Correct: “{plain(question['correct'], None)}” (green).")
