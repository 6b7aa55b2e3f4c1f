"""Thin views over prospective memory (intentions) and the engine's helpers
(webhook, clock, tick): validate, call a service or selector, serialize. The
threads' views are in thread_apis.py.

Every write runs inside `idempotent_write` (one transaction; Idempotency-Key
replays), so a refused write leaves nothing behind. What a write returns is
read back through the selectors, so it equals what a later read shows.
Another agent's thread or intention is a 404, exactly like one that never existed.
"""

from __future__ import annotations

import dataclasses
import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data, query_data
from piper.api.pagination import NewestIdCursorPagination, StrictCursorPagination
from piper.errors import NotFound, Unprocessable
from piper.tenancy.clock import now_for
from piper.tenancy.models import Agent, Scope

from . import selectors
from .models import Thread, TriggerType
from .serializers import (
    ClockInputSerializer,
    ClockOutputSerializer,
    CompleteInputSerializer,
    DependenciesInputSerializer,
    EmptyInputSerializer,
    EscalationPolicyInputSerializer,
    FailInputSerializer,
    IntentionCreateInputSerializer,
    IntentionDetailOutputSerializer,
    IntentionDueQuerySerializer,
    IntentionListQuerySerializer,
    IntentionOutputSerializer,
    IntentionPageSerializer,
    ReasonInputSerializer,
    SkipInputSerializer,
    TickOutputSerializer,
    WebhookInputSerializer,
    WebhookOutputSerializer,
)
from .services import engine, lifecycle, outbox

BATTERY_NOTE = (
    " This endpoint exists for the Memory Battery: only a throwaway agent (one a battery run "
    "created) may use it; any other agent gets 403 battery_only."
)


def _battery_only(agent: Agent, what: str) -> None:
    if not agent.is_throwaway:
        raise exceptions.PermissionDenied(
            f"{what} is only for the Memory Battery's throwaway agents; agent {agent.name!r} "
            "runs on the wall clock and its engine runs on celery-beat",
            code="battery_only",
        )


# ---------------------------------------------------------------------- intentions


class DuePagination(StrictCursorPagination):
    ordering = ("last_fired_at", "id")  # in the order they fired


def _filter_thread(agent: Agent, thread_id: uuid.UUID | None) -> Thread | None:
    return None if thread_id is None else selectors.thread_get(agent=agent, thread_id=thread_id)


def _detail(agent: Agent, intention_id: uuid.UUID) -> dict:
    return IntentionDetailOutputSerializer(
        selectors.intention_get(agent=agent, intention_id=intention_id)
    ).data


