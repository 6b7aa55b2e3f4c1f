"""Recording episodes: each row is built from, and points at, its ledger event.

`episodes_record` appends one `episode.recorded` event per episode (its
payload is the whole episode, so the ledger alone can rebuild the table) and
inserts the rows in the same transaction. Embedding is queued after commit.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from ledger.models import Event, Source
from ledger.services import EventDraft, events_append
from piper import safety
from piper.errors import InvalidInput, Unprocessable
from piper.ids import uuid7
from piper.provenance import (
    DEFAULT_AUTHORITY_FOR_SOURCE,
    Authority,
    PrivacyClass,
    RetentionClass,
    SourceType,
)
from piper.tenancy.models import Agent

from ..models import Episode, Outcome
from . import queueing
from .common import (
    EPISODE_CORRECTED,
    EPISODE_RECORDED,
    MAX_BATCH,
    MAX_ENTITIES,
    MAX_ENTITY_CHARS,
    MAX_LABEL_CHARS,
    MAX_RELATED,
    MAX_TEXT_CHARS,
    instruction_like,
    safety_payload,
    text_error,
)


@dataclass(frozen=True)
class EpisodeDraft:
    """An episode as a writer describes it; the service adds ids and its ledger event."""

    occurred_at: datetime
    summary: str = ""
    action: str = ""
    observation: str = ""
    outcome: str = Outcome.UNKNOWN
    score: float | None = None
    actor: str = ""
    environment: str = ""
    session_id: str = ""
    goal_id: str = ""
    task_id: str = ""
    salience: float = 0.5
    confidence: float = 1.0
    entities: Sequence[str] = field(default_factory=tuple)
    related_ids: Sequence[uuid.UUID] = field(default_factory=tuple)
    source_id: uuid.UUID | None = None
    # Provenance of the claim that this happened.
    source_type: str = SourceType.OBSERVATION
    source_ref: str = ""
    authority: str | None = None
    # The raw event(s) this episode summarises, if they are already in the ledger.
    parent_event_id: uuid.UUID | None = None
    privacy_class: str = PrivacyClass.INTERNAL
    retention_class: str = RetentionClass.STANDARD


def normalise_entities(names: Sequence[str]) -> list[str]:
    """Lower-cased, stripped, de-duplicated, in first-seen order."""
    seen: dict[str, None] = {}
    for name in names:
        key = " ".join(str(name).split()).lower()
        if key:
            seen.setdefault(key, None)
    return list(seen)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _draft_errors(draft: EpisodeDraft) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(draft.occurred_at, datetime) or draft.occurred_at.tzinfo is None:
        errors["occurred_at"] = ["must be a time with a time zone, e.g. 2026-01-31T09:00:00Z"]
    texts = ("summary", "action", "observation")
    for name in texts:
        if message := text_error(getattr(draft, name), MAX_TEXT_CHARS):
            errors[name] = [message]
    if not any(name in errors for name in texts) and not any(
        getattr(draft, name).strip() for name in texts
    ):
        errors["summary"] = ["an episode needs a summary, an action or an observation"]
    for name, limit in MAX_LABEL_CHARS.items():
        if message := text_error(getattr(draft, name), limit):
            errors[name] = [message]
    if draft.outcome not in Outcome.values:
        errors["outcome"] = [f"must be one of {Outcome.values}"]
    if draft.score is not None and not (_is_number(draft.score) and math.isfinite(draft.score)):
        errors["score"] = ["must be a finite number"]
    for name in ("salience", "confidence"):
        value = getattr(draft, name)
        if not (_is_number(value) and 0.0 <= value <= 1.0):
            errors[name] = ["must be between 0 and 1"]
    if isinstance(draft.entities, str) or not isinstance(draft.entities, Sequence):
        errors["entities"] = ["must be a list of names"]
    elif len(draft.entities) > MAX_ENTITIES:
        errors["entities"] = [f"at most {MAX_ENTITIES} names"]
    elif any(text_error(n, MAX_ENTITY_CHARS) for n in draft.entities):
        errors["entities"] = [f"each name a string of at most {MAX_ENTITY_CHARS} characters"]
    if isinstance(draft.related_ids, str) or not isinstance(draft.related_ids, Sequence):
        errors["related_ids"] = ["must be a list of episode ids"]
    elif len(draft.related_ids) > MAX_RELATED:
        errors["related_ids"] = [f"at most {MAX_RELATED} episodes"]
    elif not all(isinstance(r, uuid.UUID) for r in draft.related_ids):
        errors["related_ids"] = ["must be episode ids (UUIDs)"]
    if draft.source_id is not None and not isinstance(draft.source_id, uuid.UUID):
        errors["source_id"] = ["must be a source id (UUID)"]
    if draft.source_type not in SourceType.values:
        errors["source_type"] = [f"must be one of {SourceType.values}"]
    if draft.authority is not None and draft.authority not in Authority.values:
        errors["authority"] = [f"must be one of {Authority.values}"]
    if draft.parent_event_id is not None and not isinstance(draft.parent_event_id, uuid.UUID):
        errors["parent_event_id"] = ["must be an event id (UUID)"]
    return errors


def check_drafts(agent: Agent, drafts: Sequence[EpisodeDraft]) -> None:
    """InvalidInput or Unprocessable for the first bad draft, or a reference to another
    agent's or an unknown row (the two are indistinguishable)."""
    if len(drafts) > MAX_BATCH:
        raise InvalidInput(
            f"at most {MAX_BATCH:,} episodes per request; split the batch",
            code="batch_too_large",
            details={"episodes": [f"{len(drafts)} sent"]},
        )
    errors = {i: e for i, d in enumerate(drafts) if (e := _draft_errors(d))}
    if errors:
        index, fields = next(iter(errors.items()))
        name, messages = next(iter(fields.items()))
        prefix = f"episodes[{index}]." if len(drafts) > 1 else ""
        raise InvalidInput(
            f"{prefix}{name}: {messages[0]}",
            details={"episodes": {str(i): e for i, e in errors.items()}}
            if len(drafts) > 1
            else fields,
        )
    # References to other rows: another agent's is indistinguishable from a missing one.
    related = {r for d in drafts for r in d.related_ids}
    if related:
        known = set(
            Episode.objects.filter(agent=agent, id__in=related).values_list("id", flat=True)
        )
        if missing := sorted(str(r) for r in related - known):
            raise Unprocessable(
                f"related episode {missing[0]} does not exist",
                code="unknown_episode_reference",
                details={"missing_episode_ids": missing},
            )
    sources = {d.source_id for d in drafts if d.source_id is not None}
    if sources:
        known = set(Source.objects.filter(agent=agent, id__in=sources).values_list("id", flat=True))
        if missing := sorted(str(s) for s in sources - known):
            raise Unprocessable(
                f"source {missing[0]} does not exist",
                code="unknown_source",
                details={"missing_source_ids": missing},
            )


