"""Rows for the retrieval tests: episodes through the real service, vectors set directly.

Synthetic vectors are unit vectors mostly along one "topic" axis, so which row
is nearest to a query is known without the embedding model.
"""

from __future__ import annotations

import contextlib
import math
import random
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from episodes.models import EMBEDDING_DIM, Episode
from episodes.services import EpisodeDraft, episodes_record

SYNTHETIC_MODEL = "test/synthetic-unit-vectors"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def topic(axis: int, *, noise: float = 0.0, seed: int = 0, mix: dict[int, float] | None = None):
    """A unit vector along `axis` (plus other axes in `mix`, plus seeded noise)."""
    rng = random.Random(seed)
    vector = [rng.gauss(0, noise) if noise else 0.0 for _ in range(EMBEDDING_DIM)]
    vector[axis] += 1.0
    for other, weight in (mix or {}).items():
        vector[other] += weight
    return unit(vector)


def record(agent, *, embedding=None, model=SYNTHETIC_MODEL, **fields) -> Episode:
    fields.setdefault("occurred_at", T0)
    episode = episodes_record(agent=agent, drafts=[EpisodeDraft(**fields)])[0]
    if embedding is not None:
        set_embedding(episode, embedding, model=model)
    return episode


def set_embedding(row, vector, *, model=SYNTHETIC_MODEL) -> None:
    type(row).objects.filter(pk=row.pk).update(
        embedding=vector, embedding_model=model, embedded_at=timezone.now()
    )


def bulk_episodes(agent, count: int, *, start: datetime = T0, prefix: str = "routine") -> None:
    """`count` episodes for `agent` through episodes_record (1,000 a call), one a minute."""
    for first in range(0, count, 1000):
        drafts = [
            EpisodeDraft(
                occurred_at=start + timedelta(minutes=i),
                summary=f"{prefix} episode {i}",
                actor=f"actor-{i % 7}",
            )
            for i in range(first, min(first + 1000, count))
        ]
        episodes_record(agent=agent, drafts=drafts)


@contextlib.contextmanager
def hnsw_built_after():
    """Writing vectors for thousands of rows: the HNSW index is dropped first and
    built once after: inserting thousands of rows into the m 32 graph one by
    one costs the suite many times what one build over them does."""
    index = next(i for i in Episode._meta.indexes if i.name == "episodes_embedding_hnsw")
    with connection.schema_editor() as editor:
        editor.remove_index(Episode, index)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET maintenance_work_mem = '512MB'")
        with connection.schema_editor() as editor:
            editor.add_index(Episode, index)
        with connection.cursor() as cursor:
            cursor.execute("RESET maintenance_work_mem")


def clustered_vectors(agents, *, clusters: int = 50, noise: float = 0.5, seed: float = 0.42):
    """Give every episode of `agents` a unit vector near one of `clusters` random
    centres (picked by a hash of its time and summary, not of its random id, so
    that every run builds the same rows), some rows nearer their centre than
    others, in one UPDATE. Returns the centres."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(%s)", [seed])
        cursor.execute(
            """
            CREATE TEMP TABLE retrieval_centres ON COMMIT DROP AS
            WITH shared AS (
                SELECT array_agg(random_normal() ORDER BY d) AS v
                  FROM generate_series(1, %(dim)s) d
            )
            -- Centres share a direction (cosine ~0.3 between two), as sentence
            -- embeddings do: orthogonal clusters leave HNSW's graph in islands.
            SELECT c, array_agg(random_normal() + 0.65 * shared.v[d] ORDER BY d) AS v
              FROM generate_series(0, %(clusters)s - 1) c CROSS JOIN generate_series(1, %(dim)s) d
             CROSS JOIN shared
             GROUP BY c
            """,
            {"clusters": clusters, "dim": EMBEDDING_DIM},
        )
        cursor.execute(
            """
            UPDATE episodes_episode e
               SET embedding = (
                       SELECT l2_normalize(array_agg(
                                  ce.v[d] + %(noise)s * spread * random_normal() ORDER BY d
                              )::vector)
                         FROM generate_series(1, %(dim)s) d,
                              -- How typical of its cluster a row is: 0.3-1.3 x the noise
                              -- (time and summary hashed in the other order than for
                              -- the cluster, so that the two do not go together).
                              LATERAL (SELECT 0.3 + (abs(hashtext(e.summary || e.occurred_at::text))
                                                     %% 997) / 997.0 AS spread) s),
                   embedding_model = %(model)s, embedded_at = now()
              FROM retrieval_centres ce
             WHERE e.agent_id = ANY(%(agents)s::uuid[])
               AND ce.c = abs(hashtext(e.occurred_at::text || e.summary)) %% %(clusters)s
            """,
            {
                "noise": noise,
                "dim": EMBEDDING_DIM,
                "model": SYNTHETIC_MODEL,
                "agents": [a.pk for a in agents],
                "clusters": clusters,
            },
        )
        cursor.execute("SELECT c, v FROM retrieval_centres ORDER BY c")
        return [unit(list(v)) for _, v in cursor.fetchall()]


def drop_vector_graphs() -> None:
    """What the graph builders made (episodes.agent_graphs, episodes.actor_graphs):
    indexes and tables outlive the rows a transactional test's teardown truncates."""
    from episodes.agent_graphs import PREFIX
    from episodes.models import ACTOR_VECTOR_TABLE

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s",
            [ACTOR_VECTOR_TABLE + "\\_%"],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP TABLE IF EXISTS {name} CASCADE")
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE %s", [PREFIX + "%"])
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP INDEX IF EXISTS {name}")
