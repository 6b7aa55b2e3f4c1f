"""Concurrent appends: one chain per agent stays contiguous; agents do not wait for each other.

These tests commit (transaction=True) and write from threads, each with its own
database connection, as separate web or worker processes would.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from ledger.models import Event, Source
from ledger.selectors import chain_verify
from ledger.services import EventDraft, event_append, events_append, source_register
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db(transaction=True)


def in_thread(fn):
    """Run fn with its own connection, closed afterwards so the test database can be flushed."""

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return run


def test_concurrent_appends_to_one_agent_make_one_contiguous_chain():
    agent = AgentFactory()
    start = threading.Barrier(2)

    @in_thread
    def writer(name):
        start.wait()
        for i in range(25):
            drafts = [
                EventDraft(event_type="a.b", actor=name, payload={"i": i, "j": j}) for j in range(2)
            ]
            events_append(agent=agent, drafts=drafts)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(writer, ["left", "right"]))

    seqs = list(Event.objects.filter(agent=agent).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 101))
    actors = Event.objects.filter(agent=agent).values_list("actor", flat=True)
    assert sorted(set(actors)) == ["left", "right"]
    report = chain_verify(agent=agent)
    assert (report.ok, report.events_checked) == (True, 100)


def test_an_open_append_blocks_its_own_agent_but_not_another():
    busy, other = AgentFactory(), AgentFactory()
    event_append(agent=busy, event_type="a.first")
    locked, release = threading.Event(), threading.Event()

    @in_thread
    def slow_writer():
        with transaction.atomic():
            event_append(agent=busy, event_type="a.slow")
            locked.set()
            assert release.wait(10)

    @in_thread
    def writer(agent):
        return event_append(agent=agent, event_type="a.quick").seq

    with ThreadPoolExecutor(3) as pool:
        slow = pool.submit(slow_writer)
        assert locked.wait(10)
        # Another agent's append finishes while the first transaction is still open …
        assert pool.submit(writer, other).result(timeout=5) == 1
        # … the same agent's append waits for it, then follows it in the chain.
        same = pool.submit(writer, busy)
        with pytest.raises(TimeoutError):
            same.result(timeout=0.5)
        release.set()
        slow.result(timeout=10)
        assert same.result(timeout=10) == 3

    assert list(
        Event.objects.filter(agent=busy).order_by("seq").values_list("event_type", flat=True)
    ) == [
        "a.first",
        "a.slow",
        "a.quick",
    ]
    assert chain_verify(agent=busy).ok
    assert chain_verify(agent=other).ok


def test_a_rolled_back_append_leaves_no_gap():
    agent = AgentFactory()
    event_append(agent=agent, event_type="a.first")
    with pytest.raises(RuntimeError), transaction.atomic():
        event_append(agent=agent, event_type="a.lost")
        raise RuntimeError("the caller's transaction fails after the append")
    assert event_append(agent=agent, event_type="a.next").seq == 2
    assert chain_verify(agent=agent).ok


def test_concurrent_registrations_of_one_document_make_one_source():
    agent = AgentFactory()
    start = threading.Barrier(2)

    @in_thread
    def register(title):
        start.wait()
        return source_register(agent=agent, title=title, content="the same document")

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(register, ["first", "second"]))

    assert results[0][0].pk == results[1][0].pk
    assert sorted(created for _, created in results) == [False, True]
    assert Source.objects.filter(agent=agent).count() == 1
    # One registration event; a test worker may meanwhile chunk the source and
    # append its own events, so only the registrations are counted.
    assert Event.objects.filter(agent=agent, event_type="source.registered").count() == 1
    assert chain_verify(agent=agent).ok


def test_verifying_a_chain_while_it_grows_reports_no_false_break():
    # The head used to be read after the walk: an append in between made it
    # look like events had been removed (seen in a CI run: a worker chunking a
    # source appended while a test verified the chain).
    agent = AgentFactory()
    event_append(agent=agent, event_type="a.first")
    stop = threading.Event()

    @in_thread
    def writer():
        appended = 0
        while not stop.is_set() and appended < 3000:
            event_append(agent=agent, event_type="a.more")
            appended += 1
        return appended

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(writer)
        try:
            reports = [chain_verify(agent=agent) for _ in range(60)]
        finally:
            stop.set()
        appended = running.result()

    assert appended > 0
    assert [r.first_break for r in reports if not r.ok] == []
    assert chain_verify(agent=agent).ok
