"""Per-agent generations: when a process-local cache of an agent's data goes stale.

Web and worker processes keep small caches of an agent's data (the actors its
episodes name, row counts). After an erasure they must not serve what was
erased: the erasure bumps the agent's generation in Redis, and a cache entry
holds only while the generation it was filled under is current. A process
reads the generation at most once every CHECK_SECONDS per agent, so every
process stops serving erased data within that time; the erasing process, at once.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from django.core.cache import cache

CHECK_SECONDS = 1.0
_KEY = "piper:agent-generation:{}"
_lock = threading.Lock()
_seen: dict[uuid.UUID, tuple[float, int]] = {}  # agent -> (checked at, generation)
_forgetters: list[Callable[[uuid.UUID], None]] = []


def on_new_generation(forget: Callable[[uuid.UUID], None]) -> Callable[[uuid.UUID], None]:
    """Register `forget(agent_id)`: called in each process that sees the agent's
    generation change, to drop what its caches hold of that agent."""
    if forget not in _forgetters:
        _forgetters.append(forget)
    return forget


def _changed(agent_id: uuid.UUID) -> None:
    for forget in list(_forgetters):
        forget(agent_id)


def current(agent_id: uuid.UUID) -> int:
    """The agent's generation (0 until its first erasure)."""
    now = time.monotonic()
    seen = _seen.get(agent_id)
    if seen is not None and now - seen[0] < CHECK_SECONDS:
        return seen[1]
    generation = int(cache.get(_KEY.format(agent_id)) or 0)
    with _lock:
        if len(_seen) > 10_000:
            _seen.clear()
        _seen[agent_id] = (now, generation)
    if seen is not None and seen[1] != generation:
        _changed(agent_id)
    return generation


def bump(agent_id: uuid.UUID) -> int:
    """Start a new generation: every process's caches of the agent are stale."""
    key = _KEY.format(agent_id)
    cache.add(key, 0, timeout=None)
    generation = int(cache.incr(key))
    with _lock:
        _seen[agent_id] = (time.monotonic(), generation)
    _changed(agent_id)
    return generation
