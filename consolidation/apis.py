"""Thin views over consolidation: validate, call a service or selector, serialize.

  GET  consolidation/runs                      this agent's runs, newest first (?kind=, ?status=)
  POST consolidation/runs                      {kind?} start (or resume) a run; a worker does it
  GET  consolidation/runs/{id}                 one run: what it read, proposed, asserted, how long
  GET  consolidation/candidates                candidates with their evidence, newest first
                                               (?status=, ?predicate=, ?subject=, ?run=)
  GET  consolidation/candidates/{id}           one candidate with its evidence
  POST consolidation/candidates/{id}/accept    {} assert a proposed candidate now (agent_inference)
  POST consolidation/candidates/{id}/reject    {reason} close it for good (its fact is retracted)
  GET  consolidation/skill-candidates          candidate skills mined from traces (?status=, ?run=)
  GET  consolidation/skill-candidates/{id}     one, with the traces that support it
  POST consolidation/skill-candidates/{id}/reject  {reason} never propose this procedure again
                                               (its version is retired unless validated)

Writes take an Idempotency-Key. Refusals write nothing: 400 invalid (a missing
reason, an unknown field); 404 for another agent's run or candidate, exactly as
for one that never existed; 409 not_proposed (accept), already_rejected.
"""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data, query_data
from piper.api.pagination import NewestIdCursorPagination

from . import selectors, services, skill_candidates
from .serializers import (
    CandidateAcceptInputSerializer,
    CandidateListQuerySerializer,
    CandidateOutputSerializer,
    CandidatePageSerializer,
    CandidateRejectInputSerializer,
    CandidateSkillListQuerySerializer,
    CandidateSkillOutputSerializer,
    CandidateSkillPageSerializer,
    RunListQuerySerializer,
    RunOutputSerializer,
    RunPageSerializer,
    RunStartInputSerializer,
    RunStartOutputSerializer,
)


def _actor(request) -> str:
    return f"key:{request.auth.prefix}" if getattr(request.auth, "prefix", None) else ""