class IntentionListApi(APIView):
    @extend_schema(
        parameters=[IntentionListQuerySerializer],
        responses=IntentionPageSerializer,
        operation_id="v1_intentions_list",
        summary="This agent's intentions, newest first (cursor pagination)",
        description="Filters: status and trigger_type (one, or several comma-separated), "
        "thread (an id; 404 when it is not this agent's), escalated (true or false).",
    )
    def get(self, request):
        params = query_data(IntentionListQuerySerializer, request)
        intentions = selectors.intention_list(
            agent=request.user,
            statuses=params.get("status", ()),
            trigger_types=params.get("trigger_type", ()),
            thread=_filter_thread(request.user, params.get("thread")),
            escalated=params.get("escalated"),
        )
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(intentions, request, view=self)
        return paginator.get_paginated_response(IntentionOutputSerializer(page, many=True).data)

    @extend_schema(
        request=IntentionCreateInputSerializer,
        responses={201: IntentionDetailOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Make an intention: a commitment with a trigger",
        description="Triggers: time (due_at / not_before / rrule), event (a pattern over later "
        "ledger events), state (a condition over current facts), dependency (the listed "
        "intentions completed), manual. 400 invalid_trigger (a spec that does not fit its "
        "type), 400 invalid_rrule (does not parse, or never occurs), 400 for due_at before "
        "not_before; 422 unknown_intention (a dependency) or unknown_thread; 422 "
        "dependency_ended (a dependency cancelled or expired, never completed). With "
        "dependencies it starts blocked; if they are all complete already it fires at once.",
    )
    def post(self, request):
        def write():
            data = dict(body_data(IntentionCreateInputSerializer, request))
            thread_id = data.pop("thread")
            try:
                thread = _filter_thread(request.user, thread_id)
            except NotFound:
                raise Unprocessable(
                    f"thread {thread_id} does not exist",
                    code="unknown_thread",
                    details={"thread": [str(thread_id)]},
                ) from None
            intention = lifecycle.intention_create(
                agent=request.user, data=lifecycle.IntentionInput(thread=thread, **data)
            )
            return Response(_detail(request.user, intention.pk), status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class IntentionDueApi(APIView):
    @extend_schema(
        parameters=[IntentionDueQuerySerializer],
        responses=IntentionPageSerializer,
        operation_id="v1_intentions_due_list",
        summary="What has fired and waits for the agent (status due), in firing order",
        description="Optionally for one thread (?thread=<id>). Start, complete, fail or "
        "cancel each one; a recurring intention's next occurrence is armed after it is "
        "completed or skipped.",
    )
    def get(self, request):
        params = query_data(IntentionDueQuerySerializer, request)
        intentions = selectors.intentions_due(
            agent=request.user, thread=_filter_thread(request.user, params.get("thread"))
        )
        paginator = DuePagination()
        page = paginator.paginate_queryset(intentions, request, view=self)
        return paginator.get_paginated_response(IntentionOutputSerializer(page, many=True).data)


class IntentionDetailApi(APIView):
    @extend_schema(
        responses=IntentionDetailOutputSerializer,
        operation_id="v1_intentions_retrieve",
        summary="One intention, with its transitions timeline and its firings",
    )
    def get(self, request, intention_id):
        return Response(_detail(request.user, intention_id))


def _action(request, serializer_class, act) -> Response:
    """Validate the body, call the lifecycle service, answer with the intention's detail."""

    def write():
        data = body_data(serializer_class, request)
        intention = act(data)
        return Response(_detail(request.user, intention.pk))

    return idempotent_write(request, write)


def _action_schema(request_serializer, summary: str, description: str):
    return extend_schema(
        request=request_serializer,
        responses=IntentionDetailOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary=summary,
        description=description,
    )


class IntentionStartApi(APIView):
    @_action_schema(
        EmptyInputSerializer,
        "Start on a due intention (executing)",
        "409 invalid_transition from any status but due.",
    )
    def post(self, request, intention_id):
        return _action(
            request,
            EmptyInputSerializer,
            lambda data: lifecycle.intention_start(agent=request.user, intention_id=intention_id),
        )


class IntentionCompleteApi(APIView):
    @_action_schema(
        CompleteInputSerializer,
        "Complete an intention, with evidence",
        "A one-shot intention never fires again. A recurring one arms its next occurrence "
        "(or ends when its rule has none). Intentions waiting for this one fire when all "
        "they wait for is done. 409 invalid_transition for a cancelled or expired one. Send "
        "occurrence to complete only that one: 409 stale_occurrence when a concurrent or "
        "repeated completion already moved a recurring intention past it.",
    )
    def post(self, request, intention_id):
        return _action(
            request,
            CompleteInputSerializer,
            lambda data: lifecycle.intention_complete(
                agent=request.user, intention_id=intention_id, **data
            ),
        )


class IntentionSkipApi(APIView):
    @_action_schema(
        SkipInputSerializer,
        "Skip this occurrence of a recurring intention",
        "It moves on to its next occurrence. 409 not_recurring for a one-shot (cancel it); "
        "409 stale_occurrence when occurrence is sent and already passed.",
    )
    def post(self, request, intention_id):
        return _action(
            request,
            SkipInputSerializer,
            lambda data: lifecycle.intention_skip(
                agent=request.user, intention_id=intention_id, **data
            ),
        )


class IntentionFailApi(APIView):
    @_action_schema(
        FailInputSerializer,
        "Report that an attempt failed",
        "Within retry_policy.max_retries a time-triggered intention is re-armed after "
        "backoff_seconds (doubling) as a new occurrence; beyond them it stays due. Once "
        "attempts reach escalation_policy.after_failures it is escalated at once (at most "
        "once per occurrence). 409 invalid_transition unless due or executing.",
    )
    def post(self, request, intention_id):
        return _action(
            request,
            FailInputSerializer,
            lambda data: lifecycle.intention_fail(
                agent=request.user, intention_id=intention_id, **data
            ),
        )


class IntentionEscalationPolicyApi(APIView):
    @extend_schema(
        request=EscalationPolicyInputSerializer,
        responses=IntentionDetailOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Replace an open intention's escalation policy",
        description="The whole policy ({} for none): after_failures and/or overdue_seconds, "
        "notify, to_session, note. 400 naming the field for a wrong shape; 409 not_open for "
        "a completed, cancelled or expired intention. If the new policy's condition holds "
        "already the intention escalates now, unless this occurrence already escalated "
        "(never twice).",
    )
    def put(self, request, intention_id):
        def write():
            data = body_data(EscalationPolicyInputSerializer, request)
            intention = lifecycle.intention_set_escalation_policy(
                agent=request.user,
                intention_id=intention_id,
                policy=data["escalation_policy"],
            )
            return Response(_detail(request.user, intention.pk))

        return idempotent_write(request, write)


class IntentionCancelApi(APIView):
    @_action_schema(
        ReasonInputSerializer,
        "Cancel an intention: it never fires again",
        "Cancelling a cancelled intention changes nothing. 409 invalid_transition for a "
        "completed or expired one. Blocked intentions waiting on it (unless it was ever "
        "completed) are cancelled with it, reason 'dependency <id> cancelled'.",
    )
    def post(self, request, intention_id):
        return _action(
            request,
            ReasonInputSerializer,
            lambda data: lifecycle.intention_cancel(
                agent=request.user, intention_id=intention_id, **data
            ),
        )


class IntentionExpireApi(APIView):
    @_action_schema(
        EmptyInputSerializer,
        "Expire an intention now",
        "Expiry is explicit: this, or expires_at passing. 409 invalid_transition when it is "
        "already completed, cancelled or expired. Blocked intentions waiting on it (unless it "
        "was ever completed) are cancelled, reason 'dependency <id> expired'.",
    )
    def post(self, request, intention_id):
        return _action(
            request,
            EmptyInputSerializer,
            lambda data: lifecycle.intention_expire(agent=request.user, intention_id=intention_id),
        )


class IntentionFireApi(APIView):
    @_action_schema(
        EmptyInputSerializer,
        "Fire an armed intention now (manual trigger)",
        "It becomes due exactly once for its pending occurrence. 409 not_armed unless it is "
        "active or blocked.",
    )
    def post(self, request, intention_id):
        return _action(
            request,
            EmptyInputSerializer,
            lambda data: lifecycle.intention_fire(agent=request.user, intention_id=intention_id),
        )


class IntentionDependenciesApi(APIView):
    @extend_schema(
        request=DependenciesInputSerializer,
        responses=IntentionDetailOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Replace what a waiting intention depends on",
        description="422 dependency_cycle when an intention would wait for itself; 422 "
        "unknown_intention; 422 dependency_ended (one cancelled or expired, never completed); "
        "409 not_armed unless active or blocked.",
    )
    def put(self, request, intention_id):
        def write():
            intention = selectors.intention_get(agent=request.user, intention_id=intention_id)
            data = body_data(DependenciesInputSerializer, request)
            lifecycle.intention_set_dependencies(
                agent=request.user, intention=intention, dependencies=data["dependencies"]
            )
            return Response(_detail(request.user, intention_id))

        return idempotent_write(request, write)


class IntentionTickApi(APIView):
    @extend_schema(
        request=EmptyInputSerializer,
        responses=TickOutputSerializer,
        summary="Run one engine cycle for this agent at its simulated clock",
        description="Time triggers and expiry, event matching, state re-checks, rehearsal "
        "and escalations, as celery-beat does for everyone else; answers what fired and "
        "what escalated. Each firing commits on "
        "its own, as in the beat's cycle, and a repeated tick at the same clock fires "
        "nothing more, so no Idempotency-Key is needed (one is ignored)." + BATTERY_NOTE,
    )
    def post(self, request):
        # Not one transaction: a tick holding the agent's chain head from its first
        # firing while locking the next intention would deadlock with a worker's
        # firing (intention row, then chain head) — the engine's lock order.
        _battery_only(request.user, "running the engine by hand")
        body_data(EmptyInputSerializer, request)
        cycle = engine.tick(agent=request.user)
        fired = [
            {
                "intention_id": f.intention_id,
                "occurrence": f.occurrence,
                "firing_id": f.firing_id,
                "cause": cause,
            }
            for cause, key in (
                (TriggerType.TIME, "time"),
                (TriggerType.EVENT, "events"),
                (TriggerType.STATE, "states"),
            )
            for f in cycle[key]
        ]
        body = {
            "now": cycle["now"],
            "fired": fired,
            "rehearsed": cycle["rehearsed"],
            "escalated": [dataclasses.asdict(e) for e in cycle["escalated"]],
        }
        return Response(TickOutputSerializer(body).data)


# ------------------------------------------------------------------ engine helpers


class WebhookApi(APIView):
    required_scope = Scope.ADMIN

    @extend_schema(
        responses=WebhookOutputSerializer,
        operation_id="v1_webhook_retrieve",
        summary="Where firings are delivered (admin scope); 404 when none is set",
    )
    def get(self, request):
        hook = selectors.webhook_get(agent=request.user)
        if hook is None:
            raise NotFound("no webhook is set for this agent")
        return Response(WebhookOutputSerializer(hook).data)

    @extend_schema(
        request=WebhookInputSerializer,
        responses=WebhookOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Deliver firings to a URL, signed (admin scope)",
        description="Each firing is POSTed as JSON through an outbox (at least once, retried "
        "with backoff) with X-Piper-Signature: sha256=<hex HMAC-SHA256 of the body with the "
        "secret> and X-Piper-Delivery: <firing id> to de-duplicate on. Replaces any earlier "
        "webhook. The secret is never shown again.",
    )
    def put(self, request):
        def write():
            data = body_data(WebhookInputSerializer, request)
            outbox.webhook_set(agent=request.user, **data)
            return Response(WebhookOutputSerializer(selectors.webhook_get(agent=request.user)).data)

        return idempotent_write(request, write)

    @extend_schema(
        request=None,
        responses={204: None},
        parameters=[IDEMPOTENCY_KEY],
        summary="Stop delivering firings (admin scope)",
        description="Messages not yet delivered are given up. 404 when none is set.",
    )
    def delete(self, request):
        def write():
            if not outbox.webhook_delete(agent=request.user):
                raise NotFound("no webhook is set for this agent")
            return Response(status=status.HTTP_204_NO_CONTENT)

        return idempotent_write(request, write)


class ClockApi(APIView):
    def _now(self, agent: Agent) -> Response:
        clock = selectors.clock_get(agent=agent)
        body = {"now": clock.now if clock else now_for(agent.pk), "simulated": clock is not None}
        return Response(ClockOutputSerializer(body).data)

    @extend_schema(
        responses=ClockOutputSerializer,
        operation_id="v1_clock_retrieve",
        summary="The engine's 'now' for this agent: its simulated clock, or the wall clock",
    )
    def get(self, request):
        return self._now(request.user)

    @extend_schema(
        request=ClockInputSerializer,
        responses=ClockOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Set this agent's simulated clock",
        description="From then on the engine sees this agent's time as `now` (it never "
        "advances by itself); celery-beat leaves the agent alone, and POST /intentions/tick "
        "runs its engine cycle." + BATTERY_NOTE,
    )
    def put(self, request):
        def write():
            _battery_only(request.user, "a simulated clock")
            data = body_data(ClockInputSerializer, request)
            engine.clock_set(agent=request.user, now=data["now"])
            return self._now(request.user)

        return idempotent_write(request, write)

    @extend_schema(
        request=None,
        responses=ClockOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Back to the wall clock",
        description="Removes the simulated clock (if any)." + BATTERY_NOTE,
    )
    def delete(self, request):
        def write():
            _battery_only(request.user, "a simulated clock")
            engine.clock_clear(agent=request.user)
            return self._now(request.user)

        return idempotent_write(request, write)
