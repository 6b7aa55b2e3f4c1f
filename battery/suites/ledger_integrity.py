"""Suite L — ledger integrity: the evidence every other suite relies on.

Driven through the real API as an agent would. Only the tamper item acts
behind the API's back, because tampering is what it has to catch.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.utils.dateparse import parse_datetime

from ledger.hashing import LABELS, payload_hash
from ledger.models import Event
from ledger.selectors import chain_verify
from piper.provenance import Authority, PrivacyClass, RetentionClass, SourceType

from ..registry import ItemFailure, Suite, expect, expect_equal, register
from ..runner import ItemContext
from ..taxonomy import FailureCode as F
from ..transport import ApiClient, ApiResponse

EVENTS = "/api/v1/events"
HEX64 = re.compile(r"^[0-9a-f]{64}$")

suite = register(
    Suite(
        code="L",
        name="Ledger integrity",
        description=(
            "Append and read back, batch atomicity, idempotent retry, tamper detection and "
            "isolation between agents. An integrity gate: every item must pass; it carries no weight."
        ),
        weight=0,
        gate=1.0,
    )
)


# ----------------------------------------------------------------------------- helpers


def _expect_status(response: ApiResponse, status: int, *, code: F, what: str) -> None:
    if response.status != status:
        raise ItemFailure(code, f"{what}: expected HTTP {status}, got {response.describe()}")


def _list_all(client: ApiClient, query: str = "") -> list[dict[str, Any]]:
    """Every event the client's agent can list, following the cursor links."""
    response = client.get(f"{EVENTS}?limit=1000{'&' + query if query else ''}")
    events: list[dict[str, Any]] = []
    while True:
        _expect_status(response, 200, code=F.R2, what="GET /events")
        events.extend(response.body["results"])
        if not response.body.get("next"):
            return events
        response = client.follow(response.body["next"])


def _post(
    client: ApiClient, body: Any, *, what: str, headers: dict | None = None
) -> dict[str, Any]:
    response = client.post(EVENTS, body, headers=headers)
    _expect_status(response, 201, code=F.W0, what=what)
    return response.body


def _token(ctx: ItemContext) -> str:
    return f"{ctx.rng.getrandbits(64):016x}"


# ------------------------------------------------------------------------------- items


@suite.item(
    "append_read_back", "Append one event; read it back by id and in the list", default_code=F.W0
)
def append_read_back(ctx: ItemContext) -> dict[str, Any]:
    client, rng = ctx.client, ctx.rng
    before = _list_all(client)
    first = _post(
        client, {"event_type": "battery.ledger.anchor", "payload": {"n": 1}}, what="append anchor"
    )
    expect_equal(first["seq"], len(before) + 1, code=F.W0, what="anchor seq (events before + 1)")

    occurred = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**13))
    sent = {
        "event_type": "battery.ledger.round_trip",
        "payload": {
            "text": 'naïve café — 東京 ✓ "quoted" \\ back',
            "number": rng.randrange(-(10**12), 10**12),
            "fraction": 0.25,
            "flags": [True, False, None],
            "nested": {"list": [1, "two", {"three": 3}], "empty": {}},
            "token": _token(ctx),
        },
        "occurred_at": occurred.isoformat().replace("+00:00", "Z"),
        "session_id": f"battery-session-{_token(ctx)}",
        "actor": "battery-reference-agent",
        "source_type": rng.choice([SourceType.TOOL_RESULT, SourceType.USER_STATEMENT]).value,
        "source_ref": f"tool-call-{_token(ctx)}",
        "authority": rng.choice([Authority.TOOL_RESULT, Authority.SYSTEM_OBSERVATION]).value,
        "confidence": rng.choice([0.125, 0.5, 0.75]),
        "parent_event_id": first["id"],
        "correction_of": first["id"],
        "privacy_class": PrivacyClass.PERSONAL.value,
        "retention_class": RetentionClass.LONG_TERM.value,
    }
    stored = _post(client, sent, what="append event")

    for name, value in sent.items():
        got = stored.get(name)
        if name == "occurred_at":
            expect_equal(parse_datetime(got or ""), occurred, code=F.W0, what="stored occurred_at")
        else:
            expect_equal(got, value, code=F.W0, what=f"stored {name}")
    expect_equal(stored["seq"], first["seq"] + 1, code=F.W0, what="seq after the anchor")
    expect_equal(
        stored["prev_hash"], first["hash"], code=F.W0, what="prev_hash (the anchor's hash)"
    )
    # A client checks the payload it sent against the answer's payload_hash and salt.
    expect_equal(
        stored["payload_hash"],
        payload_hash(
            sent["payload"],
            salt=stored.get("payload_salt") or "",
            labels={name: sent[name] for name in LABELS},
        ),
        code=F.W0,
        what="payload_hash",
    )
    expect(
        bool(HEX64.match(stored.get("hash") or "")),
        F.W0,
        f"hash is not 64 hex digits: {stored.get('hash')!r}",
    )
    expect(stored["hash"] != stored["prev_hash"], F.W0, "hash equals prev_hash")
    expect(
        parse_datetime(stored.get("recorded_at") or "") is not None,
        F.W0,
        f"recorded_at missing or unparseable: {stored.get('recorded_at')!r}",
    )
    expect_equal(stored["redacted"], False, code=F.W0, what="redacted")

    by_id = client.get(f"{EVENTS}/{stored['id']}")
    _expect_status(by_id, 200, code=F.R2, what="GET /events/{id}")
    expect_equal(by_id.body, stored, code=F.R2, what="event read back by id")

    listed = _list_all(client)
    expect_equal(len(listed), len(before) + 2, code=F.W0, what="events listed after two appends")
    in_list = [event for event in listed if event["id"] == stored["id"]]
    expect_equal(in_list, [stored], code=F.R2, what="the event as listed")
    return {"seq": stored["seq"], "fields_checked": len(sent)}


