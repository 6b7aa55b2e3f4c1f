"""Scopes: read for safe methods, write for the rest, admin where a view asks for it."""

from rest_framework import exceptions, permissions

from piper.tenancy.models import ApiKey, Scope


class HasScopeForMethod(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        api_key = request.auth
        if not isinstance(api_key, ApiKey):
            raise exceptions.NotAuthenticated(
                "authentication required: send 'Authorization: Bearer <api key>'"
            )
        needed = getattr(view, "required_scope", None) or (
            Scope.READ if request.method in permissions.SAFE_METHODS else Scope.WRITE
        )
        if not api_key.allows(needed):
            raise exceptions.PermissionDenied(
                f"this API key lacks the '{needed}' scope needed for {request.method} "
                f"{request.path}; it has {sorted(api_key.scopes)}"
            )
        return True
