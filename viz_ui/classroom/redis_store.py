"""The class store in Redis (redis-py): every app replica behind the load balancer sees the same classes.

Keys of class ``CODE`` (all expire with the class, ``CLASS_TTL_S`` after it was created):

| key | type | holds |
|---|---|---|
| ``viz:class:CODE`` | hash | ``digest`` (SHA-256 of the teacher token), ``expires`` (epoch s), ``version``, ``view`` (JSON), ``asked``, ``current`` |
| ``viz:class:CODE:q`` | hash | question id → question JSON (with ``revealed``) |
| ``viz:class:CODE:a:ID`` | hash | student id → answer, for question ID |
| ``viz:class:CODE:s`` | set | every student who followed or answered (the 2,000 bound) |
| ``viz:class:CODE:hb`` | sorted set | following students, scored by the time of their last heartbeat |

Every change of a class's news (a view published, a question asked or revealed, the class closed) is also published
on the channel ``viz:class:CODE:news`` (Redis pub/sub), which :meth:`RedisClassStore.subscribe` listens to.

The checks that must not race (admitting a student under the bound, counting questions) run as Lua scripts,
which Redis executes atomically. A lost connection is retried three times (a restarted Redis is reached again);
past that, ``ClassStoreUnavailable``. See ``viz_ui.classroom.store`` for the API, bounds and errors.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import Counter

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from viz_ui.classroom.store import (CLASS_TTL_S, FOLLOW_WINDOW_S, MAX_QUESTIONS, MAX_STUDENTS, ClassStore,
                                    ClassStoreUnavailable, WRONG_TOKEN, check_answer, check_code, check_student, check_token,
                                    encode_question, encode_view, new_code, new_token, token_digest)

_UNKNOWN = "unknown class code (it may have ended or expired)"
NEWS_CHANNEL = "viz:class:{code}:news"  # published to at every change of a class's news (subscribe())

# KEYS: class hash, students set, heartbeats zset; ARGV: student, limit, now, following (1/0)
# -> -1 unknown class, 0 class full, 1 done
_FOLLOW = """
local expires = redis.call('HGET', KEYS[1], 'expires')
if not expires then return -1 end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 0 then
  if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[2]) then return 0 end
  redis.call('SADD', KEYS[2], ARGV[1])
  redis.call('EXPIREAT', KEYS[2], expires)
end
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
  redis.call('EXPIREAT', KEYS[3], expires)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', tonumber(ARGV[3]) - 600)
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return 1
"""

# KEYS: class hash, questions hash; ARGV: digest, question JSON (without id), limit
# -> -1 unknown class, -2 wrong token, 0 too many questions, else the new question's number
_ASK = """
local fields = redis.call('HMGET', KEYS[1], 'digest', 'expires')
if not fields[1] then return -1 end
if fields[1] ~= ARGV[1] then return -2 end
local n = redis.call('HINCRBY', KEYS[1], 'asked', 1)
if n > tonumber(ARGV[3]) then redis.call('HINCRBY', KEYS[1], 'asked', -1) return 0 end
local q = cjson.decode(ARGV[2])
q['id'] = tostring(n)
q['revealed'] = false
redis.call('HSET', KEYS[2], tostring(n), cjson.encode(q))
redis.call('EXPIREAT', KEYS[2], fields[2])
redis.call('HSET', KEYS[1], 'current', tostring(n))
return n
"""


def _reachable(method):
    """Turn redis-py's connection errors into one-line ``ClassStoreUnavailable``."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ClassStoreUnavailable(f"the class store (Redis at {self.where}) cannot be reached: "
                                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return wrapper


