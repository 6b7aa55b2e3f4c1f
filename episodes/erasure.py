"""Erasure in episodic memory: episodes, documents and their chunks (DESIGN §1, §8).

Called by the forgetting app, inside its transaction, with the events being
erased. A document goes whole: its registration and its chunking are one
piece of evidence, and a source left without chunks would be chunked again
by the embedding backlog. Episodes that summarise an erased event go with it,
and so does every version of an episode: erasing one version (the recorded one
or a correction) erases the versions before and after it, and its retraction.
Vectors and full-text vectors live in the rows and go with them; the actor
graphs' copies go by their foreign key.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL

from ledger.erasure import ErasureScope, finding
from ledger.models import Event, Source
from piper.embedded_text import vector_literal
from piper.lookups import uuid_array
from piper.tenancy.models import Agent

from .actor_graphs import actor_graph_drop
from .models import ActorGraph, ActorVector, Episode, SourceChunk
from .services import EPISODE_CORRECTED, EPISODE_ROW_EVENTS, SOURCE_CHUNKED

EPISODES = "episodes"
SOURCES = "sources"
CHUNKS = "source_chunks"
ACTOR_VECTORS = "episodes.actor_vectors"
ACTOR_GRAPHS = "episodes.actor_graphs"
EPISODE_LINKS = "episodes.links"  # surviving episodes whose links to erased rows were cut


def events_naming(*, agent: Agent, names: Iterable[str]) -> set[uuid.UUID]:
    """The recording events of the agent's episodes that name any of `names` as an entity."""
    lowered = sorted({" ".join(n.split()).lower() for n in names if n.strip()})
    if not lowered:
        return set()
    return set(
        Episode.objects.filter(agent=agent, entities__overlap=lowered).values_list(
            "raw_event_id", flat=True
        )
    )


