"""A class on replicas, measured (issue 25): one teacher and N students on ``deploy/local.sh --replicas 3`` (HAProxy
with sticky cookies in front of 3 ``streamlit run`` replicas, the class in Redis).

Every participant is a client of Streamlit's own websocket protocol (bench/st_client.py: a tab without a browser,
one asyncio process, so that the 2 cores go to the server). The class is created in the store; the teacher opens
``?class=CODE&teach=TOKEN`` and students ``?class=CODE``; HAProxy spreads the students over the replicas (its
cookie says which). Then:

1. the teacher changes page, text and head, one change at a time; for each, the time from the teacher's action to
   the moment EVERY student shows it: a finished run of the student's session on the teacher's page, with the
   teacher's link parameters and exactly the teacher's figures (the server's hashes of the figure messages);
2. a quiet spell: the server's CPU per poll (the follow fragment's auto-reruns, counted at the clients);
3. one replica is killed (SIGKILL) mid-class: its students reconnect through HAProxy to the others (a new
   session: the link's ``class=CODE`` keeps them in the class); the time until each shows the teacher's view again,
   then a change followed on the 2 replicas left;
4. Redis is restarted (append-only: the class survives); then a change followed;
5. predict, then reveal: the teacher asks a multiple-choice question, every student answers at once through the
   answer form, the teacher reveals: the time until every student shows the question, until the store counts every
   answer (exactly), and until every screen shows the class's answers.

Errors: an exception shown, an error message shown at the end of a change, a student that never followed, a
connection lost other than by the kill. Memory: resident and peak of each replica, Redis and HAProxy.

    .venv/bin/python bench/class_live.py [--students 100] [--replicas 3] [--port 8810] [--redis-port 6810]

The replicas are ``streamlit run serve.py`` (deploy/local.sh): a student's screen learns of a change from the news
route (``viz_ui/classroom/news.py``), as the bell in its browser does (bench/st_client.py runs bell.js's loop), and
its poll's own timer runs every 4 s. ``--root`` runs another checkout's deploy/local.sh and app (an older one runs
``app.py``: its students poll every second). The replicas inherit the environment (``VIZ_CLASS_FOLLOW_RUNS``,
``VIZ_CLASS_POLL_SECONDS``).

The clients share the 2 cores with the server: the benchmark's own CPU time is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
from collections import Counter
from urllib.parse import parse_qsl, urlencode

from common import ROOT, save_results, show
from deployment import Deployment, cpu_seconds, proc_status
from st_client import Run, StClient

NOT_SHARED = {"class", "teach", "lecture", "scale", "theme", "export", "embed", "embed_options"}
TEXTS = ["The cat sat on the mat because it was warm.", "When Mary and John went to the store, John gave a drink to",
         "One, two, three, four, five, six, seven, eight", "After one server died, the class went on as before."]
# what the teacher does, in order: (what, value)
CHANGES = [("page", "attention"), ("text", TEXTS[0]), ("head", "2"), ("page", "tokens"), ("text", TEXTS[1]),
           ("page", "attention"), ("head", "5"), ("text", TEXTS[2]), ("page", "")]


def params(client: StClient) -> dict[str, str]:
    """The link parameters a class shares (the class's own and the personal ones left out)."""
    return {k: v for k, v in parse_qsl(client.query, keep_blank_values=True) if k not in NOT_SHARED}


def shows(student: StClient, teacher: StClient) -> bool:
    """The student's screen shows the teacher's view: the same page, exactly the teacher's figures (the server's
    hashes of their messages), the teacher's text (a link parameter), no exception. Other link parameters may
    differ in form (a value equal to the page's default is left out of a link)."""
    text = params(teacher).get("text")
    return (student.page_hash == teacher.page_hash and student.figures() == teacher.figures()
            and (text is None or params(student).get("text") == text) and not student.texts("exception"))


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``values`` (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered))) - 1))]


