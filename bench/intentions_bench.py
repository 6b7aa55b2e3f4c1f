"""Working state and intentions at 100,000 armed intentions (issue #4, "Speed").

    .venv/bin/python bench/intentions_bench.py [--intentions 100000] [--agents 20]
        [--only scan,resume,event] [--due 0,100,1000] [--repeat 3] [--samples 300]
        [--beat] [--noise 0] [--profile]

Builds, in the benchmark database (PIPER_DB_NAME=piper_bench), `agents` agents
holding `intentions` armed intentions between them (status active, or blocked
on dependencies): mostly time triggers due over the coming six weeks (some
recurring, some with not_before or an expiry), and event, state, dependency
and manual triggers; most belong to one of each agent's 25 threads, and agent
0 has one thread holding exactly 1,000 open intentions.

How the rows are made. 1% of them (and every intention the event benchmark
waits for) go through `lifecycle.intention_create`, the service the API calls.
The rest are bulk inserts of rows identical in shape, built the way
intention_create builds them: the spec validated by `triggers.validate_spec`,
the times by the service's own `_check_times`, `due_at` computed by its rules
(not_before alone, or the first RRULE occurrence), one `intention.created`
ledger event per intention with the service's payload, appended through
`ledger.services.events_append` (the hash chain, 1,000 per call), then the
Intention rows (`armed_after_seq` = the event's seq, `last_rehearsed_at` =
now), their dependency links and their "created" Transition rows with
`bulk_create`, each chunk in one transaction. A shape check makes one
intention of each kind both ways and compares every column, the ledger event
and the transition. Intentions of earlier runs of this script are deleted
first (raw SQL, bench agents only), so each run starts at the same size; the
tables are then VACUUM ANALYZEd, as autovacuum would after such a load.

scan    `engine.scan_time()` (what celery-beat's engine cycle does first), for
        N due intentions among the armed ones (the population topped up so
        that exactly `intentions` are armed, N of them due in the last
        minute), each N `repeat` times from a fresh state. Wall time includes
        the firings (ledger event, Firing, status, Transition, pending item,
        the post-commit hook). EXPLAIN (ANALYZE, BUFFERS) of the scan query
        and of expire_due's query is printed.
resume  `state.thread_resume` in-process and POST /api/v1/threads/{id}/resume
        over gunicorn (2 workers x 4 threads, the Procfile), for the thread
        with 1,000 open intentions, a 3 KB checkpoint and 20 pending items.
event   A real `celery worker` subprocess (prefork, concurrency 2 as in the
        Procfile) on a queue of this run's own, against the bench database
        and the embedded Redis. Each sample appends one ledger event through
        `ledger.services.event_append` that matches exactly one armed event
        intention among the agent's ~350; the commit time is taken in an
        on_commit callback registered before the ledger's own (which enqueues
        intentions.match_events), and the intention's status is polled every
        2 ms from this process until it reads 'due'. With --beat, the engine
        cycle is also sent to the worker every 5 s (as celery-beat would);
        with --noise R, R non-matching events/s are appended for other agents.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import httpx
from _harness import (
    PYTHON,
    ROOT,
    bench_env,
    load_average,
    machine,
    migrate,
    percentile,
    setup_django,
)

AGENT_PREFIX = "bench-intentions"
THREADS_PER_AGENT = 25
BIG_THREAD = "resume-1000"
BIG_THREAD_SIZE = 1000
CHUNK = 1000
SERVICE_SHARE = 0.01

WORDS = (  # noqa: SIM905 (word lists read better as text)
    "follow up with the customer about invoice renewal contract deploy staging rollback "
    "review pull request draft report weekly metrics migrate database rotate credentials "
    "check backups benchmark latency summarise meeting notes send reminder escalate ticket "
    "verify fix update dashboard archive logs prepare release notes schedule call"
).split()
PEOPLE = ["Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Radia", "Edsger"]
SERVICES = ["billing", "search", "auth", "ingest", "payments", "reports", "mailer", "gateway"]
TOOLS = ["shell", "browser", "sql", "http", "search", "python"]
RRULES = ["FREQ=DAILY", "FREQ=WEEKLY;BYDAY=MO", "FREQ=WEEKLY;BYDAY=MO,TH", "FREQ=MONTHLY"]


# ----------------------------------------------------------------------------- reporting


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50) * 1000, 2),
        "p95_ms": round(percentile(samples, 95) * 1000, 2),
        "p99_ms": round(percentile(samples, 99) * 1000, 2),
        "mean_ms": round(statistics.fmean(samples) * 1000, 2),
        "max_ms": round(max(samples) * 1000, 2),
    }


def say(text: str = "") -> None:
    print(text, flush=True)


class QueryCounter:
    """connection.execute_wrapper: how many statements a measured call sends."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


