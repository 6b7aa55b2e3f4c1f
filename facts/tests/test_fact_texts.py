"""The fact texts and their upkeep (facts/fact_texts.py): each (subject, predicate)
rendered as words, kept in step with the facts after commit."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction

from facts import fact_texts
from facts.fact_texts import fact_texts_refresh, pairs_touched, render
from facts.models import Fact, FactText
from facts.services import (
    entity_alias_add,
    entity_create,
    fact_retract,
    predicate_define,
    rebuild_projection,
)
from facts.tests.factories import at, claim
from ledger.models import Event
from piper.tenancy.tests.factories import AgentFactory


def texts(agent) -> dict[tuple[str, str], str]:
    return {
        (t.subject.name, t.predicate.name): t.text
        for t in FactText.objects.filter(agent=agent).select_related("subject", "predicate")
    }


def last_seq(agent) -> int:
    return Event.objects.filter(agent=agent).order_by("-seq").values_list("seq", flat=True)[0]


@pytest.fixture
def agent(db):
    return AgentFactory()


def test_render_names_predicate_subject_aliases_values_and_description():
    assert render(predicate="deployment_window", subject="team platform") == (
        "deployment window — team platform"
    )
    assert (
        render(
            predicate="team.lead",
            subject="Billing",
            aliases=["Billing", "billing-service", "BILLING"],
            values=["Alice", "Bob"],
            description="who leads it",
        )
        == "team lead — Billing (billing-service): Alice; Bob. who leads it"
    )


@pytest.mark.django_db
class TestRefresh:
    def test_each_pair_is_rendered_with_its_current_values(self, agent):
        alice = entity_create(agent=agent, name="Alice", entity_type="person", aliases=["Ally"])
        claim(agent, alice, "deployment_window", "Mondays 10:00", at(2024))
        claim(agent, alice, "deployment_window", "Tuesdays 14:00", at(2025))
        claim(agent, alice, "max_retries", 3, at(2024))
        claim(agent, alice, "works_at", object_entity="Acme Corp", valid_from=at(2024))
        result = fact_texts_refresh(agent_id=agent.pk, embed="never")
        assert result.rendered == 3 and len(result.changed) == 3 and result.deleted == 0
        assert texts(agent) == {
            ("Alice", "deployment_window"): "deployment window — Alice (Ally): Tuesdays 14:00",
            ("Alice", "max_retries"): "max retries — Alice (Ally): 3",
            ("Alice", "works_at"): "works at — Alice (Ally): Acme Corp",
        }

    def test_a_superseded_value_is_not_in_the_text(self, agent):
        claim(agent, "Alice", "deployment_window", "Monday", at(2024))
        claim(agent, "Alice", "deployment_window", "Tuesday", at(2025))
        fact_texts_refresh(agent_id=agent.pk, embed="never")
        assert texts(agent) == {
            ("Alice", "deployment_window"): "deployment window — Alice: Tuesday"
        }

    def test_a_refresh_of_unchanged_pairs_writes_nothing(self, agent):
        claim(agent, "Alice", "city", "Paris", at(2024))
        first = fact_texts_refresh(agent_id=agent.pk, embed="never")
        row = FactText.objects.get(agent=agent)
        again = fact_texts_refresh(agent_id=agent.pk, embed="never")
        assert (first.changed, again.changed) == ([row.pk], [])
        assert FactText.objects.get(agent=agent).rendered_at == row.rendered_at

    def test_a_changed_text_loses_its_embedding(self, agent):
        claim(agent, "Alice", "city", "Paris", at(2024))
        fact_texts_refresh(agent_id=agent.pk, embed="never")
        vector = "[" + ",".join(["0.05"] * 384) + "]"
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE facts_facttext SET embedding = %s::vector, embedding_model = 'm' "
                "WHERE agent_id = %s",
                [vector, agent.pk],
            )
        fact_texts_refresh(agent_id=agent.pk, embed="never")  # same text: kept
        assert FactText.objects.get(agent=agent).embedding_model == "m"
        claim(agent, "Alice", "city", "Berlin", at(2025))
        result = fact_texts_refresh(agent_id=agent.pk, embed="never")
        row = FactText.objects.get(agent=agent)
        assert result.changed == [row.pk]
        assert (row.text, row.embedding, row.embedding_model) == ("city — Alice: Berlin", None, "")

    def test_a_retracted_pair_keeps_its_words_but_no_value(self, agent):
        fact = claim(agent, "Alice", "city", "Paris", at(2024)).fact
        fact_retract(agent=agent, fact_id=fact.pk, reason="wrong person")
        fact_texts_refresh(agent_id=agent.pk, embed="never")
        assert texts(agent) == {("Alice", "city"): "city — Alice"}

    def test_another_agents_pairs_are_not_touched(self, agent):
        other = AgentFactory()
        claim(agent, "Alice", "city", "Paris", at(2024))
        claim(other, "Alice", "city", "Oslo", at(2024))
        fact_texts_refresh(agent_id=agent.pk, embed="never")
        assert FactText.objects.filter(agent=other).count() == 0
        assert texts(agent) == {("Alice", "city"): "city — Alice: Paris"}


@pytest.mark.django_db
class TestPairsTouched:
    def test_asserts_retractions_aliases_and_redefinitions(self, agent):
        alice = entity_create(agent=agent, name="Alice")
        city = claim(agent, alice, "city", "Paris", at(2024)).fact
        claim(agent, alice, "team", "payments", at(2024))
        claim(agent, "Bob", "city", "Rome", at(2024))
        bob = Fact.objects.get(agent=agent, subject__name="Bob").subject
        pair = {
            "alice.city": (alice.pk, city.predicate_id),
            "alice.team": (
                alice.pk,
                Fact.objects.get(predicate__name="team").predicate_id,
            ),
            "bob.city": (bob.pk, city.predicate_id),
        }
        everything = pairs_touched(agent.pk, 1, last_seq(agent))
        assert everything == set(pair.values())

        start = last_seq(agent) + 1
        fact_retract(agent=agent, fact_id=city.pk, reason="moved")
        assert pairs_touched(agent.pk, start, last_seq(agent)) == {pair["alice.city"]}

        start = last_seq(agent) + 1
        entity_alias_add(agent=agent, entity=alice, alias="Ally")
        assert pairs_touched(agent.pk, start, last_seq(agent)) == {
            pair["alice.city"],
            pair["alice.team"],
        }

        start = last_seq(agent) + 1
        predicate_define(agent=agent, name="city", description="where they live")
        assert pairs_touched(agent.pk, start, last_seq(agent)) == {
            pair["alice.city"],
            pair["bob.city"],
        }

    def test_other_events_touch_nothing(self, agent):
        from ledger.services import event_append

        event_append(agent=agent, event_type="user.said", payload={"text": "hi"})
        assert pairs_touched(agent.pk, 1, last_seq(agent)) == set()


@pytest.mark.django_db(transaction=True)
def test_a_rebuild_keeps_the_texts_and_their_embeddings():
    agent = AgentFactory()
    claim(agent, "Alice", "city", "Paris", at(2024))
    claim(agent, "Alice", "team", "payments", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="never")
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE facts_facttext SET embedding = %s::vector, embedding_model = 'm' "
            "WHERE agent_id = %s",
            [vector, agent.pk],
        )
    before = sorted(
        FactText.objects.filter(agent=agent).values_list("id", "text", "embedding_model")
    )
    rebuild_projection(agent=agent)  # commits: the deferred foreign keys are checked
    rebuild_projection()
    after = sorted(
        FactText.objects.filter(agent=agent).values_list("id", "text", "embedding_model")
    )
    assert after == before


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_texts_follow_fact_writes_after_commit(celery_worker_process):
    """The ledger hook queues the re-render; the worker renders and embeds."""
    from piper.embeddings import get_embedder

    agent = AgentFactory()
    with transaction.atomic():
        claim(agent, "team platform", "deployment_window", "Monday", at(2024))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = FactText.objects.filter(agent=agent).first()
        if row is not None and row.embedding is not None:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(celery_worker_process.log())
    assert (row.text, row.embedding_model) == (
        "deployment window — team platform: Monday",
        get_embedder().name,  # the worker's embedder is the one settings name
    )
    claim(agent, "team platform", "deployment_window", "Tuesday", datetime(2025, 1, 1, tzinfo=UTC))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = FactText.objects.get(agent=agent)
        if row.text.endswith("Tuesday") and row.embedding is not None:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(celery_worker_process.log())
    assert row.text == "deployment window — team platform: Tuesday"


def test_every_text_event_is_a_facts_event():
    assert all(t.startswith("facts.") for t in fact_texts.TEXT_EVENTS)


@pytest.mark.django_db
def test_the_command_indexes_facts_recorded_before_the_texts(agent):
    from io import StringIO

    from django.core.management import call_command

    claim(agent, "Alice", "city", "Paris", at(2024))
    claim(agent, "Bob", "city", "Rome", at(2024))
    out = StringIO()
    call_command("index_fact_texts", "--agent", agent.name, "--embed", "never", stdout=out)
    assert out.getvalue().startswith("fact texts: 2 rendered, 2 new or changed, for 1 agent(s) in ")
    assert texts(agent) == {
        ("Alice", "city"): "city — Alice: Paris",
        ("Bob", "city"): "city — Bob: Rome",
    }
    out = StringIO()
    call_command("index_fact_texts", "--agent", str(agent.pk), "--embed", "never", stdout=out)
    assert out.getvalue().startswith("fact texts: 2 rendered, 0 new or changed, for 1 agent(s) in ")


@pytest.mark.django_db
def test_the_fact_texts_in_the_admin(client, agent):
    from django.contrib.auth.models import User
    from django.urls import reverse

    claim(agent, "Alice", "city", "Paris", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="never")
    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw"))
    changelist = client.get(reverse("admin:facts_facttext_changelist"), {"embedded": "no"})
    assert changelist.status_code == 200
    assert "city — Alice: Paris" in changelist.content.decode()
    embedded = client.get(reverse("admin:facts_facttext_changelist"), {"embedded": "yes"})
    assert "city — Alice: Paris" not in embedded.content.decode()
    row = FactText.objects.get(agent=agent)
    assert client.get(reverse("admin:facts_facttext_change", args=[row.pk])).status_code == 200
    assert client.get(reverse("admin:facts_facttext_add")).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_a_background_refresh_gives_way_to_a_lock_instead_of_deadlocking():
    """A table held elsewhere (a TRUNCATE, a migration) makes the task's refresh give
    up after LOCK_TIMEOUT_MS — an error the task retries — not wait into a deadlock."""
    import psycopg
    from django.db import OperationalError

    from facts.tasks import LOCK_TIMEOUT_MS, _gave_way
    from testsupport.plugin import database_url

    agent = AgentFactory()
    claim(agent, "Alice", "city", "Paris", at(2024))
    pairs = fact_texts.all_pairs(agent.pk)
    with psycopg.connect(database_url(connection.settings_dict)) as other:
        other.execute("BEGIN")
        other.execute("LOCK TABLE facts_facttext IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(OperationalError) as raised:
            fact_texts_refresh(agent_id=agent.pk, pairs=pairs, lock_timeout_ms=LOCK_TIMEOUT_MS)
        waited = time.monotonic() - started
        other.execute("ROLLBACK")
    assert _gave_way(raised.value)
    assert 0.4 < waited < 1.0  # gave way before deadlock_timeout (1 s)
    assert FactText.objects.filter(agent=agent).count() == 0
    fact_texts_refresh(agent_id=agent.pk, pairs=pairs, lock_timeout_ms=LOCK_TIMEOUT_MS)
    assert texts(agent) == {("Alice", "city"): "city — Alice: Paris"}


def test_a_full_lock_table_is_a_moment_the_task_waits_out():
    """'out of shared memory' (53200): other sessions held the shared lock table
    full; the text task retries, as it does after a lock timeout or a deadlock."""
    import psycopg
    from django.db import OperationalError

    from facts.tasks import _gave_way

    for cause, retried in (
        (psycopg.errors.OutOfMemory("out of shared memory"), True),
        (psycopg.errors.LockNotAvailable("lock timeout"), True),
        (psycopg.errors.UndefinedTable("no such table"), False),
    ):
        error = OperationalError(str(cause))
        error.__cause__ = cause
        assert _gave_way(error) is retried
