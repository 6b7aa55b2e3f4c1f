"""Near-duplicate episodes, grouped under one canonical episode (DESIGN.md §8).

An agent that records the same thing again — a retried tool call, a notice
re-posted in a session, a summary written twice — crowds its own search
results. A `duplicates` consolidation run reads the new episodes and, for each,
looks among the same actor's earlier episodes of the same session (or, with no
session, within CONSOLIDATION_DUPLICATE_WINDOW_SECONDS) for one whose words are
near-identical (token Jaccard ≥ CONSOLIDATION_DUPLICATE_MIN_TEXT) and whose
vector, when both have one, is as close (cosine ≥ CONSOLIDATION_DUPLICATE_MIN_COSINE).
Near-identical is not enough when a number differs: "restarted web-07" and
"restarted web-12", "failed 3 health checks" and "failed 20" are two events,
however alike the rest, so two episodes whose tokens with a digit in them
(hosts, ids, counts, times) are not the same set are never duplicates.
It collapses the new episode into the earliest such canonical episode through
episodes.services.episodes_collapse: the duplicate keeps its row and its event,
and searches answer with the canonical episode in its place.

Only current versions take part: a retracted or corrected version is neither a
duplicate nor a canonical (the run does not read it, the pools leave it out, and
episodes_collapse refuses it). A correction is read as the new episode it
records (its episode.corrected event), so it is compared with what was recorded
before it but never with the version it corrects — a correction is nearly that
version's text, and collapsing it there would hide the corrected text behind the
withdrawn one. After a collapse, a withdrawn duplicate stays in its group (it is
found by nothing), and a corrected canonical keeps its group: search answers for
the group with the canonical's last correction (episodes.retrieval).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings

from episodes.models import Episode
from ledger.models import Event

_TOKENS = re.compile(r"[a-z0-9]+")


def tokens(episode: Episode) -> frozenset[str]:
    text = " ".join((episode.summary, episode.action, episode.observation)).lower()
    return frozenset(_TOKENS.findall(text))


def specifics(words: frozenset[str]) -> frozenset[str]:
    """The tokens that name one thing: those with a digit (a host, an id, a count)."""
    return frozenset(w for w in words if any(c.isdigit() for c in w))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def cosine(a, b) -> float | None:
    if a is None or b is None:
        return None
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else None


def _key(episode: Episode) -> tuple[str, str]:
    return (episode.actor, episode.session_id)


POOL_LIMIT = 500

# One statement for every pool of a batch: a query per actor and session cost more
# than the comparisons (a batch of 1,000 episodes spans hundreds of sessions).
# The batch itself is after `after_seq`, so it is never in its own pools.
_POOLS_SQL = f"""
SELECT x.*, k.actor AS pool_actor, k.session AS pool_session
  FROM unnest(%s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[])
       AS k(actor, session, lo, hi)
  CROSS JOIN LATERAL (
      SELECT e.id, e.occurred_at, e.summary, e.action, e.observation, e.embedding
        FROM {Episode._meta.db_table} e
        JOIN {Event._meta.db_table} ev ON ev.id = e.raw_event_id
       WHERE e.agent_id = %s AND e.actor = k.actor AND e.session_id = k.session
         AND e.canonical_id IS NULL AND e.status = 'active' AND ev.seq <= %s
         AND (k.lo IS NULL OR e.occurred_at BETWEEN k.lo AND k.hi)
       ORDER BY e.occurred_at, e.id
       LIMIT {POOL_LIMIT}) x
"""


def find_duplicates(agent_id, batch: Sequence[Episode], *, after_seq: int) -> dict:
    """{canonical episode id: [duplicate ids, in order]} for the new episodes in `batch`
    (in ledger order, all recorded after ledger seq `after_seq`). A duplicate's canonical
    is an episode recorded before it that is itself no duplicate; two new near-identical
    episodes collapse into the first."""
    window = timedelta(seconds=settings.CONSOLIDATION_DUPLICATE_WINDOW_SECONDS)
    min_text = settings.CONSOLIDATION_DUPLICATE_MIN_TEXT
    min_cosine = settings.CONSOLIDATION_DUPLICATE_MIN_COSINE
    new = [e for e in batch if e.canonical_id is None]
    if not new:
        return {}
    # The earlier episodes each new one may repeat (the same actor and session; with
    # no session, within the window), POOL_LIMIT per actor and session, oldest first.
    by_key: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for episode in new:
        by_key[_key(episode)].append(episode)
    pools: dict[tuple[str, str], list[Episode]] = {key: [] for key in by_key}
    keys = list(by_key.items())
    for row in Episode.objects.raw(
        _POOLS_SQL,
        [
            [actor for (actor, _), _ in keys],
            [session for (_, session), _ in keys],
            [
                None if session else min(e.occurred_at for e in g) - window
                for (_, session), g in keys
            ],
            [
                None if session else max(e.occurred_at for e in g) + window
                for (_, session), g in keys
            ],
            agent_id,
            after_seq,
        ],
    ):
        pools[(row.pool_actor, row.pool_session)].append(row)
    found: dict = defaultdict(list)
    words: dict = {}
    for episode in new:
        pool = pools[_key(episode)]
        mine = words.setdefault(episode.pk, tokens(episode))
        best, best_score = None, min_text
        for other in pool:
            if not episode.session_id and abs(other.occurred_at - episode.occurred_at) > window:
                continue
            theirs = words.setdefault(other.pk, tokens(other))
            score = jaccard(mine, theirs)
            if score < best_score or specifics(mine) != specifics(theirs):
                continue
            close = cosine(episode.embedding, other.embedding)
            if close is not None and close < min_cosine:
                continue
            if best is None or score > best_score:
                best, best_score = other, score
        if best is None:
            pool.append(episode)  # a canonical candidate for the episodes after it
        else:
            found[best.pk].append(episode.pk)
    return dict(found)
