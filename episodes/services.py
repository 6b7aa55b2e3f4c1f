"""Every write to episodic memory. Each row is built from, and points at, a ledger event.

`episodes_record` appends one `episode.recorded` event per episode (its
payload is the whole episode, so the ledger alone can rebuild the table) and
inserts the rows in the same transaction. `episode_retract` withdraws one
(`episode.retracted`); `episode_correct` records a corrected version as a new
row built from its `episode.corrected` event (whose payload is the whole new
version), and the old version points at it (`superseded_by`). `source_ingest` registers a document
(`ledger.services.source_register`) and splits it into `SourceChunk`s, whose
spans a `source.chunked` event records. `rebuild_projection` replays both.

Embeddings are not computed in a request: after commit a Celery task fills
them in batches (episodes.tasks → `episodes_embed` / `chunks_embed`), and until
then a row is found by full text. A vector is derived data — a function of the
row's text and the model, like the full-text vector — so storing it appends no
ledger event; `embedding_model` says which model made it.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from ledger.models import ChainHead, Event, Source
from ledger.services import (
    EventDraft,
    chain_lock,
    event_append,
    events_append,
    source_register,
)
from piper import safety
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.ids import uuid7
from piper.provenance import (
    DEFAULT_AUTHORITY_FOR_SOURCE,
    Authority,
    PrivacyClass,
    RetentionClass,
    SourceType,
)
from piper.tenancy.models import Agent

from . import chunking
from .models import EMBEDDING_DIM, Episode, EpisodeStatus, Outcome, SourceChunk

logger = logging.getLogger(__name__)

EPISODE_RECORDED = "episode.recorded"
EPISODES_COLLAPSED = "episode.collapsed"
EPISODE_RETRACTED = "episode.retracted"
EPISODE_CORRECTED = "episode.corrected"
# The events whose payload is a whole episode, each the raw event of one row.
EPISODE_ROW_EVENTS = (EPISODE_RECORDED, EPISODE_CORRECTED)
# What a correction may change; the rest (session, links, provenance) stays the version's.
CORRECTABLE_FIELDS = (
    "occurred_at",
    "summary",
    "action",
    "observation",
    "outcome",
    "score",
    "actor",
    "environment",
    "goal_id",
    "task_id",
    "entities",
)
# The recall app's feedback event (it sits above episodes and calls episodes_mark_used);
# a rebuild replays the use marks from these events, so an erased one takes its marks along.
RECALL_FEEDBACK = "recall.feedback"
USE_OUTCOMES = ("success", "partial")
MAX_REASON_CHARS = 2000
SOURCE_REGISTERED = "source.registered"  # written by ledger.services.source_register
SOURCE_CHUNKED = "source.chunked"
MAX_BATCH = 1000
MAX_TEXT_CHARS = 20_000
MAX_ENTITIES = 100
MAX_ENTITY_CHARS = 300
MAX_RELATED = 100
# Column sizes of the labels an episode carries (Episode / ledger Event).
MAX_LABEL_CHARS = {
    "actor": 200,
    "environment": 200,
    "session_id": 200,
    "goal_id": 200,
    "task_id": 200,
    "source_ref": 500,
}
MAX_TITLE_CHARS = 500
# The registration event carries the uri as its source_ref (500 characters).
MAX_URI_CHARS = 500
MAX_MEDIA_TYPE_CHARS = 100
MAX_CONTENT_CHARS = 5_000_000


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


def _text_error(value: Any, limit: int) -> str | None:
    """Why `value` cannot be stored as a text column of at most `limit` characters."""
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > limit:
        return f"at most {limit:,} characters"
    if "\x00" in value:
        return "must not contain NUL (\\u0000) characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _draft_errors(draft: EpisodeDraft) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(draft.occurred_at, datetime) or draft.occurred_at.tzinfo is None:
        errors["occurred_at"] = ["must be a time with a time zone, e.g. 2026-01-31T09:00:00Z"]
    texts = ("summary", "action", "observation")
    for name in texts:
        if message := _text_error(getattr(draft, name), MAX_TEXT_CHARS):
            errors[name] = [message]
    if not any(name in errors for name in texts) and not any(
        getattr(draft, name).strip() for name in texts
    ):
        errors["summary"] = ["an episode needs a summary, an action or an observation"]
    for name, limit in MAX_LABEL_CHARS.items():
        if message := _text_error(getattr(draft, name), limit):
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
    elif any(_text_error(n, MAX_ENTITY_CHARS) for n in draft.entities):
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


def episode_verdict(draft: EpisodeDraft) -> safety.Verdict:
    """piper.safety's verdict on an episode's text (summary, action, observation)."""
    return safety.screen_texts((draft.summary, draft.action, draft.observation))


def safety_payload(verdict: safety.Verdict) -> dict[str, Any]:
    """What a payload records of a verdict, under "safety": only a flagged one (an
    event without the key was screened clean, or written before screening existed)."""
    return {"safety": verdict.as_dict()} if verdict.instruction_like else {}


def instruction_like(payload: dict[str, Any]) -> bool:
    """Whether an event's payload (or one chunk's entry) records an instruction-like verdict."""
    return bool((payload.get("safety") or {}).get("instruction_like"))


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


def _episodes_insert_from_events(where: str, params: Sequence[Any]) -> int:
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
            privacy_class=d.privacy_class,
            retention_class=d.retention_class,
        )
        for d, episode_id in zip(drafts, ids, strict=True)
    ]
    with transaction.atomic():
        events = events_append(agent=agent, drafts=event_drafts)
        _episodes_insert_from_events(
            "e.agent_id = %s AND e.seq BETWEEN %s AND %s",
            [agent.pk, events[0].seq, events[-1].seq],
        )
        episodes = [_stored(episode_from_event(e)) for e in events]
        # robust: a broker outage must not fail a committed write (the backlog sweep catches up).
        transaction.on_commit(lambda: _queue_embedding(agent.pk, ids), robust=True)
    return episodes


def episode_record(*, agent: Agent, draft: EpisodeDraft) -> Episode:
    return episodes_record(agent=agent, drafts=[draft])[0]


def _queue_embedding(agent_id: uuid.UUID, episode_ids: list[uuid.UUID]) -> None:
    """Hand the new rows to the embedding task (episodes.tasks), in batches."""
    from .tasks import queue_episode_embedding

    queue_episode_embedding(agent_id=agent_id, episode_ids=episode_ids)


# -------------------------------------------------------------------- duplicates


def episodes_collapse(
    *,
    agent: Agent,
    canonical_id: uuid.UUID,
    duplicate_ids: Sequence[uuid.UUID],
    reason: str,
    actor: str = "",
) -> list[uuid.UUID]:
    """Group near-duplicates under one canonical episode: each duplicate keeps its row
    and its event (evidence is never deleted), gains `canonical_id`, and searches answer
    with the canonical episode in its place. One `episode.collapsed` event records it
    (the rebuild replays it). Returns the duplicates' ids, in input order.

    InvalidInput for an empty or oversized list, the canonical among its own
    duplicates, or no reason; Unprocessable (unknown_episode_reference) for an id
    that is not this agent's episode; Conflict (already_collapsed) when the
    canonical is itself a duplicate, a duplicate is already one, or a duplicate
    has duplicates of its own; Conflict (not_current) when one of them is a
    retracted or corrected version. Nothing is written on a refusal.
    """
    duplicates = list(dict.fromkeys(duplicate_ids))
    if not duplicates or len(duplicates) > MAX_BATCH:
        raise InvalidInput(
            f"duplicate_ids: 1 to {MAX_BATCH:,} episode ids",
            details={"duplicate_ids": ["empty or too many"]},
        )
    if canonical_id in duplicates:
        raise InvalidInput(
            "duplicate_ids: an episode is not a duplicate of itself",
            details={"duplicate_ids": [str(canonical_id)]},
        )
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(
            f"reason: say why, in 1-{MAX_REASON_CHARS} characters",
            details={"reason": ["required"]},
        )
    with transaction.atomic():
        # The agent's chain, then the rows (the order of _current_version): a
        # retraction or correction is either seen here or comes after the collapse.
        chain_lock(agent=agent)
        wanted = [canonical_id, *duplicates]
        locked = {
            pk: (canonical, status)
            for pk, canonical, status in Episode.objects.select_for_update()
            .filter(agent=agent, pk__in=wanted)
            .order_by("pk")
            .values_list("pk", "canonical_id", "status")
        }
        if missing := [str(i) for i in wanted if i not in locked]:
            raise Unprocessable(
                f"episode {missing[0]} does not exist",
                code="unknown_episode_reference",
                details={"missing_episode_ids": missing},
            )
        # A withdrawn version is no duplicate and answers for no group; its correction
        # is a new episode, compared as one (consolidation.duplicates).
        if withdrawn := [str(i) for i in wanted if locked[i][1] != EpisodeStatus.ACTIVE]:
            raise Conflict(
                f"episode {withdrawn[0]} was retracted or corrected, it is not the current version",
                code="not_current",
                details={"episode_ids": withdrawn},
            )
        rows = {pk: canonical for pk, (canonical, _) in locked.items()}
        if rows[canonical_id] is not None:
            raise Conflict(
                f"episode {canonical_id} is itself a duplicate of {rows[canonical_id]}; "
                "collapse into that one",
                code="already_collapsed",
            )
        taken = [str(d) for d in duplicates if rows[d] is not None]
        taken += [
            str(i)
            for i in Episode.objects.filter(agent=agent, canonical_id__in=duplicates)
            .values_list("canonical_id", flat=True)
            .distinct()
        ]
        if taken:
            raise Conflict(
                f"episode {taken[0]} is already part of a duplicate group",
                code="already_collapsed",
                details={"episode_ids": sorted(set(taken))},
            )
        event = event_append(
            agent=agent,
            event_type=EPISODES_COLLAPSED,
            payload={
                "canonical_id": str(canonical_id),
                "duplicate_ids": [str(d) for d in duplicates],
                "reason": reason,
            },
            actor=actor,
            source_type=SourceType.AGENT_INFERENCE,
        )
        _apply_collapse(event.agent_id, event.payload)
    return duplicates


def episodes_mark_used(
    *, agent: Agent, episode_ids: Sequence[uuid.UUID | str], at: datetime
) -> int:
    """Mark this agent's episodes among `episode_ids` as used at `at` (one more use,
    last use at the later of `at` and the one before): their salience decays from
    there (episodes.salience). Other ids — another agent's, a fact's, unknown —
    are ignored. Called with the recall feedback that reports the use, inside its
    transaction; the feedback's ledger event is what a rebuild replays. Returns
    the number of episodes marked."""
    ids = sorted({str(i) for i in episode_ids})
    if not ids:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Episode._meta.db_table} SET use_count = use_count + 1,"
            " last_used_at = greatest(coalesce(last_used_at, %s), %s)"
            " WHERE agent_id = %s AND id::text = ANY(%s::text[])",
            [at, at, agent.pk, ids],
        )
        return cursor.rowcount


# The use marks of a rebuild: every unredacted feedback that used an episode.
_USE_MARKS_SQL = f"""
UPDATE {Episode._meta.db_table} AS t SET use_count = u.uses, last_used_at = u.last_used
  FROM (SELECT ev.agent_id, used.id, count(*) AS uses, max(ev.recorded_at) AS last_used
          FROM {Event._meta.db_table} ev
          CROSS JOIN LATERAL jsonb_array_elements_text(ev.payload->'used') AS used(id)
         WHERE ev.event_type = '{RECALL_FEEDBACK}' AND ev.redacted_at IS NULL
           AND ev.payload->>'outcome' = ANY(%s) {{where}}
         GROUP BY ev.agent_id, used.id) AS u
 WHERE t.agent_id = u.agent_id AND t.id::text = u.id
