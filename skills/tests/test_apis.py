"""The skills API through HTTP: shapes, every refusal a clear error with nothing
written, Idempotency-Key replays, and another agent's ids 404."""

from __future__ import annotations

import pytest

from facts.tests.api_helpers import ok, post
from ledger.tests.helpers import error, ledger_state
from skills.models import Execution, Skill, SkillVersion, Validation
from skills.tests.factories import (
    PROCEDURE,
    SCHEMA,
    VALIDATOR,
    expected_for,
    make_skill,
    run_queued_validations,
    validated,
)

pytestmark = pytest.mark.django_db

BODY = {
    "name": "invoice-checksum",
    "purpose": "Compute the house checksum of an invoice record",
    "trigger": {"keywords": ["checksum", "invoice"]},
    "preconditions": [{"path": "env.os", "op": "eq", "value": "linux"}],
    "contraindications": [{"keywords": ["credit note"], "reason": "another checksum"}],
    "required_tools": ["sha256"],
    "parameter_schema": SCHEMA,
    "procedure": PROCEDURE,
    "validator": VALIDATOR,
    "examples": [{"params": {"record": "INV-1"}, "expected": expected_for("INV-1")}],
    "holdout": [{"params": {"record": "INV-77"}}],
}


def state() -> dict:
    return {
        **ledger_state(),
        "skills": Skill.objects.count(),
        "versions": SkillVersion.objects.count(),
        "validations": Validation.objects.count(),
        "executions": Execution.objects.count(),
    }


def created(response) -> dict:
    assert response.status_code == 201, response.json()
    return response.json()


class TestCreate:
    def test_create_a_skill(self, client_a):
        body = created(post(client_a, "/api/v1/skills", BODY))
        skill = Skill.objects.get()
        [version] = body["versions"]
        assert body["id"] == str(skill.pk) and body["name"] == "invoice-checksum"
        assert body["validated_version"] is None
        assert (version["number"], version["status"], version["supersedes"]) == (
            1,
            "candidate",
            None,
        )
        assert version["stats"] == {
            "executions": 0,
            "successes": 0,
            "failures": 0,
            "verified_successes": 0,
            "success_rate": None,
            "recent": {"executions": 0, "successes": 0, "success_rate": None},
            "transfer": {"executions": 0, "successes": 0, "success_rate": None},
            "last_used_at": None,
            "last_validated_at": None,
            "last_validation_status": None,
        }

    @pytest.mark.parametrize(
        ("change", "status", "body"),
        [
            (
                {"procedure": "def run(params, tools):\n  return [\n"},
                422,
                error(
                    "syntax_error",
                    "procedure: syntax error on line 2: '[' was never closed",
                    {"procedure": {"line": 2, "offset": 10, "message": "'[' was never closed"}},
                ),
            ),
            (
                {"parameter_schema": {"type": "object", "required": "record"}},
                422,
                error(
                    "invalid_schema",
                    "parameter_schema: not a valid JSON Schema at required: 'record' is not of type 'array'",
                    {
                        "parameter_schema": {
                            "path": "required",
                            "message": "'record' is not of type 'array'",
                        }
                    },
                ),
            ),
            (
                {"required_tools": ["curl"]},
                422,
                error(
                    "unknown_tool",
                    "required_tools: no tool named 'curl'; known: base64_decode, base64_encode, "
                    "crc32, fact_current, hmac_sha256, now, regex_match, sha256",
                    {"required_tools": ["curl"]},
                ),
            ),
            (
                {"colour": "red"},
                400,
                error(
                    "invalid",
                    "colour: unknown field; allowed: contraindications, entry_point, examples, "
                    "holdout, name, parameter_schema, preconditions, privacy_class, procedure, "
                    "provenance, purpose, required_permissions, required_tools, retention_class, "
                    "rollback, scope, session_id, trigger, validator",
                    {
                        "colour": [
                            "unknown field; allowed: contraindications, entry_point, examples, "
                            "holdout, name, parameter_schema, preconditions, privacy_class, "
                            "procedure, provenance, purpose, required_permissions, required_tools, "
                            "retention_class, rollback, scope, session_id, trigger, validator"
                        ]
                    },
                ),
            ),
        ],
    )
    def test_bad_input_is_a_clear_error_and_writes_nothing(self, client_a, change, status, body):
        before = state()
        response = post(client_a, "/api/v1/skills", {**BODY, **change})
        assert (response.status_code, response.json()) == (status, body)
        assert state() == before

    def test_a_second_skill_of_the_same_name_is_409(self, client_a):
        created(post(client_a, "/api/v1/skills", BODY))
        response = post(client_a, "/api/v1/skills", BODY)
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "skill_exists"

    def test_idempotency_key_replays_the_first_answer(self, client_a):
        first = post(client_a, "/api/v1/skills", BODY, HTTP_IDEMPOTENCY_KEY="k1")
        before = state()
        again = post(client_a, "/api/v1/skills", BODY, HTTP_IDEMPOTENCY_KEY="k1")
        assert (again.status_code, again.json()) == (201, first.json())
        assert again["Idempotent-Replayed"] == "true"
        assert state() == before

    def test_a_new_version(self, client_a):
        skill = created(post(client_a, "/api/v1/skills", BODY))
        body = created(
            post(
                client_a,
                f"/api/v1/skills/{skill['id']}/versions",
                {k: v for k, v in BODY.items() if k != "name"} | {"scope": "v2"},
            )
        )
        assert (body["number"], body["supersedes"], body["scope"]) == (
            2,
            skill["versions"][0]["id"],
            "v2",
        )
        assert [t["to_status"] for t in body["transitions"]] == ["candidate"]
        listing = ok(client_a.get(f"/api/v1/skills/{skill['id']}"))
        assert [v["number"] for v in listing["versions"]] == [2, 1]


