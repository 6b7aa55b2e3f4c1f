"""Thin views over threads: working state, handover, resume. Each validates,
calls a service or selector, and serializes.

Every write runs inside `idempotent_write` (one transaction; Idempotency-Key
replays), so a refused write leaves nothing behind. What a write returns is
read back through the selectors, so it equals what a later read shows.
Another agent's thread is a 404, exactly like one that never existed.
"""

from __future__ import annotations

import dataclasses

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data, query_data
from piper.api.pagination import NewestIdCursorPagination, StrictCursorPagination
from piper.api.serializers import CursorQuerySerializer, page_of

from . import selectors
from .models import Thread
from .services import state
from .thread_serializers import (
    HandoverInputSerializer,
    HandoverOutputSerializer,
    PendingClearInputSerializer,
    PendingClearOutputSerializer,
    ResumeOutputSerializer,
    SessionInputSerializer,
    ThreadCreateInputSerializer,
    ThreadDetailOutputSerializer,
    ThreadListQuerySerializer,
    ThreadOutputSerializer,
    WorkingStateOutputSerializer,
    WorkingStatePageSerializer,
    WorkingStateQuerySerializer,
    WorkingStateWriteInputSerializer,
)

ThreadPageSerializer = page_of(ThreadOutputSerializer, "ThreadPageSerializer")


class VersionPagination(StrictCursorPagination):
    ordering = "-version"


def _thread_detail(thread: Thread) -> dict:
    return {
        "thread": thread,
        "checkpoint": selectors.working_state_get(thread=thread),
        "pending": list(selectors.pending_items(thread=thread)),
        "handover": selectors.handover_open(thread=thread),
    }


class ThreadListApi(APIView):
    @extend_schema(
        parameters=[ThreadListQuerySerializer],
        responses=ThreadPageSerializer,
        operation_id="v1_threads_list",
        summary="This agent's threads, newest first (cursor pagination)",
    )
    def get(self, request):
        params = query_data(ThreadListQuerySerializer, request)
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.thread_list(agent=request.user, status=params.get("status")),
            request,
            view=self,
        )
        return paginator.get_paginated_response(ThreadOutputSerializer(page, many=True).data)

    @extend_schema(
        request=ThreadCreateInputSerializer,
        responses={
            201: ThreadDetailOutputSerializer,
            200: OpenApiResponse(
                ThreadDetailOutputSerializer, description="The thread already existed."
            ),
        },
        parameters=[IDEMPOTENCY_KEY],
        summary="Get or create the thread named key",
        description="201 with a new thread (version 0, an empty working state); 200 with the "
        "existing one, whose session is left as it is. The answer is the thread's detail: its "
        "checkpoint, pending items and open handover.",
    )
    def post(self, request):
        def write():
            data = body_data(ThreadCreateInputSerializer, request)
            thread, created = state.thread_get_or_create(agent=request.user, **data)
            thread = selectors.thread_get(agent=request.user, thread_id=thread.pk)
            return Response(
                ThreadDetailOutputSerializer(_thread_detail(thread)).data,
                status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            )

        return idempotent_write(request, write)


class ThreadDetailApi(APIView):
    @extend_schema(
        responses=ThreadDetailOutputSerializer,
        operation_id="v1_threads_retrieve",
        summary="One thread: its current checkpoint and version, pending items, open handover",
    )
    def get(self, request, thread_id):
        thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
        return Response(ThreadDetailOutputSerializer(_thread_detail(thread)).data)


