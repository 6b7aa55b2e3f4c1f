"""The only way anything writes to the ledger.

Other apps call `event_append` / `events_append` inside their own
transaction, so a projection row and the event that justifies it commit
together or not at all.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction

from piper import appends
from piper.canonical import sha256_hex
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.ids import uuid7
from piper.lookups import uuid_array
from piper.provenance import (
    DEFAULT_AUTHORITY_FOR_SOURCE,
    Authority,
    PrivacyClass,
    RetentionClass,
    SourceType,
)
from piper.tenancy.models import Agent

from . import hooks
from .hashing import HASH_VERSION, event_hash, event_payload_hash, new_salt
from .models import ChainHead, Event, Source, Tombstone

EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]*([.:/-][a-z0-9_]+)*$")
MAX_EVENT_TYPE = 100


@dataclass(frozen=True)
class EventDraft:
    """An event as a writer describes it; the ledger adds seq, times and hashes."""

    event_type: str
    payload: dict[str, Any] = field(default_factory=dict)
    occurred_at: datetime | None = None
    session_id: str = ""
    actor: str = ""
    # Unattributed claims get a low authority, so they never silently outrank
    # what a user, a tool or an operator said.
    source_type: str = SourceType.AGENT_INFERENCE
    source_ref: str = ""
    authority: str | None = None
    confidence: float = 1.0
    parent_event_id: uuid.UUID | None = None
    correction_of_id: uuid.UUID | None = None
    privacy_class: str = PrivacyClass.INTERNAL
    retention_class: str = RetentionClass.STANDARD


class _UnstorablePayload(ValueError):
    pass


MAX_PAYLOAD_DEPTH = 100


def _as_stored(value: Any, path: str = "payload", depth: int = 0) -> Any:
    """The payload as PostgreSQL's jsonb will give it back, so its hash survives a read.

    jsonb keeps numbers as exact decimals and prints them without exponents:
    the float 1e16 comes back as the integer 10000000000000000, and -0.0 as
    0.0. Hashing the value as written would make every such event look
    tampered with. jsonb also refuses NUL characters, and no JSON holds NaN,
    infinities or lone surrogates: those raise _UnstorablePayload, and so does
    nesting deeper than MAX_PAYLOAD_DEPTH (rather than a RecursionError).
    """
    if isinstance(value, dict | list) and depth >= MAX_PAYLOAD_DEPTH:
        raise _UnstorablePayload(f"{path}: nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    if isinstance(value, dict):
        return {
            _as_stored(k, path, depth): _as_stored(v, f"{path}.{k}", depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_as_stored(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _UnstorablePayload(f"{path}: numbers must be finite (no NaN or infinity)")
        if value == 0.0:
            return 0.0
        if abs(value) >= 1e16:  # Python writes these with an exponent; jsonb as integers
            return int(Decimal(repr(value)))
        return value
    if isinstance(value, str):
        if "\x00" in value:
            raise _UnstorablePayload(f"{path}: text must not contain NUL (\\u0000) characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _UnstorablePayload(
                f"{path}: text must be valid Unicode (no lone surrogates)"
            ) from None
    return value


def json_storage_error(value: Any, *, path: str, depth: int = 0) -> str | None:
    """Why the ledger could not store `value` faithfully (NaN, NUL, lone
    surrogates, nesting too deep), or None. For apps that validate a value
    before it becomes part of an event's payload; `depth` is how deep in that
    payload it will sit (a value under payload["state"] sits at depth 1)."""
    try:
        _as_stored(value, path, depth)
    except _UnstorablePayload as exc:
        return str(exc)
    return None


def _draft_errors(draft: EventDraft, stored: list) -> dict[str, list[str]]:
    """The draft's problems; its payload as jsonb will store it is appended to `stored`
    (converted once: it is most of the cost of checking a batch)."""
    errors: dict[str, list[str]] = {}
    if len(draft.event_type) > MAX_EVENT_TYPE or not EVENT_TYPE.fullmatch(draft.event_type):
        errors["event_type"] = [
            "use lower-case words joined by '.', ':', '/' or '-', e.g. 'tool.called' "
            f"(at most {MAX_EVENT_TYPE} characters)"
        ]
    if not isinstance(draft.payload, dict):
        errors["payload"] = ["must be a JSON object"]
    else:
        try:
            stored.append(_as_stored(draft.payload))
        except _UnstorablePayload as exc:
            errors["payload"] = [str(exc)]
    if draft.source_type not in SourceType.values:
        errors["source_type"] = [f"must be one of {SourceType.values}"]
    if draft.authority is not None and draft.authority not in Authority.values:
        errors["authority"] = [f"must be one of {Authority.values}"]
    if not 0.0 <= draft.confidence <= 1.0:
        errors["confidence"] = ["must be between 0 and 1"]
    if draft.privacy_class not in PrivacyClass.values:
        errors["privacy_class"] = [f"must be one of {PrivacyClass.values}"]
    if draft.retention_class not in RetentionClass.values:
        errors["retention_class"] = [f"must be one of {RetentionClass.values}"]
    if draft.occurred_at is not None and draft.occurred_at.tzinfo is None:
        errors["occurred_at"] = ["must carry a time zone, e.g. 2026-01-31T09:00:00Z"]
    return errors


def _check_drafts(*, agent: Agent, drafts: Sequence[EventDraft]) -> list[dict]:
    """Raise InvalidInput/Unprocessable before anything is written; return the payloads
    as they will be stored, in draft order."""
    stored: list[dict] = []
    errors = {str(i): e for i, d in enumerate(drafts) if (e := _draft_errors(d, stored))}
    if errors:
        index, fields = next(iter(errors.items()))
        name, messages = next(iter(fields.items()))
        prefix = f"event {index}: " if len(drafts) > 1 else ""
        raise InvalidInput(
            f"{prefix}{name}: {messages[0]}",
            details={"events": errors} if len(drafts) > 1 else fields,
        )
    references = {
        ref for d in drafts for ref in (d.parent_event_id, d.correction_of_id) if ref is not None
    }
    if references:
        # Another agent's event is indistinguishable from a missing one.
        known = set(
            Event.objects.filter(agent=agent, id__in=references).values_list("id", flat=True)
        )
        missing = sorted(str(r) for r in references - known)
        if missing:
            raise Unprocessable(
                f"referenced event {missing[0]} does not exist",
                code="unknown_event_reference",
                details={"missing_event_ids": missing},
            )
    return stored


def _lock_chain_head(agent: Agent) -> tuple[int, str, datetime]:
    """Lock the agent's chain tip (creating it on first use); return it with the record time.

    The record time is the database clock once the lock is granted (stamped
    into piper.record_time, which the insert trigger uses): a writer that
    waited for the lock records after the one it waited for, so record time
    never runs backwards along a chain.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH head AS (INSERT INTO {ChainHead._meta.db_table} AS h (agent_id, last_seq, last_hash) "
            "VALUES (%s, 0, %s) ON CONFLICT (agent_id) DO UPDATE SET last_seq = h.last_seq "
            "RETURNING last_seq, last_hash) "
            "SELECT last_seq, last_hash, "
            "set_config('piper.record_time', clock_timestamp()::text, true)::timestamptz FROM head",
            [agent.pk, ChainHead._meta.get_field("last_hash").default],
        )
        return cursor.fetchone()


