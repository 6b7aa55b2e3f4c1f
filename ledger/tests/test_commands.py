"""python manage.py ledger_verify [--agent NAME|ID]."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.selectors import PAYLOAD_ALTERED
from ledger.services import EventDraft, events_append
from ledger.tests.tampering import behind_the_triggers_back
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def verify(*args) -> str:
    out = StringIO()
    call_command("ledger_verify", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def agents():
    alpha, beta = AgentFactory(name="alpha"), AgentFactory(name="beta")
    alpha_events = events_append(
        agent=alpha, drafts=[EventDraft(event_type="a.b", payload={"n": n}) for n in range(4)]
    )
    events_append(agent=beta, drafts=[EventDraft(event_type="a.b")])
    return alpha, beta, alpha_events


def test_clean_chains(agents):
    assert verify() == "ok      alpha: 4 events\nok      beta: 1 events\n"


def test_agent_without_events():
    AgentFactory(name="quiet")
    assert verify() == "ok      quiet: 0 events\n"


def test_altered_payload_is_reported_and_the_command_fails(agents):
    alpha, _, events = agents
    behind_the_triggers_back(
        "UPDATE ledger_event SET payload = '{\"n\": 42}'::jsonb WHERE id = %s", [events[2].pk]
    )
    out = StringIO()
    with pytest.raises(CommandError, match=r"^1 chain\(s\) broken$") as caught:
        call_command("ledger_verify", stdout=out)
    assert caught.value.returncode == 1  # manage.py exits with it
    assert out.getvalue() == (
        f"BROKEN  alpha: first break at seq 3 (event {events[2].pk}): "
        f"{PAYLOAD_ALTERED[2]}\n"
        "ok      beta: 1 events\n"
    )


def test_altered_hash_is_reported(agents):
    _, _, events = agents
    behind_the_triggers_back(
        "UPDATE ledger_event SET hash = repeat('e', 64) WHERE id = %s", [events[0].pk]
    )
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("ledger_verify", "--agent", "alpha", stdout=out)
    assert out.getvalue() == (
        f"BROKEN  alpha: first break at seq 1 (event {events[0].pk}): "
        "hash does not match the event's fields (event altered)\n"
    )


def test_deleted_event_is_reported(agents):
    _, _, events = agents
    behind_the_triggers_back("DELETE FROM ledger_event WHERE id = %s", [events[1].pk])
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("ledger_verify", "--agent", "alpha", stdout=out)
    assert out.getvalue() == (
        f"BROKEN  alpha: first break at seq 3 (event {events[2].pk}): seq 3 where 2 was expected (missing event)\n"
    )


def test_deleted_last_event_is_reported(agents):
    _, _, events = agents
    behind_the_triggers_back("DELETE FROM ledger_event WHERE id = %s", [events[3].pk])
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("ledger_verify", "--agent", "alpha", stdout=out)
    assert out.getvalue() == (
        "BROKEN  alpha: first break at seq 4: chain head says seq 4 but the chain ends at 3 (events removed)\n"
    )


def test_agent_filter_by_name_and_by_id(agents):
    alpha, beta, events = agents
    behind_the_triggers_back("UPDATE ledger_event SET actor = 'x' WHERE id = %s", [events[0].pk])
    assert verify("--agent", "beta") == "ok      beta: 1 events\n"
    assert verify("--agent", str(beta.pk)) == "ok      beta: 1 events\n"
    with pytest.raises(CommandError, match=r"^1 chain\(s\) broken$"):
        verify("--agent", str(alpha.pk))


def test_unknown_agent(agents):
    with pytest.raises(CommandError, match="^no agent 'gamma'$"):
        verify("--agent", "gamma")


def test_anchors_catch_a_chain_rewritten_with_its_head(agents, tmp_path):
    """Removing the last event and rewinding the head leaves a chain that verifies
    in the database alone; the anchor kept outside it does not agree."""
    alpha, _, events = agents
    anchors = tmp_path / "anchors.json"
    assert verify("--anchors", str(anchors)) == "ok      alpha: 4 events\nok      beta: 1 events\n"
    assert json.loads(anchors.read_text())[str(alpha.pk)] == {"seq": 4, "hash": events[3].hash}
    behind_the_triggers_back("DELETE FROM ledger_event WHERE id = %s", [events[3].pk])
    behind_the_triggers_back(
        "UPDATE ledger_chainhead SET last_seq = 3, last_hash = %s WHERE agent_id = %s",
        [events[2].hash, alpha.pk],
    )
    assert verify("--agent", "alpha") == "ok      alpha: 3 events\n"
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("ledger_verify", "--anchors", str(anchors), stdout=out)
    assert out.getvalue() == (
        f"BROKEN  alpha: first break at seq 4: the anchor kept outside the database holds "
        f"seq 4 with hash {events[3].hash[:12]}…, but the chain ends at seq 3 "
        "(events removed, head rewound)\n"
        "ok      beta: 1 events\n"
    )
    # A broken chain's anchor stays where it was.
    assert json.loads(anchors.read_text())[str(alpha.pk)]["seq"] == 4