INVALID_VARIANTS: Sequence[tuple[str, Any]] = (
    ("event_type", "Not A Valid Type"),
    ("confidence", 1.5),
    ("occurred_at", "last tuesday"),
    ("source_type", "rumour"),
    ("colour", "blue"),  # unknown field
)


@suite.item("batch_atomic", "A batch is appended whole, or not at all", default_code=F.W0)
def batch_atomic(ctx: ItemContext) -> dict[str, Any]:
    client, rng = ctx.client, ctx.rng
    before = _list_all(client)
    size = rng.randint(5, 25)
    batch = [
        {"event_type": "battery.ledger.batch", "payload": {"i": i, "token": _token(ctx)}}
        for i in range(size)
    ]
    body = _post(client, {"events": batch}, what="append a valid batch")
    expect_equal(body.get("count"), size, code=F.W0, what="batch count")
    seqs = [receipt["seq"] for receipt in body["events"]]
    expect_equal(
        seqs, list(range(len(before) + 1, len(before) + size + 1)), code=F.W0, what="batch seqs"
    )

    after = _list_all(client)
    expect_equal(len(after), len(before) + size, code=F.W0, what="events listed after the batch")
    appended = after[len(before) :]
    expect_equal(
        [e["id"] for e in appended],
        [r["id"] for r in body["events"]],
        code=F.R2,
        what="listed ids of the batch, in order",
    )
    expect_equal(
        [e["payload"] for e in appended],
        [b["payload"] for b in batch],
        code=F.W0,
        what="payloads of the batch, in order",
    )
    previous = before[-1]["hash"] if before else "0" * 64
    for event in appended:
        expect_equal(
            event["prev_hash"], previous, code=F.W0, what=f"prev_hash of seq {event['seq']}"
        )
        previous = event["hash"]

    bad_size = rng.randint(3, 9)
    bad_index = rng.randrange(1, bad_size - 1)  # strictly inside: valid events on both sides
    field, value = rng.choice(INVALID_VARIANTS)
    bad_batch = [
        {"event_type": "battery.ledger.doomed", "payload": {"i": i}} for i in range(bad_size)
    ]
    bad_batch[bad_index] = {**bad_batch[bad_index], field: value}
    refused = client.post(EVENTS, {"events": bad_batch})
    _expect_status(
        refused, 400, code=F.W0, what=f"batch with {field}={value!r} at index {bad_index}"
    )
    expect_equal(refused.error_code(), "invalid", code=F.W0, what="error code of the refused batch")
    flagged = sorted(refused.body["error"]["details"].get("events", {}))
    expect_equal(flagged, [str(bad_index)], code=F.W0, what="indexes the refusal names")
    unchanged = _list_all(client)
    expect_equal(
        [e["id"] for e in unchanged],
        [e["id"] for e in after],
        code=F.W0,
        what="ledger after a refused batch (must be unchanged)",
    )

    # The refused batch must not have consumed sequence numbers either.
    probe = _post(
        client, {"event_type": "battery.ledger.probe"}, what="append after the refused batch"
    )
    expect_equal(probe["seq"], len(after) + 1, code=F.W0, what="seq after the refused batch")
    return {
        "batch_size": size,
        "refused_size": bad_size,
        "invalid_field": field,
        "invalid_index": bad_index,
    }


