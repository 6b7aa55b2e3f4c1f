"""Every write to episodic memory. Each episode is built from, and points at, a ledger event.

`episodes_record` appends one `episode.recorded` event per episode (its
payload is the whole episode, so the ledger alone can rebuild the table) and
inserts the rows in the same transaction. Embeddings are not computed here:
after commit a Celery task fills them in batches (episodes.tasks), and until
then the episode is found by full text.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from ledger.models import Event, Source
from ledger.services import EventDraft, events_append
from piper.errors import InvalidInput, Unprocessable
from piper.ids import uuid7
from piper.provenance import DEFAULT_AUTHORITY_FOR_SOURCE, Authority, SourceType
from piper.tenancy.models import Agent

from .models import Episode, Outcome

EPISODE_RECORDED = "episode.recorded"
MAX_BATCH = 1000
MAX_TEXT_CHARS = 20_000
MAX_ENTITIES = 100
MAX_RELATED = 100


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


def normalise_entities(names: Sequence[str]) -> list[str]:
    """Lower-cased, stripped, de-duplicated, in first-seen order."""
    seen: dict[str, None] = {}
    for name in names:
        key = " ".join(str(name).split()).lower()
        if key:
            seen.setdefault(key, None)
    return list(seen)


def _draft_errors(draft: EpisodeDraft) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(draft.occurred_at, datetime) or draft.occurred_at.tzinfo is None:
        errors["occurred_at"] = ["must be a time with a time zone, e.g. 2026-01-31T09:00:00Z"]
    if not (draft.summary.strip() or draft.action.strip() or draft.observation.strip()):
        errors["summary"] = ["an episode needs a summary, an action or an observation"]
    for name in ("summary", "action", "observation"):
        if len(getattr(draft, name)) > MAX_TEXT_CHARS:
            errors[name] = [f"at most {MAX_TEXT_CHARS:,} characters"]
    if draft.outcome not in Outcome.values:
        errors["outcome"] = [f"must be one of {Outcome.values}"]
    if draft.score is not None and not math.isfinite(draft.score):
        errors["score"] = ["must be a finite number"]
    for name in ("salience", "confidence"):
        value = getattr(draft, name)
        if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
            errors[name] = ["must be between 0 and 1"]
    if len(draft.entities) > MAX_ENTITIES:
        errors["entities"] = [f"at most {MAX_ENTITIES} names"]
    elif any(len(str(n)) > 300 for n in draft.entities):
        errors["entities"] = ["each name at most 300 characters"]
    if len(draft.related_ids) > MAX_RELATED:
        errors["related_ids"] = [f"at most {MAX_RELATED} episodes"]
    if draft.source_type not in SourceType.values:
        errors["source_type"] = [f"must be one of {SourceType.values}"]
    if draft.authority is not None and draft.authority not in Authority.values:
        errors["authority"] = [f"must be one of {Authority.values}"]
    return errors


def _check(agent: Agent, drafts: Sequence[EpisodeDraft]) -> None:
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


def episode_payload(draft: EpisodeDraft, episode_id: uuid.UUID) -> dict[str, Any]:
    """The ledger payload of an episode: everything needed to rebuild its row."""
    data = asdict(draft)
    # What the event itself carries (valid time, session, actor, provenance) is not repeated.
    for name in (
        "occurred_at",
        "session_id",
        "actor",
        "confidence",
        "source_type",
        "source_ref",
        "authority",
        "parent_event_id",
    ):
        data.pop(name)
    data["episode_id"] = str(episode_id)
    data["entities"] = normalise_entities(draft.entities)
    data["related_ids"] = [str(r) for r in draft.related_ids]
    data["source_id"] = str(draft.source_id) if draft.source_id else None
    return data


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
    )


def episodes_record(*, agent: Agent, drafts: Sequence[EpisodeDraft]) -> list[Episode]:
    """Record episodes, all or nothing, in input order.

    Each gets its own `episode.recorded` ledger event (valid time = occurred_at)
    in the same transaction. Bad input raises InvalidInput (400, the message
    names `episodes[i].field`) or Unprocessable (422, an unknown related
    episode or source) and writes nothing. Embedding is queued after commit.
    """
    drafts = list(drafts)
    if not drafts:
        return []
    _check(agent, drafts)
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
        )
        for d, episode_id in zip(drafts, ids, strict=True)
    ]
    with transaction.atomic():
        events = events_append(agent=agent, drafts=event_drafts)
        episodes = [episode_from_event(e) for e in events]
        Episode.objects.bulk_create(episodes)
        transaction.on_commit(lambda: _queue_embedding(agent.pk, ids))
    return episodes


def episode_record(*, agent: Agent, draft: EpisodeDraft) -> Episode:
    return episodes_record(agent=agent, drafts=[draft])[0]


def _queue_embedding(agent_id: uuid.UUID, episode_ids: list[uuid.UUID]) -> None:
    """Hand the new rows to the embedding task (episodes.tasks); a no-op until it exists."""
    try:
        from .tasks import queue_episode_embedding
    except ImportError:
        return
    queue_episode_embedding(agent_id=agent_id, episode_ids=episode_ids)
