"""Episodes, chunks and calibrations are read-only in the admin: they are projections
of the ledger (and calibrations are written by calibrate_abstention)."""

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from ledger.admin import ReadOnlyAdmin
from piper.admin_display import EmbeddedFilter

from .agent_graphs import agent_graphs
from .models import AbstentionCalibration, ActorGraph, Episode, SourceChunk
from .salience import effective_salience
from .tasks import build_agent_graphs

# The distinct-values filters read only this many of the newest rows: SELECT DISTINCT
# over every episode of every agent would make each page load a full scan.
RECENT_VALUES_SCAN = 5000
MAX_FILTER_CHOICES = 50


class RecentValuesFilter(admin.SimpleListFilter):
    """Exact match on a text column, offering the values seen in the newest episodes."""

    field_name = ""

    def lookups(self, request, model_admin):
        recent = Episode.objects.order_by("-id").values_list("id", flat=True)[:RECENT_VALUES_SCAN]
        values = (
            Episode.objects.filter(id__in=recent)
            .exclude(**{self.field_name: ""})
            .order_by(self.field_name)
            .values_list(self.field_name, flat=True)
            .distinct()[:MAX_FILTER_CHOICES]
        )
        return [(v, v) for v in values]

    def queryset(self, request, queryset):
        if self.value() is not None:
            return queryset.filter(**{self.field_name: self.value()})
        return queryset


class ActorFilter(RecentValuesFilter):
    title = "actor"
    parameter_name = "actor"
    field_name = "actor"


class EnvironmentFilter(RecentValuesFilter):
    title = "environment"
    parameter_name = "environment"
    field_name = "environment"


