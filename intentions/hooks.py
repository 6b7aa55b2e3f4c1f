"""The intentions app's ledger listener: new evidence wakes the trigger matchers."""

from __future__ import annotations

from ledger.hooks import Committed

from .models import Intention, IntentionStatus, TriggerType

# Every semantic-memory event type starts so (facts.asserted, facts.retracted, …).
FACTS_EVENT_PREFIX = "facts."


def events_committed(committed: Committed) -> None:
    """Queue the matchers an agent's armed triggers need (none: queue nothing).

    Event triggers are matched against the new events. State triggers are
    re-checked only when the commit holds a facts event — an intention firing
    (itself a ledger event) or any other evidence cannot change a fact. One
    indexed query per commit (the armed triggers); the beat's engine cycle
    catches up if a task is ever lost.
    """
    armed = set(
        Intention.objects.filter(
            agent_id=committed.agent_id,
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
        match_events.delay(str(committed.agent_id))
    if TriggerType.STATE in armed and any(
        t.startswith(FACTS_EVENT_PREFIX) for t in committed.event_types
    ):
        check_states.delay(str(committed.agent_id))
