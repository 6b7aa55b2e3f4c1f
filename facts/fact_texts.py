"""The fact texts: each (subject, predicate) an agent holds facts about, as words.

Each pair is rendered as one line of text — "deployment window — team
platform: Tuesdays 14:00" — stored in `FactText` with a generated full-text
vector and an embedding; `facts.search` finds candidate pairs among them.

The texts are maintained after commit: the ledger hook (`facts.hooks`)
queues `facts.index_fact_texts` for a commit holding fact events; the task
re-renders the pairs those events touched (`fact_texts_refresh`) and queues
the embedding of the texts that changed (`facts.embed_fact_texts`). Both are
idempotent: a re-run renders the same text, writes nothing, and an embedding
is only stored if the text it was computed from is still the row's text. A
sweep (`fact_texts_backlog`, celery-beat) does again what a lost task left.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from ledger.models import Event
from piper.canonical import canonical_json
from piper.embedded_text import embeddings_store
from piper.locks import advisory_xact_locks

from . import projection as p
from .models import Fact, FactText, FactTextCursor

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
        texts = dict(rows[at : at + EMBED_BATCH])
        vectors = embedder.embed(list(texts.values()))
        stored += embeddings_store(
            FactText,
            vectors=dict(zip(texts, vectors, strict=True)),
            model=embedder.name,
            texts=texts,
        )
    return stored


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
