"""Many processes assert different values for ONE single-valued fact, at once,
through the HTTP API of a real gunicorn; then the database and the API are
checked for what the service promises:

* every write accounted for: 201 (accepted) or 409 with an error code — no 5xx,
  no other answer, no dropped connection; the ledger holds exactly the
  accepted claims (a refused write left no event);
* one linear supersession chain: each accepted version supersedes exactly the
  one believed before it (no fork: two versions never supersede the same
  one), record times strictly increase, every closed version names what
  closed it;
* 0 overlapping intervals: no two believed versions overlap in valid time, and
  no two versions overlap in valid time *and* believed (record) time;
* what is believed in the end is exactly the accepted claims, each from its
  valid_from until the next one's — whatever order they arrived in;
* current, chain and as_known_at through the API agree with the database;
  the agent's hash chain verifies.

    .venv/bin/python scripts/chaos/fact_storm.py                 # 8 procs x 125 writes, valid time now
    .venv/bin/python scripts/chaos/fact_storm.py --mode backdated  # each claim its own past valid_from
    .venv/bin/python scripts/chaos/fact_storm.py --procs 4 --writes 200 --no-worker

`now`: claims carry no valid_from, so each starts at its record time and the
chain is the arrival order. `backdated`: each claim carries a distinct
valid_from in the past, sent in random order, so claims land in the middle of
the timeline and split versions. Exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _stack  # noqa: E402

SUBJECT = "storm-subject"
PREDICATE = "storm.value"


def writer(
    base_url: str, key: str, claims: list[tuple[str, str | None]], threads: int
) -> list[_stack.Reply]:
    """One client process: its claims, split over `threads` threads, each sequential."""
    replies: list[_stack.Reply] = []
    lock = threading.Lock()

    def run(share):
        with _stack.client(base_url, key) as http:
            for value, valid_from in share:
                body = {
                    "subject": SUBJECT,
                    "predicate": PREDICATE,
                    "value": value,
                    "cardinality": "one",
                    "source_type": "user_statement",
                }
                if valid_from:
                    body["valid_from"] = valid_from
                reply = _stack.call(
                    http,
                    "POST",
                    "/api/v1/facts",
                    value,
                    json=body,
                    headers={"Idempotency-Key": f"storm-{uuid.uuid4()}"},
                )
                with lock:
                    replies.append(reply)

    workers = [threading.Thread(target=run, args=(claims[n::threads],)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return replies


# --------------------------------------------------------------------------- checks


def check_replies(replies: list[_stack.Reply]) -> tuple[dict[str, _stack.Reply], list[str]]:
    """The accepted writes by value, and what is wrong with the answers."""
    violations: list[str] = []
    accepted: dict[str, _stack.Reply] = {}
    for reply in replies:
        if reply.status == 201:
            outcome = reply.body.get("outcome")
            if outcome != "created":
                violations.append(f"{reply.label}: 201 with outcome {outcome!r}, not 'created'")
            accepted[reply.label] = reply
        elif reply.status == 409:
            if not reply.code:
                violations.append(f"{reply.label}: 409 without an error code: {reply.body}")
        elif reply.status == 0:
            violations.append(f"{reply.label}: no answer ({reply.error})")
        else:
            violations.append(f"{reply.label}: {reply.status} {reply.code}: {reply.body}")
    return accepted, violations


def check_database(agent, accepted: dict[str, _stack.Reply], mode: str) -> tuple[dict, list[str]]:
    """The chain, the intervals and the ledger, as PostgreSQL has them."""
    from django.db import connection

    from facts.models import Entity, Fact, FactOrigin, FactStatus, Predicate
    from ledger.models import Event
    from ledger.selectors import chain_verify

    violations: list[str] = []
    figures: dict = {}
    subjects = list(Entity.objects.filter(agent=agent, aliases__alias__iexact=SUBJECT).distinct())
    predicates = list(Predicate.objects.filter(agent=agent, name=PREDICATE))
    figures["entities named"] = len(subjects)
    figures["predicates defined"] = len(predicates)
    if len(subjects) != 1 or len(predicates) != 1:
        violations.append(
            f"{len(subjects)} entities named {SUBJECT!r} and {len(predicates)} predicates "
            f"{PREDICATE!r}: the first writers' race made duplicates (expected one of each)"
        )
        if not subjects or not predicates:
            return figures, violations
    subject, predicate = subjects[0], predicates[0]
    rows = list(
        Fact.objects.filter(agent=agent, subject=subject, predicate=predicate).order_by(
            "recorded_at", "valid_from"
        )
    )
    by_id = {f.pk: f for f in rows}
    figures["fact rows"] = len(rows)
    figures["rows by origin/status"] = dict(Counter(f"{f.origin}/{f.status}" for f in rows))

    # Every accepted write is one asserted version, with the value and id its answer gave.
    asserted = [f for f in rows if f.origin == FactOrigin.ASSERTED]
    asserted_values = Counter(f.object_value for f in asserted)
    if asserted_values != Counter(list(accepted)):
        missing = set(accepted) - set(asserted_values)
        extra = {v for v, n in asserted_values.items() if n > 1 or v not in accepted}
        violations.append(
            f"asserted versions do not match the accepted writes: {len(asserted)} versions, "
            f"{len(accepted)} accepted; missing {sorted(missing)[:5]}, unexpected/duplicated "
            f"{sorted(map(str, extra))[:5]}"
        )
    for value, reply in accepted.items():
        fact_id = uuid.UUID(reply.body["fact"]["id"])
        fact = by_id.get(fact_id)
        if fact is None or fact.object_value != value or fact.origin != FactOrigin.ASSERTED:
            violations.append(f"{value}: its answer names fact {fact_id}, which does not hold it")

    # One linear chain: record times strictly increase; no version is superseded twice.
    times = [f.recorded_at for f in asserted]
    ties = sum(1 for a, b in zip(times, times[1:], strict=False) if a >= b)
    figures["record-time ties among accepted versions"] = ties
    if ties:
        violations.append(f"{ties} accepted versions share a record time with the previous one")
    forks = {k: n for k, n in Counter(f.supersedes_id for f in asserted).items() if k and n > 1}
    figures["forks (a version superseded by two)"] = len(forks)
    if forks:
        violations.append(f"{len(forks)} versions were superseded by two accepted versions")
    if mode == "now":  # each starts at its record time: the chain is the arrival order
        broken = sum(
            1
            for before, after in zip(asserted, asserted[1:], strict=False)
            if after.supersedes_id != before.pk or before.superseded_by_id != after.pk
        )
        broken += asserted[0].supersedes_id is not None if asserted else 0
        figures["links off the arrival-order chain"] = broken
        if broken:
            violations.append(f"{broken} accepted versions do not supersede the one before them")
    unlinked = 0
    for fact in rows:
        if fact.status != FactStatus.SUPERSEDED:
            continue
        closer = by_id.get(fact.superseded_by_id)
        if closer is None or closer.recorded_at != fact.superseded_at:
            unlinked += 1
    figures["closed versions without their closer"] = unlinked
    if unlinked:
        violations.append(
            f"{unlinked} superseded versions do not name the version that closed them"
        )

    # What is believed in the end: each accepted claim from its start to the next one's.
    starts = sorted((f.valid_from, f.object_value) for f in asserted)
    expected = [
        (start, starts[n + 1][0] if n + 1 < len(starts) else None, value)
        for n, (start, value) in enumerate(starts)
    ]
    believed = sorted(
        (f.valid_from, f.valid_to, f.object_value)
        for f in rows
        if f.status == FactStatus.ACTIVE and f.superseded_at is None
    )
    figures["believed versions"] = len(believed)
    if believed != expected:
        first = next(
            (n for n, (a, b) in enumerate(zip(believed, expected, strict=False)) if a != b),
            min(len(believed), len(expected)),
        )
        violations.append(
            f"the believed timeline is not the accepted claims in valid-time order: "
            f"{len(believed)} believed vs {len(expected)} expected; first difference at #{first}"
        )

    # Overlaps, in SQL over every pair: believed vs believed in valid time, and any two
    # believed-at-some-time versions in valid time AND record time.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FILTER (WHERE a.status = 'active' AND a.superseded_at IS NULL
                                      AND b.status = 'active' AND b.superseded_at IS NULL),
                   count(*) FILTER (WHERE tstzrange(a.recorded_at, a.superseded_at)
                                       && tstzrange(b.recorded_at, b.superseded_at))
              FROM facts_fact a
              JOIN facts_fact b
                ON b.agent_id = a.agent_id AND b.subject_id = a.subject_id
               AND b.predicate_id = a.predicate_id AND a.id < b.id
               AND tstzrange(a.valid_from, a.valid_to) && tstzrange(b.valid_from, b.valid_to)
             WHERE a.agent_id = %s AND a.subject_id = %s AND a.predicate_id = %s
               AND a.status <> 'contested' AND b.status <> 'contested'
            """,
            [agent.pk, subject.pk, predicate.pk],
        )
        believed_overlaps, bitemporal_overlaps = cursor.fetchone()
    figures["overlapping believed versions (valid time)"] = believed_overlaps
    figures["overlapping versions (valid x record time)"] = bitemporal_overlaps
    if believed_overlaps or bitemporal_overlaps:
        violations.append(
            f"{believed_overlaps} believed overlaps, {bitemporal_overlaps} bitemporal overlaps"
        )

    # The ledger: exactly the accepted claims (a refused write left nothing behind).
    events = Event.objects.filter(
        agent=agent,
        event_type="facts.asserted",
        payload__subject_id=str(subject.pk),
        payload__predicate_id=str(predicate.pk),
    )
    logged = Counter(e.payload.get("value") for e in events)
    figures["facts.asserted events"] = sum(logged.values())
    if logged != Counter(list(accepted)):
        violations.append(
            f"the ledger holds {sum(logged.values())} assertions for {len(accepted)} accepted writes"
        )
    report = chain_verify(agent=agent)
    figures["hash chain"] = f"ok, {report.events_checked} events" if report.ok else "BROKEN"
    if not report.ok:
        violations.append(f"the agent's hash chain is broken: {report.first_break}")
    return figures, violations


