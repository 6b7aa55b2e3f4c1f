"""Facts findable from plain words (DESIGN §4: similarity proposes, facts decide).

A question in plain words finds candidate (subject, predicate) *pairs* among
the agent's fact texts (`facts.fact_texts`): `fact_candidates`. Which value is
current is then answered by the selectors (`facts_valid_at_by_ref`, as_of,
chain), never by this text, which may lag the facts by a task.
`entities_named_in` finds the entities a text names.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from piper.embedded_text import vector_literal
from piper.errors import InvalidInput
from piper.tenancy.models import Agent

from .models import Entity, FactText

MAX_QUERY_CHARS = 2000
RRF_K = 60
MAX_NAME_WORDS = 6


# ------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class FactCandidate:
    """A (subject, predicate) a question may be about. Not an answer: the facts
    selectors say what, if anything, is current for it."""

    fact_text: FactText  # with subject and predicate loaded
    score: float  # reciprocal-rank fusion of the signals below
    signals: dict[str, float | int | None] = field(default_factory=dict)

    @property
    def subject(self) -> Entity:
        return self.fact_text.subject

    @property
    def predicate_name(self) -> str:
        return self.fact_text.predicate.name


def _check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query must not be empty", details={"query": ["required"]})
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"query must be at most {MAX_QUERY_CHARS} characters (got {len(query)})",
            details={"query": [f"at most {MAX_QUERY_CHARS} characters"]},
        )
    return query.strip()


# A word found in this many of the agent's fact texts tells none of them apart
# (at 1M facts "pay grade — Person … Lindqvist" shares three words with every
# other text): it still counts in the rank, but does not make a text a match,
# so the rank is not computed over every text.
COMMON_TERM_TEXTS = 1000


def _lexemes(cursor, query: str) -> list[str]:
    cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [query])
    return list(cursor.fetchone()[0] or [])


def _rare(cursor, agent_id: uuid.UUID, lexemes: list[str]) -> list[str]:
    """The lexemes found in fewer than COMMON_TERM_TEXTS of the agent's texts: one
    statement, each count stopping at the bound (each term planned as a constant,
    so a rare one goes through the GIN index and a common one stops early)."""
    counts = " UNION ALL ".join(
        "SELECT %s, (SELECT count(*) FROM (SELECT 1 FROM facts_facttext"
        " WHERE agent_id = %s AND search_vector @@ quote_literal(%s)::tsquery"
        f" LIMIT {COMMON_TERM_TEXTS}) s{n})"
        for n in range(len(lexemes))
    )
    cursor.execute(counts, [p for lexeme in lexemes for p in (lexeme, agent_id, lexeme)])
    return [lexeme for lexeme, n in cursor.fetchall() if n < COMMON_TERM_TEXTS]


def _text_ranked(agent: Agent, query: str, limit: int) -> list[tuple[uuid.UUID, uuid.UUID, float]]:
    # Any of the query's words, not all of them ("when is our deployment window
    # now" must reach a text without "now"): plainto_tsquery's & becomes |. A text
    # matches through a word that is not common; when every word is common, it
    # must hold them all.
    with connection.cursor() as cursor:
        lexemes = _lexemes(cursor, query)
        if not lexemes:
            return []
        rare = _rare(cursor, agent.pk, lexemes) if len(lexemes) > 1 else lexemes
        match = " | ".join(_quoted(x) for x in rare) or " & ".join(_quoted(x) for x in lexemes)
        cursor.execute(
            """
            SELECT t.id, t.subject_id, ts_rank_cd(t.search_vector, q.q, 1)
              FROM facts_facttext t,
                   (SELECT replace(plainto_tsquery('english', %s)::text, '&', '|')::tsquery AS q) q
             WHERE t.agent_id = %s AND t.search_vector @@ %s::tsquery
             ORDER BY 3 DESC, t.id
             LIMIT %s
            """,
            [query, agent.pk, match, limit],
        )
        return [(row[0], row[1], float(row[2])) for row in cursor.fetchall()]


def _quoted(lexeme: str) -> str:
    """A lexeme as a tsquery operand: quoted, so it is taken as it is."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


