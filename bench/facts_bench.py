"""Semantic memory at one million fact versions (issue #3).

    .venv/bin/python bench/facts_bench.py [--subjects 100000] [--versions 10] [--reload]
        [--samples 3000] [--only supersede,current,as_of,graph,http,explain,proposed]
        [--profile]

Builds, in the benchmark database, one agent holding `subjects` people with
one single-valued fact each asserted `versions` times at increasing valid
times (1M versions by default) through the real write path,
`facts.services.facts_assert`, in batches of 1,000 — every round after the
first supersedes what the previous round asserted for the same 1,000 people.
Three other agents write the same names and predicates, interleaved, so the
table is multi-tenant. A relation layer (person -works_at-> organization
-located_in-> city -in_country-> country) feeds the path queries.

The load is kept: a later run finds the complete bench agent (its load
figures are in the agent's description) and measures reads without
reloading; `--reload` loads a new agent (earlier rows stay, as in the ledger
benchmarks: the ledger is append-only).

Reads time what the API does: resolve the subject (by name or id) and the
predicate, then evaluate the selector to a list — facts_current, facts_as_of
(random valid time inside the subject's history), graph_paths (3 hops) — and
GET /api/v1/facts/current over a real gunicorn shaped like the Procfile.
`supersede` asserts one more version for random slices of 1,000 people at
full size, each batch rolled back. Every answer is checked against the value
the loader wrote, outside the timing.

`proposed` also times the fixes docs/benchmarks.md proposes for the missed
targets (a name lookup through the lower(alias) index, the lookup as one SQL
statement, a preload restricted to the versions a batch can touch), built in
this script: the facts code itself is not changed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
from _harness import (
    git_commit,
    gunicorn,
    load_average,
    machine,
    migrate,
    setup_django,
    summary_ms_p95,
)

AGENT_PREFIX = "bench-facts"
BATCH = 1000
BASE = datetime(2023, 1, 2, 8, 0, tzinfo=UTC)

FIRST = (  # noqa: SIM905 (word lists read better as text)
    "Ada Alan Grace Linus Barbara Ken Margaret Dennis Frances Edsger Radia Tim Hedy John "
    "Joan Donald Sophie Niklaus Katherine Guido Anita Bjarne Shafi Leslie Mary Claude "
    "Sister Dorothy Fernando Carol Yukihiro Lynn Vint Adele Jean Evelyn Rasmus Lois Ward "
    "Mitchell"
).split()
LAST = (  # noqa: SIM905 (word lists read better as text)
    "Lovelace Turing Hopper Torvalds Liskov Thompson Hamilton Ritchie Allen Dijkstra "
    "Perlman Berners-Lee Lamarr Backus Clarke Knuth Wilson Wirth Johnson Rossum Borg "
    "Stroustrup Goldwasser Lamport Keller Shannon Vaughan Hodgkin Corbato Shaw Matsumoto "
    "Conway Cerf Goldberg Sammet Boyd Lerdorf Haibt Cunningham Kapor"
).split()
TITLES = [
    "Software Engineer",
    "Senior Software Engineer",
    "Staff Engineer",
    "Engineering Manager",
    "Product Manager",
    "Data Scientist",
    "Site Reliability Engineer",
    "Designer",
    "Support Engineer",
    "Solutions Architect",
    "Security Engineer",
    "QA Lead",
    "Technical Writer",
    "Director of Engineering",
    "VP Product",
    "Analyst",
    "Intern",
    "Consultant",
    "Developer Advocate",
    "Principal Engineer",
]
HOME_CITIES = [
    "Berlin",
    "Lisbon",
    "Toronto",
    "Nairobi",
    "Osaka",
    "Melbourne",
    "Austin",
    "Warsaw",
    "Bogotá",
    "Dublin",
    "Seoul",
    "Cape Town",
    "Zürich",
    "Montréal",
    "Bangalore",
    "Oslo",
    "Lyon",
    "Porto",
    "Kraków",
    "Vancouver",
    "São Paulo",
    "Tallinn",
    "Edinburgh",
]
STATES = "trial active past_due active paused active".split()  # noqa: SIM905
PLANS = "free team business enterprise".split()  # noqa: SIM905
SOURCES = "user_statement tool_result observation".split()  # noqa: SIM905
# One single-valued predicate per person: (name, value type).
PREDICATES = [
    ("job_title", "string"),
    ("home_city", "string"),
    ("salary_eur", "integer"),
    ("account_status", "object"),
    ("phone_number", "string"),
]
COUNTRIES = (  # noqa: SIM905 (word lists read better as text)
    "Germany Portugal Canada Kenya Japan Australia USA Poland Colombia Ireland Korea "
    "South-Africa Switzerland France India Norway Brazil Estonia Scotland Spain Italy "
    "Mexico Chile Ghana Vietnam Finland Austria Netherlands Sweden Denmark"
).split()
CITY_A = (  # noqa: SIM905 (word lists read better as text)
    "North South East West Old New Port Lake Fair Green Red Stone Silver Oak Elm Ash "
    "Maple Clear Bright High"
).split()
CITY_B = "field brook haven ford bridge wood dale mouth ton burg".split()  # noqa: SIM905
ORG_A = (  # noqa: SIM905 (word lists read better as text)
    "Acme Globex Initech Umbrella Hooli Vandelay Wonka Stark Wayne Tyrell Cyberdyne "
    "Soylent Aperture Black-Mesa Oscorp Massive Dynamic Gringotts Monarch Nakatomi "
    "Pied-Piper Prestige Sirius Virtucon Weyland Yoyodyne Zorg Bluth Dunder Kruger Los-Pollos "
    "Oceanic Primatech Rekall Sterling Tessier Vought Wolfram Xanadu Gekko"
).split()
ORG_B = (  # noqa: SIM905 (word lists read better as text)
    "Logistics Labs Systems Analytics Health Robotics Foods Energy Media Capital Software "
    "Security Mobility Cloud Bio Retail Insurance Games Aerospace Networks Studios "
    "Foundry Partners Works Group"
).split()
N_ORGS, N_CITIES = 1000, 200
RELATION_EVERY = 10  # every 10th person works somewhere: 10,000 relations at 100k people
OTHER_AGENTS, OTHER_VERSIONS = 3, 4  # other tenants: subjects/20 people each (5,000 at 100k)


# ----------------------------------------------------------------------- the data


def person(i: int) -> str:
    return f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]} ({i:06d})"


def predicate_of(i: int) -> tuple[str, str]:
    return PREDICATES[i % len(PREDICATES)]


def valid_from(i: int, k: int) -> datetime:
    """Version k of person i: ~2 months after version k-1, scattered per person."""
    return BASE + timedelta(
        days=(i * 7) % 365 + 61 * k + (i * 13 + k * 7) % 20, minutes=(i * 37 + k * 101) % 1440
    )


def value(i: int, k: int):
    name, _ = predicate_of(i)
    if name == "job_title":
        return TITLES[(i + 7 * k) % len(TITLES)]
    if name == "home_city":
        return HOME_CITIES[(i + 5 * k) % len(HOME_CITIES)]
    if name == "salary_eur":
        return 38_000 + (i % 60) * 1_000 + 1_750 * k
    if name == "account_status":
        return {
            "state": STATES[(i + k) % len(STATES)],
            "plan": PLANS[(i // 3 + k) % len(PLANS)],
            "seats": 1 + (i * 7 + k) % 40,
            "ticket": f"BILL-{i:06d}-{k}",
        }
    return f"+49 30 {(i * 7919 + k * 104_729) % 10_000_000:07d}"


def org(n: int) -> str:
    return f"{ORG_A[n % len(ORG_A)]} {ORG_B[(n // len(ORG_A)) % len(ORG_B)]}"


def city(n: int) -> str:
    return f"{CITY_A[n % len(CITY_A)]}{CITY_B[(n // len(CITY_A)) % len(CITY_B)]}"


def org_of(i: int) -> int:
    return (i // RELATION_EVERY * 7919) % N_ORGS


def version_claims(i_range: range, k: int, rng: random.Random) -> list:
    from facts.services import ClaimInput, Provenance

    claims = []
    for i in i_range:
        name, value_type = predicate_of(i)
        source = SOURCES[i % len(SOURCES)]  # one source per person: equal authority supersedes
        claims.append(
            ClaimInput(
                subject=person(i),
                subject_type="person",
                predicate=name,
                value=value(i, k),
                valid_from=valid_from(i, k),
                value_type=value_type,
                cardinality="one",
                provenance=Provenance(
                    source_type=source,
                    source_ref=f"{source}:{i}:{k}",
                    confidence=round(rng.uniform(0.6, 1.0), 2),
                    actor=rng.choice(["crm-sync", "assistant", "hr-import", "support-chat"]),
                    session_id=f"session-{k}-{i // 250}",
                ),
            )
        )
    return claims


def relation_batches(subjects: int) -> list[list]:
    """Country, city and organization relations, then who works where."""
    from facts.services import ClaimInput, Provenance

    prov = Provenance(source_type="tool_result", source_ref="directory-sync", actor="crm-sync")
    since = datetime(2015, 1, 1, tzinfo=UTC)

    def relation(subject, subject_type, predicate, obj, object_type, at=since):
        return ClaimInput(
            subject=subject,
            subject_type=subject_type,
            predicate=predicate,
            object_entity=obj,
            object_type=object_type,
            value_type="entity",
            cardinality="one",
            valid_from=at,
            provenance=prov,
        )

    claims = [
        relation(city(c), "city", "in_country", COUNTRIES[c % len(COUNTRIES)], "country")
        for c in range(N_CITIES)
    ]
    claims += [
        relation(org(o), "organization", "located_in", city((o * 7) % N_CITIES), "city")
        for o in range(N_ORGS)
    ]
    claims += [
        relation(person(i), "person", "works_at", org(org_of(i)), "organization", valid_from(i, 0))
        for i in range(0, subjects, RELATION_EVERY)
    ]
    return [claims[n : n + BATCH] for n in range(0, len(claims), BATCH)]


# ----------------------------------------------------------------------- the load


def find_loaded_agent(subjects: int, versions: int):
    from piper.tenancy.models import Agent

    for agent in Agent.objects.filter(
        name__startswith=f"{AGENT_PREFIX}-{subjects}x{versions}-"
    ).order_by("-created_at"):
        try:
            report = json.loads(agent.description).get("facts_bench")
        except (ValueError, AttributeError):
            report = None
        if report and report.get("complete"):
            return agent, report
        print(f"(ignoring {agent.name}: its load did not complete)")
    return None, None


def load(subjects: int, versions: int) -> tuple:
    from facts.services import facts_assert
    from piper.tenancy.services import agent_create, agent_update

    stamp = int(time.time())
    agent = agent_create(
        name=f"{AGENT_PREFIX}-{subjects}x{versions}-{stamp}",
        description="facts_bench load in progress",
    )
    others = [agent_create(name=f"{AGENT_PREFIX}-tenant{n}-{stamp}") for n in range(OTHER_AGENTS)]
    rng = random.Random(3)
    other_subjects = max(100, subjects // 20)
    # The other tenants' batches, interleaved with ours so their rows sit among ours.
    other_queue = [
        (tenant, range(first, min(other_subjects, first + BATCH)), k)
        for k in range(OTHER_VERSIONS)
        for tenant in others
        for first in range(0, other_subjects, BATCH)
    ]
    n_main = versions * ((subjects + BATCH - 1) // BATCH)
    other_every = max(1, n_main // max(1, len(other_queue)))
    print(
        f"loading {agent.name}: {subjects:,} people x {versions} versions in batches of {BATCH}, "
        f"plus {OTHER_AGENTS} other agents x {other_subjects:,} x {OTHER_VERSIONS} interleaved"
    )
    times: dict[int, list[float]] = {k: [] for k in range(versions)}
    t_start = time.perf_counter()
    done = 0
    for k in range(versions):
        for first in range(0, subjects, BATCH):
            claims = version_claims(range(first, min(subjects, first + BATCH)), k, rng)
            t0 = time.perf_counter()
            applied = facts_assert(agent=agent, claims=claims)
            times[k].append(time.perf_counter() - t0)
            if k > 0 and first == 0:  # the write path really superseded
                assert all(a.outcome == "created" and a.superseded for a in applied), applied[0]
            done += 1
            if other_queue and done % other_every == 0:
                tenant, i_range, ok = other_queue.pop(0)
                facts_assert(agent=tenant, claims=version_claims(i_range, ok, rng))
            if done % 25 == 0:
                sup = [t for kk in range(1, k + 1) for t in times[kk]]
                rate = f"{len(sup) * BATCH / sum(sup):,.0f} facts/s superseding" if sup else ""
                first_rate = len(times[0]) * BATCH / sum(times[0])
                print(
                    f"  round {k}/{versions - 1} batch {done}/{n_main}: first versions "
                    f"{first_rate:,.0f} facts/s {rate}; {time.perf_counter() - t_start:,.0f} s, "
                    f"{load_average()}",
                    flush=True,
                )
    for tenant, i_range, ok in other_queue:
        facts_assert(agent=tenant, claims=version_claims(i_range, ok, rng))
    t0 = time.perf_counter()
    relations = relation_batches(subjects)
    for claims in relations:
        facts_assert(agent=agent, claims=claims)
    relations_s = time.perf_counter() - t0
    wall = time.perf_counter() - t_start
    sup = [t for kk in range(1, versions) for t in times[kk]]
    report = {
        "complete": True,
        "subjects": subjects,
        "versions": versions,
        "loaded_on": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "wall_s": round(wall, 1),
        "first_round": {
            "facts": subjects,
            "seconds": round(sum(times[0]), 1),
            "facts_per_s": round(subjects / sum(times[0])),
            "batch": summary_ms_p95(times[0]),
        },
        "supersede_rounds": {
            "facts": subjects * (versions - 1),
            "seconds": round(sum(sup), 1),
            "facts_per_s": round(subjects * (versions - 1) / sum(sup)) if sup else None,
            "batch": summary_ms_p95(sup) if sup else None,
        },
        "facts_per_s_by_round": [round(len(t) * BATCH / sum(t)) for t in times.values()],
        "load_average_after": load_average(),
        "relations": {"facts": sum(len(b) for b in relations), "seconds": round(relations_s, 1)},
        "other_agents": [a.name for a in others],
    }
    agent = agent_update(
        agent=agent, description=json.dumps({"facts_bench": report}), is_active=True
    )
    return agent, report


class _PreloadFrom:
    """PROPOSED, not shipped: Store.preload reads only the open versions a batch
    can touch — those still valid at the batch's earliest valid_from — instead of
    every open version of each pair (its whole valid-time history: 10 rows a pair
    here). Patched in for the `proposed` supersede measurement only; correct for
    batches whose claims all start at or after `since`, as these do."""

    def __init__(self, since: datetime):
        self.since = since

    def __enter__(self):
        from django.db.models import Q

        from facts import projection
        from facts.models import Fact

        self.original = projection.Store.preload
        since = self.since

        def preload(store, agent_id, pairs):
            wanted = {(agent_id, s, p) for s, p in pairs} - store.pairs.keys()
            if not wanted:
                return
            for key in wanted:
                store.pairs[key] = projection.PairState()
            rows = (
                Fact.objects.filter(
                    agent_id=agent_id,
                    subject_id__in={s for _, s, _ in wanted},
                    predicate_id__in={p for _, _, p in wanted},
                    status__in=projection.OPEN_STATUSES,
                    superseded_at__isnull=True,
                )
                .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=since))
                .order_by("valid_from", "recorded_at", "id")
            )
            for fact in rows:
                key = (agent_id, fact.subject_id, fact.predicate_id)
                if key in wanted:
                    store._remember(key, fact)

        projection.Store.preload = preload
        return self

    def __exit__(self, *exc):
        from facts import projection

        projection.Store.preload = self.original


def supersede_sample(agent, subjects: int, versions: int, batches: int, proposed=False) -> None:
    """Batch assert with supersession at full size, without changing the data:
    each batch asserts one more version for 1,000 consecutive people (a random
    slice) through facts_assert, inside a transaction that is then rolled back.
    Everything but the commit is measured; the bench agent keeps its 10 versions."""
    import contextlib

    from django.db import transaction

    from facts.services import facts_assert

    rng = random.Random(int(time.time()))
    times = []
    for _ in range(batches):
        first = rng.randrange(0, subjects // BATCH) * BATCH
        claims = version_claims(range(first, first + BATCH), versions, rng)
        since = min(c.valid_from for c in claims)
        with (
            _PreloadFrom(since) if proposed else contextlib.nullcontext(),
            transaction.atomic(),
        ):
            t0 = time.perf_counter()
            applied = facts_assert(agent=agent, claims=claims)
            times.append(time.perf_counter() - t0)
            assert all(a.outcome == "created" and len(a.superseded) == 1 for a in applied)
            transaction.set_rollback(True)
    s = summary_ms_p95(times)
    print(
        f"{'PROPOSED (preload from the batch start) ' if proposed else ''}"
        f"batch assert with supersession at full size (rolled back): {batches * BATCH:,} facts, "
        f"{batches * BATCH / sum(times):,.0f} facts/s; batch of {BATCH} p50 {s['p50_ms']} / "
        f"p90 {s['p90_ms']} / p95 {s['p95_ms']} / p99 {s['p99_ms']} ms; {load_average()}",
        flush=True,
    )


def vacuum_analyze() -> float:
    """What autovacuum would do after a bulk load; measured reads should see a settled table."""
    from django.db import connection

    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        for table in ("facts_fact", "facts_factevidence", "facts_entity", "facts_entityalias"):
            cursor.execute(f"VACUUM (ANALYZE) {table}")
    return time.perf_counter() - t0


def table_sizes(agent) -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT (SELECT count(*) FROM facts_fact),
                   (SELECT count(*) FROM facts_fact WHERE agent_id = %s),
                   (SELECT count(*) FROM facts_fact WHERE agent_id = %s
                       AND status = 'active' AND superseded_at IS NULL),
                   (SELECT count(DISTINCT agent_id) FROM facts_fact),
                   (SELECT count(*) FROM facts_factevidence),
                   (SELECT count(*) FROM facts_entity),
                   (SELECT count(*) FROM ledger_event),
                   pg_size_pretty(pg_table_size('facts_fact')),
                   pg_size_pretty(pg_indexes_size('facts_fact'))
            """,
            [agent.pk, agent.pk],
        )
        row = cursor.fetchone()
    keys = (
        "facts_rows",
        "bench_agent_rows",
        "bench_agent_believed",
        "agents_with_facts",
        "evidence_rows",
        "entities",
        "ledger_rows",
        "facts_heap",
        "facts_indexes",
    )
    return dict(zip(keys, row, strict=True))


