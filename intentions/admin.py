"""Working state and prospective memory in the admin.

Everything here is history or engine state, so the pages are read-only. The
operator's two decisions about an intention — cancel it, or mark it complete —
are admin actions that call the lifecycle services, which record the
transition and the ledger event like any other change.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import F, QuerySet
from django.db.models.fields.json import KT
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from piper.admin_display import pretty_json
from piper.errors import PiperError

from .models import (
    Escalation,
    EventCursor,
    Firing,
    Handover,
    Intention,
    OutboxMessage,
    PendingItem,
    Thread,
    Webhook,
    WorkingState,
)
from .services import lifecycle, outbox


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _is_changelist(request) -> bool:
    return request.resolver_match.url_name.endswith("changelist")


def _link(url_name: str, pk, text=None) -> str:
    if pk is None:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse(url_name, args=[pk]), text or pk)


def _event_link(event_id) -> str:
    return _link("admin:ledger_event_change", event_id, str(event_id)[:8] if event_id else None)


def _table(headers: list[str], rows: list[tuple], empty: str) -> str:
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    if not rows:
        body = format_html('<tr><td colspan="{}">{}</td></tr>', len(headers), empty)
    else:
        body = format_html_join(
            "",
            "<tr>{}</tr>",
            ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
        )
    return format_html("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head, body)


def _when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S %Z") if value else "-"


# ------------------------------------------------------------------------- threads


INLINE_VERSIONS = 20


class WorkingStateInline(ReadOnlyMixin, admin.TabularInline):
    """The latest versions only, without their state (up to 64 KiB each): a long-lived
    thread has thousands. The thread's page links to all of them."""

    model = WorkingState
    fields = ["version", "based_on", "size_bytes", "session_id", "goal", "created_at"]
    readonly_fields = fields
    ordering = ["-version"]
    extra = 0
    show_change_link = True
    verbose_name_plural = f"working-state versions (newest first; the latest {INLINE_VERSIONS})"

    def get_queryset(self, request):
        # A filter, not a slice: the inline formset filters the queryset again.
        return (
            super()
            .get_queryset(request)
            .filter(version__gt=F("thread__current_version") - INLINE_VERSIONS)
            .defer("state")
            .annotate(goal_text=KT("state__goal"), next_action_text=KT("state__next_action"))
        )

    @admin.display(description="goal / next action")
    def goal(self, version: WorkingState) -> str:
        text = version.goal_text or version.next_action_text
        return Truncator(text or "-").chars(80)


class HandoverInline(ReadOnlyMixin, admin.TabularInline):
    model = Handover
    fields = [
        "status",
        "from_session",
        "to_session",
        "frozen_version",
        "note",
        "created_at",
        "resumed_at",
        "acknowledged_at",
        "succession_event",
    ]
    readonly_fields = fields
    ordering = ["-created_at"]
    extra = 0

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("succession_event")
            .defer("succession_event__payload")
        )


class PendingItemInline(ReadOnlyMixin, admin.TabularInline):
    model = PendingItem
    fields = ["intention", "kind", "occurrence", "added_at"]
    readonly_fields = fields
    extra = 0
    verbose_name_plural = "pending items (fired or rehearsed, not yet cleared by the agent)"

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .filter(cleared_at__isnull=True)
            .select_related("intention")
            .only("id", "thread_id", "intention__description", "kind", "occurrence", "added_at")
        )


@admin.register(Thread)
class ThreadAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["key", "agent", "status", "session_id", "current_version", "updated_at"]
    list_filter = ["status", "agent"]
    list_select_related = ["agent"]
    search_fields = ["=id", "key", "session_id"]
    ordering = ["-updated_at", "key"]
    readonly_fields = [
        "id",
        "agent",
        "key",
        "status",
        "session_id",
        "current_version",
        "all_versions",
        "created_at",
        "updated_at",
    ]
    fields = readonly_fields
    inlines = [WorkingStateInline, HandoverInline, PendingItemInline]

    @admin.display(description="history")
    def all_versions(self, thread: Thread) -> str:
        url = reverse("admin:intentions_workingstate_changelist")
        return format_html(
            '<a href="{}?q={}">all {} versions</a>', url, thread.pk, thread.current_version
        )


