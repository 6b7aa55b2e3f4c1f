"""Skill services: definitions refused before anything is written, the lifecycle
moved only by evidence, executions counted. Validations and executions run in
the real sandbox (bubblewrap) unless a test is about a rule, not a run."""

import pytest
from django.test import override_settings

from ledger.models import Event
from ledger.services import event_append
from piper.errors import Conflict, InvalidInput, NotFound, PermissionDenied, Unprocessable
from piper.tenancy.tests.factories import AgentFactory
from skills.models import (
    Execution,
    Skill,
    SkillVersion,
    Validation,
    VersionProvenance,
    VersionTransition,
)
from skills.services import lifecycle, runs
from skills.services.definitions import skill_create, version_create
from skills.tests.factories import (
    VERIFIER,
    definition,
    expected_for,
    experimental,
    make_skill,
    make_version,
    report,
    run_queued_validations,
    validated,
)

pytestmark = pytest.mark.django_db


def written(agent) -> tuple:
    return (
        Event.objects.filter(agent=agent).count(),
        Skill.objects.filter(agent=agent).count(),
        SkillVersion.objects.filter(agent=agent).count(),
        Validation.objects.filter(agent=agent).count(),
        Execution.objects.filter(agent=agent).count(),
    )


@pytest.fixture
def agent():
    return AgentFactory()


# --------------------------------------------------------------------- definitions


