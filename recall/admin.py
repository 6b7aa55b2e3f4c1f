"""Retrieval telemetry in the admin: read-only traces, the failure taxonomy
over time, look decisions, and suite H's live carry-over page.

Traces, feedback and look decisions are written only by the recall services;
the admin shows them. The feedback changelist is the taxonomy view: filter by
code, outcome and date (date_hierarchy), and above the list a table of counts
per day and failure code for what the filters selected. The traces
changelist links to the live carry-over page (recall.live): every live
agent's figures over a window, with charts.
"""

from __future__ import annotations

from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.text import Truncator

from piper.admin_display import bar_chart, pretty_json

from . import live, selectors
from .models import FailureCode, LookDecision, RecallFeedback, RetrievalTrace

# The rates charted on the live carry-over page, with what "good" is.
CHARTED_RATES = [
    ("open_item_survival_rate", "open items shown to successor", "higher"),
    ("open_item_execution_rate", "open items executed", "higher"),
    ("skill_success_rate", "skill runs succeeded", "higher"),
    ("skill_reuse_rate", "skills reused across sessions", "higher"),
    ("skill_follow_rate", "skill matches followed", "higher"),
    ("feedback_coverage", "reads with feedback", "higher"),
    ("retrieval_without_use_rate", "reads retrieved without use", "lower"),
    ("stale_answer_rate", "answers marked stale", "lower"),
    ("look_rate", "tasks where the agent looked", "higher"),
    ("missed_look_rate", "looks missed (needed)", "lower"),
]


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class HasFeedbackFilter(admin.SimpleListFilter):
    title = "feedback"
    parameter_name = "has_feedback"

    def lookups(self, request, model_admin):
        return [("yes", "with feedback"), ("no", "without feedback")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(feedback__isnull=False)
        if self.value() == "no":
            return queryset.filter(feedback__isnull=True)
        return queryset


def _rate_chart(rates: dict) -> dict:
    rows = []
    for name, label, better in CHARTED_RATES:
        value = rates.get(name)
        rows.append(
            {
                "label": label,
                "value": value or 0.0,
                "text": "nothing to count" if value is None else f"{value:.0%}",
                "css": "none" if value is None else better,
            }
        )
    return bar_chart(rows, maximum=1.0)


def carry_over_context(*, days: int) -> dict:
    """What the live carry-over page shows: the pooled figures and each agent's."""
    report = live.live_report(window=live.Window.ending(days=days))
    total = report.total
    return {
        "days": days,
        "window": report.window,
        "total": total,
        "total_chart": _rate_chart(total.rates()),
        "agents": [
            {"figures": figures, "rates": figures.rates(), "chart": _rate_chart(figures.rates())}
            for figures in report.per_agent
        ],
        "nothing_to_measure": not total.measured,
    }


@admin.register(RetrievalTrace)
class RetrievalTraceAdmin(ReadOnlyAdmin):
    change_list_template = "admin/recall/retrievaltrace/change_list.html"
    list_display = [
        "created_at",
        "agent",
        "route",
        "explicit",
        "short_query",
        "abstained",
        "returned_count",
        "latency_ms",
    ]
    list_filter = ["route", "explicit", "abstained", HasFeedbackFilter, "created_at"]
    list_select_related = ["agent"]
    search_fields = ["=id", "query", "agent__name"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    show_full_result_count = False
    fieldsets = [
        (None, {"fields": ["id", "agent", "created_at", "query", "filters_pretty"]}),
        ("Route", {"fields": ["route", "explicit", "decision_pretty"]}),
        (
            "Answer",
            {
                "fields": [
                    "abstained",
                    "latency_ms",
                    "embedding_model",
                    "returned_pretty",
                    "candidates_pretty",
                ]
            },
        ),
    ]
    readonly_fields = [
        "id",
        "agent",
        "created_at",
        "query",
        "filters_pretty",
        "route",
        "explicit",
        "decision_pretty",
        "abstained",
        "latency_ms",
        "embedding_model",
        "returned_pretty",
        "candidates_pretty",
    ]

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        if request.resolver_match and request.resolver_match.url_name.endswith("changelist"):
            qs = qs.defer("candidates", "decision", "filters")  # heavy JSON: not listed
        return qs

    def get_urls(self):
        own = [
            path(
                "carry-over/",
                self.admin_site.admin_view(self.carry_over_view),
                name="recall_carry_over",
            )
        ]
        return own + super().get_urls()

    def carry_over_view(self, request):
        """Suite H's figures for every live agent over ?days= (default the setting)."""
        from django.conf import settings

        try:
            days = min(max(int(request.GET.get("days", "")), 1), 366)
        except ValueError:
            days = settings.PIPER_LIVE_WINDOW_DAYS
        context = {
            **self.admin_site.each_context(request),
            "title": f"Live carry-over (suite H), last {days} days",
            "opts": self.model._meta,
            **carry_over_context(days=days),
        }
        return TemplateResponse(request, "admin/recall/carry_over.html", context)

    @admin.display(description="query")
    def short_query(self, trace: RetrievalTrace) -> str:
        return Truncator(trace.query).chars(80)

    @admin.display(description="returned")
    def returned_count(self, trace: RetrievalTrace) -> int:
        return len(trace.returned)

    @admin.display(description="decision")
    def decision_pretty(self, trace: RetrievalTrace) -> str:
        return pretty_json(trace.decision)

    @admin.display(description="filters")
    def filters_pretty(self, trace: RetrievalTrace) -> str:
        return pretty_json(trace.filters)

    @admin.display(description="returned")
    def returned_pretty(self, trace: RetrievalTrace) -> str:
        return pretty_json(trace.returned)

    @admin.display(description="candidates")
    def candidates_pretty(self, trace: RetrievalTrace) -> str:
        return pretty_json(trace.candidates)


@admin.register(RecallFeedback)
class RecallFeedbackAdmin(ReadOnlyAdmin):
    change_list_template = "admin/recall/recallfeedback/change_list.html"
    list_display = [
        "created_at",
        "agent",
        "route",
        "outcome",
        "failure_code",
        "stale",
        "used_count",
        "note",
    ]
    list_filter = ["failure_code", "outcome", "stale", "trace__route", "created_at"]
    list_select_related = ["agent", "trace"]
    search_fields = ["=trace__id", "note", "agent__name"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    fields = [
        "id",
        "agent",
        "trace",
        "outcome",
        "failure_code",
        "stale",
        "used",
        "note",
        "source_event",
        "created_at",
    ]
    readonly_fields = fields

    @admin.display(description="route", ordering="trace__route")
    def route(self, feedback: RecallFeedback) -> str:
        return feedback.trace.route

    @admin.display(description="used")
    def used_count(self, feedback: RecallFeedback) -> int:
        return len(feedback.used)

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context=extra_context)
        changelist = getattr(response, "context_data", {}).get("cl")
        if changelist is not None:
            codes = [("", "none"), *((c.value, c.value) for c in FailureCode)]
            days = selectors.failure_taxonomy(feedback=changelist.queryset.order_by())
            response.context_data["taxonomy"] = {
                "codes": codes,
                "rows": [
                    {
                        "day": day,
                        "counts": [counts.get(code, 0) for code, _ in codes],
                        "total": sum(counts.values()),
                    }
                    for day, counts in days
                ],
                "totals": [sum(counts.get(code, 0) for _, counts in days) for code, _ in codes],
                "legend": [(c.value, c.label) for c in FailureCode],
            }
        return response


@admin.register(LookDecision)
class LookDecisionAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "agent", "looked", "needed", "short_task", "trace"]
    list_filter = ["looked", "needed", "created_at"]
    list_select_related = ["agent"]
    search_fields = ["task", "agent__name", "session_id"]
    date_hierarchy = "created_at"
    fields = [
        "id",
        "agent",
        "task",
        "session_id",
        "looked",
        "needed",
        "trace",
        "note",
        "created_at",
    ]
    readonly_fields = fields

    @admin.display(description="task")
    def short_task(self, decision: LookDecision) -> str:
        return Truncator(decision.task).chars(80)