class DuplicateFilter(admin.SimpleListFilter):
    title = "duplicate"
    parameter_name = "duplicate"

    def lookups(self, request, model_admin):
        return [("yes", "Yes: collapsed under a canonical episode"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(canonical_id__isnull=False)
        if self.value() == "no":
            return queryset.filter(canonical_id__isnull=True)
        return queryset


def _with_embedded(queryset):
    return queryset.annotate(
        has_embedding=ExpressionWrapper(Q(embedding__isnull=False), output_field=BooleanField())
    )


@admin.register(Episode)
class EpisodeAdmin(ReadOnlyAdmin):
    list_display = [
        "occurred_at",
        "short_summary",
        "agent",
        "actor",
        "environment",
        "outcome",
        "session_id",
        "status",
        "embedded",
        "instruction_like",
    ]
    list_filter = [
        "status",
        "instruction_like",
        DuplicateFilter,
        "outcome",
        ActorFilter,
        EnvironmentFilter,
        EmbeddedFilter,
        "source_type",
    ]
    list_select_related = ["agent"]
    search_fields = ["=id", "summary", "action", "observation", "session_id", "agent__name"]
    date_hierarchy = "occurred_at"
    ordering = ["-occurred_at", "-id"]
    show_full_result_count = False
    fieldsets = [
        (None, {"fields": ["id", "agent", "occurred_at", "summary", "action", "observation"]}),
        (
            "Outcome",
            {
                "fields": [
                    "outcome",
                    "score",
                    "salience",
                    "effective_salience",
                    "use_count",
                    "last_used_at",
                    "confidence",
                ]
            },
        ),
        (
            "Context",
            {
                "fields": [
                    "actor",
                    "environment",
                    "session_id",
                    "goal_id",
                    "task_id",
                    "entities",
                    "related_ids",
                    "source",
                ]
            },
        ),
        (
            "Provenance",
            {
                "fields": [
                    "source_type",
                    "authority",
                    "raw_event",
                    "created_at",
                    "instruction_like",
                    "canonical_link",
                ]
            },
        ),
        (
            "Status",
            {
                "fields": [
                    "status",
                    "status_reason",
                    "status_changed_at",
                    "supersedes_link",
                    "superseded_by_link",
                ]
            },
        ),
        ("Embedding", {"fields": ["embedded", "embedding_model", "embedded_at"]}),
    ]
    readonly_fields = [
        "id",
        "agent",
        "occurred_at",
        "summary",
        "action",
        "observation",
        "outcome",
        "score",
        "salience",
        "effective_salience",
        "use_count",
        "last_used_at",
        "confidence",
        "actor",
        "environment",
        "session_id",
        "goal_id",
        "task_id",
        "entities",
        "related_ids",
        "source",
        "source_type",
        "authority",
        "raw_event",
        "created_at",
        "instruction_like",
        "canonical_link",
        "status",
        "status_reason",
        "status_changed_at",
        "supersedes_link",
        "superseded_by_link",
        "embedded",
        "embedding_model",
        "embedded_at",
    ]

    def get_queryset(self, request):
        # The vector (1.5 kB) and the full-text vector are never shown.
        return _with_embedded(super().get_queryset(request)).defer("embedding", "search_vector")

    def get_urls(self):
        own = [
            path(
                "agent-graphs/",
                self.admin_site.admin_view(self.agent_graphs_view),
                name="episodes_episode_agent_graphs",
            )
        ]
        return own + super().get_urls()

    def agent_graphs_view(self, request):
        """The large agents and their own HNSW graphs (episodes.agent_graphs);
        a superuser can queue the build celery-beat runs hourly."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not request.user.is_superuser:
                raise PermissionDenied
            build_agent_graphs.delay()
            self.message_user(
                request,
                "Queued: a worker builds the missing graphs, one at a time, largest agent "
                "first. Reload this page to follow it.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse("admin:episodes_episode_agent_graphs"))
        graphs = agent_graphs()
        context = {
            **self.admin_site.each_context(request),
            "title": "Agents' own vector graphs",
            "opts": self.model._meta,
            "graphs": graphs,
            "min_rows": settings.EPISODES_AGENT_GRAPH_MIN_ROWS,
            "max_graphs": settings.EPISODES_AGENT_GRAPH_MAX_GRAPHS,
            "to_build": sum(g.needs_build for g in graphs),
            "can_build": request.user.is_superuser,
        }
        return TemplateResponse(request, "admin/episodes/episode/agent_graphs.html", context)

    @admin.display(description="summary")
    def short_summary(self, obj: Episode) -> str:
        return str(obj)

    @admin.display(description="embedded", boolean=True, ordering="embedded_at")
    def embedded(self, obj) -> bool:
        return obj.has_embedding

    @admin.display(description="salience now")
    def effective_salience(self, obj: Episode) -> str:
        value = effective_salience(
            salience=obj.salience,
            occurred_at=obj.occurred_at,
            last_used_at=obj.last_used_at,
            use_count=obj.use_count,
            now=timezone.now(),
        )
        return f"{value:.3f}"

    @admin.display(description="duplicate of")
    def canonical_link(self, obj: Episode) -> str:
        return _episode_link(obj.canonical_id)

    @admin.display(description="corrects (the version before)")
    def supersedes_link(self, obj: Episode) -> str:
        return _episode_link(obj.supersedes)

    @admin.display(description="corrected by (the version after)")
    def superseded_by_link(self, obj: Episode) -> str:
        return _episode_link(obj.superseded_by)


def _episode_link(episode_id) -> str:
    if episode_id is None:
        return "-"
    url = reverse("admin:episodes_episode_change", args=[episode_id])
    return format_html('<a href="{}">{}</a>', url, episode_id)


@admin.register(SourceChunk)
class SourceChunkAdmin(ReadOnlyAdmin):
    list_display = [
        "source",
        "ordinal",
        "agent",
        "char_start",
        "char_end",
        "embedded",
        "instruction_like",
    ]
    list_filter = ["instruction_like", EmbeddedFilter]
    list_select_related = ["agent", "source"]
    search_fields = ["=id", "=source__id", "text", "source__title", "agent__name"]
    ordering = ["-id"]
    show_full_result_count = False
    readonly_fields = [
        "id",
        "agent",
        "source",
        "ordinal",
        "text",
        "char_start",
        "char_end",
        "instruction_like",
        "created_at",
        "embedded",
        "embedding_model",
        "embedded_at",
    ]
    fields = readonly_fields

    def get_queryset(self, request):
        qs = _with_embedded(super().get_queryset(request)).defer("embedding", "search_vector")
        return qs.defer("source__content")

    @admin.display(description="embedded", boolean=True, ordering="embedded_at")
    def embedded(self, obj) -> bool:
        return obj.has_embedding


@admin.register(AbstentionCalibration)
class AbstentionCalibrationAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "embedding_model",
        "metric",
        "threshold",
        "dataset",
        "sample_size",
        "answerable_accuracy",
        "unanswerable_accuracy",
    ]
    list_filter = ["embedding_model", "metric"]
    search_fields = ["embedding_model", "dataset"]
    ordering = ["-created_at"]
    readonly_fields = [
        "id",
        "embedding_model",
        "metric",
        "threshold",
        "dataset",
        "sample_size",
        "answerable_accuracy",
        "unanswerable_accuracy",
        "details",
        "created_at",
    ]
    fields = readonly_fields


@admin.register(ActorGraph)
class ActorGraphAdmin(ReadOnlyAdmin):
    """The large actors with a graph of their own (episodes.actor_graphs): built by
    celery-beat after the agents' own graphs (*Agents' own vector graphs* queues
    both), kept in step by triggers. Read-only: a registry row without its table,
    or a table without its row, would leave the actor's searches on a stale copy."""

    list_display = ["actor", "agent", "rows", "built_at", "table_name"]
    list_filter = ["agent"]
    search_fields = ["actor", "table_name"]
    ordering = ["agent", "actor"]
    list_select_related = ["agent"]
    readonly_fields = ["id", "agent", "actor", "rows", "table_name", "created_at", "built_at"]
    fields = readonly_fields
