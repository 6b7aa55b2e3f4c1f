"""Reads of episodic memory. Every read is scoped to one agent; another agent's row is a 404.

Search (full text + vectors, abstention) is episodes.retrieval; these are the
plain lists and look-ups, and the embedding backlog the tasks work through.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime

from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, QuerySet

from ledger.models import Source
from piper.errors import InvalidInput, NotFound
from piper.tenancy.models import Agent

from .models import Episode, EpisodeStatus, Outcome, SourceChunk


def _with_embedded(queryset: QuerySet, *, include_embedding: bool) -> QuerySet:
    """`embedded` as a column, and the vector itself (1.5 kB a row) only when asked."""
    queryset = queryset.annotate(
        embedded=ExpressionWrapper(Q(embedding__isnull=False), output_field=BooleanField())
    )
    deferred = ["search_vector"] if include_embedding else ["search_vector", "embedding"]
    return queryset.defer(*deferred)


def time_window_check(occurred_after: datetime | None, occurred_before: datetime | None) -> None:
    """InvalidInput when the window [occurred_after, occurred_before) ends before it starts."""
    if occurred_after and occurred_before and occurred_before < occurred_after:
        raise InvalidInput(
            "occurred_before: the time window ends before it starts; "
            "occurred_before must not be earlier than occurred_after",
            code="invalid_time_window",
            details={"occurred_before": ["must not be earlier than occurred_after"]},
        )


def episode_list(
    *,
    agent: Agent,
    actor: str | None = None,
    environment: str | None = None,
    session_id: str | None = None,
    goal_id: str | None = None,
    task_id: str | None = None,
    outcome: str | None = None,
    occurred_after: datetime | None = None,
    occurred_before: datetime | None = None,
    status: str | None = EpisodeStatus.ACTIVE,
    include_embedding: bool = False,
) -> QuerySet[Episode]:
    """This agent's episodes, newest first (occurred_at, then id); exact-match filters,
    `occurred_after` inclusive and `occurred_before` exclusive. Only the active ones
    unless `status` says otherwise (a status, or None for every version). Each row
    carries `embedded`; the vector is deferred unless `include_embedding`."""
    time_window_check(occurred_after, occurred_before)
    if outcome is not None and outcome not in Outcome.values:
        raise InvalidInput(
            f"outcome: must be one of {Outcome.values}",
            details={"outcome": [f"must be one of {Outcome.values}"]},
        )
    if status is not None and status not in EpisodeStatus.values:
        raise InvalidInput(
            f"status: must be one of {EpisodeStatus.values}",
            details={"status": [f"must be one of {EpisodeStatus.values}"]},
        )
    qs = Episode.objects.filter(agent=agent)
    if status is not None:
        qs = qs.filter(status=status)
    for name, value in (
        ("actor", actor),
        ("environment", environment),
        ("session_id", session_id),
        ("goal_id", goal_id),
        ("task_id", task_id),
        ("outcome", outcome),
    ):
        if value is not None:
            qs = qs.filter(**{name: value})
    if occurred_after:
        qs = qs.filter(occurred_at__gte=occurred_after)
    if occurred_before:
        qs = qs.filter(occurred_at__lt=occurred_before)
    return _with_embedded(qs, include_embedding=include_embedding).order_by("-occurred_at", "-id")


def episode_get(*, agent: Agent, episode_id: uuid.UUID, include_embedding: bool = False) -> Episode:
    """One episode of this agent, whatever its status (a retracted or corrected version
    says so); another agent's raises NotFound like a missing one."""
    episode = (
        _with_embedded(Episode.objects.filter(agent=agent), include_embedding=include_embedding)
        .filter(pk=episode_id)
        .first()
    )
    if episode is None:
        raise NotFound(f"episode {episode_id} not found")
    return episode


def source_get(*, agent: Agent, source_id: uuid.UUID) -> Source:
    """One source of this agent (without its content); NotFound for another agent's."""
    source = Source.objects.filter(agent=agent, pk=source_id).defer("content").first()
    if source is None:
        raise NotFound(f"source {source_id} not found")
    return source


def chunk_list(
    *, agent: Agent, source_id: uuid.UUID, include_embedding: bool = False
) -> QuerySet[SourceChunk]:
    """A source's chunks in document order; NotFound when the source is not this agent's."""
    source_get(agent=agent, source_id=source_id)
    qs = SourceChunk.objects.filter(agent=agent, source_id=source_id)
    return _with_embedded(qs, include_embedding=include_embedding).order_by("ordinal")


def chunk_count(*, source: Source) -> int:
    return SourceChunk.objects.filter(source_id=source.pk).count()


# ----------------------------------------------------------- the tasks' backlog


def _created_before_id(moment: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of `moment`'s millisecond: ids below it were made earlier."""
    millis = int(moment.timestamp() * 1000)
    return uuid.UUID(int=(millis & ((1 << 48) - 1)) << 80)


def embedding_backlog(
    *,
    kind: str,
    agent_id: uuid.UUID | None = None,
    created_before: datetime | None = None,
    stale_model: str | None = None,
    after_id: uuid.UUID | None = None,
) -> QuerySet:
    """Ids of episodes ('episodes') or chunks ('chunks') without a vector — or, with
    `stale_model`, with one made by another model — in id order (time order:
    ids are UUIDv7). Reads the partial index of rows without a vector."""
    model = {"episodes": Episode, "chunks": SourceChunk}[kind]
    wanted = Q(embedding__isnull=True)
    if stale_model:
        wanted |= ~Q(embedding_model=stale_model)
    qs = model.objects.filter(wanted)
    if model is Episode:
        qs = qs.filter(status=EpisodeStatus.ACTIVE)  # a withdrawn version has no vector
    if agent_id is not None:
        qs = qs.filter(agent_id=agent_id)
    if created_before is not None:
        qs = qs.filter(id__lt=_created_before_id(created_before))
    if after_id is not None:
        qs = qs.filter(id__gt=after_id)
    return qs.order_by("id").values_list("id", flat=True)


def sources_registered_unchunked(
    *, agent_id: uuid.UUID, event_ids: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """Sources with text registered by these of the agent's events, not chunked; by id."""
    return list(
        Source.objects.filter(agent_id=agent_id, source_event_id__in=list(event_ids))
        .exclude(content="")
        .filter(~Exists(SourceChunk.objects.filter(source_id=OuterRef("pk"))))
        .order_by("id")
        .values_list("id", flat=True)
    )


def sources_unchunked(
    *,
    agent_id: uuid.UUID | None = None,
    created_before: datetime | None = None,
    since: datetime | None = None,
) -> Iterator[Source]:
    """Sources with text (not only whitespace) and no chunks, oldest first."""
    qs = (
        Source.objects.exclude(content="")
        .filter(content__regex=r"\S")
        .filter(~Exists(SourceChunk.objects.filter(source_id=OuterRef("pk"))))
    )
    if agent_id is not None:
        qs = qs.filter(agent_id=agent_id)
    if created_before is not None:
        qs = qs.filter(id__lt=_created_before_id(created_before))
    if since is not None:
        qs = qs.filter(id__gte=_created_before_id(since))
    return qs.select_related("agent").defer("content").order_by("id").iterator(chunk_size=100)
