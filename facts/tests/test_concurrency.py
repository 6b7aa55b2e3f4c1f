"""Concurrent writers of one fact: they serialise, never overlap, never fail.

These tests commit (transaction=True) and write from real threads, each with
its own database connection (closed when the thread ends), as separate web or
worker processes would.
"""

import random
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from facts import selectors
from facts.models import Entity, Fact, FactStatus, Predicate
from facts.services import ClaimInput, entity_create, fact_retract, facts_assert
from facts.tests.factories import PredicateFactory, at, claim
from ledger.models import Event
from ledger.selectors import chain_verify
from piper.errors import Conflict
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db(transaction=True)

WRITERS = 50


def in_thread(fn):
    """Run fn with its own connection, closed afterwards so the test database can be flushed."""

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return run


def race(writers: int, write) -> list[str | None]:
    """Start `writers` threads at once; each runs write(i). Returns, per writer,
    None or the traceback of what it raised."""
    start = threading.Barrier(writers)

    @in_thread
    def run(i):
        start.wait(timeout=60)
        try:
            write(i)
            return None
        except Exception:
            return traceback.format_exc(limit=3)

    with ThreadPoolExecutor(writers) as pool:
        return list(pool.map(run, range(writers)))


def check_truth_model(agent, subject, predicate) -> list[Fact]:
    """What must hold after any interleaving; returns the versions."""
    versions = list(Fact.objects.filter(agent=agent, subject=subject, predicate=predicate))
    by_id = {f.pk: f for f in versions}
    believed = sorted(
        (f for f in versions if f.status == FactStatus.ACTIVE and f.superseded_at is None),
        key=lambda f: f.valid_from,
    )
    # Believed versions never overlap in valid time …
    for earlier, later in zip(believed, believed[1:], strict=False):
        assert earlier.valid_to is not None and earlier.valid_to <= later.valid_from
    # … and exactly one is believed now.
    now = timezone.now()
    assert len(selectors.facts_current(agent=agent, subject=subject, predicate=predicate)) == 1
    assert (
        sum(f.valid_from <= now and (f.valid_to is None or f.valid_to > now) for f in believed) == 1
    )
    # No two versions were ever believed at the same record time for the same valid time.
    held = [f for f in versions if f.status != FactStatus.CONTESTED]
    for n, a in enumerate(held):
        for b in held[n + 1 :]:
            record_overlap = (a.superseded_at is None or b.recorded_at < a.superseded_at) and (
                b.superseded_at is None or a.recorded_at < b.superseded_at
            )
            valid_overlap = (a.valid_to is None or b.valid_from < a.valid_to) and (
                b.valid_to is None or a.valid_from < b.valid_to
            )
            assert not (record_overlap and valid_overlap), (a, b)
    # Every closed version names the version that replaced it, recorded when it closed.
    for fact in versions:
        if fact.status == FactStatus.SUPERSEDED:
            successor = by_id[fact.superseded_by_id]
            assert successor.recorded_at == fact.superseded_at >= fact.recorded_at
    return versions


@pytest.fixture
def one_fact():
    agent = AgentFactory()
    claim(agent, "Alice", "status", "v0", at(2020))
    return (
        agent,
        Entity.objects.get(agent=agent, name="Alice"),
        Predicate.objects.get(agent=agent, name="status"),
    )


def test_concurrent_writers_never_break_the_truth_model(one_fact):
    """Whatever each writer got back, the stored state is consistent."""
    agent, alice, status = one_fact
    moments = [at(2020) + timedelta(days=random.randrange(3000)) for _ in range(WRITERS)]
    outcomes = race(WRITERS, lambda i: claim(agent, alice, status, f"v{i + 1}", moments[i]))
    check_truth_model(agent, alice, status)
    succeeded = sum(outcome is None for outcome in outcomes)
    assert Event.objects.filter(agent=agent, event_type="facts.asserted").count() == 1 + succeeded
    assert chain_verify(agent=agent).ok


def test_fifty_writers_from_the_same_instant_one_linear_chain(one_fact):
    agent, alice, status = one_fact
    outcomes = race(WRITERS, lambda i: claim(agent, alice, status, f"v{i + 1}", at(2020)))
    assert [o for o in outcomes if o] == []
    versions = sorted(check_truth_model(agent, alice, status), key=lambda f: f.recorded_at)
    # Each write replaced the whole of the one before: a line of 51 versions.
    assert len(versions) == WRITERS + 1
    assert [f.status for f in versions] == ["superseded"] * WRITERS + ["active"]
    assert [f.superseded_by_id for f in versions[:-1]] == [f.pk for f in versions[1:]]
    assert [f.supersedes_id for f in versions[1:]] == [f.pk for f in versions[:-1]]
    assert sorted(f.object_value for f in versions) == sorted(f"v{i}" for i in range(WRITERS + 1))
    assert Event.objects.filter(agent=agent, event_type="facts.asserted").count() == WRITERS + 1


def test_fifty_writers_from_random_instants_all_succeed(one_fact):
    agent, alice, status = one_fact
    moments = [at(2020) + timedelta(days=random.randrange(3000)) for _ in range(WRITERS)]
    outcomes = race(WRITERS, lambda i: claim(agent, alice, status, f"v{i + 1}", moments[i]))
    assert [o for o in outcomes if o] == []
    check_truth_model(agent, alice, status)
    assert Event.objects.filter(agent=agent, event_type="facts.asserted").count() == WRITERS + 1
    # Current is the version valid now: the latest start that is not in the future.
    latest = max(m for m in [at(2020), *moments] if m <= timezone.now())
    (now,) = selectors.facts_current(agent=agent, subject=alice, predicate=status)
    assert now.valid_from == latest


