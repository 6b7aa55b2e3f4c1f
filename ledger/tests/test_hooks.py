"""The post-commit hooks: what a listener gets, and when."""

from __future__ import annotations

import pytest
from django.db import transaction

from ledger import hooks
from ledger.services import EventDraft, event_append, events_append
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def received(monkeypatch):
    """Only a recording listener is registered for the test; returns what it got."""
    got: list[hooks.Committed] = []
    monkeypatch.setattr(hooks, "_callbacks", [got.append])
    return got


def test_a_listener_gets_the_agent_the_seq_range_and_each_events_id_and_type(
    received, django_capture_on_commit_callbacks
):
    agent = AgentFactory()
    event_append(agent=agent, event_type="note.first")
    with django_capture_on_commit_callbacks(execute=True):
        events = events_append(
            agent=agent,
            drafts=[
                EventDraft(event_type="note.added"),
                EventDraft(event_type="source.registered"),
                EventDraft(event_type="note.added"),
            ],
        )
        assert received == []  # not before the commit
    assert received == [
        hooks.Committed(
            agent_id=agent.pk,
            first_seq=2,
            last_seq=4,
            events=(
                (events[0].pk, "note.added"),
                (events[1].pk, "source.registered"),
                (events[2].pk, "note.added"),
            ),
        )
    ]
    assert received[0].event_types == frozenset({"note.added", "source.registered"})
    assert received[0].ids_of("note.added") == [events[0].pk, events[2].pk]
    assert received[0].ids_of("facts.asserted") == []


def test_a_rolled_back_append_notifies_no_one(received, django_capture_on_commit_callbacks):
    agent = AgentFactory()
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        event_append(agent=agent, event_type="note.added")
        raise RuntimeError("rolled back")
    assert received == []


def test_a_failing_listener_neither_fails_the_write_nor_stops_the_others(
    monkeypatch, django_capture_on_commit_callbacks
):
    got: list[hooks.Committed] = []

    def failing(committed: hooks.Committed) -> None:
        raise RuntimeError("listener bug")

    monkeypatch.setattr(hooks, "_callbacks", [failing, got.append])
    agent = AgentFactory()
    with django_capture_on_commit_callbacks(execute=True):
        event = event_append(agent=agent, event_type="note.added")
    assert [c.events for c in got] == [((event.pk, "note.added"),)]
