"""Hybrid retrieval over episodes and source chunks, with abstention (DESIGN.md §5).

`episode_search` answers "what happened when…?" and "have I seen this
before?"; `chunk_search` finds passages of registered documents. Both are
scoped to one agent, fuse ranked candidate lists (full text, vector, and for
episodes recency and shared entities) by reciprocal rank, and abstain — no
hits, the best candidates as near misses — when the best evidence is below
the calibrated threshold: a false memory costs more than a miss. Filters
apply inside every list; rows without an embedding yet are still found by
full text.

The parts, in the order a search uses them:

* `types` — what a search takes and returns (SearchFilters, Hit, SearchResult);
* `query_analysis` — the query vector leaves out the agent's actors' names;
* `stats` — planner statistics and row counts, cached per process;
* `plan` — the one hybrid statement, and the vector strategy it encodes;
* `fetch` — runs it with the hnsw.* settings, falls back to an exact scan;
* `session_context` — an episode is read with its session neighbours;
* `fusion` — the lists, reciprocal rank fusion, session boost, salience,
  authority, and the evidence abstention weighs;
* `hits` — the shown hits loaded whole, duplicates answered by their canonical;
* `search` — the entry points and the one check of their inputs;
* `calibration` — choosing the abstention threshold on a data set.

The per-agent and per-actor HNSW graphs a search may read are built by
episodes.agent_graphs and episodes.actor_graphs (index upkeep, run by
celery-beat), not here.
"""

from .fusion import DEFAULT_ABSTENTION_THRESHOLD, NEAR_MISSES
from .search import answered_groups, chunk_search, episode_search
from .stats import forget_agent_counts, forget_statistics
from .types import EVIDENCE_METRIC, MAX_LIMIT, MAX_QUERY_CHARS, Hit, SearchFilters, SearchResult

__all__ = [
    "DEFAULT_ABSTENTION_THRESHOLD",
    "EVIDENCE_METRIC",
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "NEAR_MISSES",
    "Hit",
    "SearchFilters",
    "SearchResult",
    "answered_groups",
    "chunk_search",
    "episode_search",
    "forget_agent_counts",
    "forget_statistics",
]