@admin.register(WorkingState)
class WorkingStateAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["thread", "version", "based_on", "size_bytes", "session_id", "created_at"]
    list_filter = ["agent"]
    list_select_related = ["thread", "agent"]
    search_fields = ["=thread__id", "thread__key", "session_id"]
    ordering = ["-created_at", "-version"]
    show_full_result_count = False
    readonly_fields = [
        "id",
        "agent",
        "thread",
        "version",
        "based_on",
        "size_bytes",
        "session_id",
        "source_event",
        "created_at",
        "checkpoint",
    ]
    fields = readonly_fields

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.defer("state") if _is_changelist(request) else qs

    @admin.display(description="state")
    def checkpoint(self, version: WorkingState) -> str:
        return pretty_json(version.state)


@admin.register(Handover)
class HandoverAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "thread",
        "agent",
        "status",
        "from_session",
        "to_session",
        "frozen_version",
        "created_at",
        "acknowledged_at",
    ]
    list_filter = ["status", "agent"]
    list_select_related = ["thread", "agent"]
    search_fields = ["=thread__id", "thread__key", "from_session", "to_session"]
    ordering = ["-created_at"]
    readonly_fields = [
        "id",
        "agent",
        "thread",
        "status",
        "from_session",
        "to_session",
        "frozen_version",
        "note",
        "succession_event",
        "created_at",
        "resumed_at",
        "acknowledged_at",
    ]
    fields = readonly_fields


# ---------------------------------------------------------------------- intentions

HEAVY_JSON = [
    "trigger_spec",
    "required_context",
    "completion_evidence",
    "retry_policy",
    "escalation_policy",
    "escalation",
]


