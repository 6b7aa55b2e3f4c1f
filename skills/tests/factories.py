"""Factories and helpers for skills tests.

Every skill and version is made through skills.services (which append ledger
events and queue the examples validation), never by Model.objects.create.
`definition()` is a small but real skill — a house checksum over a record —
whose examples pass in the sandbox; tests override what they need.
"""

from __future__ import annotations

from typing import Any

from piper.tenancy.tests.factories import AgentFactory
from skills.models import Skill, SkillVersion
from skills.services.definitions import VersionInput, skill_create, version_create

PROCEDURE = """
def run(params, tools):
    record = params["record"]
    digest = tools.sha256({"text": "piper:" + record})
    return {"record": record, "check": digest[:8]}
"""

VALIDATOR = """
def validate(params, result, tools):
    digest = tools.sha256({"text": "piper:" + params["record"]})
    return result == {"record": params["record"], "check": digest[:8]}
"""

SCHEMA = {
    "type": "object",
    "properties": {"record": {"type": "string", "minLength": 1}},
    "required": ["record"],
    "additionalProperties": False,
}


def expected_for(record: str) -> dict:
    import hashlib

    return {"record": record, "check": hashlib.sha256(f"piper:{record}".encode()).hexdigest()[:8]}


def definition(**overrides: Any) -> VersionInput:
    fields: dict[str, Any] = {
        "purpose": "Compute the house checksum of an invoice record",
        "scope": "invoices",
        "trigger": {"keywords": ["checksum", "invoice"], "min_keywords": 1},
        "parameter_schema": SCHEMA,
        "procedure": PROCEDURE,
        "validator": VALIDATOR,
        "examples": [
            {"params": {"record": "INV-1"}, "expected": expected_for("INV-1")},
            {"params": {"record": "INV-2"}},
        ],
        "holdout": [{"params": {"record": "INV-77"}, "expected": expected_for("INV-77")}],
        "required_tools": ["sha256"],
        "preconditions": [{"path": "env.os", "op": "eq", "value": "linux"}],
        "contraindications": [
            {
                "path": "invoice.currency",
                "op": "eq",
                "value": "JPY",
                "reason": "yen invoices differ",
            },
            {"keywords": ["credit note"], "reason": "credit notes use another checksum"},
        ],
    }
    fields.update(overrides)
    return VersionInput(**fields)


def make_skill(agent=None, name: str = "invoice-checksum", **overrides: Any) -> SkillVersion:
    agent = agent or AgentFactory()
    _, version = skill_create(agent=agent, name=name, data=definition(**overrides))
    return version


def make_version(skill: Skill, **overrides: Any) -> SkillVersion:
    return version_create(agent=skill.agent, skill=skill, data=definition(**overrides))


def run_queued_validations(version: SkillVersion) -> list:
    """Run the version's queued validations now, as the sandbox worker would."""
    from skills.models import Validation, ValidationStatus
    from skills.tasks import validate_version

    queued = Validation.objects.filter(version=version, status=ValidationStatus.QUEUED)
    ids = list(queued.order_by("id").values_list("pk", flat=True))
    for validation_id in ids:
        validate_version(str(validation_id))
    return [Validation.objects.get(pk=i) for i in ids]


def experimental(agent=None, **overrides: Any) -> SkillVersion:
    """A version whose examples passed (and whose hold-out replay ran)."""
    version = make_skill(agent=agent, **overrides)
    run_queued_validations(version)  # examples -> experimental, queues the hold-out replay
    run_queued_validations(version)  # the hold-out replay
    version.refresh_from_db()
    assert version.status == "experimental", version.status
    return version


def report(
    version: SkillVersion,
    *,
    succeeded: bool = True,
    record: str = "INV-9",
    actor: str = "",
    **fields,
):
    from skills.services.runs import ReportInput, execution_report

    result = fields.pop("result", expected_for(record) if succeeded else None)
    return execution_report(
        agent=version.agent,
        version_id=version.pk,
        data=ReportInput(params={"record": record}, succeeded=succeeded, result=result, **fields),
        actor=actor,
    )


VERIFIER = "key:pm_verifier"  # another key than the author's (who wrote it without one)


def validated(agent=None, **overrides: Any) -> SkillVersion:
    """A validated version: experimental, then one externally verified run that
    another key reported (independent evidence, lifecycle.validated_evidence)."""
    version = experimental(agent=agent, **overrides)
    report(version, externally_verified=True, evidence={"checked_by": "ci"}, actor=VERIFIER)
    version.refresh_from_db()
    assert version.status == "validated", version.status
    return version


BODY_FOR_API = {
    "name": "invoice-checksum",
    "purpose": "Compute the house checksum of an invoice record",
    "trigger": {"keywords": ["checksum", "invoice"]},
    "required_tools": ["sha256"],
    "parameter_schema": SCHEMA,
    "procedure": PROCEDURE,
    "validator": VALIDATOR,
    "examples": [{"params": {"record": "INV-1"}, "expected": expected_for("INV-1")}],
    "holdout": [{"params": {"record": "INV-77"}, "expected": expected_for("INV-77")}],
}
