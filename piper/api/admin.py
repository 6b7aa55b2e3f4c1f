from django.contrib import admin

from .models import IdempotencyRecord


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(admin.ModelAdmin):
    list_display = ["key", "agent", "response_status", "created_at"]
    list_select_related = ["agent"]
    search_fields = ["key", "agent__name"]
    readonly_fields = [
        "agent",
        "key",
        "request_fingerprint",
        "response_status",
        "response_body",
        "created_at",
    ]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
