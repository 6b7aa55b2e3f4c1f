"""Ledger tamper detection (issue 18): every kind of tampering a database
superuser can do behind the append-only trigger, one at a time, each found by
`manage.py ledger_verify` at the event it touched.

An agent writes a few hundred events of every kind through the API (events
with parents and corrections, entities, predicates, facts asserted, corrected
and retracted, sources, episodes, skills, threads with state and handovers,
intentions completed and cancelled, retention policies, webhooks, an erasure
that purges events and leaves tombstones); a second agent writes a few. Then,
per attack: in one transaction, with `session_replication_role = replica` (the
triggers off, as a malicious DBA would have them), the tampering is applied,
`ledger_verify` runs against both agents, and the transaction is rolled back —
so each attack meets a pristine ledger.

Each attack states where the verifier must point: the seq it names and the
words of its reason. Two attacks are beyond what the database alone can show
(the chain is keyless: whoever can write the database can recompute hashes):
removing the last events and rewinding the chain head, and recomputing every
hash from the tampered event on. `ledger_verify --anchors FILE` keeps each
chain's end outside the database; with an anchor taken before the attack both
are found. A forged append (a valid new event, head moved) is found by
neither: it is indistinguishable from a real one without a key the database
does not hold — the table says so.

    .venv/bin/python scripts/chaos/ledger_tamper.py              # 25 rounds (~330 events)
    .venv/bin/python scripts/chaos/ledger_tamper.py --rounds 100

The database is `piper_tamper` on the embedded PostgreSQL (dropped and made
again), its tasks on a queue of their own, purged at the end. Exits 1 on any
attack not found, or found somewhere else than where it was made.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in (str(HERE), str(HERE.parent.parent)) if p not in sys.path]

T0 = "2026-11-02T09:00:00Z"
SHIFT = 1_000_000_000  # seqs moved out of the way while renumbering (seq >= 1 is checked)


# ----------------------------------------------------------------------- the world


def build(client, rounds: int) -> None:
    """A few hundred events of every kind the API writes, through the API."""

    def call(method: str, path: str, body=None, *ok: int) -> dict:
        import json

        response = client.generic(
            method, "/api/v1/" + path, json.dumps(body or {}), content_type="application/json"
        )
        assert response.status_code in (ok or (200, 201, 202, 204)), (
            method,
            path,
            response.status_code,
            response.content[:500],
        )
        return response.json() if response.content else {}

    call("PUT", "predicates/tamper.status", {"cardinality": "one", "value_type": "string"})
    call("PUT", "webhook", {"url": "https://example.com/hook", "secret": "tamper-secret-0001"})
    policy = call(
        "POST", "retention-policies", {"name": "old", "event_type": "x.y", "max_age_days": 3650}
    )
    call("DELETE", f"retention-policies/{policy['id']}")
    skill_body = {
        "name": "tamper-checksum",
        "purpose": "Compute a checksum of a record",
        "trigger": {"keywords": ["checksum"]},
        "required_tools": ["sha256"],
        "parameter_schema": {"type": "object", "properties": {"r": {"type": "string"}}},
        "procedure": "def run(params, tools):\n    return {'ok': True}\n",
        "examples": [{"params": {"r": "1"}}],
    }
    skill = call("POST", "skills", skill_body)
    second = {k: v for k, v in skill_body.items() if k != "name"}
    call("POST", f"skills/{skill['id']}/versions", {**second, "purpose": "Checksum, v2"})
    for n in range(rounds):
        said = call(
            "POST",
            "events",
            {
                "event_type": "user.said",
                "occurred_at": T0,
                "session_id": f"s-{n % 3}",
                "actor": "erase-me" if n % 5 == 0 else f"user-{n}",
                "source_type": "user_statement",
                "source_ref": f"chat://{n}",
                "payload": {"text": f"round {n}: the build is green", "n": n},
            },
        )
        tool = call(
            "POST",
            "events",
            {
                "event_type": "tool.called",
                "parent_event_id": said["id"],
                "source_type": "tool_result",
                "payload": {"tool": "ci", "args": {"job": n}},
            },
        )
        call(
            "POST",
            "events",
            {
                "event_type": "tool.called",
                "correction_of": tool["id"],
                "source_type": "tool_result",
                "payload": {"tool": "ci", "args": {"job": n, "retry": True}},
            },
        )
        entity = call("POST", "entities", {"name": f"Service {n}", "aliases": [f"svc-{n}"]})
        fact = call(
            "POST",
            "facts",
            {
                "subject": f"Service {n}",
                "predicate": "tamper.status",
                "value": "up",
                "valid_from": T0,
            },
        )
        if n % 2:
            call("POST", f"facts/{fact['fact']['id']}/correct", {"value": "degraded"})
        else:
            call("POST", f"facts/{fact['fact']['id']}/retract", {"reason": "wrong service"})
        call("POST", f"entities/{entity['id']}/aliases", {"alias": f"service-{n}-alias"})
        episode = call(
            "POST",
            "episodes",
            {"occurred_at": T0, "summary": f"Deployed service {n}", "session_id": f"s-{n % 3}"},
        )
        if n % 4 == 0:
            call("POST", f"episodes/{episode['id']}/retract", {"reason": "not deployed"})
        thread = call("POST", "threads", {"key": f"thread-{n}", "session_id": f"s-{n}"})
        call(
            "PUT", f"threads/{thread['id']}/state", {"state": {"goal": f"ship {n}"}, "based_on": 0}
        )
        if n % 3 == 0:
            call("POST", f"threads/{thread['id']}/handover", {"to_session": f"s-{n}-next"})
        intention = call(
            "POST", "intentions", {"description": f"check {n}", "trigger_type": "manual"}
        )
        call("POST", f"intentions/{intention['id']}/{'complete' if n % 2 else 'cancel'}", {})
        if n % 8 == 0:
            call(
                "POST",
                "sources/ingest",
                {"title": f"runbook {n}", "content": f"Runbook {n}.\n\nRestart the service."},
            )
    call("POST", "erasure", {"actor": "erase-me", "reason": "user asked"})
    for n in range(3):  # the chain goes on after the purge
        call("POST", "events", {"event_type": "note.added", "payload": {"note": n}})


# ---------------------------------------------------------------------- the attacks


@dataclass
class Ledger:
    """What the attacks aim at: agent A's chain, and a bystander B's."""

    a: object
    b: object
    events: dict[int, object]  # A's events by seq
    m: int  # a middle event: payload, scheme 2, not purged, nor its neighbours
    tail: int
    purged: int  # an event the erasure purged (it has a tombstone)
    purge_event_id: uuid.UUID

    def id(self, seq: int):
        return self.events[seq].pk

    def reload(self) -> None:
        from ledger.models import Event

        self.events = {e.seq: e for e in Event.objects.filter(agent=self.a).order_by("seq")}


@dataclass
class Expect:
    seq: int
    reason: str  # words the verifier's reason must hold
    agent: str = "a"


@dataclass
class Attack:
    name: str
    apply: Callable  # (cursor, Ledger) -> list[Expect]
    # Found only with an anchor kept outside the database, or not at all.
    limit: str = ""  # "anchor": found with --anchors only; "none": found by neither


@dataclass
class Outcome:
    attack: Attack
    expected: list[Expect]
    reports: dict[str, str]  # agent -> the verifier's line
    anchored: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)


def _forged(ledger: Ledger, *, seq: int, prev_hash: str, like: int):
    """A new event a forger computes correctly: valid payload hash and hash."""
    from ledger.hashing import event_hash, event_payload_hash, new_salt
    from ledger.models import Event

    model = ledger.events[like]
    event = Event(
        id=uuid.uuid4(),
        agent_id=ledger.a.pk,
        seq=seq,
        event_type="user.said",
        occurred_at=model.occurred_at,
        recorded_at=model.recorded_at,
        session_id="s-0",
        actor="forger",
        source_type=model.source_type,
        authority=model.authority,
        confidence=model.confidence,
        payload={"text": "the CFO approved the transfer"},
        payload_salt=new_salt(),
        hash_version=2,
        privacy_class=model.privacy_class,
        retention_class=model.retention_class,
        prev_hash=prev_hash,
    )
    event.payload_hash = event_payload_hash(event)
    event.hash = event_hash(event)
    return event


def _renumber_from(cur, ledger: Ledger, seq: int, by: int = 1) -> None:
    """Move A's events from `seq` on by `by` (through a free range: seq is unique)."""
    cur.execute(
        "UPDATE ledger_event SET seq = seq + %s WHERE agent_id = %s AND seq >= %s",
        [SHIFT, ledger.a.pk, seq],
    )
    cur.execute(
        "UPDATE ledger_event SET seq = seq - %s + %s WHERE agent_id = %s AND seq >= %s",
        [SHIFT, by, ledger.a.pk, SHIFT],
    )