@suite.item(
    "idempotent_retry", "A retried write with its Idempotency-Key writes once", default_code=F.W0
)
def idempotent_retry(ctx: ItemContext) -> dict[str, Any]:
    client = ctx.client
    key = f"battery-{ctx.run_id.hex[:12]}-{_token(ctx)}"
    body = {
        "event_type": "battery.ledger.idempotent",
        "payload": {"attempt": "first", "token": _token(ctx)},
    }
    headers = {"Idempotency-Key": key}
    before = _list_all(client)

    first = client.post(EVENTS, body, headers=headers)
    _expect_status(first, 201, code=F.W0, what="first write")
    expect_equal(
        first.headers.get("Idempotent-Replayed"),
        None,
        code=F.W0,
        what="Idempotent-Replayed header on the first write",
    )
    retry = client.post(EVENTS, body, headers=headers)
    _expect_status(retry, 201, code=F.W0, what="retry with the same key and body")
    expect_equal(retry.body, first.body, code=F.W0, what="answer to the retry")
    expect_equal(
        retry.headers.get("Idempotent-Replayed"),
        "true",
        code=F.W0,
        what="Idempotent-Replayed header on the retry",
    )
    after = _list_all(client)
    expect_equal(
        [e["id"] for e in after[len(before) :]],
        [first.body["id"]],
        code=F.W0,
        what="events written by a write and its retry",
    )

    changed = {**body, "payload": {**body["payload"], "attempt": "second"}}
    reused = client.post(EVENTS, changed, headers=headers)
    _expect_status(reused, 422, code=F.W0, what="same key, different body")
    expect_equal(reused.error_code(), "idempotency_key_reused", code=F.W0, what="error code")
    expect_equal(
        len(_list_all(client)), len(after), code=F.W0, what="events after the refused reuse"
    )
    return {"events_written": len(after) - len(before)}


