"""The admins' display helpers (piper.admin_display)."""

import pytest
from django.urls import reverse

from facts.fact_texts import fact_texts_refresh
from facts.models import FactText
from facts.tests.factories import at, claim
from piper.admin_display import compact_json, preformatted, pretty_json
from piper.embedded_text import EMBEDDING_DIM, embeddings_store
from piper.tenancy.tests.factories import AgentFactory

PRE = '<pre style="white-space: pre-wrap; margin: 0">{}</pre>'


def test_preformatted_escapes_and_marks_empty_text():
    assert preformatted("a < b") == PRE.format("a &lt; b")
    assert preformatted("") == PRE.format("-")


def test_pretty_json_is_indented_with_sorted_keys():
    assert pretty_json({"b": 1, "a": "é"}) == PRE.format(
        "{\n  &quot;a&quot;: &quot;é&quot;,\n  &quot;b&quot;: 1\n}"
    )


def test_compact_json_is_one_line_as_stored():
    assert compact_json({"b": [1, 2], "a": "é"}) == '{"b": [1, 2], "a": "é"}'
    assert compact_json(None) == "null"


@pytest.mark.django_db
def test_embedded_filter_splits_rows_with_and_without_a_vector(admin_client):
    agent = AgentFactory()
    claim(agent, "Alice", "city", "Paris", at(2024))
    claim(agent, "Alice", "employer", "Acme", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="never")
    embedded = FactText.objects.get(agent=agent, predicate__name="city")
    embeddings_store(FactText, vectors={embedded.pk: [0.5] * EMBEDDING_DIM}, model="m")
    url = reverse("admin:facts_facttext_changelist")
    shown = {
        value: [
            row.pk for row in admin_client.get(url, {"embedded": value}).context["cl"].result_list
        ]
        for value in ("yes", "no")
    }
    waiting = FactText.objects.get(agent=agent, predicate__name="employer")
    assert shown == {"yes": [embedded.pk], "no": [waiting.pk]}
