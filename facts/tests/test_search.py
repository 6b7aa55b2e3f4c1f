"""Facts findable from plain words: the candidates the fact texts propose
(facts/search.py). Similarity only proposes (subject, predicate) pairs: what is
current stays the selectors' answer."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from facts.fact_texts import fact_texts_refresh
from facts.models import FactText
from facts.search import entities_named_in, fact_candidates
from facts.services import entity_create
from facts.tests.factories import at, claim
from piper.errors import InvalidInput
from piper.tenancy.tests.factories import AgentFactory


@pytest.fixture
def agent(db):
    return AgentFactory()


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