"""


def _replay_use_marks(agent: Agent | None) -> None:
    where, params = ("AND ev.agent_id = %s", [agent.pk]) if agent else ("", [])
    with connection.cursor() as cursor:
        cursor.execute(_USE_MARKS_SQL.format(where=where), [list(USE_OUTCOMES), *params])


def _apply_collapse(agent_id: uuid.UUID, payload: dict) -> int:
    """Point the duplicates at their canonical episode, if it (still) exists."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Episode._meta.db_table} SET canonical_id = %s "
            "WHERE agent_id = %s AND id = ANY(%s::uuid[]) AND id <> %s "
            f"AND EXISTS (SELECT 1 FROM {Episode._meta.db_table} WHERE id = %s)",
            [
                payload["canonical_id"],
                agent_id,
                payload["duplicate_ids"],
                payload["canonical_id"],
                payload["canonical_id"],
            ],
        )
        return cursor.rowcount


# ------------------------------------------------------- retraction and correction

# The versions a correction replaced: corrected, pointing at the version that replaces
# them (the row its episode.corrected event recorded), without a vector.
_CORRECTED_SQL = f"""
UPDATE {Episode._meta.db_table} AS o
   SET status = '{EpisodeStatus.CORRECTED}', superseded_by = n.id,
       status_reason = coalesce(ev.payload->>'reason', ''), status_changed_at = ev.recorded_at,
       embedding = NULL, embedding_model = '', embedded_at = NULL
  FROM {Episode._meta.db_table} AS n
  JOIN {Event._meta.db_table} AS ev ON ev.id = n.raw_event_id
 WHERE n.supersedes = o.id AND o.agent_id = n.agent_id AND {{where}}
"""
# The retracted episodes: their status, reason and time from their episode.retracted event.
_RETRACTED_SQL = f"""
UPDATE {Episode._meta.db_table} AS t
   SET status = '{EpisodeStatus.RETRACTED}', status_reason = coalesce(ev.payload->>'reason', ''),
       status_changed_at = ev.recorded_at,
       embedding = NULL, embedding_model = '', embedded_at = NULL
  FROM {Event._meta.db_table} AS ev
 WHERE ev.event_type = '{EPISODE_RETRACTED}' AND ev.redacted_at IS NULL
   AND t.agent_id = ev.agent_id AND t.id = (ev.payload->>'episode_id')::uuid AND {{where}}
"""