class TestCreate:
    def test_a_new_skill_is_a_candidate_with_its_examples_queued_and_in_the_ledger(self, agent):
        version = make_skill(agent)

        assert (version.number, version.status, version.supersedes_id) == (1, "candidate", None)
        assert len(version.intent_embedding) == 384
        validation = Validation.objects.get(version=version)
        assert (validation.kind, validation.status, validation.cases_total) == (
            "examples",
            "queued",
            2,
        )
        assert list(
            Event.objects.filter(agent=agent).order_by("seq").values_list("event_type", flat=True)
        ) == [
            "skill.created",
            "skill.version_created",
            "skill.validation_requested",
        ]
        payload = version.source_event.payload
        assert payload["procedure"] == version.procedure
        assert payload["number"] == 1 and payload["supersedes"] is None
        assert list(
            VersionTransition.objects.filter(version=version).values_list(
                "from_status", "to_status", "reason"
            )
        ) == [("", "candidate", "created")]

    def test_a_name_in_use_is_a_conflict_and_writes_nothing(self, agent):
        make_skill(agent, name="x")
        before = written(agent)
        with pytest.raises(Conflict) as caught:
            make_skill(agent, name="x")
        assert caught.value.code == "skill_exists"
        assert written(agent) == before

    def test_the_same_name_for_another_agent_is_fine(self, agent):
        make_skill(agent, name="x")
        assert make_skill(AgentFactory(), name="x").number == 1

    @pytest.mark.parametrize(
        ("overrides", "code", "message"),
        [
            (
                {"procedure": "def run(params, tools):\n    return (\n"},
                "syntax_error",
                "procedure: syntax error on line 2: '(' was never closed",
            ),
            (
                {"validator": "def validate(params, result, tools)\n    return True\n"},
                "syntax_error",
                "validator: syntax error on line 1: expected ':'",
            ),
            (
                {"rollback": "x = 1\n  y = 2\n"},
                "syntax_error",
                "rollback: syntax error on line 2: unexpected indent",
            ),
            (
                {"procedure": "def go(params, tools):\n    return 1\n"},
                "missing_entry_point",
                "procedure: must define a top-level function run(…)",
            ),
            (
                {"parameter_schema": {"type": "objekt"}},
                "invalid_schema",
                None,
            ),
            (
                {"examples": [{"params": {"record": 5}}]},
                "invalid_example",
                "examples[0].params do not match parameter_schema: record: 5 is not of type 'string'",
            ),
            (
                {"required_tools": ["sha256", "teleport"]},
                "unknown_tool",
                None,
            ),
        ],
    )
    def test_bad_definitions_are_422_and_write_nothing(self, agent, overrides, code, message):
        before = written(agent)
        with pytest.raises(Unprocessable) as caught:
            skill_create(agent=agent, name="bad", data=definition(**overrides))
        assert caught.value.code == code
        if message:
            assert caught.value.message == message
        assert written(agent) == before

    def test_a_syntax_error_names_its_line_in_details(self, agent):
        with pytest.raises(Unprocessable) as caught:
            skill_create(
                agent=agent,
                name="bad",
                data=definition(procedure="def run(params, tools):\n    x = = 1\n"),
            )
        assert caught.value.details == {
            "procedure": {"line": 2, "offset": 9, "message": "invalid syntax"}
        }

    @pytest.mark.parametrize(
        ("overrides", "field"),
        [
            ({"trigger": {}}, "trigger"),
            ({"trigger": {"regex": "("}}, "trigger.regex"),
            ({"trigger": {"keywords": ["a"], "min_keywords": 2}}, "trigger.min_keywords"),
            ({"trigger": {"keywords": ["a"], "when": 1}}, "trigger.when"),
            (
                {"preconditions": [{"path": "env.os", "op": "like", "value": 1}]},
                "preconditions[0].op",
            ),
            (
                {"preconditions": [{"path": "a", "op": "lt", "value": "3"}]},
                "preconditions[0].value",
            ),
            (
                {"preconditions": [{"path": "a", "op": "exists", "value": 1}]},
                "preconditions[0].value",
            ),
            ({"preconditions": [{"path": "a..b", "op": "exists"}]}, "preconditions[0].path"),
            ({"contraindications": [{"keywords": []}]}, "contraindications[0].keywords"),
            (
                {"contraindications": [{"path": "a", "op": "in", "value": 1}]},
                "contraindications[0].value",
            ),
        ],
    )
    def test_bad_conditions_are_400_naming_the_field(self, agent, overrides, field):
        before = written(agent)
        with pytest.raises(InvalidInput) as caught:
            skill_create(agent=agent, name="bad", data=definition(**overrides))
        assert caught.value.code == "invalid_condition"
        assert list(caught.value.details) == [field]
        assert written(agent) == before

    def test_no_examples_is_refused(self, agent):
        with pytest.raises(InvalidInput, match="examples: a list of 1-100 cases"):
            skill_create(agent=agent, name="bad", data=definition(examples=[]))

    def test_provenance_must_be_this_agents_events(self, agent):
        mine = event_append(agent=agent, event_type="tool.failed", payload={"why": "crc"})
        theirs = event_append(agent=AgentFactory(), event_type="tool.failed")
        with pytest.raises(Unprocessable) as caught:
            make_skill(agent, provenance_events=[mine.pk, theirs.pk])
        assert caught.value.code == "unknown_event"
        assert caught.value.details == {"provenance": {"events": [str(theirs.pk)]}}
        assert not Skill.objects.filter(agent=agent).exists()

        version = make_skill(agent, provenance_events=[mine.pk], provenance_episodes=["ep-7"])
        assert list(
            VersionProvenance.objects.filter(version=version).values_list("event_id", flat=True)
        ) == [mine.pk]
        assert version.source_event.payload["provenance"] == {
            "events": [str(mine.pk)],
            "episodes": ["ep-7"],
        }


class TestVersions:
    def test_a_new_version_supersedes_the_latest_and_starts_as_candidate(self, agent):
        v1 = make_skill(agent)
        v2 = make_version(v1.skill, purpose="Compute the house checksum, v2")
        v3 = make_version(v1.skill)

        assert (v2.number, v2.supersedes_id, v2.status) == (2, v1.pk, "candidate")
        assert (v3.number, v3.supersedes_id) == (3, v2.pk)
        v1.refresh_from_db()
        assert v1.status == "candidate"

    def test_supersedes_must_be_a_version_of_the_same_skill(self, agent):
        v1 = make_skill(agent)
        other = make_skill(agent, name="other")
        with pytest.raises(Unprocessable) as caught:
            version_create(agent=agent, skill=v1.skill, data=definition(), supersedes_id=other.pk)
        assert caught.value.code == "unknown_version"

    def test_another_agents_skill_is_not_found(self, agent):
        v1 = make_skill(agent)
        with pytest.raises(NotFound):
            version_create(agent=AgentFactory(), skill=v1.skill, data=definition())