class Follow:
    """Times, for every student, the first finished run after ``start`` that shows the teacher's view: after a
    change, only once the teacher's own full run after ``start`` has finished (before, the teacher still shows the
    old view); ``also(student)`` must hold too (e.g. it has reconnected)."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.teacher: StClient | None = None
        self.done: dict[str, float] = {}
        self.waiting: set[str] = set()
        self.event = asyncio.Event()
        self.after_teacher = True
        self.also = None

    def start(self, teacher: StClient, students: list[StClient], after_teacher: bool = True, also=None) -> None:
        self.t0, self.teacher, self.done, self.after_teacher, self.also = time.perf_counter(), teacher, {}, \
            after_teacher, also
        self.waiting = {s.name for s in students}
        self.event.clear()

    def teacher_ready(self) -> bool:
        return not self.after_teacher or any(not r.fragment and r.status == "ok" for r in runs_since(self.teacher, self.t0))

    def on_finished(self, client: StClient, run: Run) -> None:
        if (self.teacher is not None and client.name in self.waiting and run.status != "rerun" and run.t >= self.t0
                and self.teacher_ready() and (self.also is None or self.also(client)) and shows(client, self.teacher)):
            self.done[client.name] = run.t - self.t0
            self.waiting.discard(client.name)
            if not self.waiting:
                self.event.set()

    def recheck(self, students: list[StClient]) -> None:
        """Students whose last run finished before the teacher's did: checked again (with that run's time)."""
        for s in students:
            if s.runs:
                self.on_finished(s, s.runs[-1])

    async def wait(self, students: list[StClient], timeout: float) -> None:
        end = time.perf_counter() + timeout
        while self.waiting and time.perf_counter() < end:
            self.recheck(students)
            try:
                await asyncio.wait_for(self.event.wait(), timeout=min(0.5, max(0.01, end - time.perf_counter())))
            except asyncio.TimeoutError:
                pass


async def act(teacher: StClient, what: str, value: str) -> None:
    """The teacher changes its own view, as a click or typing in its browser would."""
    if what == "page":
        await teacher.open_page(value)
    elif what == "text":
        await teacher.set_widget("Text", string_value=value)
    else:
        await teacher.set_widget("Head", string_value=value)


async def until(predicate, timeout: float, step: float = 0.05) -> bool:
    end = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > end:
            return False
        await asyncio.sleep(step)
    return True


def screen_errors(students: list[StClient]) -> int:
    return sum(bool(s.texts("exception", "alert:error")) for s in students)


async def measure(label: str, teacher: StClient, students: list[StClient], follow: Follow, rows: list, what: str,
                  value: str, timeout: float, pids: list[int]) -> list[float]:
    """One change of the teacher's, timed until every student follows (a row of ``rows``): with the server's CPU
    time (every process in ``pids``) per full run of a student's page in that time."""
    cpu0 = sum(cpu_seconds(p) for p in pids)
    follow.start(teacher, students)
    try:
        await act(teacher, what, value)
    except KeyError as exc:  # the teacher's screen lacks the widget: said, and the class waits for nothing
        print(f"problem: the teacher cannot change {what}: {exc}")
    await follow.wait(students, timeout)
    ms = [1000 * t for t in follow.done.values()]
    cpu = sum(cpu_seconds(p) for p in pids) - cpu0
    since = [r for s in students for r in runs_since(s, follow.t0)]
    page_runs, polls = sum(not r.fragment for r in since), sum(r.fragment for r in since)
    late = [s for s in students if s.name in follow.waiting]
    if late:
        s = late[0]
        print(f"problem: {len(late)} students did not follow {what} → {value!r} in {timeout:.0f} s; teacher: page "
              f"{teacher.page!r} {params(teacher)} {len(teacher.figures())} figures, {teacher.connections} connections;"
              f" e.g. {s.name}: page {s.page!r} {params(s)} {len(s.figures())} figures, same figures: "
              f"{s.figures() == teacher.figures()}, {s.connections} connections, polling {s.auto_reruns}, last run "
              f"{time.perf_counter() - s.runs[-1].t if s.runs else float('nan'):.1f} s ago, errors {s.errors[-1:]}; "
              f"figures only the teacher shows: {differing(teacher, s)}, only the student: {differing(s, teacher)}",
              flush=True)
    rows.append({"phase": label, "change": f"{what} → {value[:24] or 'start page'}", "students": len(students),
                 "followed": len(ms), "median ms": statistics.median(ms) if ms else float("nan"),
                 "p95 ms": pct(ms, 0.95), "max ms": max(ms, default=float("nan")),
                 "errors on screen": screen_errors(students), "server CPU s": cpu, "page runs": page_runs,
                 "polls": polls})
    return ms