class TestLifecycle:
    def test_promote_without_evidence_is_409_with_what_is_missing(self, client_a):
        version = make_skill(client_a.agent)
        response = post(client_a, f"/api/v1/skills/versions/{version.pk}/promote", {})
        assert response.status_code == 409
        assert response.json() == error(
            "evidence_missing",
            "cannot promote to experimental: its examples have not been run in the sandbox yet",
            {
                "status": "candidate",
                "to": "experimental",
                "missing": "its examples have not been run in the sandbox yet",
            },
        )

    def test_deprecate_and_retire_record_the_reason(self, client_a):
        version = make_skill(client_a.agent)
        assert (
            post(client_a, f"/api/v1/skills/versions/{version.pk}/deprecate", {}).status_code == 400
        )
        body = ok(
            post(client_a, f"/api/v1/skills/versions/{version.pk}/retire", {"reason": "wrong"})
        )
        assert body["status"] == "retired"
        assert [(t["from_status"], t["to_status"], t["reason"]) for t in body["transitions"]] == [
            ("", "candidate", "created"),
            ("candidate", "retired", "wrong"),
        ]

    def test_a_drawn_replay_is_asked_for_or_refused_with_why(self, client_a):
        version = make_skill(client_a.agent)
        response = post(
            client_a, f"/api/v1/skills/versions/{version.pk}/validate", {"kind": "drawn"}
        )
        assert response.status_code == 202, response.json()
        assert (response.json()["kind"], response.json()["cases_total"]) == ("drawn", 8)
        patterned = make_skill(
            client_a.agent,
            name="patterned",
            parameter_schema={
                "type": "object",
                "properties": {"record": {"type": "string", "pattern": "^(?!CN)[A-Z0-9-]+$"}},
                "required": ["record"],
            },
        )
        before = Validation.objects.count()
        refused = post(
            client_a, f"/api/v1/skills/versions/{patterned.pk}/validate", {"kind": "drawn"}
        )
        assert refused.status_code == 409
        assert refused.json()["error"] == {
            "code": "not_drawable",
            "message": "cannot draw inputs from this version's parameter_schema: "
            "parameter_schema.record: regex assert_not is not drawn",
            "details": {
                "kind": "drawn",
                "why": "parameter_schema.record: regex assert_not is not drawn",
            },
        }
        assert Validation.objects.count() == before

    def test_validate_queues_a_run_and_validations_list_it(self, client_a):
        version = make_skill(client_a.agent)
        response = post(
            client_a, f"/api/v1/skills/versions/{version.pk}/validate", {"kind": "holdout"}
        )
        assert response.status_code == 202
        assert (response.json()["kind"], response.json()["status"]) == ("holdout", "queued")
        run_queued_validations(version)
        page = ok(client_a.get(f"/api/v1/skills/versions/{version.pk}/validations"))
        # Passing examples made it experimental, which queued another hold-out replay
        # and a replay on inputs the service drew.
        assert [(v["kind"], v["status"]) for v in page["results"]] == [
            ("drawn", "queued"),
            ("holdout", "queued"),
            ("holdout", "passed"),
            ("examples", "passed"),
        ]
        case = page["results"][3]["cases"][0]
        assert (case["outcome"], case["passed"], case["result"]) == (
            "ok",
            True,
            expected_for("INV-1"),
        )


class TestMatch:
    def test_match_and_no_applicable_skill(self, client_a, read_only_client, in_process_sandbox):
        version = validated(client_a.agent)
        task = {"task": "Compute the checksum for invoice 12", "context": {"env": {"os": "linux"}}}
        body = ok(post(client_a, "/api/v1/skills/match", task))
        assert body["no_applicable_skill"] is False
        assert [m["version_id"] for m in body["applicable"]] == [str(version.pk)]
        assert body["applicable"][0]["reasons"] == []

        body = ok(post(client_a, "/api/v1/skills/match", {**task, "context": {}}))
        assert (body["applicable"], body["no_applicable_skill"]) == ([], True)
        assert body["near_misses"][0]["reasons"] == [
            {
                "type": "precondition_failed",
                "path": "env.os",
                "op": "eq",
                "value": "linux",
                "actual": None,
            }
        ]
        # Matching writes nothing: a read-only key may ask.
        assert (
            ok(post(read_only_client, "/api/v1/skills/match", task))["no_applicable_skill"] is True
        )

    def test_context_must_be_an_object(self, client_a):
        response = post(client_a, "/api/v1/skills/match", {"task": "x", "context": [1]})
        assert response.status_code == 400