def _apply_withdrawals(sql: str, where: str, params: Sequence[Any]) -> int:
    """Apply _CORRECTED_SQL or _RETRACTED_SQL to the rows `where` selects: the writer
    for the one event it appended, a rebuild for every event at once."""
    with connection.cursor() as cursor:
        cursor.execute(sql.format(where=where), params)
        return cursor.rowcount


def _check_reason(reason: Any, *, required: bool) -> str:
    if reason is None and not required:
        return ""
    if not isinstance(reason, str) or (required and not reason.strip()):
        raise InvalidInput(
            "reason: say why, in 1-2,000 characters" if required else "reason: must be a string",
            details={"reason": ["This field is required." if required else "must be a string"]},
        )
    if message := _text_error(reason, MAX_REASON_CHARS):
        raise InvalidInput(f"reason: {message}", details={"reason": [message]})
    return reason


def _current_version(agent: Agent, episode_id: uuid.UUID) -> Episode:
    """The episode, locked after the agent's chain (the order of every append and of
    a rebuild), so its status cannot change before the caller's write: two
    retractions of one episode, or a retraction racing a correction, write once.
    NotFound for another agent's or an unknown id; Conflict not_current for a
    version that was retracted or corrected."""
    chain_lock(agent=agent)
    episode = (
        Episode.objects.select_for_update(no_key=True)
        .filter(agent=agent, pk=episode_id)
        .defer("embedding", "search_vector")
        .first()
    )
    if episode is None:
        raise NotFound(f"episode {episode_id} not found")
    if episode.status != EpisodeStatus.ACTIVE:
        then = (
            f"corrected by {episode.superseded_by}; act on that version"
            if episode.status == EpisodeStatus.CORRECTED
            else "retracted"
        )
        raise Conflict(
            f"episode {episode_id} was {then}, it is not the current version",
            code="not_current",
            details={
                "status": episode.status,
                "superseded_by": str(episode.superseded_by or ""),
            },
        )
    return episode