def chain_lock(*, agent: Agent) -> None:
    """Hold the agent's chain until the caller's transaction ends: no append of
    this agent interleaves (an erasure holds it while it removes and purges)."""
    _lock_chain_head(agent)


def events_append(*, agent: Agent, drafts: Sequence[EventDraft]) -> list[Event]:
    """Append drafts to the agent's chain, atomically, in order.

    All or nothing: a bad draft raises InvalidInput (400) or Unprocessable
    (422, unknown referenced event) and writes nothing. Appends for one agent
    are serialised by a row lock on its chain head; different agents do not
    wait for each other. recorded_at is PostgreSQL's clock when the chain lock
    was granted.
    """
    if not drafts:
        return []
    payloads = _check_drafts(agent=agent, drafts=drafts)
    with transaction.atomic():
        last_seq, last_hash, recorded_at = _lock_chain_head(agent)
        events = []
        for draft, payload in zip(drafts, payloads, strict=True):
            last_seq += 1
            event = Event(
                agent_id=agent.pk,
                seq=last_seq,
                event_type=draft.event_type,
                occurred_at=draft.occurred_at or recorded_at,
                recorded_at=recorded_at,
                session_id=draft.session_id,
                actor=draft.actor,
                source_type=draft.source_type,
                source_ref=draft.source_ref,
                authority=draft.authority or DEFAULT_AUTHORITY_FOR_SOURCE[draft.source_type],
                confidence=float(draft.confidence),
                payload=payload,
                payload_salt=new_salt(),
                hash_version=HASH_VERSION,
                parent_event_id=draft.parent_event_id,
                correction_of_id=draft.correction_of_id,
                privacy_class=draft.privacy_class,
                retention_class=draft.retention_class,
                prev_hash=last_hash,
            )
            event.payload_hash = event_payload_hash(event)
            event.hash = last_hash = event_hash(event)
            events.append(event)
        Event.objects.bulk_create(events)
        appends.note(e.pk for e in events)
        committed = hooks.Committed(
            agent_id=agent.pk,
            first_seq=events[0].seq,
            last_seq=last_seq,
            events=tuple((e.pk, e.event_type) for e in events),
        )
        transaction.on_commit(lambda: hooks.notify(committed))
        ChainHead.objects.filter(agent_id=agent.pk).update(last_seq=last_seq, last_hash=last_hash)
    return events