def events_of_sources(*, agent: Agent, source_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """Every event that made these documents: their registration and chunking."""
    registered = set(
        Source.objects.filter(agent=agent, pk__any=list(source_ids)).values_list(
            "source_event_id", flat=True
        )
    )
    if not registered:
        return set()
    chunked = (
        Event.objects.filter(
            agent=agent, event_type=SOURCE_CHUNKED, parent_event_id__any=registered
        )
        .order_by()
        .values_list("id", flat=True)
    )
    return registered | set(chunked)


def expand(*, agent: Agent, event_ids: set[uuid.UUID], staged: RawSQL) -> set[uuid.UUID]:
    """The events that must go with `event_ids` (also `staged`, a subquery of
    them): whole documents, the episodes that summarise an erased event (their
    parent), and the version an erased correction replaced (the later versions
    and a retraction name the erased event as the one they correct: the
    forgetting app takes them along)."""
    source_ids = set(
        Source.objects.filter(agent=agent, source_event_id__in=staged).values_list("pk", flat=True)
    )
    for payload in (
        Event.objects.filter(
            agent=agent, pk__in=staged, event_type=SOURCE_CHUNKED, redacted_at__isnull=True
        )
        .order_by()
        .values_list("payload", flat=True)
    ):
        source_ids.add(uuid.UUID(payload["source_id"]))
    more = events_of_sources(agent=agent, source_ids=source_ids)
    more |= set(
        Event.objects.filter(
            agent=agent, event_type__in=EPISODE_ROW_EVENTS, parent_event_id__in=staged
        )
        .order_by()
        .values_list("id", flat=True)
    )
    more |= set(
        Event.objects.filter(
            agent=agent,
            pk__in=staged,
            event_type=EPISODE_CORRECTED,
            correction_of_id__isnull=False,
        )
        .order_by()
        .values_list("correction_of_id", flat=True)
    )
    return more - event_ids


def erase(scope: ErasureScope) -> None:
    """Remove what `scope.event_ids` made here; note every removed id in the scope."""
    agent, erased = scope.agent, scope.erased_events()

    sources = list(
        Source.objects.filter(agent=agent, source_event_id__in=erased).only(
            "id", "title", "content"
        )
    )
    source_ids = [s.pk for s in sources]
    if sources:
        for source in sources:
            scope.add_texts([source.title])
        chunks = SourceChunk.objects.filter(agent=agent, source_id__any=source_ids)
        for text, vector in chunks.values_list("text", "embedding")[:200]:
            scope.add_texts([text])
            scope.add_vector(SourceChunk._meta.db_table, vector)
        scope.note_removed(CHUNKS, chunks.order_by("id").values_list("id", flat=True))
        _delete(SourceChunk, scope.removed_ids(CHUNKS))
        linked = Episode.objects.filter(agent=agent, source_id__any=source_ids)
        scope.note_removed(EPISODE_LINKS, linked.values_list("id", flat=True))
        linked.update(source=None)
        scope.note_removed(SOURCES, source_ids)
        Source.objects.filter(pk__any=source_ids).delete()

    episodes = Episode.objects.filter(agent=agent, raw_event_id__in=erased)
    erased = list(episodes.order_by("id").values_list("id", flat=True))
    if erased:
        for summary, action, observation, vector in episodes.values_list(
            "summary", "action", "observation", "embedding"
        )[:200]:
            scope.add_texts([summary, action, observation])
            scope.add_vector(Episode._meta.db_table, vector)
        actors = set(episodes.exclude(actor="").values_list("actor", flat=True).distinct())
        scope.note_removed(EPISODES, erased)
        _delete(Episode, erased)  # the actor graphs' copies go by their foreign key
        # An actor whose every episode went loses its own graph (its leaf is
        # named by the actor in the catalog).
        for actor in actors:
            if Episode.objects.filter(agent=agent, actor=actor).exists():
                continue
            scope.actors.add(actor)
            if (dropped := actor_graph_drop(agent_id=agent.pk, actor=actor)) is not None:
                scope.note_removed(ACTOR_GRAPHS, [dropped])
        # Surviving episodes that pointed at an erased one forget the link.
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Episode._meta.db_table} SET related_ids = ARRAY("
                "  SELECT r FROM unnest(related_ids) AS r WHERE r <> ALL(%s::uuid[]))"
                " WHERE agent_id = %s AND related_ids <> '{}'"
                " AND related_ids && %s::uuid[] RETURNING id",
                [uuid_array(erased), agent.pk, uuid_array(erased)],
            )
            scope.note_removed(EPISODE_LINKS, [row[0] for row in cursor.fetchall()])
            # Duplicates of an erased canonical episode stand on their own again
            # (as a rebuild leaves them: a collapse needs its canonical episode).
            cursor.execute(
                f"UPDATE {Episode._meta.db_table} SET canonical_id = NULL "
                "WHERE agent_id = %s AND canonical_id = ANY(%s::uuid[]) RETURNING id",
                [agent.pk, uuid_array(erased)],
            )
            scope.note_removed(EPISODE_LINKS, [row[0] for row in cursor.fetchall()])