# ----------------------------------------------------------------------- the reads


def expected_version(i: int, versions: int, at: datetime) -> int:
    return max(k for k in range(versions) if valid_from(i, k) <= at)


def lookup_current(agent, ref: str, predicate: str) -> list:
    """What GET /facts/current?subject=…&predicate=… runs (facts/apis.py)."""
    from facts.selectors import facts_valid_at_by_ref

    return facts_valid_at_by_ref(agent=agent, subject_ref=ref, predicate_name=predicate)[2]


def lookup_as_of(agent, ref: str, predicate: str, at: datetime) -> list:
    """What GET /facts/as_of?subject=…&predicate=…&valid_time=… runs."""
    from facts.selectors import facts_valid_at_by_ref

    return facts_valid_at_by_ref(
        agent=agent, subject_ref=ref, predicate_name=predicate, valid_time=at
    )[2]


def entity_resolve_lower(agent, ref: str):
    """PROPOSED, not shipped: entity_resolve by name through the (agent, lower(alias))
    unique index. `alias__iexact` compiles to UPPER(alias) = UPPER(%s), which no index
    serves, so today every lookup by name scans all of the agent's aliases."""
    from django.db.models import Value
    from django.db.models.functions import Lower

    from facts.models import EntityAlias

    alias = (
        EntityAlias.objects.annotate(lowered=Lower("alias"))
        .filter(agent=agent, lowered=Lower(Value(ref)))
        .select_related("entity")
        .first()
    )
    return alias.entity