def runs_since(client: StClient, t0: float) -> list[Run]:
    out = []
    for r in reversed(client.runs):
        if r.t < t0:
            break
        out.append(r)
    return out


def differing(a: StClient, b: StClient) -> list[str]:
    """Titles (cut to 60 characters) of the figures ``a`` shows and ``b`` does not."""
    theirs = set(b.figures())
    return [x.text[:60] for x in a.shown.values() if x.kind == "plotly" and x.hash not in theirs]


def replica_of(client: StClient) -> str:
    return client.cookies.get("VIZ_REPLICA", "?")


CHOICES = ["L1H3", "L0H2", "L2H0"]


def answered(student: StClient) -> bool:
    return any(x.kind == "caption" and x.text.startswith("Sent:") for x in student.shown.values())


def revealed(student: StClient, total: int) -> bool:
    return any(x.kind == "plotly" and x.text.startswith(f"{total} answer") for x in student.shown.values())


async def predict_and_reveal(teacher: StClient, students: list[StClient], code: str, token: str,
                             timeout: float) -> list[dict]:
    """Predict, then reveal, with every student: the teacher asks a multiple-choice question (through the store, as
    its form does), each student picks ``CHOICES[i % 3]`` and sends it as a click would (the answer form's radio and
    Send, a rerun of the answer fragment), the teacher clicks Reveal. Rows: the time until every student shows the
    question, until the store counts every answer (and the tally is exact), until every screen shows the reveal."""
    from viz_ui.classroom import class_store
    store, rows = class_store(), []

    async def phase(name: str, done, detail=lambda: "") -> None:
        t0 = time.perf_counter()
        ok = await until(done, timeout, step=0.1)
        rows.append({"step": name, "seconds": time.perf_counter() - t0, "done": ok, "detail": detail()})

    qid = store.ask(code, token, {"kind": "choice", "prompt": "Which head is the induction head?",
                                  "choices": CHOICES, "correct": CHOICES[0], "tokens": False})
    await phase("asked → every student shows the answer form",
                lambda: all(s.widget_id("Your answer") for s in students),
                lambda: f"{sum(bool(s.widget_id('Your answer')) for s in students)} of {len(students)}")
    expected = Counter(CHOICES[i % len(CHOICES)] for i in range(len(students)))
    for i, s in enumerate(students):  # every student answers at once, as a hall does when the teacher says "now"
        try:
            await s.click("Send", {"Your answer": {"string_value": CHOICES[i % len(CHOICES)]}})
        except KeyError:
            pass  # no form on this screen: the tally says so
    await phase("answers sent → every answer counted and shown as sent",
                lambda: dict(store.tally(code, qid)) == dict(expected) and all(map(answered, students)),
                lambda: f"tally {dict(store.tally(code, qid))} (expected {dict(expected)}); "
                        f"{sum(map(answered, students))} screens say sent")
    await until(lambda: teacher.widget_id("Reveal") is not None, timeout)
    try:
        await teacher.click("Reveal")  # a button of the teacher's answer-count fragment
    except KeyError:  # the teacher's screen lacks its button: said, and revealed through the store
        print("problem: the teacher's screen shows no Reveal button", flush=True)
        store.reveal(code, token, qid)
    await phase("revealed → every screen shows the class's answers", lambda: all(
        revealed(s, len(students)) for s in students + [teacher]),
        lambda: f"{sum(revealed(s, len(students)) for s in students)} of {len(students)} students, teacher "
                f"{revealed(teacher, len(students))}")
    return rows