def _when(reply: _stack.Reply) -> tuple[str, str]:
    """(valid_from, recorded_at) of the version a write's answer names."""
    status = reply.body["fact"]["memory_status"]
    return status["valid_from"], status["recorded_at"]


def check_api(base_url: str, key: str, accepted: dict[str, _stack.Reply], rows_expected: int):
    """current, chain and as_known_at through HTTP agree with what was accepted."""
    violations: list[str] = []
    if not accepted:
        return ["nothing was accepted"]
    ordered = sorted(accepted.values(), key=lambda r: datetime.fromisoformat(_when(r)[0]))
    query = {"subject": SUBJECT, "predicate": PREDICATE}
    with _stack.client(base_url, key) as http:
        current = http.get("/api/v1/facts/current", params=query).json()
        values = [f["value"] for f in current["facts"]]
        if values != [ordered[-1].label]:
            violations.append(f"current is {values}, expected [{ordered[-1].label!r}]")
        chain = http.get("/api/v1/facts/chain", params=query).json()
        if len(chain["facts"]) != rows_expected:
            violations.append(
                f"chain lists {len(chain['facts'])} versions, the table has {rows_expected}"
            )
        for reply in random.Random(7).sample(list(accepted.values()), min(25, len(accepted))):
            valid, recorded = _when(reply)
            known = http.get(
                "/api/v1/facts/as-known-at",
                params={**query, "valid_time": valid, "record_time": recorded},
            ).json()
            got = [f["value"] for f in known.get("facts", [])]
            if got != [reply.label]:
                violations.append(
                    f"as_known_at(valid={valid}, record={recorded}) is {got}, "
                    f"expected [{reply.label!r}]"
                )
    return violations


