"""Erasure: a set of ledger events, and everything made from them, removed for good.

The deletion contract (DESIGN §1): history is append-only by default; an
explicit request or policy may erase, and then nothing regenerates the data.
One erasure, in one transaction holding the agent's chain:

1. The selector names events (by id, document, actor, subject, session or a
   time window); the events that cannot outlive them are added (a document's
   chunking, the claims about an erased entity, corrections of an erased event…).
2. Each memory app removes what those events made, and rewrites what merely
   quoted them (facts, episodes, skills, intentions, recall's traces), in
   dependency order; stored API answers that carry them are dropped.
3. The ledger purges the events to tombstones (ledger.services.events_redact).

After commit, caches are invalidated and the residue check searches every
projection for what must be gone; the receipt records counts, ids and the
check's findings — never the erased content. A dry run does all of it and
rolls back, so what it lists is exactly what would go.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, TextField, UUIDField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from consolidation import erasure as consolidation_erasure
from episodes import erasure as episodes_erasure
from facts import erasure as facts_erasure
from facts.selectors import entity_resolve
from intentions.services import erasure as intentions_erasure
from ledger.erasure import ErasureScope, finding, payload_strings
from ledger.models import Event, Source, Tombstone
from ledger.services import chain_lock, events_redact
from piper.api.services import idempotency_records_erase
from piper.errors import Conflict, InvalidInput, NotFound
from piper.lookups import uuid_array
from piper.provenance import RetentionClass
from piper.tenancy.models import Agent
from recall import erasure as recall_erasure
from skills.services import erasure as skills_erasure

from ..models import Erasure, ErasureKind, ErasureStatus
from . import caches

# Receipts list at most this many ids per projection (counts are exact).
MAX_LISTED = 1000
# The purge records are the audit trail of erasure itself: never selected.
AUDIT_EVENT_TYPES = ("ledger.events_redacted", "ledger.event_redacted")
MAX_EVENT_IDS = 10_000
MAX_PAYLOADS_READ = 500
MAX_TEXT_CHARS = 300

# The memory apps, in the order they erase (an app may need what one before
# it removed: skills cut erased episodes out of their provenance, recall
# drops traces naming any erased row).
ERASERS = (
    facts_erasure,
    episodes_erasure,
    skills_erasure,
    intentions_erasure,
    consolidation_erasure,
    recall_erasure,
)
EXPANDERS = (
    facts_erasure.expand,
    episodes_erasure.expand,
    skills_erasure.expand,
    consolidation_erasure.expand,
)


@dataclass(frozen=True)
class Selector:
    """What to erase. Every criterion given must hold (they combine with AND)."""

    event_ids: tuple[uuid.UUID, ...] = ()
    source_id: uuid.UUID | None = None
    actor: str | None = None
    subject: str | None = None  # an entity's id or any of its names
    session_id: str | None = None
    occurred_after: datetime | None = None  # inclusive
    occurred_before: datetime | None = None  # exclusive

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.event_ids:
            out["event_ids"] = [str(i) for i in self.event_ids]
        for name in ("source_id", "actor", "subject", "session_id"):
            if (value := getattr(self, name)) is not None:
                out[name] = str(value)
        for name in ("occurred_after", "occurred_before"):
            if (value := getattr(self, name)) is not None:
                out[name] = value.isoformat()
        return out

    @property
    def empty(self) -> bool:
        return not self.as_dict()


@dataclass
class ErasureResult:
    """What an erasure did (or, dry, would do)."""

    receipt: Erasure | None  # None for a dry run
    dry_run: bool
    event_ids: list[uuid.UUID]
    counts: dict[str, int]
    removed: dict[str, list[str]]
    residue: list[dict] = field(default_factory=list)
    scope: ErasureScope | None = field(default=None, repr=False)  # in memory only


class _DryRun(Exception):
    def __init__(self, result: ErasureResult):
        self.result = result


def _check_selector(agent: Agent, selector: Selector) -> None:
    if selector.empty:
        raise InvalidInput(
            "say what to erase: event_ids, source_id, actor, subject, session_id, or a time "
            "window (occurred_after / occurred_before)",
            code="empty_selector",
            details={"selector": ["at least one criterion is required"]},
        )
    if len(selector.event_ids) > MAX_EVENT_IDS:
        raise InvalidInput(
            f"at most {MAX_EVENT_IDS:,} event ids per erasure; split the request",
            details={"event_ids": [f"{len(selector.event_ids)} sent"]},
        )
    for name in ("actor", "subject", "session_id"):
        value = getattr(selector, name)
        if value is not None and not value.strip():
            raise InvalidInput(f"{name} must not be blank", details={name: ["blank"]})
    after, before = selector.occurred_after, selector.occurred_before
    for name, value in (("occurred_after", after), ("occurred_before", before)):
        if value is not None and value.tzinfo is None:
            raise InvalidInput(
                f"{name} must carry a time zone, e.g. 2026-01-31T09:00:00Z",
                details={name: ["no time zone"]},
            )
    if after is not None and before is not None and before <= after:
        raise InvalidInput(
            "the time window ends before it starts: occurred_before must be later than "
            "occurred_after",
            code="empty_window",
            details={"occurred_before": ["not after occurred_after"]},
        )
    if selector.event_ids:
        # Another agent's event is indistinguishable from a missing one.
        known = set(
            Event.objects.filter(agent=agent, pk__any=selector.event_ids)
            .order_by()
            .values_list("pk", flat=True)
        )
        missing = sorted(str(i) for i in set(selector.event_ids) - known)
        if missing:
            raise NotFound(
                f"event {missing[0]} not found", details={"missing_event_ids": missing[:100]}
            )
    if (
        selector.source_id is not None
        and not Source.objects.filter(agent=agent, pk=selector.source_id).exists()
    ):
        raise NotFound(f"source {selector.source_id} not found")


def events_selected(*, agent: Agent, selector: Selector) -> set[uuid.UUID]:
    """The agent's not yet erased events the selector names (raises NotFound for
    an unknown subject). The purge records themselves are never selected."""
    events = Event.objects.filter(agent=agent, redacted_at__isnull=True).exclude(
        event_type__in=AUDIT_EVENT_TYPES
    )
    if selector.event_ids:
        events = events.filter(pk__any=selector.event_ids)
    if selector.actor is not None:
        events = events.filter(actor=selector.actor)
    if selector.session_id is not None:
        events = events.filter(session_id=selector.session_id)
    if selector.occurred_after is not None:
        events = events.filter(occurred_at__gte=selector.occurred_after)
    if selector.occurred_before is not None:
        events = events.filter(occurred_at__lt=selector.occurred_before)
    if selector.source_id is not None:
        events = events.filter(
            pk__any=episodes_erasure.events_of_sources(agent=agent, source_ids=[selector.source_id])
        )
    if selector.subject is not None:
        entity = entity_resolve(agent=agent, ref=selector.subject)
        names = [entity.name, *entity.aliases.values_list("alias", flat=True)]
        about = facts_erasure.events_about(agent=agent, entity=entity)
        about |= episodes_erasure.events_naming(agent=agent, names=names)
        events = events.filter(pk__any=about)
    return set(events.values_list("pk", flat=True))


def _stage(ids: set[uuid.UUID]) -> RawSQL:
    """`ids` in a temporary table of this transaction, as a subquery (sent once,
    not with every statement that looks them up)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS erasure_closure (id uuid PRIMARY KEY) ON COMMIT DROP"
        )
        cursor.execute("DELETE FROM erasure_closure")
        cursor.execute("INSERT INTO erasure_closure SELECT unnest(%s::uuid[])", [uuid_array(ids)])
    return RawSQL("SELECT id FROM erasure_closure", ())


