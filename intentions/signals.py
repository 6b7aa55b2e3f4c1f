"""What the intentions engine does when new evidence is committed."""

from __future__ import annotations

import uuid

from .models import Intention, IntentionStatus, TriggerType


def events_committed(agent_id: uuid.UUID, first_seq: int, last_seq: int) -> None:
    """Queue the matchers an agent's armed triggers need (none: queue nothing).

    Event triggers are matched against the new events; state triggers are
    re-checked, since the commit may have changed a fact. One indexed query
    per commit; the beat's engine cycle catches up if a task is ever lost.
    """
    armed = set(
        Intention.objects.filter(
            agent_id=agent_id,
            status=IntentionStatus.ACTIVE,
            trigger_type__in=[TriggerType.EVENT, TriggerType.STATE],
        )
        .values_list("trigger_type", flat=True)
        .distinct()
    )
    if not armed:
        return
    from .tasks import check_states, match_events

    if TriggerType.EVENT in armed:
        match_events.delay(str(agent_id))
    if TriggerType.STATE in armed:
        check_states.delay(str(agent_id))