# ----------------------------------------------------------------------- lifecycle


class TestValidation:
    def test_examples_passing_in_the_sandbox_make_it_experimental_and_replay_the_holdout(
        self, agent
    ):
        version = make_skill(agent)
        [examples] = run_queued_validations(version)

        assert (examples.status, examples.cases_passed, examples.cases_total) == ("passed", 2, 2)
        cases = list(
            examples.cases.order_by("index").values("outcome", "passed", "result", "verdict")
        )
        assert cases[0] == {
            "outcome": "ok",
            "passed": True,
            "result": expected_for("INV-1"),
            "verdict": {"passed": True, "detail": None, "error": None},
        }
        version.refresh_from_db()
        assert version.status == "experimental"
        transition = VersionTransition.objects.filter(version=version).last()
        assert (transition.to_status, transition.reason) == (
            "experimental",
            "automatic: all 2 examples passed in the sandbox",
        )
        holdout, drawn = run_queued_validations(version)
        assert (holdout.kind, holdout.status) == ("holdout", "passed")
        # Inputs the author did not choose, judged by the validator.
        assert (drawn.kind, drawn.status, drawn.cases_passed) == ("drawn", "passed", 8)
        assert len(drawn.drawn_cases) == 8 and {"params": {"record": "INV-1"}} not in (
            drawn.drawn_cases
        )

    def test_a_failing_example_keeps_it_a_candidate(self, agent):
        version = make_skill(
            agent,
            examples=[{"params": {"record": "A"}, "expected": {"record": "A", "check": "nope"}}],
        )
        [validation] = run_queued_validations(version)
        assert (validation.status, validation.cases_passed) == ("failed", 0)
        version.refresh_from_db()
        assert version.status == "candidate"
        with pytest.raises(Conflict) as caught:
            lifecycle.version_promote(agent=agent, version_id=version.pk)
        assert caught.value.code == "evidence_missing"
        assert "0/1 passed" in caught.value.message

    def test_a_crashing_procedure_is_recorded_with_its_error(self, agent):
        version = make_skill(
            agent,
            procedure="def run(params, tools):\n    print('working')\n    raise ValueError('bad record')\n",
            validator="",
        )
        [validation] = run_queued_validations(version)
        case = validation.cases.get(index=0)
        assert (case.outcome, case.passed, case.stdout) == ("error", False, "working\n")
        assert "ValueError: bad record" in case.error

    def test_a_rerun_of_a_finished_validation_writes_nothing(self, agent):
        version = make_skill(agent)
        [validation] = run_queued_validations(version)
        before = written(agent)
        assert runs.validation_run(validation_id=validation.pk) is None
        assert written(agent) == before

    def test_holdout_of_a_version_without_cases_is_a_conflict(self, agent):
        version = make_skill(agent, holdout=[])
        with pytest.raises(Conflict) as caught:
            runs.validation_request(agent=agent, version=version, kind="holdout")
        assert caught.value.code == "no_cases"