def episode_retract(
    *,
    agent: Agent,
    episode_id: uuid.UUID,
    reason: str,
    actor: str = "",
    source_type: str = SourceType.AGENT_INFERENCE,
) -> Episode:
    """It did not happen as recorded: the episode is withdrawn. One `episode.retracted`
    event (a correction of the episode's event in the ledger) and, in the same
    transaction, the row's status, reason and time; its vector is cleared. The row
    stays readable by id; search, recall, context and the embedding backlog leave it
    out. Returns the row as it now is.

    InvalidInput for a missing or blank reason; NotFound for an unknown id or
    another agent's; Conflict not_current for a version already retracted or
    corrected (as for facts: a retry with the same Idempotency-Key replays the
    first answer instead). Nothing is written on a refusal.
    """
    reason = _check_reason(reason, required=True)
    with transaction.atomic():
        episode = _current_version(agent, episode_id)
        raw = Event.objects.only("privacy_class", "retention_class").get(pk=episode.raw_event_id)
        event = event_append(
            agent=agent,
            event_type=EPISODE_RETRACTED,
            payload={"episode_id": str(episode.pk), "reason": reason},
            session_id=episode.session_id,
            actor=actor,
            source_type=source_type,
            correction_of_id=episode.raw_event_id,
            # Kept and seen as the episode is (an erasure of it takes this along).
            privacy_class=raw.privacy_class,
            retention_class=raw.retention_class,
        )
        _apply_withdrawals(_RETRACTED_SQL, "ev.id = %s", [event.pk])
    return _reloaded(agent, episode.pk)


def _reloaded(agent: Agent, episode_id: uuid.UUID) -> Episode:
    from .selectors import episode_get

    return episode_get(agent=agent, episode_id=episode_id)


