"""Thin views over forgetting: erasure requests and receipts, retention policies.

  POST /api/v1/erasure              {selector…, reason, dry_run?, legal_hold_lifted?}
                                    -> 201 receipt, or 200 the dry run's list
  GET  /api/v1/erasure              this agent's receipts, newest first
  GET  /api/v1/erasure/{id}         one receipt
  GET  /api/v1/retention-policies   POST one; GET/PATCH/DELETE retention-policies/{id}

All need the admin scope. Refusals write nothing: 400 (no selector, an empty
window, a blank reason, an unknown field or class, a policy that would erase
everything without confirm), 404 (an unknown or another agent's event,
source, subject or receipt — alike), 409 legal_hold.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data
from piper.api.pagination import NewestIdCursorPagination
from piper.tenancy.models import Scope

from . import selectors
from .serializers import (
    ErasureDryRunSerializer,
    ErasureInputSerializer,
    ErasureOutputSerializer,
    ErasurePageSerializer,
    RetentionPolicyInputSerializer,
    RetentionPolicyOutputSerializer,
    RetentionPolicyUpdateSerializer,
)
from .services import retention
from .services.erasure import Selector, erasure_run


def requested_by(request) -> str:
    """Who asked, as a receipt names them: the key's name and prefix."""
    key = request.auth
    return f"key {key.name} ({key.prefix}…)"


def selector_from(data: dict) -> Selector:
    return Selector(
        event_ids=tuple(data.get("event_ids", ())),
        source_id=data.get("source_id"),
        actor=data.get("actor"),
        subject=data.get("subject"),
        session_id=data.get("session_id"),
        occurred_after=data.get("occurred_after"),
        occurred_before=data.get("occurred_before"),
    )


class ErasureListApi(APIView):
    required_scope = Scope.ADMIN

    @extend_schema(
        responses=ErasurePageSerializer,
        operation_id="v1_erasure_list",
        summary="This agent's erasure receipts, newest first (cursor pagination)",
    )
    def get(self, request):
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.erasure_list(agent=request.user), request, view=self
        )
        return paginator.get_paginated_response(ErasureOutputSerializer(page, many=True).data)

    @extend_schema(
        request=ErasureInputSerializer,
        responses={
            201: ErasureOutputSerializer,
            200: OpenApiResponse(ErasureDryRunSerializer, description="dry_run: what would go"),
        },
        parameters=[IDEMPOTENCY_KEY],
        summary="Erase events and everything made from them; returns the receipt",
        description="Name what to erase by event_ids, source_id, actor, subject (an entity's "
        "id or name), session_id and/or a time window (occurred_after inclusive, "
        "occurred_before exclusive); the criteria combine. Everything made from those "
        "events goes from every projection, the events become tombstones, and a residue "
        "check searches for what must be gone. dry_run lists exactly what would go and "
        "changes nothing.",
    )
    def post(self, request):
        def write():
            data = body_data(ErasureInputSerializer, request)
            result = erasure_run(
                agent=request.user,
                selector=selector_from(data),
                reason=data["reason"],
                requested_by=requested_by(request),
                legal_hold_lifted=data["legal_hold_lifted"],
                dry_run=data["dry_run"],
            )
            if result.dry_run:
                return Response(
                    {
                        "dry_run": True,
                        "events": len(result.event_ids),
                        "event_ids": [str(e) for e in result.event_ids],
                        "counts": result.counts,
                        "removed": result.removed,
                    }
                )
            return Response(
                ErasureOutputSerializer(result.receipt).data, status=status.HTTP_201_CREATED
            )

        return idempotent_write(request, write)


class ErasureDetailApi(APIView):
    required_scope = Scope.ADMIN

    @extend_schema(responses=ErasureOutputSerializer, summary="One erasure receipt")
    def get(self, request, erasure_id):
        receipt = selectors.erasure_get(agent=request.user, erasure_id=erasure_id)
        return Response(ErasureOutputSerializer(receipt).data)


# --------------------------------------------------------------- retention


def _policy_fields(data: dict) -> dict:
    return {
        name: data[name]
        for name in (
            "name",
            "retention_class",
            "event_type",
            "source_type",
            "max_age_days",
            "is_active",
            "confirm",
        )
        if name in data
    }


class RetentionPolicyListApi(APIView):
    required_scope = Scope.ADMIN

    @extend_schema(
        responses=RetentionPolicyOutputSerializer(many=True),
        summary="This agent's retention policies",
    )
    def get(self, request):
        policies = selectors.retention_policy_list(agent=request.user)
        return Response(RetentionPolicyOutputSerializer(policies, many=True).data)

    @extend_schema(
        request=RetentionPolicyInputSerializer,
        responses={201: RetentionPolicyOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Create a retention policy",
        description="Events of the agent's matching every given criterion (retention_class, "
        "event_type or a family 'tool.*', source_type) and recorded more than max_age_days "
        "ago are erased by the retention sweep. A policy that would erase everything "
        "retention can reach needs confirm: true; 'permanent' (legal hold) is never swept.",
    )
    def post(self, request):
        def write():
            data = body_data(RetentionPolicyInputSerializer, request)
            policy = retention.retention_policy_set(agent=request.user, **_policy_fields(data))
            return Response(
                RetentionPolicyOutputSerializer(policy).data, status=status.HTTP_201_CREATED
            )

        return idempotent_write(request, write)


class RetentionPolicyDetailApi(APIView):
    required_scope = Scope.ADMIN

    @extend_schema(responses=RetentionPolicyOutputSerializer, summary="One retention policy")
    def get(self, request, policy_id):
        policy = selectors.retention_policy_get(agent=request.user, policy_id=policy_id)
        return Response(RetentionPolicyOutputSerializer(policy).data)

    @extend_schema(
        request=RetentionPolicyUpdateSerializer,
        responses=RetentionPolicyOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Change a retention policy (the fields sent)",
    )
    def patch(self, request, policy_id):
        def write():
            policy = selectors.retention_policy_get(agent=request.user, policy_id=policy_id)
            data = body_data(RetentionPolicyUpdateSerializer, request)
            current = {
                "name": policy.name,
                "retention_class": policy.retention_class,
                "event_type": policy.event_type,
                "source_type": policy.source_type,
                "max_age_days": policy.max_age_days,
                "is_active": policy.is_active,
            }
            changed = retention.retention_policy_set(
                agent=request.user,
                policy=policy,
                **{**current, **_policy_fields(data)},
            )
            return Response(RetentionPolicyOutputSerializer(changed).data)

        return idempotent_write(request, write)

    @extend_schema(responses={204: None}, summary="Delete a retention policy")
    def delete(self, request, policy_id):
        def write():
            policy = selectors.retention_policy_get(agent=request.user, policy_id=policy_id)
            retention.retention_policy_delete(agent=request.user, policy=policy)
            return Response(status=status.HTTP_204_NO_CONTENT)

        return idempotent_write(request, write)
