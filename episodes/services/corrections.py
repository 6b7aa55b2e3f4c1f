"""Retraction and correction: a version is withdrawn, or replaced by a corrected
one built from its `episode.corrected` event; the old row stays readable by id."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, transaction

from ledger.models import Event
from ledger.services import chain_lock, event_append
from piper.errors import Conflict, InvalidInput, NotFound
from piper.ids import uuid7
from piper.provenance import SourceType
from piper.tenancy.models import Agent

from ..models import Episode, EpisodeStatus
from . import queueing
from .common import EPISODE_CORRECTED, EPISODE_RETRACTED, MAX_REASON_CHARS, text_error
from .recording import (
    EpisodeDraft,
    check_drafts,
    episode_payload,
    episodes_insert_from_events,
    normalise_entities,
)

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

# The versions a correction replaced: corrected, pointing at the version that replaces
# them (the row its episode.corrected event recorded), without a vector.
CORRECTED_SQL = f"""
UPDATE {Episode._meta.db_table} AS o
   SET status = '{EpisodeStatus.CORRECTED}', superseded_by = n.id,
       status_reason = coalesce(ev.payload->>'reason', ''), status_changed_at = ev.recorded_at,
       embedding = NULL, embedding_model = '', embedded_at = NULL
  FROM {Episode._meta.db_table} AS n
  JOIN {Event._meta.db_table} AS ev ON ev.id = n.raw_event_id
 WHERE n.supersedes = o.id AND o.agent_id = n.agent_id AND {{where}}
"""
# The retracted episodes: their status, reason and time from their episode.retracted event.
RETRACTED_SQL = f"""
UPDATE {Episode._meta.db_table} AS t
   SET status = '{EpisodeStatus.RETRACTED}', status_reason = coalesce(ev.payload->>'reason', ''),
       status_changed_at = ev.recorded_at,
       embedding = NULL, embedding_model = '', embedded_at = NULL
  FROM {Event._meta.db_table} AS ev
 WHERE ev.event_type = '{EPISODE_RETRACTED}' AND ev.redacted_at IS NULL
   AND t.agent_id = ev.agent_id AND t.id = (ev.payload->>'episode_id')::uuid AND {{where}}
"""


def apply_withdrawals(sql: str, where: str, params: Sequence[Any]) -> int:
    """Apply CORRECTED_SQL or RETRACTED_SQL to the rows `where` selects: the writer
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
    if message := text_error(reason, MAX_REASON_CHARS):
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
        apply_withdrawals(RETRACTED_SQL, "ev.id = %s", [event.pk])
    return _reloaded(agent, episode.pk)


def _reloaded(agent: Agent, episode_id: uuid.UUID) -> Episode:
    from ..selectors import episode_get

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
        check_drafts(agent, [draft])
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
        episodes_insert_from_events("e.id = %s", [event.pk])
        apply_withdrawals(CORRECTED_SQL, "n.id = %s", [new_id])
        transaction.on_commit(lambda: queueing.queue_embedding(agent.pk, [new_id]), robust=True)
    return _reloaded(agent, new_id)