def _corrected_draft(episode: Episode, raw: Event, changes: Mapping[str, Any]) -> EpisodeDraft:
    """The corrected version as a draft: the version's values, `changes` over them."""
    unknown = sorted(set(changes) - set(CORRECTABLE_FIELDS))
    if unknown:
        raise InvalidInput(
            f"{unknown[0]}: cannot be corrected (only {', '.join(CORRECTABLE_FIELDS)})",
            details={name: ["cannot be corrected"] for name in unknown},
        )
    current = {name: getattr(episode, name) for name in CORRECTABLE_FIELDS}
    current["entities"] = list(episode.entities)
    changed = {
        name: value
        for name, value in changes.items()
        if (normalise_entities(value) if name == "entities" and isinstance(value, list) else value)
        != current[name]
    }
    if not changed:
        raise InvalidInput(
            "nothing to correct: send at least one field with a new value"
            + (f" (unchanged: {', '.join(sorted(changes))})" if changes else ""),
            code="nothing_changed",
            details={"non_field_errors": [f"send one of {', '.join(CORRECTABLE_FIELDS)}"]},
        )
    return EpisodeDraft(
        **{**current, **changed},
        session_id=episode.session_id,
        salience=episode.salience,
        confidence=episode.confidence,
        related_ids=list(episode.related_ids),
        source_id=episode.source_id,
        source_type=episode.source_type,
        source_ref=raw.source_ref,
        authority=episode.authority,
        parent_event_id=raw.parent_event_id,
        privacy_class=raw.privacy_class,
        retention_class=raw.retention_class,
    )


def episode_correct(
    *,
    agent: Agent,
    episode_id: uuid.UUID,
    changes: Mapping[str, Any],
    reason: str = "",
) -> Episode:
    """The record was wrong: a corrected version replaces it, keeping the history.

    One `episode.corrected` event, whose payload is the whole new version (the
    version's values with `changes`, among CORRECTABLE_FIELDS, over them) with
    the id it corrects, and in the same transaction a new row built from it,
    `supersedes` the old one; the old row becomes `corrected`, points at it
    (`superseded_by`), keeps its text (readable by id) and loses its vector, so
    only the new text is found. The new version keeps the old one's session,
    links, salience and provenance, is screened by piper.safety, and is embedded
    after commit. Returns the new version.

    InvalidInput for a bad value (as when recording), a field that cannot be
    corrected, or nothing changed (code nothing_changed); NotFound for an unknown
    id or another agent's; Conflict not_current for a version already retracted
    or corrected. Nothing is written on a refusal.
    """
    reason = _check_reason(reason, required=False)
    with transaction.atomic():
        episode = _current_version(agent, episode_id)
        raw = Event.objects.only(
            "source_ref", "parent_event_id", "privacy_class", "retention_class"
        ).get(pk=episode.raw_event_id)
        draft = _corrected_draft(episode, raw, changes)
        _check(agent, [draft])
        new_id = uuid7()
        event = event_append(
            agent=agent,
            event_type=EPISODE_CORRECTED,
            payload={
                **episode_payload(draft, new_id),
                "corrects": str(episode.pk),
                "reason": reason,
            },
            occurred_at=draft.occurred_at,
            session_id=draft.session_id,
            actor=draft.actor,
            source_type=draft.source_type,
            source_ref=draft.source_ref,
            authority=draft.authority,
            confidence=float(draft.confidence),
            parent_event_id=draft.parent_event_id,
            correction_of_id=episode.raw_event_id,
            privacy_class=draft.privacy_class,
            retention_class=draft.retention_class,
        )
        _episodes_insert_from_events("e.id = %s", [event.pk])
        _apply_withdrawals(_CORRECTED_SQL, "n.id = %s", [new_id])
        transaction.on_commit(lambda: _queue_embedding(agent.pk, [new_id]), robust=True)
    return _reloaded(agent, new_id)


# ----------------------------------------------------------------------- sources


def _source_errors(*, title: Any, content: Any, uri: Any, media_type: Any, actor: Any) -> dict:
    errors: dict[str, list[str]] = {}
    if message := _text_error(title, MAX_TITLE_CHARS):
        errors["title"] = [message]
    elif not title.strip():
        errors["title"] = ["a source needs a title"]
    if message := _text_error(content, MAX_CONTENT_CHARS):
        errors["content"] = [message]
    elif not content.strip():
        errors["content"] = [
            "send the document's text; to register a document by its hash alone, "
            "use POST /api/v1/sources"
        ]
    for name, value, limit in (
        ("uri", uri, MAX_URI_CHARS),
        ("media_type", media_type, MAX_MEDIA_TYPE_CHARS),
        ("actor", actor, MAX_LABEL_CHARS["actor"]),
    ):
        if message := _text_error(value, limit):
            errors[name] = [message]
    return errors


