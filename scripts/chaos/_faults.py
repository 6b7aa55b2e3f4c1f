"""What the fault scripts (pg_restart.py, redis_restart.py) share: a write load
that keeps going through a fault, the probe that times the outage, and the
checks that every write was accepted exactly once and nothing is half-written.

The load: client processes x threads, each writing in turn a fact, an episode
and a checkpoint of its own thread, every write with its own Idempotency-Key.
A write answered 503 is sent again with the same key after its Retry-After; a
write that got no answer (connection error, timeout) is sent again with the
same key after half a second; until it is accepted (2xx) or its deadline
passes. A client that sees anything else records it and moves on — a
violation.
"""

from __future__ import annotations

import io
import logging
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import _stack

DATABASE_CODES = {"database_unavailable", "database_busy", "database_out_of_resources"}
OPS = ("fact", "episode", "checkpoint")
PREDICATES = ("chaos.value", "chaos.owner", "chaos.status")
EVENT_TYPE = {
    "fact": "facts.asserted",
    "episode": "episode.recorded",
    "checkpoint": "working_state.written",
}
# A write still not accepted this long after its first attempt is given up
# (a violation): every outage a script makes is far shorter.
WRITE_DEADLINE_SECONDS = 120.0
NO_ANSWER_PAUSE = 0.5


def make_threads(http, run: str, procs: int, threads: int) -> list[list[str]]:
    """A working-state thread for each client thread: ids by [process][thread]."""
    ids = []
    for p in range(procs):
        row = []
        for t in range(threads):
            made = http.post("/api/v1/threads", json={"key": f"{run}-p{p}-t{t}"})
            assert made.status_code == 201, made.text
            row.append(made.json()["id"])
        ids.append(row)
    return ids


def _request(op: str, label: str, proc: int, thread: int, n: int, state: dict) -> tuple:
    """(method, path, body) of one write."""
    if op == "fact":
        return (
            "POST",
            "/api/v1/facts",
            {
                # Half the writes go to a pair no other write touches: its text
                # is rendered by its own task only (or, lost, by the reconciler).
                "subject": f"chaos-p{proc}-t{thread}-" + (f"s{n % 4}" if n % 2 else f"u{n}"),
                "predicate": PREDICATES[n % len(PREDICATES)],
                "value": label,
                "cardinality": "one",
                "source_type": "user_statement",
            },
        )
    if op == "episode":
        return (
            "POST",
            "/api/v1/episodes",
            {
                "occurred_at": datetime.now(UTC).isoformat(),
                "summary": f"client {proc}.{thread} deployed build {label} to staging",
                "observation": f"build {label}: health checks passed after {n % 7} retries",
                "actor": f"client-{proc}",
                "session_id": f"chaos-p{proc}-t{thread}",
                "entities": [f"build-{n % 5}", "staging"],
            },
        )
    return (
        "PUT",
        f"/api/v1/threads/{state['thread_id']}/state",
        {"state": {"goal": label, "plan": [f"step {n}"]}, "based_on": state["version"]},
    )


def write_once_accepted(http, op: str, label: str, method: str, path: str, body: dict, key: str):
    """One write, sent again under the same key until accepted (or its deadline).
    Returns the Reply of the last attempt, with every attempt in extra."""
    attempts = []
    first = time.time()
    while True:
        started = time.time()
        reply = _stack.call(http, method, path, label, json=body, headers={"Idempotency-Key": key})
        retry_after = None
        if reply.status == 503 and isinstance(reply.body, dict):
            retry_after = (
                (reply.body.get("error") or {}).get("details", {}).get("retry_after_seconds")
            )
        attempts.append(
            {
                "status": reply.status,
                "code": reply.code,
                "retry_after": reply.extra.get("retry_after"),
                "retry_after_body": retry_after,
                "at": started,
                "seconds": reply.seconds,
                "error": reply.error[:200],
            }
        )
        done = 200 <= reply.status < 300 or reply.status not in (0, 503)
        if done or time.time() - first > WRITE_DEADLINE_SECONDS:
            break
        if reply.status == 503:
            try:
                pause = float(reply.extra.get("retry_after") or 1)
            except ValueError:
                pause = 1.0
        else:
            pause = NO_ANSWER_PAUSE
        time.sleep(pause)
    reply.extra.update({"op": op, "key": key, "attempts": attempts, "first_at": first})
    return reply