def _head(cur, ledger: Ledger, seq: int, hash_: str) -> None:
    cur.execute(
        "UPDATE ledger_chainhead SET last_seq = %s, last_hash = %s WHERE agent_id = %s",
        [seq, hash_, ledger.a.pk],
    )


def _set(cur, ledger: Ledger, seq: int, assignment: str, params=()) -> None:
    cur.execute(f"UPDATE ledger_event SET {assignment} WHERE id = %s", [*params, ledger.id(seq)])


def _rehash_from(cur, ledger: Ledger, seq: int, payload: dict) -> None:
    """Edit seq's payload and recompute every hash from there on, head included."""
    from ledger.hashing import event_hash, event_payload_hash

    prev = ledger.events[seq - 1].hash
    for n in range(seq, ledger.tail + 1):
        event = ledger.events[n]
        event.prev_hash = prev
        if n == seq:
            event.payload = payload
            event.payload_hash = event_payload_hash(event)
        event.hash = event_hash(event)
        _set(
            cur,
            ledger,
            n,
            "payload = %s::jsonb, payload_hash = %s, prev_hash = %s, hash = %s",
            [_json(event.payload), event.payload_hash, event.prev_hash, event.hash],
        )
        prev = event.hash
    _head(cur, ledger, ledger.tail, prev)


