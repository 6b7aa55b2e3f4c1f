"""The how_to route: skills that match the task, with how often they worked lately."""

from __future__ import annotations

from datetime import datetime

from piper.api.serializers import api_datetime

from .results import CURRENT, NOT_APPLICABLE, Answer, Ask, Evidence, age_seconds


def _skill_evidence(candidate, version, now: datetime) -> Evidence:
    from skills.selectors import rate

    v = candidate.version
    status = {
        "source": {"type": "skill", "ref": v.skill.name, "event_id": None},
        "age_seconds": None,
        "authority": None,
        "currentness": CURRENT if v.status == "validated" else NOT_APPLICABLE,
        "confidence": None,
        "status": v.status,
        "similarity": candidate.similarity,
        "reasons": candidate.reasons,
    }
    if version is not None:
        event = version.source_event
        status.update(
            source={
                "type": event.source_type,
                "ref": v.skill.name,
                "event_id": str(event.pk),
            },
            age_seconds=age_seconds(now, version.created_at),
            authority=event.authority,
            # How often it worked lately: what a validated skill's confidence is.
            confidence=rate(version.recent_successes or 0, version.recent_total or 0),
            last_used_at=api_datetime(version.last_used_at),
            executions=version.executions_total,
        )
    return Evidence(
        kind="skill",
        id=str(v.pk),
        text=v.purpose,
        score=candidate.score,
        obj=candidate,
        signals={"similarity": candidate.similarity, "trigger": candidate.trigger.strength},
        memory_status=status,
    )


def route_how_to(ask: Ask) -> Answer:
    from skills import selectors as skills

    result = skills.skill_match(
        agent=ask.agent,
        task=ask.query,
        context=ask.context,
        scopes=ask.scopes,
        limit=ask.limit,
        task_embedding=ask.vector.get(),  # the question's, computed once per recall
    )
    shown = skills.versions_as_evidence(
        agent=ask.agent, version_ids=(c.version.pk for c in result.applicable)
    )
    evidence = [_skill_evidence(c, shown[c.version.pk], ask.now) for c in result.applicable]
    near = [_skill_evidence(c, None, ask.now) for c in result.near_misses]
    return Answer(
        evidence=evidence,
        near_misses=near,
        candidates=[e.trace_entry() for e in evidence + near],
    )