def _delete(model, ids: list) -> None:
    """One statement, no rows loaded into Python (the ORM would fetch each, vector included)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {model._meta.db_table} WHERE id = ANY(%s::uuid[])", [uuid_array(ids)]
        )


def residue(scope: ErasureScope) -> list[dict]:
    """What of the erased material is still here: rows made from an erased event,
    links to an erased row, copies of an erased row's vector. Erased words or
    vectors found in a row made from surviving evidence are that evidence's
    own: counted as 'kept_elsewhere', not as residue."""
    agent, erased = scope.agent, scope.erased_events()
    erased_episodes = scope.removed_ids(EPISODES)
    erased_sources = scope.removed_ids(SOURCES)
    findings = [
        finding(
            EPISODES,
            "made_from_erased_event",
            Episode.objects.filter(agent=agent, raw_event_id__in=erased),
        ),
        finding(
            SOURCES,
            "made_from_erased_event",
            Source.objects.filter(agent=agent, source_event_id__in=erased),
        ),
        finding(
            CHUNKS,
            "of_erased_source",
            SourceChunk.objects.filter(agent=agent, source_id__any=erased_sources),
        ),
        _linkedfinding(agent, erased_episodes),
        finding(
            EPISODES,
            "links_to_erased_document",
            Episode.objects.filter(agent=agent, source_id__any=erased_sources),
        ),
        finding(
            EPISODES,
            "version_of_erased_episode",
            Episode.objects.filter(agent=agent).filter(
                Q(supersedes__any=erased_episodes) | Q(superseded_by__any=erased_episodes)
            ),
        ),
        finding(
            EPISODES,
            "duplicate_of_erased_episode",
            Episode.objects.filter(agent=agent, canonical_id__any=erased_episodes),
        ),
        finding(
            ACTOR_GRAPHS,
            "of_erased_actor",
            ActorGraph.objects.filter(pk__any=scope.removed_ids(ACTOR_GRAPHS)),
        ),
        finding(
            ACTOR_VECTORS,
            "copy_of_erased_row",
            ActorVector.objects.filter(agent_id=agent.pk, episode_id__any=erased_episodes),
        ),
    ]
    for model in (Episode, SourceChunk):
        table = model._meta.db_table
        same = _same_vectors(agent, table, [v for t, v in scope.vectors if t == table])
        if model is Episode:
            live = set(
                Episode.objects.filter(pk__any=same, raw_event__redacted_at__isnull=True)
                .exclude(raw_event_id__in=erased)
                .values_list("pk", flat=True)
            )
        else:
            live = set(
                SourceChunk.objects.filter(pk__any=same)
                .exclude(source_id__any=erased_sources)
                .values_list("pk", flat=True)
            )
        left = [pk for pk in same if pk not in live]
        findings.append(
            {
                "projection": EPISODES if model is Episode else CHUNKS,
                "check": "erased_vector",
                "found": len(left),
                "sample": [str(pk) for pk in left[:10]],
                "kept_elsewhere": len(live),
            }
        )
    findings.append(_wordsfinding(scope))
    return findings


def _linkedfinding(agent: Agent, erased_episodes: list) -> dict:
    """Surviving episodes still linking to an erased one (the partial index on links)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {Episode._meta.db_table} WHERE agent_id = %s "
            "AND related_ids <> '{}' AND related_ids && %s::uuid[] LIMIT 10",
            [agent.pk, uuid_array(erased_episodes)],
        )
        sample = [str(row[0]) for row in cursor.fetchall()]
    return {
        "projection": EPISODES,
        "check": "links_to_erased_row",
        "found": len(sample),
        "sample": sample,
    }


def _same_vectors(agent: Agent, table: str, vectors: list[list[float]]) -> list[uuid.UUID]:
    """Rows of the agent's in `table` whose vector equals one of `vectors`: the
    nearest neighbours through the vector index, kept when at distance ~0."""
    if not vectors:
        return []
    literals = [vector_literal(vector) for vector in vectors]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT near.id FROM unnest(%s::text[]) AS probe(v), LATERAL ("
            f"  SELECT id, embedding <=> probe.v::vector AS d FROM {table}"
            "   WHERE agent_id = %s AND embedding IS NOT NULL"
            "   ORDER BY embedding <=> probe.v::vector LIMIT 5) AS near WHERE near.d < 1e-6",
            [literals, agent.pk],
        )
        return [row[0] for row in cursor.fetchall()]


def _wordsfinding(scope: ErasureScope) -> dict:
    """Erased words in the agent's episodes (full-text index, then the exact
    string). A row made from an erased event is residue (the check above
    counts it); any other row holds them as its own evidence."""
    probes = scope.text_probes()
    kept = 0
    if probes:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM unnest(%s::text[]) AS probe(p), LATERAL ("
                f"  SELECT 1 FROM {Episode._meta.db_table} WHERE agent_id = %s"
                "   AND search_vector @@ phraseto_tsquery('english', probe.p)"
                "   AND strpos(summary || ' ' || action || ' ' || observation, probe.p) > 0"
                "   LIMIT 100) AS hits",
                [probes, scope.agent.pk],
            )
            kept = cursor.fetchone()[0]
    return {"projection": EPISODES, "check": "erased_words", "found": 0, "kept_elsewhere": kept}
