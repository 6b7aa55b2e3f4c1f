"""What every change of an intention writes: its ledger event, its Transition
row and, for a status change, the compare-and-set on the status.

The bottom of the services package: firing, the dependency rules, the engine's
scans and the lifecycle services all write through these, and this module
imports none of them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from ledger.models import Event
from ledger.services import event_append
from piper.errors import Conflict
from piper.provenance import SourceType

from ..models import TRANSITIONS, Intention, IntentionStatus, Transition


def intention_event(
    intention: Intention,
    event_type: str,
    payload: dict,
    *,
    source_type: str,
    parent_event_id: uuid.UUID | None = None,
) -> Event:
    """Append `event_type` about `intention` to its agent's ledger: the payload
    names the intention first; the session is its heir's once inherited, else
    the one that made it. `source_type`: AGENT_INFERENCE for what the agent
    asked, OBSERVATION for what the engine saw happen."""
    return event_append(
        agent=intention.agent,
        event_type=event_type,
        payload={"intention_id": str(intention.pk), **payload},
        session_id=intention.inherited_by or intention.source_session,
        source_type=source_type,
        parent_event_id=parent_event_id,
    )


def record_transition(
    intention: Intention,
    to_status: str,
    *,
    at: datetime,
    reason: str = "",
    event: Event | None = None,
    from_status: str | None = None,
) -> None:
    Transition.objects.create(
        intention=intention,
        from_status=intention.status if from_status is None else from_status,
        to_status=to_status,
        occurrence=intention.occurrence,
        reason=reason,
        at=at,
        event=event,
        # Its event's record time, so a rebuild from the ledger gives it back.
        **({"recorded_at": event.recorded_at} if event is not None else {}),
    )


def move_locked(
    intention: Intention, to_status: str, at: datetime, reason: str, **fields: Any
) -> None:
    """Move a row-locked intention to `to_status` (and set `fields`): its event
    (`intention.<status>`, or `intention.rearmed` back to active), its
    Transition and a compare-and-set on the status. Conflict
    invalid_transition when TRANSITIONS does not allow the move."""
    if to_status not in TRANSITIONS[intention.status]:
        raise Conflict(
            f"intention is {intention.status}; it cannot become {to_status}",
            code="invalid_transition",
            details={"status": intention.status, "to": to_status},
        )
    event_type = (
        "intention.rearmed" if to_status == IntentionStatus.ACTIVE else f"intention.{to_status}"
    )
    event = intention_event(
        intention,
        event_type,
        {
            "from": intention.status,
            "to": to_status,
            "reason": reason,
            "occurrence": intention.occurrence,
            "at": at.isoformat(),
            # The columns the move sets besides the status (a rebuild sets them too).
            "set": {
                name: value.isoformat() if isinstance(value, datetime) else value
                for name, value in fields.items()
            },
        },
        source_type=SourceType.AGENT_INFERENCE,
    )
    record_transition(intention, to_status, at=at, reason=reason, event=event)
    changed = Intention.objects.filter(pk=intention.pk, status=intention.status).update(
        status=to_status, updated_at=event.recorded_at, **fields
    )
    if not changed:  # cannot happen under the row lock; guard anyway
        raise Conflict("intention changed concurrently; retry", code="concurrent_change")
    intention.status = to_status
    for name, value in fields.items():
        setattr(intention, name, value)
