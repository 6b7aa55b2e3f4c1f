"""Facts findable from plain words (DESIGN §4: similarity proposes, facts decide).

Each (subject, predicate) an agent holds facts about is rendered as one line
of text — "deployment window — team platform: Tuesdays 14:00" — stored in
`FactText` with a generated full-text vector and an embedding. A question in
plain words finds candidate *pairs* here (`fact_candidates`); which value is
current is then answered by the selectors (`facts_valid_at_by_ref`, as_of,
chain), never by this text, which may lag the facts by a task.

The texts are maintained after commit: a ledger hook (`facts.hooks`)
queues `facts.index_fact_texts` for a commit holding fact events; the task
re-renders the pairs those events touched (`fact_texts_refresh`) and queues
the embedding of the texts that changed (`facts.embed_fact_texts`). Both are
idempotent: a re-run renders the same text, writes nothing, and an embedding
is only stored if the text it was computed from is still the row's text.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from ledger.models import Event
from piper.canonical import canonical_json
from piper.errors import InvalidInput
from piper.locks import advisory_xact_locks
from piper.tenancy.models import Agent

from . import projection as p
from .models import Entity, Fact, FactText, FactTextCursor

logger = logging.getLogger(__name__)

# Events that can change what a pair's text says.
TEXT_EVENTS = (
    p.ASSERTED,
    p.RETRACTED,
    p.CORRECTED,
    p.ENDED,
    p.CONTEST_RESOLVED,
    p.ALIAS_ADDED,
    p.PREDICATE_DEFINED,
)
EMBED_BATCH = 256
MAX_QUERY_CHARS = 2000
RRF_K = 60
MAX_NAME_WORDS = 6

Pair = tuple[uuid.UUID, uuid.UUID]  # subject, predicate


# ---------------------------------------------------------------------- rendering


def humanize(predicate_name: str) -> str:
    """`deployment_window` → "deployment window", `team.lead` → "team lead"."""
    return re.sub(r"[._]+", " ", predicate_name).strip()


def render_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return canonical_json(value)


def render(
    *,
    predicate: str,
    subject: str,
    aliases: Sequence[str] = (),
    values: Sequence[str] = (),
    description: str = "",
    predicate_aliases: Sequence[str] = (),
) -> str:
    """One pair as words: predicate — subject (other names): values. Description.
    Also: the predicate's aliases."""
    text = f"{humanize(predicate)} — {subject}"
    others = [a for a in aliases if a.lower() != subject.lower()]
    if others:
        text += f" ({', '.join(others)})"
    if values:
        text += ": " + "; ".join(values)
    if description.strip():
        text += f". {description.strip()}"
    if predicate_aliases:
        text += f". Also: {', '.join(predicate_aliases)}"
    return text


# ----------------------------------------------------------------- maintenance

_RENDER_SQL = """
SELECT w.s, w.p, e.name, pr.name, pr.description, pr.aliases,
       ARRAY(SELECT a.alias FROM facts_entityalias a
              WHERE a.agent_id = %(agent)s AND a.entity_id = w.s ORDER BY lower(a.alias)),
       (SELECT coalesce(json_agg(json_build_object('entity', o.name, 'value', f.object_value)
                                 ORDER BY f.valid_from, f.id), '[]'::json)
          FROM facts_fact f LEFT JOIN facts_entity o ON o.id = f.object_entity_id
         WHERE f.agent_id = %(agent)s AND f.subject_id = w.s AND f.predicate_id = w.p
           AND f.status = 'active' AND f.superseded_at IS NULL
           AND f.valid_from <= %(at)s AND (f.valid_to IS NULL OR f.valid_to > %(at)s))
  FROM unnest(%(subjects)s::uuid[], %(predicates)s::uuid[]) AS w(s, p)
  JOIN facts_entity e ON e.id = w.s AND e.agent_id = %(agent)s
  JOIN facts_predicate pr ON pr.id = w.p AND pr.agent_id = %(agent)s
 WHERE EXISTS (SELECT 1 FROM facts_fact f
                WHERE f.agent_id = %(agent)s AND f.subject_id = w.s AND f.predicate_id = w.p)
"""

