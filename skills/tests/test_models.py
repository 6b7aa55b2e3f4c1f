"""What PostgreSQL itself enforces for skills (migrations 0002 and 0003).

Versions are immutable except their status, which moves only along the
lifecycle (every pair tried as a raw UPDATE, behind the services' back);
history is never rewritten; every reference stays inside one agent.
"""

import itertools

import pytest
from django.db import IntegrityError, connection, transaction

from ledger.services import event_append
from piper.ids import uuid7
from piper.tenancy.tests.factories import AgentFactory
from skills.models import (
    STATUS_TRANSITIONS,
    Execution,
    SkillVersion,
    Validation,
    VersionProvenance,
    VersionStatus,
    VersionTransition,
)
from skills.tests.factories import make_skill

pytestmark = pytest.mark.django_db

STATUSES = list(VersionStatus.values)
ALLOWED = {(str(a), b) for a, targets in STATUS_TRANSITIONS.items() for b in targets}
REFUSED = [
    (a, b) for a, b in itertools.product(STATUSES, STATUSES) if a != b and (a, b) not in ALLOWED
]


def raw(sql: str, params=()) -> int:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def force_status(version, status):
    """Put a version into `status` by walking allowed transitions in raw SQL."""
    path = {
        "candidate": [],
        "experimental": ["experimental"],
        "validated": ["experimental", "validated"],
        "deprecated": ["deprecated"],
        "retired": ["retired"],
    }[status]
    for step in path:
        raw("UPDATE skills_skillversion SET status = %s WHERE id = %s", [step, version.pk])


@pytest.fixture
def version():
    return make_skill()


@pytest.mark.parametrize(("start", "target"), sorted(ALLOWED))
def test_every_lifecycle_transition_is_allowed(version, start, target):
    force_status(version, start)
    assert (
        raw("UPDATE skills_skillversion SET status = %s WHERE id = %s", [target, version.pk]) == 1
    )


@pytest.mark.parametrize(("start", "target"), REFUSED)
def test_every_other_status_change_is_refused(version, start, target):
    force_status(version, start)
    with pytest.raises(IntegrityError, match="not a transition of the lifecycle"):
        raw("UPDATE skills_skillversion SET status = %s WHERE id = %s", [target, version.pk])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("purpose", "'something else'"),
        ("procedure", "'def run(p, t): return 1'"),
        ("validator", "''"),
        ("trigger", """'{"regex": "x"}'::jsonb"""),
        ("parameter_schema", "'{}'::jsonb"),
        ("examples", "'[]'::jsonb"),
        ("required_tools", "ARRAY['crc32']::varchar[]"),
        ("number", "7"),
        ("intent_embedding", "array_fill(0.5, ARRAY[384])::vector"),
        ("scope", "'elsewhere'"),
        ("source_event_id", "NULL"),
    ],
)
def test_a_versions_content_is_immutable(version, column, value):
    with pytest.raises(IntegrityError, match="a version is immutable"):
        raw(f"UPDATE skills_skillversion SET {column} = {value} WHERE id = %s", [version.pk])


def test_status_changed_at_may_move_and_versions_are_never_deleted(version):
    assert (
        raw("UPDATE skills_skillversion SET status_changed_at = now() WHERE id = %s", [version.pk])
        == 1
    )
    with pytest.raises(IntegrityError, match="versions are history"):
        raw("DELETE FROM skills_skillversion WHERE id = %s", [version.pk])


def test_transitions_and_provenance_are_history(version):
    transition = VersionTransition.objects.get(version=version)
    with pytest.raises(IntegrityError, match="is history"):
        raw("UPDATE skills_versiontransition SET reason = 'x' WHERE id = %s", [transition.pk])
    with pytest.raises(IntegrityError, match="is history"):
        raw("DELETE FROM skills_versiontransition WHERE id = %s", [transition.pk])


def test_a_finished_validation_is_final(version):
    validation = Validation.objects.get(version=version)
    assert raw("UPDATE skills_validation SET error = 'x' WHERE id = %s", [validation.pk]) == 1
    raw(
        "UPDATE skills_validation SET status = 'error', finished_at = now() WHERE id = %s",
        [validation.pk],
    )
    with pytest.raises(IntegrityError, match="a finished record is final"):
        raw("UPDATE skills_validation SET status = 'passed' WHERE id = %s", [validation.pk])
    with pytest.raises(IntegrityError, match="a finished record is final"):
        raw("DELETE FROM skills_validation WHERE id = %s", [validation.pk])


def test_a_queued_validation_cannot_change_what_was_asked(version):
    validation = Validation.objects.get(version=version)
    other = make_skill(agent=version.agent, name="other")
    with pytest.raises(IntegrityError, match="cannot change"):
        raw("UPDATE skills_validation SET version_id = %s WHERE id = %s", [other.pk, validation.pk])


def test_a_finished_execution_must_say_whether_it_succeeded(version):
    with (
        pytest.raises(IntegrityError, match="skills_execution_finished_iff_done"),
        transaction.atomic(),
    ):
        Execution.objects.create(
            agent=version.agent,
            version=version,
            source="reported",
            status="finished",
            version_status="candidate",
            params={},
            novel_params=True,
            source_event=version.source_event,
        )


def test_an_externally_verified_execution_needs_evidence(version):
    with (
        pytest.raises(IntegrityError, match="skills_execution_verified_has_evidence"),
        transaction.atomic(),
    ):
        Execution.objects.create(
            agent=version.agent,
            version=version,
            source="reported",
            status="finished",
            succeeded=True,
            finished_at="2030-01-01T00:00:00Z",
            externally_verified=True,
            version_status="candidate",
            params={},
            novel_params=True,
            source_event=version.source_event,
        )


def test_references_stay_inside_one_agent(version):
    stranger = AgentFactory()
    foreign_event = event_append(agent=stranger, event_type="tool.called")
    with (
        pytest.raises(IntegrityError, match="skills_provenance_event_same_agent"),
        transaction.atomic(),
    ):
        VersionProvenance.objects.create(agent=version.agent, version=version, event=foreign_event)
        raw("SET CONSTRAINTS ALL IMMEDIATE")
    with (
        pytest.raises(IntegrityError, match="skills_execution_version_same_agent"),
        transaction.atomic(),
    ):
        Execution.objects.create(
            agent=stranger,
            version=version,
            source="sandbox",
            version_status="validated",
            params={},
            novel_params=True,
            source_event=foreign_event,
        )
        raw("SET CONSTRAINTS ALL IMMEDIATE")


def test_a_version_supersedes_only_its_own_skills_versions(version):
    other = make_skill(agent=version.agent, name="other")
    copy = SkillVersion.objects.get(pk=version.pk)
    copy.pk, copy.number, copy.supersedes = uuid7(), 9, other
    with (
        pytest.raises(IntegrityError, match="skills_version_supersedes_same_skill"),
        transaction.atomic(),
    ):
        copy.save(force_insert=True)
        raw("SET CONSTRAINTS ALL IMMEDIATE")


def test_skill_names_are_unique_per_agent(version):
    with pytest.raises(IntegrityError, match="skills_skill_name_unique"), transaction.atomic():
        raw(
            "INSERT INTO skills_skill (id, agent_id, name, source_event_id, created_at) "
            "VALUES (gen_random_uuid(), %s, %s, %s, now())",
            [version.agent_id, version.skill.name, version.source_event_id],
        )
