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
from episodes.services import episode_correct, episode_retract, episodes_collapse
from episodes.tests.factories import T0
from episodes.tests.retrieval_fixtures import set_embedding, topic
from ledger.models import Event
from piper.errors import Conflict
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


# ----------------------------------------------- retracted and corrected versions (issue 20)

NOTE = (
    "Restarted the billing worker on web-07 after the heap alarm fired; the error rate "
    "was back under 3 percent within ten minutes and the queue drained without help"
)


def search(agent, query: str) -> list:
    result = episode_search(
        agent=agent,
        query=query,
        query_embedding=topic(300),
        abstain=False,
        now=T0 + timedelta(days=1),
    )
    return [(h.obj.pk, h.obj.summary) for h in result.hits]


def test_a_withdrawn_version_is_neither_grouped_nor_a_canonical(agent):
    retracted = said(agent, ALERT, actor="monitor", session_id="s1")
    kept = said(agent, ALERT, minutes=1, actor="monitor", session_id="s1")
    copy = said(agent, ALERT + ".", minutes=2, actor="monitor", session_id="s1")
    corrected = said(agent, ALERT + "!", minutes=3, actor="monitor", session_id="s1")
    episode_retract(agent=agent, episode_id=retracted.pk, reason="another host's alarm")
    fixed = episode_correct(
        agent=agent, episode_id=corrected.pk, changes={"summary": ALERT.replace("db-1", "db-2")}
    )
    run = consolidate(agent=agent, kind="duplicates")
    assert canonical_of(retracted, kept, copy, corrected, fixed) == [
        None,
        None,
        kept.pk,
        None,
        None,
    ]
    # The correction is read as a new episode: another host, so no duplicate.
    assert (run.episodes_read, run.details["collapsed"]) == (3, {"events": 1, "episodes": 1})


@pytest.mark.parametrize("runs_between", [False, True])
def test_a_correction_is_never_collapsed_into_the_version_it_corrects(agent, runs_between):
    # A correction is near-identical to what it corrects, but it replaces that version.
    note = said(agent, NOTE, actor="monitor", session_id="s1")
    if runs_between:
        consolidate(agent=agent, kind="duplicates")
    fixed = episode_correct(
        agent=agent,
        episode_id=note.pk,
        changes={"summary": NOTE.replace("ten minutes", "five minutes")},
        reason="it took five",
    )
    run = consolidate(agent=agent, kind="duplicates")
    assert canonical_of(note, fixed) == [None, None]
    assert (run.episodes_read, run.details["collapsed"]) == (1, {"events": 0, "episodes": 0})
    assert not Event.objects.filter(agent=agent, event_type="episode.collapsed").exists()
    # A later repeat of the corrected text collapses into the correction.
    repeat = said(
        agent,
        NOTE.replace("ten minutes", "five minutes") + "!",
        minutes=5,
        actor="monitor",
        session_id="s1",
    )
    consolidate(agent=agent, kind="duplicates")
    assert canonical_of(note, fixed, repeat) == [None, None, fixed.pk]


def test_a_repeat_recorded_after_a_correction_in_the_same_run_collapses_into_it(agent):
    wrong = said(agent, NOTE.replace("web-07", "web-12"), actor="monitor", session_id="s1")
    fixed = episode_correct(agent=agent, episode_id=wrong.pk, changes={"summary": NOTE})
    repeat = said(agent, NOTE + ".", minutes=1, actor="monitor", session_id="s1")
    run = consolidate(agent=agent, kind="duplicates")
    assert canonical_of(wrong, fixed, repeat) == [None, None, fixed.pk]
    assert run.details["collapsed"] == {"events": 1, "episodes": 1}


def test_a_correction_that_now_repeats_an_earlier_episode_joins_its_group(agent):
    first = said(agent, NOTE, actor="monitor", session_id="s1")
    wrong = said(
        agent, NOTE.replace("web-07", "web-12"), minutes=1, actor="monitor", session_id="s1"
    )
    consolidate(agent=agent, kind="duplicates")
    assert canonical_of(first, wrong) == [None, None]  # another host: another event
    fixed = episode_correct(
        agent=agent, episode_id=wrong.pk, changes={"summary": NOTE}, reason="it was web-07"
    )
    run = consolidate(agent=agent, kind="duplicates")
    assert canonical_of(first, wrong, fixed) == [None, None, first.pk]
    assert run.details["collapsed"] == {"events": 1, "episodes": 1}


def test_a_duplicate_withdrawn_after_the_collapse(agent):
    first = said(agent, ALERT, actor="monitor", session_id="s1")
    retracted = said(agent, ALERT + ".", minutes=1, actor="monitor", session_id="s1")
    retyped = said(agent, ALERT + "!", minutes=2, actor="monitor", session_id="s1")
    moved = said(agent, ALERT + "?", minutes=3, actor="monitor", session_id="s1")
    consolidate(agent=agent, kind="duplicates")
    assert canonical_of(retracted, retyped, moved) == [first.pk] * 3
    episode_retract(agent=agent, episode_id=retracted.pk, reason="recorded twice by mistake")
    retyped_fixed = episode_correct(
        agent=agent, episode_id=retyped.pk, changes={"summary": ALERT.upper()}
    )
    other_host = ALERT.replace("db-1", "db-2")
    moved_fixed = episode_correct(agent=agent, episode_id=moved.pk, changes={"summary": other_host})
    # The withdrawn versions stay in the group (history); each correction is a new
    # episode, a duplicate again only if it still repeats the canonical.
    run = consolidate(agent=agent, kind="duplicates")
    assert run.episodes_read == 2
    assert canonical_of(first, retracted, retyped, moved, retyped_fixed, moved_fixed) == [
        None,
        first.pk,
        first.pk,
        first.pk,
        first.pk,
        None,
    ]
    assert sorted(search(agent, "disk usage crossed 90% alert fired")) == sorted(
        [(first.pk, ALERT), (moved_fixed.pk, other_host)]
    )


