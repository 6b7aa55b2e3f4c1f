"""What a search query says beyond its words: the actors it names.

An episode's vector is computed from "actor: what happened" (Episode.embedding_text),
so a question that names an actor — "What did Caroline research?" — is, to the
embedding model, mostly about the name: every episode of that actor looks
alike to it, and the words that tell them apart weigh little. `dense_query_text`
removes the names of the agent's own actors (whole words, with a possessive
"'s") from the text the query vector is computed from; `query_vector` is the
one place episode search takes its query vector from. The full-text list still
sees the names (an episode's actor is in its search vector), and episode
search fuses one more list, the episodes whose actor the query names
(`actors_named`; fusion._actor_list), so the name still tells "the rollout Ana
led" from the same rollout led by someone else. Filters by actor stay the
caller's to set.

On LoCoMo this is the largest single gain for the dense list (docs/benchmarks.md).

The agent's actors come from one query, cached per process for
ACTOR_CACHE_SECONDS (a new actor is recognised at the latest that much later);
an erasure of the agent's data drops the entry in every process within
piper.generations.CHECK_SECONDS.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connection

from piper import generations

if TYPE_CHECKING:
    from piper.embeddings import Embedder

ACTOR_CACHE_SECONDS = 60.0
# More distinct actors than this: the agent's actors are not a handful of
# people, and names are left in the query.
MAX_ACTORS = 200
MIN_NAME_CHARS = 2

_lock = threading.Lock()
_actor_cache: dict[uuid.UUID, tuple[float, tuple[str, ...]]] = {}


@dataclass(frozen=True)
class QueryAnalysis:
    query: str
    actors_named: tuple[str, ...]  # the agent's actors the query names
    dense_text: str  # the query without those names, for the query vector


def agent_actors(agent_id: uuid.UUID) -> tuple[str, ...]:
    """The agent's distinct non-empty episode actors (at most MAX_ACTORS + 1), cached."""
    generations.current(agent_id)  # an erasure since drops the entry (forget_agent)
    now = time.monotonic()
    cached = _actor_cache.get(agent_id)
    if cached is not None and now - cached[0] < ACTOR_CACHE_SECONDS:
        return cached[1]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT actor FROM episodes_episode"
            " WHERE agent_id = %s AND actor <> '' LIMIT %s",
            [agent_id, MAX_ACTORS + 1],
        )
        actors = tuple(sorted(row[0] for row in cursor.fetchall()))
    with _lock:
        if len(_actor_cache) > 10_000:
            _actor_cache.clear()
        _actor_cache[agent_id] = (now, actors)
    return actors


def forget_actors() -> None:
    with _lock:
        _actor_cache.clear()


@generations.on_new_generation
def forget_agent(agent_id: uuid.UUID) -> None:
    """An erasure of the agent's data: its cached actor names go."""
    with _lock:
        _actor_cache.pop(agent_id, None)


# A first word that is an article or a possessive is no one's name ("the
# on-call engineer" would otherwise be named by every "the").
NOT_A_NAME = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "my",
        "our",
        "your",
        "his",
        "her",
        "its",
        "their",
        "some",
        "any",
    ]
)


def _name_forms(actor: str) -> list[str]:
    """ "Caroline Smith" -> ["Caroline Smith", "Caroline"]: the full name and its
    first word, unless that word is a determiner ("the on-call engineer")."""
    words = actor.split()
    forms = [" ".join(words)]
    if len(words) > 1 and words[0].lower() not in NOT_A_NAME:
        forms.append(words[0])
    return [f for f in forms if len(f) >= MIN_NAME_CHARS and re.search(r"[^\W\d_]", f)]


def analyse_query(*, agent_id: uuid.UUID, query: str) -> QueryAnalysis:
    actors = agent_actors(agent_id)
    if not actors or len(actors) > MAX_ACTORS:
        return QueryAnalysis(query, (), query)
    named: list[str] = []
    text = query
    for actor in actors:
        for form in sorted(_name_forms(actor), key=len, reverse=True):
            pattern = re.compile(rf"(?<!\w){re.escape(form)}(?:['\u2019]s)?(?!\w)", re.IGNORECASE)
            if pattern.search(text):
                text = pattern.sub(" ", text)
                if actor not in named:
                    named.append(actor)
    dense = " ".join(text.split())
    # Nothing but names (and punctuation) left: the names are the question.
    if not re.search(r"\w", dense):
        dense = query
    return QueryAnalysis(query, tuple(named), dense)


def dense_query_text(*, agent_id: uuid.UUID, query: str) -> str:
    """The text to embed for `query` in this agent's episode search (see the module doc)."""
    return analyse_query(agent_id=agent_id, query=query).dense_text


def query_vector(
    *,
    agent_id: uuid.UUID,
    query: str,
    embedder: Embedder,
    whole: Callable[[], list[float]] | None = None,
    analysis: QueryAnalysis | None = None,
) -> list[float]:
    """The vector this agent's episode search compares with for `query`: the
    query embedded without the names of the agent's actors. `whole` gives the
    whole query's vector when the caller has one (called only if needed); it
    is the answer when the query names none of them. `analysis` is the
    query's analysis when the caller has made it."""
    if analysis is None:
        analysis = analyse_query(agent_id=agent_id, query=query)
    if whole is not None and not analysis.actors_named:
        return whole()
    return embedder.embed_one(analysis.dense_text)