# -------------------------------------------------------------------------- population


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def make_input(rng: random.Random, kind: str, now: datetime, thread, n: int, dependencies=()):
    """One realistic IntentionInput of `kind` (time, event, state, dependency, manual)."""
    from intentions.services.lifecycle import IntentionInput

    common = {
        "description": f"{sentence(rng, 4, 14)} ({rng.choice(PEOPLE)}, #{n})",
        "priority": rng.choice([0, 0, 0, 1, 1, 2, 3, 5]),
        "thread": thread,
        "required_context": rng.sample(
            ["last deploy log", "customer email thread", "runbook", "previous report"],
            k=rng.randint(0, 2),
        ),
        "completion_criteria": sentence(rng, 3, 10) if rng.random() < 0.6 else "",
        "retry_policy": {"max_retries": 2, "backoff_seconds": 300} if rng.random() < 0.3 else {},
        "escalation_policy": {"overdue_seconds": 3600, "to_session": "oncall"}
        if rng.random() < 0.1
        else {},
        "source_session": f"session-{rng.randint(1, 400)}",
    }
    if kind == "time":
        due = now + timedelta(minutes=rng.uniform(10, 42 * 24 * 60))
        not_before = due - timedelta(hours=rng.uniform(0, 48)) if rng.random() < 0.15 else None
        rrule = rng.choice(RRULES) if rng.random() < 0.1 else ""
        expires = due + timedelta(days=rng.choice([7, 14, 30])) if rng.random() < 0.2 else None
        return IntentionInput(
            trigger_type="time",
            due_at=due,
            not_before=not_before,
            rrule=rrule,
            expires_at=expires,
            **common,
        )
    if kind == "event":
        shape = rng.randrange(5)
        if shape == 0:  # one ticket's deploy
            spec = {
                "event_type": "deploy.finished",
                "conditions": [{"field": "payload.ticket", "op": "eq", "value": f"T-{n}"}],
            }
        elif shape == 1:
            spec = {
                "event_type": "deploy.*",
                "conditions": [
                    {"field": "payload.env", "op": "eq", "value": "staging"},
                    {"field": "payload.service", "op": "eq", "value": rng.choice(SERVICES)},
                ],
            }
        elif shape == 2:
            spec = {
                "event_type": "user.said",
                "conditions": [{"field": "payload.text", "op": "contains", "value": f"#{n}"}],
            }
        elif shape == 3:
            spec = {
                "event_type": "tool.returned",
                "conditions": [
                    {"field": "payload.status", "op": "eq", "value": "error"},
                    {"field": "payload.tool", "op": "eq", "value": rng.choice(TOOLS)},
                    {"field": "payload.attempt", "op": "gte", "value": 3},
                ],
            }
        else:
            spec = {
                "event_type": "email.received",
                "conditions": [
                    {"field": "payload.from", "op": "eq", "value": f"{rng.choice(PEOPLE)}@x.io"}
                ],
            }
        return IntentionInput(trigger_type="event", trigger_spec=spec, **common)
    if kind == "state":
        spec = {
            "subject": f"{rng.choice(SERVICES)}-service",
            "predicate": "status",
            "op": "eq",
            "value": "degraded",
        }
        return IntentionInput(trigger_type="state", trigger_spec=spec, **common)
    if kind == "dependency":
        return IntentionInput(trigger_type="dependency", dependencies=dependencies, **common)
    return IntentionInput(trigger_type="manual", **common)