_UPSERT_SQL = """
INSERT INTO facts_facttext AS t
       (id, agent_id, subject_id, predicate_id, text, embedding, embedding_model,
        embedded_at, rendered_at)
SELECT v.id, %(agent)s, v.s, v.p, v.text, NULL, '', NULL, %(at)s
  FROM unnest(%(ids)s::uuid[], %(subjects)s::uuid[], %(predicates)s::uuid[], %(texts)s::text[])
       AS v(id, s, p, text)
ON CONFLICT (agent_id, subject_id, predicate_id) DO UPDATE
   SET text = EXCLUDED.text, embedding = NULL, embedding_model = '', embedded_at = NULL,
       rendered_at = EXCLUDED.rendered_at
 WHERE t.text IS DISTINCT FROM EXCLUDED.text
RETURNING t.id
"""


@dataclass(frozen=True)
class RefreshResult:
    rendered: int  # pairs rendered
    changed: list[uuid.UUID]  # texts inserted or changed (their embedding is pending)
    deleted: int  # texts of pairs that no longer hold any fact


def _lock_texts(agent_id: uuid.UUID, pairs: Iterable[Pair]) -> None:
    """Serialise refreshes of the same pairs (not the facts writers: a refresh
    that read the state before a write commits is followed by that write's own)."""
    advisory_xact_locks(f"facts-text:{agent_id}", (f"{s}:{pr}" for s, pr in pairs))


def all_pairs(agent_id: uuid.UUID) -> list[Pair]:
    """Every (subject, predicate) the agent has any fact version about."""
    return list(
        Fact.objects.filter(agent_id=agent_id)
        .order_by()
        .values_list("subject_id", "predicate_id")
        .distinct()
    )


