"""The class's shared state: one API over two back ends (in-process and Redis).

A teacher creates a class and gets a short code (for the students) and a secret token (for the teacher only). The
teacher publishes the view the class should see (a page and its link's parameters) and asks questions; students
holding only the code read the view, send a heartbeat while they follow, and answer. Everything a class holds is
bounded and expires a day after the class was created.

Two back ends share this module's checks, so they cannot differ on what they accept:
``viz_ui.classroom.memory_store.MemoryClassStore`` (one process: the default, nothing to install) and
``viz_ui.classroom.redis_store.RedisClassStore`` (redis-py; several app replicas share one Redis).
``viz_ui.classroom.class_store()`` picks one from ``VIZ_CLASS_STORE`` (``redis://host:port/db``; unset = in-process).

Errors: an unknown or expired code raises ``KeyError``; a wrong or missing teacher token ``PermissionError``;
values beyond the bounds below ``ValueError``; values of the wrong type ``TypeError``; an unreachable Redis
``ClassStoreUnavailable``. Every message is one line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: a code read off a projector
CODE_LENGTH = 6
CLASS_TTL_S = 86_400  # a class lives at most a day
MAX_VIEW_BYTES = 64 * 1024  # a published view, as UTF-8 JSON
MAX_QUESTION_BYTES = 16 * 1024
MAX_PROMPT_CHARS = 500
MAX_CHOICES = 12
MAX_ANSWER_CHARS = 200  # also the bound of a choice
MAX_STUDENTS = 2_000  # distinct students who followed or answered
MAX_QUESTIONS = 200
MAX_STUDENT_ID_CHARS = 64
FOLLOW_WINDOW_S = 10.0  # a follower whose last heartbeat is older no longer counts
QUESTION_KINDS = ("next_token", "choice")
_CODE_RE = re.compile(f"^[{CODE_ALPHABET}]{{{CODE_LENGTH}}}$")


class ClassStoreUnavailable(RuntimeError):
    """The store's back end (Redis) cannot be reached."""


def new_code() -> str:
    """A random class code: ``CODE_LENGTH`` characters of ``CODE_ALPHABET`` (32⁶ ≈ 10⁹ codes)."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def new_token() -> str:
    """A teacher token: 128 random bits, URL-safe."""
    return secrets.token_urlsafe(16)


def token_digest(token: str) -> str:
    """What the store keeps of a teacher token: its SHA-256 (hex), never the token itself."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_code(code) -> str:
    """The code normalised (stripped, upper case). Raises ``KeyError`` when it cannot be a class code."""
    if not isinstance(code, str) or not _CODE_RE.match(code.strip().upper()):
        raise KeyError("unknown class code")
    return code.strip().upper()


WRONG_TOKEN = "only the teacher who started this class can do that (wrong or missing teacher token)"


def check_token(token, digest: str | None) -> None:
    """Raises ``PermissionError`` unless ``token`` is the teacher token whose digest is ``digest``."""
    if not isinstance(token, str) or not token or not digest or not hmac.compare_digest(token_digest(token), digest):
        raise PermissionError(WRONG_TOKEN)


def _json(value, what: str, limit: int) -> str:
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the {what} must hold only JSON values (text, numbers, lists, dicts): {exc}") from None
    if len(encoded.encode("utf-8")) > limit:
        raise ValueError(f"the {what} is too large: at most {limit // 1024} KB")
    return encoded


def encode_view(view) -> str:
    """A view as compact JSON. Raises ``TypeError`` (not a dict of JSON values) or ``ValueError`` (> 64 KB)."""
    if not isinstance(view, dict):
        raise TypeError(f"a view is a dict, not {type(view).__name__}")
    return _json(view, "view", MAX_VIEW_BYTES)


