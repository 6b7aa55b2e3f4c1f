"""Projections that can be rebuilt from the ledger, by name.

The ledger knows nothing of the apps built on it (they depend on it, not the
other way round): each app registers its rebuild function in its AppConfig's
`ready()`, and `manage.py rebuild_projection NAME` finds it here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from piper.tenancy.models import Agent

from .models import ChainHead, Event

# rebuild(agent=None) drops the projection (one agent's, or every agent's),
# replays the ledger, and returns the number of events it applied.
Rebuild = Callable[..., int]

_registry: dict[str, Rebuild] = {}


def register(name: str, rebuild: Rebuild) -> None:
    """Register `rebuild(*, agent: Agent | None) -> int` under `name`.

    Registering the same function again is a no-op (ready() may run twice in
    tests); a different function under a taken name is a programming error.
    """
    current = _registry.get(name)
    if current is not None and current is not rebuild:
        raise ValueError(f"projection {name!r} is already registered by {current!r}")
    _registry[name] = rebuild


def get(name: str) -> Rebuild:
    """The rebuild function registered as `name`; LookupError naming the known ones."""
    try:
        return _registry[name]
    except KeyError:
        known = ", ".join(names()) or "none"
        raise LookupError(f"no projection named {name!r}; known: {known}") from None


def names() -> list[str]:
    return sorted(_registry)


def rebuild(name: str, *, agent: Agent | None = None) -> int:
    return get(name)(agent=agent)


def rebuild_each_agent(
    agent: Agent | None, *, lock: list, projected: Any, event_types: Any, rebuild_agent: Any
) -> int:
    """One transaction: lock the rows of each `lock` queryset (in the services'
    order), then the chain heads, so no write interleaves; then
    `rebuild_agent(agent_id)` for `agent`, or for every agent with rows of
    `projected` or events of `event_types`. Returns the events applied."""
    scope = {"agent": agent} if agent is not None else {}
    with transaction.atomic():
        for rows in lock:
            list(rows.filter(**scope).order_by("pk").values_list("pk", flat=True))
        list(
            ChainHead.objects.select_for_update()
            .filter(**scope)
            .order_by("agent_id")
            .values_list("agent_id", flat=True)
        )
        agent_ids = (
            [agent.pk]
            if agent is not None
            else sorted(
                set(projected.objects.order_by().values_list("agent_id", flat=True).distinct())
                | set(
                    Event.objects.filter(event_type__in=event_types)
                    .order_by()
                    .values_list("agent_id", flat=True)
                    .distinct()
                )
            )
        )
        return sum(rebuild_agent(agent_id) for agent_id in agent_ids)
