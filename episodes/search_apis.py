"""Search over episodes and source chunks: validate, call episodes.retrieval, serialize."""

from __future__ import annotations

import time

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger.models import Source
from piper.api.inputs import query_data
from piper.errors import NotFound
from piper.reads import read_announce

from . import retrieval
from .search_serializers import (
    ChunkSearchOutputSerializer,
    ChunkSearchQuerySerializer,
    EpisodeSearchOutputSerializer,
    EpisodeSearchQuerySerializer,
    result_data,
)

FILTERS = (
    "actor",
    "environment",
    "session_id",
    "goal_id",
    "task_id",
    "outcome",
    "occurred_after",
    "occurred_before",
)


def _search_announced(response, request, result, started: float, *, route: str, filters: dict):
    """A search is a read an agent makes instead of recall: announce it
    (piper.reads) so it is traced and can take feedback."""
    return read_announce(
        response,
        agent=request.user,
        route=route,
        query=request.query_params.get("q", ""),
        filters=filters,
        returned=[{"kind": hit.kind, "id": hit.obj.pk, "score": hit.score} for hit in result.hits],
        started=started,
    )


class EpisodeSearchApi(APIView):
    @extend_schema(
        parameters=[EpisodeSearchQuerySerializer],
        responses=EpisodeSearchOutputSerializer,
        operation_id="v1_episodes_search",
        summary="What happened: this agent's episodes that best answer q (hybrid, abstaining)",
        description="Full text (every word of q, weighted by rarity) and embeddings, fused by "
        "reciprocal rank with recency and shared entities; filters apply to every list. "
        "When the best evidence is below the calibrated threshold the answer is abstained "
        "('no supporting memory'): no hits, the best near misses, and which threshold and "
        "embedding model applied. 400 for an empty or over-long q, an unknown parameter, or "
        "a time window that ends before it starts.",
    )
    def get(self, request):
        started = time.perf_counter()
        params = query_data(EpisodeSearchQuerySerializer, request)
        filters = retrieval.SearchFilters(
            **{name: params[name] for name in FILTERS if name in params},
            entities=tuple(params.get("entities", ())),
        )
        result = retrieval.episode_search(
            agent=request.user,
            query=params["q"],
            filters=filters,
            limit=params["limit"],
            abstain=params["abstain"],
        )
        return _search_announced(
            Response(result_data(result, kind="episode")),
            request,
            result,
            started,
            route="episodes_search",
            filters={name: str(value) for name, value in params.items() if name in FILTERS},
        )


class ChunkSearchApi(APIView):
    @extend_schema(
        parameters=[ChunkSearchQuerySerializer],
        responses=ChunkSearchOutputSerializer,
        operation_id="v1_sources_search",
        summary="What a source said: this agent's document chunks that best answer q",
        description="Full text and embeddings fused by reciprocal rank, abstaining as "
        "/episodes/search does; source_id keeps one document (404 when it is not this "
        "agent's).",
    )
    def get(self, request):
        started = time.perf_counter()
        params = query_data(ChunkSearchQuerySerializer, request)
        source_id = params.get("source_id")
        if (
            source_id is not None
            and not Source.objects.filter(agent=request.user, pk=source_id).exists()
        ):
            raise NotFound(f"source {source_id} not found")
        result = retrieval.chunk_search(
            agent=request.user,
            query=params["q"],
            source_id=source_id,
            limit=params["limit"],
            abstain=params["abstain"],
        )
        return _search_announced(
            Response(result_data(result, kind="chunk")),
            request,
            result,
            started,
            route="sources_search",
            filters={"source_id": str(source_id)} if source_id else {},
        )
