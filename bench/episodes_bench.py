"""Episodic memory at one million episodes: ingest, embedding, hybrid recall, HTTP (issue #6).

    .venv/bin/python bench/episodes_bench.py [--agents 10] [--per-agent 100000]
        [--distinct 30000] [--queries 300] [--reload]
        [--only world,graphs,ingest,embed,search,recall_at_10,http,explain,ab] [--ab NAME=VALUE]

Runs in a database of its own on the embedded server (PIPER_DB_NAME, default
piper_bench_episodes), so it never disturbs tests or the other benchmarks.

world   Builds `agents` agents x `per-agent` episodes (1M by default) unless a
        complete world of that shape is already there (`--reload` builds a new
        one). Texts come from bench/episode_texts.py: `distinct` different
        episode texts are embedded once with the process embedder and cached
        under var/bench/ (keyed by count, seed and embedder name); each episode
        takes one of them with its vector perturbed (Gaussian noise of norm
        ~0.1, renormalised: cosine ~0.995 to the text's own vector), so that
        near duplicates exist as in a real agent's memory. Every episode gets
        its `episode.recorded` ledger event with a correct hash chain (the
        payload the ingest path would write), and both tables are bulk-loaded
        with COPY, the HNSW and GIN indexes dropped first and rebuilt after
        (maintenance_work_mem 4GB); the ingest path itself is measured
        separately.
graphs  Gives every agent past EPISODES_AGENT_GRAPH_MIN_ROWS (all ten, at 100k
        each) its own HNSW graph, and then every actor of theirs past
        EPISODES_ACTOR_GRAPH_MIN_ROWS (all 160) its own, as celery-beat's
        episodes.build_agent_graphs does (episodes/agent_graphs.py,
        episodes/actor_graphs.py); leave it out to measure the global graph
        alone (drop the episodes_hnsw_agent_* indexes and the
        episodes_actorvector_* tables first).
ingest  `episodes.services.episodes_record` in batches of 1,000 into a fresh
        agent (embeddings deferred: the embedding task is queued after commit
        and not run here); episodes/s, best of the passes.
embed   The embed task's path over those rows: `episodes.tasks` embedding of
        unembedded episodes in batches; texts/s: half of them into the global
        graph only, then the agent gets its own graph and the other half goes
        into both.
search  `episodes.retrieval.episode_search` in-process with a precomputed query
        embedding (query texts are new generated episodes; the embedding is
        excluded from the timing), p50/p95 over `queries` queries for one agent
        of the world, with no filter, an actor filter, and an actor + 90-day
        window filter.
recall_at_10
        The vector half as retrieval runs it (HNSW, iterative scan,
        ef_search and max_scan_tuples from episodes.retrieval, re-ordered by
        true distance; an actor's own graph where it has one and is the only
        filter) against exact search (sequential, `<=>` + 0) inside one
        agent, with the same filters: mean recall@10, and the share of queries
        that returned fewer than 10 rows.
http    GET /api/v1/episodes/search and POST /api/v1/recall through a real
        gunicorn shaped like the Procfile (127.0.0.1, a free port), including the
        query embedding: p50/p95 over a bounded number of requests.
explain EXPLAIN (ANALYZE, BUFFERS) of the vector and text statements for one
        query, printed.
ab      With --ab NAME=VALUE: `search`'s queries and filter sets, each query run
        as is and with NAME set to VALUE (a constant in episodes.retrieval, or a
        Django setting), in alternating order, so that both variants meet the
        same machine state; p50/p95 of each and the median paired difference.
        Run-to-run drift on a shared host is often larger than what a change
        saves, and separate runs cannot tell them apart. Also counts the queries
        whose hits differ between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("PIPER_DB_NAME", "piper_bench_episodes")

import numpy as np  # noqa: E402
from _harness import (  # noqa: E402
    ROOT,
    git_commit,
    gunicorn,
    load_average,
    machine,
    migrate,
    retrieval_modules,
    setup_django,
    summary_ms_p95,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import episode_texts  # noqa: E402

AGENT_PREFIX = "bench-episodes"
BATCH = 1000
START = datetime(2025, 1, 1, tzinfo=UTC)
SPAN_DAYS = 365
CACHE = ROOT / "var" / "bench"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------ texts + vectors


def base_texts(n: int, seed: int = 7):
    from piper.embeddings import get_embedder

    episodes = episode_texts.distinct_texts(n, seed=seed)
    embedder = get_embedder()
    slug = embedder.name.replace("/", "_").replace("+", "_")
    path = CACHE / f"episode-vectors-{n}-{seed}-{slug}.npy"
    if path.is_file():
        vectors = np.load(path)
    else:
        CACHE.mkdir(parents=True, exist_ok=True)
        log(f"embedding {n} distinct episode texts with {embedder.name} (cached in {path})")
        started = time.perf_counter()
        texts = [e.embedding_text() for e in episodes]
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        log(f"  {n / (time.perf_counter() - started):.0f} texts/s")
        np.save(path, vectors)
    return episodes, vectors, embedder.name


def perturbed(vectors: np.ndarray, rng: np.random.Generator, norm: float = 0.1) -> np.ndarray:
    noise = rng.standard_normal(vectors.shape).astype(np.float32) * (norm / np.sqrt(384))
    out = vectors + noise
    return out / np.linalg.norm(out, axis=1, keepdims=True)


# -------------------------------------------------------------------------- world


def _copy(cursor, table: str, columns: list[str], rows) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _vec(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.6g}" for x in v) + "]"


def _pg_array(values) -> str:
    return (
        "{"
        + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
        + "}"
    )


WORLD_INDEXES = ("episodes_embedding_hnsw", "episodes_search_vector_gin", "episodes_entities_gin")


def _create_world_indexes(model) -> None:
    from django.db import connection

    defined = {index.name: index for index in model._meta.indexes}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE indexname = ANY(%s)", [list(WORLD_INDEXES)]
        )
        present = {row[0] for row in cursor.fetchall()}
    for name in WORLD_INDEXES:
        if name in present:
            continue
        started = time.perf_counter()
        with connection.schema_editor() as editor:
            editor.add_index(model, defined[name])
        log(f"  {name} {time.perf_counter() - started:.0f} s")


def build_world(args) -> list:
    from django.db import connection, transaction

    from episodes.models import Episode
    from episodes.services import EPISODE_RECORDED, EpisodeDraft, episode_payload
    from ledger.hashing import event_hash, payload_hash
    from ledger.models import ChainHead, Event
    from ledger.services import _lock_chain_head
    from piper.ids import uuid7
    from piper.provenance import DEFAULT_AUTHORITY_FOR_SOURCE
    from piper.tenancy.models import Agent
    from piper.tenancy.services import agent_create

    shape = f"{args.per_agent} episodes, {args.distinct} distinct texts"
    existing = list(
        Agent.objects.filter(name__startswith=f"{AGENT_PREFIX}-w", description=shape).order_by(
            "name"
        )
    )
    if len(existing) >= args.agents and not args.reload:
        log(f"world found: {len(existing)} agents x {shape}")
        return existing[: args.agents]

    episodes, vectors, model_name = base_texts(args.distinct)
    rng = random.Random(42)
    nrng = np.random.default_rng(42)
    stamp = int(time.time())
    agents = [
        agent_create(name=f"{AGENT_PREFIX}-w{stamp}-{i:02d}", description="loading")
        for i in range(args.agents)
    ]
    event_cols = [f.column for f in Event._meta.concrete_fields]
    episode_cols = [
        f.column for f in Episode._meta.concrete_fields if not getattr(f, "generated", False)
    ]
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for name in WORLD_INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")
    for a, agent in enumerate(agents):
        # One transaction per agent: the chain lock stamps piper.record_time, which
        # the ledger's insert trigger writes into recorded_at (part of each hash).
        atomic = transaction.atomic()
        atomic.__enter__()
        seq, last_hash, now = _lock_chain_head(agent)
        event_rows, episode_rows = [], []
        picks = [rng.randrange(len(episodes)) for _ in range(args.per_agent)]
        agent_vectors = perturbed(vectors[picks], nrng)
        for j, k in enumerate(picks):
            g = episodes[k]
            occurred = START + timedelta(seconds=j * SPAN_DAYS * 86400 / args.per_agent)
            session = f"s{j // 25:05d}"
            draft = EpisodeDraft(
                occurred_at=occurred,
                summary=g.summary,
                action=g.action,
                observation=g.observation,
                outcome=g.outcome,
                actor=g.actor,
                environment=g.environment,
                session_id=session,
                entities=g.entities,
            )
            episode_id = uuid7()
            payload = episode_payload(draft, episode_id)
            seq += 1
            event = Event(
                id=uuid7(),
                agent_id=agent.pk,
                seq=seq,
                event_type=EPISODE_RECORDED,
                occurred_at=occurred,
                recorded_at=now,
                session_id=session,
                actor=g.actor,
                source_type=draft.source_type,
                source_ref="",
                authority=DEFAULT_AUTHORITY_FOR_SOURCE[draft.source_type],
                confidence=1.0,
                payload=payload,
                payload_hash=payload_hash(payload),
                privacy_class="internal",
                retention_class="standard",
                prev_hash=last_hash,
            )
            event.hash = last_hash = event_hash(event)
            values = {f.column: getattr(event, f.attname) for f in Event._meta.concrete_fields}
            values["payload"] = json.dumps(payload)
            event_rows.append([values[c] for c in event_cols])
            row = {
                "id": episode_id,
                "agent_id": agent.pk,
                "occurred_at": occurred,
                "session_id": session,
                "actor": g.actor,
                "environment": g.environment,
                "goal_id": "",
                "task_id": "",
                "action": g.action,
                "observation": g.observation,
                "outcome": g.outcome,
                "score": None,
                "summary": g.summary,
                "salience": 0.5,
                "confidence": 1.0,
                "use_count": 0,
                "last_used_at": None,
                "instruction_like": False,
                "canonical_id": None,
                "status": "active",
                "status_reason": "",
                "status_changed_at": None,
                "supersedes": None,
                "superseded_by": None,
                "entities": _pg_array(payload["entities"]),
                "related_ids": "{}",
                "source_type": draft.source_type,
                "authority": event.authority,
                "source_id": None,
                "raw_event_id": event.id,
                "embedding": _vec(agent_vectors[j]),
                "embedding_model": model_name,
                "embedded_at": now,
                "created_at": now,
            }
            episode_rows.append([row[c] for c in episode_cols])
        with connection.cursor() as cursor:
            _copy(cursor, Event._meta.db_table, event_cols, event_rows)
            _copy(cursor, Episode._meta.db_table, episode_cols, episode_rows)
        ChainHead.objects.filter(agent_id=agent.pk).update(last_seq=seq, last_hash=last_hash)
        atomic.__exit__(None, None, None)
        log(
            f"agent {a + 1}/{len(agents)} loaded ({args.per_agent} episodes + events), "
            f"{time.perf_counter() - started:.0f} s"
        )
    log("rebuilding indexes (HNSW over every embedding, GIN over text and entities)")
    index_started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '4GB'")
        cursor.execute("SET max_parallel_maintenance_workers = 1")
    # As the migrations define them (the HNSW graph's m and ef_construction
    # included): an index written out here went stale when the model's changed.
    _create_world_indexes(Episode)
    log(f"  indexes {time.perf_counter() - index_started:.0f} s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE episodes_episode")
        cursor.execute("ANALYZE ledger_event")
    Agent.objects.filter(pk__in=[a.pk for a in agents]).update(description=shape)
    log(
        f"world built: {len(agents)} x {args.per_agent} episodes in "
        f"{time.perf_counter() - started:.0f} s ({load_average()})"
    )
    return agents


# ------------------------------------------------------------------------- ingest


def measure_ingest(args) -> dict:
    from episodes.services import episodes_record
    from piper.tenancy.services import agent_create

    generated = episode_texts.episodes(args.ingest, seed=99)
    agent = agent_create(name=f"{AGENT_PREFIX}-ingest-{int(time.time() * 1000)}")
    drafts = [
        g.draft(occurred_at=START + timedelta(minutes=i), session_id=f"s{i // 25}")
        for i, g in enumerate(generated)
    ]
    rates = []
    for start in range(0, len(drafts), BATCH):
        batch = drafts[start : start + BATCH]
        t = time.perf_counter()
        episodes_record(agent=agent, drafts=batch)
        rates.append(len(batch) / (time.perf_counter() - t))
    return {
        "agent": agent,
        "episodes": len(drafts),
        "batches": len(rates),
        "best_per_s": round(max(rates)),
        "median_per_s": round(sorted(rates)[len(rates) // 2]),
        "load": load_average(),
    }


def _embed_rate(ids) -> dict:
    from episodes import tasks

    started = time.perf_counter()
    cpu = time.process_time()
    for i in range(0, len(ids), 256):
        tasks.embed_episodes.run([str(x) for x in ids[i : i + 256]])  # the task body, here
    wall = time.perf_counter() - started
    return {
        "episodes": len(ids),
        "per_s": round(len(ids) / wall),
        "per_cpu_s_of_this_process": round(len(ids) / (time.process_time() - cpu)),
        "load": load_average(),
    }


def measure_embed(agent) -> dict:
    """The first half into the global graph only; the agent then gets its own
    graph (as a large agent would) and the second half goes into both."""
    from episodes.agent_graphs import AgentGraph, agent_graph_build, graph_name
    from episodes.models import Episode

    ids = list(
        Episode.objects.filter(agent=agent, embedding__isnull=True)
        .order_by("id")
        .values_list("id", flat=True)
    )
    half = len(ids) // 2
    out = {"global_graph": _embed_rate(ids[:half])}
    graph = AgentGraph(agent.pk, len(ids), graph_name(agent.pk), "missing")
    log(f"embed: the ingest agent's own graph built in {agent_graph_build(graph):.1f} s")
    out["global_and_own_graph"] = _embed_rate(ids[half:])
    out["left_unembedded"] = Episode.objects.filter(agent=agent, embedding__isnull=True).count()
    return out


def build_agent_graphs() -> dict:
    """What celery-beat's episodes.build_agent_graphs does: every agent past
    EPISODES_AGENT_GRAPH_MIN_ROWS gets its own graph, then every actor of
    theirs past EPISODES_ACTOR_GRAPH_MIN_ROWS its own."""
    from episodes.actor_graphs import actor_graphs, actor_graphs_build_missing
    from episodes.agent_graphs import agent_graphs, agent_graphs_build_missing

    started = time.perf_counter()
    built = [run for run in agent_graphs_build_missing() if run.seconds is not None]
    agents_done = time.perf_counter()
    actors = [run for run in actor_graphs_build_missing() if run.seconds is not None]
    return {
        "built": len(built),
        "seconds_each": [round(b.seconds, 1) for b in built],
        "seconds": round(agents_done - started, 1),
        "present": sum(g.state == "present" for g in agent_graphs()),
        "actor_graphs_built": len(actors),
        "actor_graphs_seconds": round(time.perf_counter() - agents_done, 1),
        "actor_graphs_present": sum(s.state == "present" for s in actor_graphs()),
        "load": load_average(),
    }


# ------------------------------------------------------------------------- search


def queries(n: int):
    from piper.embeddings import get_embedder

    qs = episode_texts.episodes(n, seed=1234)
    texts = [q.summary for q in qs]
    vectors = get_embedder().embed(texts)
    return qs, texts, vectors


def filter_sets(qs):
    from episodes.retrieval import SearchFilters

    out = {"none": [SearchFilters() for _ in qs]}
    out["actor"] = [SearchFilters(actor=q.actor) for q in qs]
    rng = random.Random(5)
    windows = []
    for q in qs:
        start = START + timedelta(days=rng.randrange(SPAN_DAYS - 90))
        windows.append(
            SearchFilters(
                actor=q.actor, occurred_after=start, occurred_before=start + timedelta(days=90)
            )
        )
    out["actor+90d"] = windows
    # The same windows without the actor: ~24k of the agent's rows, too many for
    # an exact scan, so the filtered HNSW walk.
    out["90d"] = [
        SearchFilters(occurred_after=w.occurred_after, occurred_before=w.occurred_before)
        for w in windows
    ]
    return out


def measure_search(agent, qs, texts, vectors) -> dict:
    from episodes.retrieval import episode_search

    result = {}
    for name, filters in filter_sets(qs).items():
        samples, abstained, strategies = [], 0, {}
        for text, vector, f in zip(texts, vectors, filters, strict=True):
            t = time.perf_counter()
            r = episode_search(agent=agent, query=text, query_embedding=vector, filters=f)
            samples.append(time.perf_counter() - t)
            abstained += r.abstained
            strategies[r.vector_strategy] = strategies.get(r.vector_strategy, 0) + 1
        result[name] = {
            **summary_ms_p95(samples[5:]),
            "abstained": abstained,
            "vector_strategy": strategies,
            "load": load_average(),
        }
    return result


def _where(agent, f) -> tuple[str, list]:
    where, params = ["agent_id = %s", "embedding IS NOT NULL"], [agent.pk]
    if f.actor:
        where.append("actor = %s")
        params.append(f.actor)
    if f.occurred_after:
        where.append("occurred_at >= %s AND occurred_at < %s")
        params += [f.occurred_after, f.occurred_before]
    return " AND ".join(where), params


def measure_recall_at_10(agent, qs, vectors) -> dict:
    from django.db import connection, transaction

    from episodes.models import ActorGraph
    from episodes.retrieval import fetch, search

    leaves = dict(
        ActorGraph.objects.filter(agent=agent, built_at__isnull=False).values_list(
            "actor", "table_name"
        )
    )
    out = {}
    for name, filters in filter_sets(qs).items():
        recalls, short, ann_s, exact_s, read = [], 0, [], [], set()
        for vector, f in zip(vectors, filters, strict=True):
            where, params = _where(agent, f)
            qv = "[" + ",".join(repr(float(x)) for x in vector) + "]"
            # As retrieval reads it: the actor's own graph when the actor is the
            # only filter and has one, else the episodes' graphs.
            leaf = leaves.get(f.actor) if f.actor and not f.occurred_after else None
            read.add("actor_graph" if leaf else "episodes")
            ann_sql = (
                f"SELECT episode_id AS id, embedding <=> %s::vector AS d FROM {leaf}"
                " ORDER BY embedding <=> %s::vector LIMIT %s"
                if leaf
                else "SELECT id, embedding <=> %s::vector AS d FROM episodes_episode"
                f" WHERE {where} ORDER BY embedding <=> %s::vector LIMIT %s"
            )
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                    "set_config('hnsw.ef_search', %s, true), "
                    "set_config('hnsw.max_scan_tuples', %s, true), "
                    "set_config('enable_seqscan', %s, true)",
                    [
                        str(fetch.HNSW_EF_SEARCH),
                        str(fetch.HNSW_MAX_SCAN_TUPLES),
                        "off" if leaf else "on",
                    ],
                )
                t = time.perf_counter()
                cursor.execute(
                    f"SELECT id FROM ({ann_sql}) ann ORDER BY d, id LIMIT 10",
                    [qv, *([] if leaf else params), qv, search.MIN_CANDIDATES],
                )
                ann = [r[0] for r in cursor.fetchall()]
                ann_s.append(time.perf_counter() - t)
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL enable_indexscan = off")
                cursor.execute("SET LOCAL enable_bitmapscan = on")
                t = time.perf_counter()
                cursor.execute(
                    f"SELECT id FROM episodes_episode WHERE {where} "
                    "ORDER BY (embedding <=> %s::vector) + 0, id LIMIT 10",
                    [*params, qv],
                )
                exact = [r[0] for r in cursor.fetchall()]
                exact_s.append(time.perf_counter() - t)
            if exact:
                recalls.append(len(set(ann) & set(exact)) / len(exact))
            short += len(ann) < min(10, len(exact))
        out[name] = {
            "recall_at_10": round(float(np.mean(recalls)), 4),
            "min": round(float(np.min(recalls)), 2),
            "queries_short_of_10": short,
            "ann_p50_ms": round(float(np.median(ann_s)) * 1000, 2),
            "exact_p50_ms": round(float(np.median(exact_s)) * 1000, 2),
            "read": sorted(read),
            "load": load_average(),
        }
    return out


def _variant(assignment: str):
    """A context manager that sets NAME to VALUE: a constant of episodes.retrieval's
    modules if they have one by that name, else a Django setting."""
    from contextlib import contextmanager

    from django.test.utils import override_settings

    name, _, raw = assignment.partition("=")
    if not name or not raw:
        raise SystemExit(f"--ab takes NAME=VALUE, not {assignment!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw

    @contextmanager
    def applied():
        modules = retrieval_modules(name)
        if modules:
            before = getattr(modules[0], name)
            for module in modules:
                setattr(module, name, value)
            try:
                yield
            finally:
                for module in modules:
                    setattr(module, name, before)
        else:
            with override_settings(**{name: value}):
                yield

    return applied


def measure_ab(agent, qs, texts, vectors, assignment: str) -> dict:
    from contextlib import nullcontext

    from episodes.retrieval import episode_search

    variants = {"as is": nullcontext, assignment: _variant(assignment)}
    result = {}
    for name, filters in filter_sets(qs).items():
        samples = {v: [] for v in variants}
        different = 0  # queries whose hits (ids, in order) differ between the variants
        for i, (text, vector, f) in enumerate(zip(texts, vectors, filters, strict=True)):
            order = list(variants) if i % 2 else list(variants)[::-1]
            answers = set()
            for v in order:
                with variants[v]():
                    t = time.perf_counter()
                    r = episode_search(agent=agent, query=text, query_embedding=vector, filters=f)
                    samples[v].append(time.perf_counter() - t)
                answers.add(tuple(h.obj.pk for h in r.hits))
            different += len(answers) > 1
        a, b = (samples[v][5:] for v in variants)
        result[name] = {
            **{v: summary_ms_p95(samples[v][5:]) for v in variants},
            "median_difference_ms": round(float(np.median(np.subtract(b, a))) * 1000, 3),
            "different_hits": different,
            "load": load_average(),
        }
    return result


def explain(agent, text, vector, filters=None) -> None:
    """Replay the statements one episode_search runs, each SELECT under EXPLAIN ANALYZE."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from episodes.retrieval import episode_search

    episode_search(agent=agent, query=text, query_embedding=vector, filters=filters)  # warm caches
    with CaptureQueriesContext(connection) as captured:
        t = time.perf_counter()
        episode_search(agent=agent, query=text, query_embedding=vector, filters=filters)
        total = time.perf_counter() - t
    print(
        f"episode_search({text!r}, filters={filters}): {total * 1000:.1f} ms, "
        f"{len(captured.captured_queries)} statements"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        for q in captured.captured_queries:
            sql = q["sql"]
            head = sql.lstrip()[:40].upper()
            print(f"--- {q['time']} s: {' '.join(sql.split())[:160]}")
            if head.startswith(
                ("SELECT SET_CONFIG", "SAVEPOINT", "RELEASE", "SET ")
            ) or not head.startswith(("SELECT", "WITH")):
                cursor.execute(sql)
                continue
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            print("\n".join(r[0] for r in cursor.fetchall()))


# --------------------------------------------------------------------------- http


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_http(agent, texts, requests: int) -> dict:
    import httpx

    from piper.tenancy.models import MAX_RATE_PER_MINUTE
    from piper.tenancy.services import api_key_create

    _, raw = api_key_create(
        agent=agent, name="bench", scopes=["read", "write"], rate_per_minute=MAX_RATE_PER_MINUTE
    )
    headers = {"Authorization": f"Bearer {raw}"}
    out = {}
    with (
        gunicorn(free_port()) as base,
        httpx.Client(base_url=base, headers=headers, timeout=30) as c,
    ):
        for t in texts[:5]:  # warm both workers' embedders and caches
            c.get("/api/v1/episodes/search", params={"q": t})
            c.post("/api/v1/recall", json={"query": t})
        deadline = time.monotonic() + 300
        for name, call in (
            (
                "GET /api/v1/episodes/search",
                lambda t: c.get("/api/v1/episodes/search", params={"q": t}),
            ),
            ("POST /api/v1/recall", lambda t: c.post("/api/v1/recall", json={"query": t})),
        ):
            samples, statuses = [], {}
            for t in texts[:requests]:
                if time.monotonic() > deadline:
                    break
                started = time.perf_counter()
                response = call(t)
                samples.append(time.perf_counter() - started)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            out[name] = {**summary_ms_p95(samples), "statuses": statuses, "load": load_average()}
    return out


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--per-agent", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--ingest", type=int, default=20_000)
    parser.add_argument("--http-requests", type=int, default=200)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--ab", help="NAME=VALUE: the `ab` comparison (see above)")
    parser.add_argument(
        "--only",
        default="world,graphs,ingest,embed,search,recall_at_10,http",
        help="comma-separated",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))

    setup_django()
    migrate()
    print(f"machine: {machine()}; commit {git_commit()}; database {os.environ['PIPER_DB_NAME']}")
    from piper.embeddings import get_embedder

    print(f"embedder: {get_embedder().name}; {load_average()}")
    results: dict = {}
    agents = (
        build_world(args)
        if only & {"world", "graphs", "search", "recall_at_10", "http", "explain", "ab"}
        else []
    )
    if agents and "graphs" in only:
        results["graphs"] = build_agent_graphs()
        log(f"agent graphs: {results['graphs']}")
    if "ingest" in only:
        ingest = measure_ingest(args)
        ingest_agent = ingest.pop("agent")
        results["ingest"] = ingest
        log(f"ingest: {ingest}")
        if "embed" in only:
            results["embed"] = measure_embed(ingest_agent)
            log(f"embed: {results['embed']}")
    if agents and only & {"search", "recall_at_10", "http", "explain", "ab"}:
        target = agents[len(agents) // 2]
        qs, texts, vectors = queries(args.queries)
        if "search" in only:
            results["search"] = measure_search(target, qs, texts, vectors)
            log(f"search: {json.dumps(results['search'])}")
        if "ab" in only:
            if not args.ab:
                raise SystemExit("--only ab needs --ab NAME=VALUE")
            results["ab"] = measure_ab(target, qs, texts, vectors, args.ab)
            log(f"ab: {json.dumps(results['ab'])}")
        if "recall_at_10" in only:
            results["recall_at_10"] = measure_recall_at_10(target, qs[:200], vectors[:200])
            log(f"recall@10: {json.dumps(results['recall_at_10'])}")
        if "explain" in only:
            explain(target, texts[0], vectors[0])
            for i, name in enumerate(("actor", "actor+90d", "90d"), start=1):
                explain(target, texts[i], vectors[i], filter_sets(qs[i : i + 1])[name][0])
        if "http" in only:
            results["http"] = measure_http(target, texts, args.http_requests)
            log(f"http: {json.dumps(results['http'])}")
    print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