def lookup_current_proposed(agent, ref: str, predicate: str) -> list:
    from facts.selectors import facts_current, predicate_get

    subject = entity_resolve_lower(agent, ref)
    pred = predicate_get(agent=agent, name=predicate)
    return list(facts_current(agent=agent, subject=subject, predicate=pred))


def lookup_as_of_proposed(agent, ref: str, predicate: str, at: datetime) -> list:
    from facts.selectors import facts_as_of, predicate_get

    subject = entity_resolve_lower(agent, ref)
    pred = predicate_get(agent=agent, name=predicate)
    return list(facts_as_of(agent=agent, subject=subject, predicate=pred, valid_time=at))


_SQL: dict[bool, tuple] = {}


def _current_sql(by_id: bool) -> tuple:
    """One statement for the current lookup: the fact with its subject, predicate,
    object entity, claim event (payload left out, as _with_status defers it) and
    open contests, subject resolved by id or through the (agent, lower(alias)) index."""
    if by_id not in _SQL:
        from facts.models import Entity, Fact, Predicate
        from ledger.models import Event

        parts = [
            (Fact, "f", ()),
            (Entity, "s", ()),
            (Predicate, "p", ()),
            (Entity, "o", ()),
            (Event, "e", ("payload",)),
        ]
        layout, columns = [], []
        for model, alias, skip in parts:
            fields = [f for f in model._meta.concrete_fields if f.attname not in skip]
            layout.append((model, [f.attname for f in fields], fields))
            columns += [f'{alias}."{f.column}"' for f in fields]
        subject = (
            "%(ref)s::uuid"
            if by_id
            else "(SELECT a.entity_id FROM facts_entityalias a "
            "WHERE a.agent_id = %(agent)s AND lower(a.alias) = lower(%(ref)s))"
        )
        sql = f"""
            SELECT {", ".join(columns)},
                   ARRAY(SELECT c.id FROM facts_fact c
                          WHERE c.contests_id = f.id AND c.status = 'contested'
                            AND c.superseded_at IS NULL ORDER BY c.recorded_at) AS open_contests
              FROM facts_fact f
              JOIN facts_predicate p ON p.id = f.predicate_id
              JOIN facts_entity s ON s.id = f.subject_id
              JOIN ledger_event e ON e.id = f.source_event_id
              LEFT JOIN facts_entity o ON o.id = f.object_entity_id
             WHERE f.agent_id = %(agent)s AND f.subject_id = {subject}
               AND p.agent_id = %(agent)s AND p.name = %(predicate)s
               AND f.status = 'active' AND f.superseded_at IS NULL
               AND f.valid_from <= %(at)s AND (f.valid_to IS NULL OR f.valid_to > %(at)s)
             ORDER BY f.valid_from
        """
        _SQL[by_id] = (sql, layout)
    return _SQL[by_id]


