"""The what_to_do route: open commitments, due first, lifted by what the question names."""

from __future__ import annotations

import re

from piper.api.serializers import api_datetime

from .results import CURRENT, Answer, Ask, Evidence, age_seconds

_URGENCY = {"due": 1.0, "executing": 0.9, "active": 0.6, "blocked": 0.4}
_ROUTE_WORDS = {
    "what", "when", "where", "which", "who", "how", "the", "and", "for", "with", "about",
    "that", "this", "have", "has", "was", "were", "are", "is", "did", "does", "do", "am",
    "supposed", "remind", "reminder", "reminders", "promise", "promised", "todo", "todos",
    "need", "needs", "should", "must", "next", "pending", "due", "today", "tomorrow", "now",
    "my", "our", "me", "you", "your", "list", "still", "task", "tasks", "thing", "things",
}  # fmt: skip


def _words(text: str) -> set[str]:
    """Content words, cut to five letters (a poor man's stem: invoice/invoices)."""
    return {
        w[:5]
        for w in re.findall(r"[a-z0-9]+", text.lower())
        if len(w) > 2 and w not in _ROUTE_WORDS
    }


def intention_evidence(intention, *, score: float, now, signals: dict) -> Evidence:
    """An open intention as evidence (its source_event selected, payload deferred)."""
    event = intention.source_event
    return Evidence(
        kind="intention",
        id=str(intention.pk),
        text=intention.description,
        score=score,
        obj=intention,
        signals=signals,
        memory_status={
            "source": {
                "type": event.source_type,
                "ref": event.source_ref,
                "event_id": str(event.pk),
                "session_id": intention.source_session,
            },
            "age_seconds": age_seconds(now, intention.created_at),
            "authority": event.authority,
            "currentness": CURRENT,  # open: cancelled and completed ones never come back
            "confidence": float(event.confidence),
            "status": intention.status,
            "due_at": api_datetime(intention.due_at),
            "trigger_type": intention.trigger_type,
            "priority": intention.priority,
        },
    )


def route_what_to_do(ask: Ask) -> Answer:
    """Open commitments — due first — with what the question names lifted."""
    from intentions.selectors import intention_list

    open_statuses = list(_URGENCY)
    intentions = list(
        intention_list(agent=ask.agent, statuses=open_statuses)
        .select_related("source_event")
        .defer("source_event__payload")[:500]
    )
    asked = _words(ask.query)
    scored = []
    for intention in intentions:
        relevance = len(asked & _words(intention.description)) / len(asked) if asked else 0.0
        urgency = _URGENCY[intention.status]
        if intention.due_at is not None and intention.due_at <= ask.now:
            urgency = min(1.0, urgency + 0.2)
        score = round(0.6 * relevance + 0.4 * urgency, 4)
        scored.append((score, intention.priority, intention, relevance, urgency))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2].due_at or ask.now, str(s[2].pk)))
    evidence = [
        intention_evidence(
            intention,
            score=score,
            now=ask.now,
            signals={"relevance": round(relevance, 4), "urgency": round(urgency, 4)},
        )
        for score, _, intention, relevance, urgency in scored[: ask.limit]
    ]
    return Answer(evidence=evidence, candidates=[e.trace_entry() for e in evidence])
