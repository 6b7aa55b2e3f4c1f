"""Reads for agents and API keys."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import Agent, ApiKey
from .services import KEY_PREFIX, hash_key


def api_key_for_secret(raw_key: str) -> ApiKey | None:
    """The live key (not revoked, agent active) matching a raw secret, or None."""
    if not raw_key.startswith(KEY_PREFIX):
        return None
    return (
        ApiKey.objects.select_related("agent")
        .filter(key_hash=hash_key(raw_key), revoked_at__isnull=True, agent__is_active=True)
        .first()
    )


def api_key_list(*, agent: Agent) -> QuerySet[ApiKey]:
    """This agent's keys, newest first. Keys made in one transaction share
    created_at; the time-ordered (UUIDv7) id breaks the tie to the millisecond."""
    return ApiKey.objects.filter(agent=agent).order_by("-created_at", "-id")