def lookup_current_sql(
    agent, ref: str, predicate: str, at: datetime | None = None, prepared: bool = True
) -> list:
    """PROPOSED, not shipped: facts_current as one SQL statement (no ORM compile,
    one round trip), run through a server-side-binding psycopg cursor so the
    statement is prepared once per connection and not planned again. Builds the
    same objects the serializer reads (select_related caches, open_contests)."""
    import psycopg
    from django.db import connection

    from facts.models import Fact

    try:
        uuid.UUID(ref)
        by_id = True
    except ValueError:
        by_id = False
    sql, layout = _current_sql(by_id)
    params = {"agent": agent.pk, "ref": ref, "predicate": predicate, "at": at or datetime.now(UTC)}
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=prepared)
        rows = cursor.fetchall()
    facts = []
    for row in rows:
        objects, at = [], 0
        for model, names, fields in layout:
            values = list(row[at : at + len(names)])
            at += len(names)
            for n, field in enumerate(fields):
                if values[n] is not None and hasattr(field, "from_db_value"):
                    values[n] = field.from_db_value(values[n], None, connection)
            objects.append(None if values[0] is None else model.from_db("default", names, values))
        fact, subject, pred, obj, event = objects
        Fact.subject.field.set_cached_value(fact, subject)
        Fact.predicate.field.set_cached_value(fact, pred)
        Fact.object_entity.field.set_cached_value(fact, obj)
        Fact.source_event.field.set_cached_value(fact, event)
        fact.open_contests = [Fact(id=c, contests_id=fact.pk) for c in row[at]]
        facts.append(fact)
    if facts or at is not None:
        return facts
    return lookup_current_proposed(agent, ref, predicate)  # to raise the right 404


