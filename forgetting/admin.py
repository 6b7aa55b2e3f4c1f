"""Erasure receipts (read-only: an erasure is asked for through the API or
`manage.py erase`) and retention policies (written through the services)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from piper.admin_display import pretty_json
from piper.errors import InvalidInput, PiperError
from piper.tenancy.models import Agent

from .models import Erasure, RetentionPolicy
from .services import retention
from .services.agents import agent_hard_delete


@admin.register(Erasure)
class ErasureAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "agent_name",
        "kind",
        "status",
        "events",
        "residue_found",
        "requested_by",
        "reason",
    ]
    list_filter = ["kind", "status"]
    search_fields = ["=id", "agent_name", "=agent_ref", "reason", "requested_by"]
    date_hierarchy = "created_at"
    ordering = ["-created_at"]
    fieldsets = [
        (None, {"fields": ["id", "agent_name", "agent_ref", "kind", "status", "created_at"]}),
        (
            "Request",
            {"fields": ["selector_display", "reason", "requested_by", "legal_hold_lifted"]},
        ),
        ("What went", {"fields": ["events", "counts_display", "purge_event", "duration_ms"]}),
        ("Residue check", {"fields": ["residue_found", "residue_display"]}),
        ("Ids removed", {"classes": ["collapse"], "fields": ["removed_display"]}),
    ]
    readonly_fields = [
        "id",
        "agent_name",
        "agent_ref",
        "kind",
        "status",
        "created_at",
        "selector_display",
        "reason",
        "requested_by",
        "legal_hold_lifted",
        "events",
        "counts_display",
        "purge_event",
        "duration_ms",
        "residue_found",
        "residue_display",
        "removed_display",
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("removed", "residue")

    @admin.display(description="selector")
    def selector_display(self, obj):
        return pretty_json(obj.selector)

    @admin.display(description="removed or rewritten, per projection")
    def counts_display(self, obj):
        return pretty_json(obj.counts)

    @admin.display(description="findings")
    def residue_display(self, obj):
        return pretty_json(obj.residue)

    @admin.display(description="ids")
    def removed_display(self, obj):
        return pretty_json(obj.removed)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        own = [
            path(
                "delete-agent/",
                self.admin_site.admin_view(self.agent_delete_view),
                name="forgetting_erasure_agent_delete",
            )
        ]
        return own + super().get_urls()

    def agent_delete_view(self, request):
        """The hard delete of a whole agent (superusers only): type its name to confirm."""
        if not request.user.is_superuser:
            raise PermissionDenied
        form = AgentDeleteForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                receipt = agent_hard_delete(
                    agent=form.cleaned_data["agent"],
                    reason=form.cleaned_data["reason"],
                    requested_by=f"operator {request.user.get_username()} (admin)",
                    legal_hold_lifted=form.cleaned_data["legal_hold_lifted"],
                )
            except PiperError as exc:
                form.add_error(None, exc.message)
            else:
                self.message_user(
                    request,
                    f"Agent {receipt.agent_name} deleted: {receipt.status}, residue found "
                    f"{receipt.residue_found}.",
                    messages.SUCCESS if not receipt.residue_found else messages.ERROR,
                )
                return HttpResponseRedirect(
                    reverse("admin:forgetting_erasure_change", args=[receipt.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "title": "Delete an agent and everything of it",
            "opts": self.model._meta,
            "form": form,
        }
        return TemplateResponse(request, "admin/forgetting/erasure/agent_delete.html", context)


class AgentDeleteForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"))
    confirm_name = forms.CharField(help_text="Type the agent's name again.")
    reason = forms.CharField(max_length=500)
    legal_hold_lifted = forms.CharField(
        max_length=500,
        required=False,
        help_text="Only if some of its events are under legal hold: why the hold is lifted.",
    )

    def clean(self):
        data = super().clean()
        agent = data.get("agent")
        if agent is not None and data.get("confirm_name", "").strip() != agent.name:
            raise forms.ValidationError("the name typed is not the agent's: nothing deleted")
        return data


class RetentionPolicyForm(forms.ModelForm):
    confirm = forms.BooleanField(
        required=False,
        help_text="Needed when the policy would erase every event of the agent's that "
        "retention can reach.",
    )

    class Meta:
        model = RetentionPolicy
        fields = [
            "agent",
            "name",
            "retention_class",
            "event_type",
            "source_type",
            "max_age_days",
            "is_active",
        ]

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            retention.retention_policy_check(
                agent=data.get("agent") or self.instance.agent,
                name=data["name"],
                max_age_days=data["max_age_days"],
                retention_class=data.get("retention_class") or "",
                event_type=data.get("event_type") or "",
                source_type=data.get("source_type") or "",
                is_active=data.get("is_active", True),
                confirm=data.get("confirm", False),
                policy=self.instance
                if self.instance.pk and not self.instance._state.adding
                else None,
            )
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message) from None
        return data


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    """Every change goes through forgetting.services.retention (a ledger event each)."""

    form = RetentionPolicyForm
    list_display = [
        "name",
        "agent",
        "retention_class",
        "event_type",
        "source_type",
        "max_age_days",
        "is_active",
        "updated_at",
    ]
    list_filter = ["is_active", "retention_class", "source_type"]
    list_select_related = ["agent"]
    search_fields = ["name", "agent__name", "event_type"]
    readonly_fields = ["source_event", "created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        # A policy stays with its agent.
        return [*self.readonly_fields, "agent"] if obj is not None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        saved = retention.retention_policy_set(
            agent=obj.agent,
            name=data["name"],
            max_age_days=data["max_age_days"],
            retention_class=data.get("retention_class") or "",
            event_type=data.get("event_type") or "",
            source_type=data.get("source_type") or "",
            is_active=data.get("is_active", True),
            confirm=data.get("confirm", False),
            policy=RetentionPolicy.objects.get(pk=obj.pk) if change else None,
        )
        obj.pk, obj.source_event_id = saved.pk, saved.source_event_id
        obj._state.adding = False

    def delete_model(self, request, obj):
        retention.retention_policy_delete(agent=obj.agent, policy=obj)

    def delete_queryset(self, request, queryset):
        for policy in queryset.select_related("agent"):
            retention.retention_policy_delete(agent=policy.agent, policy=policy)
