"""Semantic memory in the admin.

Facts are a projection of the ledger, so the admin never edits them: pages are
read-only, and the operator's one decision — settling an open contest — goes
through `services.contest_resolve` as an admin action. Predicates allow only
what can never break data (volatility, description), through
`services.predicate_define`.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from piper.admin_display import EmbeddedFilter, compact_json
from piper.errors import InvalidInput, PiperError
from piper.provenance import SourceType

from . import selectors, services
from .models import (
    MAX_VOLATILITY_SECONDS,
    AuthorityPolicy,
    Entity,
    EntityAlias,
    Fact,
    FactEvidence,
    FactText,
    Predicate,
)


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _fact_url(fact_id) -> str:
    return reverse("admin:facts_fact_change", args=[fact_id])


def _object_text(fact: Fact) -> str:
    if fact.object_entity_id is not None:
        return f"→ {fact.object_entity.name}"
    return compact_json(fact.object_value)


# ------------------------------------------------------------------------ entities


class EntityAliasInline(ReadOnlyMixin, admin.TabularInline):
    model = EntityAlias
    fields = ["alias", "created_at", "source_event"]
    readonly_fields = fields
    extra = 0


@admin.register(Entity)
class EntityAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["name", "entity_type", "agent", "created_at"]
    list_filter = ["entity_type", "agent"]
    list_select_related = ["agent"]
    search_fields = ["=id", "name", "aliases__alias"]
    ordering = ["name"]
    show_full_result_count = False
    readonly_fields = ["id", "agent", "name", "entity_type", "created_at", "source_event"]
    inlines = [EntityAliasInline]


# ---------------------------------------------------------------------- predicates


class PredicateForm(forms.ModelForm):
    # One question a line: a question may hold the comma the aliases are split on.
    examples = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="One question a line, about 'it': How far along is it?",
    )

    class Meta:
        model = Predicate
        fields = ["volatility_seconds", "description", "aliases", "examples"]
        help_texts = {"aliases": "Comma-separated words or phrases: due, due by"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["examples"] = "\n".join(self.instance.examples)

    def clean_volatility_seconds(self):
        value = self.cleaned_data["volatility_seconds"]
        if value is not None and not 1 <= value <= MAX_VOLATILITY_SECONDS:
            raise forms.ValidationError(
                f"from 1 second to {MAX_VOLATILITY_SECONDS} (a century), or empty for "
                "'never re-check'"
            )
        return value

    def clean_aliases(self):
        try:
            return services.clean_aliases(self.cleaned_data["aliases"])
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message) from exc

    def clean_examples(self):
        lines = [line for line in self.cleaned_data["examples"].splitlines() if line.strip()]
        try:
            return services.clean_examples(lines)
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(Predicate)
class PredicateAdmin(admin.ModelAdmin):
    """Cardinality and value type change only through the API, where a change
    that would break believed facts is refused with 409."""

    form = PredicateForm
    list_display = [
        "name",
        "agent",
        "cardinality",
        "value_type",
        "volatility_seconds",
        "created_at",
    ]
    list_filter = ["cardinality", "value_type", "agent"]
    list_select_related = ["agent"]
    search_fields = ["name", "description", "aliases"]
    ordering = ["name"]
    readonly_fields = ["id", "agent", "name", "cardinality", "value_type", "created_at"]
    fields = [
        "id",
        "agent",
        "name",
        "cardinality",
        "value_type",
        "volatility_seconds",
        "description",
        "aliases",
        "examples",
        "created_at",
    ]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        services.predicate_define(
            agent=obj.agent,
            name=obj.name,
            volatility_seconds=form.cleaned_data["volatility_seconds"],
            description=form.cleaned_data["description"],
            aliases=form.cleaned_data["aliases"],
            examples=form.cleaned_data["examples"],
            provenance=services.Provenance(
                source_type=SourceType.OPERATOR, actor=request.user.get_username()
            ),
        )


# --------------------------------------------------------------------------- facts


class OpenContestFilter(admin.SimpleListFilter):
    title = "open contests"
    parameter_name = "contest"

    def lookups(self, request, model_admin):
        return [("open", "Open contests (the operator's queue)")]

    def queryset(self, request, queryset):
        if self.value() == "open":
            return queryset.filter(selectors.OPEN_CONTEST).order_by("recorded_at", "id")
        return queryset


class PredicateNameFilter(admin.SimpleListFilter):
    """By predicate name, across agents: each agent has its own `lives_in` row, and a
    filter listing every row would show the same name once per agent."""

    title = "predicate"
    parameter_name = "predicate"

    def lookups(self, request, model_admin):
        names = Predicate.objects.order_by("name").values_list("name", flat=True).distinct()
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(predicate__name=self.value())
        return queryset


class FactEvidenceInline(ReadOnlyMixin, admin.TabularInline):
    model = FactEvidence
    fields = ["event", "recorded_at"]
    readonly_fields = fields
    extra = 0
    verbose_name_plural = "evidence (the claim, and every re-assertion of it)"

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("event").defer("event__payload")


@admin.register(Fact)
class FactAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "subject",
        "predicate",
        "object_display",
        "valid_from",
        "valid_to",
        "recorded_at",
        "superseded_at",
        "status",
        "origin",
        "authority",
        "challenges",
        "agent",
    ]
    list_filter = [
        OpenContestFilter,
        PredicateNameFilter,
        "instruction_like",
        "status",
        "authority",
        "origin",
        "agent",
    ]
    list_select_related = [
        "agent",
        "subject",
        "predicate",
        "object_entity",
        "contests",
        "contests__object_entity",
    ]
    search_fields = ["=id", "subject__name", "predicate__name"]
    ordering = ["-recorded_at", "id"]
    show_full_result_count = False
    actions = ["accept_contests", "reject_contests"]
    inlines = [FactEvidenceInline]
    readonly_fields = [
        "id",
        "agent",
        "subject",
        "predicate",
        "object_display",
        "valid_from",
        "valid_to",
        "recorded_at",
        "superseded_at",
        "last_confirmed_at",
        "status",
        "origin",
        "authority",
        "confidence",
        "instruction_like",
        "source_event",
        "supersedes_link",
        "superseded_by_link",
        "contests_link",
        "timeline",
    ]
    fieldsets = [
        (None, {"fields": ["id", "agent", "subject", "predicate", "object_display"]}),
        ("Valid time (true in the world)", {"fields": ["valid_from", "valid_to"]}),
        (
            "Record time (believed by the system)",
            {"fields": ["recorded_at", "superseded_at", "last_confirmed_at"]},
        ),
        (
            "Status and provenance",
            {
                "fields": [
                    "status",
                    "origin",
                    "authority",
                    "confidence",
                    "instruction_like",
                    "source_event",
                ]
            },
        ),
        ("Links", {"fields": ["supersedes_link", "superseded_by_link", "contests_link"]}),
        ("Supersession chain of this subject and predicate", {"fields": ["timeline"]}),
    ]

    @admin.display(description="value / object")
    def object_display(self, fact: Fact) -> str:
        return Truncator(_object_text(fact)).chars(80)

    @admin.display(description="challenges")
    def challenges(self, fact: Fact) -> str:
        if fact.contests_id is None:
            return "-"
        against = fact.contests
        return format_html(
            '<a href="{}">{}</a> ({})',
            _fact_url(against.pk),
            Truncator(_object_text(against)).chars(40),
            against.authority,
        )

    def _link(self, fact_id):
        if fact_id is None:
            return "-"
        return format_html('<a href="{}">{}</a>', _fact_url(fact_id), fact_id)

    @admin.display(description="supersedes")
    def supersedes_link(self, fact: Fact):
        return self._link(fact.supersedes_id)

    @admin.display(description="superseded by")
    def superseded_by_link(self, fact: Fact):
        return self._link(fact.superseded_by_id)

    @admin.display(description="contests (the version it challenged)")
    def contests_link(self, fact: Fact):
        return self._link(fact.contests_id)

    @admin.display(description="timeline")
    def timeline(self, fact: Fact) -> str:
        versions = selectors.fact_chain(
            agent=fact.agent, subject=fact.subject, predicate=fact.predicate
        )
        rows = [
            {
                "fact": version,
                "url": _fact_url(version.pk),
                "value": _object_text(version),
                "is_this": version.pk == fact.pk,
                "links": [
                    (label, target, _fact_url(target))
                    for label, target in (
                        ("supersedes", version.supersedes_id),
                        ("superseded by", version.superseded_by_id),
                        ("contests", version.contests_id),
                    )
                    if target is not None
                ]
                + [("contested by", c.pk, _fact_url(c.pk)) for c in version.open_contests],
            }
            for version in versions
        ]
        return render_to_string("admin/facts/fact/timeline.html", {"rows": rows})

    # ---- the operator's queue

    def has_resolve_permission(self, request) -> bool:
        return request.user.has_perm("facts.change_fact")

    @admin.action(description="Accept contested claim", permissions=["resolve"])
    def accept_contests(self, request, queryset: QuerySet[Fact]):
        self._resolve(request, queryset, accept=True)

    @admin.action(description="Reject contested claim", permissions=["resolve"])
    def reject_contests(self, request, queryset: QuerySet[Fact]):
        self._resolve(request, queryset, accept=False)

    def _resolve(self, request, queryset: QuerySet[Fact], *, accept: bool) -> None:
        done, skipped = 0, []
        for fact in queryset.order_by("recorded_at", "id"):
            try:
                services.contest_resolve(
                    agent=fact.agent,
                    fact_id=fact.pk,
                    accept=accept,
                    actor=request.user.get_username(),
                )
                done += 1
            except PiperError as exc:
                # e.g. not an open contest, or settled by an earlier one of this selection
                skipped.append(f"{fact.pk}: {exc.message}")
        verb = "Accepted" if accept else "Rejected"
        if done:
            self.message_user(request, f"{verb} {done} contested claim(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"Skipped {len(skipped)}: " + "; ".join(skipped), messages.WARNING
            )


# ------------------------------------------------------------------------- policies


@admin.register(AuthorityPolicy)
class AuthorityPolicyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Set through PUT /api/v1/facts/authority-order, which records it in the ledger."""

    list_display = ["agent", "precedence", "updated_at"]
    list_select_related = ["agent"]
    readonly_fields = ["agent", "precedence", "updated_at", "source_event"]
    fields = readonly_fields

    @admin.display(description="precedence (most trusted first)")
    def precedence(self, policy: AuthorityPolicy) -> str:
        return " > ".join(policy.order)


@admin.register(FactText)
class FactTextAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """The words a plain question finds a fact by (facts/fact_texts.py): an index, read-only."""

    list_display = ["text", "agent", "embedding_model", "rendered_at", "embedded_at"]
    list_filter = [EmbeddedFilter, "embedding_model"]
    list_select_related = ["agent"]
    search_fields = ["text", "agent__name"]
    ordering = ["-rendered_at"]
    fields = [
        "id",
        "agent",
        "subject",
        "predicate",
        "text",
        "embedding_model",
        "rendered_at",
        "embedded_at",
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer("embedding", "search_vector")
