"""Projections that can be rebuilt from the ledger, by name.

The ledger knows nothing of the apps built on it (they depend on it, not the
other way round): each app registers its rebuild function in its AppConfig's
`ready()`, and `manage.py rebuild_projection NAME` finds it here.
"""

from __future__ import annotations

from collections.abc import Callable

from piper.tenancy.models import Agent

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