def paths_free(agent, ref: str) -> list:
    from facts.selectors import entity_resolve, graph_paths

    start = entity_resolve(agent=agent, ref=ref)
    return graph_paths(agent=agent, start=start, max_hops=3)


def paths_free_proposed(agent, ref: str) -> list:
    from facts.selectors import graph_paths

    return graph_paths(agent=agent, start=entity_resolve_lower(agent, ref), max_hops=3)


def paths_typed(agent, ref: str) -> list:
    from facts.selectors import entity_resolve, graph_paths, predicate_get

    start = entity_resolve(agent=agent, ref=ref)
    preds = [predicate_get(agent=agent, name=n) for n in ("works_at", "located_in", "in_country")]
    return graph_paths(agent=agent, start=start, predicates=preds)


def timed(fn, cases, warmup: int):
    for case in cases[:warmup]:
        fn(*case)
    samples, results = [], []
    for case in cases[warmup:]:
        t0 = time.perf_counter()
        result = fn(*case)
        samples.append(time.perf_counter() - t0)
        results.append(result)
    return samples, results


def report_line(label: str, samples: list[float]) -> dict:
    s = summary_ms_p95(samples)
    print(
        f"{label}: p50 {s['p50_ms']} / p90 {s['p90_ms']} / p95 {s['p95_ms']} / p99 {s['p99_ms']} ms "
        f"(mean {s['mean_ms']}, n={s['n']}); {load_average()}",
        flush=True,
    )
    return s