# The HNSW candidate list of a fact-text search, at least the rows it asks for.
FACT_TEXT_EF_SEARCH = 100


def _vector_ranked(
    agent: Agent, embedding: Sequence[float], limit: int
) -> list[tuple[uuid.UUID, uuid.UUID, float]]:
    vector = vector_literal(embedding)
    with transaction.atomic(), connection.cursor() as cursor:
        # An HNSW scan filtered to one agent can stop short of `limit` rows;
        # pgvector 0.8's iterative scan keeps reading until it has them. A list
        # as long as the rows asked for lets one pass find them: with the default
        # 40, each search for 80 restarted the scan, at up to 10x the time, and
        # found fewer of the true nearest (docs/experiments.md). For this
        # statement only: the caller's transaction may go on.
        cursor.execute(
            "SELECT '[0]'::vector IS NOT NULL,"
            " current_setting('hnsw.iterative_scan', true), current_setting('hnsw.ef_search', true),"
            " set_config('hnsw.iterative_scan', 'strict_order', true),"
            " set_config('hnsw.ef_search', %s, true)",
            [str(max(FACT_TEXT_EF_SEARCH, limit))],
        )
        _, scan, ef_search, _, _ = cursor.fetchone()
        try:
            cursor.execute(
                """
                SELECT id, subject_id, 1 - (embedding <=> %s::vector)
                  FROM facts_facttext
                 WHERE agent_id = %s AND embedding IS NOT NULL
                 ORDER BY embedding <=> %s::vector, id
                 LIMIT %s
                """,
                [vector, agent.pk, vector, limit],
            )
            rows = [(row[0], row[1], float(row[2])) for row in cursor.fetchall()]
        finally:
            cursor.execute(
                "SELECT set_config('hnsw.iterative_scan', %s, true),"
                " set_config('hnsw.ef_search', %s, true)",
                [scan or "off", ef_search or "40"],
            )
    return rows


def fact_candidates(
    *,
    agent: Agent,
    query: str,
    query_embedding: Sequence[float] | None = None,
    limit: int = 10,
    min_similarity: float | None = None,
    named: Sequence[NamedEntity] | None = None,
) -> list[FactCandidate]:
    """The (subject, predicate) pairs `query` is most likely about, best first.

    Three ranked lists fused by reciprocal rank: full text over the rendered
    texts (any word), cosine similarity to their embeddings (when
    `query_embedding` is given), and pairs whose subject the query names (one
    of its aliases, as words of the query). A pair is proposed only if its text
    matched or its similarity reaches `min_similarity`
    (settings.PIPER_FACT_TEXT_MIN_SIMILARITY); a named subject alone only
    lifts a pair that passed. `named`: what entities_named_in found in the
    query, if the caller has it already. Raises InvalidInput for an empty or
    huge query.
    """
    query = _check_query(query)
    if min_similarity is None:
        min_similarity = settings.PIPER_FACT_TEXT_MIN_SIMILARITY
    depth = max(limit * 4, 20)
    text_hits = _text_ranked(agent, query, depth)
    vector_hits = _vector_ranked(agent, query_embedding, depth) if query_embedding else []
    if named is None:
        named = entities_named_in(agent=agent, text=query)
    named_ids = {m.entity.pk for m in named}

    signals: dict[uuid.UUID, dict[str, float | int | None]] = {}
    subject_of: dict[uuid.UUID, uuid.UUID] = {}
    for position, (text_id, subject_id, rank) in enumerate(text_hits, start=1):
        signals.setdefault(text_id, {})
        signals[text_id].update(text_rank=round(rank, 6), text_position=position)
        subject_of[text_id] = subject_id
    for position, (text_id, subject_id, similarity) in enumerate(vector_hits, start=1):
        signals.setdefault(text_id, {})
        signals[text_id].update(vector_similarity=round(similarity, 6), vector_position=position)
        subject_of[text_id] = subject_id
    scores = []
    for text_id, s in signals.items():
        if "text_rank" not in s and (s.get("vector_similarity") or 0.0) < min_similarity:
            continue
        s["named_subject"] = int(subject_of[text_id] in named_ids)
        score = sum(
            1.0 / (RRF_K + s[key]) for key in ("text_position", "vector_position") if key in s
        )
        if s["named_subject"]:
            score += 1.0 / (RRF_K + 1)
        s.setdefault("text_rank", None)
        s.setdefault("vector_similarity", None)
        scores.append((round(score, 6), text_id))
    scores.sort(key=lambda c: (-c[0], str(c[1])))
    best = scores[:limit]
    # Only the texts returned are loaded, without their vectors and lexemes:
    # nothing here reads them, and parsing them cost more than the searches.
    texts = (
        FactText.objects.select_related("subject", "predicate")
        .defer("embedding", "search_vector")
        .in_bulk([text_id for _, text_id in best])
    )
    return [FactCandidate(texts[text_id], score, signals[text_id]) for score, text_id in best]