class RedisClassStore(ClassStore):
    """A ``ClassStore`` in Redis at ``url`` (``redis://host:port/db``); nothing is contacted until first use."""

    def __init__(self, url: str) -> None:
        self._redis = redis.Redis.from_url(
            url, decode_responses=True, socket_timeout=2.0, socket_connect_timeout=2.0, health_check_interval=10,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError])
        kwargs = self._redis.connection_pool.connection_kwargs
        self.where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"  # never the password
        self._follow = self._redis.register_script(_FOLLOW)
        self._ask = self._redis.register_script(_ASK)

    @staticmethod
    def _key(code: str, suffix: str = "") -> str:
        return f"viz:class:{code}{suffix}"

    def _fields(self, code: str, *names: str) -> list:
        """The class hash's ``names`` fields (``digest`` first); raises KeyError for an unknown class."""
        values = self._redis.hmget(self._key(code), "digest", *names)
        if values[0] is None:
            raise KeyError(_UNKNOWN)
        return values

    def _teacher(self, code: str, token: str, *names: str) -> list:
        values = self._fields(code, *names)
        check_token(token, values[0])
        return values

    @_reachable
    def create(self) -> tuple[str, str]:
        token = new_token()
        expires = int(time.time()) + CLASS_TTL_S
        while True:
            code = new_code()
            key = self._key(code)
            if self._redis.hsetnx(key, "digest", token_digest(token)):
                break
        self._redis.pipeline().hset(key, mapping={"expires": expires, "version": 0, "asked": 0}) \
            .expireat(key, expires).execute()
        return code, token

    @_reachable
    def publish(self, code: str, teacher_token: str, view: dict) -> int:
        code, encoded = check_code(code), encode_view(view)
        self._teacher(code, teacher_token)
        _, version, _ = self._redis.pipeline().hset(self._key(code), "view", encoded) \
            .hincrby(self._key(code), "version", 1).publish(NEWS_CHANNEL.format(code=code), "view").execute()
        return int(version)

    @_reachable
    def view(self, code: str) -> dict | None:
        encoded = self._fields(check_code(code), "view")[1]
        return None if encoded is None else json.loads(encoded)

    @_reachable
    def version(self, code: str) -> int:
        return int(self._fields(check_code(code), "version")[1] or 0)

    @_reachable
    def ask(self, code: str, teacher_token: str, question: dict) -> str:
        code, body = check_code(code), encode_question(question)
        if not isinstance(teacher_token, str) or not teacher_token:
            raise PermissionError(WRONG_TOKEN)
        done = self._ask(keys=[self._key(code), self._key(code, ":q")],
                         args=[token_digest(teacher_token), body, MAX_QUESTIONS])
        if done == -1:
            raise KeyError(_UNKNOWN)
        if done == -2:
            raise PermissionError(WRONG_TOKEN)
        if done == 0:
            raise ValueError(f"a class asks at most {MAX_QUESTIONS} questions")
        self._redis.publish(NEWS_CHANNEL.format(code=code), "question")
        return str(done)

    def _question(self, code: str, question_id) -> dict:
        if not isinstance(question_id, str) or not question_id:
            raise ValueError("unknown question")
        encoded = self._redis.hget(self._key(code, ":q"), question_id)
        if encoded is None:
            raise ValueError("unknown question")
        return json.loads(encoded)

    @_reachable
    def question(self, code: str) -> dict | None:
        code = check_code(code)
        current = self._fields(code, "current")[1]
        return None if current is None else self._question(code, current)

    @_reachable
    def reveal(self, code: str, teacher_token: str, question_id: str) -> None:
        code = check_code(code)
        self._teacher(code, teacher_token)
        question = self._question(code, question_id)
        question["revealed"] = True
        self._redis.pipeline().hset(self._key(code, ":q"), question_id, json.dumps(question, ensure_ascii=False)) \
            .publish(NEWS_CHANNEL.format(code=code), "reveal").execute()

    def _admit(self, code: str, student_id: str, following: bool | None) -> None:
        done = self._follow(keys=[self._key(code), self._key(code, ":s"), self._key(code, ":hb")],
                            args=[student_id, MAX_STUDENTS, time.time(), "1" if following else "0"])
        if done == -1:
            raise KeyError(_UNKNOWN)
        if done == 0:
            raise ValueError(f"this class is full: at most {MAX_STUDENTS:,} students")

    @_reachable
    def answer(self, code: str, question_id: str, student_id: str, value: str) -> None:
        code, student_id = check_code(code), check_student(student_id)
        expires = self._fields(code, "expires")[1]
        check_answer(self._question(code, question_id), value)
        following = self._redis.zscore(self._key(code, ":hb"), student_id) is not None
        self._admit(code, student_id, following)  # admission under the bound; keeps the heartbeat as it was
        key = self._key(code, f":a:{question_id}")
        self._redis.pipeline().hset(key, student_id, value).expireat(key, int(expires)).execute()

    @_reachable
    def tally(self, code: str, question_id: str) -> dict[str, int]:
        code = check_code(code)
        self._fields(code)
        self._question(code, question_id)
        return dict(Counter(self._redis.hvals(self._key(code, f":a:{question_id}"))))

    @_reachable
    def follow(self, code: str, student_id: str, following: bool = True) -> None:
        self._admit(check_code(code), check_student(student_id), bool(following))

    @_reachable
    def followers(self, code: str) -> int:
        code = check_code(code)
        self._fields(code)
        return int(self._redis.zcount(self._key(code, ":hb"), time.time() - FOLLOW_WINDOW_S, "+inf"))

    @_reachable
    def ttl(self, code: str) -> int:
        code = check_code(code)
        self._fields(code)
        return max(0, int(self._redis.ttl(self._key(code))))

    @_reachable
    def close(self, code: str, teacher_token: str) -> None:
        code = check_code(code)
        self._teacher(code, teacher_token)
        keys = [self._key(code), self._key(code, ":q"), self._key(code, ":s"), self._key(code, ":hb")]
        keys += list(self._redis.scan_iter(match=self._key(code, ":a:*"), count=500))
        self._redis.pipeline().delete(*keys).publish(NEWS_CHANNEL.format(code=code), "closed").execute()

    def subscribe(self, on_change):
        """Listen to every class's news channel (``PSUBSCRIBE viz:class:*:news``) in a daemon thread, on a connection
        of its own; a lost connection (Redis restarting) is opened again after 0.5 s, doubling up to 10 s (changes
        meanwhile are missed: see :meth:`ClassStore.subscribe`)."""
        stop = threading.Event()
        prefix, suffix = NEWS_CHANNEL.split("{code}")

        def listen() -> None:
            delay = 0.5
            while not stop.is_set():
                pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
                try:
                    pubsub.psubscribe(NEWS_CHANNEL.format(code="*"))
                    delay = 0.5
                    while not stop.is_set():
                        message = pubsub.get_message(timeout=1.0)
                        channel = message.get("channel", "") if message else ""
                        if channel.startswith(prefix) and channel.endswith(suffix):
                            on_change(channel[len(prefix):-len(suffix)])
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    stop.wait(delay)
                    delay = min(10.0, 2 * delay)
                finally:
                    pubsub.close()

        threading.Thread(target=listen, name="viz-class-news", daemon=True).start()
        return stop.set
