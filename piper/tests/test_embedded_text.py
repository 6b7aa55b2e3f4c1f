"""The shared embedding store (piper.embedded_text): one compare-and-set UPDATE."""

import math

import pytest

from facts.fact_texts import fact_texts_refresh
from facts.models import FactText
from facts.tests.factories import at, claim
from piper.embedded_text import EMBEDDING_DIM, embeddings_store, vector_literal
from piper.tenancy.tests.factories import AgentFactory


def test_vector_literal_is_pgvectors_text_form():
    assert vector_literal([0.5, 1, -0.25]) == "[0.5,1.0,-0.25]"


@pytest.mark.django_db
class TestEmbeddingsStore:
    @pytest.fixture
    def row(self) -> FactText:
        agent = AgentFactory()
        claim(agent, "Alice", "city", "Paris", at(2024))
        fact_texts_refresh(agent_id=agent.pk, embed="never")
        return FactText.objects.get(agent=agent)

    @staticmethod
    def stored(row: FactText) -> tuple[float | None, str, bool]:
        row.refresh_from_db()
        first = None if row.embedding is None else float(row.embedding[0])
        return first, row.embedding_model, row.embedded_at is not None

    def test_a_row_with_a_vector_keeps_it_unless_stale_ones_are_replaced(self, row):
        assert embeddings_store(FactText, vectors={row.pk: [0.5] * EMBEDDING_DIM}, model="a") == 1
        assert embeddings_store(FactText, vectors={row.pk: [0.25] * EMBEDDING_DIM}, model="b") == 0
        assert self.stored(row) == (0.5, "a", True)
        again = {row.pk: [0.75] * EMBEDDING_DIM}
        assert embeddings_store(FactText, vectors=again, model="a", replace_stale=True) == 0
        replaced = {row.pk: [0.25] * EMBEDDING_DIM}
        assert embeddings_store(FactText, vectors=replaced, model="b", replace_stale=True) == 1
        assert self.stored(row) == (0.25, "b", True)

    def test_only_a_row_still_holding_the_embedded_text_is_written(self, row):
        vectors = {row.pk: [0.5] * EMBEDDING_DIM}
        older = {row.pk: "city — Alice: Lyon"}
        assert embeddings_store(FactText, vectors=vectors, model="a", texts=older) == 0
        assert self.stored(row) == (None, "", False)
        current = {row.pk: row.text}
        assert embeddings_store(FactText, vectors=vectors, model="a", texts=current) == 1

    def test_a_further_condition_is_applied(self, row):
        vectors = {row.pk: [0.5] * EMBEDDING_DIM}
        assert embeddings_store(FactText, vectors=vectors, model="a", only_where="false") == 0
        assert embeddings_store(FactText, vectors=vectors, model="a", only_where="true") == 1

    def test_nothing_to_store_is_no_statement(self, django_assert_num_queries):
        with django_assert_num_queries(0):
            assert embeddings_store(FactText, vectors={}, model="a") == 0

    @pytest.mark.parametrize(
        ("vector", "model", "message"),
        [
            ([0.5] * EMBEDDING_DIM, "", "an embedding needs the name of the model that made it"),
            ([0.5] * 3, "a", f"has 3 numbers, expected {EMBEDDING_DIM}"),
            ([math.nan] * EMBEDDING_DIM, "a", "holds a non-finite number"),
        ],
    )
    def test_an_unusable_vector_is_refused_before_any_write(self, row, vector, model, message):
        with pytest.raises(ValueError, match=message):
            embeddings_store(FactText, vectors={row.pk: vector}, model=model)
        assert self.stored(row) == (None, "", False)