# ------------------------------------------------------------ entities in text


@dataclass(frozen=True)
class NamedEntity:
    entity: Entity
    alias: str  # the name as the agent knows it
    position: int  # index of its first word in the text


_WORD = re.compile(r"[^\s\"“”‘(),;:!?]+")
_TRIM = ".'’"


def _name_variants(word: str) -> set[str]:
    """A word of a question as it may stand in a name: 'alice's' → alice's, alice."""
    word = word.strip(_TRIM)
    variants = {word}
    for suffix in ("'s", "’s"):
        if word.lower().endswith(suffix):
            variants.add(word[: -len(suffix)])
    return {v.lower() for v in variants if v}


def entities_named_in(*, agent: Agent, text: str) -> list[NamedEntity]:
    """Entities one of whose names appears in `text` as whole words (case-
    insensitive; a possessive 's is ignored), in order of appearance; where
    names overlap, the longest wins. One indexed lookup of every run of up to
    MAX_NAME_WORDS words."""
    words = [(m.group(0), m.start()) for m in _WORD.finditer(text)]
    candidates: dict[str, list[tuple[int, int]]] = {}
    for i in range(len(words)):
        for n in range(1, MAX_NAME_WORDS + 1):
            if i + n > len(words):
                break
            run = [w for w, _ in words[i : i + n]]
            head = " ".join(run[:-1])
            for last in _name_variants(run[-1]):
                name = f"{head.lower()} {last}".strip()
                name = name.strip(_TRIM)
                if name:
                    candidates.setdefault(name, []).append((i, n))
    if not candidates:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lower(alias), alias, entity_id FROM facts_entityalias "
            "WHERE agent_id = %s AND lower(alias) = ANY(%s)",
            [agent.pk, list(candidates)],
        )
        found = cursor.fetchall()
    spans = []
    for lowered, alias, entity_id in found:
        for start, length in candidates[lowered]:
            spans.append((start, length, alias, entity_id))
    # Longest first, then leftmost; a span overlapping a chosen one is dropped.
    spans.sort(key=lambda s: (-s[1], s[0]))
    taken: set[int] = set()
    chosen = []
    for start, length, alias, entity_id in spans:
        covered = set(range(start, start + length))
        if covered & taken:
            continue
        taken |= covered
        chosen.append((start, alias, entity_id))
    entities = Entity.objects.in_bulk({entity_id for _, _, entity_id in chosen})
    seen: set[uuid.UUID] = set()
    result = []
    for start, alias, entity_id in sorted(chosen, key=lambda c: c[0]):
        if entity_id in seen:
            continue
        seen.add(entity_id)
        result.append(NamedEntity(entities[entity_id], alias, start))
    return result
