"""Thin views over episodic memory: validate, call a service or selector, serialize.

Writes run inside `idempotent_write` (one transaction; Idempotency-Key
replays). Search is episodes.search_apis; these record and list.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data, query_data, require_json_object
from piper.api.pagination import StrictCursorPagination
from piper.errors import PayloadTooLarge

from . import selectors, services
from .serializers import (
    ChunkListQuerySerializer,
    ChunkOutputSerializer,
    ChunkPageSerializer,
    EpisodeBatchInputSerializer,
    EpisodeBatchOutputSerializer,
    EpisodeCorrectInputSerializer,
    EpisodeInputSerializer,
    EpisodeListQuerySerializer,
    EpisodeOutputSerializer,
    EpisodePageSerializer,
    EpisodeRetractInputSerializer,
    IncludeEmbeddingQuerySerializer,
    SourceIngestInputSerializer,
    SourceIngestOutputSerializer,
)


class EpisodePagination(StrictCursorPagination):
    ordering = ("-occurred_at", "-id")  # newest first; id breaks ties


class ChunkPagination(StrictCursorPagination):
    ordering = "ordinal"  # document order (unique within a source)


class EpisodeListApi(APIView):
    @extend_schema(
        parameters=[EpisodeListQuerySerializer],
        responses=EpisodePageSerializer,
        operation_id="v1_episodes_list",
        summary="This agent's episodes, newest first (filters; cursor pagination)",
        description="Exact-match filters on actor, environment, session_id, goal_id, task_id "
        "and outcome; occurred_after (inclusive) and occurred_before (exclusive) bound the "
        "time — 400 invalid_time_window when the window ends before it starts. Only active "
        "episodes unless status says otherwise (retracted, corrected or all). For relevance "
        "ranking use GET /episodes/search.",
    )
    def get(self, request):
        params = dict(query_data(EpisodeListQuerySerializer, request))
        include_embedding = params.pop("include_embedding")
        if params.get("status") == "all":
            params["status"] = None
        params.pop("cursor", None)
        params.pop("limit", None)
        episodes = selectors.episode_list(
            agent=request.user, include_embedding=include_embedding, **params
        )
        paginator = EpisodePagination()
        page = paginator.paginate_queryset(episodes, request, view=self)
        data = EpisodeOutputSerializer(
            page, many=True, context={"include_embedding": include_embedding}
        ).data
        return paginator.get_paginated_response(data)

    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="EpisodeRecord",
            serializers=[EpisodeInputSerializer, EpisodeBatchInputSerializer],
            resource_type_field_name=None,
        ),
        responses={
            201: PolymorphicProxySerializer(
                component_name="EpisodeRecorded",
                serializers=[EpisodeOutputSerializer, EpisodeBatchOutputSerializer],
                resource_type_field_name=None,
            ),
            413: OpenApiResponse(description="A batch of more than 1,000 episodes."),
            422: OpenApiResponse(description="An unknown related episode or source."),
        },
        parameters=[IDEMPOTENCY_KEY],
        summary="Record one episode, or a batch of up to 1,000 atomically",
        description='Send an episode, or {"episodes": [...]}. Each becomes an '
        "episode.recorded ledger event and a row built from it, in one transaction; a batch "
        "is all or nothing. The vector is computed after commit (embedded: false until then; "
        "the episode is found by full text meanwhile).",
    )
    def post(self, request):
        body = request.data
        require_json_object(body, 'send an episode object, or {"episodes": [...]} for a batch')
        if "episodes" in body:
            items = body["episodes"]
            if isinstance(items, list) and len(items) > services.MAX_BATCH:
                raise PayloadTooLarge(
                    f"a batch holds at most {services.MAX_BATCH:,} episodes; "
                    f"this one has {len(items):,}: split it",
                    code="batch_too_large",
                    details={"max_episodes": services.MAX_BATCH, "received": len(items)},
                )
            return idempotent_write(request, lambda: self._record_batch(request))
        return idempotent_write(request, lambda: self._record_one(request))

    def _record_one(self, request):
        data = body_data(EpisodeInputSerializer, request)
        episode = services.episode_record(
            agent=request.user, draft=EpisodeInputSerializer.to_draft(data)
        )
        return Response(EpisodeOutputSerializer(episode).data, status=status.HTTP_201_CREATED)

    def _record_batch(self, request):
        data = body_data(EpisodeBatchInputSerializer, request)
        drafts = [EpisodeInputSerializer.to_draft(item) for item in data["episodes"]]
        episodes = services.episodes_record(agent=request.user, drafts=drafts)
        body = {"count": len(episodes), "episodes": episodes}
        return Response(EpisodeBatchOutputSerializer(body).data, status=status.HTTP_201_CREATED)


class EpisodeDetailApi(APIView):
    @extend_schema(
        parameters=[IncludeEmbeddingQuerySerializer],
        responses=EpisodeOutputSerializer,
        operation_id="v1_episodes_retrieve",
        summary="One episode (404 for another agent's)",
        description="Whatever its status: a retracted or corrected version is still "
        "readable, with its status, reason and the version that replaced it.",
    )
    def get(self, request, episode_id):
        include_embedding = query_data(IncludeEmbeddingQuerySerializer, request)[
            "include_embedding"
        ]
        episode = selectors.episode_get(
            agent=request.user, episode_id=episode_id, include_embedding=include_embedding
        )
        context = {"include_embedding": include_embedding}
        return Response(EpisodeOutputSerializer(episode, context=context).data)


class EpisodeRetractApi(APIView):
    @extend_schema(
        request=EpisodeRetractInputSerializer,
        responses={
            200: EpisodeOutputSerializer,
            409: OpenApiResponse(description="not_current: already retracted or corrected."),
        },
        parameters=[IDEMPOTENCY_KEY],
        summary="Retract an episode: it did not happen as recorded",
        description="Appends an episode.retracted event and marks the episode retracted, "
        "with the reason, in one transaction. It stays readable by id; search, recall, "
        "context and consolidation leave it out. 404 for another agent's episode; 409 "
        "not_current for a version already retracted or corrected (a retry with the same "
        "Idempotency-Key replays the first answer).",
    )
    def post(self, request, episode_id):
        def write():
            data = body_data(EpisodeRetractInputSerializer, request)
            episode = services.episode_retract(
                agent=request.user, episode_id=episode_id, reason=data["reason"]
            )
            return Response(EpisodeOutputSerializer(episode).data)

        return idempotent_write(request, write)


class EpisodeCorrectApi(APIView):
    @extend_schema(
        request=EpisodeCorrectInputSerializer,
        responses={
            201: EpisodeOutputSerializer,
            409: OpenApiResponse(description="not_current: already retracted or corrected."),
        },
        parameters=[IDEMPOTENCY_KEY],
        summary="Correct an episode: a new version replaces it",
        description="Send the fields that were wrong (at least one with a new value: 400 "
        "nothing_changed otherwise) and, optionally, a reason. One episode.corrected event "
        "records the whole new version; the answer is that version (a new id, `supersedes` "
        "the old one), embedded after commit. The old version is marked corrected "
        "(`superseded_by`), stays readable by id and is no longer found by search. 404 for "
        "another agent's episode; 409 not_current for a version already retracted or "
        "corrected.",
    )
    def post(self, request, episode_id):
        def write():
            data = dict(body_data(EpisodeCorrectInputSerializer, request))
            reason = data.pop("reason", "")
            episode = services.episode_correct(
                agent=request.user, episode_id=episode_id, changes=data, reason=reason
            )
            return Response(EpisodeOutputSerializer(episode).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class SourceIngestApi(APIView):
    @extend_schema(
        request=SourceIngestInputSerializer,
        responses={
            201: SourceIngestOutputSerializer,
            200: OpenApiResponse(
                SourceIngestOutputSerializer,
                description="This content was registered before: nothing written.",
            ),
        },
        parameters=[IDEMPOTENCY_KEY],
        summary="Register a document and split it into chunks (idempotent per content)",
        description="The document becomes a source (as POST /sources) and its text passages "
        "of about 800 characters, split at paragraphs and sentences with a small overlap; "
        "each chunk's char_start/char_end locate it exactly in the content. The same content "
        "again answers 200 with the same source. Chunks are embedded after commit.",
    )
    def post(self, request):
        def write():
            data = body_data(SourceIngestInputSerializer, request)
            source, created = services.source_ingest(agent=request.user, **data)
            body = {
                "source": source,
                "created": created,
                "chunks": selectors.chunk_count(source=source),
            }
            return Response(
                SourceIngestOutputSerializer(body).data,
                status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            )

        return idempotent_write(request, write)


class SourceChunkListApi(APIView):
    @extend_schema(
        parameters=[ChunkListQuerySerializer],
        responses=ChunkPageSerializer,
        operation_id="v1_sources_chunks_list",
        summary="A source's chunks in document order (cursor pagination)",
        description="404 for another agent's source. A source registered through POST "
        "/sources with content is chunked by a task shortly after; until then the list is "
        "empty.",
    )
    def get(self, request, source_id):
        params = query_data(ChunkListQuerySerializer, request)
        include_embedding = params["include_embedding"]
        chunks = selectors.chunk_list(
            agent=request.user, source_id=source_id, include_embedding=include_embedding
        )
        paginator = ChunkPagination()
        page = paginator.paginate_queryset(chunks, request, view=self)
        data = ChunkOutputSerializer(
            page, many=True, context={"include_embedding": include_embedding}
        ).data
        return paginator.get_paginated_response(data)
