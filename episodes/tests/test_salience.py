"""Salience decay (episodes.salience): what is never used fades in ranking, use
restores it, a precise question still finds a faded memory, and a rebuild keeps
the use marks its ledger holds."""

from __future__ import annotations

from datetime import timedelta

import pytest

from episodes import retrieval
from episodes.models import Episode
from episodes.retrieval import fusion
from episodes.salience import SALIENCE_HALF_LIFE_DAYS, USE_BOOST, effective_salience
from episodes.services import episodes_mark_used, rebuild_projection
from episodes.tests.retrieval_fixtures import T0, record, topic
from ledger.services import EventDraft, events_append
from piper.tenancy.services import agent_create

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(days=1)


def search(agent, query, **kwargs):
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("abstain", False)
    return retrieval.episode_search(agent=agent, query=query, query_embedding=topic(300), **kwargs)


@pytest.fixture(autouse=True)
def _fresh_statistics():
    retrieval.forget_statistics()
    yield
    retrieval.forget_statistics()


# ---------------------------------------------------------------- the decay


def test_salience_halves_every_half_life_since_it_happened():
    value = effective_salience(
        salience=0.8,
        occurred_at=T0,
        last_used_at=None,
        use_count=0,
        now=T0 + timedelta(days=2 * SALIENCE_HALF_LIFE_DAYS),
    )
    assert value == pytest.approx(0.2)


def test_a_use_restarts_the_decay_and_lifts_it():
    now = T0 + timedelta(days=365)
    unused = effective_salience(
        salience=0.5, occurred_at=T0, last_used_at=None, use_count=0, now=now
    )
    used = effective_salience(salience=0.5, occurred_at=T0, last_used_at=now, use_count=1, now=now)
    assert unused < 0.1
    assert used == pytest.approx(0.5 * (1 + USE_BOOST))


def test_it_never_leaves_zero_to_one():
    assert (
        effective_salience(salience=1.0, occurred_at=T0, last_used_at=T0, use_count=1000, now=T0)
        == 1.0
    )


# ----------------------------------------------------------------- the marks


def test_marking_counts_uses_and_keeps_the_latest_time(agent_a):
    episode = record(agent_a, summary="Rotated the signing keys")
    later, earlier = NOW, NOW - timedelta(hours=3)
    assert episodes_mark_used(agent=agent_a, episode_ids=[episode.pk], at=later) == 1
    assert episodes_mark_used(agent=agent_a, episode_ids=[str(episode.pk)], at=earlier) == 1
    episode.refresh_from_db()
    assert (episode.use_count, episode.last_used_at) == (2, later)


def test_marking_ignores_another_agents_and_unknown_ids(agent_a):
    mine = record(agent_a, summary="Rotated the signing keys")
    other = agent_create(name="someone-else")
    assert episodes_mark_used(agent=other, episode_ids=[mine.pk, "not-an-id"], at=NOW) == 0
    mine.refresh_from_db()
    assert (mine.use_count, mine.last_used_at) == (0, None)


# ------------------------------------------------------------------ ranking


def test_a_used_memory_comes_before_an_unused_equal_match(agent_a):
    old = record(agent_a, summary="Rebooted the router", occurred_at=T0 - timedelta(days=40))
    new = record(agent_a, summary="Rebooted the router", occurred_at=T0 - timedelta(days=2))
    # Unused, the newer one first (recency and the tie-break).
    assert [h.obj.pk for h in search(agent_a, "router reboot").hits] == [new.pk, old.pk]
    for _ in range(5):
        episodes_mark_used(agent=agent_a, episode_ids=[old.pk], at=T0)
    hits = search(agent_a, "router reboot").hits
    assert [h.obj.pk for h in hits] == [old.pk, new.pk]
    assert hits[0].signals["salience"] > hits[1].signals["salience"]


def test_the_writers_salience_orders_equal_matches(agent_a):
    low = record(agent_a, summary="Paged the on-call engineer", salience=0.05)
    high = record(agent_a, summary="Paged the on-call engineer", salience=0.95)
    assert [h.obj.pk for h in search(agent_a, "paged on-call").hits][0] == high.pk
    assert low.pk in [h.obj.pk for h in search(agent_a, "paged on-call").hits]