def episode_verdict(draft: EpisodeDraft) -> safety.Verdict:
    """piper.safety's verdict on an episode's text (summary, action, observation)."""
    return safety.screen_texts((draft.summary, draft.action, draft.observation))


def episode_payload(draft: EpisodeDraft, episode_id: uuid.UUID) -> dict[str, Any]:
    """The ledger payload of an episode: everything needed to rebuild its row.

    What the event itself carries (valid time, session, actor, provenance) is
    not repeated. The safety verdict is recorded with it (when flagged), so the
    row rebuilt from the event carries the verdict given at write time, whatever
    the detector says later.
    """
    return {
        **safety_payload(episode_verdict(draft)),
        "summary": draft.summary,
        "action": draft.action,
        "observation": draft.observation,
        "outcome": draft.outcome,
        "score": draft.score,
        "environment": draft.environment,
        "goal_id": draft.goal_id,
        "task_id": draft.task_id,
        "salience": draft.salience,
        "entities": normalise_entities(draft.entities),
        "related_ids": [str(r) for r in dict.fromkeys(draft.related_ids)],
        "source_id": str(draft.source_id) if draft.source_id else None,
        "episode_id": str(episode_id),
    }


def episode_from_event(event: Event) -> Episode:
    """The Episode row an `episode.recorded` event stands for (used by the writer and replay)."""
    p = event.payload
    return Episode(
        id=uuid.UUID(p["episode_id"]),
        agent_id=event.agent_id,
        occurred_at=event.occurred_at,
        session_id=event.session_id,
        actor=event.actor,
        environment=p.get("environment", ""),
        goal_id=p.get("goal_id", ""),
        task_id=p.get("task_id", ""),
        action=p.get("action", ""),
        observation=p.get("observation", ""),
        outcome=p.get("outcome", Outcome.UNKNOWN),
        score=p.get("score"),
        summary=p.get("summary", ""),
        salience=p.get("salience", 0.5),
        confidence=event.confidence,
        entities=list(p.get("entities", [])),
        related_ids=[uuid.UUID(r) for r in p.get("related_ids", [])],
        source_type=event.source_type,
        authority=event.authority,
        source_id=uuid.UUID(p["source_id"]) if p.get("source_id") else None,
        raw_event=event,
        instruction_like=instruction_like(p),
        supersedes=uuid.UUID(p["corrects"]) if p.get("corrects") else None,
        # The event's record time, not the insert's clock, so a replay rebuilds the same row.
        created_at=event.recorded_at,
    )