def with_dependents(agent: Agent, event_ids: set[uuid.UUID]) -> set[uuid.UUID]:
    """`event_ids` and every event that cannot outlive them, to a fixed point:
    what the memory apps say must go along, and corrections of an erased event."""
    erased = set(event_ids)
    new = set(event_ids)
    while new:
        staged = _stage(new)
        more = set(
            Event.objects.filter(agent=agent, correction_of_id__in=staged)
            .order_by()
            .values_list("pk", flat=True)
        )
        for expand in EXPANDERS:
            more |= expand(agent=agent, event_ids=new, staged=staged)
        new = {
            e
            for e in Event.objects.filter(
                agent=agent, pk__any=list(more - erased), redacted_at__isnull=True
            )
            .exclude(event_type__in=AUDIT_EVENT_TYPES)
            .order_by()
            .values_list("pk", flat=True)
        }
        erased |= new
    return erased


def erasure_run(
    *,
    agent: Agent,
    selector: Selector,
    reason: str,
    requested_by: str,
    kind: str = ErasureKind.REQUEST,
    legal_hold_lifted: str = "",
    dry_run: bool = False,
    event_ids: Sequence[uuid.UUID] | None = None,
    described_as: dict | None = None,
    closed: bool = False,
) -> ErasureResult:
    """Erase what `selector` names (or exactly `event_ids`, for the retention
    sweep, which `described_as` says how it chose; `closed` when they already
    hold every event that must go with them), with everything made from it,
    and return the receipt.

    Bad input raises InvalidInput (400: no criterion, an empty window, no
    reason) or NotFound (404: another agent's or an unknown event, source or
    subject) before anything is touched. Events under legal hold refuse the
    whole erasure with Conflict (409 legal_hold) unless `legal_hold_lifted`
    gives the operator's reason. Idempotent: erasing what is already erased
    finds nothing more to do (a receipt with 0 events).
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("an erasure needs a reason", details={"reason": ["required"]})
    if len(reason) > MAX_TEXT_CHARS or len(legal_hold_lifted) > MAX_TEXT_CHARS:
        raise InvalidInput(
            f"reason and legal_hold_lifted: at most {MAX_TEXT_CHARS} characters",
            details={"reason": [f"at most {MAX_TEXT_CHARS} characters"]},
        )
    if event_ids is None:
        _check_selector(agent, selector)
    started = time.perf_counter()
    try:
        with transaction.atomic():
            result = _erase(
                agent=agent,
                selector=selector,
                reason=reason,
                requested_by=requested_by,
                kind=kind,
                legal_hold_lifted=legal_hold_lifted,
                dry_run=dry_run,
                event_ids=event_ids,
                described_as=described_as,
                closed=closed,
                started=started,
            )
    except _DryRun as dry:
        return dry.result
    result.residue = residue_check(result.scope)
    found = sum(f["found"] for f in result.residue)
    receipt = result.receipt
    receipt.residue, receipt.residue_found = result.residue, found
    receipt.status = ErasureStatus.COMPLETED if found == 0 else ErasureStatus.RESIDUE_FOUND
    receipt.duration_ms = (time.perf_counter() - started) * 1000
    receipt.save(update_fields=["residue", "residue_found", "status", "duration_ms"])
    return result


def _erase(
    *,
    agent: Agent,
    selector: Selector,
    reason: str,
    requested_by: str,
    kind: str,
    legal_hold_lifted: str,
    dry_run: bool,
    event_ids: Sequence[uuid.UUID] | None,
    described_as: dict | None,
    closed: bool,
    started: float,
) -> ErasureResult:
    chain_lock(agent=agent)
    chosen = (
        set(event_ids) if event_ids is not None else events_selected(agent=agent, selector=selector)
    )
    erased = chosen if closed else with_dependents(agent, chosen)
    scope = ErasureScope(agent=agent, event_ids=erased)
    scope.stage_events()
    held = Event.objects.filter(
        agent=agent, pk__in=scope.erased_events(), retention_class=RetentionClass.PERMANENT
    )
    if not legal_hold_lifted.strip() and held.exists():
        held_ids = [str(i) for i in held.values_list("pk", flat=True)[:100]]
        raise Conflict(
            f"{held.count()} event(s) are under legal hold (retention class 'permanent'); "
            "an operator must lift the hold, with a reason (legal_hold_lifted), to erase them",
            code="legal_hold",
            details={"held_event_ids": held_ids},
        )
    # The residue check searches for the longest erased strings: those of
    # the first MAX_PAYLOADS_READ erased events are plenty to choose from.
    scope.add_texts(
        text
        for payload in Event.objects.filter(pk__in=scope.erased_events())
        .order_by()
        .values_list("payload", flat=True)[:MAX_PAYLOADS_READ]
        for text in payload_strings(payload)
    )
    for app in ERASERS:
        app.erase(scope)
    idempotent = idempotency_records_erase(agent_id=agent.pk, event_ids=scope.erased_events())
    purged = scope.event_ids - scope.own_event_ids
    purge = events_redact(
        agent=agent,
        event_ids=sorted(purged, key=str),
        reason=reason,
        requested_by=requested_by,
        legal_hold_lifted=legal_hold_lifted,
    )
    counts = {name: len(ids) for name, ids in scope.removed.items() if ids}
    if idempotent:
        counts["idempotency_records"] = idempotent
    result = ErasureResult(
        receipt=None,
        dry_run=dry_run,
        event_ids=sorted(purged, key=str),
        counts={"ledger_events": len(purged), **counts},
        removed={
            name: [str(i) for i in ids[:MAX_LISTED]] for name, ids in scope.removed.items() if ids
        },
    )
    if dry_run:
        raise _DryRun(result)
    result.receipt = Erasure.objects.create(
        agent=agent,
        agent_ref=agent.pk,
        agent_name=agent.name,
        kind=kind,
        selector=selector.as_dict()
        if event_ids is None
        else (described_as or {"events": len(event_ids)}),
        reason=reason,
        requested_by=requested_by,
        legal_hold_lifted=legal_hold_lifted,
        events=len(purged),
        counts=result.counts,
        removed={
            "ledger_events": [str(i) for i in result.event_ids[:MAX_LISTED]],
            **result.removed,
        },
        status=ErasureStatus.RESIDUE_FOUND,  # until the check after commit says otherwise
        purge_event_id=purge.purge_event_id,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
    result.scope = scope
    # Now, so this process's residue check sees clean caches; and again after
    # commit, in case another process refilled its cache meanwhile from the
    # state before the erasure.
    caches.erased(agent_id=agent.pk)
    transaction.on_commit(lambda: caches.erased(agent_id=agent.pk))
    return result


def residue_check(scope: ErasureScope) -> list[dict]:
    """Search every projection, and the ledger, for what the erasure removed:
    rows made from erased events, links to erased rows, copies of erased
    vectors, erased words in rows that only quote. Each finding: projection,
    check, found (0 when clean), a sample of ids; 'kept_elsewhere' counts
    matches in rows made from surviving evidence of their own."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Searches through the vector index filter by agent: keep walking
            # the graph until enough of the agent's rows are found.
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        scope.stage_events()
        findings = _ledger_residue(scope)
        for app in ERASERS:
            findings += app.residue(scope)
        findings += _idempotency_residue(scope)
        findings += caches.residue(agent_id=scope.agent.pk, scope=scope)
    return findings