def _json(value) -> str:
    import json

    return json.dumps(value)


def _insert(event) -> None:
    from ledger.models import Event

    Event.objects.bulk_create([event])


def payload_edited(cur, t: Ledger):
    _set(cur, t, t.m, "payload = jsonb_set(payload, '{tampered}', 'true')")
    return [Expect(t.m, "payload or labels do not match")]


def label_edited(cur, t: Ledger):
    _set(cur, t, t.m, "actor = 'the CFO'")
    return [Expect(t.m, "payload or labels do not match")]


def type_edited(cur, t: Ledger):
    _set(cur, t, t.m, "event_type = 'user.approved'")
    return [Expect(t.m, "hash does not match the event's fields")]


def record_time_moved(cur, t: Ledger):
    _set(cur, t, t.m, "recorded_at = recorded_at - interval '3 days'")
    return [Expect(t.m, "hash does not match the event's fields")]


def valid_time_moved(cur, t: Ledger):
    _set(cur, t, t.m, "occurred_at = occurred_at + interval '1 day'")
    return [Expect(t.m, "hash does not match the event's fields")]


def link_edited(cur, t: Ledger):
    _set(cur, t, t.m, "parent_event_id = %s", [t.id(1)])
    return [Expect(t.m, "hash does not match the event's fields")]


def deleted_middle(cur, t: Ledger):
    cur.execute("DELETE FROM ledger_event WHERE id = %s", [t.id(t.m)])
    return [Expect(t.m + 1, f"where {t.m} was expected")]


def deleted_tail(cur, t: Ledger):
    cur.execute("DELETE FROM ledger_event WHERE id = %s", [t.id(t.tail)])
    return [Expect(t.tail, "events removed")]


def deleted_tail_head_rewound(cur, t: Ledger):
    cur.execute("DELETE FROM ledger_event WHERE agent_id = %s AND seq > %s", [t.a.pk, t.tail - 3])
    _head(cur, t, t.tail - 3, t.events[t.tail - 3].hash)
    return [Expect(t.tail, "events removed, head rewound")]