def source_ingest(
    *,
    agent: Agent,
    title: str,
    content: str,
    uri: str = "",
    media_type: str = "text/plain",
    actor: str = "",
    privacy_class: str = PrivacyClass.INTERNAL,
    retention_class: str = RetentionClass.STANDARD,
) -> tuple[Source, bool]:
    """Register a document (ledger.services.source_register) and chunk it, in one transaction.

    Idempotent per content: the same content again returns the registered
    source and `created=False`, and writes nothing (a source registered
    earlier without its chunks — through POST /sources — is chunked now).
    Bad input raises InvalidInput naming the field and writes nothing. The
    chunks' embeddings are queued after commit.
    """
    errors = _source_errors(
        title=title, content=content, uri=uri, media_type=media_type, actor=actor
    )
    if errors:
        name, messages = next(iter(errors.items()))
        raise InvalidInput(f"{name}: {messages[0]}", details=errors)
    with transaction.atomic():
        source, created = source_register(
            agent=agent,
            title=title,
            uri=uri,
            content=content,
            media_type=media_type,
            actor=actor,
            privacy_class=privacy_class,
            retention_class=retention_class,
        )
        source_chunk(source=source, actor=actor)
    return source, created


def source_chunk(*, source: Source, actor: str = "") -> list[SourceChunk]:
    """Split a registered source's content into chunks, once.

    Appends one `source.chunked` event (its payload lists every chunk's id and
    span) and inserts the chunks in the same transaction; returns them in
    document order. A source already chunked, or without text, gets nothing
    and returns []. Concurrent calls for one source are serialised by a lock
    on its row, so at most one writes. Embedding is queued after commit.
    """
    with transaction.atomic():
        # Locks the source row, then (in event_append) the agent's chain head —
        # the same order everywhere a source is chunked.
        content = (
            Source.objects.select_for_update(no_key=True)
            .filter(pk=source.pk)
            .values_list("content", flat=True)
            .first()
        )
        if not content or SourceChunk.objects.filter(source_id=source.pk).exists():
            return []
        spans = chunking.split(content)
        if not spans:
            return []
        registered = Event.objects.only("privacy_class", "retention_class").get(
            pk=source.source_event_id
        )
        payload = {
            "source_id": str(source.pk),
            "chunker": chunking.CHUNKER,
            "chunks": [
                {
                    "id": str(uuid7()),
                    "start": s.start,
                    "end": s.end,
                    **safety_payload(safety.screen(content[s.start : s.end])),
                }
                for s in spans
            ],
        }
        event = event_append(
            agent=source.agent,
            event_type=SOURCE_CHUNKED,
            payload=payload,
            actor=actor,
            source_type=SourceType.DOCUMENT,
            source_ref=source.uri if len(source.uri) <= MAX_LABEL_CHARS["source_ref"] else "",
            parent_event_id=source.source_event_id,
            # A document's chunking is kept and seen as its registration is.
            privacy_class=registered.privacy_class,
            retention_class=registered.retention_class,
        )
        chunks = chunks_from_event(event, content=content)
        SourceChunk.objects.bulk_create(chunks)
        ids = [c.pk for c in chunks]
        transaction.on_commit(lambda: _queue_chunk_embedding(ids), robust=True)
    return chunks


def chunks_from_event(event: Event, *, content: str) -> list[SourceChunk]:
    """The SourceChunk rows a `source.chunked` event stands for (the writer and replay)."""
    p = event.payload
    source_id = uuid.UUID(p["source_id"])
    return [
        SourceChunk(
            id=uuid.UUID(c["id"]),
            agent_id=event.agent_id,
            source_id=source_id,
            ordinal=ordinal,
            text=content[c["start"] : c["end"]],
            char_start=c["start"],
            char_end=c["end"],
            instruction_like=instruction_like(c),
            created_at=event.recorded_at,
        )
        for ordinal, c in enumerate(p["chunks"])
    ]


def _queue_chunk_embedding(chunk_ids: list[uuid.UUID]) -> None:
    from .tasks import queue_chunk_embedding

    queue_chunk_embedding(chunk_ids=chunk_ids)


# -------------------------------------------------------------------- embeddings


def _vector_literal(vector: Sequence[float], key: Any) -> str:
    if len(vector) != EMBEDDING_DIM:
        raise ValueError(f"embedding of {key} has {len(vector)} numbers, expected {EMBEDDING_DIM}")
    if not all(math.isfinite(x) for x in vector):
        raise ValueError(f"embedding of {key} holds a non-finite number")
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _embeddings_store(
    model_class: type[Episode] | type[SourceChunk],
    *,
    vectors: Mapping[uuid.UUID, Sequence[float]],
    model: str,
    replace_stale: bool,
) -> int:
    if not model:
        raise ValueError("an embedding needs the name of the model that made it")
    if not vectors:
        return 0
    ids = [str(k) for k in vectors]
    literals = [_vector_literal(v, k) for k, v in vectors.items()]
    # Compare-and-set in one statement: only rows still without a vector (or, when
    # replacing stale ones, with another model's) are written.
    condition = "t.embedding IS NULL"
    params: list[Any] = [model, ids, literals]
    if replace_stale:
        condition += " OR t.embedding_model <> %s"
        params.append(model)
    if model_class is Episode:
        # A version withdrawn while its vector was computed gets none.
        condition = f"({condition}) AND t.status = '{EpisodeStatus.ACTIVE}'"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {model_class._meta.db_table} AS t "
            "SET embedding = v.embedding::vector, embedding_model = %s, embedded_at = now() "
            "FROM unnest(%s::uuid[], %s::text[]) AS v(id, embedding) "
            f"WHERE t.id = v.id AND ({condition})",
            params,
        )
        return cursor.rowcount


