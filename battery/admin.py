"""Battery runs in the admin: read-only, since a run is a measurement, not a setting."""

from pathlib import Path

from django.contrib import admin
from django.utils.html import format_html

from .models import BatteryRun, ItemResult


class ItemResultInline(admin.TabularInline):
    model = ItemResult
    fields = [
        "suite",
        "item",
        "title",
        "passed",
        "failure_code",
        "detail",
        "metrics",
        "duration_ms",
    ]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(BatteryRun)
class BatteryRunAdmin(admin.ModelAdmin):
    list_display = [
        "started_at",
        "status",
        "score",
        "score_of_run",
        "suite_codes",
        "target",
        "agent_name",
        "report",
    ]
    list_filter = ["status", "target"]
    search_fields = ["=id", "agent_name", "target"]
    date_hierarchy = "started_at"
    ordering = ["-started_at"]
    inlines = [ItemResultInline]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    "status",
                    "score",
                    "uncapped_score",
                    "score_of_run",
                    "suites",
                    "seed",
                ],
                "description": "The total counts every designed suite: one that did not run "
                "counts 0 and the run is incomplete. The score of the suites that ran is not "
                "the battery's total.",
            },
        ),
        ("Where", {"fields": ["target", "agent_name", "report", "started_at", "finished_at"]}),
        ("Results", {"fields": ["suite_scores", "missing_suites", "gates", "metrics", "error"]}),
    ]
    readonly_fields = [
        "id",
        "status",
        "score",
        "uncapped_score",
        "score_of_run",
        "suites",
        "seed",
        "target",
        "agent_name",
        "report",
        "started_at",
        "finished_at",
        "suite_scores",
        "missing_suites",
        "gates",
        "metrics",
        "error",
    ]

    def get_queryset(self, request):
        # The list page does not need the heavy JSON columns.
        qs = super().get_queryset(request)
        if request.resolver_match and request.resolver_match.url_name.endswith("changelist"):
            qs = qs.defer("suite_scores", "missing_suites", "gates", "metrics", "error")
        return qs

    @admin.display(description="suites")
    def suite_codes(self, run: BatteryRun) -> str:
        return ", ".join(run.suites)

    @admin.display(description="report")
    def report(self, run: BatteryRun) -> str:
        if not run.report_dir:
            return "—"
        html = Path(run.report_dir).resolve() / "report.html"
        return format_html('<a href="{}">{}</a>', html.as_uri(), html)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
