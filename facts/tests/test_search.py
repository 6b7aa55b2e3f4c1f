"""Facts findable from plain words: the fact texts, their upkeep, and the candidates
they propose (facts/search.py). Similarity only proposes (subject, predicate) pairs:
what is current stays the selectors' answer."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction

from facts import search
from facts.models import Fact, FactText
from facts.search import (
    entities_named_in,
    fact_candidates,
    fact_texts_refresh,
    pairs_touched,
    render,
)
from facts.services import (
    entity_alias_add,
    entity_create,
    fact_retract,
    predicate_define,
    rebuild_projection,
)
from facts.tests.factories import at, claim
from ledger.models import Event
from piper.errors import InvalidInput
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


@pytest.mark.django_db
class TestCandidates:
    @pytest.fixture
    def known(self, agent):
        claim(agent, "team platform", "deployment_window", "Monday 10:00", at(2024))
        claim(agent, "team platform", "deployment_window", "Tuesday 14:00", at(2025))
        claim(agent, "team platform", "on_call", "Bob", at(2024))
        claim(agent, "Alice", "city", "Berlin", at(2024))
        fact_texts_refresh(agent_id=agent.pk, embed="never")
        return agent

    def test_a_plain_question_reaches_its_subject_and_predicate(self, known):
        found = fact_candidates(agent=known, query="When is our deployment window now?")
        assert [(c.subject.name, c.predicate_name) for c in found] == [
            ("team platform", "deployment_window")
        ]
        assert found[0].signals == {
            "text_rank": found[0].signals["text_rank"],
            "text_position": 1,
            "named_subject": 0,
            "vector_similarity": None,
        }
        assert found[0].signals["text_rank"] > 0

    def test_naming_the_subject_lifts_its_pairs(self, known):
        found = fact_candidates(agent=known, query="who is on call for team platform?")
        assert [(c.subject.name, c.predicate_name) for c in found][0] == (
            "team platform",
            "on_call",
        )
        assert found[0].signals["named_subject"] == 1

    def test_nothing_in_common_proposes_nothing_without_a_vector(self, known):
        assert fact_candidates(agent=known, query="what colour is the sky?") == []

    def test_another_agents_facts_are_never_proposed(self, known):
        other = AgentFactory()
        assert fact_candidates(agent=other, query="when is our deployment window now?") == []

    @pytest.mark.parametrize("query", ["", "   ", "x" * 2001, None])
    def test_an_empty_or_huge_query_is_refused(self, known, query):
        with pytest.raises(InvalidInput):
            fact_candidates(agent=known, query=query)


@pytest.mark.django_db
class TestEntitiesNamed:
    def test_names_in_order_longest_first_possessives_ignored(self, agent):
        entity_create(agent=agent, name="Acme")
        entity_create(agent=agent, name="Acme Corp")
        entity_create(agent=agent, name="Alice", aliases=["Ally"])
        found = entities_named_in(agent=agent, text="How is Ally's team related to ACME corp?")
        assert [(m.alias, m.position) for m in found] == [("Ally", 2), ("Acme Corp", 6)]

    def test_another_agents_names_are_not_found(self, agent):
        entity_create(agent=AgentFactory(), name="Alice")
        assert entities_named_in(agent=agent, text="where is Alice?") == []


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
@pytest.mark.django_db
def test_no_word_in_common_is_found_by_similarity(agent):
    claim(agent, "team platform", "deployment_window", "Tuesday 14:00", at(2025))
    claim(agent, "Alice", "favourite_food", "ramen", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="now")
    assert FactText.objects.filter(agent=agent, embedding__isnull=True).count() == 0
    from piper.embeddings import get_embedder

    question = "what dish does she love most?"
    found = fact_candidates(
        agent=agent, query=question, query_embedding=get_embedder().embed_one(question)
    )
    assert [(c.subject.name, c.predicate_name) for c in found] == [("Alice", "favourite_food")]
    assert found[0].signals["text_rank"] is None
    assert found[0].signals["vector_similarity"] >= 0.45


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
    assert all(t.startswith("facts.") for t in search.TEXT_EVENTS)


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
def test_a_filtered_index_scan_still_finds_every_text_of_the_agent(agent):
    """An HNSW scan filtered to one agent can stop short of `limit` (ef_search rows are
    read, most of them another agent's); the iterative scan keeps reading."""
    import random

    from facts.search import _vector_ranked

    other = AgentFactory()
    for n in range(400):
        claim(other, f"thing {n}", "colour", f"colour {n}", at(2024))
    for n in range(6):
        claim(agent, f"mine {n}", "colour", f"shade {n}", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="never")
    fact_texts_refresh(agent_id=other.pk, embed="never")
    rng = random.Random(7)
    with connection.cursor() as cursor:
        for text_id in FactText.objects.values_list("pk", flat=True):
            vector = [rng.gauss(0, 1) for _ in range(384)]
            norm = sum(x * x for x in vector) ** 0.5
            cursor.execute(
                "UPDATE facts_facttext SET embedding = %s::vector, embedding_model = 'synthetic' "
                "WHERE id = %s",
                ["[" + ",".join(str(x / norm) for x in vector) + "]", text_id],
            )
    query = [rng.gauss(0, 1) for _ in range(384)]
    literal = "[" + ",".join(str(x) for x in query) + "]"
    mine = set(FactText.objects.filter(agent=agent).values_list("pk", flat=True))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # as at scale: through the index
        cursor.execute("SET LOCAL enable_sort = off")
        # The plain filtered scan, for contrast: it loses most of this agent's rows.
        cursor.execute(
            "SELECT id FROM facts_facttext WHERE agent_id = %s AND embedding IS NOT NULL "
            "ORDER BY embedding <=> %s::vector LIMIT 20",
            [agent.pk, literal],
        )
        assert len(cursor.fetchall()) < 6
        found = _vector_ranked(agent, query, 20)
        cursor.execute("SHOW hnsw.iterative_scan")
        assert cursor.fetchone()[0] == "off"  # put back after the statement
    assert {i for i, _, _ in found} == mine
    assert [s for _, _, s in found] == sorted((s for _, _, s in found), reverse=True)


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
    pairs = search.all_pairs(agent.pk)
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