def event_append(*, agent: Agent, event_type: str, **fields: Any) -> Event:
    """Append one event; keyword arguments are EventDraft's fields."""
    return events_append(agent=agent, drafts=[EventDraft(event_type=event_type, **fields)])[0]


PURGE_SETTING = "piper.ledger_purge"
EVENTS_REDACTED = "ledger.events_redacted"


@dataclass(frozen=True)
class Purge:
    """What events_redact did: the purge's own event (None when every asked
    event was purged already), and the events it purged now, in seq order."""

    purge_event_id: uuid.UUID | None
    purged: list[uuid.UUID]
    skipped: int  # asked, but purged before

    def tombstones(self) -> list[Tombstone]:
        return list(Tombstone.objects.filter(event_id__any=self.purged).order_by("event__seq"))


def events_redact(
    *,
    agent: Agent,
    event_ids: Sequence[uuid.UUID],
    reason: str,
    requested_by: str = "",
    legal_hold_lifted: str = "",
) -> Purge:
    """The one sanctioned change to stored events: the purge, for many at once.

    Each event's payload becomes {} and redacted_at is stamped, through a
    transaction-local setting the append-only trigger recognises. Events of
    hash scheme 2 also lose their labels (actor, session, source_ref) and the
    salt of their payload_hash; every hash is kept, so the chain still
    verifies, and without the salt the hash confirms no guess of the content.
    One 'ledger.events_redacted' event records the purge (ids, seqs, reason:
    no content) and each event gets a tombstone. Events already purged are
    skipped, so a retry is a no-op. A few statements whatever the count (a
    retention chunk purges thousands).

    Refused with Conflict (409, code 'legal_hold', nothing changed) when an
    event is under legal hold (retention class 'permanent'), unless
    `legal_hold_lifted` gives the operator's reason for lifting it. Another
    agent's event, or an unknown one, raises NotFound.
    """
    if not reason.strip():
        raise InvalidInput("a purge needs a reason", details={"reason": ["required"]})
    wanted = list(dict.fromkeys(event_ids))
    if not wanted:
        return Purge(None, [], 0)
    table = Event._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, seq, retention_class, redacted_at IS NOT NULL FROM {table} "
            "WHERE agent_id = %s AND id = ANY(%s::uuid[]) ORDER BY seq FOR UPDATE",
            [agent.pk, uuid_array(wanted)],
        )
        rows = cursor.fetchall()
        if len(rows) != len(wanted):
            missing = sorted({str(i) for i in wanted} - {str(row[0]) for row in rows})
            raise NotFound(f"event {missing[0]} not found", details={"missing_event_ids": missing})
        todo = [(pk, seq, retention) for pk, seq, retention, done in rows if not done]
        held = [str(pk) for pk, _, retention in todo if retention == RetentionClass.PERMANENT]
        if held and not legal_hold_lifted.strip():
            raise Conflict(
                f"{len(held)} event(s) are under legal hold (retention class 'permanent'); "
                "an operator must lift the hold, with a reason, to erase them",
                code="legal_hold",
                details={"held_event_ids": held[:100], "held": len(held)},
            )
        if not todo:
            return Purge(None, [], len(rows))
        ids = [pk for pk, _, _ in todo]
        cursor.execute("SELECT set_config(%s, 'on', true)", [PURGE_SETTING])
        cursor.execute(
            f"UPDATE {table} SET payload = '{{}}'::jsonb, "
            "redacted_at = now(), payload_salt = '', "
            "actor = CASE WHEN hash_version = 1 THEN actor ELSE '' END, "
            "session_id = CASE WHEN hash_version = 1 THEN session_id ELSE '' END, "
            "source_ref = CASE WHEN hash_version = 1 THEN source_ref ELSE '' END "
            "WHERE agent_id = %s AND id = ANY(%s::uuid[])",
            [agent.pk, uuid_array(ids)],
        )
        cursor.execute("SELECT set_config(%s, 'off', true)", [PURGE_SETTING])
        purge_payload: dict[str, Any] = {
            "event_ids": [str(i) for i in ids],
            "seqs": [seq for _, seq, _ in todo],
            "reason": reason,
        }
        if held:
            purge_payload["legal_hold_lifted"] = {"reason": legal_hold_lifted, "event_ids": held}
        purge_event = event_append(
            agent=agent,
            event_type=EVENTS_REDACTED,
            payload=purge_payload,
            actor=requested_by,
            source_type=SourceType.OPERATOR,
        )
        cursor.execute(
            f"INSERT INTO {Tombstone._meta.db_table} "
            "(id, agent_id, event_id, reason, requested_by, purge_event_id, created_at) "
            "SELECT t.id, %s, t.event_id, %s, %s, %s, now() "
            "FROM unnest(%s::uuid[], %s::uuid[]) AS t(id, event_id)",
            [
                agent.pk,
                reason,
                requested_by,
                purge_event.pk,
                uuid_array(uuid7() for _ in ids),
                uuid_array(ids),
            ],
        )
        return Purge(purge_event.pk, ids, len(rows) - len(ids))