class ThreadStateApi(APIView):
    @extend_schema(
        parameters=[WorkingStateQuerySerializer],
        responses=WorkingStateOutputSerializer,
        operation_id="v1_threads_state_retrieve",
        summary="The thread's working state (?version=N for an earlier one)",
        description="Version 0 is the empty state every thread starts from. A version the "
        "thread never had is 404.",
    )
    def get(self, request, thread_id):
        thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
        params = query_data(WorkingStateQuerySerializer, request)
        checkpoint = selectors.working_state_get(thread=thread, version=params.get("version"))
        return Response(WorkingStateOutputSerializer(checkpoint).data)

    @extend_schema(
        request=WorkingStateWriteInputSerializer,
        responses={201: WorkingStateOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Write a new version of the working state",
        description="Send the whole state and the version it was based on. 409 stale_version "
        "(details.current_version) when another write got in first: read, merge, write "
        "again. 409 thread_frozen during a handover. 413 state_too_large over 64 KiB. 400 "
        "for an unknown field or a field of the wrong shape. A refused write writes nothing.",
    )
    def put(self, request, thread_id):
        def write():
            thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
            data = body_data(WorkingStateWriteInputSerializer, request)
            written = state.working_state_write(agent=request.user, thread=thread, **data)
            return Response(
                WorkingStateOutputSerializer(written).data, status=status.HTTP_201_CREATED
            )

        return idempotent_write(request, write)


class ThreadVersionsApi(APIView):
    @extend_schema(
        parameters=[CursorQuerySerializer],
        responses=WorkingStatePageSerializer,
        operation_id="v1_threads_versions_list",
        summary="Every version of the thread's working state, newest first (cursor pagination)",
    )
    def get(self, request, thread_id):
        thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
        query_data(CursorQuerySerializer, request)
        paginator = VersionPagination()
        page = paginator.paginate_queryset(
            selectors.working_state_versions(thread=thread), request, view=self
        )
        return paginator.get_paginated_response(WorkingStateOutputSerializer(page, many=True).data)


class ThreadHandoverApi(APIView):
    @extend_schema(
        request=HandoverInputSerializer,
        responses={201: HandoverOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Hand the thread over to another session",
        description="Freezes the working state (writes answer 409 thread_frozen), records the "
        "succession in the ledger and names the inheriting session, which resumes and then "
        "acknowledges. 409 handover_open when a handover is already open.",
    )
    def post(self, request, thread_id):
        def write():
            thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
            data = body_data(HandoverInputSerializer, request)
            handover = state.handover_start(agent=request.user, thread=thread, **data)
            return Response(HandoverOutputSerializer(handover).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class ThreadResumeApi(APIView):
    @extend_schema(
        request=SessionInputSerializer,
        responses=ResumeOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Resume the thread: everything a successor needs, in one response",
        description="In this order: the checkpoint; the open intentions a successor inherits "
        "(the thread's, and the agent's that belong to no thread; due and overdue first); "
        "the external dependencies to re-check (artifacts and tool handles "
        "older than their freshness_seconds); the failed branches not to retry; the pending "
        "items. During a handover only the named successor may resume (409 "
        "not_the_successor); its first resume is recorded in the ledger.",
    )
    def post(self, request, thread_id):
        def write():
            thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
            data = body_data(SessionInputSerializer, request)
            package = state.thread_resume(agent=request.user, thread=thread, **data)
            package = dataclasses.replace(
                package,
                checkpoint=package.checkpoint
                or selectors.working_state_get(thread=package.thread, version=0),
            )
            return Response(ResumeOutputSerializer(package).data)

        return idempotent_write(request, write)


class ThreadAcknowledgeApi(APIView):
    @extend_schema(
        request=SessionInputSerializer,
        responses=HandoverOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="The successor confirms the handover: it is complete",
        description="The thread becomes the successor's and active again; its open intentions "
        "are inherited by it. 409 no_handover, not_the_successor, or not_resumed (resume "
        "first).",
    )
    def post(self, request, thread_id):
        def write():
            thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
            data = body_data(SessionInputSerializer, request)
            handover = state.thread_acknowledge(agent=request.user, thread=thread, **data)
            return Response(HandoverOutputSerializer(handover).data)

        return idempotent_write(request, write)


class PendingClearApi(APIView):
    @extend_schema(
        request=PendingClearInputSerializer,
        responses=PendingClearOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Clear pending items the agent has seen",
        description="Ids that are not pending on this thread are ignored (cleared counts the "
        "others); the answer lists what is still pending.",
    )
    def post(self, request, thread_id):
        def write():
            thread = selectors.thread_get(agent=request.user, thread_id=thread_id)
            data = body_data(PendingClearInputSerializer, request)
            cleared = state.pending_clear(agent=request.user, thread=thread, item_ids=data["ids"])
            body = {"cleared": cleared, "pending": list(selectors.pending_items(thread=thread))}
            return Response(PendingClearOutputSerializer(body).data)

        return idempotent_write(request, write)
