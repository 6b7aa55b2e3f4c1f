"""The nightly ledger.verify_chains with anchors (settings.PIPER_LEDGER_ANCHORS):
each chain's last verified end is kept in a file outside the database, and a
chain that no longer holds it is reported broken — the tampering the database
alone cannot show (the last events removed, the head rewound)."""

import json

import pytest

from ledger.services import EventDraft, events_append
from ledger.tasks import verify_chains
from ledger.tests.tampering import behind_the_triggers_back
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def anchors(settings, tmp_path):
    path = tmp_path / "kept-elsewhere" / "ledger-anchors.json"
    settings.PIPER_LEDGER_ANCHORS = str(path)
    return path


@pytest.fixture
def chains():
    alpha, beta = AgentFactory(name="alpha"), AgentFactory(name="beta")
    events = events_append(
        agent=alpha, drafts=[EventDraft(event_type="a.b", payload={"n": n}) for n in range(5)]
    )
    events_append(agent=beta, drafts=[EventDraft(event_type="a.b")])
    return alpha, beta, events


def rewind(agent, events, keep: int) -> None:
    """Remove the events after the first `keep` and move the head back onto the last
    one kept: a chain the database alone finds intact."""
    behind_the_triggers_back(
        "DELETE FROM ledger_event WHERE id = ANY(%s)", [[e.pk for e in events[keep:]]]
    )
    behind_the_triggers_back(
        "UPDATE ledger_chainhead SET last_seq = %s, last_hash = %s WHERE agent_id = %s",
        [keep, events[keep - 1].hash, agent.pk],
    )


def test_the_first_night_anchors_every_chain_at_its_end(anchors, chains):
    alpha, beta, events = chains
    summary = verify_chains()
    assert summary["broken"] == []
    assert summary["anchors"] == {"file": str(anchors), "checked": 0, "moved": 2, "error": None}
    kept = json.loads(anchors.read_text())
    assert kept == {
        str(alpha.pk): {"seq": 5, "hash": events[4].hash},
        str(beta.pk): {"seq": 1, "hash": beta_head(beta)},
    }


def beta_head(agent) -> str:
    from ledger.models import ChainHead

    return ChainHead.objects.get(agent=agent).last_hash


def test_a_rewound_head_is_found_the_next_night_and_its_anchor_stays(anchors, chains):
    alpha, _, events = chains
    verify_chains()
    rewind(alpha, events, keep=3)

    summary = verify_chains()

    assert summary["anchors"]["checked"] == 2
    [broken] = summary["broken"]
    assert (broken["agent"], broken["seq"]) == ("alpha", 5)
    assert "the anchor kept outside the database holds seq 5" in broken["reason"]
    assert "but the chain ends at seq 3" in broken["reason"]
    # The anchor stays at seq 5: the alarm repeats every night until someone looks.
    assert json.loads(anchors.read_text())[str(alpha.pk)] == {"seq": 5, "hash": events[4].hash}
    assert verify_chains()["broken"][0]["seq"] == 5


def test_without_anchors_the_same_rewound_chain_verifies(settings, chains):
    """What the anchors are for: the database alone cannot tell."""
    alpha, _, events = chains
    settings.PIPER_LEDGER_ANCHORS = ""
    rewind(alpha, events, keep=3)
    summary = verify_chains()
    assert summary["broken"] == []
    assert summary["events_by_agent"]["alpha"] == 3
    assert summary["anchors"]["file"] is None


def test_anchors_move_on_with_new_events(anchors, chains):
    alpha, _, _ = chains
    verify_chains()
    [later] = events_append(agent=alpha, drafts=[EventDraft(event_type="a.b")])
    summary = verify_chains()
    assert (summary["broken"], summary["anchors"]["moved"]) == ([], 1)
    assert json.loads(anchors.read_text())[str(alpha.pk)] == {"seq": 6, "hash": later.hash}


def test_an_unreadable_anchors_file_is_reported_and_left_alone(anchors, chains):
    anchors.parent.mkdir(parents=True)
    anchors.write_text("not json")
    summary = verify_chains()
    assert summary["broken"] == []
    assert "is not an anchors file" in summary["anchors"]["error"]
    assert anchors.read_text() == "not json"