class TestPromotion:
    @override_settings(SKILLS_PROMOTION_SUCCESSES=3)
    def test_three_verified_successes_validate_an_experimental_version(
        self, agent, in_process_sandbox
    ):
        version = experimental(agent, holdout=[])
        for i in range(2):
            execution = runs.execution_request(
                agent=agent,
                version_id=version.pk,
                data=runs.ExecuteInput(params={"record": f"R{i}"}, allow_unvalidated=True),
            )
            runs.execution_run(execution_id=execution.pk)
        version.refresh_from_db()
        assert version.status == "experimental"
        with pytest.raises(Conflict, match="2 of 3 verified successful executions"):
            lifecycle.version_promote(agent=agent, version_id=version.pk)

        execution = runs.execution_request(
            agent=agent,
            version_id=version.pk,
            data=runs.ExecuteInput(params={"record": "R3"}, allow_unvalidated=True),
        )
        runs.execution_run(execution_id=execution.pk)
        version.refresh_from_db()
        assert version.status == "validated"
        assert VersionTransition.objects.filter(version=version).last().reason == (
            "automatic: a drawn replay passed (8 inputs the service drew) and 3 verified "
            "successful executions (need 3)"
        )

    def test_unverified_reported_successes_do_not_count(self, agent, in_process_sandbox):
        version = experimental(agent, holdout=[])
        for _ in range(5):
            report(version)
        version.refresh_from_db()
        assert version.status == "experimental"

    def test_the_authors_own_externally_verified_run_is_not_enough(self, agent, in_process_sandbox):
        version = experimental(agent)
        # Reported by whoever wrote it (no key here, as the author): a self-reported flag.
        report(version, externally_verified=True, evidence={"ci": "green"})
        version.refresh_from_db()
        assert version.status == "experimental"
        with pytest.raises(Conflict) as caught:
            lifecycle.version_promote(agent=agent, version_id=version.pk)
        assert caught.value.details["missing"] == (
            "1 of 3 verified successful executions; no externally verified run reported "
            "with another key"
        )

    def test_a_run_verified_with_another_key_validates(self, agent, in_process_sandbox):
        _, version = skill_create(
            agent=agent, name="checksum", data=definition(), actor="key:pm_author"
        )
        run_queued_validations(version)
        run_queued_validations(version)
        report(version, externally_verified=True, evidence={"ci": "ok"}, actor="key:pm_author")
        version.refresh_from_db()
        assert version.status == "experimental"  # the author's key vouching for itself
        report(version, externally_verified=True, evidence={"ci": "ok"}, actor="key:pm_ci")
        version.refresh_from_db()
        assert version.status == "validated"
        assert VersionTransition.objects.filter(version=version).last().reason == (
            "automatic: an externally verified run reported with another key"
        )

    def test_a_procedure_fitted_to_the_authors_inputs_fails_the_drawn_replay(
        self, agent, in_process_sandbox
    ):
        """It answers the examples and hold-out by rote and nothing else: the
        validator passes every run on the author's inputs, never on drawn ones."""
        rote = "\n".join(
            [
                "ANSWERS = " + repr({r: expected_for(r) for r in ("INV-1", "INV-2", "INV-77")}),
                "def run(params, tools):",
                "    return ANSWERS.get(params['record'], {'record': params['record']})",
            ]
        )
        version = make_skill(agent, procedure=rote)
        run_queued_validations(version)
        validations = run_queued_validations(version)
        drawn = next(v for v in validations if v.kind == "drawn")
        assert (drawn.status, drawn.cases_passed) == ("failed", 0)
        for record in ("INV-1", "INV-2", "INV-77"):  # successes on the author's inputs only
            execution = runs.execution_request(
                agent=agent,
                version_id=version.pk,
                data=runs.ExecuteInput(params={"record": record}, allow_unvalidated=True),
            )
            runs.execution_run(execution_id=execution.pk)
        version.refresh_from_db()
        assert version.status == "experimental"
        with pytest.raises(Conflict) as caught:
            lifecycle.version_promote(agent=agent, version_id=version.pk)
        assert "the latest drawn replay failed (0/8)" in caught.value.details["missing"]

    def test_validating_a_new_version_deprecates_the_older_ones(self, agent, in_process_sandbox):
        v1 = validated(agent)
        v2 = make_version(v1.skill)
        run_queued_validations(v2)
        run_queued_validations(v2)
        report(v2, externally_verified=True, evidence={"ci": "green"}, actor=VERIFIER)
        v1.refresh_from_db()
        v2.refresh_from_db()
        assert (v1.status, v2.status) == ("deprecated", "validated")
        assert VersionTransition.objects.filter(version=v1).last().reason == "superseded by v2"
        # v1 stays reconstructable with its executions.
        assert Execution.objects.filter(version=v1).count() == 1

    def test_manual_promotion_needs_the_same_evidence(self, agent, in_process_sandbox):
        version = make_skill(agent)
        with pytest.raises(Conflict, match="its examples have not been run in the sandbox yet"):
            lifecycle.version_promote(agent=agent, version_id=version.pk)


