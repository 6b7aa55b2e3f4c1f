"""The residue check finds what an erasure left behind: each kind of leftover,
planted behind the services' back after a clean erasure, is reported."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from forgetting.services.erasure import Selector, erasure_run, residue_check
from forgetting.tests.world import MOVED, build
from intentions.models import WorkingState
from ledger.tests.tampering import behind_the_triggers_back
from piper.tenancy.tests.factories import AgentFactory
from recall.models import RetrievalTrace

pytestmark = pytest.mark.django_db


@pytest.fixture
def erased():
    agent = AgentFactory(name="residue")
    world = build(agent)
    result = erasure_run(
        agent=agent,
        selector=Selector(event_ids=(world.moved.raw_event_id,)),
        reason="test",
        requested_by="test",
    )
    assert result.receipt.residue_found == 0
    return agent, world, result


def found(result, projection: str, check: str) -> int:
    [finding] = [
        f
        for f in residue_check(result.scope)
        if (f["projection"], f["check"]) == (projection, check)
    ]
    return finding["found"]


def test_a_row_made_again_from_an_erased_event_is_found(erased):
    agent, world, result = erased
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO episodes_episode (id, agent_id, occurred_at, session_id, actor, "
            "environment, goal_id, task_id, action, observation, outcome, summary, salience, "
            "confidence, entities, related_ids, source_type, authority, raw_event_id, "
            "embedding_model, created_at) SELECT %s, agent_id, occurred_at, '', '', '', '', '', "
            "'', '', 'unknown', 'regenerated', 0.5, 1, '{}', '{}', source_type, authority, id, "
            "'', now() FROM ledger_event WHERE id = %s",
            [uuid.uuid4(), world.moved.raw_event_id],
        )
    assert found(result, "episodes", "made_from_erased_event") == 1


def test_a_link_to_an_erased_row_is_found(erased):
    agent, world, result = erased
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE episodes_episode SET related_ids = %s WHERE id = %s",
            [[world.moved.pk], world.backup.pk],
        )
    assert found(result, "episodes", "links_to_erased_row") == 1


def test_erased_words_quoted_in_a_working_state_are_found(erased):
    agent, world, result = erased
    state = WorkingState.objects.get(thread=world.thread)
    behind_the_triggers_back(
        "UPDATE intentions_workingstate SET state = jsonb_set(state, '{note}', to_jsonb(%s::text)) "
        "WHERE id = %s",
        [f"remember: {MOVED}", state.pk],
    )
    assert found(result, "working_states", "erased_words") == 1


def test_a_trace_naming_an_erased_episode_is_found(erased):
    agent, world, result = erased
    RetrievalTrace.objects.create(
        agent=agent,
        query="what moved?",
        route="what_happened",
        explicit=True,
        returned=[{"kind": "episode", "id": str(world.moved.pk), "score": 1.0}],
        abstained=False,
        latency_ms=1.0,
    )
    assert found(result, "retrieval_traces", "names_erased_row_or_words") == 1


def test_a_payload_put_back_behind_the_ledger_is_found(erased):
    agent, world, result = erased
    behind_the_triggers_back(
        'UPDATE ledger_event SET payload = \'{"summary": "back"}\' WHERE id = %s',
        [world.moved.raw_event_id],
    )
    assert found(result, "ledger", "payload_or_labels_kept") == 1


def test_an_erased_value_left_in_a_fact_text_is_found():
    agent = AgentFactory(name="texts")
    build(agent, with_recall=False, embed=False)
    from facts.models import Fact

    porto = Fact.objects.get(agent=agent, object_value="Porto", superseded_at__isnull=True)
    result = erasure_run(
        agent=agent,
        selector=Selector(event_ids=(porto.source_event_id,)),
        reason="test",
        requested_by="test",
    )
    assert result.receipt.residue_found == 0
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE facts_facttext SET text = text || ' Porto Alegre district' "
            "WHERE agent_id = %s AND text ILIKE %s",
            [agent.pk, "%maria%"],
        )
    result.scope.add_texts(["Porto Alegre district"])
    assert found(result, "fact_texts", "erased_words") == 1


def test_duplicates_of_an_erased_canonical_episode_stand_on_their_own():
    from datetime import UTC, datetime

    from episodes.models import Episode
    from episodes.services import EpisodeDraft, episodes_collapse, episodes_record

    agent = AgentFactory(name="dupes")
    canonical, copy = episodes_record(
        agent=agent,
        drafts=[
            EpisodeDraft(
                occurred_at=datetime(2026, 1, 1, tzinfo=UTC), summary="the disk filled up"
            ),
            EpisodeDraft(
                occurred_at=datetime(2026, 1, 1, 0, 1, tzinfo=UTC), summary="the disk filled up"
            ),
        ],
    )
    episodes_collapse(
        agent=agent, canonical_id=canonical.pk, duplicate_ids=[copy.pk], reason="same"
    )
    assert Episode.objects.get(pk=copy.pk).canonical_id == canonical.pk
    result = erasure_run(
        agent=agent,
        selector=Selector(event_ids=(canonical.raw_event_id,)),
        reason="test",
        requested_by="test",
    )
    assert result.receipt.residue_found == 0
    assert Episode.objects.get(pk=copy.pk).canonical_id is None
    from episodes.services import rebuild_projection

    rebuild_projection(agent=agent)
    assert Episode.objects.get(pk=copy.pk).canonical_id is None
