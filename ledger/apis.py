"""Thin views: validate, call a service or selector, serialize."""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.pagination import NewestIdCursorPagination, SeqCursorPagination
from piper.errors import InvalidInput, PayloadTooLarge

from . import selectors, services
from .serializers import (
    BatchOutputSerializer,
    EventBatchInputSerializer,
    EventInputSerializer,
    EventListQuerySerializer,
    EventOutputSerializer,
    EventPageSerializer,
    SourceInputSerializer,
    SourceOutputSerializer,
    SourcePageSerializer,
)


class EventPagination(SeqCursorPagination):
    def get_ordering(self, request, queryset, view):
        return ("-seq",) if request.query_params.get("ordering") == "-seq" else ("seq",)


class EventListApi(APIView):
    @extend_schema(
        parameters=[EventListQuerySerializer],
        responses=EventPageSerializer,
        operation_id="v1_events_list",
        summary="List events (cursor pagination; filters on both time axes)",
    )
    def get(self, request):
        raw = {k: v for k, v in request.query_params.items()}
        if "event_type" in request.query_params:
            raw["event_type"] = [
                t for v in request.query_params.getlist("event_type") for t in v.split(",") if t
            ]
        params = EventListQuerySerializer(data=raw)
        params.is_valid(raise_exception=True)
        filters = {
            k: v
            for k, v in params.validated_data.items()
            if k not in {"cursor", "limit", "ordering"}
        }
        if "event_type" in filters:
            filters["event_types"] = filters.pop("event_type")
        events = selectors.event_list(agent=request.user, **filters)
        paginator = EventPagination()
        page = paginator.paginate_queryset(events, request, view=self)
        return paginator.get_paginated_response(EventOutputSerializer(page, many=True).data)

    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="EventAppend",
            serializers=[EventInputSerializer, EventBatchInputSerializer],
            resource_type_field_name=None,
        ),
        responses={
            201: PolymorphicProxySerializer(
                component_name="EventAppended",
                serializers=[EventOutputSerializer, BatchOutputSerializer],
                resource_type_field_name=None,
            )
        },
        parameters=[
            OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False)
        ],
        summary="Append one event, or a batch of up to 1,000 atomically",
        description='Send an event object, or {"events": [...]} for a batch. A batch is all or '
        "nothing. With an Idempotency-Key a retry returns the first answer and writes nothing.",
    )
    def post(self, request):
        body = request.data
        if not isinstance(body, dict):
            raise InvalidInput(
                'send an event object, or {"events": [...]} for a batch',
                details={"body": ["expected a JSON object"]},
            )
        if "events" in body:
            if (
                isinstance(body["events"], list)
                and len(body["events"]) > settings.PIPER_MAX_BATCH_EVENTS
            ):
                raise PayloadTooLarge(
                    f"a batch holds at most {settings.PIPER_MAX_BATCH_EVENTS} events; "
                    f"this one has {len(body['events'])}: split it",
                    code="batch_too_large",
                    details={
                        "max_events": settings.PIPER_MAX_BATCH_EVENTS,
                        "received": len(body["events"]),
                    },
                )
            return idempotent_write(request, lambda: self._append_batch(request))
        return idempotent_write(request, lambda: self._append_one(request))

    def _append_one(self, request):
        params = EventInputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        event = services.events_append(
            agent=request.user, drafts=[params.to_draft(params.validated_data)]
        )[0]
        return Response(EventOutputSerializer(event).data, status=status.HTTP_201_CREATED)

    def _append_batch(self, request):
        params = EventBatchInputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        to_draft = EventInputSerializer().to_draft
        drafts = [to_draft(item) for item in params.validated_data["events"]]
        events = services.events_append(agent=request.user, drafts=drafts)
        body = {
            "count": len(events),
            "recorded_at": events[0].recorded_at,
            "events": [{"id": e.pk, "seq": e.seq, "hash": e.hash} for e in events],
        }
        return Response(BatchOutputSerializer(body).data, status=status.HTTP_201_CREATED)


class EventDetailApi(APIView):
    @extend_schema(responses=EventOutputSerializer, summary="One event")
    def get(self, request, event_id):
        event = selectors.event_get(agent=request.user, event_id=event_id)
        return Response(EventOutputSerializer(event).data)


class SourceListApi(APIView):
    @extend_schema(
        responses=SourcePageSerializer,
        operation_id="v1_sources_list",
        summary="Registered sources, newest first",
    )
    def get(self, request):
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.source_list(agent=request.user), request, view=self
        )
        return paginator.get_paginated_response(SourceOutputSerializer(page, many=True).data)

    @extend_schema(
        request=SourceInputSerializer,
        responses={201: SourceOutputSerializer, 200: SourceOutputSerializer},
        summary="Register a document as evidence (idempotent per content)",
    )
    def post(self, request):
        def write():
            params = SourceInputSerializer(data=request.data)
            params.is_valid(raise_exception=True)
            source, created = services.source_register(agent=request.user, **params.validated_data)
            return Response(
                SourceOutputSerializer(source).data,
                status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            )

        return idempotent_write(request, write)


class SourceDetailApi(APIView):
    @extend_schema(responses=SourceOutputSerializer, summary="One source")
    def get(self, request, source_id):
        return Response(
            SourceOutputSerializer(
                selectors.source_get(agent=request.user, source_id=source_id)
            ).data
        )