def episode_embeddings_store(
    *,
    vectors: Mapping[uuid.UUID, Sequence[float]],
    model: str,
    replace_stale: bool = False,
) -> int:
    """Store episodes' vectors where none is stored yet; returns the rows written.

    A row that already has a vector keeps it (so a re-delivered task writes
    nothing), unless `replace_stale` and it was made by another model. A
    retracted or corrected version gets none.
    ValueError for a vector of the wrong length or with a non-finite number.
    """
    return _embeddings_store(Episode, vectors=vectors, model=model, replace_stale=replace_stale)


def chunk_embeddings_store(
    *,
    vectors: Mapping[uuid.UUID, Sequence[float]],
    model: str,
    replace_stale: bool = False,
) -> int:
    """As episode_embeddings_store, for source chunks."""
    return _embeddings_store(SourceChunk, vectors=vectors, model=model, replace_stale=replace_stale)


def _needing_vectors(queryset, *, model: str, reembed_stale: bool):
    from django.db.models import Q

    wanted = Q(embedding__isnull=True)
    if reembed_stale:
        wanted |= ~Q(embedding_model=model)
    return queryset.filter(wanted)


def episodes_embed(
    *, episode_ids: Iterable[uuid.UUID], embedder=None, reembed_stale: bool = False
) -> int:
    """Compute and store the vectors of those of these episodes that need one.

    Runs in the caller's process (a task, the backfill command, a battery);
    the model runs outside any transaction. Returns the rows written; 0 when
    all already had one. Ids of deleted rows are ignored.
    """
    from piper.embeddings import get_embedder

    embedder = embedder or get_embedder()
    rows = list(
        _needing_vectors(
            Episode.objects.filter(id__in=list(episode_ids), status=EpisodeStatus.ACTIVE),
            model=embedder.name,
            reembed_stale=reembed_stale,
        )
        .order_by("id")
        .only("id", "summary", "action", "observation", "actor", "environment")
    )
    if not rows:
        return 0
    vectors = embedder.embed([row.embedding_text() for row in rows])
    return episode_embeddings_store(
        vectors={row.pk: v for row, v in zip(rows, vectors, strict=True)},
        model=embedder.name,
        replace_stale=reembed_stale,
    )


def chunks_embed(
    *, chunk_ids: Iterable[uuid.UUID], embedder=None, reembed_stale: bool = False
) -> int:
    """As episodes_embed, for source chunks (their text prefixed by the source's title)."""
    from piper.embeddings import get_embedder

    embedder = embedder or get_embedder()
    rows = list(
        _needing_vectors(
            SourceChunk.objects.filter(id__in=list(chunk_ids)),
            model=embedder.name,
            reembed_stale=reembed_stale,
        )
        .select_related("source")
        .order_by("id")
        .only("id", "text", "source__title")
    )
    if not rows:
        return 0
    vectors = embedder.embed([row.embedding_text() for row in rows])
    return chunk_embeddings_store(
        vectors={row.pk: v for row, v in zip(rows, vectors, strict=True)},
        model=embedder.name,
        replace_stale=reembed_stale,
    )


# ----------------------------------------------------------------------- replay

REBUILD_BATCH = 2000


