"""Retrieval telemetry in the admin: read-only traces, and the failure taxonomy over time.

Traces and feedback are written only by the recall services; the admin shows
them. The feedback changelist is the taxonomy view: filter by code, outcome
and date (date_hierarchy), and above the list a table of counts per day and
failure code for what the filters selected.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.text import Truncator

from piper.admin_display import pretty_json

from . import selectors
from .models import FailureCode, RecallFeedback, RetrievalTrace


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


@admin.register(RetrievalTrace)
class RetrievalTraceAdmin(ReadOnlyAdmin):
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
    list_display = ["created_at", "agent", "route", "outcome", "failure_code", "used_count", "note"]
    list_filter = ["failure_code", "outcome", "trace__route", "created_at"]
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
