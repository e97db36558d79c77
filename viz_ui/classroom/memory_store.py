"""The in-process class store: every session of one server process shares it (the default; nothing to install).

Classes live in a dict guarded by one lock; an expired class is dropped when next touched and on every
``create``. See ``viz_ui.classroom.store`` for the API, the bounds and the errors.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from viz_ui.classroom.store import (CLASS_TTL_S, FOLLOW_WINDOW_S, MAX_QUESTIONS, MAX_STUDENTS, ClassStore,
                                    check_answer, check_code, check_student, check_token, encode_question,
                                    encode_view, new_code, new_token, token_digest)


@dataclass
class _Class:
    digest: str
    expires: float
    version: int = 0
    view: str | None = None
    questions: dict[str, dict] = field(default_factory=dict)  # id -> question (with "revealed")
    current: str | None = None
    answers: dict[str, dict[str, str]] = field(default_factory=dict)  # question id -> student -> answer
    students: set[str] = field(default_factory=set)
    heartbeats: dict[str, float] = field(default_factory=dict)  # following students -> time of last heartbeat


class MemoryClassStore(ClassStore):
    """A ``ClassStore`` in this process's memory (lost when the process stops)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._classes: dict[str, _Class] = {}
        self._listeners: list = []  # subscribe()'s on_change functions

    def subscribe(self, on_change):
        with self._lock:
            self._listeners.append(on_change)

        def stop() -> None:
            with self._lock:
                if on_change in self._listeners:
                    self._listeners.remove(on_change)
        return stop

    def _changed(self, code: str) -> None:
        """Tell the listeners (call after the lock is released)."""
        with self._lock:
            listeners = list(self._listeners)
        for on_change in listeners:
            on_change(code)

    def _get(self, code: str) -> _Class:
        code = check_code(code)
        klass = self._classes.get(code)
        if klass is None or klass.expires <= time.time():
            self._classes.pop(code, None)
            raise KeyError("unknown class code (it may have ended or expired)")
        return klass

    def _teacher(self, code: str, token: str) -> _Class:
        klass = self._get(code)
        check_token(token, klass.digest)
        return klass

    def _admit(self, klass: _Class, student_id: str) -> None:
        if student_id not in klass.students:
            if len(klass.students) >= MAX_STUDENTS:
                raise ValueError(f"this class is full: at most {MAX_STUDENTS:,} students")
            klass.students.add(student_id)

    def create(self) -> tuple[str, str]:
        token = new_token()
        with self._lock:
            now = time.time()
            for code in [c for c, k in self._classes.items() if k.expires <= now]:
                del self._classes[code]
            code = new_code()
            while code in self._classes:
                code = new_code()
            self._classes[code] = _Class(token_digest(token), now + CLASS_TTL_S)
        return code, token

    def publish(self, code: str, teacher_token: str, view: dict) -> int:
        encoded = encode_view(view)
        with self._lock:
            klass = self._teacher(code, teacher_token)
            klass.view, klass.version = encoded, klass.version + 1
            version = klass.version
        self._changed(check_code(code))
        return version

    def view(self, code: str) -> dict | None:
        with self._lock:
            encoded = self._get(code).view
        return None if encoded is None else json.loads(encoded)

    def version(self, code: str) -> int:
        with self._lock:
            return self._get(code).version

    def ask(self, code: str, teacher_token: str, question: dict) -> str:
        body = json.loads(encode_question(question))
        with self._lock:
            klass = self._teacher(code, teacher_token)
            if len(klass.questions) >= MAX_QUESTIONS:
                raise ValueError(f"a class asks at most {MAX_QUESTIONS} questions")
            qid = str(len(klass.questions) + 1)
            klass.questions[qid] = {"id": qid, **body, "revealed": False}
            klass.answers[qid] = {}
            klass.current = qid
        self._changed(check_code(code))
        return qid

    def question(self, code: str) -> dict | None:
        with self._lock:
            klass = self._get(code)
            return None if klass.current is None else dict(klass.questions[klass.current])

    def _question(self, klass: _Class, question_id) -> dict:
        if not isinstance(question_id, str) or question_id not in klass.questions:
            raise ValueError("unknown question")
        return klass.questions[question_id]

    def reveal(self, code: str, teacher_token: str, question_id: str) -> None:
        with self._lock:
            klass = self._teacher(code, teacher_token)
            self._question(klass, question_id)["revealed"] = True
        self._changed(check_code(code))

    def answer(self, code: str, question_id: str, student_id: str, value: str) -> None:
        check_student(student_id)
        with self._lock:
            klass = self._get(code)
            check_answer(self._question(klass, question_id), value)
            self._admit(klass, student_id)
            klass.answers[question_id][student_id] = value

    def tally(self, code: str, question_id: str) -> dict[str, int]:
        with self._lock:
            klass = self._get(code)
            self._question(klass, question_id)
            counts: dict[str, int] = {}
            for value in klass.answers[question_id].values():
                counts[value] = counts.get(value, 0) + 1
            return counts

    def follow(self, code: str, student_id: str, following: bool = True) -> None:
        check_student(student_id)
        with self._lock:
            klass = self._get(code)
            self._admit(klass, student_id)
            if following:
                klass.heartbeats[student_id] = time.time()
            else:
                klass.heartbeats.pop(student_id, None)

    def followers(self, code: str) -> int:
        with self._lock:
            klass = self._get(code)
            since = time.time() - FOLLOW_WINDOW_S
            return sum(seen >= since for seen in klass.heartbeats.values())

    def ttl(self, code: str) -> int:
        with self._lock:
            return max(0, int(self._get(code).expires - time.time()))

    def close(self, code: str, teacher_token: str) -> None:
        with self._lock:
            self._teacher(code, teacher_token)
            del self._classes[check_code(code)]
        self._changed(check_code(code))