def test_a_writer_whose_transaction_began_earlier_still_supersedes(one_fact):
    agent, alice, status = one_fact
    began, other_done = threading.Event(), threading.Event()

    @in_thread
    def early():
        with transaction.atomic():
            Fact.objects.count()  # the transaction (and its now()) starts here
            began.set()
            assert other_done.wait(10)
            claim(agent, alice, status, "early", at(2021))

    @in_thread
    def late():
        assert began.wait(10)
        claim(agent, alice, status, "late", at(2022))
        other_done.set()

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.submit(early), pool.submit(late)
        second.result(timeout=20)
        first.result(timeout=20)
    assert [
        f.object_value
        for f in Fact.objects.filter(agent=agent, superseded_at__isnull=True).order_by("valid_from")
    ] == ["v0", "early", "late"]


def test_concurrent_claims_naming_one_new_entity_make_one_entity():
    agent = AgentFactory()
    PredicateFactory(agent=agent, name="status", cardinality="many")
    outcomes = race(20, lambda i: claim(agent, "NewCo", "status", f"v{i}", at(2020)))
    assert [o for o in outcomes if o] == []
    newco = Entity.objects.get(agent=agent, name="NewCo")
    assert Fact.objects.filter(agent=agent, subject=newco).count() == 20
    assert Event.objects.filter(agent=agent, event_type="facts.entity_created").count() == 1


def test_concurrent_entity_creates_of_one_name_make_one_entity():
    agent = AgentFactory()
    results = []

    def create(i):
        try:
            results.append(entity_create(agent=agent, name="newco" if i % 2 else "NewCo").pk)
        except Conflict as conflict:
            results.append(conflict.code)

    assert [o for o in race(20, create) if o] == []
    entity = Entity.objects.get(agent=agent)
    assert sorted(map(str, results)) == sorted([str(entity.pk)] + ["alias_taken"] * 19)


def test_concurrent_first_use_of_a_predicate_makes_one_predicate():
    agent = AgentFactory()
    outcomes = race(20, lambda i: claim(agent, f"Subject {i}", "brand_new", i, at(2020)))
    assert [o for o in outcomes if o] == []
    assert Predicate.objects.filter(agent=agent, name="brand_new").count() == 1
    assert Fact.objects.filter(agent=agent).count() == 20


def test_concurrent_retractions_of_one_version_retract_it_once(one_fact):
    agent, alice, status = one_fact
    (version,) = Fact.objects.filter(agent=agent)
    results = []

    def retract(i):
        try:
            results.append(fact_retract(agent=agent, fact_id=version.pk, reason=f"#{i}").outcome)
        except Conflict as conflict:
            results.append(conflict.code)

    assert [o for o in race(10, retract) if o] == []
    assert sorted(results) == ["not_current"] * 9 + ["retracted"]
    assert Event.objects.filter(agent=agent, event_type="facts.retracted").count() == 1
    assert Fact.objects.get(pk=version.pk).status == "retracted"


def test_batches_locking_the_same_pairs_in_opposite_orders_do_not_deadlock():
    agent = AgentFactory()
    PredicateFactory(agent=agent, name="seen", cardinality="many")
    for name in ("Ann", "Ben", "Cat"):
        claim(agent, name, "seen", "first", at(2020))

    def batch(i):
        names = ["Ann", "Ben", "Cat"] if i % 2 else ["Cat", "Ben", "Ann"]
        for round_ in range(5):
            facts_assert(
                agent=agent,
                claims=[
                    ClaimInput(
                        subject=n, predicate="seen", value=f"{i}-{round_}", valid_from=at(2021)
                    )
                    for n in names
                ],
            )

    assert [o for o in race(6, batch) if o] == []
    assert Fact.objects.filter(agent=agent).count() == 3 + 6 * 5 * 3
    assert chain_verify(agent=agent).ok


def test_first_writers_of_a_new_fact_inside_a_request_transaction_do_not_deadlock():
    """The API runs each write inside its request's transaction, so the retry
    after meeting another writer's new entity or predicate is a savepoint in
    a transaction that already held the agent's chain. Writers queued on that
    chain stay queued until the whole transaction ends; when the retry then
    waited for a pair lock one of them held, PostgreSQL broke a deadlock —
    9 of 10 such writers failed (4 to 8 of 50 answered 500 through HTTP,
    scripts/chaos/test_short_forms.py). The chain is now locked before the pairs."""
    agent = AgentFactory()

    def write(i):
        for n in range(3):
            with transaction.atomic():  # a caller's transaction: the rerun is a savepoint of it
                claim(agent, "Storm", "storm.value", f"v{i}-{n}")

    outcomes = race(10, write)

    assert [o for o in outcomes if o] == []
    storm = Entity.objects.get(agent=agent, name="Storm")
    value = Predicate.objects.get(agent=agent, name="storm.value")
    versions = check_truth_model(agent, storm, value)
    assert sum(f.origin == "asserted" for f in versions) == 30
    assert chain_verify(agent=agent).ok