def swapped(cur, t: Ledger):
    _set(cur, t, t.m, "seq = %s", [SHIFT])
    _set(cur, t, t.m + 1, "seq = %s", [t.m])
    _set(cur, t, t.m, "seq = %s", [t.m + 1])
    return [Expect(t.m, "prev_hash does not match")]


def renumbered(cur, t: Ledger):
    _renumber_from(cur, t, t.m)
    _head(cur, t, t.tail + 1, t.events[t.tail].hash)
    return [Expect(t.m + 1, f"where {t.m} was expected")]


def inserted_middle(cur, t: Ledger):
    _renumber_from(cur, t, t.m)
    _insert(_forged(t, seq=t.m, prev_hash=t.events[t.m - 1].hash, like=t.m))
    _head(cur, t, t.tail + 1, t.events[t.tail].hash)
    return [Expect(t.m, "this event was inserted")]


def inserted_past_head(cur, t: Ledger):
    _insert(_forged(t, seq=t.tail + 1, prev_hash=t.events[t.tail].hash, like=t.tail))
    return [Expect(t.tail + 1, "lies past the chain head")]


def forged_append(cur, t: Ledger):
    forged = _forged(t, seq=t.tail + 1, prev_hash=t.events[t.tail].hash, like=t.tail)
    _insert(forged)
    _head(cur, t, forged.seq, forged.hash)
    return []


def _rewrite_with_its_hash(cur, t: Ledger, index: int, payload: dict) -> None:
    """Rewrite one row's payload and recompute its own hashes (not the next row's)."""
    from ledger.hashing import event_hash, event_payload_hash

    event = t.events[index]
    event.payload = payload
    event.payload_hash = event_payload_hash(event)
    event.hash = event_hash(event)
    _set(
        cur,
        t,
        index,
        "payload = %s::jsonb, payload_hash = %s, hash = %s",
        [_json(event.payload), event.payload_hash, event.hash],
    )


def rehashed_one(cur, t: Ledger):
    _rewrite_with_its_hash(cur, t, t.m, {"text": "the CFO approved the transfer"})
    return [Expect(t.m, "this event was rewritten (its hash recomputed)")]


def rehashed_tail(cur, t: Ledger):
    _rewrite_with_its_hash(cur, t, t.tail, {"text": "nothing happened"})
    return [Expect(t.tail, "this event was rewritten (its hash recomputed)")]


def rehashed_from_middle(cur, t: Ledger):
    _rehash_from(cur, t, t.m, {"text": "the CFO approved the transfer"})
    return [Expect(t.tail, "hashes recomputed")]


def forged_tombstone(cur, t: Ledger):
    _set(
        cur,
        t,
        t.m,
        "payload = '{}'::jsonb, payload_salt = '', actor = '', session_id = '', "
        "source_ref = '', redacted_at = now()",
    )
    return [Expect(t.m, "marked redacted without a purge")]


def forged_tombstone_row(cur, t: Ledger):
    forged_tombstone(cur, t)
    cur.execute(
        "INSERT INTO ledger_tombstone (id, agent_id, event_id, reason, requested_by, "
        "purge_event_id, created_at) VALUES (%s, %s, %s, 'retention', '', %s, now())",
        [uuid.uuid4(), t.a.pk, t.id(t.m), t.purge_event_id],
    )
    return [Expect(t.m, "marked redacted without a purge")]


def tombstone_removed(cur, t: Ledger):
    cur.execute("DELETE FROM ledger_tombstone WHERE event_id = %s", [t.id(t.purged)])
    return [Expect(t.purged, "marked redacted without a purge")]


def moved_to_another_agent(cur, t: Ledger):
    _set(cur, t, t.m, "agent_id = %s", [t.b.pk])
    return [
        Expect(t.m + 1, f"where {t.m} was expected"),
        Expect(t.m, "lies past the chain head", agent="b"),
    ]