def event_redact(
    *,
    agent: Agent,
    event_id: uuid.UUID,
    reason: str,
    requested_by: str = "",
    legal_hold_lifted: str = "",
) -> Tombstone:
    """events_redact for one event: its tombstone (the first one, on a retry)."""
    events_redact(
        agent=agent,
        event_ids=[event_id],
        reason=reason,
        requested_by=requested_by,
        legal_hold_lifted=legal_hold_lifted,
    )
    return Tombstone.objects.get(event_id=event_id)


def source_register(
    *,
    agent: Agent,
    title: str,
    uri: str = "",
    content: str = "",
    content_hash: str = "",
    media_type: str = "text/plain",
    actor: str = "",
    privacy_class: str = PrivacyClass.INTERNAL,
    retention_class: str = RetentionClass.STANDARD,
) -> tuple[Source, bool]:
    """Register a document as evidence. Idempotent per content: returns (source, created)."""
    if content:
        computed = sha256_hex(content)
        if content_hash and content_hash != computed:
            raise InvalidInput(
                "content_hash does not match the SHA-256 of content",
                details={"content_hash": [f"expected {computed}"]},
            )
        content_hash = computed
    if not re.fullmatch(r"[0-9a-f]{64}", content_hash or ""):
        raise InvalidInput(
            "send the document's content, or its content_hash as 64 lower-case hex characters",
            details={"content_hash": ["required when content is empty"]},
        )
    existing = Source.objects.filter(agent=agent, content_hash=content_hash).first()
    if existing:
        return existing, False
    try:
        with transaction.atomic():
            event = event_append(
                agent=agent,
                event_type="source.registered",
                payload={
                    "title": title,
                    "uri": uri,
                    "content_hash": content_hash,
                    "media_type": media_type,
                },
                actor=actor,
                source_type=SourceType.DOCUMENT,
                privacy_class=privacy_class,
                retention_class=retention_class,
                # An event's source_ref holds 500 characters, a source's uri 2,000; the
                # payload keeps the whole uri either way.
                source_ref=uri
                if len(uri) <= Event._meta.get_field("source_ref").max_length
                else "",
            )
            source = Source.objects.create(
                agent=agent,
                title=title,
                uri=uri,
                content=content,
                content_hash=content_hash,
                media_type=media_type,
                source_event=event,
            )
            return source, True
    except IntegrityError:
        # A concurrent registration of the same content won; its row is the answer.
        return Source.objects.get(agent=agent, content_hash=content_hash), False