def test_a_decayed_memory_is_still_found_when_asked_for_precisely(agent_a):
    faded = record(
        agent_a,
        summary="Quarterly firewall audit for the Zanzibar vendor passed",
        salience=0.1,
        occurred_at=T0 - timedelta(days=3 * 365),
    )
    for i in range(30):
        record(
            agent_a,
            summary=f"Firewall rule {i} reviewed for the staging vendor",
            salience=1.0,
            occurred_at=T0 - timedelta(hours=i),
        )
    result = search(agent_a, "Zanzibar vendor firewall audit")
    assert result.hits[0].obj.pk == faded.pk
    assert result.hits[0].signals["salience"] < 0.01


def test_the_scales_are_the_fused_score_times_their_factors(agent_a):
    record(agent_a, summary="Renewed the certificate", occurred_at=T0 - timedelta(days=200))
    top = search(agent_a, "certificate").hits[0]
    w, k = fusion.SIGNAL_WEIGHTS, fusion.RRF_K
    fused = w["text"] * top.signals["coverage"] ** fusion.TEXT_COVERAGE_POWER / (k + 1)
    fused += w["recency"] / (k + 1)
    factor = 1 + fusion.SALIENCE_WEIGHT * (top.signals["salience"] - 0.5)
    factor *= 1 + fusion.AUTHORITY_WEIGHT * (top.signals["trust"] - 0.5)
    assert top.score == pytest.approx(fused * factor, abs=1e-6)


# ------------------------------------------------------------------ replay


def _feedback_event(agent, used, outcome):
    events_append(
        agent=agent,
        drafts=[
            EventDraft(
                event_type="recall.feedback",
                payload={
                    "trace_id": "t",
                    "route": "what_happened",
                    "used": used,
                    "outcome": outcome,
                    "failure_code": "",
                    "note": "",
                },
            )
        ],
    )


def test_a_rebuild_replays_the_use_marks_from_feedback_events(agent_a):
    used = record(agent_a, summary="Rotated the signing keys")
    failed = record(agent_a, summary="Restarted the queue")
    _feedback_event(agent_a, [str(used.pk)], "success")
    _feedback_event(agent_a, [str(used.pk), "fact-1"], "partial")
    _feedback_event(agent_a, [str(failed.pk)], "failure")
    episodes_mark_used(agent=agent_a, episode_ids=[used.pk], at=NOW)
    episodes_mark_used(agent=agent_a, episode_ids=[used.pk], at=NOW)

    rebuild_projection(agent=agent_a)

    rows = {e.pk: e for e in Episode.objects.filter(agent=agent_a)}
    assert rows[used.pk].use_count == 2
    assert rows[used.pk].last_used_at is not None
    assert (rows[failed.pk].use_count, rows[failed.pk].last_used_at) == (0, None)


# ------------------------------------------------------------------- authority


def test_the_agents_own_observation_comes_before_a_third_partys_equal_account(agent_a):
    heard = record(agent_a, summary="Rotated the signing keys", source_type="third_party")
    seen = record(
        agent_a,
        summary="Rotated the signing keys",
        source_type="observation",
        occurred_at=T0 - timedelta(minutes=5),  # older: recency alone would put it second
    )
    hits = search(agent_a, "signing keys rotated").hits
    assert [h.obj.pk for h in hits] == [seen.pk, heard.pk]
    assert hits[0].signals["trust"] > hits[1].signals["trust"] == 0.0


def test_a_third_partys_precise_match_is_still_found_first(agent_a):
    told = record(
        agent_a,
        summary="The Oberhausen depot switched its courier to Lindqvist Haulage",
        source_type="third_party",
    )
    for i in range(20):
        record(
            agent_a,
            summary=f"Checked courier manifest {i} at the main depot",
            source_type="operator",
            occurred_at=T0 - timedelta(hours=i),
        )
    hits = search(agent_a, "Oberhausen depot courier Lindqvist").hits
    assert hits[0].obj.pk == told.pk


def test_trust_runs_from_third_party_to_operator():
    assert fusion._trust("third_party") == 0.0
    assert fusion._trust("operator") == 1.0
    assert 0.0 < fusion._trust("agent_inference") < fusion._trust("user_statement") < 1.0
    assert fusion._trust("nonsense") == 0.0
