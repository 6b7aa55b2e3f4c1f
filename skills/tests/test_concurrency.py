"""Concurrent changes to one skill's versions: one winner, no deadlock.

These tests commit (transaction=True) and write from real threads, each with
its own database connection, as separate web processes would. Each writer
runs in one transaction the way the API runs a request (the report, then the
automatic promotion it triggers), and without the API's deadlock retry, so a
lock-order cycle shows as the DeadlockDetected PostgreSQL raises.
"""

from __future__ import annotations

import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connection, transaction

from facts.tests.api_helpers import post
from piper.errors import Conflict
from piper.tenancy.tests.factories import AgentFactory
from skills.models import SkillVersion, VersionTransition
from skills.services import lifecycle
from skills.tests.factories import experimental, make_version, report, run_queued_validations

pytestmark = pytest.mark.django_db(transaction=True)

VERIFIED = {"externally_verified": True, "evidence": {"checked_by": "ci"}}


def race(writes) -> list[str | None]:
    """Run every write in its own thread and connection, all started at once.
    Returns, per write, None or the traceback of what it raised."""
    start = threading.Barrier(len(writes))

    def run(write):
        try:
            start.wait(timeout=60)
            with transaction.atomic():
                write()
            return None
        except Exception:
            return traceback.format_exc(limit=4)
        finally:
            connection.close()

    with ThreadPoolExecutor(len(writes)) as pool:
        return list(pool.map(run, writes))


def one_short(version: SkillVersion) -> None:
    """Verified successes up to one short of what validates the version."""
    for n in range(settings.SKILLS_PROMOTION_SUCCESSES - 1):
        report(version, record=f"INV-{n}", **VERIFIED)


def two_experimental_versions():
    older = experimental(agent=AgentFactory(), holdout=[])
    newer = make_version(older.skill, holdout=[])
    run_queued_validations(newer)  # examples: experimental, which queues a drawn replay
    run_queued_validations(newer)  # the drawn replay: evidence toward validated
    newer.refresh_from_db()
    assert (older.status, newer.status) == ("experimental", "experimental")
    return older, newer


def test_last_evidence_for_two_versions_at_once_validates_the_newer_without_deadlock(
    in_process_sandbox,
):
    """Reports for an older and a newer version of one skill, all at once, each
    completing the evidence: validating the newer deprecates the older. It
    used to lock the older version while holding the agent's ledger chain,
    while a report on the older held that version and waited for the chain —
    PostgreSQL broke the cycle with a deadlock error (a 500 once the API's
    retries ran out)."""
    for _ in range(3):
        older, newer = two_experimental_versions()
        one_short(older)
        one_short(newer)
        writes = [
            (lambda v=version, n=n: report(v, record=f"INV-race-{n}", **VERIFIED))
            for n in range(3)
            for version in (older, newer)
        ]
        failures = [f for f in race(writes) if f]
        assert failures == []
        older.refresh_from_db()
        newer.refresh_from_db()
        assert (older.status, newer.status) == ("deprecated", "validated")
        validated = VersionTransition.objects.filter(to_status="validated")
        assert validated.filter(version=newer).count() == 1
        assert validated.filter(version=older).count() <= 1


def test_concurrent_promotions_and_reports_validate_once(in_process_sandbox):
    """An experimental version one verified success short: promotes and the
    report that completes the evidence, all at once. Exactly one
    experimental → validated transition; the promotes that lose are 409s."""
    version = experimental(agent=AgentFactory(), holdout=[])
    one_short(version)
    outcomes: list[str] = []

    def promote():
        try:
            lifecycle.version_promote(agent=version.agent, version_id=version.pk)
            outcomes.append("promoted")
        except Conflict as exc:
            outcomes.append(exc.code)

    writes = [promote] * 4 + [
        (lambda n=n: report(version, record=f"INV-race-{n}", **VERIFIED)) for n in range(4)
    ]
    assert [f for f in race(writes) if f] == []
    version.refresh_from_db()
    assert version.status == "validated"
    assert VersionTransition.objects.filter(version=version, to_status="validated").count() == 1
    assert outcomes.count("promoted") <= 1
    assert set(outcomes) <= {"promoted", "evidence_missing", "invalid_transition"}


def deprecated_with_evidence():
    """An older version deprecated by a newer validated one, its evidence intact."""
    older = experimental(agent=AgentFactory(), holdout=[])
    one_short(older)
    report(older, record="INV-last", **VERIFIED)
    newer = make_version(older.skill, holdout=[])
    run_queued_validations(newer)  # examples, then the drawn replay
    run_queued_validations(newer)
    one_short(newer)
    report(newer, record="INV-last", **VERIFIED)
    older.refresh_from_db()
    newer.refresh_from_db()
    assert (older.status, newer.status) == ("deprecated", "validated")
    return older


def test_promotions_at_once_naming_the_status_take_one_step(in_process_sandbox):
    """Promote is one step from where the version is: four at once of a
    deprecated version with its evidence took two steps (deprecated →
    experimental → validated). Naming the status read makes it one."""
    older = deprecated_with_evidence()
    outcomes: list[str] = []

    def promote():
        try:
            lifecycle.version_promote(
                agent=older.agent, version_id=older.pk, from_status="deprecated"
            )
            outcomes.append("promoted")
        except Conflict as exc:
            outcomes.append(exc.code)

    assert [f for f in race([promote] * 4) if f] == []
    assert sorted(outcomes) == ["promoted"] + ["stale_status"] * 3
    older.refresh_from_db()
    assert older.status == "experimental"


def test_a_stale_from_status_is_409_and_changes_nothing(in_process_sandbox, client_a):
    version = experimental(agent=client_a.agent, holdout=[])

    response = post(
        client_a, f"/api/v1/skills/versions/{version.pk}/promote", {"from_status": "candidate"}
    )

    assert response.status_code == 409
    assert response.json() == {
        "error": {
            "code": "stale_status",
            "message": "skill version is experimental, not candidate; read it again",
            "details": {"status": "experimental", "from_status": "candidate"},
        }
    }
    version.refresh_from_db()
    assert version.status == "experimental"
