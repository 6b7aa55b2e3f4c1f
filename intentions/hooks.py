"""The intentions app's ledger listener: new evidence wakes the trigger matchers."""

from __future__ import annotations

import uuid

from .models import Intention, IntentionStatus, TriggerType

# Every semantic-memory event type starts so (facts.asserted, facts.retracted, …).
FACTS_EVENT_PREFIX = "facts."


def events_committed(
    agent_id: uuid.UUID, first_seq: int, last_seq: int, event_types: frozenset[str]
) -> None:
    """Queue the matchers an agent's armed triggers need (none: queue nothing).

    Event triggers are matched against the new events. State triggers are
    re-checked only when the commit holds a facts event — an intention firing
    (itself a ledger event) or any other evidence cannot change a fact. One
    indexed query per commit (the armed triggers); the beat's engine cycle
    catches up if a task is ever lost.
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
    if TriggerType.STATE in armed and any(t.startswith(FACTS_EVENT_PREFIX) for t in event_types):
        check_states.delay(str(agent_id))