async def run(args) -> None:
    with Deployment(args.root, args.replicas, args.port, args.redis_port, logs=args.logs) as dep:
        print(f"deployment: {dep.url} (replicas {dep.replica_pids}, HAProxy {dep.haproxy_pid}), {dep.redis_url}; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        os.environ["VIZ_CLASS_STORE"] = dep.redis_url
        from viz_ui.classroom import class_store
        code, token = class_store().create()
        follow = Follow()
        teacher = StClient(dep.url, "", urlencode({"class": code, "teach": token}), name="teacher")
        tasks = [asyncio.create_task(teacher.run())]
        await until(lambda: teacher.runs, 300)
        # one early student on each other replica (HAProxy: each new browser to the next replica in turn), so that every replica has
        # loaded the model before the class arrives; not counted in the figures below
        early = [StClient(dep.url, "", urlencode({"class": code}), name=f"early{i}") for i in range(args.replicas - 1)]
        for e in early:
            tasks.append(asyncio.create_task(e.run()))
            await until(lambda: e.runs, 300)
        memory0 = {n: proc_status(p) for n, p in dep.processes().items()}
        students = [StClient(dep.url, "", urlencode({"class": code}), name=f"s{i}", on_finished=follow.on_finished)
                    for i in range(args.students)]
        t_open = time.perf_counter()
        follow.start(teacher, students, after_teacher=False)
        for k, s in enumerate(students):  # a class arrives over some seconds, not in one instant
            tasks.append(asyncio.create_task(s.run()))
            if k % 10 == 9:
                await asyncio.sleep(0.2)
        await follow.wait(students, 300)
        open_ms = [1000 * t for t in follow.done.values()]
        print(f"{len(open_ms)} of {len(students)} students opened the class in {time.perf_counter() - t_open:.1f} s; "
              f"replicas: {dict(sorted(Counter(map(replica_of, students)).items()))}", flush=True)
        rows, all_ms = [], []
        for what, value in CHANGES[:args.changes]:
            all_ms += await measure("3 replicas", teacher, students, follow, rows, what, value, args.timeout,
                                  list(dep.processes().values()))
            await asyncio.sleep(args.pause)

        # a quiet spell: what following costs the server when nothing changes
        procs = dep.processes()
        cpu0 = {n: cpu_seconds(p) for n, p in procs.items()}
        polls0 = sum(len(s.runs) for s in students)
        t0 = time.perf_counter()
        await asyncio.sleep(args.quiet)
        wall = time.perf_counter() - t0
        polls = sum(len(s.runs) for s in students) - polls0
        cpu = {n: cpu_seconds(p) - cpu0[n] for n, p in procs.items()}
        interval = statistics.median([v for s in students for v in s.auto_reruns.values()] or [float("nan")])
        poll_rows = [{"process": n, "CPU s": c, "share of a core": c / wall,
                      "ms CPU per poll": 1000 * c / max(1, polls)} for n, c in cpu.items()]
        poll_rows.append({"process": "all", "CPU s": sum(cpu.values()), "share of a core": sum(cpu.values()) / wall,
                          "ms CPU per poll": 1000 * sum(cpu.values()) / max(1, polls)})
        spread = Counter(map(replica_of, students))
        memory = [{"process": n, "MB before the students": memory0[n]["rss_mb"], "MB now": proc_status(p)["rss_mb"],
                   "peak MB": proc_status(p)["peak_mb"], "students on it": spread.get(n, 0)}
                  for n, p in procs.items()]
        for m in memory:
            m["MB per student"] = ((m["MB now"] - m["MB before the students"]) / m["students on it"]
                                   if m["students on it"] else float("nan"))

        # a replica dies mid-class
        victim = next(i for i in reversed(range(args.replicas)) if replica_of(teacher) != f"r{i + 1}")
        on_victim = [s for s in students if replica_of(s) == f"r{victim + 1}"]
        before = {s.name: s.connections for s in students}
        follow.start(teacher, on_victim, after_teacher=False, also=lambda s: s.connections > before[s.name])
        dep.kill_replica(victim)
        await until(lambda: all(s.connections > before[s.name] for s in on_victim), args.timeout)
        await follow.wait(on_victim, args.timeout)
        back_ms = [1000 * t for t in follow.done.values()]
        reconnected = sum(s.connections > before[s.name] for s in on_victim)
        lost = [s.name for s in students if s not in on_victim and s.connections > before[s.name]]
        rows_fault = [{"fault": f"replica r{victim + 1} killed (SIGKILL)", "students on it": len(on_victim),
                       "reconnected": reconnected, "back in the class": len(back_ms),
                       "median ms": statistics.median(back_ms) if back_ms else float("nan"),
                       "p95 ms": pct(back_ms, 0.95), "others disconnected": len(lost),
                       "replicas now": dict(sorted(Counter(map(replica_of, students)).items()))}]
        await asyncio.sleep(args.pause)
        all_after = []
        for what, value in [("text", TEXTS[3]), ("page", "attention")]:
            all_after += await measure("after the kill", teacher, students, follow, rows, what, value, args.timeout,
                                    list(dep.processes().values()))
            await asyncio.sleep(args.pause)

        # Redis restarts
        down = await asyncio.to_thread(dep.restart_redis, args.redis_down)
        await asyncio.sleep(args.pause)
        for what, value in [("head", "1"), ("text", TEXTS[0])]:
            all_after += await measure("after Redis restart", teacher, students, follow, rows, what, value,
                                       args.timeout, list(dep.processes().values()))
            await asyncio.sleep(args.pause)
        rows_fault.append({"fault": f"Redis restarted (down {down:.1f} s)", "students on it": len(students),
                           "back in the class": rows[-1]["followed"]})
        reveal_rows = await predict_and_reveal(teacher, students, code, token, args.timeout)
        memory_end = {n: proc_status(p) for n, p in dep.processes().items()}
        events = dep.haproxy_events()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        for s in students + early + [teacher]:
            await s.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    n = len(students)
    show(f"{n} students open ?class=CODE", [{"students": n, "opened": len(open_ms),
                                               "median ms": statistics.median(open_ms) if open_ms else float("nan"),
                                               "p95 ms": pct(open_ms, 0.95)}],
         "From the first connection to the first run that shows the teacher's view (students arrive 10 per 0.2 s).")
    show("The teacher changes the view: time until every student shows it", rows,
         f"All changes on 3 replicas: median {statistics.median(all_ms):,.0f} ms, p95 {pct(all_ms, 0.95):,.0f} ms "
         f"over {len(all_ms)} (student, change) pairs. From the teacher's action to a finished run of the student's "
         "session with the teacher's page, link parameters and figures.")
    show(f"Predict, then reveal with {n} students (after the Redis restart, 2 replicas)", reveal_rows,
         "A multiple-choice question asked through the store; every student answers at once through the answer "
         "form (its radio and Send); then the teacher clicks Reveal.")
    show("Faults", rows_fault, "Back in the class: shows the teacher's view again (same page, parameters, figures).")
    show(f"Server CPU while {n} students follow and nothing changes ({args.quiet:.0f} s)", poll_rows,
         "A poll: one run of the follow fragment (its timer or its bell; counted at the clients); the CPU also covers "
         "the replicas' news watchers and the students' held news requests. CPU from /proc (user + system).")
    show("Memory (MB, resident)", [{**m, "MB at the end": memory_end[m["process"]]["rss_mb"]} for m in memory],
         "Before the students: with the teacher's session and one early student a replica (the model loaded); now: after the changes on 3 replicas (the quiet "
         "spell); peak: VmHWM since start; at the end: after the kill and the Redis restart (2 replicas left).")
    hall(rows, poll_rows, memory, polls_per_s=polls / wall / n, interval=interval,
         bell=sum(s.rings for s in students) > 0)
    errors = [e for s in students + [teacher] for e in s.errors if "connection" not in e]
    conn = [e for s in students if s not in on_victim for e in s.errors]
    print(f"\nerrors: {len(errors)} on screen, {len(conn)} connection errors besides the killed replica's students; "
          f"benchmark process: {usage.ru_utime + usage.ru_stime:.1f} s CPU, peak {usage.ru_maxrss / 1024:.0f} MB; "
          f"load average {os.getloadavg()[0]:.2f}")
    for e in (errors + conn)[:5]:
        print("  ", e)
    print(f"HAProxy health checks: {sum(' is DOWN' in e for e in events)} times a replica was taken out of the pool "
          f"(one is the killed replica), {sum(' is UP' in e for e in events)} times put back")
    for e in events[:8]:
        print("  ", e[:200])


def hall(rows: list[dict], poll_rows: list[dict], memory: list[dict], polls_per_s: float, interval: float,
         bell: bool, students: int = 300, target_s: float = 2.0) -> None:
    """What a hall of ``students`` needs, worked out from this run's figures (printed as a table). ``bell``: the
    students' screens learnt of changes from the news route (a change is noticed within ~0.2 s: the news watcher's
    period and a request), else from their poll (within one poll ``interval``)."""
    n = max(1, rows[0]["students"]) if rows else 1
    mine = [r for r in rows if r["phase"] == "3 replicas"]
    # all a change costs the servers, per student: its page run, its poll or bell, the bell's requests
    change_ms = 1000 * sum(r["server CPU s"] for r in mine) / max(1, sum(r["page runs"] for r in mine))
    idle = poll_rows[-1]["share of a core"] * students / n  # cores busy while nobody changes anything
    change = students * change_ms / 1000  # core-seconds of one change (every student's page runs once)
    notice = 0.2 if bell else interval
    window = max(0.1, target_s - notice)
    cores = idle + change / window
    per_student = statistics.median([m["MB per student"] for m in memory if m["students on it"]] or [float("nan")])
    base = statistics.median(m["MB before the students"] for m in memory if m["process"].startswith("r"))
    replicas = max(1, int(-(-cores // 1)))  # one replica's Python runs on about one core (the GIL)
    rows_hall = [
        {"quantity": "fragment runs per student per s", "value": polls_per_s,
         "from": f"the quiet spell (run_every {interval:g} s)" + ("; changes arrive by the bell" if bell else "")},
        {"quantity": "server CPU ms per student per change", "value": change_ms,
         "from": "the changes' CPU per page run (with their polls and news requests)"},
        {"quantity": f"cores busy while nothing changes, {students} students", "value": idle,
         "from": f"the quiet spell's CPU × {students}/{n}"},
        {"quantity": f"core-seconds per change, {students} students", "value": change, "from": "students × CPU per change"},
        {"quantity": f"cores for p95 ≤ {target_s:g} s", "value": cores,
         "from": f"the quiet load + a change's core-seconds within {window:g} s ({target_s:g} s less "
                 + ("the bell's ~0.2 s)" if bell else "one poll interval)")},
        {"quantity": "replicas (one core each)", "value": replicas, "from": "a Streamlit process: ~1 core (GIL)"},
        {"quantity": "MB per replica before students", "value": base, "from": "memory table"},
        {"quantity": "MB per student session", "value": per_student, "from": "memory table"},
        {"quantity": f"memory, {students} students", "value": replicas * base + students * per_student,
         "from": "replicas × base + students × per student (+ Redis, HAProxy: tens of MB)"}]
    show(f"A hall of {students}, worked out from these figures", rows_hall,
         "Measured with the benchmark's clients on the same cores (their CPU time is below): an upper bound.")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--students", type=int, default=100)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--port", type=int, default=8810, help="HAProxy's port")
    p.add_argument("--redis-port", type=int, default=6810)
    p.add_argument("--changes", type=int, default=len(CHANGES), help=f"how many of the {len(CHANGES)} changes to make")
    p.add_argument("--timeout", type=float, default=60, help="seconds to wait for every student to follow")
    p.add_argument("--pause", type=float, default=3, help="seconds between changes")
    p.add_argument("--quiet", type=float, default=20, help="seconds of the quiet spell")
    p.add_argument("--redis-down", type=float, default=2, help="seconds Redis stays down")
    p.add_argument("--logs", type=lambda s: __import__("pathlib").Path(s), default=None,
                   help="keep the deployment's logs (Redis, replicas, HAProxy) in this folder")
    p.add_argument("--root", type=lambda s: __import__("pathlib").Path(s), default=ROOT,
                   help="the checkout whose deploy/local.sh and app run (default: this one)")
    args = p.parse_args()
    if not (args.root / "deploy" / "local.sh").exists():
        raise SystemExit(f"no deploy/local.sh in {args.root} (give the checkout that has it with --root)")
    asyncio.run(run(args))
    save_results()


if __name__ == "__main__":
    main()
