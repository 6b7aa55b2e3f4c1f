"""Erasure in prospective memory and working state.

Called by the forgetting app, inside its transaction, after the memory apps
below have erased their rows (the scope holds the erased words). Two things:

* Rows made by an erased event go: an intention (with its firings, history,
  dependencies, pending items and webhook messages), a working-state version
  (the thread then stands at its latest surviving version), a handover.
* Surviving rows that *quote* erased words keep everything else: the quote
  becomes "[erased]", a ledger event holds the scrubbed copy, the row points
  at it, and the quoting event is erased too — so the ledger holds no copy.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from django.db.models import Q, TextField
from django.db.models.functions import Cast

from ledger.erasure import ErasureScope, allow_erasure_in_this_transaction, finding
from ledger.models import Event
from ledger.services import event_append
from piper.provenance import SourceType

from ..models import Handover, Intention, OutboxMessage, Thread, Transition, WorkingState
from . import intentions_rebuild, rebuild
from .state import STATE_SCRUBBED

INTENTIONS = "intentions"
WORKING_STATES = "working_states"
HANDOVERS = "handovers"
OUTBOX = "webhook_messages"
SCRUBBED_STATES = "working_states.scrubbed"
SCRUBBED_INTENTIONS = "intentions.scrubbed"
ERASED = "[erased]"
INTENTION_SCRUBBED = "intention.scrubbed"
FIRED = "intention.fired"
SCRUBBED_FIELDS = ("description", "completion_criteria", "required_context", "trigger_spec")


def erase(scope: ErasureScope) -> None:
    agent, erased = scope.agent, scope.erased_events()
    allow_erasure_in_this_transaction()

    intentions = Intention.objects.filter(agent=agent, source_event_id__in=erased)
    for description, criteria in intentions.values_list("description", "completion_criteria"):
        scope.add_texts([description, criteria])
    erased_intentions = [str(i) for i in intentions.values_list("id", flat=True)]
    outbox = OutboxMessage.objects.filter(
        Q(firing__intention_id__any=erased_intentions)
        | Q(escalation__intention_id__any=erased_intentions),
        agent=agent,
    )
    scope.note_removed(OUTBOX, outbox.values_list("id", flat=True))
    outbox.delete()
    scope.note_removed(INTENTIONS, erased_intentions)
    intentions.delete()  # firings, escalations, transitions, dependencies, pending items
    # History rows of surviving intentions whose own event is erased.
    Transition.objects.filter(intention__agent=agent, event_id__in=erased).delete()

    states = WorkingState.objects.filter(agent=agent, source_event_id__in=erased)
    # Every thread an erased event touched: its columns are what the other events make.
    threads = set(states.values_list("thread_id", flat=True))
    for state in states.values_list("state", flat=True):
        scope.add_texts(_strings(state))
    scope.note_removed(WORKING_STATES, states.values_list("id", flat=True))
    states.delete()

    handovers = Handover.objects.filter(agent=agent, succession_event_id__in=erased)
    threads |= set(handovers.values_list("thread_id", flat=True))
    scope.add_texts(handovers.values_list("note", flat=True))
    scope.note_removed(HANDOVERS, handovers.values_list("id", flat=True))
    handovers.delete()
    for thread_id in (
        Event.objects.filter(agent=agent, pk__in=erased, event_type__in=rebuild.EVENT_TYPES)
        .order_by()
        .values_list("payload__thread_id", flat=True)
    ):
        if thread_id:
            threads.add(uuid.UUID(thread_id))
    # As a rebuild after the purge will: a rebuild equals what is there.
    rebuild.threads_refold(agent=agent, thread_ids=threads & _thread_ids(agent), excluding=erased)

    _scrub_quotes(scope)
    # As a rebuild after the purge will (the scrubbed creations included).
    intentions_rebuild.intentions_refold(agent=agent, excluding=scope.erased_events())


def _thread_ids(agent) -> set:
    return set(Thread.objects.filter(agent=agent).values_list("pk", flat=True))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _scrubbed(value: Any, probes: list[str]) -> Any:
    if isinstance(value, str):
        for probe in probes:
            value = re.sub(re.escape(probe), ERASED, value, flags=re.IGNORECASE)
        return value
    if isinstance(value, dict):
        return {k: _scrubbed(v, probes) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, probes) for v in value]
    return value


def _with_text(qs, *fields: str):
    """`qs` with each JSON field also as text (`<field>_text`), to search for words."""
    return qs.annotate(**{f"{name}_text": Cast(name, TextField()) for name in fields})


def _quoting(qs, columns: tuple[str, ...], probes: list[str]):
    """Rows of `qs` whose text columns (JSON as text) hold one of `probes`."""
    condition = Q()
    for probe in probes:
        for column in columns:
            condition |= Q(**{f"{column}__icontains": probe})
    return qs.filter(condition) if probes else qs.none()


def _scrub_quotes(scope: ErasureScope) -> None:
    agent, probes = scope.agent, scope.text_probes()
    if not probes:
        return
    for state in _quoting(
        _with_text(WorkingState.objects.filter(agent=agent), "state"), ("state_text",), probes
    ):
        clean = _scrubbed(state.state, probes)
        if clean == state.state:
            continue  # matched JSON escaping, not a quote
        # The write the version came from, through earlier scrubbed copies: a
        # rebuild puts the copy where that write stands in the ledger.
        replaced = Event.objects.filter(pk=state.source_event_id).values("event_type", "payload")[0]
        written_event_id = (
            replaced["payload"].get("written_event_id")
            if replaced["event_type"] == STATE_SCRUBBED
            else None
        ) or str(state.source_event_id)
        event = event_append(
            agent=agent,
            event_type=STATE_SCRUBBED,
            payload={
                "thread_id": str(state.thread_id),
                "version": state.version,
                "state": clean,
                "replaces_event_id": str(state.source_event_id),
                "working_state_id": str(state.pk),
                "written_event_id": written_event_id,
            },
            session_id=state.session_id,
            source_type=SourceType.OPERATOR,
        )
        scope.own_event_ids.add(event.pk)
        scope.add_events([state.source_event_id])
        WorkingState.objects.filter(pk=state.pk).update(
            state=clean,
            size_bytes=len(json.dumps(clean, separators=(",", ":"), ensure_ascii=False).encode()),
            source_event=event,
        )
        scope.note_removed(SCRUBBED_STATES, [state.pk])
    for intention in _quoting(
        _with_text(Intention.objects.filter(agent=agent), "required_context", "trigger_spec"),
        ("description", "completion_criteria", "required_context_text", "trigger_spec_text"),
        probes,
    ):
        fields = {name: getattr(intention, name) for name in SCRUBBED_FIELDS}
        clean = {name: _scrubbed(value, probes) for name, value in fields.items()}
        if clean == fields:
            continue
        # The creation this erases, through earlier copies: a rebuild puts the
        # scrubbed creation where the original stands in the ledger.
        replaced = Event.objects.filter(pk=intention.source_event_id).values(
            "event_type", "payload"
        )[0]
        if replaced["event_type"] == INTENTION_SCRUBBED:
            created_event_id = replaced["payload"].get("created_event_id")
            created = replaced["payload"].get("created")
            fired = dict(replaced["payload"].get("fired") or {})
        else:
            created_event_id, created = str(intention.source_event_id), replaced["payload"]
            fired = {}
        if created is not None:
            # The purge blanks the erased creation's session: the copy keeps it.
            created = {**created, "source_session": intention.source_session}
        # Its firings quote its description: they are erased too, and the copy
        # carries them scrubbed, so a rebuild still finds each firing.
        quoting_firings = {
            str(pk): payload
            for pk, payload in Event.objects.filter(
                agent=agent,
                event_type=FIRED,
                payload__intention_id=str(intention.pk),
                redacted_at__isnull=True,
            )
            # One erased in its own right goes without a copy.
            .exclude(pk__in=scope.erased_events())
            .values_list("pk", "payload")
            if _scrubbed(payload, probes) != payload
        }
        fired.update(quoting_firings)
        event = event_append(
            agent=agent,
            event_type=INTENTION_SCRUBBED,
            payload={
                "intention_id": str(intention.pk),
                **clean,
                "replaces_event_id": str(intention.source_event_id),
                "created_event_id": created_event_id,
                "created": _scrubbed(created, probes) if created is not None else None,
                "fired": {pk: _scrubbed(payload, probes) for pk, payload in fired.items()},
            },
            source_type=SourceType.OPERATOR,
        )
        scope.own_event_ids.add(event.pk)
        scope.add_events([intention.source_event_id, *map(uuid.UUID, quoting_firings)])
        Intention.objects.filter(pk=intention.pk).update(**clean, source_event=event)
        for message in OutboxMessage.objects.filter(
            Q(firing__intention=intention) | Q(escalation__intention=intention)
        ):
            OutboxMessage.objects.filter(pk=message.pk).update(
                payload=_scrubbed(message.payload, probes)
            )
        scope.note_removed(SCRUBBED_INTENTIONS, [intention.pk])


def residue(scope: ErasureScope) -> list[dict]:
    agent, erased = scope.agent, scope.erased_events()
    probes = scope.text_probes()
    findings = [
        finding(
            INTENTIONS,
            "made_from_erased_event",
            Intention.objects.filter(agent=agent, source_event_id__in=erased),
        ),
        finding(
            WORKING_STATES,
            "made_from_erased_event",
            WorkingState.objects.filter(agent=agent, source_event_id__in=erased),
        ),
        finding(
            HANDOVERS,
            "made_from_erased_event",
            Handover.objects.filter(agent=agent, succession_event_id__in=erased),
        ),
    ]
    findings.append(
        {
            **finding(
                WORKING_STATES,
                "erased_words",
                _quoting(
                    _with_text(WorkingState.objects.filter(agent=agent), "state"),
                    ("state_text",),
                    probes,
                ),
            ),
        }
    )
    findings.append(
        finding(
            INTENTIONS,
            "erased_words",
            _quoting(
                _with_text(
                    Intention.objects.filter(agent=agent), "required_context", "trigger_spec"
                ),
                (
                    "description",
                    "completion_criteria",
                    "required_context_text",
                    "trigger_spec_text",
                ),
                probes,
            ),
        )
    )
    findings.append(
        finding(
            OUTBOX,
            "erased_words",
            _quoting(
                _with_text(OutboxMessage.objects.filter(agent=agent), "payload"),
                ("payload_text",),
                probes,
            ),
        )
    )
    return findings
