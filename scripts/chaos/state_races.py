"""Races for one winner: several processes change the same object at the same
moment through the HTTP API of a real gunicorn, round after round; after each
round the answers and the database must show exactly one winner.

* handover: half the clients hand the thread over (each to its own successor),
  half write the next checkpoint. One handover is made (201), the others are
  409 handover_open; at most one checkpoint is written, the others 409
  stale_version / thread_frozen; the handover froze the version the thread
  ended at (nothing was written after the freeze); one succession event.
  Every other round all clients send the SAME handover with the same
  Idempotency-Key: one is written, the others replay its answer (all 201,
  identical bodies, Idempotent-Replayed on all but one).
* intention: half the clients complete a one-shot intention, half cancel it;
  a second intention depends on it. Exactly one terminal transition (one
  ledger event); if completion won, one complete is 200 and every other
  request 409 invalid_transition, and the dependent fired exactly once; if
  cancellation won, every complete is 409 invalid_transition, every cancel
  200 (documented: cancelling a cancelled intention changes nothing) and the
  dependent is cancelled with it, never fired. Every other round the
  intention is a daily one and the clients complete or skip occurrence 1
  (naming it): one is 200, the others 409 stale_occurrence, and the
  intention is at occurrence 2 with one completion.
* promotion: an experimental skill version one verified success short of
  validated; half the clients promote it, half report that success (each
  report promotes it automatically once the evidence is there). Exactly one
  experimental → validated transition; at most one promote is 200, the
  others 409 evidence_missing / invalid_transition; every report 201. In
  every third round two versions of one skill get their last evidence at
  once: the newer ends validated, the older deprecated, never two validated.
  In every third round a deprecated version with its evidence is promoted by
  every client naming the status it read (from_status): one step, once; the
  others 409 stale_status.

    .venv/bin/python scripts/chaos/state_races.py                    # all three, default rounds
    .venv/bin/python scripts/chaos/state_races.py --scenario intention --rounds 50 --clients 8

Exits 1 on any violation (a 5xx, a dropped connection, two winners, no winner,
an unexplained answer).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _stack  # noqa: E402


@dataclass
class Request:
    label: str
    method: str
    path: str
    body: dict
    key: str = ""  # Idempotency-Key; "" for none


def one_request(base_url: str, key: str, request: Request) -> list[_stack.Reply]:
    headers = {"Idempotency-Key": request.key} if request.key else {}
    with _stack.client(base_url, key) as http:
        return [
            _stack.call(
                http,
                request.method,
                request.path,
                request.label,
                json=request.body,
                headers=headers,
            )
        ]


@dataclass
class Tally:
    """Figures of one scenario over its rounds."""

    rounds: int = 0
    requests: int = 0
    answers: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def add(self, replies: list[_stack.Reply]) -> None:
        self.requests += len(replies)
        for r in replies:
            self.answers[f"{r.label.split(':')[0]} {r.status} {r.code}".strip()] += 1
            if r.status >= 500 or r.status == 0:
                self.violations.append(f"{r.label}: {r.status} {r.code} {r.error} {r.body}")


def race(server: _stack.Server, key: str, requests: list[Request]) -> list[_stack.Reply]:
    """Each request from its own client process, all at once. (A round takes any
    `racer(requests) -> replies`: the test suite's short form races threads.)"""
    return _stack.run_processes(one_request, [(server.url, key, r) for r in requests])


def expect(ok: bool, tally: Tally, message: str) -> None:
    if not ok:
        tally.violations.append(message)


def by_label(replies: list[_stack.Reply], prefix: str) -> list[_stack.Reply]:
    return [r for r in replies if r.label.startswith(prefix)]


# ------------------------------------------------------------------------- handover


def handover_round(http, racer, agent, n: int, clients: int, tally: Tally) -> None:
    from intentions.models import Handover, Thread, WorkingState
    from ledger.models import Event

    thread = http.post("/api/v1/threads", json={"key": f"race-{n}-{uuid.uuid4().hex[:6]}"}).json()
    tid = thread["id"]
    first = http.put(
        f"/api/v1/threads/{tid}/state", json={"state": {"goal": "before"}, "based_on": 0}
    )
    assert first.status_code == 201, first.text
    replay_round = n % 2 == 1
    if replay_round:
        same = Request("handover", "POST", f"/api/v1/threads/{tid}/handover",
                       {"to_session": "successor"}, key=f"handover-{tid}")  # fmt: skip
        requests = [same] * clients
    else:
        requests = [
            Request(
                f"handover:{i}",
                "POST",
                f"/api/v1/threads/{tid}/handover",
                {"to_session": f"successor-{i}"},
            )
            if i % 2 == 0
            else Request(
                f"checkpoint:{i}",
                "PUT",
                f"/api/v1/threads/{tid}/state",
                {"state": {"goal": f"writer {i}"}, "based_on": 1},
            )
            for i in range(clients)
        ]
    replies = racer(requests)
    tally.add(replies)
    handovers = list(Handover.objects.filter(thread_id=tid))
    events = Event.objects.filter(
        agent=agent, event_type="thread.handover_started", payload__thread_id=tid
    ).count()
    row = Thread.objects.get(pk=tid)
    versions = WorkingState.objects.filter(thread_id=tid).count()
    label = f"handover round {n}"
    expect(len(handovers) == 1, tally, f"{label}: {len(handovers)} handovers made")
    expect(events == 1, tally, f"{label}: {events} thread.handover_started events")
    expect(row.status == Thread.Status.HANDING_OVER, tally, f"{label}: thread is {row.status}")
    if not handovers:
        return
    made = handovers[0]
    expect(
        made.frozen_version == row.current_version == versions,
        tally,
        f"{label}: frozen at {made.frozen_version}, thread at {row.current_version}, "
        f"{versions} versions stored (a write got in after the freeze?)",
    )
    if replay_round:
        statuses = Counter(r.status for r in replies)
        bodies = {json.dumps(r.body, sort_keys=True) for r in replies}  # replays: jsonb key order
        fresh = sum(not r.replayed for r in replies)
        expect(statuses == Counter({201: clients}), tally, f"{label}: answers {statuses}")
        expect(len(bodies) == 1, tally, f"{label}: {len(bodies)} different bodies: {bodies}")
        expect(fresh == 1, tally, f"{label}: {fresh} answers not marked replayed")
        tally.outcomes["same key: one written, others replayed"] += fresh == 1
        return
    wins = [r for r in by_label(replies, "handover") if r.status == 201]
    others = Counter(r.code for r in by_label(replies, "handover") if r.status != 201)
    expect(len(wins) == 1, tally, f"{label}: {len(wins)} handovers answered 201")
    expect(set(others) <= {"handover_open"}, tally, f"{label}: losing handovers got {others}")
    if wins:
        expect(
            wins[0].body["to_session"] == made.to_session,
            tally,
            f"{label}: the 201 names {wins[0].body['to_session']}, the row {made.to_session}",
        )
    written = [r for r in by_label(replies, "checkpoint") if r.status == 201]
    refused = Counter(r.code for r in by_label(replies, "checkpoint") if r.status != 201)
    expect(len(written) <= 1, tally, f"{label}: {len(written)} checkpoints written on version 1")
    expect(
        set(refused) <= {"stale_version", "thread_frozen"},
        tally,
        f"{label}: refused checkpoints got {refused}",
    )
    expect(
        row.current_version == 1 + len(written),
        tally,
        f"{label}: {len(written)} checkpoints accepted, thread at version {row.current_version}",
    )
    tally.outcomes[f"checkpoint {'before' if written else 'never'}, then frozen"] += 1


# ------------------------------------------------------------------------ intention


def recurring_round(http, racer, agent, n: int, clients: int, tally: Tally) -> None:
    from intentions.models import Intention, Transition

    made = http.post(
        "/api/v1/intentions",
        json={
            "description": f"daily {n}",
            "trigger_type": "time",
            "due_at": "2030-01-07T09:00:00Z",
            "rrule": "FREQ=DAILY",
        },
    )
    assert made.status_code == 201, made.text
    iid = made.json()["id"]
    requests = [
        Request(f"complete:{i}", "POST", f"/api/v1/intentions/{iid}/complete", {"occurrence": 1})
        if i % 2 == 0
        else Request(f"skip:{i}", "POST", f"/api/v1/intentions/{iid}/skip", {"occurrence": 1})
        for i in range(clients)
    ]  # fmt: skip
    replies = racer(requests)
    tally.add(replies)
    label = f"recurring round {n}"
    final = Intention.objects.get(pk=iid)
    done = Transition.objects.filter(intention_id=iid, to_status="completed").count()
    won = [r for r in replies if r.status == 200]
    lost = Counter(f"{r.status} {r.code}" for r in replies if r.status != 200)
    expect(len(won) == 1, tally, f"{label}: {len(won)} answered 200")
    expect(lost == Counter({"409 stale_occurrence": clients - 1}), tally, f"{label}: lost {lost}")
    expect(
        (final.status, final.occurrence, done) == ("active", 2, 1),
        tally,
        f"{label}: {final.status} at occurrence {final.occurrence}, {done} completions",
    )
    if won:
        tally.outcomes[f"recurring: {won[0].label.split(':')[0]} won"] += 1


def intention_round(http, racer, agent, n: int, clients: int, tally: Tally) -> None:
    from intentions.models import Firing, Intention, Transition
    from ledger.models import Event

    if n % 2 == 1:
        return recurring_round(http, racer, agent, n, clients, tally)

    made = http.post(
        "/api/v1/intentions", json={"description": f"race {n}", "trigger_type": "manual"}
    )
    assert made.status_code == 201, made.text
    iid = made.json()["id"]
    dependent = http.post(
        "/api/v1/intentions",
        json={
            "description": f"after race {n}",
            "trigger_type": "dependency",
            "dependencies": [iid],
        },
    )
    assert dependent.status_code == 201, dependent.text
    did = dependent.json()["id"]
    requests = [
        Request(f"complete:{i}", "POST", f"/api/v1/intentions/{iid}/complete", {"evidence": {"by": i}})
        if i % 2 == 0
        else Request(f"cancel:{i}", "POST", f"/api/v1/intentions/{iid}/cancel", {"reason": f"by {i}"})
        for i in range(clients)
    ]  # fmt: skip
    replies = racer(requests)
    tally.add(replies)
    label = f"intention round {n}"
    final = Intention.objects.get(pk=iid)
    ended = Transition.objects.filter(
        intention_id=iid, to_status__in=["completed", "cancelled"]
    ).count()
    events = Event.objects.filter(
        agent=agent,
        event_type__in=["intention.completed", "intention.cancelled"],
        payload__intention_id=iid,
    ).count()
    expect(ended == 1, tally, f"{label}: {ended} terminal transitions")
    expect(events == 1, tally, f"{label}: {events} terminal ledger events")
    completes, cancels = by_label(replies, "complete"), by_label(replies, "cancel")
    after = Intention.objects.get(pk=did)
    firings = Firing.objects.filter(intention_id=did).count()
    if final.status == "completed":
        won = [r for r in completes if r.status == 200]
        lost = Counter(f"{r.status} {r.code}" for r in completes + cancels if r.status != 200)
        expect(len(won) == 1, tally, f"{label}: completed, {len(won)} completes answered 200")
        expect(
            lost == Counter({"409 invalid_transition": clients - 1}),
            tally,
            f"{label}: completed; the others got {lost}",
        )
        expect(
            after.status == "due" and firings == 1,
            tally,
            f"{label}: completed; dependent {after.status} with {firings} firings",
        )
    elif final.status == "cancelled":
        expect(
            all(r.status == 409 and r.code == "invalid_transition" for r in completes),
            tally,
            f"{label}: cancelled; completes got {Counter((r.status, r.code) for r in completes)}",
        )
        expect(
            all(r.status == 200 for r in cancels),
            tally,
            f"{label}: cancelled; cancels got {Counter((r.status, r.code) for r in cancels)}",
        )
        expect(
            after.status == "cancelled" and firings == 0,
            tally,
            f"{label}: cancelled; dependent {after.status} with {firings} firings",
        )
    else:
        tally.violations.append(f"{label}: intention ended {final.status}")
    tally.outcomes[f"{final.status} won"] += 1


# ------------------------------------------------------------------------ promotion

PROCEDURE = """
def run(params, tools):
    return {"record": params["record"], "length": len(params["record"])}
"""

VALIDATOR = """
def validate(params, result, tools):
    return result == {"record": params["record"], "length": len(params["record"])}
"""

SKILL = {
    "purpose": "Measure a record",
    "trigger": {"keywords": ["measure", "record"]},
    "parameter_schema": {
        "type": "object",
        "properties": {"record": {"type": "string", "minLength": 1}},
        "required": ["record"],
        "additionalProperties": False,
    },
    "procedure": PROCEDURE,
    "validator": VALIDATOR,
    "examples": [{"params": {"record": "INV-1"}, "expected": {"record": "INV-1", "length": 5}}],
}
REPORT = {
    "params": {"record": "INV-9"},
    "succeeded": True,
    "externally_verified": True,
    "evidence": {"checked_by": "chaos"},
}


def _wait_status(http, version_id: str, status: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = http.get(f"/api/v1/skills/versions/{version_id}").json()["status"]
        if got == status:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"version {version_id} stayed {got}, never {status}")
        time.sleep(0.2)


def _experimental_version(http, skill_id: str | None, name: str) -> tuple[str, str]:
    """(skill id, version id): a new skill (or version), its examples run by the worker."""
    if skill_id is None:
        made = http.post("/api/v1/skills", json={**SKILL, "name": name})
        assert made.status_code == 201, made.text
        skill_id, version_id = made.json()["id"], made.json()["versions"][0]["id"]
    else:
        made = http.post(f"/api/v1/skills/{skill_id}/versions", json=SKILL)
        assert made.status_code == 201, made.text
        version_id = made.json()["id"]
    _wait_status(http, version_id, "experimental")
    return skill_id, version_id


def _one_short(http, version_id: str, needed: int) -> None:
    for _ in range(needed - 1):
        reported = http.post(f"/api/v1/skills/versions/{version_id}/executions", json=REPORT)
        assert reported.status_code == 201, reported.text


def promotion_round(http, racer, agent, n: int, clients: int, tally: Tally) -> None:
    from django.conf import settings

    from skills.models import SkillVersion, VersionTransition

    needed = settings.SKILLS_PROMOTION_SUCCESSES
    label = f"promotion round {n}"
    name = f"measure-{n}-{uuid.uuid4().hex[:6]}"
    skill_id, first = _experimental_version(http, None, name)
    kind = ("one version", "two versions", "re-promote")[n % 3]
    if kind == "re-promote":
        return repromote_round(http, racer, skill_id, first, name, label, clients, tally)
    two_versions = kind == "two versions"
    if two_versions:
        _, second = _experimental_version(http, skill_id, name)
        _one_short(http, first, needed)
        _one_short(http, second, needed)
        targets = [first, second]
        requests = [
            Request(
                f"report:v{1 + i % 2}:{i}",
                "POST",
                f"/api/v1/skills/versions/{targets[i % 2]}/executions",
                REPORT,
            )
            for i in range(clients)
        ]
    else:
        _one_short(http, first, needed)
        requests = [
            Request(f"promote:{i}", "POST", f"/api/v1/skills/versions/{first}/promote", {})
            if i % 2 == 0
            else Request(
                f"report:{i}", "POST", f"/api/v1/skills/versions/{first}/executions", REPORT
            )
            for i in range(clients)
        ]
    replies = racer(requests)
    tally.add(replies)
    reports = by_label(replies, "report")
    expect(
        all(r.status == 201 for r in reports),
        tally,
        f"{label}: reports got {Counter((r.status, r.code) for r in reports)}",
    )
    validated = Counter(
        VersionTransition.objects.filter(
            version__skill_id=skill_id, to_status="validated"
        ).values_list("version_id", flat=True)
    )
    statuses = dict(SkillVersion.objects.filter(skill_id=skill_id).values_list("id", "status"))
    if two_versions:
        older, newer = uuid.UUID(first), uuid.UUID(second)
        expect(
            (statuses[older], statuses[newer]) == ("deprecated", "validated"),
            tally,
            f"{label}: v1 {statuses[older]}, v2 {statuses[newer]} (expected deprecated, validated)",
        )
        expect(validated[newer] == 1, tally, f"{label}: v2 validated {validated[newer]} times")
        expect(validated[older] <= 1, tally, f"{label}: v1 validated {validated[older]} times")
        tally.outcomes[f"v1 {'validated, then' if validated[older] else 'never validated,'} deprecated"] += 1  # fmt: skip
        return
    version = uuid.UUID(first)
    expect(statuses[version] == "validated", tally, f"{label}: ended {statuses[version]}")
    expect(validated[version] == 1, tally, f"{label}: validated {validated[version]} times")
    promotes = by_label(replies, "promote")
    won = [r for r in promotes if r.status == 200]
    lost = Counter(r.code for r in promotes if r.status != 200)
    expect(len(won) <= 1, tally, f"{label}: {len(won)} promotes answered 200")
    expect(
        set(lost) <= {"evidence_missing", "invalid_transition"}
        and all(r.status == 409 for r in promotes if r.status != 200),
        tally,
        f"{label}: losing promotes got {lost}",
    )
    if won:
        expect(won[0].body["status"] == "validated", tally, f"{label}: 200 with {won[0].body}")
    tally.outcomes["a promote won" if won else "a report's automatic promotion won"] += 1


def repromote_round(http, racer, skill_id, first, name, label, clients, tally) -> None:
    """A deprecated version that still has its evidence, promoted by every client
    at once, each naming the status it read: one step (to experimental), once."""
    from django.conf import settings

    from skills.models import VersionTransition

    needed = settings.SKILLS_PROMOTION_SUCCESSES
    _one_short(http, first, needed + 1)
    _wait_status(http, first, "validated")
    _, second = _experimental_version(http, skill_id, name)
    _one_short(http, second, needed + 1)
    _wait_status(http, first, "deprecated")
    requests = [
        Request(
            f"promote:{i}",
            "POST",
            f"/api/v1/skills/versions/{first}/promote",
            {"from_status": "deprecated"},
        )
        for i in range(clients)
    ]
    replies = racer(requests)
    tally.add(replies)
    won = [r for r in replies if r.status == 200]
    lost = Counter(f"{r.status} {r.code}" for r in replies if r.status != 200)
    steps = VersionTransition.objects.filter(version_id=first, from_status="deprecated").count()
    status = http.get(f"/api/v1/skills/versions/{first}").json()["status"]
    expect(len(won) == 1, tally, f"{label}: {len(won)} promotes answered 200")
    expect(lost == Counter({"409 stale_status": clients - 1}), tally, f"{label}: lost {lost}")
    expect(
        (status, steps) == ("experimental", 1),
        tally,
        f"{label}: ended {status} after {steps} steps up from deprecated",
    )
    tally.outcomes["re-promote: one step"] += (status, steps) == ("experimental", 1)


# ----------------------------------------------------------------------------- main

SCENARIOS = {
    "handover": (handover_round, 40),
    "intention": (intention_round, 40),
    "promotion": (promotion_round, 18),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--rounds", type=int, help="rounds per scenario (default: its own)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client processes")
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--port", type=int, default=8532)
    parser.add_argument("--reuse-db", action="store_true", help="keep the chaos database")
    args = parser.parse_args()
    chosen = list(SCENARIOS) if args.scenario == "all" else [args.scenario]

    note = "database kept (--reuse-db)" if args.reuse_db else _stack.fresh_database()
    _stack.setup_django()
    agent, key = _stack.agent_with_key("state-races")
    violations: list[str] = []
    with (
        _stack.gunicorn(args.port, args.web_workers, args.web_threads, "state-races") as server,
        _stack.celery_worker("state-races"),  # runs the skills' examples in the sandbox
        _stack.client(server.url, key) as http,
    ):
        print(
            _stack.header(
                "one-winner races",
                server,
                f"clients: {args.clients} processes per round; {note}; Celery worker: yes (1)",
            ),
            flush=True,
        )
        racer = functools.partial(race, server, key)
        for name in chosen:
            play, default_rounds = SCENARIOS[name]
            tally = Tally()
            deadlocks = _stack.deadlocks()
            started = time.monotonic()
            for n in range(args.rounds or default_rounds):
                play(http, racer, agent, n, args.clients, tally)
                tally.rounds += 1
            duration = time.monotonic() - started
            deadlocks = _stack.deadlocks() - deadlocks
            fives = sum(n for k, n in tally.answers.items() if k.split()[1].startswith("5"))
            print(f"-- {name}: {tally.rounds} rounds x {args.clients} clients in {duration:.0f} s")
            print(f"   answers: {dict(sorted(tally.answers.items()))}")
            print(f"   outcomes: {dict(tally.outcomes)}")
            print(f"   deadlocks PostgreSQL broke (the API retried them): {deadlocks}")
            print(f"   5xx: {fives}; violations: {len(tally.violations)}", flush=True)
            violations += tally.violations
    return _stack.finish(violations, server)


if __name__ == "__main__":
    sys.exit(main())