class TestDeprecationAndRetirement:
    @override_settings(
        SKILLS_RECENT_WINDOW=4, SKILLS_DEPRECATE_MIN_EXECUTIONS=4, SKILLS_DEPRECATE_BELOW=0.5
    )
    def test_a_failing_validated_version_is_deprecated_automatically(
        self, agent, in_process_sandbox
    ):
        version = validated(agent)  # 1 success
        report(version, succeeded=False)
        report(version, succeeded=False)
        version.refresh_from_db()
        assert version.status == "validated"  # 3 recent runs: too few to judge
        report(version, succeeded=False)  # 1 of the last 4
        version.refresh_from_db()
        assert version.status == "deprecated"
        assert VersionTransition.objects.filter(version=version).last().reason == (
            "recent success rate 25% of the last 4 executions is below 50%"
        )

    def test_review_sweeps_validated_versions(self, agent, in_process_sandbox, settings):
        version = validated(agent)
        settings.SKILLS_DEPRECATE_MIN_EXECUTIONS = 1
        settings.SKILLS_DEPRECATE_BELOW = 1.01
        assert lifecycle.review_validated() == [version.pk]
        version.refresh_from_db()
        assert version.status == "deprecated"

    def test_deprecate_and_retire_need_a_reason_and_are_idempotent(self, agent):
        version = make_skill(agent)
        with pytest.raises(InvalidInput):
            lifecycle.version_retire(agent=agent, version_id=version.pk, reason=" ")
        lifecycle.version_retire(agent=agent, version_id=version.pk, reason="wrong approach")
        lifecycle.version_retire(agent=agent, version_id=version.pk, reason="again")
        assert VersionTransition.objects.filter(version=version, to_status="retired").count() == 1
        with pytest.raises(Conflict) as caught:
            lifecycle.version_deprecate(agent=agent, version_id=version.pk, reason="x")
        assert caught.value.code == "invalid_transition"

    def test_another_agents_version_is_not_found(self, agent):
        version = make_skill(agent)
        with pytest.raises(NotFound):
            lifecycle.version_retire(agent=AgentFactory(), version_id=version.pk, reason="x")


# ---------------------------------------------------------------------- executions


