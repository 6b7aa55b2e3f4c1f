"""Consolidation in the admin: runs (what they read, proposed, asserted, how long),
candidate facts with their evidence, and candidate skills with their traces.
Read-only; accept and reject go through the services."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from ledger.admin import ReadOnlyAdmin
from piper.errors import PiperError

from . import services, skill_candidates
from .models import (
    CandidateEvidence,
    CandidateFact,
    CandidateSkill,
    CandidateSkillTrace,
    ConsolidationRun,
)


@admin.register(ConsolidationRun)
class ConsolidationRunAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "agent",
        "kind",
        "status",
        "progress",
        "episodes_read",
        "episodes_excluded",
        "candidates_proposed",
        "candidates_asserted",
        "duration_ms",
    ]
    list_filter = ["status", "kind"]
    list_select_related = ["agent"]
    search_fields = ["=id", "agent__name", "error"]
    date_hierarchy = "started_at"
    ordering = ["-started_at", "-id"]
    fieldsets = [
        (None, {"fields": ["id", "agent", "kind", "status", "error"]}),
        ("What it read", {"fields": ["from_seq", "to_seq", "cursor_seq", "steps"]}),
        (
            "What it found",
            {
                "fields": [
                    "episodes_read",
                    "episodes_excluded",
                    "statements_found",
                    "statements_skipped",
                    "candidates_proposed",
                    "candidates_asserted",
                    "details",
                ]
            },
        ),
        (
            "When",
            {"fields": ["started_at", "heartbeat_at", "finished_at", "duration_ms"]},
        ),
        ("Ledger", {"fields": ["source_event", "finish_event"]}),
    ]
    readonly_fields = [f for _, spec in fieldsets for f in spec["fields"]]

    @admin.display(description="read")
    def progress(self, run: ConsolidationRun) -> str:
        span = run.to_seq - run.from_seq
        done = run.cursor_seq - run.from_seq
        return f"{done}/{span} seq" if span else "-"


class CandidateEvidenceInline(admin.TabularInline):
    model = CandidateEvidence
    extra = 0
    can_delete = False
    fields = [
        "episode_link",
        "episode_text",
        "field",
        "rule",
        "confidence",
        "source_key",
        "event",
        "withdrawn_at",
    ]
    readonly_fields = fields
    ordering = ["occurred_at", "id"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("episode", "event")
            .defer("event__payload", "episode__embedding", "episode__search_vector")
        )

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="episode")
    def episode_link(self, evidence: CandidateEvidence) -> str:
        if evidence.episode is None:
            return f"{evidence.episode_id} (erased)"
        url = reverse("admin:episodes_episode_change", args=[evidence.episode_id])
        return format_html('<a href="{}">{}</a>', url, evidence.occurred_at)

    @admin.display(description="what it says")
    def episode_text(self, evidence: CandidateEvidence) -> str:
        if evidence.episode is None:
            return "-"
        return Truncator(getattr(evidence.episode, evidence.field, "")).chars(200)


@admin.register(CandidateFact)
class CandidateFactAdmin(ReadOnlyAdmin):
    list_display = [
        "subject",
        "predicate",
        "value",
        "status",
        "confidence",
        "sources",
        "fact_outcome",
        "agent",
        "created_at",
    ]
    list_filter = ["status", "fact_outcome", "extractor", "predicate"]
    list_select_related = ["agent"]
    search_fields = ["=id", "subject", "value", "predicate", "agent__name"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    inlines = [CandidateEvidenceInline]
    actions = ["accept_candidates", "reject_candidates"]
    fieldsets = [
        (None, {"fields": ["id", "agent", "subject", "predicate", "value", "status"]}),
        (
            "Why",
            {
                "fields": [
                    "extractor",
                    "confidence",
                    "sources",
                    "valid_from",
                    "evidence_key",
                    "run",
                ]
            },
        ),
        (
            "Decision",
            {"fields": ["fact_link", "fact_outcome", "reason", "decided_by", "decided_at"]},
        ),
        ("Ledger", {"fields": ["source_event", "decision_event", "created_at"]}),
    ]
    readonly_fields = [f for _, spec in fieldsets for f in spec["fields"]]

    @admin.display(description="fact")
    def fact_link(self, candidate: CandidateFact) -> str:
        if candidate.fact_id is None:
            return "-"
        url = reverse("admin:facts_fact_change", args=[candidate.fact_id])
        return format_html('<a href="{}">{}</a>', url, candidate.fact_id)

    def has_decide_permission(self, request) -> bool:
        return request.user.has_perm("consolidation.change_candidatefact")

    @admin.action(description="Accept: assert as an agent_inference fact", permissions=["decide"])
    def accept_candidates(self, request, queryset: QuerySet[CandidateFact]):
        self._decide(request, queryset, accept=True)

    @admin.action(description="Reject for good (retracts what it asserted)", permissions=["decide"])
    def reject_candidates(self, request, queryset: QuerySet[CandidateFact]):
        self._decide(request, queryset, accept=False)

    def _decide(self, request, queryset: QuerySet[CandidateFact], *, accept: bool) -> None:
        actor = request.user.get_username()
        done, skipped = 0, []
        for candidate in queryset.select_related("agent").order_by("created_at", "id"):
            try:
                if accept:
                    services.candidate_accept(
                        agent=candidate.agent, candidate_id=candidate.pk, actor=actor
                    )
                else:
                    services.candidate_reject(
                        agent=candidate.agent,
                        candidate_id=candidate.pk,
                        reason=f"rejected in the admin by {actor}",
                        actor=actor,
                    )
                done += 1
            except PiperError as exc:
                skipped.append(f"{candidate.pk}: {exc.message}")
        verb = "Accepted" if accept else "Rejected"
        if done:
            self.message_user(request, f"{verb} {done} candidate(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"Skipped {len(skipped)}: " + "; ".join(skipped), messages.WARNING
            )


class CandidateSkillTraceInline(admin.TabularInline):
    model = CandidateSkillTrace
    extra = 0
    can_delete = False
    fields = ["trace_link", "inputs_key", "occurred_at", "event"]
    readonly_fields = fields
    ordering = ["occurred_at", "id"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("event").defer("event__payload")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="trace")
    def trace_link(self, evidence: CandidateSkillTrace) -> str:
        url = reverse("admin:skills_skilltrace_change", args=[evidence.trace_id])
        return format_html('<a href="{}">{}</a>', url, evidence.trace_id)


@admin.register(CandidateSkill)
class CandidateSkillAdmin(ReadOnlyAdmin):
    list_display = ["tools_text", "status", "traces", "distinct_inputs", "agent", "created_at"]
    list_filter = ["status"]
    list_select_related = ["agent"]
    search_fields = ["=id", "=shape_key", "task", "agent__name"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    inlines = [CandidateSkillTraceInline]
    actions = ["reject_candidates"]
    fieldsets = [
        (None, {"fields": ["id", "agent", "tools", "task", "status", "shape_key", "run"]}),
        ("Evidence", {"fields": ["traces", "distinct_inputs"]}),
        (
            "Decision",
            {"fields": ["version_link", "skill_id", "reason", "decided_by", "decided_at"]},
        ),
        ("Ledger", {"fields": ["source_event", "decision_event", "created_at"]}),
    ]
    readonly_fields = [f for _, spec in fieldsets for f in spec["fields"]]

    @admin.display(description="procedure")
    def tools_text(self, candidate: CandidateSkill) -> str:
        return " → ".join(candidate.tools)

    @admin.display(description="version")
    def version_link(self, candidate: CandidateSkill) -> str:
        if candidate.version_id is None:
            return "-"
        url = reverse("admin:skills_skillversion_change", args=[candidate.version_id])
        return format_html('<a href="{}">{}</a>', url, candidate.version_id)

    def has_decide_permission(self, request) -> bool:
        return request.user.has_perm("consolidation.change_candidateskill")

    @admin.action(
        description="Reject for good (retires its version unless validated)",
        permissions=["decide"],
    )
    def reject_candidates(self, request, queryset: QuerySet[CandidateSkill]):
        actor = request.user.get_username()
        done, skipped = 0, []
        for candidate in queryset.select_related("agent").order_by("created_at", "id"):
            try:
                skill_candidates.candidate_skill_reject(
                    agent=candidate.agent,
                    candidate_id=candidate.pk,
                    reason=f"rejected in the admin by {actor}",
                    actor=actor,
                )
                done += 1
            except PiperError as exc:
                skipped.append(f"{candidate.pk}: {exc.message}")
        if done:
            self.message_user(request, f"Rejected {done} candidate skill(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"Skipped {len(skipped)}: " + "; ".join(skipped), messages.WARNING
            )