class EscalatedFilter(admin.SimpleListFilter):
    title = "escalated"
    parameter_name = "escalated"

    def lookups(self, request, model_admin):
        return [("yes", "Escalated"), ("no", "Not escalated")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(escalated_at__isnull=self.value() == "no")
        return queryset


@admin.register(Intention)
class IntentionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "summary",
        "agent",
        "status",
        "trigger_type",
        "priority",
        "due_at",
        "occurrence",
        "last_fired_at",
        "escalated_at",
        "thread",
    ]
    list_filter = ["status", "trigger_type", EscalatedFilter, "agent"]
    list_select_related = ["agent", "thread"]
    search_fields = ["=id", "description", "source_session", "inherited_by"]
    ordering = ["-created_at", "-id"]
    show_full_result_count = False
    actions = ["cancel_intentions", "complete_intentions"]
    readonly_fields = [
        "id",
        "agent",
        "thread",
        "description",
        "priority",
        "status",
        "occurrence",
        "trigger_type",
        "trigger",
        "not_before",
        "due_at",
        "rrule",
        "expires_at",
        "dependencies",
        "dependents",
        "last_fired_at",
        "last_rehearsed_at",
        "escalated_at",
        "escalation_shown",
        "armed_after_seq",
        "completion_criteria",
        "evidence",
        "context",
        "policies",
        "source_session",
        "inherited_by",
        "source_event",
        "created_at",
        "updated_at",
        "timeline",
    ]
    fieldsets = [
        (None, {"fields": ["id", "agent", "thread", "description", "priority", "status"]}),
        (
            "Trigger",
            {
                "fields": [
                    "trigger_type",
                    "trigger",
                    "not_before",
                    "due_at",
                    "rrule",
                    "occurrence",
                    "expires_at",
                    "dependencies",
                    "dependents",
                    "armed_after_seq",
                ]
            },
        ),
        (
            "Engine",
            {
                "fields": [
                    "last_fired_at",
                    "last_rehearsed_at",
                    "escalated_at",
                    "escalation_shown",
                    "source_session",
                    "inherited_by",
                ]
            },
        ),
        (
            "Completion",
            {"fields": ["completion_criteria", "evidence", "context", "policies"]},
        ),
        ("Provenance", {"fields": ["source_event", "created_at", "updated_at"]}),
        ("Timeline: transitions and firings", {"fields": ["timeline"]}),
    ]

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.defer(*HEAVY_JSON) if _is_changelist(request) else qs

    @admin.display(description="description", ordering="description")
    def summary(self, intention: Intention) -> str:
        return Truncator(intention.description).chars(80)

    @admin.display(description="trigger spec")
    def trigger(self, intention: Intention) -> str:
        return pretty_json(intention.trigger_spec)

    @admin.display(description="completion evidence")
    def evidence(self, intention: Intention) -> str:
        return pretty_json(intention.completion_evidence)

    @admin.display(description="required context")
    def context(self, intention: Intention) -> str:
        return pretty_json(intention.required_context)

    @admin.display(description="escalation")
    def escalation_shown(self, intention: Intention) -> str:
        return pretty_json(intention.escalation)

    @admin.display(description="retry / escalation policy")
    def policies(self, intention: Intention) -> str:
        return pretty_json(
            {"retry": intention.retry_policy, "escalation": intention.escalation_policy}
        )

    def _intention_links(self, intentions) -> str:
        links = [
            (
                reverse("admin:intentions_intention_change", args=[i.pk]),
                Truncator(i.description).chars(40),
                i.status,
            )
            for i in intentions
        ]
        if not links:
            return "-"
        return format_html_join(mark_safe("<br>"), '<a href="{}">{}</a> ({})', links)

    @admin.display(description="waits for")
    def dependencies(self, intention: Intention) -> str:
        return self._intention_links(
            Intention.objects.filter(dependent_links__intention=intention).order_by(
                "dependent_links__id"
            )
        )

    @admin.display(description="waited for by")
    def dependents(self, intention: Intention) -> str:
        return self._intention_links(
            Intention.objects.filter(dependency_links__depends_on=intention).order_by(
                "dependency_links__id"
            )
        )

    @admin.display(description="timeline")
    def timeline(self, intention: Intention) -> str:
        transitions = [
            (
                _when(t.at),
                t.from_status or "∅ (created)",
                t.to_status,
                t.occurrence,
                t.reason or "-",
                _event_link(t.event_id),
            )
            for t in intention.transitions.order_by("id")
        ]
        firings = [
            (
                f.occurrence,
                _when(f.fired_at),
                f.cause,
                _event_link(f.cause_event_id),
                _event_link(f.event_id),
                _link("admin:intentions_outboxmessage_change", f.outbox.pk, f.outbox.status)
                if hasattr(f, "outbox")
                else "-",
            )
            for f in intention.firings.select_related("outbox").order_by("occurrence")
        ]
        escalations = [
            (
                e.occurrence,
                _when(e.escalated_at),
                e.reason,
                e.attempts,
                _event_link(e.event_id),
                _link("admin:intentions_outboxmessage_change", e.outbox.pk, e.outbox.status)
                if hasattr(e, "outbox")
                else "-",
            )
            for e in intention.escalations.select_related("outbox").order_by("occurrence")
        ]
        return format_html(
            "<h4>Transitions (engine clock)</h4>{}<h4>Firings</h4>{}<h4>Escalations</h4>{}",
            _table(
                ["at", "from", "to", "occurrence", "reason", "ledger event"],
                transitions,
                "no transitions",
            ),
            _table(
                ["occurrence", "fired at", "cause", "cause event", "ledger event", "webhook"],
                firings,
                "never fired",
            ),
            _table(
                ["occurrence", "escalated at", "reason", "attempts", "ledger event", "webhook"],
                escalations,
                "never escalated",
            ),
        )

    # ---- the operator's decisions, through the lifecycle services

    def has_lifecycle_permission(self, request) -> bool:
        return request.user.has_perm("intentions.change_intention")

    @admin.action(description="Cancel selected intentions", permissions=["lifecycle"])
    def cancel_intentions(self, request, queryset: QuerySet[Intention]):
        operator = request.user.get_username()
        self._apply(
            request,
            queryset,
            "Cancelled",
            lambda i: lifecycle.intention_cancel(
                agent=i.agent, intention_id=i.pk, reason=f"cancelled by operator {operator}"
            ),
        )

    @admin.action(description="Complete selected intentions", permissions=["lifecycle"])
    def complete_intentions(self, request, queryset: QuerySet[Intention]):
        operator = request.user.get_username()
        self._apply(
            request,
            queryset,
            "Completed",
            lambda i: lifecycle.intention_complete(
                agent=i.agent,
                intention_id=i.pk,
                evidence={"completed_by": "operator", "operator": operator},
            ),
        )

    def _apply(self, request, queryset: QuerySet[Intention], verb: str, act) -> None:
        done, skipped = 0, []
        for intention in queryset.select_related("agent").order_by("created_at", "id"):
            try:
                act(intention)
                done += 1
            except PiperError as exc:  # e.g. completing a cancelled intention
                skipped.append(f"{Truncator(intention.description).chars(40)}: {exc.message}")
        if done:
            self.message_user(request, f"{verb} {done} intention(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"Skipped {len(skipped)}: " + "; ".join(skipped), messages.WARNING
            )


