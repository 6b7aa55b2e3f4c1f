"""Thin views over procedural memory: validate, call a service or selector, serialize.

API summary (all under /api/v1/, `Authorization: Bearer <key>`; writes take an
Idempotency-Key header; errors are {"error": {"code", "message", "details"}}):

  GET  skills                                  this agent's skills, newest first (?name=)
  POST skills                                  {name, <version fields>} -> 201 skill (v1 candidate)
  GET  skills/{skill_id}                       the skill with every version (summary + stats)
  POST skills/{skill_id}/versions              {<version fields>, supersedes?} -> 201 version
  GET  skills/versions/{id}                    version detail: definition, stats, transitions
  POST skills/versions/{id}/promote            {reason?}  one step, if the evidence is there (409 evidence_missing)
  POST skills/versions/{id}/deprecate          {reason}
  POST skills/versions/{id}/retire             {reason}
  POST skills/versions/{id}/validate           {kind: examples|holdout} -> 202 validation
  GET  skills/versions/{id}/validations        validation runs with each case's sandbox output
  GET  skills/validations/{id}                 one validation run
  POST skills/match                            {task, context, limit?} -> {applicable, no_applicable_skill, near_misses}
  POST skills/versions/{id}/execute[?wait=s]   {params, allow_unvalidated?, task?, context?} -> 202 execution (200 if it finished within wait)
  GET  skills/versions/{id}/executions         its executions, newest first (?source=sandbox|reported)
  POST skills/versions/{id}/executions         {params, succeeded, result?, evidence?, externally_verified?, duration_ms?} -> 201 reported execution
  GET  skills/executions/{id}                  one execution (poll it after a 202)

<version fields>: purpose, scope?, trigger {regex?, keywords?, min_keywords?},
preconditions? [condition], contraindications? [condition | {keywords, reason?}],
required_tools? [name], required_permissions? [scope], parameter_schema (JSON
Schema), procedure (Python: def run(params, tools)), entry_point? ("run"),
validator? (def validate(params, result, tools)), rollback? (def rollback(params,
tools)), examples [{params, expected?}] (1-100), holdout? [{params, expected?}],
provenance? {events: [ledger event ids], episodes: [refs]}. See skills.conditions.

Refusals write nothing: 400 invalid / invalid_condition; 422 syntax_error
(names the role and line), invalid_schema, invalid_example, invalid_params
(every schema error listed), unknown_tool, unknown_event, unknown_version;
409 skill_exists, not_validated (execute without allow_unvalidated),
evidence_missing, invalid_transition, no_cases; 403 missing_permission.
Another agent's ids are 404, exactly like ids that never existed.
"""

from __future__ import annotations

import time
import uuid

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data, query_data
from piper.api.pagination import NewestIdCursorPagination
from piper.api.serializers import CursorQuerySerializer
from piper.errors import InvalidInput
from piper.reads import read_announce
from piper.tenancy.models import Scope

from . import selectors
from .models import ExecutionStatus
from .serializers import (
    ExecuteInputSerializer,
    ExecuteQuerySerializer,
    ExecutionListQuerySerializer,
    ExecutionOutputSerializer,
    ExecutionPageSerializer,
    ExecutionReportInputSerializer,
    MatchInputSerializer,
    MatchOutputSerializer,
    SkillCreateInputSerializer,
    SkillListQuerySerializer,
    SkillOutputSerializer,
    SkillPageSerializer,
    SkillPromoteInputSerializer,
    SkillRequiredReasonInputSerializer,
    SkillTraceInputSerializer,
    SkillTraceListQuerySerializer,
    SkillTraceOutputSerializer,
    SkillTracePageSerializer,
    ValidateInputSerializer,
    ValidationOutputSerializer,
    ValidationPageSerializer,
    VersionCreateInputSerializer,
    VersionDetailOutputSerializer,
)
from .services import definitions, lifecycle, runs, traces

POLL_SECONDS = 0.05


def _actor(request) -> str:
    return f"key:{request.auth.prefix}" if getattr(request.auth, "prefix", None) else ""


def _version_input(data: dict) -> definitions.VersionInput:
    provenance = data.pop("provenance", None) or {}
    data.pop("session_id", None)
    return definitions.VersionInput(
        provenance_events=provenance.get("events", []),
        provenance_episodes=provenance.get("episodes", []),
        **data,
    )


def _version_detail(request, version_id: uuid.UUID) -> dict:
    return VersionDetailOutputSerializer(
        selectors.version_get(agent=request.user, version_id=version_id)
    ).data


# ------------------------------------------------------------------------- skills