# ----------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=8, help="client processes")
    parser.add_argument("--writes", type=int, default=1000, help="writes in all")
    parser.add_argument("--threads", type=int, default=2, help="threads per client process")
    parser.add_argument("--mode", choices=["now", "backdated"], default="now")
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--port", type=int, default=8531)
    parser.add_argument("--no-worker", action="store_true", help="no Celery worker")
    parser.add_argument("--reuse-db", action="store_true", help="keep the chaos database")
    args = parser.parse_args()

    note = "database kept (--reuse-db)" if args.reuse_db else _stack.fresh_database()
    _stack.setup_django()
    agent, key = _stack.agent_with_key("fact-storm")

    rng = random.Random(18)
    values = [f"p{n % args.procs:02d}-w{n // args.procs:04d}" for n in range(args.writes)]
    starts: list[str | None] = [None] * args.writes
    if args.mode == "backdated":
        base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=30)
        offsets = list(range(args.writes))
        rng.shuffle(offsets)  # arrival order unrelated to valid-time order
        starts = [(base + timedelta(minutes=o)).isoformat() for o in offsets]
    per_process = [
        [(values[n], starts[n]) for n in range(p, args.writes, args.procs)]
        for p in range(args.procs)
    ]

    worker = (
        _stack.celery_worker("fact-storm")
        if not args.no_worker
        else _stack.contextlib.nullcontext()
    )
    with (
        _stack.gunicorn(args.port, args.web_workers, args.web_threads, "fact-storm") as server,
        worker,
    ):
        print(
            _stack.header(
                f"fact storm ({args.mode}): {args.writes} writes to one single-valued fact",
                server,
                f"clients: {args.procs} processes x {args.threads} threads; {note}; "
                f"Celery worker: {'no' if args.no_worker else 'yes (1)'}",
            ),
            flush=True,
        )
        deadlocks = _stack.deadlocks()
        started = time.monotonic()
        replies = _stack.run_processes(
            writer, [(server.url, key, claims, args.threads) for claims in per_process]
        )
        duration = time.monotonic() - started
        deadlocks = _stack.deadlocks() - deadlocks
        accepted, violations = check_replies(replies)
        figures, db_violations = check_database(agent, accepted, args.mode)
        violations += db_violations
        violations += check_api(server.url, key, accepted, figures.get("fact rows", 0))

    fives = sum(1 for r in replies if r.status >= 500)
    print(f"writes: {len(replies)} in {duration:.1f} s ({len(replies) / duration:.0f}/s)")
    print(f"answers: {_stack.status_counts(replies)}")
    print(f"accepted: {len(accepted)}; 409: {sum(r.status == 409 for r in replies)}; 5xx: {fives}")
    print(f"latency: {_stack.latency(replies)}")
    print(f"deadlocks PostgreSQL broke (the API retried them): {deadlocks}")
    for name, value in figures.items():
        print(f"{name}: {value}")
    return _stack.finish(violations, server)


if __name__ == "__main__":
    sys.exit(main())