def measure_in_process(agent, subjects, versions, samples, warmup, parts) -> None:
    from facts.models import Entity

    rng = random.Random(11)
    now = datetime.now(UTC)
    n = samples + warmup
    people = [rng.randrange(subjects) for _ in range(n)]

    def check_current(i, rows):
        assert len(rows) == 1 and rows[0].object_value == value(i, versions - 1), (i, rows)

    if "current" in parts:
        cases = [(agent, person(i), predicate_of(i)[0]) for i in people]
        s, res = timed(lookup_current, cases, warmup)
        report_line("current, subject by name (in-process)", s)
        for i, rows in zip(people[warmup:], res, strict=True):
            check_current(i, rows)
        ids = {
            name: str(pk)
            for name, pk in Entity.objects.filter(
                agent=agent, name__in=[person(i) for i in people]
            ).values_list("name", "id")
        }
        cases = [(agent, ids[person(i)], predicate_of(i)[0]) for i in people]
        s, res = timed(lookup_current, cases, warmup)
        report_line("current, subject by id   (in-process)", s)
        for i, rows in zip(people[warmup:], res, strict=True):
            check_current(i, rows)

    if "proposed" in parts:
        cases = [(agent, person(i), predicate_of(i)[0]) for i in people]
        s, res = timed(lookup_current_proposed, cases, warmup)
        report_line("PROPOSED current, subject by name via lower(alias) index (in-process)", s)
        for i, rows in zip(people[warmup:], res, strict=True):
            check_current(i, rows)
        s, res = timed(lookup_current_sql, cases, warmup)
        report_line("PROPOSED current, one prepared SQL statement (in-process)", s)
        for i, rows in zip(people[warmup:], res, strict=True):
            check_current(i, rows)
            assert rows[0].subject.name == person(i) and rows[0].source_event.authority

    if "as_of" in parts:
        moments = []
        for i in people:
            start = valid_from(i, 0)
            moments.append(start + (now - start) * rng.random())
        cases = [
            (agent, person(i), predicate_of(i)[0], at)
            for i, at in zip(people, moments, strict=True)
        ]
        s, res = timed(lookup_as_of, cases, warmup)
        report_line("as_of, random time in the subject's history (in-process)", s)
        for (_, _, _, at), i, rows in zip(cases[warmup:], people[warmup:], res, strict=True):
            k = expected_version(i, versions, at)
            assert len(rows) == 1 and rows[0].object_value == value(i, k), (i, at, rows)
        if "proposed" in parts:
            for label, fn in (
                ("PROPOSED as_of via lower(alias) index", lookup_as_of_proposed),
                ("PROPOSED as_of, one prepared SQL statement", lookup_current_sql),
            ):
                s, res = timed(fn, cases, warmup)
                report_line(f"{label} (in-process)", s)
                for (_, _, _, at), i, rows in zip(
                    cases[warmup:], people[warmup:], res, strict=True
                ):
                    k = expected_version(i, versions, at)
                    assert len(rows) == 1 and rows[0].object_value == value(i, k), (i, at, rows)

    if "graph" in parts:
        workers = [rng.randrange(0, subjects, RELATION_EVERY) for _ in range(n)]
        cases = [(agent, person(i)) for i in workers]
        s, res = timed(paths_free, cases, warmup)
        report_line("graph_paths max_hops=3, any predicates (in-process)", s)
        for i, paths in zip(workers[warmup:], res, strict=True):
            assert [len(p.facts) for p in paths] == [1, 2, 3], (i, paths)
            assert paths[-1].entities[1].name == org(org_of(i))
        s, res = timed(paths_typed, cases, warmup)
        report_line("graph_paths works_at/located_in/in_country (in-process)", s)
        for i, paths in zip(workers[warmup:], res, strict=True):
            assert len(paths) == 1 and len(paths[0].facts) == 3, (i, paths)
        if "proposed" in parts:
            s, res = timed(paths_free_proposed, cases, warmup)
            report_line("PROPOSED graph_paths max_hops=3, start via lower(alias) (in-process)", s)
            for i, paths in zip(workers[warmup:], res, strict=True):
                assert [len(p.facts) for p in paths] == [1, 2, 3], (i, paths)