def pick_kind(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.85:
        return "time"
    if roll < 0.92:
        return "event"
    if roll < 0.96:
        return "state"
    if roll < 0.98:
        return "dependency"
    return "manual"


def bulk_create(agent, inputs) -> list:
    """Rows identical in shape to lifecycle.intention_create's, for a chunk of inputs.

    Validated and computed with the service's own rules; one ledger event per
    intention through events_append; rows, links and 'created' transitions
    with bulk_create; all in one transaction."""
    from django.db import transaction

    from intentions.models import (
        Intention,
        IntentionDependency,
        IntentionStatus,
        Transition,
        TriggerType,
    )
    from intentions.services import lifecycle, triggers
    from intentions.services.dependencies import unmet
    from ledger.services import EventDraft, events_append
    from piper.ids import uuid7
    from piper.provenance import SourceType
    from piper.tenancy.clock import now_for

    now = now_for(agent.pk)
    needed = {d for data in inputs for d in data.dependencies}
    known = {i.pk: i for i in Intention.objects.filter(agent=agent, pk__in=needed)}
    rows, drafts, links = [], [], []
    for data in inputs:
        spec = triggers.validate_spec(data.trigger_type, data.trigger_spec)
        lifecycle._check_retry_policy(data.retry_policy)
        errors = lifecycle._check_times(data)
        assert not errors, errors
        due_at = data.due_at or (data.not_before if data.trigger_type == TriggerType.TIME else None)
        if data.rrule:
            due_at = triggers.occurrences_exist(data.rrule, data.due_at or data.not_before)
        dependencies = [known[d] for d in dict.fromkeys(data.dependencies)]
        row = Intention(
            id=uuid7(),
            agent=agent,
            thread=data.thread,
            description=data.description.strip(),
            priority=data.priority,
            trigger_type=data.trigger_type,
            trigger_spec=spec,
            not_before=data.not_before,
            due_at=due_at,
            rrule=data.rrule,
            expires_at=data.expires_at,
            required_context=data.required_context,
            completion_criteria=data.completion_criteria,
            retry_policy=data.retry_policy,
            escalation_policy=data.escalation_policy,
            source_session=data.source_session,
            status=IntentionStatus.BLOCKED
            if dependencies and unmet(dependencies)
            else IntentionStatus.ACTIVE,
            last_rehearsed_at=now,
        )
        rows.append(row)
        links += [IntentionDependency(intention=row, depends_on=d) for d in dependencies]
        drafts.append(
            EventDraft(
                event_type="intention.created",
                payload={
                    "intention_id": str(row.pk),
                    "description": row.description,
                    "trigger_type": row.trigger_type,
                    "trigger_spec": spec,
                    "due_at": due_at.isoformat() if due_at else None,
                    "not_before": data.not_before.isoformat() if data.not_before else None,
                    "rrule": data.rrule,
                    "dependencies": [str(d.pk) for d in dependencies],
                    "thread_id": str(data.thread.pk) if data.thread else None,
                },
                session_id=data.source_session,
                source_type=SourceType.AGENT_INFERENCE,
            )
        )
    with transaction.atomic():
        for row, event in zip(rows, events_append(agent=agent, drafts=drafts), strict=True):
            row.source_event = event
            row.armed_after_seq = event.seq
        Intention.objects.bulk_create(rows, batch_size=CHUNK)
        IntentionDependency.objects.bulk_create(links, batch_size=CHUNK)
        Transition.objects.bulk_create(
            [
                Transition(
                    intention=row,
                    from_status="",
                    to_status=row.status,
                    occurrence=row.occurrence,
                    reason="created",
                    at=now,
                    event=row.source_event,
                )
                for row in rows
            ],
            batch_size=CHUNK,
        )
    return rows


def service_create(agent, inputs) -> list:
    from intentions.services.lifecycle import intention_create

    return [intention_create(agent=agent, data=data) for data in inputs]


def delete_earlier_runs() -> int:
    """Earlier runs' intentions (bench agents only), so every run starts at the same size.
    Their ledger events stay: the ledger is append-only."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE old_intentions ON COMMIT DROP AS SELECT i.id FROM "
            "intentions_intention i JOIN tenancy_agent a ON a.id = i.agent_id "
            "WHERE a.name LIKE %s",
            [f"{AGENT_PREFIX}-%"],
        )
        cursor.execute("SELECT count(*) FROM old_intentions")
        count = cursor.fetchone()[0]
        for sql in (
            "DELETE FROM intentions_pendingitem WHERE intention_id IN (SELECT id FROM old_intentions)",
            "DELETE FROM intentions_outboxmessage WHERE firing_id IN (SELECT f.id FROM "
            "intentions_firing f WHERE f.intention_id IN (SELECT id FROM old_intentions))",
            "DELETE FROM intentions_firing WHERE intention_id IN (SELECT id FROM old_intentions)",
            "DELETE FROM intentions_transition WHERE intention_id IN (SELECT id FROM old_intentions)",
            "DELETE FROM intentions_intentiondependency WHERE intention_id IN "
            "(SELECT id FROM old_intentions) OR depends_on_id IN (SELECT id FROM old_intentions)",
            "DELETE FROM intentions_intention WHERE id IN (SELECT id FROM old_intentions)",
        ):
            cursor.execute(sql)
    return count


def vacuum_analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in (
            "intentions_intention",
            "intentions_transition",
            "intentions_firing",
            "intentions_pendingitem",
            "intentions_intentiondependency",
        ):
            cursor.execute(f"VACUUM (ANALYZE) {table}")


class Population:
    """The bench agents, their threads, and how to add intentions to them."""

    def __init__(self, agents, threads, big_thread, rng: random.Random) -> None:
        self.agents = agents
        self.threads = threads  # agent pk -> [Thread]
        self.big_thread = big_thread
        self.rng = rng
        self.serial = 0

    def inputs(self, agent, count: int, now: datetime, *, big: int = 0, kinds=None) -> list:
        """count inputs (dependency ones refer to this agent's armed time intentions)."""
        from intentions.models import Intention, IntentionStatus

        rng = self.rng
        time_ids = None
        out = []
        for index in range(count):
            kind = pick_kind(rng) if kinds is None else rng.choice(kinds)
            if index < big:
                thread = self.big_thread
            elif rng.random() < 0.8:
                thread = rng.choice(self.threads[agent.pk])
            else:
                thread = None
            deps = ()
            if kind == "dependency":
                if time_ids is None:
                    time_ids = list(
                        Intention.objects.filter(
                            agent=agent, trigger_type="time", status=IntentionStatus.ACTIVE
                        ).values_list("pk", flat=True)[:2000]
                    )
                if not time_ids:
                    kind = "time"
                else:
                    deps = tuple(rng.sample(time_ids, k=min(len(time_ids), rng.randint(1, 3))))
            self.serial += 1
            out.append(make_input(rng, kind, now, thread, self.serial, deps))
        return out

    def add(self, agent, inputs, *, service_share: float = SERVICE_SHARE) -> tuple[int, float]:
        """Create: a share through the service, the rest in bulk chunks. Returns
        (through the service, seconds spent in the service)."""
        # Dependencies must exist first: dependency-triggered ones go last.
        inputs = sorted(inputs, key=lambda d: d.trigger_type == "dependency")
        by_service = [d for d in inputs if self.rng.random() < service_share]
        chosen = {id(d) for d in by_service}
        t0 = time.perf_counter()
        service_create(agent, by_service)
        spent = time.perf_counter() - t0
        rest = [d for d in inputs if id(d) not in chosen]
        plain = [d for d in rest if d.trigger_type != "dependency"]
        deps = [d for d in rest if d.trigger_type == "dependency"]
        for group in (plain, deps):
            for first in range(0, len(group), CHUNK):
                bulk_create(agent, group[first : first + CHUNK])
        return len(by_service), spent


def armed_count(agents) -> int:
    from intentions.models import Intention, IntentionStatus

    return Intention.objects.filter(
        agent__in=agents, status__in=[IntentionStatus.ACTIVE, IntentionStatus.BLOCKED]
    ).count()


def build(args, rng: random.Random) -> Population:
    from django.utils import timezone

    from intentions.services.state import thread_get_or_create
    from piper.tenancy.services import agent_create

    t0 = time.perf_counter()
    deleted = delete_earlier_runs()
    say(f"deleted {deleted:,} intentions of earlier runs in {time.perf_counter() - t0:.1f} s")
    stamp = int(time.time())
    agents = [agent_create(name=f"{AGENT_PREFIX}-{stamp}-{i:02d}") for i in range(args.agents)]
    threads = {
        a.pk: [
            thread_get_or_create(agent=a, key=f"project-{k}", session_id="session-1")[0]
            for k in range(THREADS_PER_AGENT)
        ]
        for a in agents
    }
    big_thread, _ = thread_get_or_create(agent=agents[0], key=BIG_THREAD, session_id="session-1")
    population = Population(agents, threads, big_thread, rng)

    per_agent = args.intentions // args.agents
    now = timezone.now()
    t0 = time.perf_counter()
    via_service = 0
    service_seconds = 0.0
    for index, agent in enumerate(agents):
        count = per_agent + (args.intentions - per_agent * args.agents if index == 0 else 0)
        # Agent 0's big thread: 1,000 open intentions (20 of them fired below).
        inputs = population.inputs(agent, count, now, big=BIG_THREAD_SIZE if index == 0 else 0)
        n, spent = population.add(agent, inputs)
        via_service += n
        service_seconds += spent
    elapsed = time.perf_counter() - t0
    say(
        f"created {args.intentions:,} intentions for {args.agents} agents in {elapsed:.1f} s: "
        f"{via_service:,} through lifecycle.intention_create ({via_service / service_seconds:,.0f}"
        f"/s), the rest in bulk chunks of {CHUNK:,}"
    )
    return population


def shape_check(population: Population) -> None:
    """One intention of each kind through the service and through bulk_create: same shape."""
    from django.utils import timezone

    from intentions.models import Intention, Transition
    from intentions.services.lifecycle import intention_cancel

    agent = population.agents[0]
    now = timezone.now()
    rng = random.Random(99)
    thread = population.threads[agent.pk][0]
    anchors = list(
        Intention.objects.filter(agent=agent, trigger_type="time", status="active").values_list(
            "pk", flat=True
        )[:2]
    )
    variants = []
    for kind in ("time", "event", "state", "dependency", "manual"):
        variants.append(make_input(rng, kind, now, thread, 0, tuple(anchors)))
    variants.append(  # recurring, with not_before and expiry, no thread
        replace(
            variants[0],
            thread=None,
            rrule="FREQ=WEEKLY;BYDAY=MO",
            not_before=variants[0].due_at - timedelta(hours=3),
            expires_at=variants[0].due_at + timedelta(days=30),
        )
    )
    skip = {
        "id",
        "source_event",
        "armed_after_seq",
        "created_at",
        "updated_at",
        "last_rehearsed_at",
    }
    fields = [f.attname for f in Intention._meta.concrete_fields if f.name not in skip]
    checked = 0
    for data in variants:
        a = service_create(agent, [data])[0]
        b = bulk_create(agent, [data])[0]
        b.refresh_from_db()
        for name in fields:
            assert getattr(a, name) == getattr(b, name), (data.trigger_type, name)
        ea, eb = a.source_event, b.source_event
        for name in ("event_type", "session_id", "source_type", "authority", "actor"):
            assert getattr(ea, name) == getattr(eb, name), name
        pa = {k: v for k, v in ea.payload.items() if k != "intention_id"}
        pb = {k: v for k, v in eb.payload.items() if k != "intention_id"}
        assert pa == pb, (pa, pb)
        ta = list(Transition.objects.filter(intention=a).values_list("from_status", "to_status"))
        tb = list(Transition.objects.filter(intention=b).values_list("from_status", "to_status"))
        assert ta == tb, (ta, tb)
        assert set(a.dependency_links.values_list("depends_on", flat=True)) == set(
            b.dependency_links.values_list("depends_on", flat=True)
        )
        for made in (a, b):  # out of the population again
            intention_cancel(agent=agent, intention_id=made.pk, reason="bench shape check")
        checked += 1
    say(
        f"shape check: {checked} kinds (time, event, state, dependency, manual, recurring) made "
        "through the service and in bulk: every column, the ledger event and the transition "
        "identical"
    )


# -------------------------------------------------------------------------------- scan


def scan_queryset(now: datetime):
    """The query scan_time runs for its first chunk (copied from engine.scan_time)."""
    from django.db.models import Q

    from intentions.models import Intention, IntentionStatus, TriggerType
    from intentions.services.engine import SCAN_CHUNK
    from piper.tenancy.clock import scan_scope

    return (
        Intention.objects.filter(
            scan_scope(None),
            status=IntentionStatus.ACTIVE,
            trigger_type=TriggerType.TIME,
            due_at__lte=now,
        )
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .order_by("due_at", "pk")
        .values_list("pk", "occurrence", "due_at")[:SCAN_CHUNK]
    )


def expire_queryset(now: datetime):
    """The query expire_due runs (copied from engine.expire_due)."""
    from intentions.models import Intention, IntentionStatus
    from piper.tenancy.clock import scan_scope

    open_statuses = [
        IntentionStatus.ACTIVE,
        IntentionStatus.BLOCKED,
        IntentionStatus.DUE,
        IntentionStatus.EXECUTING,
    ]
    return (
        Intention.objects.filter(scan_scope(None), status__in=open_statuses, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", flat=True)
    )


def top_up(population: Population, target: int, due: int) -> None:
    """Exactly `target` armed intentions, `due` of them time triggers due in the last minute."""
    from django.utils import timezone

    from intentions.models import Intention
    from intentions.services.lifecycle import intention_cancel

    rng = population.rng
    agents = population.agents
    missing = target - due - armed_count(agents)
    if missing < 0:  # the previous run left more: cancel some (through the service)
        surplus = (
            Intention.objects.filter(agent__in=agents, status="active", trigger_type="time")
            .exclude(thread=population.big_thread)
            .exclude(dependent_links__isnull=False)
            .values_list("agent_id", "pk")[:-missing]
        )
        for agent_id, pk in surplus:
            agent = next(a for a in agents if a.pk == agent_id)
            intention_cancel(agent=agent, intention_id=pk, reason="bench: back to the target size")
        missing = 0
    now = timezone.now()
    for index, agent in enumerate(agents):
        share = missing // len(agents) + (1 if index < missing % len(agents) else 0)
        if share:
            population.add(agent, population.inputs(agent, share, now), service_share=0)
    # The due ones: plain time triggers (60% in a thread), spread over the agents.
    counts = [0] * len(agents)
    for _ in range(due):
        counts[rng.randrange(len(agents))] += 1
    for agent, count in zip(agents, counts, strict=True):
        if not count:
            continue
        inputs = []
        for data in population.inputs(agent, count, now, kinds=["time"]):
            moment = now - timedelta(seconds=rng.uniform(1, 60))
            inputs.append(
                replace(
                    data,
                    due_at=moment,
                    not_before=None,
                    rrule="",
                    expires_at=None,
                    thread=data.thread if rng.random() < 0.75 else None,
                )
            )
        population.add(agent, inputs, service_share=0)
    assert armed_count(agents) == target


def purge_queue(queue: str) -> int:
    from piper.celery import app

    with app.connection_for_write() as connection:
        return connection.default_channel.queue_purge(queue) or 0


def explain(queryset) -> str:
    return queryset.explain(analyze=True, buffers=True)


def run_scan(args, population: Population, queue: str) -> list[dict]:
    from django.db import connection
    from django.utils import timezone

    from intentions.models import Intention
    from intentions.services import engine

    results = []
    for due in args.due:
        for attempt in range(args.repeat):
            top_up(population, args.intentions, due)
            now = timezone.now()
            plan = explain(scan_queryset(now))
            expire_plan = explain(expire_queryset(now))
            if attempt == 0:
                say(f"\nEXPLAIN (ANALYZE, BUFFERS) scan query, {due:,} due:\n{plan}")
                if due == args.due[0]:
                    say(f"\nEXPLAIN (ANALYZE, BUFFERS) expire_due query:\n{expire_plan}")
            assert "intentions_time_scan_idx" in plan, "the scan does not use its partial index"
            purge_queue(queue)  # what the top-up's commits queued: not the scan's
            t0 = time.perf_counter()
            engine.expire_due()
            expire_seconds = time.perf_counter() - t0
            load = os.getloadavg()[0]
            counter = QueryCounter()
            profiler = cProfile.Profile() if args.profile and attempt == 0 and due else None
            with connection.execute_wrapper(counter):
                if profiler:
                    profiler.enable()
                t0 = time.perf_counter()
                fired = engine.scan_time()
                elapsed = time.perf_counter() - t0
                if profiler:
                    profiler.disable()
            purged = purge_queue(queue)
            assert len(fired) == due, f"fired {len(fired)}, expected {due}"
            assert (
                Intention.objects.filter(
                    pk__in=[f.intention_id for f in fired], status="due"
                ).count()
                == due
            )
            row = {
                "due": due,
                "seconds": elapsed,
                "fired": len(fired),
                "per_second": len(fired) / elapsed if fired else 0.0,
                "queries": counter.count,
                "expire_ms": expire_seconds * 1000,
                "load1": load,
                "tasks_enqueued": purged,
            }
            results.append(row)
            say(
                f"scan_time with {due:,} due among {args.intentions:,} armed: {elapsed * 1000:,.0f} ms, "
                f"fired {len(fired):,} ({row['per_second']:,.0f}/s), {counter.count:,} statements, "
                f"expire_due alone {row['expire_ms']:.1f} ms, post-commit tasks queued {purged}, "
                f"load1 {load:.2f}"
            )
            if profiler:
                out = io.StringIO()
                stats = pstats.Stats(profiler, stream=out)
                stats.sort_stats("cumulative").print_stats(30)
                stats.sort_stats("tottime").print_stats(15)
                say(out.getvalue())
    return results


def run_cycle(args, population: Population, queue: str) -> None:
    """The whole engine cycle (what celery-beat sends every 5 s), in-process, nothing due."""
    from intentions import tasks
    from intentions.services import engine

    top_up(population, args.intentions, 0)
    for name, call in (
        ("scan_time", engine.scan_time),
        ("check_states", engine.check_states),
        ("catch_up_events", engine.catch_up_events),
        ("engine_cycle (scan_time + check_states + event catch-up)", tasks.engine_cycle),
    ):
        samples = []
        for _ in range(3):
            t0 = time.perf_counter()
            call()
            samples.append(time.perf_counter() - t0)
        say(f"{name}, nothing due: {[round(s * 1000) for s in samples]} ms ({load_average()})")
    purge_queue(queue)


# A realistic ~3 KB checkpoint: a goal stack, a plan, artifacts and tool handles
# (some past their freshness, so resume lists them to re-check), failed branches.
CHECKPOINT = {
    "goal": "Migrate the billing service to the new invoicing provider without downtime",
    "subgoal": "Backfill invoice numbers for accounts created before 2024",
    "goal_stack": [
        "Migrate billing to the new provider",
        "Backfill legacy invoice numbers",
        "Verify totals against the ledger export",
    ],
    "plan": [
        {
            "step": n,
            "do": f"batch {n}: backfill accounts {n * 5000}-{n * 5000 + 4999}",
            "done": n < 4,
        }
        for n in range(10)
    ],
    "assumptions": [
        "The provider's sandbox mirrors production rate limits",
        "Legacy invoice numbers are unique per account",
    ],
    "unresolved_questions": ["Do credit notes need their own number series?"],
    "artifacts": [
        {
            "name": f"export-{n}",
            "ref": f"s3://billing-exports/2026-11/part-{n:03d}.csv",
            "checked_at": "2026-11-01T09:00:00+00:00",
            "freshness_seconds": 3600 if n % 2 else 86400 * 365,
        }
        for n in range(8)
    ],
    "tool_handles": [
        {
            "name": "provider-session",
            "ref": "sess_8f2c1e",
            "checked_at": "2026-11-01T09:00:00+00:00",
            "freshness_seconds": 900,
        }
    ],
    "last_action": {"tool": "backfill", "args": {"batch": 3}, "result": "ok, 5,000 rows"},
    "last_observation": "batch 3 finished in 41 s; 12 accounts skipped (no legacy number)",
    "blockers": ["Waiting for finance to confirm the credit-note series"],
    "decision_points": [{"at": "batch 2", "chose": "skip accounts without legacy number"}],
    "failed_branches": [
        {"branch": "bulk import through the provider's CSV endpoint", "reason": "rate limited"},
        {"branch": "renumber all invoices", "reason": "breaks links in sent emails"},
    ],
    "next_action": {"tool": "backfill", "args": {"batch": 4}},
    "source_session": "session-1",
}


def prepare_resume(population: Population) -> None:
    """A checkpoint on the big thread, and 20 of its intentions fired (pending items)."""
    from django.utils import timezone

    from intentions.models import Intention, IntentionStatus
    from intentions.services import firing
    from intentions.services.state import working_state_write

    agent, thread = population.agents[0], population.big_thread
    working_state_write(
        agent=agent,
        thread=thread,
        state=CHECKPOINT,
        based_on=thread.current_version,
        session_id="session-1",
    )
    for pk, occurrence in Intention.objects.filter(
        thread=thread, status=IntentionStatus.ACTIVE
    ).values_list("pk", "occurrence")[:20]:
        firing.fire_safely(
            intention_id=pk, occurrence=occurrence, cause="manual", at=timezone.now()
        )
    thread.refresh_from_db()


def run_resume(args, population: Population) -> dict:
    from django.db import connection

    from intentions.models import Intention
    from intentions.services.state import thread_resume
    from intentions.thread_serializers import ResumeOutputSerializer as Out
    from piper.tenancy.services import api_key_create

    agent, thread = population.agents[0], population.big_thread
    open_count = Intention.objects.filter(
        thread=thread, status__in=["active", "blocked", "due", "executing"]
    ).count()
    say(f"\nresume: thread {thread.key!r} with {open_count:,} open intentions")
    assert open_count == BIG_THREAD_SIZE, open_count

    def resume():
        return thread_resume(agent=agent, thread=thread, session_id="session-2")

    for _ in range(30):
        package = resume()
    assert len(package.intentions.parsed()) == BIG_THREAD_SIZE and len(package.pending) == 20
    counter = QueryCounter()
    with connection.execute_wrapper(counter):
        resume()
    in_process = []
    for _ in range(args.samples):
        t0 = time.perf_counter()
        resume()
        in_process.append(time.perf_counter() - t0)
    in_process_load = load_average()
    say(f"thread_resume in-process ({counter.count} statements): {summary(in_process)}")

    # Diagnostics: the API's work beyond the service, in-process.
    from piper.api.rendering import JSONRenderer

    body = None
    serialise = []
    for _ in range(min(args.samples, 100)):
        package = resume()
        t0 = time.perf_counter()
        body = JSONRenderer().render(Out(package).data)
        serialise.append(time.perf_counter() - t0)
    say(f"  + serialise and render ({len(body):,} bytes): {summary(serialise)}")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20):
            package = resume()
            JSONRenderer().render(Out(package).data)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
        say(out.getvalue())

    from piper.tenancy.models import MAX_RATE_PER_MINUTE

    _, key = api_key_create(
        agent=agent,
        name="bench-resume",
        scopes=["read", "write"],
        rate_per_minute=MAX_RATE_PER_MINUTE,
    )
    samples, size, load = http_resume(args, key, thread)
    http = (summary(samples), load)
    say(f"POST /threads/{{id}}/resume over HTTP ({size:,} bytes): {summary(samples)}; {load}")
    return {
        "in_process": summary(in_process),
        "in_process_load": in_process_load,
        "http": http,
        "statements": counter.count,
        "serialise": summary(serialise),
    }


@contextlib.contextmanager
def serve(port: int):
    """gunicorn as in the Procfile (2 workers x 4 threads)."""
    cmd = [
        PYTHON,
        "-m",
        "gunicorn",
        "piper.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--threads",
        "4",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=bench_env())
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code in (
                    200,
                    503,
                ):
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("gunicorn did not start")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def http_resume(args, key: str, thread) -> tuple[list[float], int, str]:
    import gc

    # The client's own garbage collections (this process holds a large heap) must not
    # count against the server: frozen while sampling.
    gc.collect()
    gc.freeze()
    try:
        return _http_resume(args, key, thread)
    finally:
        gc.unfreeze()


def _http_resume(args, key: str, thread) -> tuple[list[float], int, str]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    samples: list[float] = []
    size = 0
    with (
        serve(args.port) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=30) as http,
    ):
        url = f"/api/v1/threads/{thread.pk}/resume"
        body = json.dumps({"session_id": "session-2"})
        for _ in range(60):  # warm-up: both gunicorn workers, connections, imports
            assert http.post(url, content=body).status_code == 200
        for _ in range(args.samples):
            t0 = time.perf_counter()
            response = http.post(url, content=body)
            samples.append(time.perf_counter() - t0)
            assert response.status_code == 200, response.text[:300]
            size = len(response.content)
        answer = response.json()
        assert len(answer["intentions"]) == BIG_THREAD_SIZE and len(answer["pending"]) == 20
        assert [i["status"] for i in answer["intentions"][:20]] == ["due"] * 20
    return samples, size, load_average()


# ------------------------------------------------------------------------------- event


class Worker:
    """`celery worker` as a subprocess on this run's own queue(s) (testsupport.plugin's helpers)."""

    def __init__(self, queue: str, concurrency: int, conf: dict, name: str = "") -> None:
        from testsupport.plugin import WorkerProcess, _wait_until_ready

        self.log_dir = Path(tempfile.mkdtemp(prefix="piper-bench-worker-"))
        env = {
            **bench_env(),
            "PYTHONUNBUFFERED": "1",
            # The worker's own enqueues (the hook after each intention.fired) stay on
            # this run's queues: the same default queue and routes as this process.
            "PIPER_TEST_CELERY_CONF": json.dumps(conf),
        }
        hostname = f"{queue}{name}@{socket.gethostname()}"
        command = [
            PYTHON,
            "-c",
            "from testsupport.plugin import celery_main; celery_main()",
            "worker",
            "--pool=prefork",
            f"--concurrency={concurrency}",
            "-Q",
            queue,
            "-n",
            hostname,
            "--without-mingle",
            "--without-gossip",
            "--loglevel=INFO",
        ]
        log_path = self.log_dir / "worker.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        from django.db import connection

        self.process = WorkerProcess(
            process, hostname, queue, connection.settings_dict["NAME"], log_path, env
        )
        try:
            _wait_until_ready(self.process, 90)
        except BaseException:
            self.stop()
            raise

    def task_times(self) -> dict[str, list[float]]:
        """Run times per task name, from the worker's INFO log ("succeeded in 0.012s")."""
        times: dict[str, list[float]] = {}
        for line in self.process.log(tail=10**9).splitlines():
            if "] succeeded in " not in line:
                continue
            name = line.split("Task ", 1)[1].split("[", 1)[0]
            seconds = float(line.split("] succeeded in ", 1)[1].split("s", 1)[0])
            times.setdefault(name, []).append(seconds)
        return times

    def stop(self) -> None:
        from django_redis import get_redis_connection

        from piper.heartbeat import WORKER_PREFIX

        self.process.stop()
        with contextlib.suppress(Exception):
            get_redis_connection("default").delete(WORKER_PREFIX + self.process.hostname)
        shutil.rmtree(self.log_dir, ignore_errors=True)


def queue_length(queue: str) -> int:
    from piper.celery import app

    with app.connection_for_write() as connection:
        return connection.default_channel.client.llen(queue)


def forget_queue(queue: str) -> None:
    from piper.celery import app

    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(
            queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"
        )


def wait_idle(queue: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while queue_length(queue) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # the task in hand


def sample_event(n: int, run: str) -> dict:
    return {
        "event_type": "deploy.finished",
        "payload": {
            "ticket": f"OPS-{run}-{n}",
            "env": "prod",
            "service": SERVICES[n % len(SERVICES)],
            "version": f"2026.{n % 12 + 1}.{n}",
            "duration_s": 30 + n % 400,
            "notes": "rolled out in 3 waves, no errors, canary healthy",
        },
        "session_id": "deploy-bot-session",
        "actor": "deploy-tool",
        "source_type": "tool_result",
        "source_ref": f"deploy-{n}",
    }


class Noise(threading.Thread):
    """Non-matching events for other agents (each commit queues their matcher)."""

    def __init__(self, agents, rate: float) -> None:
        super().__init__(daemon=True)
        self.agents, self.rate, self.halt, self.count = agents, rate, threading.Event(), 0

    def run(self) -> None:
        from django.db import connection

        from ledger.services import event_append

        rng = random.Random(5)
        try:
            while not self.halt.wait(rng.expovariate(self.rate)):
                event_append(
                    agent=rng.choice(self.agents),
                    event_type=rng.choice(["user.said", "tool.returned", "deploy.started"]),
                    payload={"text": sentence(rng, 5, 20), "status": "ok", "tool": "shell"},
                    source_type="observation",
                )
                self.count += 1
        finally:
            connection.close()


class Beat(threading.Thread):
    """celery-beat's engine cycle, sent to the bench worker every `period` seconds."""

    def __init__(self, queue: str, period: float = 5) -> None:
        super().__init__(daemon=True)
        self.queue, self.period, self.halt, self.sent = queue, period, threading.Event(), 0

    def run(self) -> None:
        from intentions.tasks import engine_cycle

        while not self.halt.wait(self.period):
            engine_cycle.apply_async(queue=self.queue)
            self.sent += 1


def run_event(args, population: Population, queue: str) -> dict:
    from django.db import connection, transaction

    from intentions.models import Firing, Intention
    from intentions.services import engine
    from intentions.services.lifecycle import IntentionInput, intention_create
    from ledger.services import event_append

    agent = population.agents[1]
    run = uuid.uuid4().hex[:8]
    total = args.warmup + args.samples
    t0 = time.perf_counter()
    targets = [
        intention_create(
            agent=agent,
            data=IntentionInput(
                description=f"Announce release OPS-{run}-{n} in #deploys and close the ticket",
                trigger_type="event",
                trigger_spec={
                    "event_type": "deploy.finished",
                    "conditions": [
                        {"field": "payload.env", "op": "eq", "value": "prod"},
                        {"field": "payload.ticket", "op": "eq", "value": f"OPS-{run}-{n}"},
                    ],
                },
                thread=population.threads[agent.pk][n % THREADS_PER_AGENT],
                source_session="session-7",
                priority=1,
            ),
        ).pk
        for n in range(total)
    ]
    say(
        f"\nevent: {total} target intentions through intention_create in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    armed = Intention.objects.filter(agent=agent, trigger_type="event", status="active").count()
    # The backlog: matchers queued by the loading (no worker was running), and cursors.
    purge_queue(queue)
    purge_queue(f"{queue}-states")
    for a in population.agents:
        engine.match_events(agent_id=a.pk)
    say(f"agent {agent.name}: {armed} armed event intentions (each event is matched against all)")

    conf = {"task_default_queue": queue}
    if args.split:  # PROPOSED routing: state re-checks on a queue and process of their own
        conf["task_routes"] = {"intentions.check_states": {"queue": f"{queue}-states"}}
        workers = [
            Worker(queue, args.concurrency - 1, conf),
            Worker(f"{queue}-states", 1, conf, name="-states"),
        ]
    else:
        workers = [Worker(queue, args.concurrency, conf)]
    beat = noise = None
    try:
        for worker in workers:
            wait_idle(worker.process.queue)
        if args.beat:
            beat = Beat(queue)
            beat.start()
        if args.noise:
            noise = Noise([a for a in population.agents if a.pk != agent.pk], args.noise)
            noise.start()
        latencies, server, missing = [], [], 0
        poll = "SELECT status, updated_at FROM intentions_intention WHERE id = %s"
        rng = random.Random(3)
        for n, target in enumerate(targets):
            committed: list[float] = []
            with transaction.atomic():
                # Registered before the ledger's own callback: runs right after COMMIT.
                transaction.on_commit(lambda c=committed: c.append(time.time()))
                event_append(agent=agent, **sample_event(n, run))
            deadline = time.time() + 10
            with connection.cursor() as cursor:
                while True:
                    cursor.execute(poll, [target])
                    status, updated_at = cursor.fetchone()
                    seen = time.time()
                    if status == "due" or seen > deadline:
                        break
                    time.sleep(0.002)
            if status != "due":
                missing += 1
                continue
            if n >= args.warmup:
                latencies.append(seen - committed[0])
                server.append(updated_at.timestamp() - committed[0])
            time.sleep(rng.uniform(0.02, 0.1))
        load = load_average()
    finally:
        if noise:
            noise.halt.set()
            noise.join()
        if beat:
            beat.halt.set()
            beat.join()
        task_times: dict[str, list[float]] = {}
        for worker in workers:
            wait_idle(worker.process.queue, 30)
            for name, times in worker.task_times().items():
                task_times.setdefault(name, []).extend(times)
            worker.stop()
            purge_queue(worker.process.queue)
            forget_queue(worker.process.queue)
    fired_by_samples = Firing.objects.filter(
        agent=agent, cause="event", cause_event__event_type="deploy.finished"
    ).filter(cause_event__payload__ticket__startswith=f"OPS-{run}-")
    assert missing == 0, f"{missing} targets never became due"
    assert fired_by_samples.count() == total, "a sample event fired more (or less) than its target"
    say(
        f"event commit -> intention due (polled every 2 ms), {args.samples} samples, "
        f"worker concurrency {args.concurrency}{' (split)' if args.split else ''}, beat {'on' if args.beat else 'off'}, "
        f"noise {args.noise}/s{f' ({noise.count} events)' if noise else ''}: {summary(latencies)}"
    )
    say(f"  commit -> the worker's UPDATE (its updated_at, before its commit): {summary(server)}")
    say(f"  {load}; exactly one firing per sample event, none for the ~{armed} distractors")
    for name, times in sorted(task_times.items()):
        if name.startswith("intentions."):
            say(f"  worker run time of {name}: {summary(times)}")
    return {"poll": summary(latencies), "server": summary(server), "load": load}


# -------------------------------------------------------------------------------- main


def table_sizes() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_live_tup FROM pg_stat_user_tables WHERE relname IN "
            "('intentions_intention', 'intentions_transition', 'intentions_firing', "
            "'intentions_pendingitem', 'ledger_event') ORDER BY relname"
        )
        return ", ".join(f"{name} ~{rows:,}" for name, rows in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--intentions", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--only", default="scan,cycle,resume,event")
    parser.add_argument("--due", default="0,100,1000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes (Procfile)")
    parser.add_argument("--beat", action="store_true", help="engine cycle every 5 s meanwhile")
    parser.add_argument("--noise", type=float, default=0, help="other agents' events per second")
    parser.add_argument(
        "--split",
        action="store_true",
        help="PROPOSED: route intentions.check_states to its own queue and worker process",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--port", type=int, default=8314)
    args = parser.parse_args()
    args.due = [int(n) for n in args.due.split(",")]
    only = set(args.only.split(","))

    migrate()
    setup_django()
    from django.db import connection

    from piper.celery import app

    # Everything this process enqueues (the ledger's post-commit hook) goes to a
    # queue of this run's own: no developer's worker takes it, no other database.
    queue = f"piper-bench-intentions-{os.getpid()}"
    app.conf.task_default_queue = queue
    if args.split:
        app.conf.task_routes = {"intentions.check_states": {"queue": f"{queue}-states"}}

    say(f"machine: {machine()}; PostgreSQL {connection.cursor().connection.info.server_version}")
    say(f"database {connection.settings_dict['NAME']}; {load_average()}")
    rng = random.Random(2026)
    try:
        population = build(args, rng)
        shape_check(population)
        prepare_resume(population)
        top_up(population, args.intentions, 0)
        t0 = time.perf_counter()
        vacuum_analyze()
        say(f"VACUUM (ANALYZE) intentions tables: {time.perf_counter() - t0:.1f} s")
        purge_queue(queue)
        say(f"tables: {table_sizes()}")
        if "scan" in only:
            run_scan(args, population, queue)
        if "cycle" in only:
            run_cycle(args, population, queue)
        if "resume" in only:
            run_resume(args, population)
        if "event" in only:
            top_up(population, args.intentions, 0)
            run_event(args, population, queue)
        say(f"\ntables after: {table_sizes()}; {load_average()}")
    finally:
        for name in (queue, f"{queue}-states"):
            purge_queue(name)
            forget_queue(name)


if __name__ == "__main__":
    main()
