"""Salience decay (DESIGN.md §8): what an agent never comes back to fades in ranking.

An episode's `salience` is what the writer said it mattered (0–1). What it is
worth *now* — its effective salience — falls by half every
SALIENCE_HALF_LIFE_DAYS since it last mattered: when it happened, or the last
time the agent said a recall's evidence that included it was used (recall
feedback with outcome success or partial: `Episode.last_used_at`). Each use
also lifts it a little, by USE_BOOST per doubling of `use_count`.

Retrieval scales each candidate's fused score by it (episodes.retrieval,
SALIENCE_WEIGHT: within ±10%): among memories that answer a question about as
well, the salient and used ones come first; a decayed memory that answers a
precise question still wins on its words and meaning. Nothing is deleted by decay; retention does that.
"""

from __future__ import annotations

import math
from datetime import datetime

SALIENCE_HALF_LIFE_DAYS = 90.0
USE_BOOST = 0.25


def effective_salience(
    *,
    salience: float,
    occurred_at: datetime,
    last_used_at: datetime | None,
    use_count: int,
    now: datetime,
) -> float:
    """The salience left at `now`, in 0..1 (see the module doc)."""
    since = max(occurred_at, last_used_at) if last_used_at is not None else occurred_at
    idle_days = max((now - since).total_seconds(), 0.0) / 86_400.0
    decay = 0.5 ** (idle_days / SALIENCE_HALF_LIFE_DAYS)
    boost = 1.0 + USE_BOOST * math.log2(1 + max(use_count, 0))
    return min(1.0, salience * boost * decay)