def _text(value, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"the {what} must be text, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"the {what} is empty")
    if len(value) > limit:
        raise ValueError(f"the {what} is too long: at most {limit} characters")
    return value


def encode_question(question) -> str:
    """A question as compact JSON, checked: ``kind`` one of ``QUESTION_KINDS``, a ``prompt`` of at most 500
    characters, for "choice" 2–12 distinct ``choices`` of at most 200 characters each, ≤ 16 KB in all. The keys
    ``id`` and ``revealed`` are the store's. Raises ``TypeError`` or ``ValueError``."""
    if not isinstance(question, dict):
        raise TypeError(f"a question is a dict, not {type(question).__name__}")
    kind = question.get("kind")
    if kind not in QUESTION_KINDS:
        raise ValueError(f"a question's kind is one of {', '.join(QUESTION_KINDS)}")
    _text(question.get("prompt"), "question", MAX_PROMPT_CHARS)
    if kind == "choice":
        choices = question.get("choices")
        if not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES:
            raise ValueError(f"a multiple-choice question has 2 to {MAX_CHOICES} choices")
        for choice in choices:
            _text(choice, "choice", MAX_ANSWER_CHARS)
        if len(set(choices)) != len(choices):
            raise ValueError("the choices must differ from each other")
    body = {k: v for k, v in question.items() if k not in ("id", "revealed")}
    return _json(body, "question", MAX_QUESTION_BYTES)


def check_student(student_id) -> str:
    """Raises ``TypeError``/``ValueError`` unless ``student_id`` is 1–64 characters of text."""
    return _text(student_id, "student id", MAX_STUDENT_ID_CHARS)


def check_answer(question: dict, value) -> str:
    """Raises ``TypeError``/``ValueError`` unless ``value`` is a valid answer to ``question`` (text of at most 200
    characters; for "choice", one of the choices)."""
    _text(value, "answer", MAX_ANSWER_CHARS)
    if question.get("kind") == "choice" and value not in question.get("choices", []):
        raise ValueError("that answer is not one of the question's choices")
    return value


class ClassStore(ABC):
    """A class's view, questions, answers and followers, shared by every session that holds its code.

    ``create() -> (code, teacher_token)``; the teacher token alone lets ``publish``, ``ask``, ``reveal`` and
    ``close``; the code lets ``view``, ``version``, ``question``, ``answer``, ``tally``, ``follow``,
    ``followers`` and ``ttl``. See the module docstring for the errors and ``MAX_*`` for the bounds.
    """

    @abstractmethod
    def create(self) -> tuple[str, str]:
        """Start a class: ``(code, teacher_token)``. The class expires after ``CLASS_TTL_S`` seconds."""

    @abstractmethod
    def publish(self, code: str, teacher_token: str, view: dict) -> int:
        """Make ``view`` (a JSON-serialisable dict ≤ 64 KB) the class's view; returns its version (1, 2, …)."""

    @abstractmethod
    def view(self, code: str) -> dict | None:
        """The last published view, or None before the first publish."""

    @abstractmethod
    def version(self, code: str) -> int:
        """The last published view's version: 0 before the first publish (a cheap poll)."""

    @abstractmethod
    def ask(self, code: str, teacher_token: str, question: dict) -> str:
        """Ask ``question`` (see ``encode_question``): it becomes the class's current question; returns its id."""

    @abstractmethod
    def question(self, code: str) -> dict | None:
        """The latest question as ``{"id": …, **question, "revealed": bool}``, or None before the first."""

    @abstractmethod
    def reveal(self, code: str, teacher_token: str, question_id: str) -> None:
        """Mark the question revealed. Raises ``ValueError`` for an unknown question id."""

    @abstractmethod
    def answer(self, code: str, question_id: str, student_id: str, value: str) -> None:
        """Record a student's answer; a second answer to the same question replaces the first."""

    @abstractmethod
    def tally(self, code: str, question_id: str) -> dict[str, int]:
        """``{answer: number of students}`` for the question (anonymous)."""

    @abstractmethod
    def follow(self, code: str, student_id: str, following: bool = True) -> None:
        """A student's heartbeat: following (or not) as of now."""

    @abstractmethod
    def followers(self, code: str) -> int:
        """Students whose last heartbeat said "following" less than ``FOLLOW_WINDOW_S`` seconds ago."""

    @abstractmethod
    def ttl(self, code: str) -> int:
        """Seconds the class has left (at most ``CLASS_TTL_S``)."""

    @abstractmethod
    def close(self, code: str, teacher_token: str) -> None:
        """End the class now: its code becomes unknown."""

    def subscribe(self, on_change: Callable[[str], None]) -> Callable[[], None] | None:
        """Have ``on_change(code)`` called (from another thread, soon after) whenever class ``code``'s news changes:
        a view published, a question asked or revealed, the class closed; it must return at once. Returns the
        function that stops the calls, or None when this back end cannot tell (then read the store again and again).
        A call may be missed (Redis restarting): a reader still reads the store now and then."""
        return None
