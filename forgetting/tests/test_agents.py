"""The hard delete of a whole agent: everything of it goes, nothing of the other.

Both agents hold the same story — the same subject names, texts, documents
and facts — so nothing can tell them apart but the agent.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection

from forgetting.models import Erasure, ErasureKind
from forgetting.services.agents import agent_hard_delete
from forgetting.services.erasure import Selector, erasure_run
from forgetting.tests.world import build
from ledger.models import Event
from ledger.selectors import chain_verify
from ledger.services import event_append
from piper.errors import Conflict
from piper.tenancy.models import Agent
from piper.tenancy.services import api_key_create
from piper.tenancy.tests.factories import AgentFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def rows_of(agent_id) -> dict[str, int]:
    """Every table with an agent column: the agent's rows."""
    counts = {}
    with connection.cursor() as cursor:
        for model in apps.get_models():
            columns = {f.attname for f in model._meta.concrete_fields}
            if "agent_id" in columns and not model._meta.proxy:
                cursor.execute(
                    f'SELECT count(*) FROM "{model._meta.db_table}" WHERE agent_id = %s',
                    [agent_id],
                )
                counts[model._meta.db_table] = cursor.fetchone()[0]
    return counts


def content_of(agent_id) -> list:
    """What the agent holds, row by row, in the tables that hold words."""
    from episodes.models import Episode, SourceChunk
    from facts.models import Fact, FactText
    from intentions.models import Intention, WorkingState

    return [
        sorted(Episode.objects.filter(agent_id=agent_id).values_list("summary", "embedding_model")),
        sorted(SourceChunk.objects.filter(agent_id=agent_id).values_list("text", flat=True)),
        sorted(Fact.objects.filter(agent_id=agent_id).values_list("object_value", "status")),
        sorted(FactText.objects.filter(agent_id=agent_id).values_list("text", flat=True)),
        sorted(
            WorkingState.objects.filter(agent_id=agent_id).values_list("state", flat=True), key=str
        ),
        sorted(Intention.objects.filter(agent_id=agent_id).values_list("description", flat=True)),
        sorted(Event.objects.filter(agent_id=agent_id).values_list("hash", flat=True)),
    ]


def test_deleting_an_agent_removes_all_of_it_and_nothing_of_the_other():
    gone, kept = AgentFactory(name="leaving"), AgentFactory(name="staying")
    for agent in (gone, kept):
        build(agent)
        api_key_create(agent=agent, name="k", scopes=["read"])
    erasure_run(
        agent=gone,
        selector=Selector(actor="backup-bot"),
        reason="earlier request",
        requested_by="test",
    )
    before = (rows_of(kept.pk), content_of(kept.pk))
    assert sum(rows_of(gone.pk).values()) > 30

    receipt = agent_hard_delete(agent=gone, reason="contract ended", requested_by="ops")

    assert (receipt.status, receipt.residue_found) == ("completed", 0), [
        f for f in receipt.residue if f["found"]
    ]
    assert (receipt.kind, receipt.agent_name, receipt.agent_id) == (
        ErasureKind.AGENT,
        "leaving",
        None,
    )
    assert receipt.counts["ledger_event"] > 10 and receipt.counts["episodes_episode"] == 2
    assert set(rows_of(gone.pk).values()) == {0}
    assert not Agent.objects.filter(pk=gone.pk).exists()
    # The earlier receipt (its selector named the agent's data) went with it.
    assert list(Erasure.objects.filter(agent_ref=gone.pk)) == [receipt]
    assert (rows_of(kept.pk), content_of(kept.pk)) == before
    assert chain_verify(agent=kept).ok


def test_a_legal_hold_stops_the_delete_until_lifted():
    agent = AgentFactory()
    event_append(agent=agent, event_type="a.b", retention_class="permanent")
    with pytest.raises(Conflict):
        agent_hard_delete(agent=agent, reason="x", requested_by="ops")
    assert Agent.objects.filter(pk=agent.pk).exists()
    receipt = agent_hard_delete(
        agent=agent, reason="x", requested_by="ops", legal_hold_lifted="hold ended"
    )
    assert receipt.residue_found == 0


def test_the_ledger_lets_only_the_named_agents_rows_go():
    mine, theirs = AgentFactory(), AgentFactory()
    event = event_append(agent=theirs, event_type="a.b")
    with pytest.raises(IntegrityError, match="append-only"), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('piper.agent_delete', %s, false); "
            "DELETE FROM ledger_event WHERE id = %s",
            [str(mine.pk), event.pk],
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('piper.agent_delete', '', false)")
    assert Event.objects.filter(pk=event.pk).exists()


def test_the_command_asks_for_the_name_and_prints_the_receipt(monkeypatch, capsys):
    agent = AgentFactory(name="to-go")
    event_append(agent=agent, event_type="a.b")
    monkeypatch.setattr("builtins.input", lambda prompt: "not-it")
    with pytest.raises(CommandError, match="not confirmed"):
        call_command("agent_delete", "to-go", reason="x")
    assert Agent.objects.filter(pk=agent.pk).exists()
    monkeypatch.setattr("builtins.input", lambda prompt: "to-go")
    call_command("agent_delete", "to-go", reason="x")
    out = capsys.readouterr().out
    assert "deleted agent to-go" in out and "residue found 0" in out
    assert not Agent.objects.filter(pk=agent.pk).exists()
