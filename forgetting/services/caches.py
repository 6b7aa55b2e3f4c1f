"""What an erasure does outside PostgreSQL: the caches of the agent's data.

Processes cache small things per agent (episodes.retrieval.query_analysis:
the actor names; episodes.retrieval.stats: counts keyed by filter values). An
erasure starts a new generation of the agent (piper.generations): this
process drops its entries at once, every other one within
generations.CHECK_SECONDS.
"""

from __future__ import annotations

import uuid

from ledger.erasure import ErasureScope
from piper import generations


def erased(*, agent_id: uuid.UUID) -> int:
    """After an erasure commits: a new generation of the agent's caches."""
    return generations.bump(agent_id)


def residue(*, agent_id: uuid.UUID, scope: ErasureScope) -> list[dict]:
    """This process's caches hold no erased name, and the generation moved on."""
    from episodes.retrieval import query_analysis

    cached = query_analysis._actor_cache.get(agent_id)
    names = set(cached[1]) if cached else set()
    erased_names = names & scope.actors
    return [
        {
            "projection": "caches",
            "check": "erased_names_cached",
            "found": len(erased_names),
            "sample": [],
        }
    ]