class SkillListApi(APIView):
    @extend_schema(
        parameters=[SkillListQuerySerializer],
        responses=SkillPageSerializer,
        operation_id="v1_skills_list",
        summary="This agent's skills, newest first, each with its versions (cursor pagination)",
    )
    def get(self, request):
        params = query_data(SkillListQuerySerializer, request)
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.skill_list(agent=request.user, name=params.get("name")), request, view=self
        )
        return paginator.get_paginated_response(SkillOutputSerializer(page, many=True).data)

    @extend_schema(
        request=SkillCreateInputSerializer,
        responses={201: SkillOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Make a skill and its first version (a candidate)",
        description="The code is compiled (never run here): a syntax error is 422 syntax_error "
        "naming the file role and line; an invalid JSON Schema 422 invalid_schema; examples "
        "whose params do not fit the schema 422 invalid_example; an unknown tool 422 "
        "unknown_tool; a provenance event that is not this agent's 422 unknown_event; a name "
        "in use 409 skill_exists. The examples are then run in the sandbox: when all pass the "
        "version becomes experimental.",
    )
    def post(self, request):
        def write():
            data = dict(body_data(SkillCreateInputSerializer, request))
            name, session_id = data.pop("name"), data.get("session_id", "")
            skill, _ = definitions.skill_create(
                agent=request.user,
                name=name,
                data=_version_input(data),
                actor=_actor(request),
                session_id=session_id,
            )
            body = SkillOutputSerializer(selectors.skill_get(agent=request.user, skill_id=skill.pk))
            return Response(body.data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class SkillDetailApi(APIView):
    @extend_schema(
        responses=SkillOutputSerializer,
        operation_id="v1_skills_retrieve",
        summary="One skill with every version, newest first",
    )
    def get(self, request, skill_id):
        return Response(
            SkillOutputSerializer(selectors.skill_get(agent=request.user, skill_id=skill_id)).data
        )


class SkillVersionCreateApi(APIView):
    @extend_schema(
        request=VersionCreateInputSerializer,
        responses={201: VersionDetailOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Write the skill's next version (a candidate superseding the latest)",
        description="The same checks as creating a skill. When the new version is validated, "
        "the earlier ones are deprecated; they stay readable with their executions.",
    )
    def post(self, request, skill_id):
        def write():
            skill = selectors.skill_get(agent=request.user, skill_id=skill_id)
            data = dict(body_data(VersionCreateInputSerializer, request))
            supersedes, session_id = data.pop("supersedes"), data.get("session_id", "")
            version = definitions.version_create(
                agent=request.user,
                skill=skill,
                data=_version_input(data),
                supersedes_id=supersedes,
                actor=_actor(request),
                session_id=session_id,
            )
            return Response(_version_detail(request, version.pk), status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


# ----------------------------------------------------------------------- versions


class VersionDetailApi(APIView):
    @extend_schema(
        responses=VersionDetailOutputSerializer,
        operation_id="v1_skills_versions_retrieve",
        summary="One version: its definition, derived statistics and lifecycle",
    )
    def get(self, request, version_id):
        return Response(_version_detail(request, version_id))


class _TransitionApi(APIView):
    input_serializer = SkillRequiredReasonInputSerializer
    service = None

    def post(self, request, version_id):
        def write():
            data = body_data(self.input_serializer, request)
            type(self).service(
                agent=request.user, version_id=version_id, actor=_actor(request), **data
            )
            return Response(_version_detail(request, version_id))

        return idempotent_write(request, write)


class VersionPromoteApi(_TransitionApi):
    input_serializer = SkillPromoteInputSerializer
    service = lifecycle.version_promote

    @extend_schema(
        request=SkillPromoteInputSerializer,
        responses=VersionDetailOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Promote one step, if the outcome evidence is there",
        description="candidate (or deprecated) → experimental: the latest examples validation "
        "passed. experimental → validated needs evidence the author did not produce alone: a "
        "successful externally verified run reported with another API key than the one that "
        "wrote the version, or a passing drawn replay (inputs the service drew from the "
        "parameter_schema, judged by the validator) plus SKILLS_PROMOTION_SUCCESSES verified "
        "successful executions (validating deprecates the skill's earlier versions). Otherwise 409 evidence_missing "
        "with what is missing; 409 invalid_transition for validated or retired versions. "
        "Send from_status (the status you read) to take one step only: 409 stale_status when "
        "a concurrent promotion already moved the version.",
    )
    def post(self, request, version_id):
        return super().post(request, version_id)


class VersionDeprecateApi(_TransitionApi):
    service = lifecycle.version_deprecate

    @extend_schema(
        request=SkillRequiredReasonInputSerializer,
        responses=VersionDetailOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Deprecate: match no longer offers it (idempotent)",
    )
    def post(self, request, version_id):
        return super().post(request, version_id)


class VersionRetireApi(_TransitionApi):
    service = lifecycle.version_retire

    @extend_schema(
        request=SkillRequiredReasonInputSerializer,
        responses=VersionDetailOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Retire: never to be used again (idempotent; final)",
    )
    def post(self, request, version_id):
        return super().post(request, version_id)


class VersionValidateApi(APIView):
    @extend_schema(
        request=ValidateInputSerializer,
        responses={202: ValidationOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Run the examples (default) or the hold-out cases in the sandbox",
        description="202 with the queued validation; poll GET skills/validations/{id}. 409 "
        "no_cases when the version has no cases of that kind.",
    )
    def post(self, request, version_id):
        def write():
            data = body_data(ValidateInputSerializer, request)
            version = selectors.version_get(agent=request.user, version_id=version_id)
            validation = runs.validation_request(
                agent=request.user, version=version, kind=data["kind"], actor=_actor(request)
            )
            body = selectors.validation_get(agent=request.user, validation_id=validation.pk)
            return Response(ValidationOutputSerializer(body).data, status=status.HTTP_202_ACCEPTED)

        return idempotent_write(request, write)


class VersionValidationsApi(APIView):
    @extend_schema(
        parameters=[CursorQuerySerializer],
        responses=ValidationPageSerializer,
        operation_id="v1_skills_versions_validations_list",
        summary="The version's validation runs, newest first, with each case's sandbox output",
    )
    def get(self, request, version_id):
        query_data(CursorQuerySerializer, request)
        version = selectors.version_get(agent=request.user, version_id=version_id)
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.validation_list(agent=request.user, version=version), request, view=self
        )
        return paginator.get_paginated_response(ValidationOutputSerializer(page, many=True).data)


class ValidationDetailApi(APIView):
    @extend_schema(
        responses=ValidationOutputSerializer,
        operation_id="v1_skills_validations_retrieve",
        summary="One validation run with each case's sandbox output",
    )
    def get(self, request, validation_id):
        validation = selectors.validation_get(agent=request.user, validation_id=validation_id)
        return Response(ValidationOutputSerializer(validation).data)


# ------------------------------------------------------------------------ matching


class MatchApi(APIView):
    required_scope = Scope.READ  # a POST only because a task and its context are a body

    @extend_schema(
        request=MatchInputSerializer,
        responses=MatchOutputSerializer,
        operation_id="v1_skills_match",
        summary="Which validated skills apply to this task in this context",
        description="A version applies only if it is validated, its intent is similar enough "
        "to the task (cosine ≥ SKILLS_MATCH_MIN_SIMILARITY), its trigger matches the task "
        "text, every precondition holds in the context, no contraindication applies, and the "
        "key holds its required permissions: similarity alone never makes a skill applicable. "
        "Applicable versions come best first; otherwise no_applicable_skill is true. Near "
        "misses list rejected versions with typed reasons. Writes nothing.",
    )
    def post(self, request):
        started = time.perf_counter()
        data = body_data(MatchInputSerializer, request)
        if not isinstance(data["context"], dict):
            raise InvalidInput("context: a JSON object", details={"context": ["must be an object"]})
        result = selectors.skill_match(
            agent=request.user,
            task=data["task"],
            context=data["context"],
            scopes=list(request.auth.scopes),
            limit=data["limit"],
        )
        # A match is a read an agent makes instead of recall: announce it
        # (piper.reads) so it is traced, and a later execution counts as followed.
        return read_announce(
            Response(MatchOutputSerializer(result).data),
            agent=request.user,
            route="skill_match",
            query=data["task"],
            filters={},
            returned=[
                {"kind": "skill", "id": c.version.pk, "score": c.score} for c in result.applicable
            ],
            started=started,
        )


# ---------------------------------------------------------------------- executions


class VersionExecuteApi(APIView):
    @extend_schema(
        request=ExecuteInputSerializer,
        parameters=[ExecuteQuerySerializer, IDEMPOTENCY_KEY],
        responses={
            202: ExecutionOutputSerializer,
            200: OpenApiResponse(
                ExecutionOutputSerializer, description="Finished within ?wait= seconds."
            ),
        },
        summary="Run the version in the sandbox",
        description="Asynchronous: 202 with the queued execution; poll GET "
        "skills/executions/{id}. With ?wait=<seconds> (at most SKILLS_MAX_WAIT_SECONDS) the "
        "answer waits for the result: 200 when it finished in time, else 202. Refused before "
        "anything runs: 409 not_validated for a version that is not validated unless "
        '"allow_unvalidated": true; 422 invalid_params listing every schema error; 403 '
        "missing_permission when the key lacks the version's required permissions.",
    )
    def post(self, request, version_id):
        wait = query_data(ExecuteQuerySerializer, request).get("wait")

        def write():
            data = body_data(ExecuteInputSerializer, request)
            execution = runs.execution_request(
                agent=request.user,
                version_id=version_id,
                data=runs.ExecuteInput(**data),
                scopes=list(request.auth.scopes),
                actor=_actor(request),
            )
            return Response(
                ExecutionOutputSerializer(execution).data, status=status.HTTP_202_ACCEPTED
            )

        response = idempotent_write(request, write)
        if not wait or response.status_code != status.HTTP_202_ACCEPTED:
            return response
        execution_id = response.data["id"]
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            execution = selectors.execution_get(agent=request.user, execution_id=execution_id)
            if execution.status == ExecutionStatus.FINISHED:
                return Response(ExecutionOutputSerializer(execution).data)
            time.sleep(POLL_SECONDS)
        return response


class VersionExecutionsApi(APIView):
    @extend_schema(
        parameters=[ExecutionListQuerySerializer],
        responses=ExecutionPageSerializer,
        operation_id="v1_skills_versions_executions_list",
        summary="The version's executions, newest first (cursor pagination)",
    )
    def get(self, request, version_id):
        params = query_data(ExecutionListQuerySerializer, request)
        version = selectors.version_get(agent=request.user, version_id=version_id)
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.execution_list(
                agent=request.user, version=version, source=params.get("source")
            ),
            request,
            view=self,
        )
        return paginator.get_paginated_response(ExecutionOutputSerializer(page, many=True).data)

    @extend_schema(
        request=ExecutionReportInputSerializer,
        responses={201: ExecutionOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Record an execution the agent ran itself, with its evidence",
        description="Counts like any execution: an externally verified success (evidence "
        "required) plus a passing hold-out replay validates an experimental version; "
        "failures lower a validated version's recent success rate, and below "
        "SKILLS_DEPRECATE_BELOW it is deprecated. 422 invalid_params when params do not fit.",
    )
    def post(self, request, version_id):
        def write():
            data = body_data(ExecutionReportInputSerializer, request)
            execution = runs.execution_report(
                agent=request.user,
                version_id=version_id,
                data=runs.ReportInput(**data),
                actor=_actor(request),
            )
            return Response(
                ExecutionOutputSerializer(execution).data, status=status.HTTP_201_CREATED
            )

        return idempotent_write(request, write)


class ExecutionDetailApi(APIView):
    @extend_schema(
        responses=ExecutionOutputSerializer,
        operation_id="v1_skills_executions_retrieve",
        summary="One execution: queued, or finished with its outcome and verdict",
    )
    def get(self, request, execution_id):
        execution = selectors.execution_get(agent=request.user, execution_id=execution_id)
        return Response(ExecutionOutputSerializer(execution).data)


# ------------------------------------------------------------------------- traces


class TraceListApi(APIView):
    @extend_schema(
        parameters=[SkillTraceListQuerySerializer],
        responses=SkillTracePageSerializer,
        operation_id="v1_skills_traces_list",
        summary="This agent's recorded traces, newest first (cursor pagination)",
    )
    def get(self, request):
        params = query_data(SkillTraceListQuerySerializer, request)
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.trace_list(
                agent=request.user,
                succeeded=params.get("succeeded"),
                verified=params.get("verified"),
                session_id=params.get("session_id"),
                task_id=params.get("task_id"),
            ),
            request,
            view=self,
        )
        return paginator.get_paginated_response(SkillTraceOutputSerializer(page, many=True).data)

    @extend_schema(
        request=SkillTraceInputSerializer,
        responses={201: SkillTraceOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Record a procedure the agent performed without a skill, step by step",
        description="Each step is a call of one of the skills tools with its arguments and "
        "result. Consolidation (kind `skills`) mines verified successful traces: when "
        "CONSOLIDATION_SKILL_MIN_TRACES of them with different inputs share one step "
        "sequence, it proposes a candidate skill version with those traces as provenance, "
        "which then goes through the sandbox and the promotion rules like any other. "
        "422 unknown_tool; 400 for a verified trace without its verification.",
    )
    def post(self, request):
        def write():
            data = body_data(SkillTraceInputSerializer, request)
            trace = traces.trace_record(
                agent=request.user, data=traces.TraceInput(**data), actor=_actor(request)
            )
            return Response(SkillTraceOutputSerializer(trace).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class TraceDetailApi(APIView):
    @extend_schema(
        responses=SkillTraceOutputSerializer,
        operation_id="v1_skills_traces_retrieve",
        summary="One recorded trace",
    )
    def get(self, request, trace_id):
        trace = selectors.trace_get(agent=request.user, trace_id=trace_id)
        return Response(SkillTraceOutputSerializer(trace).data)