def test_a_corrected_canonical_answers_for_its_group_with_the_corrected_text(agent):
    first = said(agent, ALERT, actor="monitor", session_id="s1")
    copy = said(agent, ALERT + ".", minutes=1, actor="monitor", session_id="s1")
    consolidate(agent=agent, kind="duplicates")
    other_host = ALERT.replace("db-1", "db-2")
    fixed = episode_correct(
        agent=agent, episode_id=first.pk, changes={"summary": other_host}, reason="it was db-2"
    )
    run = consolidate(agent=agent, kind="duplicates")
    # The group stays as it was collapsed; the corrected version is no duplicate of it.
    assert canonical_of(first, copy, fixed) == [None, first.pk, None]
    assert run.details["collapsed"] == {"events": 0, "episodes": 0}
    # The copy repeated what the canonical said: a search that finds it answers with
    # the canonical's current version, once — not with the text that was corrected.
    assert search(agent, "disk usage db-1 crossed 90% alert fired") == [(fixed.pk, other_host)]


def test_a_retracted_canonical_leaves_its_duplicates_answering_for_themselves(agent):
    first = said(agent, ALERT, actor="monitor", session_id="s1")
    copy = said(agent, ALERT + ".", minutes=1, actor="monitor", session_id="s1")
    consolidate(agent=agent, kind="duplicates")
    episode_retract(agent=agent, episode_id=first.pk, reason="another agent's alarm")
    assert consolidate(agent=agent, kind="duplicates") is None  # a retraction is nothing new
    assert canonical_of(first, copy) == [None, first.pk]
    assert search(agent, "disk usage db-1 crossed 90% alert fired") == [(copy.pk, ALERT + ".")]


def test_collapsing_refuses_a_withdrawn_version_and_writes_nothing(agent):
    kept = said(agent, ALERT, actor="monitor", session_id="s1")
    copy = said(agent, ALERT + ".", minutes=1, actor="monitor", session_id="s1")
    retracted = said(agent, ALERT + "!", minutes=2, actor="monitor", session_id="s1")
    corrected = said(agent, ALERT + "?", minutes=3, actor="monitor", session_id="s1")
    episode_retract(agent=agent, episode_id=retracted.pk, reason="never happened")
    fixed = episode_correct(agent=agent, episode_id=corrected.pk, changes={"summary": ALERT})
    before = Event.objects.filter(agent=agent).count()
    for canonical_id, duplicate_ids, withdrawn in [
        (retracted.pk, [copy.pk], retracted.pk),
        (kept.pk, [copy.pk, corrected.pk], corrected.pk),
    ]:
        with pytest.raises(Conflict) as refused:
            episodes_collapse(
                agent=agent, canonical_id=canonical_id, duplicate_ids=duplicate_ids, reason="same"
            )
        assert (refused.value.code, refused.value.details) == (
            "not_current",
            {"episode_ids": [str(withdrawn)]},
        )
    assert Event.objects.filter(agent=agent).count() == before
    assert canonical_of(kept, copy, retracted, corrected, fixed) == [None] * 5


def test_a_version_withdrawn_while_a_run_compares_it_fails_the_step_not_the_group(
    agent, monkeypatch
):
    # A retraction that commits between the step's read and its collapse: the collapse
    # refuses it (under its row lock), the step rolls back, and the next run reads the
    # batch again without it.
    from consolidation import duplicates

    first = said(agent, ALERT, actor="monitor", session_id="s1")
    copy = said(agent, ALERT + ".", minutes=1, actor="monitor", session_id="s1")
    real = duplicates.find_duplicates

    def retract_meanwhile(agent_id, batch, *, after_seq):
        found = real(agent_id, batch, after_seq=after_seq)
        episode_retract(agent=agent, episode_id=first.pk, reason="withdrawn meanwhile")
        return found

    monkeypatch.setattr(duplicates, "find_duplicates", retract_meanwhile)
    with pytest.raises(Conflict):
        consolidate(agent=agent, kind="duplicates")
    monkeypatch.setattr(duplicates, "find_duplicates", real)
    episode_retract(agent=agent, episode_id=first.pk, reason="withdrawn meanwhile")
    run = consolidate(agent=agent, kind="duplicates")
    assert (run.status, run.episodes_read) == ("succeeded", 1)
    assert canonical_of(first, copy) == [None, None]


def test_the_beat_queues_a_duplicates_run_for_a_correction_not_for_a_retraction(agent, monkeypatch):
    from consolidation import tasks

    retracted = said(agent, ALERT, actor="monitor", session_id="s1")
    corrected = said(agent, NOTE, minutes=1, actor="monitor", session_id="s1")
    for kind in ("facts", "duplicates"):
        tasks.consolidate_agent.apply(args=[str(agent.pk), kind])
    queued = []
    monkeypatch.setattr(tasks.consolidate_agent, "delay", lambda *a: queued.append(a))
    assert tasks.consolidate_due() == 0

    episode_retract(agent=agent, episode_id=retracted.pk, reason="wrong")
    assert tasks.consolidate_due() == 1
    assert queued == [(str(agent.pk), "facts")]

    queued.clear()
    episode_correct(
        agent=agent, episode_id=corrected.pk, changes={"summary": NOTE.replace("ten", "five")}
    )
    assert tasks.consolidate_due() == 2
    assert queued == [(str(agent.pk), "facts"), (str(agent.pk), "duplicates")]