def writer(
    base_url: str,
    key: str,
    run: str,
    proc: int,
    threads: int,
    seconds: float,
    thread_ids: list[str],
    seed: int,
) -> list[_stack.Reply]:
    """One client process: `threads` threads writing for `seconds`."""
    replies: list[_stack.Reply] = []
    lock = threading.Lock()
    until = time.time() + seconds

    def run_thread(t: int) -> None:
        rng = random.Random(seed * 1000 + t)
        state = {"thread_id": thread_ids[t], "version": 0}
        n = 0
        with _stack.client(base_url, key) as http:
            while time.time() < until:
                op = OPS[(n + rng.randrange(len(OPS))) % len(OPS)]
                label = f"{run}-p{proc}-t{t}-n{n:05d}"
                method, path, body = _request(op, label, proc, t, n, state)
                reply = write_once_accepted(http, op, label, method, path, body, label)
                if op == "checkpoint" and reply.status == 201:
                    state["version"] = reply.body["version"]
                reply.extra["thread_id"] = state["thread_id"]
                with lock:
                    replies.append(reply)
                n += 1

    pool = [threading.Thread(target=run_thread, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return replies


# ---------------------------------------------------------------------------- probe


@dataclass
class Probe:
    """Reads one cheap API resource every `every` seconds, recording (time,
    status): the outage as a client sees it, and when the service came back."""

    base_url: str
    key: str
    path: str = "/api/v1/threads?limit=1"
    every: float = 0.1
    samples: list[tuple[float, int, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _loop(self) -> None:
        with _stack.client(self.base_url, self.key) as http:
            http.timeout = _stack.httpx.Timeout(10, connect=2)
            while not self._stop.is_set():
                reply = _stack.call(http, "GET", self.path, "probe")
                self.samples.append((time.time(), reply.status, reply.code))
                self._stop.wait(self.every)

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=15)

    def outage(self, after: float, back: float) -> dict:
        """Around a fault that began at `after` and whose server was back at
        `back` (time.time()): the first failed sample, the first 200 after
        `back`, and the statuses seen in between."""
        failing = [s for s in self.samples if s[0] >= after - 1 and s[1] != 200]
        first_fail = failing[0][0] if failing else None
        recovered = next((s[0] for s in self.samples if s[0] >= back and s[1] == 200), None)
        seen = Counter(
            f"{s[1]} {s[2]}".strip() if s[1] else "no answer"
            for s in self.samples
            if first_fail is not None and first_fail <= s[0] <= (recovered or float("inf"))
        )
        return {
            "first_failure": first_fail,
            "recovered": recovered,
            "seen": dict(seen),
            "api_outage_s": (recovered - first_fail) if first_fail and recovered else None,
            "recovery_s": (recovered - back) if recovered else None,
        }


# --------------------------------------------------------------------------- checks


def attempts_of(replies: list[_stack.Reply]) -> list[dict]:
    return [a for r in replies for a in r.extra.get("attempts", [])]


def check_answers(replies: list[_stack.Reply], windows: list[tuple[float, float]]):
    """Every write accepted; every failed attempt a 503 with Retry-After and a
    database error code (or `allowed_no_answer`); failures only around a fault.
    `windows`: (fault began, service back) in time.time(), for the report."""
    violations: list[str] = []
    attempts = attempts_of(replies)
    answers = Counter(
        f"{a['status']} {a['code']}".strip() if a["status"] else "no answer" for a in attempts
    )
    refused = Counter()
    example = {}
    for reply in replies:
        if not 200 <= reply.status < 300:
            kind = (reply.extra["op"], reply.status, reply.code)
            refused[kind] += 1
            example.setdefault(kind, reply)
    for (op, status, code), count in refused.items():
        reply = example[(op, status, code)]
        violations.append(
            f"{count} {op} write(s) not accepted, last answer {status or 'none'} {code} "
            f"(e.g. {reply.label} after {len(reply.extra['attempts'])} attempt(s): "
            f"{reply.error or str(reply.body)[:160]})"
        )
    outside = 0
    wrong = Counter()
    for a in attempts:
        if 200 <= a["status"] < 300:
            continue
        if a["status"] == 503:
            if a["code"] not in DATABASE_CODES:
                wrong[f"503 with the code {a['code']!r}"] += 1
            if not a["retry_after"] or not str(a["retry_after"]).isdigit():
                wrong["503 without a Retry-After header"] += 1
        elif a["status"] == 0:
            wrong[f"no answer ({a['error'][:80]})"] += 1
        if not any(began - 1 <= a["at"] <= back + 30 for began, back in windows):
            outside += 1
    violations += [f"{count} attempt(s) answered: {what}" for what, count in wrong.items()]
    retried = sum(1 for r in replies if len(r.extra.get("attempts", [])) > 1)
    figures = {
        "writes": len(replies),
        "accepted": sum(1 for r in replies if 200 <= r.status < 300),
        "requests": len(attempts),
        "answers": dict(sorted(answers.items())),
        "5xx other than 503": sum(
            n for k, n in answers.items() if k[:1] == "5" and not k.startswith("503")
        ),
        "writes retried": retried,
        "replayed answers": sum(1 for r in replies if r.replayed),
        "failures outside a fault window": outside,
        "by op": dict(Counter(r.extra["op"] for r in replies)),
    }
    return figures, violations


def check_database(agent, replies: list[_stack.Reply], since: datetime) -> tuple[dict, list[str]]:
    """Exactly once and nothing half-written, as PostgreSQL has it:

    * one Idempotency-Key record per accepted write, answered 201, naming the
      events it appended, and no record for a key that was never accepted;
    * every event the agent's writes appended since `since` belongs to exactly
      one accepted write (no event of a write that failed, none twice), and
      per kind as many events as accepted writes;
    * the rows: each accepted episode exists once with its summary; each
      accepted fact version exists with its value; each thread's versions are
      1..n, one per accepted checkpoint, each holding what its write sent;
    * the agent's hash chain verifies."""
    from episodes.models import Episode
    from facts.models import Fact
    from intentions.models import Thread, WorkingState
    from ledger.models import Event
    from ledger.selectors import chain_verify
    from piper.api.models import IdempotencyRecord

    violations: list[str] = []
    accepted = {r.extra["key"]: r for r in replies if 200 <= r.status < 300}
    records = {r.key: r for r in IdempotencyRecord.objects.filter(agent=agent)}
    events = dict(
        Event.objects.filter(agent=agent, recorded_at__gte=since).values_list("id", "event_type")
    )
    owner: dict = {}  # event id -> the key of the write that appended it
    per_kind = Counter()
    for key, reply in accepted.items():
        record = records.get(key)
        if record is None:
            violations.append(f"{key}: accepted, but no Idempotency-Key record")
            continue
        if record.response_status != reply.status:
            violations.append(
                f"{key}: record says {record.response_status}, the client got {reply.status}"
            )
        if not record.event_ids:
            violations.append(f"{key}: the record names no event")
        kinds = Counter()
        for event_id in record.event_ids:
            if event_id in owner:
                violations.append(f"event {event_id} claimed by {owner[event_id]} and {key}")
            owner[event_id] = key
            if event_id not in events:
                violations.append(f"{key}: its event {event_id} is not in the ledger")
            else:
                kinds[events[event_id]] += 1
        op = reply.extra["op"]
        if kinds[EVENT_TYPE[op]] != 1:
            violations.append(f"{key}: {kinds[EVENT_TYPE[op]]} {EVENT_TYPE[op]} events, not 1")
        per_kind[op] += kinds[EVENT_TYPE[op]]
    unknown = sorted(set(records) - set(accepted))
    for key in unknown[:20]:
        violations.append(f"an Idempotency-Key record for {key}, which no client saw accepted")
    stray = [(i, t) for i, t in events.items() if i not in owner]
    for event_id, event_type in stray[:20]:
        violations.append(f"event {event_id} ({event_type}) belongs to no accepted write")

    # the rows
    ops = Counter(r.extra["op"] for r in accepted.values())
    episodes = dict(Episode.objects.filter(agent=agent).values_list("id", "summary"))
    if len(episodes) != ops["episode"]:
        violations.append(f"{len(episodes)} episodes for {ops['episode']} accepted writes")
    fact_ids = {r.body["fact"]["id"]: r.label for r in accepted.values() if r.extra["op"] == "fact"}
    facts = dict(Fact.objects.filter(pk__in=list(fact_ids)).values_list("id", "object_value"))
    for reply in accepted.values():
        op = reply.extra["op"]
        if op == "episode":
            summary = episodes.get(uuid.UUID(reply.body["id"]))
            if summary is None or reply.label not in summary:
                violations.append(f"{reply.label}: episode {reply.body['id']} missing or altered")
    for fact_id, label in fact_ids.items():
        if facts.get(uuid.UUID(fact_id)) != label:
            violations.append(f"{label}: fact version {fact_id} missing or holds another value")
    by_thread: dict[str, list] = {}
    for reply in accepted.values():
        if reply.extra["op"] == "checkpoint":
            by_thread.setdefault(reply.extra["thread_id"], []).append(reply)
    checkpoints = 0
    for thread in Thread.objects.filter(agent=agent):
        mine = sorted(by_thread.get(str(thread.pk), []), key=lambda r: r.body["version"])
        versions = list(
            WorkingState.objects.filter(thread=thread)
            .order_by("version")
            .values_list("version", "state")
        )
        checkpoints += len(versions)
        if [v for v, _ in versions] != list(range(1, len(mine) + 1)):
            violations.append(
                f"thread {thread.key}: versions {[v for v, _ in versions][:10]}… for "
                f"{len(mine)} accepted checkpoints"
            )
        if thread.current_version != len(mine):
            violations.append(
                f"thread {thread.key}: at version {thread.current_version}, not {len(mine)}"
            )
        for (version, state), reply in zip(versions, mine, strict=False):
            if version != reply.body["version"] or state.get("goal") != reply.label:
                violations.append(
                    f"thread {thread.key} v{version}: holds {state.get('goal')!r}, "
                    f"answered {reply.label} as v{reply.body['version']}"
                )
    report = chain_verify(agent=agent)
    if not report.ok:
        violations.append(f"the agent's hash chain is broken: {report.first_break}")
    figures = {
        "accepted writes": len(accepted),
        "Idempotency-Key records": len(records),
        "events since the load began": len(events),
        "events of no accepted write": len(stray),
        "assertions / episodes / checkpoints in the ledger": (
            f"{per_kind['fact']} / {per_kind['episode']} / {per_kind['checkpoint']}"
        ),
        "rows: fact versions named / episodes / working-state versions": (
            f"{len(facts)} / {len(episodes)} / {checkpoints}"
        ),
        "hash chain": f"ok, {report.events_checked} events" if report.ok else "BROKEN",
    }
    return figures, violations


# ---------------------------------------------------------------------- derived work


def derived_backlog(agent) -> dict[str, int]:
    """Derived work not done yet: episodes without a vector; fact pairs whose
    text is missing or not what the facts say now; texts without a vector."""
    from episodes.models import Episode
    from facts.fact_texts import all_pairs
    from facts.models import FactText

    texts = set(FactText.objects.filter(agent=agent).values_list("subject_id", "predicate_id"))
    return {
        "episodes without a vector": Episode.objects.filter(
            agent=agent, embedding__isnull=True
        ).count(),
        "fact pairs without a text": len(set(all_pairs(agent.pk)) - texts),
        "fact texts without a vector": FactText.objects.filter(
            agent=agent, embedding__isnull=True
        ).count(),
    }


def stale_fact_texts(agent) -> int:
    """Texts that are not what the facts say now: rendered again in a
    transaction that is rolled back, counting what would change."""
    from django.db import transaction

    from facts.fact_texts import fact_texts_refresh

    class Rollback(Exception):
        pass

    changed = 0
    try:
        with transaction.atomic():
            result = fact_texts_refresh(agent_id=agent.pk, embed="never")
            changed = len(result.changed) + result.deleted
            raise Rollback
    except Rollback:
        pass
    return changed


def wait_for_derived_work(agent, seconds: float) -> tuple[dict, float]:
    """Poll until no derived work is left (or `seconds` pass); returns what is
    left (with the stale texts) and how long it took."""
    started = time.monotonic()
    while True:
        left = derived_backlog(agent)
        if not any(left.values()):
            left["fact texts not current"] = stale_fact_texts(agent)
            if not left["fact texts not current"]:
                return left, time.monotonic() - started
        if time.monotonic() - started > seconds:
            left["fact texts not current"] = stale_fact_texts(agent)
            return left, time.monotonic() - started
        time.sleep(2)


# ----------------------------------------------------------------------------- beat

# The periodic tasks a fault run keeps (the others would write events of their
# own, e.g. consolidation, and blur the exactly-once count), with a schedule
# short enough for a run of minutes: (every seconds, kwargs).
BEAT_TASKS = {
    "piper:beat-heartbeat": (30, {}),
    "piper:intentions-engine": (5, {}),
    "piper:episodes-embed-backlog": (10, {"grace_seconds": 20}),
    "piper:facts-texts-backlog": (10, {"grace_seconds": 20}),
}


RECONCILERS = ("piper:episodes-embed-backlog", "piper:facts-texts-backlog")


def configure_beat(reconcilers: bool = True) -> list[str]:
    """setup_periodic_tasks, then only BEAT_TASKS enabled, on short schedules
    (without the RECONCILERS when `reconcilers` is false)."""
    import json

    from django.core.management import call_command
    from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

    call_command("setup_periodic_tasks", stdout=io.StringIO())
    kept = []
    for task in PeriodicTask.objects.all():
        wanted = BEAT_TASKS.get(task.name)
        if not reconcilers and task.name in RECONCILERS:
            wanted = None
        task.enabled = wanted is not None
        if wanted:
            every, kwargs = wanted
            task.interval, _ = IntervalSchedule.objects.get_or_create(
                every=every, period=IntervalSchedule.SECONDS
            )
            task.crontab = None
            task.kwargs = json.dumps(kwargs)
            task.expire_seconds = every * 2
            kept.append(f"{task.task} every {every} s {kwargs or ''}".strip())
        task.save()
    PeriodicTasks.update_changed()
    return sorted(kept)


def worker_answers(seconds: float = 60) -> float | None:
    """Seconds until the chaos worker ran a ping task, or None."""
    from celery.exceptions import TimeoutError as ResultTimeout

    from piper.tasks import ping

    started = time.monotonic()
    result = ping.apply_async(args=["after"], queue=_stack.env()["PIPER_CHAOS_QUEUE"])
    deadline = started + seconds
    while time.monotonic() < deadline:
        try:
            result.get(timeout=2)
            return time.monotonic() - started
        except ResultTimeout:
            continue
        except Exception:  # the broker itself not answering yet
            time.sleep(1)
    return None


# ---------------------------------------------------------------------------- drive


def add_load_arguments(parser, port: int) -> None:
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--threads", type=int, default=2, help="threads per client process")
    parser.add_argument("--seconds", type=float, default=75, help="how long the clients write")
    parser.add_argument("--first-at", type=float, default=15, help="first fault, seconds in")
    parser.add_argument("--gap", type=float, default=20, help="seconds between faults")
    parser.add_argument("--settle", type=float, default=180, help="wait for derived work")
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--port", type=int, default=port)


def drive(
    name: str, title: str, args, services, inject, describe: str, epilogue=None, checks=None
) -> int:
    """The whole run: the stack on `services` (postgres, redis, note), the load,
    `inject(faults, stack)` in a thread beside it (it appends one dict per
    fault: name, began, back — time.time() — and whatever it measured), then
    every check; `epilogue()` returns lines of the script's own to print last,
    `checks()` the script's own violations.
    Returns the exit code."""
    postgres, redis, note = services
    _stack.setup_django()
    # This process's result backend complains of each lost Redis connection: noise here.
    logging.getLogger("celery.backends.redis").setLevel(logging.CRITICAL)
    beat_tasks = configure_beat(reconcilers=getattr(args, "reconcilers", True))
    agent, key = _stack.agent_with_key(name)
    run = f"{name[:3]}{uuid.uuid4().hex[:6]}"
    violations: list[str] = []
    with (
        _stack.gunicorn(args.port, args.web_workers, args.web_threads, name) as server,
        _stack.celery_worker(name) as worker_log,
        _stack.celery_beat(name) as beat,
        _stack.client(server.url, key) as http,
    ):
        print(
            _stack.header(
                title,
                server,
                f"{note}\nclients: {args.procs} processes x {args.threads} threads for "
                f"{args.seconds:.0f} s, writing facts, episodes and checkpoints; {describe}\n"
                f"Celery: 1 worker; beat with {'; '.join(beat_tasks)}",
            ),
            flush=True,
        )
        thread_ids = make_threads(http, run, args.procs, args.threads)
        since = datetime.now(UTC)
        web_before = server.worker_pids()
        probe = Probe(server.url, key).start()
        faults: list[dict] = []
        stack = {"postgres": postgres, "redis": redis, "server": server}
        started = time.monotonic()
        replies = _stack.run_processes(
            writer,
            [
                (server.url, key, run, p, args.threads, args.seconds, thread_ids[p], p)
                for p in range(args.procs)
            ],
            during=lambda: inject(faults, stack),
        )
        duration = time.monotonic() - started
        time.sleep(2)
        probe.stop()
        web_after = server.worker_pids()
        windows = [(f["began"], f["back"]) for f in faults]

        answers, found = check_answers(replies, windows)
        violations += found
        cut = sum(
            1
            for a in attempts_of(replies)
            if not 200 <= a["status"] < 300
            and any(a["at"] < f["began"] < a["at"] + a["seconds"] for f in faults)
        )
        print(f"-- the load: {answers['writes']} writes in {duration:.0f} s")
        for label, value in answers.items():
            print(f"   {label}: {value}")
        print(f"   requests in flight when a fault began, answered with an error: {cut}")
        for reply in replies:
            if reply.replayed:  # made, though its first answer was an error: which, when
                first = reply.extra["attempts"][0]
                fault = min(faults, key=lambda f: abs(f["began"] - first["at"]), default=None)
                print(
                    f"   replayed: {reply.label} ({reply.extra['op']}), attempts "
                    + ", ".join(
                        f"{a['status'] or 'none'} {a['code']} sent at "
                        f"{a['at'] - fault['began']:+.2f} s, answered in {a['seconds']:.2f} s"
                        for a in reply.extra["attempts"]
                    )
                    + " (times from the fault's start)"
                    if fault
                    else ""
                )
        for n, fault in enumerate(faults, 1):
            seen = probe.outage(fault["began"], fault["back"])
            fault.update(seen)
            head = f"-- fault {n} ({fault['name']}): down {fault['back'] - fault['began']:.1f} s; "
            if seen["api_outage_s"] is not None:
                head += f"the API failing {seen['api_outage_s']:.1f} s"
            else:
                head += "the API never failed a probe"
            if seen["recovery_s"] is not None:
                head += f", answering 200 {seen['recovery_s']:.2f} s after the server was back"
            else:
                violations.append(f"fault {n}: the API did not answer 200 again")
            print(head)
            print(f"   the probe saw: {seen['seen']}")
            during = [
                a["seconds"]
                for a in attempts_of(replies)
                if fault["began"] <= a["at"] <= fault["back"]
            ]
            if during:
                print(
                    f"   writes sent while it was down: {len(during)}, answered in p50 "
                    f"{_stack.percentile(during, 50) * 1000:.0f} ms, max {max(during) * 1000:.0f} ms"
                )
        if faults:
            late = [a for a in attempts_of(replies) if a["at"] > faults[-1]["back"] + 15]
            bad = [a for a in late if not 200 <= a["status"] < 300]
            print(f"   requests from 15 s after the last fault: {len(late)}, failed {len(bad)}")
            if bad:
                violations.append(f"{len(bad)} requests failed 15 s or more after the last fault")
        if web_before != web_after:
            violations.append(f"gunicorn's workers changed: {web_before} -> {web_after}")
        print(
            f"   gunicorn: the same {len(web_after)} worker processes before and after: "
            f"{web_before == web_after}"
        )
        ping = worker_answers()
        if ping is None:
            violations.append("the Celery worker does not run tasks after the faults")
        print(
            f"   the Celery worker ran a task {ping:.1f} s after being asked"
            if ping is not None
            else "   the Celery worker did NOT run a task"
        )
        alive = beat.poll() is None
        print(f"   celery-beat still running: {alive}")
        if not alive:
            violations.append("celery-beat died")

        figures, found = check_database(agent, replies, since)
        violations += found
        print("-- the database")
        for label, value in figures.items():
            print(f"   {label}: {value}")
        backlog = derived_backlog(agent)
        print(f"-- derived work left when the load ended: {backlog}")
        left, waited = wait_for_derived_work(agent, args.settle)
        print(f"-- derived work left {waited:.0f} s later: {left}")
        if any(left.values()):
            violations.append(f"derived work left after {args.settle:.0f} s: {left}")
        errors = worker_errors(worker_log)
        if errors:
            print(f"   the worker's log: {errors}")
        for line in epilogue() if epilogue else []:
            print(line)
        violations += checks() if checks else []
    return _stack.finish(violations, server)


def worker_errors(log_path) -> dict[str, int]:
    """What the worker's log complained of, by kind (for the report)."""
    kinds = Counter()
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return {}
    for line in text.splitlines():
        if " ERROR/" in line or " CRITICAL/" in line or "ERROR " in line[:40]:
            words = line.split("] ", 1)[-1]
            kinds[words[:90]] += 1
    return dict(kinds.most_common(6))
