"""Text found by its words and by its vector: what Episode, SourceChunk and FactText share.

Each such row carries a full-text vector the database generates from its text
(each model has its own SQL for it) and a pgvector embedding a task computes
after commit; a row without a vector yet is still found by full text.
`EmbeddedText` holds the embedding columns, the helpers below the constraint
and indexes every such table has, and `embeddings_store` writes the vectors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib.postgres.search import SearchVectorField
from django.db import connection, models
from django.db.models.expressions import RawSQL
from pgvector.django import HnswIndex, VectorField

EMBEDDING_DIM = 384  # == settings.PIPER_EMBEDDING_DIM (checked by the embedder)


class EmbeddedText(models.Model):
    """The vector of a row's text, and which model made it when."""

    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    embedded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


def search_vector_field(tsvector_sql: str) -> models.GeneratedField:
    """The full-text vector, generated and stored by the database from `tsvector_sql`
    (so it can never drift from the text columns)."""
    return models.GeneratedField(
        expression=RawSQL(tsvector_sql, ()),
        output_field=SearchVectorField(),
        db_persist=True,
    )


def embedding_has_model(name: str) -> models.CheckConstraint:
    """A stored vector always says which model made it."""
    return models.CheckConstraint(
        condition=models.Q(embedding__isnull=True) | ~models.Q(embedding_model=""), name=name
    )


def embedding_hnsw(name: str, *, m: int = 16, ef_construction: int = 64) -> HnswIndex:
    """The cosine HNSW graph over the vectors (pgvector's default m and ef_construction)."""
    return HnswIndex(
        name=name,
        fields=["embedding"],
        m=m,
        ef_construction=ef_construction,
        opclasses=["vector_cosine_ops"],
    )


def unembedded_index(name: str) -> models.Index:
    """The embed tasks' backlog: an agent's rows still waiting for a vector."""
    return models.Index(
        fields=["agent", "id"], name=name, condition=models.Q(embedding__isnull=True)
    )


def vector_literal(vector: Sequence[float]) -> str:
    """A vector in pgvector's text form, '[x,y,…]', for a `%s::vector` parameter."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def embeddings_store(
    model_class: type[EmbeddedText],
    *,
    vectors: Mapping[Any, Sequence[float]],
    model: str,
    replace_stale: bool = False,
    texts: Mapping[Any, str] | None = None,
    only_where: str = "",
) -> int:
    """Store vectors by row id, in one UPDATE … FROM unnest(…); returns the rows written.

    Compare-and-set: a row that already has a vector keeps it (so a re-delivered
    task writes nothing), unless `replace_stale` and another model made it. With
    `texts`, a row is written only if its `text` still holds the text its vector
    was computed from. `only_where` is a further SQL condition on the row `t`.
    ValueError for an empty model name, or a vector of the wrong length or with a
    non-finite number.
    """
    if not model:
        raise ValueError("an embedding needs the name of the model that made it")
    if not vectors:
        return 0
    dimensions = model_class._meta.get_field("embedding").dimensions
    literals = []
    for key, vector in vectors.items():
        if len(vector) != dimensions:
            raise ValueError(f"embedding of {key} has {len(vector)} numbers, expected {dimensions}")
        if not all(math.isfinite(x) for x in vector):
            raise ValueError(f"embedding of {key} holds a non-finite number")
        literals.append(vector_literal(vector))
    columns, arrays = ["id", "embedding"], [[str(k) for k in vectors], literals]
    if texts is not None:
        columns.append("text")
        arrays.append([texts[k] for k in vectors])
    stale = " OR t.embedding_model <> %s" if replace_stale else ""
    condition = f"(t.embedding IS NULL{stale})"
    if texts is not None:
        condition += " AND t.text = v.text"
    if only_where:
        condition += f" AND ({only_where})"
    unnest = ", ".join(["%s::uuid[]"] + ["%s::text[]"] * (len(arrays) - 1))
    params: list[Any] = [model, *arrays] + ([model] if replace_stale else [])
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {model_class._meta.db_table} AS t "
            "SET embedding = v.embedding::vector, embedding_model = %s, embedded_at = now() "
            f"FROM unnest({unnest}) AS v({', '.join(columns)}) "
            f"WHERE t.id = v.id AND {condition}",
            params,
        )
        return cursor.rowcount
