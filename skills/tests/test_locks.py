"""Validating a version deprecates the skill's older versions under their row
locks — theirs only, not the agent's: every other write of the agent inserts
rows whose foreign key takes KEY SHARE on the agent's row, and would wait for
the promotion (and could deadlock with it over the ledger chain, as a
consolidation step did: consolidation/tests/test_locks.py). Issue 18."""

import pytest

from consolidation.tests.test_locks import key_share_now
from skills.services import lifecycle
from skills.tests.factories import (
    VERIFIER,
    experimental,
    make_version,
    report,
    run_queued_validations,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_deprecating_the_older_versions_leaves_the_agents_row(monkeypatch, in_process_sandbox):
    older = experimental()
    newer = make_version(older.skill)
    run_queued_validations(newer)
    run_queued_validations(newer)
    seen = []
    real = lifecycle.move

    def probing(version, target, *args, **kwargs):
        if version.pk == older.pk:  # after _supersede_older locked it
            seen.append(key_share_now(version.agent_id))
        return real(version, target, *args, **kwargs)

    monkeypatch.setattr(lifecycle, "move", probing)
    report(newer, externally_verified=True, evidence={"checked_by": "ci"}, actor=VERIFIER)
    newer.refresh_from_db()
    older.refresh_from_db()
    assert (newer.status, older.status) == ("validated", "deprecated")
    assert seen == ["free"]