ATTACKS = [
    Attack("payload edited", payload_edited),
    Attack("label edited (actor)", label_edited),
    Attack("event type edited", type_edited),
    Attack("record time moved (3 days back)", record_time_moved),
    Attack("valid time moved (1 day on)", valid_time_moved),
    Attack("parent link pointed elsewhere", link_edited),
    Attack("row deleted (middle)", deleted_middle),
    Attack("row deleted (tail)", deleted_tail),
    Attack("two rows swapped", swapped),
    Attack("seqs renumbered from the middle, head moved", renumbered),
    Attack("row inserted (middle, valid hash, rest renumbered, head moved)", inserted_middle),
    Attack("row inserted past the head (valid hash)", inserted_past_head),
    Attack("payload edited and its hash recomputed (one row)", rehashed_one),
    Attack("last row edited and its hash recomputed", rehashed_tail),
    Attack("forged tombstone (payload emptied, no purge)", forged_tombstone),
    Attack("forged tombstone with a tombstone row naming a real purge", forged_tombstone_row),
    Attack("tombstone of a real purge deleted", tombstone_removed),
    Attack("agent_id of a row changed (moved to agent B)", moved_to_another_agent),
    Attack("last 3 rows deleted, head rewound", deleted_tail_head_rewound, limit="anchor"),
    Attack(
        "payload edited, every hash recomputed from there, head too",
        rehashed_from_middle,
        limit="anchor",
    ),
    Attack("forged append (valid hash, head moved)", forged_append, limit="none"),
]


# ----------------------------------------------------------------------- the run