class TestExecution:
    def test_runs_in_the_sandbox_with_its_declared_tools(self, agent):
        version = validated(agent)
        execution = runs.execution_request(
            agent=agent, version_id=version.pk, data=runs.ExecuteInput(params={"record": "INV-42"})
        )
        assert (execution.status, execution.version_status, execution.novel_params) == (
            "queued",
            "validated",
            True,
        )
        finished = runs.execution_run(execution_id=execution.pk)
        assert (
            finished.status,
            finished.outcome,
            finished.succeeded,
            finished.validator_passed,
        ) == (
            "finished",
            "ok",
            True,
            True,
        )
        assert finished.result == expected_for("INV-42")
        # The procedure's call, then the validator's.
        assert (
            finished.tool_calls
            == [{"tool": "sha256", "args": {"text": "piper:INV-42"}, "ok": True}] * 2
        )
        assert finished.finish_event.event_type == "skill.execution_finished"
        assert runs.execution_run(execution_id=execution.pk) is None  # a re-delivery: no-op

    @pytest.mark.parametrize("status", ["candidate", "experimental", "deprecated", "retired"])
    def test_a_version_that_is_not_validated_needs_the_opt_in(self, agent, status):
        version = make_skill(agent)
        if status == "experimental":
            run_queued_validations(version)
        elif status == "deprecated":
            lifecycle.version_deprecate(agent=agent, version_id=version.pk, reason="x")
        elif status == "retired":
            lifecycle.version_retire(agent=agent, version_id=version.pk, reason="x")
        before = written(agent)
        with pytest.raises(Conflict) as caught:
            runs.execution_request(
                agent=agent, version_id=version.pk, data=runs.ExecuteInput(params={"record": "A"})
            )
        assert caught.value.code == "not_validated"
        assert written(agent) == before
        execution = runs.execution_request(
            agent=agent,
            version_id=version.pk,
            data=runs.ExecuteInput(params={"record": "A"}, allow_unvalidated=True),
        )
        assert execution.version_status == status

    def test_params_are_checked_against_the_schema_listing_every_error(self, agent):
        version = validated(agent)
        before = written(agent)
        with pytest.raises(Unprocessable) as caught:
            runs.execution_request(
                agent=agent,
                version_id=version.pk,
                data=runs.ExecuteInput(params={"record": "", "x": 1}),
            )
        assert caught.value.code == "invalid_params"
        assert caught.value.details == {
            "params": [
                {
                    "path": "",
                    "message": "Additional properties are not allowed ('x' was unexpected)",
                },
                {"path": "record", "message": "'' should be non-empty"},
            ]
        }
        assert written(agent) == before

    def test_required_permissions_are_checked_against_the_keys_scopes(self, agent):
        version = validated(agent, required_permissions=["admin"])
        with pytest.raises(PermissionDenied) as caught:
            runs.execution_request(
                agent=agent,
                version_id=version.pk,
                data=runs.ExecuteInput(params={"record": "A"}),
                scopes=["read", "write"],
            )
        assert caught.value.code == "missing_permission"

    def test_params_from_the_examples_do_not_count_for_transfer(self, agent):
        version = validated(agent)
        execution = runs.execution_request(
            agent=agent, version_id=version.pk, data=runs.ExecuteInput(params={"record": "INV-1"})
        )
        assert execution.novel_params is False

    def test_a_sandbox_that_never_comes_is_recorded_as_unavailable(self, agent):
        version = validated(agent)
        execution = runs.execution_request(
            agent=agent, version_id=version.pk, data=runs.ExecuteInput(params={"record": "A"})
        )
        failed = runs.execution_fail(execution_id=execution.pk, error="no bwrap")
        assert (failed.outcome, failed.succeeded, failed.error) == (
            "unavailable",
            False,
            "no bwrap",
        )

    def test_an_externally_verified_report_needs_evidence(self, agent):
        version = make_skill(agent)
        with pytest.raises(InvalidInput, match="evidence"):
            report(version, externally_verified=True)

    def test_the_fact_current_tool_reads_the_agents_own_facts(self, agent):
        from facts.services import ClaimInput, Provenance, fact_assert

        fact_assert(
            agent=agent,
            claim=ClaimInput(
                subject="acme",
                predicate="invoice_prefix",
                value="AC-",
                provenance=Provenance(source_type="user_statement"),
            ),
        )
        version = validated(
            agent,
            required_tools=["fact_current"],
            procedure="def run(params, tools):\n    return tools.fact_current({'subject': params['record'], 'predicate': 'invoice_prefix'})\n",
            validator="",
            examples=[{"params": {"record": "acme"}, "expected": "AC-"}],
            holdout=[{"params": {"record": "nobody"}, "expected": None}],
        )
        execution = runs.execution_request(
            agent=agent, version_id=version.pk, data=runs.ExecuteInput(params={"record": "acme"})
        )
        assert runs.execution_run(execution_id=execution.pk).result == "AC-"
        other = AgentFactory()
        foreign = validated(
            other,
            required_tools=["fact_current"],
            procedure=version.procedure,
            validator="",
            examples=[{"params": {"record": "nobody"}, "expected": None}],
            holdout=[{"params": {"record": "no one"}, "expected": None}],
        )
        execution = runs.execution_request(
            agent=other, version_id=foreign.pk, data=runs.ExecuteInput(params={"record": "acme"})
        )
        assert runs.execution_run(execution_id=execution.pk).result is None