# The same projection as episode_from_event, in SQL: the writer inserts a batch's rows
# from its events in one statement with three parameters (the ORM's bulk_create was
# most of a batch's time; docs/benchmarks.md), and a replay inserts them all at once.
# test_services holds the two equal column for column.
_EPISODE_COLUMNS = (
    "id, agent_id, occurred_at, session_id, actor, environment, goal_id, task_id, action, "
    "observation, outcome, score, summary, salience, confidence, entities, related_ids, "
    "source_type, authority, source_id, raw_event_id, embedding_model, created_at, "
    "instruction_like, supersedes"
)
_EPISODE_FROM_EVENT_SQL = f"""
    INSERT INTO {Episode._meta.db_table} ({_EPISODE_COLUMNS})
    SELECT (e.payload->>'episode_id')::uuid, e.agent_id, e.occurred_at, e.session_id, e.actor,
           coalesce(e.payload->>'environment', ''), coalesce(e.payload->>'goal_id', ''),
           coalesce(e.payload->>'task_id', ''), coalesce(e.payload->>'action', ''),
           coalesce(e.payload->>'observation', ''), coalesce(e.payload->>'outcome', 'unknown'),
           (e.payload->>'score')::double precision, coalesce(e.payload->>'summary', ''),
           coalesce((e.payload->>'salience')::double precision, 0.5), e.confidence,
           ARRAY(SELECT jsonb_array_elements_text(coalesce(e.payload->'entities', '[]')))::varchar(300)[],
           ARRAY(SELECT jsonb_array_elements_text(coalesce(e.payload->'related_ids', '[]')))::uuid[],
           e.source_type, e.authority, (e.payload->>'source_id')::uuid, e.id, '', e.recorded_at,
           coalesce((e.payload->'safety'->>'instruction_like')::boolean, false),
           (e.payload->>'corrects')::uuid
    FROM {Event._meta.db_table} AS e
    WHERE e.event_type IN ('{EPISODE_RECORDED}', '{EPISODE_CORRECTED}')
      AND e.redacted_at IS NULL AND {{where}}
"""


def _stored(episode: Episode) -> Episode:
    """An instance built in Python for a row the SQL above inserted: saved, and its
    database-generated search_vector deferred (read on access) rather than None."""
    episode._state.adding = False
    episode._state.db = "default"
    episode.__dict__.pop("search_vector", None)
    return episode


def episodes_insert_from_events(where: str, params: Sequence[Any]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_EPISODE_FROM_EVENT_SQL.format(where=where), params)
        return cursor.rowcount


def episodes_record(*, agent: Agent, drafts: Sequence[EpisodeDraft]) -> list[Episode]:
    """Record episodes, all or nothing, in input order.

    Each gets its own `episode.recorded` ledger event (valid time = occurred_at)
    in the same transaction. Bad input raises InvalidInput (400, the message
    names `episodes[i].field`) or Unprocessable (422, an unknown related
    episode or source) and writes nothing. Embedding is queued after commit.
    A batch costs a constant number of statements, whatever its size: the
    reference checks, the ledger's chain lock, event insert and head update,
    and one INSERT … SELECT of the rows from their events.
    """
    drafts = list(drafts)
    if not drafts:
        return []
    check_drafts(agent, drafts)
    ids = [uuid7() for _ in drafts]
    event_drafts = [
        EventDraft(
            event_type=EPISODE_RECORDED,
            payload=episode_payload(d, episode_id),
            occurred_at=d.occurred_at,
            session_id=d.session_id,
            actor=d.actor,
            source_type=d.source_type,
            source_ref=d.source_ref,
            authority=d.authority or DEFAULT_AUTHORITY_FOR_SOURCE[d.source_type],
            confidence=float(d.confidence),
            parent_event_id=d.parent_event_id,
            privacy_class=d.privacy_class,
            retention_class=d.retention_class,
        )
        for d, episode_id in zip(drafts, ids, strict=True)
    ]
    with transaction.atomic():
        events = events_append(agent=agent, drafts=event_drafts)
        episodes_insert_from_events(
            "e.agent_id = %s AND e.seq BETWEEN %s AND %s",
            [agent.pk, events[0].seq, events[-1].seq],
        )
        episodes = [_stored(episode_from_event(e)) for e in events]
        # robust: a broker outage must not fail a committed write (the backlog sweep catches up).
        transaction.on_commit(lambda: queueing.queue_embedding(agent.pk, ids), robust=True)
    return episodes


def episode_record(*, agent: Agent, draft: EpisodeDraft) -> Episode:
    return episodes_record(agent=agent, drafts=[draft])[0]