def _ledger_residue(scope: ErasureScope) -> list[dict]:
    staged = scope.erased_events()
    left = Event.objects.filter(agent=scope.agent, pk__in=staged).filter(
        Q(redacted_at__isnull=True)
        | ~Q(payload={})
        | ~Q(payload_salt="")
        | (Q(hash_version=2) & (~Q(actor="") | ~Q(session_id="") | ~Q(source_ref="")))
    )
    untombstoned = Event.objects.filter(agent=scope.agent, pk__in=staged).exclude(
        Exists(Tombstone.objects.filter(event_id=OuterRef("pk")))
    )
    copies = Event.objects.filter(agent=scope.agent, pk__any=list(scope.own_event_ids)).annotate(
        payload_text=Cast("payload", TextField())
    )
    quoting = sum(
        copies.filter(payload_text__icontains=probe).order_by().count()
        for probe in scope.text_probes()
    )
    return [
        finding("ledger", "payload_or_labels_kept", left),
        finding("ledger", "without_tombstone", untombstoned),
        {
            "projection": "ledger",
            "check": "erased_words_in_scrubbed_copies",
            "found": quoting,
            "sample": [],
        },
    ]


def _idempotency_residue(scope: ErasureScope) -> list[dict]:
    from piper.api.models import IdempotencyRecord

    staged = scope.erased_events()
    records = IdempotencyRecord.objects.filter(
        agent_id=scope.agent.pk,
        event_ids__overlap=RawSQL(
            f"ARRAY({staged.sql})", staged.params, output_field=ArrayField(UUIDField())
        ),
    ).filter(Q(erased_at__isnull=True) | Q(response_body__isnull=False))
    return [finding("idempotency_records", "answer_kept", records)]