class TestExecute:
    def test_executing_an_unvalidated_version_needs_the_opt_in(self, client_a):
        version = make_skill(client_a.agent)
        before = state()
        response = post(
            client_a, f"/api/v1/skills/versions/{version.pk}/execute", {"params": {"record": "A"}}
        )
        assert response.status_code == 409
        assert response.json() == error(
            "not_validated",
            f"skill version {version.pk} is candidate, not validated; send "
            '"allow_unvalidated": true to run it anyway',
            {"status": "candidate"},
        )
        assert state() == before
        response = post(
            client_a,
            f"/api/v1/skills/versions/{version.pk}/execute",
            {"params": {"record": "A"}, "allow_unvalidated": True},
        )
        assert response.status_code == 202
        assert (response.json()["status"], response.json()["version_status"]) == (
            "queued",
            "candidate",
        )

    def test_params_that_do_not_fit_are_422_listing_every_error(self, client_a, in_process_sandbox):
        version = validated(client_a.agent)
        before = state()
        response = post(client_a, f"/api/v1/skills/versions/{version.pk}/execute", {"params": {}})
        assert (response.status_code, response.json()) == (
            422,
            error(
                "invalid_params",
                "params do not match the skill's parameter_schema: (root): 'record' is a required property",
                {"params": [{"path": "", "message": "'record' is a required property"}]},
            ),
        )
        assert state() == before

    def test_queued_then_run_then_read(self, client_a, in_process_sandbox):
        version = validated(client_a.agent)
        queued = post(
            client_a, f"/api/v1/skills/versions/{version.pk}/execute", {"params": {"record": "Q"}}
        )
        assert queued.status_code == 202
        from skills.tasks import execute_version

        execute_version(queued.json()["id"])
        body = ok(client_a.get(f"/api/v1/skills/executions/{queued.json()['id']}"))
        assert (body["status"], body["outcome"], body["succeeded"], body["result"]) == (
            "finished",
            "ok",
            True,
            expected_for("Q"),
        )

    def test_record_an_execution_the_agent_ran(self, client_a, in_process_sandbox):
        version = validated(client_a.agent)
        body = created(
            post(
                client_a,
                f"/api/v1/skills/versions/{version.pk}/executions",
                {"params": {"record": "R"}, "succeeded": False, "error": "checksum mismatch"},
            )
        )
        assert (body["source"], body["succeeded"], body["outcome"]) == ("reported", False, "error")
        page = ok(client_a.get(f"/api/v1/skills/versions/{version.pk}/executions?source=reported"))
        assert [e["id"] for e in page["results"]][0] == body["id"]
        stats = ok(client_a.get(f"/api/v1/skills/versions/{version.pk}"))["stats"]
        assert (stats["executions"], stats["successes"], stats["failures"]) == (2, 1, 1)

    def test_wait_is_bounded(self, client_a):
        version = make_skill(client_a.agent)
        response = post(
            client_a,
            f"/api/v1/skills/versions/{version.pk}/execute?wait=60",
            {"params": {"record": "A"}, "allow_unvalidated": True},
        )
        assert response.status_code == 400
        assert Execution.objects.count() == 0


class TestTenancy:
    def test_another_agents_ids_are_404(self, client_a, client_b):
        version = make_skill(client_a.agent)
        execution = post(
            client_a,
            f"/api/v1/skills/versions/{version.pk}/execute",
            {"params": {"record": "A"}, "allow_unvalidated": True},
        ).json()
        validation = Validation.objects.get(version=version)
        before = state()
        for method, path in [
            ("get", f"/api/v1/skills/{version.skill_id}"),
            ("get", f"/api/v1/skills/versions/{version.pk}"),
            ("get", f"/api/v1/skills/versions/{version.pk}/executions"),
            ("get", f"/api/v1/skills/versions/{version.pk}/validations"),
            ("get", f"/api/v1/skills/executions/{execution['id']}"),
            ("get", f"/api/v1/skills/validations/{validation.pk}"),
            ("post", f"/api/v1/skills/versions/{version.pk}/retire"),
            ("post", f"/api/v1/skills/versions/{version.pk}/promote"),
            ("post", f"/api/v1/skills/versions/{version.pk}/execute"),
            ("post", f"/api/v1/skills/{version.skill_id}/versions"),
        ]:
            if method == "get":
                response = client_b.get(path)
            else:
                body = (
                    {"reason": "x"}
                    if path.endswith(("retire", "promote"))
                    else {"params": {"record": "A"}, "allow_unvalidated": True}
                )
                if path.endswith("/versions"):
                    body = {k: v for k, v in BODY.items() if k != "name"}
                response = post(client_b, path, body)
            assert response.status_code == 404, (path, response.json())
        assert ok(client_b.get("/api/v1/skills"))["results"] == []
        assert state() == before

    def test_a_read_only_key_cannot_write(self, read_only_client):
        response = post(read_only_client, "/api/v1/skills", BODY)
        assert response.status_code == 403
