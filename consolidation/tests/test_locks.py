"""A consolidation step locks its run's row, not its agent's: every other write of
the agent inserts rows whose foreign key takes KEY SHARE on the agent's row, and
would wait for the whole step — and deadlock with it over the ledger chain, as
scripts/chaos/worker_kill.py found (a facts run failed "deadlock detected" with
an intention firing). Another session probes the agent's row while a step
holds its locks (issue 18)."""

import psycopg
import pytest
from django.db import connection

from consolidation import services
from consolidation.services import consolidate
from consolidation.tests.factories import said
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db(transaction=True)


def key_share_now(agent_id) -> str:
    """What another writer of the agent gets right now: 'free' or 'locked'."""
    params = connection.get_connection_params()
    for name in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(name, None)
    with psycopg.connect(**params) as other:
        try:
            other.execute(
                "SELECT 1 FROM tenancy_agent WHERE id = %s FOR KEY SHARE NOWAIT", [agent_id]
            )
            return "free"
        except psycopg.errors.LockNotAvailable:
            return "locked"


def test_a_step_leaves_the_agents_row_to_its_other_writers(monkeypatch):
    agent = AgentFactory(name="busy")
    said(agent, "Billing-api is owned by team-7.")
    seen = []
    real = services._consolidate_episodes

    def probing(run, rows, extractors):
        seen.append(key_share_now(agent.pk))  # inside the step's transaction
        return real(run, rows, extractors)

    monkeypatch.setattr(services, "_consolidate_episodes", probing)
    run = consolidate(agent=agent, kind="facts")
    assert run.status == "succeeded"
    assert seen == ["free"]
