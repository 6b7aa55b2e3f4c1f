from django.contrib import admin

from .models import IdempotencyRecord


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(admin.ModelAdmin):
    list_display = ["key", "agent", "response_status", "created_at", "erased_at"]
    list_filter = [("erased_at", admin.EmptyFieldListFilter)]
    list_select_related = ["agent"]
    search_fields = ["key", "agent__name"]
    readonly_fields = [
        "agent",
        "key",
        "request_fingerprint",
        "response_status",
        "response_body",
        "event_ids",
        "erased_at",
        "created_at",
    ]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