def explain(agent, subjects, versions) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) every statement the current, as_of and path lookups send."""
    from django.db import connection

    rng = random.Random(5)
    i = rng.randrange(subjects)
    w = rng.randrange(0, subjects, RELATION_EVERY)
    at = valid_from(i, 4) + timedelta(days=3)
    calls = [
        ("current", lambda: lookup_current(agent, person(i), predicate_of(i)[0])),
        ("as_of", lambda: lookup_as_of(agent, person(i), predicate_of(i)[0], at)),
        ("graph_paths max_hops=3", lambda: paths_free(agent, person(w))),
        (
            "PROPOSED current via lower(alias)",
            lambda: lookup_current_proposed(agent, person(i), predicate_of(i)[0]),
        ),
    ]
    for label, call in calls:
        call()  # warm
        captured: list[tuple[str, object]] = []

        def capture(execute, sql, params, many, context, captured=captured):
            captured.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(capture):
            call()
        print(f"\n=== EXPLAIN (ANALYZE, BUFFERS): {label} — {len(captured)} statements ===")
        for sql, params in captured:
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
                plan = [row[0] for row in cursor.fetchall()]
            print(f"--- {' '.join(sql.split())[:160]}")
            print("\n".join(plan))


def profile(agent, subjects, versions) -> None:
    """Where a current lookup's time goes once the alias scan is out of the way
    (subject by id, the shipped code path)."""
    from facts.models import Entity

    rng = random.Random(13)
    people = [rng.randrange(subjects) for _ in range(2000)]
    ids = dict(
        Entity.objects.filter(agent=agent, name__in=[person(i) for i in people]).values_list(
            "name", "id"
        )
    )
    cases = [(agent, str(ids[person(i)]), predicate_of(i)[0]) for i in people]
    for case in cases[:200]:
        lookup_current(*case)
    profiler = cProfile.Profile()
    profiler.enable()
    for case in cases[200:]:
        lookup_current(*case)
    profiler.disable()
    print("\n=== cProfile: 1,800 current lookups by id, by cumulative time ===")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    print("=== by own time ===")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


def measure_http(agent, subjects, versions, samples, warmup, port) -> None:
    from facts.models import Entity
    from piper.tenancy.models import MAX_RATE_PER_MINUTE
    from piper.tenancy.services import api_key_create

    _, key = api_key_create(
        agent=agent,
        name=f"bench-{int(time.time())}",
        scopes=["read"],
        rate_per_minute=MAX_RATE_PER_MINUTE,
    )
    rng = random.Random(17)
    people = [rng.randrange(subjects) for _ in range(samples + warmup)]
    headers = {"Authorization": f"Bearer {key}"}
    with (
        gunicorn(port) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=30) as http,
    ):
        probe = http.get(
            "/api/v1/facts/current", params={"subject": person(0), "predicate": predicate_of(0)[0]}
        )
        if probe.status_code != 200:
            print(
                f"GET /api/v1/facts/current answers {probe.status_code}: {probe.text[:300]}\n"
                "-> the facts API is not there yet: HTTP not measured"
            )
            return
        print(f"probe answer: {probe.text[:600]}")
        ids = dict(
            Entity.objects.filter(agent=agent, name__in=[person(i) for i in people]).values_list(
                "name", "id"
            )
        )
        for label, ref in (("name", person), ("id", lambda i: str(ids[person(i)]))):
            latencies = []
            for n, i in enumerate(people):
                params = {"subject": ref(i), "predicate": predicate_of(i)[0]}
                t0 = time.perf_counter()
                response = http.get("/api/v1/facts/current", params=params)
                elapsed = time.perf_counter() - t0
                assert response.status_code == 200, response.text
                if n >= warmup:
                    latencies.append(elapsed)
                    body = response.json()
                    values = [f.get("value") for f in body.get("facts", [])]
                    assert values == [value(i, versions - 1)], response.text
            report_line(
                f"GET /api/v1/facts/current?subject=<{label}>&predicate=… (gunicorn 2x4)",
                latencies,
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subjects", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--reload", action="store_true", help="load a new bench agent")
    parser.add_argument("--samples", type=int, default=3000, help="timed lookups per measurement")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument(
        "--only",
        default="supersede,current,as_of,graph,http,explain",
        help="comma-separated measurements (supersede, current, as_of, graph, http, explain; "
        "proposed: the same lookups with the entity_resolve fix this script proposes)",
    )
    parser.add_argument(
        "--supersede-batches",
        type=int,
        default=60,
        help="rolled-back batches of one more version each, for the supersede measurement",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the current lookup")
    parser.add_argument("--port", type=int, default=8313)
    args = parser.parse_args()
    parts = set(args.only.split(",")) if args.only else set()

    setup_django()
    from django.db import connection

    if "facts_fact" not in connection.introspection.table_names():
        migrate()
    print(f"machine: {machine()}; commit {git_commit()}; {load_average()}")
    agent, report = (None, None) if args.reload else find_loaded_agent(args.subjects, args.versions)
    if agent is None:
        migrate()  # a load brings the schema up to date; reads alone leave it as it is
        agent, report = load(args.subjects, args.versions)
        print(f"VACUUM ANALYZE after the load: {vacuum_analyze():.1f} s")
    else:
        print(f"reusing {agent.name} (loaded {report['loaded_on']}; --reload to load again)")
    first, sup = report["first_round"], report["supersede_rounds"]
    print(
        f"load: first versions (creating {first['facts']:,} people) {first['facts_per_s']:,} facts/s; "
        f"supersession rounds {sup['facts']:,} facts in {sup['seconds']:,} s = "
        f"{sup['facts_per_s']:,} facts/s, batch of {BATCH} {sup['batch']}; "
        f"relations {report['relations']}; wall {report['wall_s']:,} s; commit {report['commit']}"
    )
    if "facts_per_s_by_round" in report:
        print(
            f"load: facts/s by round {report['facts_per_s_by_round']}; "
            f"{report['load_average_after']} when it ended"
        )
    print(f"tables: {table_sizes(agent)}")
    if "supersede" in parts:
        supersede_sample(agent, args.subjects, args.versions, args.supersede_batches)
        if "proposed" in parts:
            supersede_sample(
                agent, args.subjects, args.versions, args.supersede_batches, proposed=True
            )
    measure_in_process(agent, args.subjects, args.versions, args.samples, args.warmup, parts)
    if "explain" in parts:
        explain(agent, args.subjects, args.versions)
    if args.profile:
        profile(agent, args.subjects, args.versions)
    if "http" in parts:
        measure_http(agent, args.subjects, args.versions, args.samples, args.warmup, args.port)
    print(f"done; {load_average()}")


if __name__ == "__main__":
    main()
