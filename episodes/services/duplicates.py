"""Collapsing near-duplicates under one canonical episode; the evidence stays."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db import connection, transaction

from ledger.services import chain_lock, event_append
from piper.errors import Conflict, InvalidInput, Unprocessable
from piper.provenance import SourceType
from piper.tenancy.models import Agent

from ..models import Episode, EpisodeStatus
from .common import EPISODES_COLLAPSED, MAX_BATCH, MAX_REASON_CHARS


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
        # The agent's chain, then the rows (the order of corrections._current_version): a
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
        apply_collapse(event.agent_id, event.payload)
    return duplicates


def apply_collapse(agent_id: uuid.UUID, payload: dict) -> int:
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
