"""Duplicate collapse: a `duplicates` run groups near-identical episodes of one actor and
session (or time window) under the earliest, keeps every row, and search answers once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from consolidation.models import ConsolidationRun
from consolidation.services import consolidate
from consolidation.tests.factories import said
from episodes.models import Episode
from episodes.retrieval import episode_search
from episodes.tests.retrieval_fixtures import set_embedding, topic
from ledger.models import Event
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

ALERT = "Disk usage on db-1 crossed 90% and the alert fired"


@pytest.fixture
def agent():
    return AgentFactory(name="dedup")


def canonical_of(*episodes) -> list:
    rows = dict(
        Episode.objects.filter(pk__in=[e.pk for e in episodes]).values_list("pk", "canonical_id")
    )
    return [rows[e.pk] for e in episodes]


def test_near_identical_episodes_of_one_actor_and_session_collapse_into_the_first(agent):
    first = said(agent, ALERT, actor="monitor", session_id="s1")
    again = said(agent, ALERT + ".", minutes=5, actor="monitor", session_id="s1")
    later = said(agent, ALERT.lower() + "!", minutes=9, actor="monitor", session_id="s1")
    other_session = said(agent, ALERT, minutes=6, actor="monitor", session_id="s2")
    other_actor = said(agent, ALERT, minutes=7, actor="oncall", session_id="s1")
    different = said(
        agent, "Disk usage on db-2 crossed 90%", minutes=8, actor="monitor", session_id="s1"
    )
    run = consolidate(agent=agent, kind="duplicates")
    assert canonical_of(first, again, later, other_session, other_actor, different) == [
        None,
        first.pk,
        first.pk,
        None,
        None,
        None,
    ]
    assert run.details["collapsed"] == {"events": 1, "episodes": 2}
    [event] = Event.objects.filter(agent=agent, event_type="episode.collapsed")
    assert event.payload["duplicate_ids"] == [str(again.pk), str(later.pk)]
    assert Episode.objects.filter(agent=agent).count() == 6  # nothing deleted
    # The next run reads only what is new, and a later repeat joins the same group.
    assert consolidate(agent=agent, kind="duplicates") is None
    repeat = said(agent, ALERT, minutes=30, actor="monitor", session_id="s1")
    consolidate(agent=agent, kind="duplicates")
    assert canonical_of(repeat) == [first.pk]


def test_a_long_note_with_one_number_changed_is_another_event(agent):
    note = (
        "Restarted the billing worker on web-07 after the heap alarm fired; the error rate "
        "was back under 3 percent within ten minutes and the queue drained without help"
    )
    first = said(agent, note, actor="monitor", session_id="s1")
    other_host = said(
        agent, note.replace("web-07", "web-12"), minutes=1, actor="monitor", session_id="s1"
    )
    other_count = said(
        agent, note.replace("3 percent", "20 percent"), minutes=2, actor="monitor", session_id="s1"
    )
    retyped = said(agent, note.upper() + " !", minutes=3, actor="monitor", session_id="s1")
    consolidate(agent=agent, kind="duplicates")
    assert canonical_of(first, other_host, other_count, retyped) == [None, None, None, first.pk]


def test_without_a_session_only_within_the_time_window(agent, settings):
    settings.CONSOLIDATION_DUPLICATE_WINDOW_SECONDS = 3600
    first = said(agent, ALERT, actor="monitor")
    close = said(agent, ALERT, minutes=30, actor="monitor")
    far = said(agent, ALERT, minutes=24 * 60, actor="monitor")
    consolidate(agent=agent, kind="duplicates")
    assert canonical_of(first, close, far) == [None, first.pk, None]


def test_vectors_that_disagree_keep_them_apart(agent):
    first = said(agent, ALERT, actor="monitor", session_id="s1")
    second = said(agent, ALERT, minutes=1, actor="monitor", session_id="s1")
    set_embedding(first, topic(1))
    set_embedding(second, topic(2))
    consolidate(agent=agent, kind="duplicates")
    assert canonical_of(first, second) == [None, None]


def test_search_answers_with_the_canonical_episode_once(agent):
    first = said(agent, ALERT, actor="monitor", session_id="s1")
    for n in range(3):
        said(agent, ALERT, minutes=n + 1, actor="monitor", session_id="s1")
    said(agent, "Rotated the TLS certificate of the billing site", minutes=9, actor="ops")
    run = consolidate(agent=agent, kind="duplicates", batch_size=2)
    assert run.details["collapsed"] == {"events": 2, "episodes": 3}  # one group, an event a step
    result = episode_search(
        agent=agent,
        query="disk usage alert on db-1",
        query_embedding=topic(300),
        abstain=False,
        now=first.occurred_at + timedelta(days=1),
    )
    assert [h.obj.pk for h in result.hits if h.obj.summary == ALERT] == [first.pk]


def test_the_two_kinds_keep_their_own_cursors(agent):
    said(agent, "Alice Chen moved to Berlin.", actor="hr", session_id="s1")
    said(agent, "Alice Chen moved to Berlin.", minutes=1, actor="hr", session_id="s1")
    facts = consolidate(agent=agent)
    duplicates = consolidate(agent=agent, kind="duplicates")
    assert (facts.kind, duplicates.kind) == ("facts", "duplicates")
    assert (facts.from_seq, duplicates.from_seq) == (0, 0)
    assert duplicates.details["collapsed"] == {"events": 1, "episodes": 1}
    assert ConsolidationRun.objects.filter(agent=agent).count() == 2
    # The facts run saw both (one source, one piece of evidence, two rows of it).
    assert facts.candidates_asserted == 1