def fact_texts_refresh(
    *,
    agent_id: uuid.UUID,
    pairs: Iterable[Pair] | None = None,
    now: datetime | None = None,
    embed: str = "later",
    lock_timeout_ms: int | None = None,
) -> RefreshResult:
    """Render the texts of `pairs` (default: every pair the agent holds) and
    store those that changed; a changed text loses its embedding until it is
    recomputed. Pairs that no longer hold any fact lose their text.

    `embed`: "later" queues `facts.embed_fact_texts` for the changed texts
    after commit; "now" embeds them before returning; "never" leaves them
    pending (they are still found by full text). Idempotent.

    `lock_timeout_ms` bounds every lock wait of the transaction (a task
    passes it and retries): a background refresh gives way — fails with
    OperationalError (lock_not_available) — rather than deadlock with
    whatever holds the facts tables, a TRUNCATE or a migration.
    """
    if embed not in ("later", "now", "never"):
        raise ValueError(f"embed must be 'later', 'now' or 'never', not {embed!r}")
    wanted = sorted(set(all_pairs(agent_id) if pairs is None else pairs))
    now = now or timezone.now()
    changed: list[uuid.UUID] = []
    deleted = 0
    rendered = 0
    with transaction.atomic():
        if lock_timeout_ms is not None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('lock_timeout', %s, true)", [f"{lock_timeout_ms}ms"]
                )
        _lock_texts(agent_id, wanted)
        for start in range(0, len(wanted), 2000):
            chunk = wanted[start : start + 2000]
            subjects = [s for s, _ in chunk]
            predicates = [pr for _, pr in chunk]
            with connection.cursor() as cursor:
                cursor.execute(
                    _RENDER_SQL,
                    {"agent": agent_id, "at": now, "subjects": subjects, "predicates": predicates},
                )
                rows = cursor.fetchall()
            found: set[Pair] = set()
            ids, out_subjects, out_predicates, texts = [], [], [], []
            for (
                s,
                pr,
                subject,
                predicate,
                description,
                predicate_aliases,
                aliases,
                believed,
            ) in rows:
                found.add((s, pr))
                values = [
                    b["entity"] if b["entity"] is not None else render_value(b["value"])
                    for b in _json(believed)
                ]
                ids.append(uuid.uuid4())
                out_subjects.append(s)
                out_predicates.append(pr)
                texts.append(
                    render(
                        predicate=predicate,
                        subject=subject,
                        aliases=aliases,
                        values=values,
                        description=description,
                        predicate_aliases=predicate_aliases,
                    )
                )
            rendered += len(rows)
            if rows:
                with connection.cursor() as cursor:
                    cursor.execute(
                        _UPSERT_SQL,
                        {
                            "agent": agent_id,
                            "at": now,
                            "ids": ids,
                            "subjects": out_subjects,
                            "predicates": out_predicates,
                            "texts": texts,
                        },
                    )
                    changed += [row[0] for row in cursor.fetchall()]
            gone = [pair for pair in chunk if pair not in found]
            if gone:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "DELETE FROM facts_facttext t USING unnest(%s::uuid[], %s::uuid[]) "
                        "AS g(s, p) WHERE t.agent_id = %s AND t.subject_id = g.s "
                        "AND t.predicate_id = g.p",
                        [[s for s, _ in gone], [pr for _, pr in gone], agent_id],
                    )
                    deleted += cursor.rowcount
        if embed == "later" and changed:
            ids_to_embed = [str(i) for i in changed]

            def enqueue() -> None:
                from .tasks import embed_fact_texts

                for at in range(0, len(ids_to_embed), EMBED_BATCH):
                    embed_fact_texts.delay(ids_to_embed[at : at + EMBED_BATCH])

            transaction.on_commit(enqueue)
    if embed == "now" and changed:
        fact_texts_embed(ids=changed)
    return RefreshResult(rendered=rendered, changed=changed, deleted=deleted)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def pairs_touched(agent_id: uuid.UUID, first_seq: int, last_seq: int) -> set[Pair]:
    """The (subject, predicate) pairs whose text the agent's events in
    [first_seq, last_seq] may have changed."""
    events = Event.objects.filter(
        agent_id=agent_id, seq__gte=first_seq, seq__lte=last_seq, event_type__in=TEXT_EVENTS
    ).values_list("event_type", "payload")
    pairs: set[Pair] = set()
    fact_ids, entity_ids, predicate_ids = set(), set(), set()
    for event_type, payload in events.iterator():
        if not payload:  # a purged event says nothing any more
            continue
        if event_type == p.ASSERTED:
            pairs.add((uuid.UUID(payload["subject_id"]), uuid.UUID(payload["predicate_id"])))
        elif event_type == p.ALIAS_ADDED:
            entity_ids.add(uuid.UUID(payload["entity_id"]))
        elif event_type == p.PREDICATE_DEFINED:
            predicate_ids.add(uuid.UUID(payload["predicate_id"]))
        else:
            fact_ids.add(uuid.UUID(payload["fact_id"]))
    facts = Fact.objects.filter(agent_id=agent_id).order_by()
    if fact_ids:
        pairs |= set(facts.filter(pk__in=fact_ids).values_list("subject_id", "predicate_id"))
    if entity_ids:
        pairs |= set(
            facts.filter(subject_id__in=entity_ids)
            .values_list("subject_id", "predicate_id")
            .distinct()
        )
    if predicate_ids:
        pairs |= set(
            facts.filter(predicate_id__in=predicate_ids)
            .values_list("subject_id", "predicate_id")
            .distinct()
        )
    return pairs


