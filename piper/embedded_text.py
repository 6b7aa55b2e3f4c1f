"""Text found by its words and by its vector: what Episode, SourceChunk and FactText share.

Each such row carries a full-text vector the database generates from its text
(each model has its own SQL for it) and a pgvector embedding a task computes
after commit; a row without a vector yet is still found by full text.
`EmbeddedText` holds the embedding columns, the helpers below the constraint
and indexes every such table has.
"""

from __future__ import annotations

from django.contrib.postgres.search import SearchVectorField
from django.db import models
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