def _payload_overwrite(*, event_id: str, payload: dict[str, Any]) -> int:
    """Rewrite a stored payload behind the append-only trigger, as an attacker with
    database access would. The replica role skips triggers for this transaction
    only; if anything fails, the rollback restores the role with it."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('session_replication_role', 'replica', true)")
        cursor.execute(
            f"UPDATE {Event._meta.db_table} SET payload = %s::jsonb WHERE id = %s",
            [json.dumps(payload), event_id],
        )
        changed = cursor.rowcount
        cursor.execute("SELECT set_config('session_replication_role', 'origin', true)")
    return changed


class _Undo(Exception):
    pass


def _refusal(sql: str, params: list[Any]) -> str | None:
    """The database's refusal of a statement, or None if it was accepted.

    Runs in a savepoint that is always rolled back, so an accepted statement
    changes nothing and a refused one does not poison the transaction.
    """
    try:
        with transaction.atomic(), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
            raise _Undo
    except _Undo:
        return None
    except DatabaseError as exc:
        return str(exc).strip()


def _ledger_verify(agent_name: str) -> tuple[bool, str]:
    """Run `ledger_verify --agent NAME`: (raised CommandError, what it printed)."""
    out = io.StringIO()
    try:
        call_command("ledger_verify", "--agent", agent_name, stdout=out)
    except CommandError:
        return True, out.getvalue()
    return False, out.getvalue()


@suite.item(
    "tamper_detected",
    "A payload altered behind the trigger is caught at its seq",
    default_code=F.I0,
)
def tamper_detected(ctx: ItemContext) -> dict[str, Any]:
    rng = ctx.rng
    client = ctx.new_client()  # its own chain, so the first break can only be ours
    agent = client.agent
    size = rng.randint(4, 9)
    receipts = _post(
        client,
        {
            "events": [
                {"event_type": "battery.ledger.evidence", "payload": {"i": i, "token": _token(ctx)}}
                for i in range(size)
            ]
        },
        what="append evidence",
    )["events"]
    expect(chain_verify(agent=agent).ok, F.I0, "the chain was already broken before tampering")

    target = receipts[rng.randrange(1, size - 1)]
    original = client.get(f"{EVENTS}/{target['id']}")
    _expect_status(original, 200, code=F.R2, what="read the event to tamper with")
    forged = {**original.body["payload"], "token": "forged"}

    expect_equal(
        _payload_overwrite(event_id=target["id"], payload=forged),
        1,
        code=F.I0,
        what="rows altered behind the trigger",
    )
    try:
        seen = client.get(f"{EVENTS}/{target['id']}").body
        expect_equal(
            seen["payload"],
            forged,
            code=F.I0,
            what="payload after tampering (the tamper must land)",
        )
        report = chain_verify(agent=agent)
        brk = report.first_break
        expect(
            brk is not None, F.I0, f"chain_verify missed the altered payload at seq {target['seq']}"
        )
        expect_equal(
            (brk.seq, brk.event_id),
            (target["seq"], target["id"]),
            code=F.I0,
            what="first break chain_verify reports",
        )
        raised, output = _ledger_verify(agent.name)
        expect(raised, F.I0, f"ledger_verify --agent {agent.name} did not fail: {output!r}")
        expected_line = f"first break at seq {target['seq']} (event {target['id']})"
        expect(
            expected_line in output,
            F.I0,
            f"ledger_verify printed {output!r}, not {expected_line!r}",
        )
    finally:
        _payload_overwrite(event_id=target["id"], payload=original.body["payload"])

    restored = chain_verify(agent=agent)
    expect(restored.ok, F.I0, f"the chain does not verify after restoring: {restored.first_break}")
    expect_equal(restored.events_checked, size, code=F.I0, what="events verified after restoring")
    raised, output = _ledger_verify(agent.name)
    expect(not raised, F.I0, f"ledger_verify still fails after restoring: {output!r}")

    table = Event._meta.db_table
    for verb, sql in (
        ("UPDATE", f"UPDATE {table} SET actor = 'mallory' WHERE id = %s"),
        ("DELETE", f"DELETE FROM {table} WHERE id = %s"),
    ):
        refusal = _refusal(sql, [target["id"]])
        expect(refusal is not None, F.I0, f"a plain SQL {verb} of a ledger event was accepted")
        expect(
            "append-only" in refusal,
            F.I0,
            f"{verb} refused, but not by the append-only trigger: {refusal}",
        )
    expect(chain_verify(agent=agent).ok, F.I0, "the chain broke after the refused UPDATE/DELETE")
    return {"events": size, "tampered_seq": target["seq"]}


@suite.item(
    "isolation",
    "Another agent's key cannot see, count or reference this agent's events",
    default_code=F.R3,
)
def isolation(ctx: ItemContext) -> dict[str, Any]:
    a, rng = ctx.client, ctx.rng
    secret = _token(ctx)
    a_event = _post(
        a,
        {"event_type": "battery.ledger.private", "payload": {"secret": secret}},
        what="agent A appends",
    )
    b = ctx.new_client()
    b_size = rng.randint(2, 5)
    b_receipts = _post(
        b,
        {
            "events": [
                {"event_type": "battery.ledger.own", "payload": {"i": i}} for i in range(b_size)
            ]
        },
        what="agent B appends",
    )["events"]
    b_ids = [receipt["id"] for receipt in b_receipts]

    peek = b.get(f"{EVENTS}/{a_event['id']}")
    _expect_status(peek, 404, code=F.R3, what="agent B reading agent A's event")
    expect_equal(peek.error_code(), "not_found", code=F.R3, what="error code of B's read")
    expect(secret not in peek.text, F.R3, "B's 404 leaks A's payload")

    b_list = _list_all(b)
    expect_equal([e["id"] for e in b_list], b_ids, code=F.R3, what="B's list (its own events only)")
    expect_equal(
        _list_all(b, "event_type=battery.ledger.private"),
        [],
        code=F.R3,
        what="B's list filtered by A's event type",
    )
    a_ids = {e["id"] for e in _list_all(a)}
    expect(a_event["id"] in a_ids, F.R2, "A cannot list its own event")
    expect(not a_ids & set(b_ids), F.R3, "A's list includes B's events")

    for field in ("parent_event_id", "correction_of"):
        refused = b.post(EVENTS, {"event_type": "battery.ledger.child", field: a_event["id"]})
        _expect_status(refused, 422, code=F.R3, what=f"B citing A's event as {field}")
        expect_equal(refused.error_code(), "unknown_event_reference", code=F.R3, what="error code")
    expect_equal(
        len(_list_all(b)), b_size, code=F.R3, what="B's event count after the refused references"
    )
    return {"b_events": b_size}