def rebuild_projection(*, agent: Agent | None = None) -> int:
    """Drop episodes and source chunks (one agent's, or all) and replay the ledger.

    Episodes come from `episode.recorded` events and their corrected versions from
    `episode.corrected` events (which also mark the version they replace), the
    withdrawn ones from `episode.retracted` events, chunks from `source.chunked`
    events over their source's content, duplicate groups from `episode.collapsed`
    events, in chain order, use marks from `recall.feedback` events; redacted
    events are skipped (what they recorded is gone). Every column comes back as it was —
    ids, created_at (the event's record time) — and so do the vectors: a
    row rebuilt from the same event has the same text, so its stored vector is
    kept; rows without one are queued for embedding after commit. The agents'
    chain heads are locked for the duration, so no write interleaves. Returns
    the number of events applied.
    """
    agent_clause, agent_params = ("WHERE agent_id = %s", [agent.pk]) if agent else ("", [])
    chunk_events = Event.objects.filter(event_type=SOURCE_CHUNKED, redacted_at__isnull=True)
    if agent is not None:
        chunk_events = chunk_events.filter(agent=agent)
    with transaction.atomic():
        list(
            ChainHead.objects.select_for_update()
            .filter(**({"agent": agent} if agent else {}))
            .order_by("agent_id")
            .values_list("agent_id", flat=True)
        )
        kept_columns = "id, embedding, embedding_model, embedded_at"
        where = agent_clause or "WHERE true"
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS episodes_rebuild_kept")
            cursor.execute(
                "CREATE TEMP TABLE episodes_rebuild_kept ON COMMIT DROP AS "
                f"SELECT 'episode'::text AS kind, {kept_columns} FROM {Episode._meta.db_table} "
                f"{where} AND embedding IS NOT NULL UNION ALL "
                f"SELECT 'chunk', {kept_columns} FROM {SourceChunk._meta.db_table} "
                f"{where} AND embedding IS NOT NULL",
                agent_params * 2,
            )
        scope = {"agent": agent} if agent else {}
        SourceChunk.objects.filter(**scope).delete()
        Episode.objects.filter(**scope).delete()
        applied = _episodes_insert_from_events(
            "e.agent_id = %s" if agent else "true", [agent.pk] if agent else []
        )
        _forget_erased_links(agent_clause, agent_params)
        # A version is corrected or retracted at most once, and only while current,
        # so every event applies at once, in any order.
        _apply_withdrawals(
            _CORRECTED_SQL, "o.agent_id = %s" if agent else "true", [agent.pk] if agent else []
        )
        applied += _apply_withdrawals(
            _RETRACTED_SQL, "ev.agent_id = %s" if agent else "true", [agent.pk] if agent else []
        )
        _replay_use_marks(agent)
        chunks: list[SourceChunk] = []
        for event in chunk_events.order_by("agent_id", "seq").iterator(chunk_size=REBUILD_BATCH):
            content = (
                Source.objects.filter(pk=event.payload["source_id"])
                .values_list("content", flat=True)
                .first()
            )
            if content is None:  # an erased document: nothing to chunk
                continue
            chunks.extend(chunks_from_event(event, content=content))
            applied += 1
            if len(chunks) >= REBUILD_BATCH:
                SourceChunk.objects.bulk_create(chunks)
                chunks = []
        SourceChunk.objects.bulk_create(chunks)
        collapses = Event.objects.filter(event_type=EPISODES_COLLAPSED, redacted_at__isnull=True)
        if agent is not None:
            collapses = collapses.filter(agent=agent)
        for event in collapses.order_by("agent_id", "seq").iterator(chunk_size=REBUILD_BATCH):
            _apply_collapse(event.agent_id, event.payload)
            applied += 1
        with connection.cursor() as cursor:
            for kind, model_class in (("episode", Episode), ("chunk", SourceChunk)):
                cursor.execute(
                    f"UPDATE {model_class._meta.db_table} AS t SET embedding = k.embedding, "
                    "embedding_model = k.embedding_model, embedded_at = k.embedded_at "
                    "FROM episodes_rebuild_kept AS k WHERE k.kind = %s AND t.id = k.id",
                    [kind],
                )
            cursor.execute("DROP TABLE episodes_rebuild_kept")
        agent_id = agent.pk if agent else None
        transaction.on_commit(lambda: _queue_backlog(agent_id), robust=True)
    return applied


def _forget_erased_links(agent_clause: str, agent_params: list) -> None:
    """After a replay: an episode whose payload names an erased document or an
    erased episode keeps no link to it — as the erasure left the live rows."""
    where = f"{agent_clause} AND" if agent_clause else "WHERE"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Episode._meta.db_table} AS t SET source_id = NULL {where} "
            f"t.source_id IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {Source._meta.db_table} s WHERE s.id = t.source_id)",
            agent_params,
        )
        cursor.execute(
            f"UPDATE {Episode._meta.db_table} AS t SET related_ids = ARRAY("
            f"  SELECT r FROM unnest(t.related_ids) AS r WHERE EXISTS "
            f"  (SELECT 1 FROM {Episode._meta.db_table} o WHERE o.id = r)) {where} "
            f"t.related_ids <> '{{}}' AND EXISTS (SELECT 1 FROM unnest(t.related_ids) AS r "
            f"WHERE NOT EXISTS (SELECT 1 FROM {Episode._meta.db_table} o WHERE o.id = r))",
            agent_params,
        )


def _queue_backlog(agent_id: uuid.UUID | None) -> None:
    from .tasks import embed_backlog

    embed_backlog.delay(agent_id=str(agent_id) if agent_id else None, grace_seconds=0)
