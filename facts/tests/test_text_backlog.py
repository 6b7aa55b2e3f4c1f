"""The fact-text backlog sweep (facts.fact_texts_backlog): the texts a lost task
left missing, stale or without a vector are derived again from PostgreSQL.

In the test settings nobody consumes the Celery queue, so every index and
embed task a commit queues here is as good as lost — what a flushed Redis does.
"""

from __future__ import annotations

import pytest
from django.db import connection

from episodes.tests.factories import HashEmbedder
from facts import fact_texts, tasks
from facts.models import FactText, FactTextCursor
from facts.services import fact_retract
from facts.tests.factories import at, claim
from ledger.models import ChainHead
from piper import embeddings
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

NOTHING = {"agents": 0, "events": 0, "texts_changed": 0, "texts_embedded": 0, "gave_way": 0}


@pytest.fixture(autouse=True)
def hash_embedder(settings, monkeypatch) -> HashEmbedder:
    settings.PIPER_EMBEDDER = "episodes.tests.factories.HashEmbedder"
    monkeypatch.setattr(embeddings, "_singleton", None)
    return embeddings.get_embedder()


def texts(agent) -> dict[str, tuple[str, bool]]:
    return {
        t.subject.name: (t.text, t.embedding is not None)
        for t in FactText.objects.filter(agent=agent).select_related("subject")
    }


def cursor(agent) -> int | None:
    return FactTextCursor.objects.filter(agent=agent).values_list("last_seq", flat=True).first()


def head(agent) -> int:
    return ChainHead.objects.get(agent=agent).last_seq


def test_texts_whose_tasks_were_lost_are_rendered_and_embedded():
    agent = AgentFactory()
    claim(agent, "Alice", "city", "Paris", at(2024))
    claim(agent, "Bob", "city", "Rome", at(2024))
    assert texts(agent) == {}  # the index tasks were queued, and never ran
    # Young events are the tasks' business.
    assert tasks.fact_texts_backlog() == NOTHING
    done = tasks.fact_texts_backlog(grace_seconds=0)
    assert done == {**NOTHING, "agents": 1, "events": head(agent), "texts_changed": 2,
                    "texts_embedded": 2}  # fmt: skip
    assert texts(agent) == {
        "Alice": ("city — Alice: Paris", True),
        "Bob": ("city — Bob: Rome", True),
    }
    assert cursor(agent) == head(agent)
    # Nothing left: a second sweep reads nothing and writes nothing.
    assert tasks.fact_texts_backlog(grace_seconds=0) == NOTHING


def test_a_text_left_stale_by_a_lost_task_is_brought_up_to_date():
    agent = AgentFactory()
    claim(agent, "Alice", "city", "Paris", at(2024))
    oslo = claim(agent, "Bob", "city", "Oslo", at(2024)).fact
    tasks.fact_texts_backlog(grace_seconds=0)
    claim(agent, "Alice", "city", "Berlin", at(2025))
    fact_retract(agent=agent, fact_id=oslo.pk, reason="wrong city")
    claim(agent, "Carol", "city", "Rome", at(2024))
    assert texts(agent) == {
        "Alice": ("city — Alice: Paris", True),
        "Bob": ("city — Bob: Oslo", True),
    }
    done = tasks.fact_texts_backlog(grace_seconds=0)
    assert (done["texts_changed"], done["texts_embedded"]) == (3, 3)
    assert texts(agent) == {
        "Alice": ("city — Alice: Berlin", True),
        "Bob": ("city — Bob", True),  # retracted: the words stay, the value goes
        "Carol": ("city — Carol: Rome", True),
    }
    # Exactly what a full render says now.
    assert fact_texts.fact_texts_refresh(agent_id=agent.pk, embed="never").changed == []


def test_a_text_whose_embed_task_was_lost_is_embedded_once_old_enough():
    agent = AgentFactory()
    claim(agent, "Alice", "city", "Paris", at(2024))
    fact_texts.fact_texts_refresh(agent_id=agent.pk, embed="later")  # its embed task is lost
    FactTextCursor.objects.create(agent=agent, last_seq=head(agent))
    assert texts(agent) == {"Alice": ("city — Alice: Paris", False)}
    assert tasks.fact_texts_backlog()["texts_embedded"] == 0  # rendered just now
    assert tasks.fact_texts_backlog(grace_seconds=0)["texts_embedded"] == 1
    assert texts(agent) == {"Alice": ("city — Alice: Paris", True)}


def test_one_agent_at_a_time_and_within_the_budget():
    mine, theirs = AgentFactory(), AgentFactory()
    claim(mine, "Alice", "city", "Paris", at(2024))
    claim(theirs, "Bob", "city", "Rome", at(2024))
    assert tasks.fact_texts_backlog(agent_id=str(mine.pk), grace_seconds=0)["agents"] == 1
    assert (texts(mine) != {}, texts(theirs), cursor(theirs)) == (True, {}, None)
    assert tasks.fact_texts_backlog(grace_seconds=0, time_budget_seconds=0)["events"] == 0
    assert texts(theirs) == {}
    assert tasks.fact_texts_backlog(grace_seconds=0)["agents"] == 1
    assert texts(theirs) == {"Bob": ("city — Bob: Rome", True)}


def test_steps_through_a_long_ledger_and_never_moves_the_cursor_back(monkeypatch):
    agent = AgentFactory()
    for n in range(5):
        claim(agent, f"Host {n}", "status", "up", at(2024))
    monkeypatch.setattr(fact_texts, "BACKLOG_EVENTS_PER_STEP", 3)
    done = tasks.fact_texts_backlog(grace_seconds=0)
    assert (done["events"], done["texts_changed"], cursor(agent)) == (head(agent), 5, head(agent))
    assert len(texts(agent)) == 5
    # A sweep that read an older cursor (two at once) only ever moves it on.
    with connection.cursor() as c:
        c.execute(
            "INSERT INTO facts_facttextcursor AS c (agent_id, last_seq) VALUES (%s, 1) "
            "ON CONFLICT (agent_id) DO UPDATE SET last_seq = GREATEST(c.last_seq, "
            "EXCLUDED.last_seq)",
            [agent.pk],
        )
    assert cursor(agent) == head(agent)


def test_a_second_sweep_while_one_runs_returns_at_once():
    agent = AgentFactory()
    claim(agent, "Alice", "city", "Paris", at(2024))
    # Another session holds the sweep's lock.
    from django.db import connections

    other = connections.create_connection("default")
    lock = "SELECT pg_advisory_{}(hashtextextended(%s, 0))"
    try:
        with other.cursor() as c:
            c.execute(lock.format("lock"), [fact_texts._BACKLOG_LOCK])
        assert tasks.fact_texts_backlog(grace_seconds=0) == NOTHING
        with other.cursor() as c:  # (a closed session's locks go when its backend exits)
            c.execute(lock.format("unlock"), [fact_texts._BACKLOG_LOCK])
    finally:
        other.close()
    assert tasks.fact_texts_backlog(grace_seconds=0)["texts_changed"] == 1
