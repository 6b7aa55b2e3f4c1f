"""The agent's word on a recall: one feedback per trace, with its ledger event."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import transaction

from episodes.services import USE_OUTCOMES, episodes_mark_used
from ledger.services import EventDraft, events_append
from piper.errors import Conflict, InvalidInput, NotFound
from piper.tenancy.models import Agent

from ..models import FailureCode, Outcome, RecallFeedback, RetrievalTrace

MAX_NOTE_CHARS = 2000
FEEDBACK_EVENT = "recall.feedback"


def recall_feedback(
    *,
    agent: Agent,
    trace_id: uuid.UUID,
    used: Sequence[str] = (),
    outcome: str,
    failure_code: str | None = None,
    note: str = "",
    stale: bool = False,
) -> RecallFeedback:
    """Record which of a trace's evidence the agent used and how it went, with
    a `recall.feedback` ledger event in the same transaction.

    Another agent's trace is NotFound (nothing written). InvalidInput for an
    unknown outcome or failure code, a failure code on a success, or `used`
    ids the trace did not return. Conflict (feedback_exists) when the trace
    already has feedback: one word per recall. `stale`: the answer showed a
    value as current that was no longer true (suite H's stale-answer rate). A success or partial marks the
    episodes it used as used, so their salience decay restarts (episodes.salience).
    """
    if outcome not in Outcome.values:
        raise InvalidInput(
            f"outcome must be one of {', '.join(Outcome.values)}",
            details={"outcome": [f"one of: {', '.join(Outcome.values)}"]},
        )
    code = failure_code or ""
    if code and code not in FailureCode.values:
        raise InvalidInput(
            f"failure_code must be one of {', '.join(FailureCode.values)}",
            details={"failure_code": [f"one of: {', '.join(FailureCode.values)}"]},
        )
    if code and outcome == Outcome.SUCCESS:
        raise InvalidInput(
            "failure_code: a success has no failure code; send failure or partial",
            details={"failure_code": ["only with outcome failure or partial"]},
        )
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise InvalidInput(
            f"note must be text of at most {MAX_NOTE_CHARS} characters",
            details={"note": [f"at most {MAX_NOTE_CHARS} characters"]},
        )
    used = [str(u) for u in used]
    with transaction.atomic():
        trace = RetrievalTrace.objects.select_for_update().filter(agent=agent, pk=trace_id).first()
        if trace is None:
            raise NotFound(f"recall {trace_id} not found")
        returned = {item["id"] for item in trace.returned}
        unknown = [u for u in used if u not in returned]
        if unknown:
            raise InvalidInput(
                f"used: {unknown[0]} is not evidence this recall returned",
                details={"used": [f"not returned by recall {trace_id}: {', '.join(unknown)}"]},
            )
        if RecallFeedback.objects.filter(trace=trace).exists():
            raise Conflict(
                f"recall {trace_id} already has feedback; each recall takes one",
                code="feedback_exists",
            )
        [event] = events_append(
            agent=agent,
            drafts=[
                EventDraft(
                    event_type=FEEDBACK_EVENT,
                    payload={
                        "trace_id": str(trace.pk),
                        "route": trace.route,
                        "used": used,
                        "outcome": outcome,
                        "failure_code": code,
                        "note": note,
                        "stale": stale,
                    },
                )
            ],
        )
        if outcome in USE_OUTCOMES:
            # The episodes it used stay salient (episodes.salience); a failure is no use.
            kinds = {item["id"]: item.get("kind") for item in trace.returned}
            episodes_mark_used(
                agent=agent,
                episode_ids=[u for u in used if kinds.get(u) == "episode"],
                at=event.recorded_at,
            )
        return RecallFeedback.objects.create(
            agent=agent,
            trace=trace,
            used=used,
            outcome=outcome,
            failure_code=code,
            note=note,
            stale=stale,
            source_event=event,
        )