def fact_texts_embed(*, ids: Sequence[uuid.UUID | str]) -> int:
    """Compute the embeddings of the texts `ids` that still lack one. Stores a
    vector only if the row still holds the text it was computed from
    (compare-and-set), so a re-delivered or late task never stores a stale
    vector. Returns how many rows it stored."""
    from piper.embeddings import get_embedder

    rows = list(
        FactText.objects.filter(pk__in=list(ids), embedding__isnull=True)
        .order_by("id")
        .values_list("id", "text")
    )
    if not rows:
        return 0
    embedder = get_embedder()
    stored = 0
    for at in range(0, len(rows), EMBED_BATCH):
        batch = rows[at : at + EMBED_BATCH]
        vectors = embedder.embed([text for _, text in batch])
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE facts_facttext AS t
                   SET embedding = v.embedding::vector, embedding_model = %s, embedded_at = now()
                  FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS v(id, text, embedding)
                 WHERE t.id = v.id AND t.text = v.text AND t.embedding IS NULL
                """,
                [
                    embedder.name,
                    [i for i, _ in batch],
                    [text for _, text in batch],
                    [_vector_literal(vec) for vec in vectors],
                ],
            )
            stored += cursor.rowcount
    return stored


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


# ----------------------------------------------------------------------- search


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


def _vector_ranked(
    agent: Agent, embedding: Sequence[float], limit: int
) -> list[tuple[uuid.UUID, uuid.UUID, float]]:
    vector = _vector_literal(embedding)
    with transaction.atomic(), connection.cursor() as cursor:
        # An HNSW scan filtered to one agent can stop short of `limit` rows;
        # pgvector 0.8's iterative scan keeps reading until it has them. For this
        # statement only: the caller's transaction may go on.
        cursor.execute(
            "SELECT current_setting('hnsw.iterative_scan', true),"
            " set_config('hnsw.iterative_scan', 'strict_order', true)"
        )
        previous = cursor.fetchone()[0] or "off"
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
            cursor.execute("SELECT set_config('hnsw.iterative_scan', %s, true)", [previous])
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


# ------------------------------------------------------------------ the backlog sweep

# Events one step of the sweep reads for one agent (one refresh of the pairs they touched).
BACKLOG_EVENTS_PER_STEP = 5000
# The sweep leaves events younger than this to the tasks their commit queued.
BACKLOG_GRACE_SECONDS = 120
# One sweep works for at most this long, then leaves the rest to the next run.
BACKLOG_TIME_BUDGET_SECONDS = 50
_BACKLOG_LOCK = "facts-texts-backlog"


def _agents_behind(agent_id: uuid.UUID | None) -> list[tuple[uuid.UUID, int]]:
    """(agent, cursor) for each agent whose ledger has moved past its cursor."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT h.agent_id, COALESCE(c.last_seq, 0)
              FROM ledger_chainhead h
              LEFT JOIN facts_facttextcursor c ON c.agent_id = h.agent_id
             WHERE h.last_seq > COALESCE(c.last_seq, 0)
               AND (%(agent)s::uuid IS NULL OR h.agent_id = %(agent)s::uuid)
             ORDER BY h.agent_id
            """,
            {"agent": agent_id},
        )
        return cursor.fetchall()


def _texts_catch_up(
    agent_id: uuid.UUID, after_seq: int, cutoff: datetime
) -> tuple[int, list[uuid.UUID]] | None:
    """One step for one agent: render again the pairs its events after
    `after_seq` (up to BACKLOG_EVENTS_PER_STEP of them, recorded before
    `cutoff`) touched, then move its cursor past them. Returns (events
    stepped over, texts changed), or None when no event is old enough yet."""
    upto = Event.objects.filter(
        agent_id=agent_id,
        seq__gt=after_seq,
        seq__lte=after_seq + BACKLOG_EVENTS_PER_STEP,
        recorded_at__lt=cutoff,
    ).aggregate(upto=Max("seq"))["upto"]
    if upto is None:
        return None
    pairs = pairs_touched(agent_id, after_seq + 1, upto)
    changed: list[uuid.UUID] = []
    if pairs:
        # Not embedded here: the sweep embeds what is left without a vector next.
        changed = fact_texts_refresh(
            agent_id=agent_id, pairs=pairs, embed="never", lock_timeout_ms=500
        ).changed
    # A later cursor only: two sweeps at once (the lock lost with its session)
    # never move it back.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {FactTextCursor._meta.db_table} AS c (agent_id, last_seq) "
            "VALUES (%s, %s) ON CONFLICT (agent_id) DO UPDATE "
            "SET last_seq = GREATEST(c.last_seq, EXCLUDED.last_seq)",
            [agent_id, upto],
        )
    return upto - after_seq, changed


def fact_texts_backlog(
    *,
    agent_id: uuid.UUID | None = None,
    grace_seconds: float = BACKLOG_GRACE_SECONDS,
    time_budget_seconds: float = BACKLOG_TIME_BUDGET_SECONDS,
) -> dict[str, int]:
    """Re-derive the fact texts a lost task left missing, stale or without a
    vector (`facts.fact_texts_backlog`, celery-beat).

    1. For every agent (or one) whose ledger moved past its FactTextCursor:
       the pairs the events since touched are rendered again (a text already
       right is left alone) and the cursor moves on — only events older than
       `grace_seconds`, which the tasks of their commit had time to do.
    2. Texts without a vector, rendered more than `grace_seconds` ago or
       changed by step 1, are embedded.

    Idempotent, and all its state is in PostgreSQL: a sweep whose worker dies
    is done again by the next. One sweep at a time (a session advisory lock;
    a second returns at once). Stops after `time_budget_seconds`, leaving the
    rest to the next run. Returns counts."""
    from django.db import OperationalError

    done = {"agents": 0, "events": 0, "texts_changed": 0, "texts_embedded": 0, "gave_way": 0}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [_BACKLOG_LOCK])
        if not cursor.fetchone()[0]:
            logger.info("fact_texts_backlog: another sweep is running")
            return done
    try:
        deadline = time.monotonic() + time_budget_seconds
        cutoff = timezone.now() - timedelta(seconds=grace_seconds)
        changed: list[uuid.UUID] = []
        for agent, cursor_seq in _agents_behind(agent_id):
            stepped_over = 0
            while time.monotonic() < deadline:
                try:
                    step = _texts_catch_up(agent, cursor_seq, cutoff)
                except OperationalError as exc:  # a lock wait gave way: next run
                    if getattr(exc.__cause__, "sqlstate", None) not in ("55P03", "40P01"):
                        raise
                    done["gave_way"] += 1
                    break
                if step is None:
                    break
                stepped, texts = step
                cursor_seq += stepped
                stepped_over += stepped
                changed += texts
            done["agents"] += bool(stepped_over)
            done["events"] += stepped_over
            if time.monotonic() >= deadline:
                break
        done["texts_changed"] = len(changed)
        pending = FactText.objects.filter(embedding__isnull=True).filter(
            Q(rendered_at__lt=cutoff) | Q(pk__in=changed)
        )
        if agent_id is not None:
            pending = pending.filter(agent_id=agent_id)
        after = None
        while time.monotonic() < deadline:
            page = pending.order_by("id")
            if after is not None:
                page = page.filter(id__gt=after)
            ids = list(page.values_list("id", flat=True)[:EMBED_BATCH])
            if not ids:
                break
            done["texts_embedded"] += fact_texts_embed(ids=ids)
            after = ids[-1]
        if any(done[k] for k in ("events", "texts_changed", "texts_embedded", "gave_way")):
            logger.info("fact_texts_backlog: %s", done)
        return done
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [_BACKLOG_LOCK]
                )
        except DatabaseError:  # the session is gone, and its lock with it
            logger.warning("fact_texts_backlog: could not release its lock", exc_info=True)
