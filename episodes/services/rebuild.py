"""Replay: the episodes and source chunks rebuilt from the ledger alone."""

from __future__ import annotations

from django.db import connection, transaction

from ledger.models import ChainHead, Event, Source
from piper.tenancy.models import Agent

from ..models import Episode, SourceChunk
from . import queueing
from .common import EPISODES_COLLAPSED, SOURCE_CHUNKED
from .corrections import CORRECTED_SQL, RETRACTED_SQL, apply_withdrawals
from .duplicates import apply_collapse
from .recording import episodes_insert_from_events
from .sources import chunks_from_event
from .use_marks import replay_use_marks

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
        applied = episodes_insert_from_events(
            "e.agent_id = %s" if agent else "true", [agent.pk] if agent else []
        )
        _forget_erased_links(agent_clause, agent_params)
        # A version is corrected or retracted at most once, and only while current,
        # so every event applies at once, in any order.
        apply_withdrawals(
            CORRECTED_SQL, "o.agent_id = %s" if agent else "true", [agent.pk] if agent else []
        )
        applied += apply_withdrawals(
            RETRACTED_SQL, "ev.agent_id = %s" if agent else "true", [agent.pk] if agent else []
        )
        replay_use_marks(agent)
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
            apply_collapse(event.agent_id, event.payload)
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
        transaction.on_commit(lambda: queueing.queue_backlog(agent_id), robust=True)
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
