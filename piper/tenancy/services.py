"""Writes for agents and API keys."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from piper.errors import Conflict, InvalidInput
from piper.provenance import PrivacyClass

from .models import MAX_RATE_PER_MINUTE, Agent, ApiKey, Scope

KEY_PREFIX = "pm_"
AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# last_used_at is written at most this often per key, so authentication does
# not turn every read into a write.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def agent_create(*, name: str, description: str = "", is_throwaway: bool = False) -> Agent:
    """Create an agent. Raises InvalidInput for a bad name, Conflict if it exists."""
    # fullmatch: with match, "$" would accept a trailing newline, which the
    # database's check constraint then refuses (and which read as a Conflict).
    if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        raise InvalidInput(
            f"agent name {name!r} is invalid: use 1-100 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit",
            details={"name": ["invalid format"]},
        )
    try:
        with transaction.atomic():
            return Agent.objects.create(
                name=name, description=description, is_throwaway=is_throwaway
            )
    except IntegrityError as exc:
        raise Conflict(f"an agent named {name!r} already exists", code="agent_exists") from exc


def agent_update(*, agent: Agent, description: str, is_active: bool) -> Agent:
    """Change what an operator may change after creation (the name is the agent's identity)."""
    Agent.objects.filter(pk=agent.pk).update(description=description, is_active=is_active)
    agent.refresh_from_db(fields=["description", "is_active"])
    return agent


def agent_deactivate(*, agent: Agent) -> Agent:
    """Deactivate an agent: its keys stop working; its memory is kept."""
    Agent.objects.filter(pk=agent.pk).update(is_active=False)
    agent.refresh_from_db(fields=["is_active"])
    return agent


def _normalise_scopes(scopes: Iterable[str]) -> list[str]:
    scopes = list(dict.fromkeys(scopes))
    unknown = [s for s in scopes if s not in Scope.values]
    if unknown or not scopes:
        raise InvalidInput(
            f"scopes must be a non-empty subset of {Scope.values}; got {scopes}",
            details={"scopes": [f"unknown scope {s!r}" for s in unknown] or ["empty"]},
        )
    return scopes


def api_key_create(
    *,
    agent: Agent,
    name: str,
    scopes: Iterable[str] = (Scope.READ, Scope.WRITE),
    rate_per_minute: int | None = None,
    clearance: str = PrivacyClass.PERSONAL,
    tools: Iterable[str] = (),
) -> tuple[ApiKey, str]:
    """Create a key and return it with the raw secret, which is never stored or shown again.

    `tools`: the MCP tools the key may call (empty: all its scopes allow). Raises
    InvalidInput for empty or unknown scopes, a rate that is not a positive
    integer, an unknown clearance, or a tool name that is not a lowercase name.
    """
    scopes = _normalise_scopes(scopes)
    _check_rate(rate_per_minute)
    tools = _check_tools(tools)
    if clearance not in PrivacyClass.values:
        raise InvalidInput(
            f"clearance must be one of {PrivacyClass.values}",
            details={"clearance": [f"one of {PrivacyClass.values}"]},
        )
    raw_key = KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        agent=agent,
        name=name,
        prefix=raw_key[:10],
        key_hash=hash_key(raw_key),
        scopes=scopes,
        rate_per_minute=rate_per_minute,
        clearance=clearance,
        tools=tools,
    )
    return api_key, raw_key


_TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,49}")


def _check_tools(tools: Iterable[str]) -> list[str]:
    """Sorted and unique. The names are the MCP server's; this layer sits below it and
    checks only their form (an unknown name allows nothing)."""
    if isinstance(tools, str):
        tools = [tools]
    bad = [t for t in tools if not isinstance(t, str) or not _TOOL_NAME.fullmatch(t)]
    if bad:
        raise InvalidInput(
            f"tools: {bad[0]!r} is not a tool name (lowercase letters, digits, underscores)",
            details={"tools": ["lowercase tool names such as recall or assert_fact"]},
        )
    return sorted(set(tools))


def _check_rate(rate_per_minute: int | None) -> None:
    if rate_per_minute is not None and (
        isinstance(rate_per_minute, bool)
        or not isinstance(rate_per_minute, int)
        or not 1 <= rate_per_minute <= MAX_RATE_PER_MINUTE
    ):
        raise InvalidInput(
            f"rate_per_minute must be an integer from 1 to {MAX_RATE_PER_MINUTE}, or empty; "
            f"got {rate_per_minute!r}",
            details={"rate_per_minute": [f"must be an integer from 1 to {MAX_RATE_PER_MINUTE}"]},
        )


def api_key_update(*, api_key: ApiKey, name: str, rate_per_minute: int | None) -> ApiKey:
    """Rename a key or change its rate; its secret and scopes never change (make a new key)."""
    _check_rate(rate_per_minute)
    ApiKey.objects.filter(pk=api_key.pk).update(name=name, rate_per_minute=rate_per_minute)
    api_key.refresh_from_db(fields=["name", "rate_per_minute"])
    return api_key


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revoke a key. Idempotent: revoking a revoked key keeps the first revocation time."""
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db(fields=["revoked_at"])
    return api_key


def api_key_touch(*, api_key: ApiKey) -> None:
    """Record use, at most once per LAST_USED_RESOLUTION (compare-and-set)."""
    now = timezone.now()
    if api_key.last_used_at and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiKey.objects.filter(pk=api_key.pk).exclude(
        last_used_at__gt=now - LAST_USED_RESOLUTION
    ).update(last_used_at=now)
    api_key.last_used_at = now
