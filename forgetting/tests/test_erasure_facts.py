"""Erasure in semantic memory: what is left is what a replay of the surviving ledger makes.

The history is facts' own varied one (facts.tests.test_projection): every
kind of write, contests, corrections, relations, a redefinition and two
authority orders. Erasing any one of its events must leave the projection
equal, row for row, to a rebuild from the ledger — the proof that nothing
erased regenerates and nothing else is lost.
"""

import pytest

from facts.models import Entity, EntityAlias, Fact, FactText
from facts.projection import HANDLERS
from facts.services import rebuild_projection
from facts.tests.test_projection import snapshot, write_history
from forgetting.services.erasure import Selector, erasure_run
from ledger.models import Event
from ledger.selectors import chain_verify
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db(transaction=True)


def facts_event_ids(agent) -> list:
    return list(
        Event.objects.filter(agent=agent, event_type__in=list(HANDLERS))
        .order_by("seq")
        .values_list("pk", flat=True)
    )


def erase(agent, **selector):
    return erasure_run(
        agent=agent, selector=Selector(**selector), reason="test erasure", requested_by="test"
    )


@pytest.mark.parametrize("position", range(38))
def test_erasing_any_event_leaves_what_a_rebuild_makes(position):
    agent = AgentFactory(name="erased")
    bystander = AgentFactory(name="bystander")
    write_history(agent)
    write_history(bystander)
    theirs = snapshot(agent=bystander)
    event_id = facts_event_ids(agent)[position]

    result = erase(agent, event_ids=(event_id,))

    assert result.receipt.residue_found == 0, [f for f in result.residue if f["found"]]
    live = snapshot(agent=agent)
    rebuild_projection(agent=agent)
    assert snapshot(agent=agent) == live
    assert snapshot(agent=bystander) == theirs
    assert chain_verify(agent=agent).ok
    assert Event.objects.get(pk=event_id).payload == {}


def test_erasing_a_subject_takes_its_facts_names_and_texts():
    agent = AgentFactory(name="erased")
    write_history(agent)
    alice = Entity.objects.get(agent=agent, name="Alice")
    bob = Entity.objects.get(agent=agent, name="Bob")
    assert Fact.objects.filter(agent=agent, object_entity=alice).exists()  # Bob knows Al

    result = erase(agent, subject="ally")

    assert result.receipt.residue_found == 0, [f for f in result.residue if f["found"]]
    assert not Entity.objects.filter(pk=alice.pk).exists()
    assert not EntityAlias.objects.filter(agent=agent, alias__in=["Alice", "Ally", "Al"]).exists()
    assert not Fact.objects.filter(agent=agent, subject_id=alice.pk).exists()
    assert not Fact.objects.filter(agent=agent, object_entity_id=alice.pk).exists()
    assert not FactText.objects.filter(agent=agent, text__icontains="ally").exists()
    # Bob's other facts are untouched: he still knows Carol.
    assert Fact.objects.filter(
        agent=agent, subject=bob, object_entity__name="Carol", superseded_at__isnull=True
    ).exists()
    live = snapshot(agent=agent)
    rebuild_projection(agent=agent)
    assert snapshot(agent=agent) == live
