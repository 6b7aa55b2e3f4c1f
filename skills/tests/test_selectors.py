"""Matching (similarity never suffices; preconditions and contraindications decide)
and the statistics derived from executions."""

import pytest

from piper.tenancy.tests.factories import AgentFactory
from skills import selectors
from skills.services import lifecycle
from skills.tests.factories import experimental, report, validated

pytestmark = pytest.mark.django_db

TASK = "Compute the checksum for invoice INV-1001"
LINUX = {"env": {"os": "linux"}}


@pytest.fixture
def agent():
    return AgentFactory()


def reasons(result) -> list:
    return [(c.version.skill.name, [r["type"] for r in c.reasons]) for c in result.near_misses]


def test_an_applicable_validated_version_is_matched(agent, in_process_sandbox):
    version = validated(agent)
    result = selectors.skill_match(agent=agent, task=TASK, context=LINUX)

    [match] = result.applicable
    assert match.version.pk == version.pk
    assert match.similarity >= 0.3
    assert match.trigger.keywords_found == ("checksum", "invoice")
    assert match.score == round(match.similarity + 0.1, 4)
    assert result.near_misses == []


def test_a_failed_precondition_makes_it_a_near_miss_with_the_path(agent, in_process_sandbox):
    validated(agent)
    result = selectors.skill_match(agent=agent, task=TASK, context={"env": {"os": "windows"}})

    assert result.applicable == []
    [miss] = result.near_misses
    assert miss.reasons == [
        {
            "type": "precondition_failed",
            "path": "env.os",
            "op": "eq",
            "value": "linux",
            "actual": "windows",
        }
    ]


def test_an_absent_context_fails_the_precondition(agent, in_process_sandbox):
    validated(agent)
    result = selectors.skill_match(agent=agent, task=TASK, context={})
    assert result.near_misses[0].reasons[0]["actual"] is None


def test_contraindications_reject_a_look_alike_task(agent, in_process_sandbox):
    validated(agent)
    by_context = selectors.skill_match(
        agent=agent, task=TASK, context={**LINUX, "invoice": {"currency": "JPY"}}
    )
    by_keyword = selectors.skill_match(
        agent=agent, task="Compute the checksum for the credit note of invoice 7", context=LINUX
    )

    assert by_context.applicable == [] and by_keyword.applicable == []
    assert by_context.near_misses[0].reasons == [
        {
            "type": "contraindicated",
            "path": "invoice.currency",
            "op": "eq",
            "value": "JPY",
            "reason": "yen invoices differ",
            "actual": "JPY",
        }
    ]
    assert by_keyword.near_misses[0].reasons == [
        {
            "type": "contraindicated",
            "keywords": ["credit note"],
            "reason": "credit notes use another checksum",
            "found": ["credit note"],
        }
    ]


def test_similarity_without_a_trigger_match_is_not_enough(agent, in_process_sandbox):
    validated(agent, trigger={"regex": r"\bINV-\d+\b"})
    result = selectors.skill_match(
        agent=agent, task="Compute the house checksum of an invoice record", context=LINUX
    )
    assert result.applicable == []
    assert [r["type"] for r in result.near_misses[0].reasons] == ["trigger_not_matched"]
    assert result.near_misses[0].similarity > 0.9


def test_a_trigger_match_without_similarity_is_not_enough(agent, in_process_sandbox):
    validated(agent, trigger={"regex": "banana"})
    result = selectors.skill_match(agent=agent, task="banana bread recipe", context=LINUX)
    assert result.applicable == []
    assert [r["type"] for r in result.near_misses[0].reasons] == ["below_similarity"]


def test_versions_that_are_not_validated_are_only_near_misses(agent, in_process_sandbox):
    experimental(agent)
    result = selectors.skill_match(agent=agent, task=TASK, context=LINUX)
    assert result.applicable == []
    assert result.near_misses[0].reasons == [{"type": "not_validated", "status": "experimental"}]


def test_deprecated_and_retired_versions_are_never_offered(agent, in_process_sandbox):
    version = validated(agent)
    lifecycle.version_deprecate(agent=agent, version_id=version.pk, reason="stale")
    result = selectors.skill_match(agent=agent, task=TASK, context=LINUX)
    assert (result.applicable, result.near_misses) == ([], [])


def test_missing_permissions_reject(agent, in_process_sandbox):
    validated(agent, required_permissions=["admin"])
    result = selectors.skill_match(agent=agent, task=TASK, context=LINUX, scopes=["read"])
    assert result.near_misses[0].reasons == [{"type": "missing_permission", "missing": ["admin"]}]
    assert selectors.skill_match(agent=agent, task=TASK, context=LINUX, scopes=["admin"]).applicable


def test_ranked_by_similarity_and_trigger_strength(agent, in_process_sandbox):
    weak = validated(
        agent, name="weak", purpose="Rename files in a folder", trigger={"regex": "invoice"}
    )
    strong = validated(agent, name="strong")
    result = selectors.skill_match(agent=agent, task=TASK, context=LINUX)
    assert [c.version.pk for c in result.applicable] == [strong.pk, weak.pk][
        : len(result.applicable)
    ]
    assert result.applicable[0].version.pk == strong.pk


def test_another_agents_skills_are_never_seen(agent, in_process_sandbox):
    validated(agent)
    stranger = AgentFactory()
    result = selectors.skill_match(agent=stranger, task=TASK, context=LINUX)
    assert (result.applicable, result.near_misses) == ([], [])


def test_statistics_are_derived_from_executions(agent, in_process_sandbox, settings):
    settings.SKILLS_RECENT_WINDOW = 2
    version = validated(agent)  # one externally verified success on INV-9 (novel)
    report(version, succeeded=False, record="INV-1")  # an example's params: not transfer
    report(version, succeeded=True, record="INV-10")
    v = selectors.version_get(agent=agent, version_id=version.pk)

    assert (v.executions_total, v.successes, v.failures, v.verified_successes) == (3, 2, 1, 1)
    assert (v.transfer_total, v.transfer_successes) == (2, 2)
    assert (v.recent_total, v.recent_successes) == (2, 1)
    assert v.last_used_at is not None
    assert v.last_validation_status == "passed"
    assert selectors.rate(v.successes, v.executions_total) == 0.6667


def test_matching_leaves_the_planner_settings_of_the_callers_transaction_alone(db):
    from django.db import connection, transaction

    from piper.tenancy.tests.factories import AgentFactory
    from skills import selectors

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('random_page_cost')")
        before = cursor.fetchone()[0]
        selectors.skill_match(agent=AgentFactory(), task="anything at all", context={})
        cursor.execute("SELECT current_setting('random_page_cost')")
        assert cursor.fetchone()[0] == before
