"""The ledger is read-only in the admin: evidence is appended through services only."""

from django.contrib import admin

from .models import Event, Source, Tombstone


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = [
        "seq",
        "agent",
        "event_type",
        "occurred_at",
        "recorded_at",
        "actor",
        "source_type",
        "authority",
    ]
    list_filter = ["event_type", "source_type", "authority", "privacy_class", "retention_class"]
    list_select_related = ["agent"]
    search_fields = ["=id", "event_type", "session_id", "actor", "agent__name"]
    date_hierarchy = "recorded_at"
    ordering = ["-recorded_at", "-seq"]
    show_full_result_count = False  # COUNT(*) over a large ledger is slow
    fieldsets = [
        (None, {"fields": ["id", "agent", "seq", "event_type", "payload"]}),
        ("Time", {"fields": ["occurred_at", "recorded_at"]}),
        (
            "Provenance",
            {
                "fields": [
                    "session_id",
                    "actor",
                    "source_type",
                    "source_ref",
                    "authority",
                    "confidence",
                ]
            },
        ),
        ("Links", {"fields": ["parent_event", "correction_of"]}),
        ("Chain", {"fields": ["payload_hash", "prev_hash", "hash"]}),
        ("Policy", {"fields": ["privacy_class", "retention_class", "redacted_at"]}),
    ]

    def get_queryset(self, request):
        # payload is heavy: the list page does not need it.
        qs = super().get_queryset(request)
        return qs.defer("payload") if request.resolver_match.url_name.endswith("changelist") else qs


@admin.register(Source)
class SourceAdmin(ReadOnlyAdmin):
    list_display = ["title", "agent", "uri", "media_type", "created_at"]
    list_select_related = ["agent"]
    search_fields = ["title", "uri", "content_hash", "agent__name"]
    readonly_fields = [
        "id",
        "agent",
        "title",
        "uri",
        "content_hash",
        "media_type",
        "content",
        "source_event",
        "created_at",
    ]


@admin.register(Tombstone)
class TombstoneAdmin(ReadOnlyAdmin):
    list_display = ["event", "agent", "reason", "requested_by", "created_at"]
    list_select_related = ["agent", "event"]
    search_fields = ["reason", "requested_by", "agent__name"]
