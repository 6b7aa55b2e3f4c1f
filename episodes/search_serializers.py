"""Request and response shapes of the search API (episodes.search_apis).

Inputs are strict: unknown parameters and bad values are a 400, never ignored.
Rows are serialized by the episodes API's own serializers, so a hit shows an
episode or chunk exactly as GET /episodes/{id} and /sources/{id}/chunks do.
"""

from __future__ import annotations

from rest_framework import serializers

from piper.api.serializers import (
    CommaListField,
    QueryDateTimeField,
    StrictSerializer,
    api_datetime,
)

from .models import Outcome
from .retrieval import MAX_LIMIT, MAX_QUERY_CHARS, SearchResult
from .serializers import ChunkOutputSerializer, EpisodeOutputSerializer

Q_HELP = (
    f"What to look for, in plain words (at most {MAX_QUERY_CHARS:,} characters). "
    "Matched by meaning (embeddings) and by words (full text)."
)
ABSTAIN_HELP = "false: always return the best hits, even when the evidence is below the threshold."


class EpisodeSearchQuerySerializer(StrictSerializer):
    q = serializers.CharField(max_length=MAX_QUERY_CHARS, help_text=Q_HELP)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, required=False, default=10)
    actor = serializers.CharField(required=False, help_text="Exact match.")
    environment = serializers.CharField(required=False, help_text="Exact match.")
    session_id = serializers.CharField(required=False, help_text="Exact match.")
    goal_id = serializers.CharField(required=False, help_text="Exact match.")
    task_id = serializers.CharField(required=False, help_text="Exact match.")
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False)
    occurred_after = QueryDateTimeField(required=False, help_text="Inclusive.")
    occurred_before = QueryDateTimeField(
        required=False, help_text="Exclusive; 400 when earlier than occurred_after."
    )
    entities = CommaListField(
        child=serializers.CharField(max_length=300),
        required=False,
        max_length=100,
        help_text="Comma-separated entity names: episodes mentioning them rank higher "
        "(a boost, not a filter).",
    )
    abstain = serializers.BooleanField(required=False, default=True, help_text=ABSTAIN_HELP)


class ChunkSearchQuerySerializer(StrictSerializer):
    q = serializers.CharField(max_length=MAX_QUERY_CHARS, help_text=Q_HELP)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, required=False, default=10)
    source_id = serializers.UUIDField(
        required=False, help_text="Only this source's chunks (404 when it is not yours)."
    )
    abstain = serializers.BooleanField(required=False, default=True, help_text=ABSTAIN_HELP)


SIGNALS_HELP = (
    "What placed it: text_rank / text_position (IDF-weighted full text), "
    "vector_similarity / vector_position (cosine), recency / recency_position, "
    "shared_entities / entities_position, coverage (IDF-weighted share of the query's "
    "words it contains), evidence (what abstention compares with the threshold), embedded."
)


class _Signals(serializers.DictField):
    child = serializers.FloatField(allow_null=True)


class EpisodeHitSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="'episode'")
    score = serializers.FloatField(help_text="Fused score (reciprocal rank fusion).")
    signals = _Signals(help_text=SIGNALS_HELP)
    episode = EpisodeOutputSerializer()


class ChunkHitSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="'chunk'")
    score = serializers.FloatField(help_text="Fused score (reciprocal rank fusion).")
    signals = _Signals(help_text=SIGNALS_HELP)
    chunk = ChunkOutputSerializer()


class SessionGroupSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    first_occurred_at = serializers.DateTimeField()
    last_occurred_at = serializers.DateTimeField()
    best_score = serializers.FloatField()
    episode_ids = serializers.ListField(
        child=serializers.UUIDField(), help_text="Its hits, in time order."
    )


class SourceGroupSerializer(serializers.Serializer):
    source_id = serializers.UUIDField()
    best_score = serializers.FloatField()
    chunk_ids = serializers.ListField(
        child=serializers.UUIDField(), help_text="Its hits, in document order."
    )


class _ResultFields(serializers.Serializer):
    abstained = serializers.BooleanField(
        help_text="true: no supporting memory — the best evidence is below the threshold; "
        "hits is empty and near_misses holds the best candidates."
    )
    evidence_score = serializers.FloatField(
        allow_null=True, help_text="The best candidate's evidence, compared with threshold."
    )
    threshold = serializers.FloatField()
    threshold_source = serializers.CharField(
        help_text="The AbstentionCalibration id that set the threshold, or 'default'."
    )
    metric = serializers.CharField(help_text="How evidence is computed.")
    embedding_model = serializers.CharField()
    vector_strategy = serializers.CharField(
        help_text=(
            "exact, hnsw (iterative index scan), hnsw+exact (the index found too few), "
            "actor_graph (the actor's own graph) or actor_graph+exact."
        )
    )


class EpisodeSearchOutputSerializer(_ResultFields):
    hits = EpisodeHitSerializer(many=True)
    near_misses = EpisodeHitSerializer(many=True)
    groups = SessionGroupSerializer(
        many=True,
        help_text="The hits by session, sessions in time order (multi-session synthesis).",
    )


class ChunkSearchOutputSerializer(_ResultFields):
    hits = ChunkHitSerializer(many=True)
    near_misses = ChunkHitSerializer(many=True)
    groups = SourceGroupSerializer(many=True, help_text="The hits by source.")


def result_data(result: SearchResult, *, kind: str) -> dict:
    """The JSON of a SearchResult (episodes or chunks)."""
    row_name = "episode" if kind == "episode" else "chunk"
    row_serializer = EpisodeOutputSerializer if kind == "episode" else ChunkOutputSerializer

    def hit(h) -> dict:
        return {
            "kind": h.kind,
            "score": h.score,
            "signals": dict(h.signals),
            row_name: row_serializer(h.obj).data,
        }

    groups = []
    for group in result.by_session():
        ids = [str(h.obj.pk) for h in group["hits"]]
        if kind == "episode":
            groups.append(
                {
                    "session_id": group["session_id"],
                    "first_occurred_at": api_datetime(group["first_at"]),
                    "last_occurred_at": api_datetime(group["last_at"]),
                    "best_score": group["best_score"],
                    "episode_ids": ids,
                }
            )
        else:
            groups.append(
                {
                    "source_id": str(group["source_id"]),
                    "best_score": group["best_score"],
                    "chunk_ids": ids,
                }
            )
    return {
        "abstained": result.abstained,
        "evidence_score": result.evidence_score,
        "threshold": result.threshold,
        "threshold_source": result.threshold_source,
        "metric": result.metric,
        "embedding_model": result.embedding_model,
        "vector_strategy": result.vector_strategy,
        "hits": [hit(h) for h in result.hits],
        "near_misses": [hit(h) for h in result.near_misses],
        "groups": groups,
    }
