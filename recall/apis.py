"""Thin views over recall: validate, call the service or selector, serialize.

POST /recall writes its trace inside `idempotent_write` (a retry with the same
Idempotency-Key replays the first answer, no second trace); it needs only the
read scope — for the agent it is a read, the trace is telemetry. Feedback
appends a ledger event, so it needs write.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data, query_data
from piper.api.rendering import JSONRenderer, PlainTextRenderer
from piper.tenancy.models import Scope

from . import live, selectors, services
from .serializers import (
    CarryOverOutputSerializer,
    CarryOverQuerySerializer,
    ContextInputSerializer,
    ContextOutputSerializer,
    FeedbackInputSerializer,
    FeedbackOutputSerializer,
    LookDecisionInputSerializer,
    LookDecisionOutputSerializer,
    RecallInputSerializer,
    RecallOutputSerializer,
    TraceOutputSerializer,
)


class RecallApi(APIView):
    required_scope = Scope.READ  # a POST because a question and its filters are a body

    @extend_schema(
        request=RecallInputSerializer,
        responses={201: RecallOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        operation_id="v1_recall",
        summary="Ask memory a question: one endpoint for every memory",
        description="Classifies the question (route auto: inspectable rules first, then "
        "similarity to prototype questions when no rule matches) or takes the route given — "
        "current_fact, what_happened, how_to, what_to_do, source, multi_hop — asks that "
        "memory through its selectors and returns evidence best first, each with a "
        "memory_status (source, age_seconds, authority, currentness, confidence). A "
        "superseded fact is never current. abstained: true means no supporting memory; "
        "near_misses are then the best of what there was. The decision is in route. Each "
        "call writes a trace (201; its id is the response's id) for GET and feedback. 400 "
        "for an empty or over-2,000-character query, an unknown route (the message lists "
        "the allowed ones), a window that ends before it starts, or an unknown field.",
    )
    def post(self, request):
        def write():
            data = body_data(RecallInputSerializer, request)
            result = services.recall(
                agent=request.user,
                query=data["query"],
                route=data["route"],
                limit=data["limit"],
                filters=data.get("filters"),
                context=data["context"],
                scopes=list(request.auth.scopes),
                clearance=request.auth.clearance,
            )
            return Response(RecallOutputSerializer(result).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class RecallDetailApi(APIView):
    @extend_schema(
        responses=TraceOutputSerializer,
        operation_id="v1_recall_retrieve",
        summary="One recall's trace: route and why, candidates, what was returned, feedback",
    )
    def get(self, request, trace_id):
        trace = selectors.trace_get(agent=request.user, trace_id=trace_id)
        return Response(TraceOutputSerializer(trace).data)


class RecallFeedbackApi(APIView):
    @extend_schema(
        request=FeedbackInputSerializer,
        responses={201: FeedbackOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        operation_id="v1_recall_feedback",
        summary="Say which evidence of a recall was used, and how it went",
        description="outcome success, failure or partial; failure_code (failure or partial "
        "only, DESIGN §9) R0 the need to look was not detected, R1 the wrong store or a poor "
        "query, R2 not among the candidates, R3 a stale or irrelevant memory outranked it, A0 "
        "in context but ignored, U0 used wrongly. used must be ids the recall "
        "returned. Appends a recall.feedback ledger event. One feedback per recall (409 "
        "feedback_exists); another agent's recall is a 404.",
    )
    def post(self, request, trace_id):
        def write():
            data = body_data(FeedbackInputSerializer, request)
            feedback = services.recall_feedback(
                agent=request.user,
                trace_id=trace_id,
                used=data["used"],
                outcome=data["outcome"],
                failure_code=data.get("failure_code"),
                note=data["note"],
                stale=data["stale"],
            )
            return Response(FeedbackOutputSerializer(feedback).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class ContextApi(APIView):
    required_scope = Scope.READ  # assembling is a read; the trace is telemetry
    renderer_classes = [JSONRenderer, PlainTextRenderer]

    @extend_schema(
        request=ContextInputSerializer,
        responses={201: ContextOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        operation_id="v1_context",
        summary="What the next model call should see: one block, packed to a budget",
        description="Given a thread, a session and the task at hand, returns one sectioned "
        "block: intentions due now or within due_within_seconds (always first, never cut); "
        "the thread's working state, next action first; the current facts the task names "
        "or is close to, each with its memory_status (superseded values never shown, "
        "contested ones marked); the task's most relevant episodes and the session's "
        "latest ones, grouped by session; the skill to use with its contraindications, and "
        "skills refused here; what to re-check (stale external dependencies, facts past "
        "their predicate's volatility). Packed by priority (intentions, working state, "
        "recheck, skill, facts, episodes) until the budget — cl100k_base tokens or "
        "characters — is full; what did not fit is listed in omitted. The same memory "
        "state and clock give the same block. Writes a trace (201; its id is the "
        "response's id) for GET /recall/{id} and feedback. ?format=text (or Accept: "
        "text/plain) returns the plain text alone. 400 for no task, thread or session, a "
        "budget with no or two units or out of range, an unknown section or field; 404 "
        "for a thread that is not this agent's.",
    )
    def post(self, request):
        def write():
            data = body_data(ContextInputSerializer, request)
            block = services.context_assemble(
                agent=request.user,
                request=services.ContextRequest(
                    task=data.get("task", ""),
                    thread_id=data.get("thread_id"),
                    session_id=data.get("session_id", ""),
                    budget=data.get("budget") or dict(services.context.DEFAULT_BUDGET),
                    sections=data.get("sections") or services.context.SECTIONS,
                    due_within_seconds=data.get("due_within_seconds"),
                    limits=data.get("limits") or {},
                    context=data["context"],
                ),
                scopes=list(request.auth.scopes),
                clearance=request.auth.clearance,
            )
            return Response(ContextOutputSerializer(block).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class LookDecisionApi(APIView):
    required_scope = Scope.READ  # telemetry about a read, like a trace

    @extend_schema(
        request=LookDecisionInputSerializer,
        responses={201: LookDecisionOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        operation_id="v1_recall_decisions",
        summary="Say whether you looked in memory before acting, and whether you needed to",
        description="The agent's 'do I need to look?' decision for one task: looked (true "
        "or false), needed (afterwards, when known: memory was needed), and the trace of "
        "the read it made when it looked (a recall's id, or the Piper-Trace-Id header of a "
        "search, fact lookup or skill match). Suite H counts looks missed (needed, not "
        "looked). 400 for an empty task, a trace with looked false, or an unknown field; "
        "404 for a trace that is not this agent's.",
    )
    def post(self, request):
        def write():
            data = body_data(LookDecisionInputSerializer, request)
            decision = services.look_decision_record(
                agent=request.user,
                task=data["task"],
                looked=data["looked"],
                needed=data["needed"],
                trace_id=data["trace"],
                session_id=data["session_id"],
                note=data["note"],
            )
            return Response(
                LookDecisionOutputSerializer(decision).data, status=status.HTTP_201_CREATED
            )

        return idempotent_write(request, write)


class CarryOverApi(APIView):
    required_scope = Scope.ADMIN  # an operator's figure about the agent, like the battery's

    @extend_schema(
        parameters=[CarryOverQuerySerializer],
        responses=CarryOverOutputSerializer,
        operation_id="v1_carry_over",
        summary="Live carry-over: this agent's suite H figures over a window",
        description="Computed from what the service recorded while this agent worked "
        "(window_days, default 7): open items across successions (surfaced by the "
        "successor's resume; executed after it), skill runs (success, reuse across "
        "sessions, matches followed by a run), reads retrieved without use (by the "
        "agent's feedback), answers marked stale, and 'do I need to look?' decisions. A "
        "rate with nothing to count is null.",
    )
    def get(self, request):
        params = query_data(CarryOverQuerySerializer, request)
        window = live.Window.ending(days=params.get("window_days"))
        report = live.live_report(window=window, agents=[request.user])
        return Response(CarryOverOutputSerializer(report).data)