@admin.register(Firing)
class FiringAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["intention", "occurrence", "fired_at", "cause", "agent", "recorded_at"]
    list_filter = ["cause", "agent"]
    list_select_related = ["intention", "agent"]
    search_fields = ["=id", "=intention__id", "intention__description"]
    ordering = ["-recorded_at"]
    show_full_result_count = False
    readonly_fields = [
        "id",
        "agent",
        "intention",
        "occurrence",
        "fired_at",
        "cause",
        "cause_event",
        "event",
        "recorded_at",
    ]
    fields = readonly_fields

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.defer(*(f"intention__{name}" for name in HEAVY_JSON))


@admin.register(Escalation)
class EscalationAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["intention", "occurrence", "reason", "attempts", "escalated_at", "agent"]
    list_filter = ["reason", "agent"]
    list_select_related = ["intention", "agent"]
    search_fields = ["=id", "=intention__id", "intention__description"]
    ordering = ["-recorded_at"]
    show_full_result_count = False
    readonly_fields = [
        "id",
        "agent",
        "intention",
        "occurrence",
        "reason",
        "attempts",
        "escalated_at",
        "policy_shown",
        "event",
        "recorded_at",
    ]
    fields = readonly_fields

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.defer(*(f"intention__{name}" for name in HEAVY_JSON))

    @admin.display(description="policy")
    def policy_shown(self, escalation: Escalation) -> str:
        return pretty_json(escalation.policy)


# ------------------------------------------------------------------ delivery, clock


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "firing",
        "escalation",
        "agent",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "error",
    ]
    list_filter = ["status", "agent"]
    list_select_related = ["agent", "firing", "escalation"]
    search_fields = ["=id", "=firing__id", "=escalation__id", "last_error"]
    ordering = ["-next_attempt_at"]
    show_full_result_count = False
    actions = ["deliver_now"]
    readonly_fields = [
        "id",
        "agent",
        "firing",
        "escalation",
        "status",
        "attempts",
        "next_attempt_at",
        "claimed_until",
        "delivered_at",
        "last_error",
        "body",
    ]
    fields = readonly_fields

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs.defer("payload") if _is_changelist(request) else qs

    @admin.display(description="last error")
    def error(self, message: OutboxMessage) -> str:
        return Truncator(message.last_error).chars(60) or "-"

    @admin.display(description="payload")
    def body(self, message: OutboxMessage) -> str:
        return pretty_json(message.payload)

    def has_deliver_permission(self, request) -> bool:
        return request.user.has_perm("intentions.change_outboxmessage")

    @admin.action(description="Try delivering now", permissions=["deliver"])
    def deliver_now(self, request, queryset: QuerySet[OutboxMessage]):
        outcomes: dict[str, int] = {}
        for message_id in queryset.order_by("next_attempt_at").values_list("pk", flat=True):
            outcome = outbox.deliver(message_id=message_id)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        self.message_user(request, f"Delivery attempted: {summary}.", messages.INFO)


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Set through PUT /api/v1/webhook (admin scope). The secret is never shown."""

    list_display = ["agent", "url", "is_active", "created_at"]
    list_filter = ["is_active"]
    list_select_related = ["agent"]
    search_fields = ["agent__name", "url"]
    readonly_fields = ["agent", "url", "is_active", "created_at"]
    fields = readonly_fields


@admin.register(EventCursor)
class EventCursorAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """How far the event matcher has read each agent's ledger."""

    list_display = ["agent", "last_seq"]
    list_select_related = ["agent"]
    search_fields = ["agent__name"]
    readonly_fields = ["agent", "last_seq"]
    fields = readonly_fields
