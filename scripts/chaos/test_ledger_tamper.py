"""Ledger tamper detection in short (ledger_tamper.py in full, docs/reliability.md):
every attack of the script on a smaller ledger (4 rounds, ~80 events of every
kind), each found by `ledger_verify` where it was made — or, for the two
beyond the database alone, with an anchor kept outside it. A few seconds.
"""

from __future__ import annotations

import ledger_tamper
import pytest

from conftest import make_client
from ledger.models import Event, Tombstone
from piper.tenancy.models import Scope

pytestmark = pytest.mark.django_db


def test_every_tampering_is_found_where_it_was_made():
    scopes = (Scope.READ, Scope.WRITE, Scope.ADMIN)
    a, b = make_client("tamper-a", scopes=scopes), make_client("tamper-b", scopes=scopes)
    ledger_tamper.build(a, rounds=4)
    ledger_tamper.build(b, rounds=1)
    kinds = set(Event.objects.filter(agent=a.agent).values_list("event_type", flat=True))
    assert len(kinds) >= 20, sorted(kinds)
    assert Tombstone.objects.filter(agent=a.agent).exists()  # the erasure purged some

    outcomes = ledger_tamper.attack_all(a.agent, b.agent)

    assert [v for o in outcomes for v in o.violations] == []
    assert {o.attack.name for o in outcomes} == {attack.name for attack in ledger_tamper.ATTACKS}
    found = [o for o in outcomes if not o.attack.limit]
    assert all(o.reports["a"].startswith("BROKEN") for o in found)
    # Every attack was rolled back: the ledger verifies again.
    assert ledger_tamper._verify(a.agent).startswith("ok")
    assert ledger_tamper._verify(b.agent).startswith("ok")
