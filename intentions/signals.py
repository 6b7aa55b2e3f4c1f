"""What the intentions engine does when new evidence is committed."""

from __future__ import annotations

import uuid

from ledger.models import Event

from .models import Intention, IntentionStatus, TriggerType

# Every semantic-memory event type starts so (facts.asserted, facts.retracted, …).
FACTS_EVENT_PREFIX = "facts."


def events_committed(agent_id: uuid.UUID, first_seq: int, last_seq: int) -> None:
    """Queue the matchers an agent's armed triggers need (none: queue nothing).

    Event triggers are matched against the new events. State triggers are
    re-checked only when the commit holds a facts event — an intention firing
    (itself a ledger event) or any other evidence cannot change a fact. Two
    indexed queries per commit; the beat's engine cycle catches up if a task
    is ever lost.
    """
    armed = set(
        Intention.objects.filter(
            agent_id=agent_id,
            status=IntentionStatus.ACTIVE,
            trigger_type__in=[TriggerType.EVENT, TriggerType.STATE],
        )
        .order_by()
        .values_list("trigger_type", flat=True)
        .distinct()
    )
    if not armed:
        return
    from .tasks import check_states, match_events

    if TriggerType.EVENT in armed:
        match_events.delay(str(agent_id))
    if TriggerType.STATE in armed and _touches_facts(agent_id, first_seq, last_seq):
        check_states.delay(str(agent_id))


def _touches_facts(agent_id: uuid.UUID, first_seq: int, last_seq: int) -> bool:
    return Event.objects.filter(
        agent_id=agent_id,
        seq__gte=first_seq,
        seq__lte=last_seq,
        event_type__startswith=FACTS_EVENT_PREFIX,
    ).exists()
