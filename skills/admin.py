"""Procedural memory in the admin.

Versions, validations and executions are history, so the pages are read-only.
The operator's decisions — promote (only as far as the evidence goes),
deprecate, retire — are admin actions on versions that call the lifecycle
services, which record the transition and its ledger event like any other.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from piper.admin_display import preformatted, pretty_json
from piper.errors import PiperError

from . import selectors
from .models import Execution, Skill, SkillTrace, SkillVersion, Validation, ValidationCase
from .services import lifecycle

RECENT_EXECUTIONS = 20


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _link(url_name: str, pk, text=None) -> str:
    if pk is None:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse(url_name, args=[pk]), text or pk)


def _rate(successes: int, total: int) -> str:
    rate = selectors.rate(successes, total)
    return "-" if rate is None else f"{rate:.0%} of {total}"


class VersionInline(ReadOnlyMixin, admin.TabularInline):
    model = SkillVersion
    fk_name = "skill"
    fields = ["number", "status", "purpose", "success_rate", "last_used_at", "created_at"]
    readonly_fields = fields
    ordering = ["-number"]
    extra = 0
    show_change_link = True

    def get_queryset(self, request):
        return selectors.with_stats(super().get_queryset(request).defer(*selectors.CODE_COLUMNS))

    @admin.display(description="success rate")
    def success_rate(self, version: SkillVersion) -> str:
        return _rate(version.successes, version.executions_total)

    @admin.display(description="last used")
    def last_used_at(self, version: SkillVersion):
        return version.last_used_at or "-"


@admin.register(Skill)
class SkillAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["name", "agent", "versions_count", "created_at"]
    list_filter = ["agent"]
    list_select_related = ["agent"]
    search_fields = ["name", "agent__name"]
    readonly_fields = ["id", "agent", "name", "source_event", "created_at"]
    inlines = [VersionInline]

    @admin.display(description="versions")
    def versions_count(self, skill: Skill) -> int:
        return skill.versions.count()


class ExecutionInline(ReadOnlyMixin, admin.TabularInline):
    model = Execution
    fk_name = "version"
    fields = ["created_at", "source", "outcome", "succeeded", "validator_passed", "duration_ms"]
    readonly_fields = fields
    ordering = ["-id"]
    extra = 0
    show_change_link = True
    verbose_name_plural = f"executions (newest first; the latest {RECENT_EXECUTIONS})"

    def get_queryset(self, request):
        queryset = super().get_queryset(request).only(*self.fields, "id", "version_id")
        # A filter, not a slice: the inline formset filters the queryset again.
        object_id = request.resolver_match.kwargs.get("object_id")
        latest = list(
            Execution.objects.filter(version_id=object_id)
            .order_by("-id")
            .values_list("id", flat=True)[:RECENT_EXECUTIONS]
        )
        return queryset.filter(id__in=latest)


@admin.register(SkillVersion)
class SkillVersionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "skill",
        "number",
        "status",
        "agent",
        "success_rate",
        "recent_success_rate",
        "last_used_at",
        "status_changed_at",
    ]
    list_filter = ["status", "agent"]
    list_select_related = ["skill", "agent"]
    search_fields = ["skill__name", "purpose", "agent__name"]
    ordering = ["-id"]
    actions = ["promote_versions", "deprecate_versions", "retire_versions"]
    inlines = [ExecutionInline]
    fieldsets = [
        (None, {"fields": ["id", "agent", "skill", "number", "status", "status_changed_at"]}),
        ("Statistics (derived from executions and validations)", {"fields": ["stats"]}),
        ("Lifecycle", {"fields": ["transitions_table", "supersedes", "source_event"]}),
        (
            "When it applies",
            {
                "fields": [
                    "purpose",
                    "scope",
                    "trigger_json",
                    "preconditions_json",
                    "contraindications_json",
                    "required_tools",
                    "required_permissions",
                ]
            },
        ),
        (
            "Code",
            {
                "fields": [
                    "schema_json",
                    "entry_point",
                    "procedure_code",
                    "validator_code",
                    "rollback_code",
                    "examples_json",
                    "holdout_json",
                ]
            },
        ),
    ]
    readonly_fields = [
        "id",
        "agent",
        "skill",
        "number",
        "status",
        "status_changed_at",
        "stats",
        "transitions_table",
        "supersedes",
        "source_event",
        "purpose",
        "scope",
        "trigger_json",
        "preconditions_json",
        "contraindications_json",
        "required_tools",
        "required_permissions",
        "schema_json",
        "entry_point",
        "procedure_code",
        "validator_code",
        "rollback_code",
        "examples_json",
        "holdout_json",
    ]

    def get_queryset(self, request):
        return selectors.with_stats(super().get_queryset(request).defer("intent_embedding"))

    @admin.display(description="success rate")
    def success_rate(self, version: SkillVersion) -> str:
        return _rate(version.successes, version.executions_total)

    @admin.display(description="recent")
    def recent_success_rate(self, version: SkillVersion) -> str:
        return _rate(version.recent_successes, version.recent_total)

    @admin.display(description="last used")
    def last_used_at(self, version: SkillVersion):
        return version.last_used_at or "-"

    @admin.display(description="statistics")
    def stats(self, version: SkillVersion) -> str:
        from .serializers import SkillStatsOutputSerializer

        return pretty_json(SkillStatsOutputSerializer().to_representation(version))

    @admin.display(description="transitions")
    def transitions_table(self, version: SkillVersion) -> str:
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (t.at, t.from_status or "∅", t.to_status, t.reason, t.actor or "-")
                for t in version.transitions.order_by("id")
            ),
        )
        return format_html(
            "<table><thead><tr><th>at</th><th>from</th><th>to</th><th>reason</th>"
            "<th>actor</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="trigger")
    def trigger_json(self, version):
        return pretty_json(version.trigger)

    @admin.display(description="preconditions")
    def preconditions_json(self, version):
        return pretty_json(version.preconditions)

    @admin.display(description="contraindications")
    def contraindications_json(self, version):
        return pretty_json(version.contraindications)

    @admin.display(description="parameter schema")
    def schema_json(self, version):
        return pretty_json(version.parameter_schema)

    @admin.display(description="procedure")
    def procedure_code(self, version):
        return preformatted(version.procedure)

    @admin.display(description="validator")
    def validator_code(self, version):
        return preformatted(version.validator)

    @admin.display(description="rollback")
    def rollback_code(self, version):
        return preformatted(version.rollback)

    @admin.display(description="examples")
    def examples_json(self, version):
        return pretty_json(version.examples)

    @admin.display(description="hold-out cases")
    def holdout_json(self, version):
        return pretty_json(version.holdout)

    # ---- the operator's decisions, through the lifecycle services

    def has_lifecycle_permission(self, request) -> bool:
        return request.user.has_perm("skills.change_skillversion")

    @admin.action(
        description="Promote selected versions (if the evidence allows)", permissions=["lifecycle"]
    )
    def promote_versions(self, request, queryset):
        self._apply(request, queryset, "Promoted", lifecycle.version_promote, "")

    @admin.action(description="Deprecate selected versions", permissions=["lifecycle"])
    def deprecate_versions(self, request, queryset):
        self._apply(request, queryset, "Deprecated", lifecycle.version_deprecate, "deprecated")

    @admin.action(description="Retire selected versions", permissions=["lifecycle"])
    def retire_versions(self, request, queryset):
        self._apply(request, queryset, "Retired", lifecycle.version_retire, "retired")

    def _apply(self, request, queryset: QuerySet[SkillVersion], verb: str, service, what) -> None:
        operator = request.user.get_username()
        done, skipped = 0, []
        for version in queryset.select_related("agent", "skill").order_by("id"):
            try:
                service(
                    agent=version.agent,
                    version_id=version.pk,
                    reason=f"{what} by operator {operator}" if what else f"operator {operator}",
                    actor=f"admin:{operator}",
                )
                done += 1
            except PiperError as exc:  # e.g. promoting without evidence
                skipped.append(f"{version.skill.name} v{version.number}: {exc.message}")
        if done:
            self.message_user(request, f"{verb} {done} version(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"Skipped {len(skipped)}: " + "; ".join(skipped), messages.WARNING
            )


class ValidationCaseInline(ReadOnlyMixin, admin.StackedInline):
    model = ValidationCase
    fields = [
        "index",
        "outcome",
        "passed",
        "params",
        "expected",
        "result",
        "verdict",
        "duration_ms",
        "error_text",
        "stdout_text",
        "stderr_text",
    ]
    readonly_fields = fields
    ordering = ["index"]
    extra = 0

    @admin.display(description="error")
    def error_text(self, case):
        return preformatted(case.error)

    @admin.display(description="stdout")
    def stdout_text(self, case):
        return preformatted(case.stdout)

    @admin.display(description="stderr")
    def stderr_text(self, case):
        return preformatted(case.stderr)


@admin.register(Validation)
class ValidationAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "version",
        "kind",
        "status",
        "cases_passed",
        "cases_total",
        "agent",
        "created_at",
        "finished_at",
    ]
    list_filter = ["kind", "status", "agent"]
    list_select_related = ["version__skill", "agent"]
    search_fields = ["version__skill__name", "agent__name"]
    ordering = ["-id"]
    readonly_fields = [
        "id",
        "agent",
        "version",
        "kind",
        "status",
        "cases_total",
        "cases_passed",
        "error",
        "requested_by",
        "source_event",
        "finish_event",
        "created_at",
        "finished_at",
    ]
    inlines = [ValidationCaseInline]


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "version",
        "source",
        "status",
        "outcome",
        "succeeded",
        "validator_passed",
        "externally_verified",
        "duration_ms",
        "agent",
        "created_at",
    ]
    list_filter = ["source", "status", "outcome", "succeeded", "externally_verified", "agent"]
    list_select_related = ["version__skill", "agent"]
    search_fields = ["version__skill__name", "agent__name", "task"]
    ordering = ["-id"]
    readonly_fields = [
        "id",
        "agent",
        "version_link",
        "source",
        "status",
        "version_status",
        "params_json",
        "novel_params",
        "task",
        "context_json",
        "outcome",
        "succeeded",
        "result_json",
        "verdict_json",
        "validator_passed",
        "externally_verified",
        "evidence_json",
        "error_text",
        "stdout_text",
        "stderr_text",
        "tool_calls_json",
        "duration_ms",
        "session_id",
        "source_event",
        "finish_event",
        "created_at",
        "finished_at",
    ]
    fields = readonly_fields

    @admin.display(description="version")
    def version_link(self, execution):
        return _link(
            "admin:skills_skillversion_change", execution.version_id, str(execution.version)
        )

    @admin.display(description="params")
    def params_json(self, execution):
        return pretty_json(execution.params)

    @admin.display(description="context")
    def context_json(self, execution):
        return pretty_json(execution.context)

    @admin.display(description="result")
    def result_json(self, execution):
        return pretty_json(execution.result)

    @admin.display(description="verdict")
    def verdict_json(self, execution):
        return pretty_json(execution.verdict)

    @admin.display(description="evidence")
    def evidence_json(self, execution):
        return pretty_json(execution.evidence)

    @admin.display(description="tool calls")
    def tool_calls_json(self, execution):
        return pretty_json(execution.tool_calls)

    @admin.display(description="error")
    def error_text(self, execution):
        return preformatted(execution.error)

    @admin.display(description="stdout")
    def stdout_text(self, execution):
        return preformatted(execution.stdout)

    @admin.display(description="stderr")
    def stderr_text(self, execution):
        return preformatted(execution.stderr)


@admin.register(SkillTrace)
class SkillTraceAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "created_at",
        "task_text",
        "steps_count",
        "succeeded",
        "verified",
        "source_type",
        "instruction_like",
        "agent",
    ]
    list_filter = ["succeeded", "verified", "source_type", "instruction_like", "agent"]
    list_select_related = ["agent"]
    search_fields = ["=id", "task", "session_id", "task_id", "agent__name"]
    ordering = ["-id"]
    readonly_fields = [
        "id",
        "agent",
        "task",
        "inputs_json",
        "steps_json",
        "output_json",
        "succeeded",
        "verified",
        "verification_json",
        "source_type",
        "instruction_like",
        "session_id",
        "task_id",
        "source_event",
        "created_at",
    ]
    fields = readonly_fields

    @admin.display(description="task")
    def task_text(self, trace):
        return trace.task[:120]

    @admin.display(description="steps")
    def steps_count(self, trace):
        return len(trace.steps or [])

    @admin.display(description="inputs")
    def inputs_json(self, trace):
        return pretty_json(trace.inputs)

    @admin.display(description="steps")
    def steps_json(self, trace):
        return pretty_json(trace.steps)

    @admin.display(description="output")
    def output_json(self, trace):
        return pretty_json(trace.output)

    @admin.display(description="verification")
    def verification_json(self, trace):
        return pretty_json(trace.verification)