class RunListApi(APIView):
    @extend_schema(
        parameters=[RunListQuerySerializer],
        responses=RunPageSerializer,
        operation_id="v1_consolidation_runs_list",
        summary="This agent's consolidation runs, newest first (cursor pagination)",
    )
    def get(self, request):
        params = query_data(RunListQuerySerializer, request)
        runs = selectors.run_list(
            agent=request.user, kind=params.get("kind"), status=params.get("status")
        )
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(runs, request, view=self)
        return paginator.get_paginated_response(RunOutputSerializer(page, many=True).data)

    @extend_schema(
        request=RunStartInputSerializer,
        responses={202: RunStartOutputSerializer, 200: RunStartOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Start a consolidation run (or resume the running one) in a worker",
        description="202 with the run, which a Celery worker then steps through (poll GET "
        "consolidation/runs/{id}); 200 with run null when no episode was recorded since the "
        "last run. Nothing is extracted during the request.",
    )
    def post(self, request):
        def write():
            data = body_data(RunStartInputSerializer, request)
            run = services.consolidation_run_start(agent=request.user, kind=data["kind"])
            if run is None:
                return Response({"run": None, "queued": False}, status=status.HTTP_200_OK)
            from .tasks import consolidate_agent

            agent_id, kind = str(request.user.pk), run.kind
            transaction.on_commit(lambda: consolidate_agent.delay(agent_id, kind), robust=True)
            return Response(
                {"run": RunOutputSerializer(run).data, "queued": True},
                status=status.HTTP_202_ACCEPTED,
            )

        return idempotent_write(request, write)


class RunDetailApi(APIView):
    @extend_schema(
        responses=RunOutputSerializer,
        operation_id="v1_consolidation_runs_retrieve",
        summary="One consolidation run",
    )
    def get(self, request, run_id):
        run = selectors.run_get(agent=request.user, run_id=run_id)
        return Response(RunOutputSerializer(run).data)


class CandidateListApi(APIView):
    @extend_schema(
        parameters=[CandidateListQuerySerializer],
        responses=CandidatePageSerializer,
        operation_id="v1_consolidation_candidates_list",
        summary="Candidate facts with their evidence, newest first (cursor pagination)",
    )
    def get(self, request):
        params = query_data(CandidateListQuerySerializer, request)
        candidates = selectors.candidate_list(
            agent=request.user,
            status=params.get("status"),
            predicate=params.get("predicate"),
            subject=params.get("subject"),
            run_id=params.get("run"),
        )
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(candidates, request, view=self)
        return paginator.get_paginated_response(CandidateOutputSerializer(page, many=True).data)


class CandidateDetailApi(APIView):
    @extend_schema(
        responses=CandidateOutputSerializer,
        operation_id="v1_consolidation_candidates_retrieve",
        summary="One candidate fact with its evidence",
    )
    def get(self, request, candidate_id):
        candidate = selectors.candidate_get(agent=request.user, candidate_id=candidate_id)
        return Response(CandidateOutputSerializer(candidate).data)


class CandidateAcceptApi(APIView):
    @extend_schema(
        request=CandidateAcceptInputSerializer,
        responses=CandidateOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Assert a proposed candidate now, as an agent_inference fact",
        description="Whatever its confidence or number of sources. 409 not_proposed when it "
        "is already asserted or rejected; the facts service's refusals come through (e.g. 400 "
        "when the predicate relates entities).",
    )
    def post(self, request, candidate_id):
        def write():
            body_data(CandidateAcceptInputSerializer, request)
            services.candidate_accept(
                agent=request.user, candidate_id=candidate_id, actor=_actor(request)
            )
            candidate = selectors.candidate_get(agent=request.user, candidate_id=candidate_id)
            return Response(CandidateOutputSerializer(candidate).data)

        return idempotent_write(request, write)


class CandidateRejectApi(APIView):
    @extend_schema(
        request=CandidateRejectInputSerializer,
        responses=CandidateOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Reject a candidate for good",
        description="An asserted candidate's fact is retracted while it is still believed. "
        "The claim is never proposed again from this evidence or these sources. 409 "
        "already_rejected.",
    )
    def post(self, request, candidate_id):
        def write():
            data = body_data(CandidateRejectInputSerializer, request)
            services.candidate_reject(
                agent=request.user,
                candidate_id=candidate_id,
                reason=data["reason"],
                actor=_actor(request),
            )
            candidate = selectors.candidate_get(agent=request.user, candidate_id=candidate_id)
            return Response(CandidateOutputSerializer(candidate).data)

        return idempotent_write(request, write)


class CandidateSkillListApi(APIView):
    @extend_schema(
        parameters=[CandidateSkillListQuerySerializer],
        responses=CandidateSkillPageSerializer,
        operation_id="v1_consolidation_skill_candidates_list",
        summary="Candidate skills mined from verified traces, newest first",
    )
    def get(self, request):
        params = query_data(CandidateSkillListQuerySerializer, request)
        candidates = selectors.candidate_skill_list(
            agent=request.user, status=params.get("status"), run_id=params.get("run")
        )
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(candidates, request, view=self)
        return paginator.get_paginated_response(
            CandidateSkillOutputSerializer(page, many=True).data
        )


class CandidateSkillDetailApi(APIView):
    @extend_schema(
        responses=CandidateSkillOutputSerializer,
        operation_id="v1_consolidation_skill_candidates_retrieve",
        summary="One candidate skill with the traces that support it",
    )
    def get(self, request, candidate_id):
        candidate = selectors.candidate_skill_get(agent=request.user, candidate_id=candidate_id)
        return Response(CandidateSkillOutputSerializer(candidate).data)


class CandidateSkillRejectApi(APIView):
    @extend_schema(
        request=CandidateRejectInputSerializer,
        responses=CandidateSkillOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Reject a candidate skill for good",
        description="Its procedure is never proposed again, whatever new traces show. The "
        "version it proposed is retired unless it was validated already. 409 already_rejected.",
    )
    def post(self, request, candidate_id):
        def write():
            data = body_data(CandidateRejectInputSerializer, request)
            skill_candidates.candidate_skill_reject(
                agent=request.user,
                candidate_id=candidate_id,
                reason=data["reason"],
                actor=_actor(request),
            )
            candidate = selectors.candidate_skill_get(agent=request.user, candidate_id=candidate_id)
            return Response(CandidateSkillOutputSerializer(candidate).data)

        return idempotent_write(request, write)
