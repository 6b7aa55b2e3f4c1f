from django import forms
from django.contrib import admin, messages

from piper.provenance import PrivacyClass

from .models import Agent, AgentClock, ApiKey, Scope
from .services import (
    agent_create,
    agent_deactivate,
    agent_update,
    api_key_create,
    api_key_revoke,
    api_key_update,
)


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    can_delete = False
    fields = [
        "name",
        "prefix",
        "scopes",
        "rate_per_minute",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "is_active", "is_throwaway", "created_at"]
    list_filter = ["is_active", "is_throwaway"]
    search_fields = ["name", "description", "=id"]
    readonly_fields = ["id", "created_at"]
    fieldsets = [
        (None, {"fields": ["name", "description"]}),
        ("State", {"fields": ["is_active", "is_throwaway", "id", "created_at"]}),
    ]
    inlines = [ApiKeyInline]
    actions = ["deactivate"]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "name", "is_throwaway"] if obj else self.readonly_fields

    def save_model(self, request, obj, form, change):
        if change:
            agent_update(agent=obj, description=obj.description, is_active=obj.is_active)
            return
        created = agent_create(
            name=obj.name, description=obj.description, is_throwaway=obj.is_throwaway
        )
        if not obj.is_active:  # the form's State section, which agent_create does not take
            agent_deactivate(agent=created)
        obj.pk, obj.created_at = created.pk, created.created_at

    def has_delete_permission(self, request, obj=None):
        return False  # an agent's ledger is append-only: deactivate instead

    @admin.action(description="Deactivate selected agents (their keys stop working)")
    def deactivate(self, request, queryset):
        for agent in queryset:
            agent_deactivate(agent=agent)
        self.message_user(request, f"Deactivated {queryset.count()} agent(s).")


class ApiKeyCreationForm(forms.ModelForm):
    clearance = forms.ChoiceField(
        choices=PrivacyClass.choices,
        initial=PrivacyClass.PERSONAL,
        required=False,
        help_text="The most private memories the key may read; recall withholds the rest.",
    )
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        initial=[Scope.READ, Scope.WRITE],
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = ApiKey
        fields = ["agent", "name", "scopes", "rate_per_minute", "clearance", "tools"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "agent", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    list_select_related = ["agent"]
    search_fields = ["name", "prefix", "agent__name"]
    readonly_fields = [
        "id",
        "agent",
        "prefix",
        "scopes",
        "clearance",
        "tools",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    fields = [
        "id",
        "agent",
        "name",
        "prefix",
        "scopes",
        "rate_per_minute",
        "clearance",
        "tools",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyCreationForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        return ApiKeyCreationForm.Meta.fields if obj is None else self.fields

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        if change:
            api_key_update(api_key=obj, name=obj.name, rate_per_minute=obj.rate_per_minute)
            return
        api_key, raw = api_key_create(
            agent=form.cleaned_data["agent"],
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            rate_per_minute=form.cleaned_data.get("rate_per_minute"),
            clearance=form.cleaned_data.get("clearance") or "personal",
            tools=form.cleaned_data.get("tools") or [],
        )
        obj.pk = api_key.pk
        messages.warning(request, f"New API key (shown once, store it now): {raw}")

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the key's history stays visible

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        for api_key in queryset:
            api_key_revoke(api_key=api_key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")


@admin.register(AgentClock)
class AgentClockAdmin(admin.ModelAdmin):
    """Battery agents' simulated 'now' (PUT /api/v1/clock); celery-beat leaves them alone.
    Set and cleared through the API only."""

    list_display = ["agent", "now"]
    list_select_related = ["agent"]
    search_fields = ["agent__name"]
    readonly_fields = ["agent", "now"]
    fields = readonly_fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