def ledger_of(a, b) -> Ledger:
    from ledger.models import Event, Tombstone

    events = {e.seq: e for e in Event.objects.filter(agent=a).order_by("seq")}
    tail = max(events)

    def plain(seq: int) -> bool:
        e = events.get(seq)
        return e is not None and e.redacted_at is None and e.hash_version == 2 and bool(e.payload)

    m = next(
        s
        for s in range(tail // 2, tail - 2)
        if plain(s - 1) and plain(s) and plain(s + 1) and events[s].parent_event_id is None
    )
    tombstone = Tombstone.objects.filter(agent=a).select_related("event").order_by("event__seq")[0]
    assert Event.objects.filter(agent=b).count() < m, "B's chain must end before A's middle"
    return Ledger(a, b, events, m, tail, tombstone.event.seq, tombstone.purge_event_id)


class _Undo(Exception):
    pass


def _verify(agent, anchors: Path | None = None) -> str:
    from django.core.management import CommandError, call_command

    out = StringIO()
    args = ["--agent", str(agent.pk)] + (["--anchors", str(anchors)] if anchors else [])
    with contextlib.suppress(CommandError):  # a broken chain: the line says where
        call_command("ledger_verify", *args, stdout=out)
    return out.getvalue().strip()


def _check(expect: Expect, line: str) -> str | None:
    found = re.search(r"first break at seq (\d+)", line)
    if line.startswith("ok") or found is None:
        return f"not detected (agent {expect.agent}): {line}"
    if int(found.group(1)) != expect.seq or expect.reason not in line:
        return f"detected elsewhere (agent {expect.agent}): expected seq {expect.seq} '{expect.reason}', got: {line}"
    return None


def run_attack(attack: Attack, ledger: Ledger, anchors: Path) -> Outcome:
    """Apply one attack in a transaction, verify, roll it back."""
    from django.db import connection, transaction

    agents = {"a": ledger.a, "b": ledger.b}
    outcome = Outcome(attack, [], {})
    clean_anchors = anchors.read_text()
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SELECT set_config('session_replication_role', 'replica', true)")
                outcome.expected = attack.apply(cur, ledger)
                cur.execute("SELECT set_config('session_replication_role', 'origin', true)")
            started = time.perf_counter()
            outcome.reports = {k: _verify(agent) for k, agent in agents.items()}
            outcome.seconds = time.perf_counter() - started
            if attack.limit:
                outcome.anchored = {"a": _verify(ledger.a, anchors)}
                anchors.write_text(clean_anchors)  # the anchor of the clean chain, for the next
            raise _Undo
    except _Undo:
        pass
    finally:
        ledger.reload()  # some attacks edit the copies in memory
    if attack.limit == "none":
        if not all(line.startswith("ok") for line in outcome.reports.values()):
            outcome.violations.append(f"{attack.name}: now detected: update the table")
        return outcome
    if attack.limit == "anchor":
        if not outcome.reports["a"].startswith("ok"):
            outcome.violations.append(f"{attack.name}: found without an anchor: update the table")
        lines = outcome.anchored
    else:
        lines = outcome.reports
    for expect in outcome.expected:
        problem = _check(expect, lines[expect.agent])
        if problem:
            outcome.violations.append(f"{attack.name}: {problem}")
    return outcome


def attack_all(a, b) -> list[Outcome]:
    """Every attack, each on the pristine ledger of agents a and b."""
    ledger = ledger_of(a, b)
    with tempfile.TemporaryDirectory() as tmp:
        anchors = Path(tmp) / "anchors.json"
        clean = _verify(a, anchors)  # takes the anchor of the clean chain
        assert clean.startswith("ok"), clean
        return [run_attack(attack, ledger, anchors) for attack in ATTACKS]


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| attack | detected | where (ledger_verify) | verify time (A and B) |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        line = o.reports["a"]
        if o.attack.limit == "anchor":
            detected = "with `--anchors` only"
            line = o.anchored["a"]
        elif o.attack.limit == "none":
            detected = "**no** (indistinguishable from an append)"
        else:
            detected = "yes" if not o.violations else "**NO**"
        where = re.sub(r"^BROKEN +\S+: ", "", line)
        where = re.sub(r"^ok +\S+: (\d+) events$", r"reports ok (\1 events)", where)
        where = re.sub(r" \(event [0-9a-f-]+\)", "", where)
        if o.attack.name.startswith("agent_id"):
            where += "; agent B: " + re.sub(r"^BROKEN +\S+: ", "", o.reports["b"])
            where = re.sub(r" \(event [0-9a-f-]+\)", "", where)
        rows.append(f"| {o.attack.name} | {detected} | {where} | {o.seconds * 1000:.0f} ms |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=25, help="rounds of writes (~13 events each)")
    args = parser.parse_args()
    os.environ.setdefault("PIPER_DB_NAME", "piper_tamper")
    os.environ.setdefault("PIPER_CHAOS_QUEUE", "piper-tamper")
    os.environ.setdefault("PIPER_CACHE_PREFIX", "piper-tamper")
    import _stack

    note = _stack.fresh_database()
    _stack.setup_django()
    from rest_framework.test import APIClient

    from ledger.models import Event

    print(_stack.header("ledger tamper detection", None, note))
    clients = {}
    for name, rounds in (("a", args.rounds), ("b", 2)):
        agent, key = _stack.agent_with_key(f"tamper-{name}")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        started = time.monotonic()
        build(client, rounds)
        clients[name] = agent
        kinds = Event.objects.filter(agent=agent).values_list("event_type", flat=True)
        print(
            f"agent {name}: {len(kinds)} events of {len(set(kinds))} types "
            f"in {time.monotonic() - started:.0f} s"
        )
    print("types: " + ", ".join(sorted(set(Event.objects.values_list("event_type", flat=True)))))
    try:
        outcomes = attack_all(clients["a"], clients["b"])
    finally:
        _purge_queue()
    print(table(outcomes))
    violations = [v for o in outcomes for v in o.violations]
    found = sum(1 for o in outcomes if not o.violations and not o.attack.limit)
    print(
        f"\n{len(outcomes)} attacks: {found} found in the database alone, "
        f"{sum(o.attack.limit == 'anchor' for o in outcomes)} with an anchor only, "
        f"{sum(o.attack.limit == 'none' for o in outcomes)} not found by design"
    )
    return _stack.finish(violations, None)


def _purge_queue() -> None:
    from piper.celery import app

    with app.connection_for_write() as connection:
        connection.default_channel.queue_purge(os.environ["PIPER_CHAOS_QUEUE"])


if __name__ == "__main__":
    sys.exit(main())
