"""Request and response shapes of the skills API.

Inputs are strict: unknown fields and mistyped values are refused, never
coerced. Definitions (trigger, conditions, schema, code) arrive as JSON and
are checked by the services, so their errors carry the domain's codes
(invalid_condition, invalid_schema, syntax_error, unknown_tool, …). Outputs
declare their fields (the OpenAPI schema) and build the body directly.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from piper.api.serializers import (
    CursorQuerySerializer,
    EnumField,
    JSONObjectField,
    PolicyClassesSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    api_datetime,
    api_id,
    page_of,
)
from piper.provenance import SourceType

from .models import (
    Execution,
    ExecutionSource,
    ExecutionStatus,
    Skill,
    SkillTrace,
    SkillVersion,
    Validation,
    ValidationCase,
    ValidationKind,
    ValidationStatus,
    VersionStatus,
    VersionTransition,
)
from .selectors import Candidate, MatchResult, rate

MAX_SOURCE = 64 * 1024


@extend_schema_field({"type": "array", "items": {"type": "object"}})
class JSONListField(serializers.JSONField):
    """Any JSON here, checked by the service; documented as a list of objects."""


@extend_schema_field({})
class AnyJSONField(serializers.JSONField):
    """Any JSON value."""


def version_status(**kwargs) -> EnumField:
    return EnumField(component="SkillVersionStatusEnum", choices=VersionStatus.choices, **kwargs)


# ------------------------------------------------------------------------- inputs

TRIGGER_HELP = (
    '{"regex": "…", "keywords": ["…"], "min_keywords": 1}: the task text matches when the '
    "regex (Python syntax, case-insensitive) finds a match, or when at least min_keywords of "
    "the keywords occur as whole words or phrases."
)
CONDITION_HELP = (
    'Conditions over the match context: {"path": "env.os", "op": "eq", "value": "linux", '
    '"reason": "…"}; ops eq ne in not_in exists missing matches lt lte gt gte. A condition '
    "over an absent path is false (except missing)."
)


class SkillProvenanceInputSerializer(StrictSerializer):
    events = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        default=list,
        max_length=100,
        help_text="Ledger events (traces) of this agent the version was distilled from.",
    )
    episodes = serializers.ListField(
        child=StrictCharField(max_length=200),
        required=False,
        default=list,
        max_length=100,
        help_text="Episode references.",
    )


class VersionInputSerializer(PolicyClassesSerializer, StrictSerializer):
    purpose = StrictCharField(max_length=2000, help_text="What the skill achieves.")
    scope = StrictCharField(max_length=500, required=False, allow_blank=True, default="")
    trigger = JSONObjectField(help_text=TRIGGER_HELP)
    preconditions = JSONListField(
        required=False, default=list, help_text=CONDITION_HELP + " All must hold."
    )
    contraindications = JSONListField(
        required=False,
        default=list,
        help_text="Conditions as in preconditions, or keyword entries "
        '{"keywords": ["credit note"], "reason": "…"} matched against the task text; any '
        "one applying rejects the skill.",
    )
    required_tools = serializers.ListField(
        child=StrictCharField(max_length=100),
        required=False,
        default=list,
        max_length=50,
        help_text="Host tools (skills.tools) the code may call; an unknown one is 422 unknown_tool.",
    )
    required_permissions = serializers.ListField(
        child=StrictCharField(max_length=10),
        required=False,
        default=list,
        max_length=3,
        help_text="API key scopes (read, write, admin) a key must hold to execute it.",
    )
    parameter_schema = JSONObjectField(help_text="A JSON Schema for the params (422 if invalid).")
    procedure = StrictCharField(
        max_length=MAX_SOURCE,
        trim_whitespace=False,
        help_text="Python source defining entry_point(params, tools); tools[name](args) calls "
        "a declared tool.",
    )
    entry_point = StrictCharField(max_length=100, required=False, default="run")
    validator = StrictCharField(
        max_length=MAX_SOURCE,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="Python source defining validate(params, result, tools) -> bool.",
    )
    rollback = StrictCharField(
        max_length=MAX_SOURCE,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="Python source defining rollback(params, tools).",
    )
    examples = JSONListField(
        help_text='1-100 cases [{"params": {...}, "expected": …}]: all must pass in the sandbox '
        "for candidate → experimental."
    )
    holdout = JSONListField(
        required=False, default=list, help_text="Hold-out cases, same shape, replayed separately."
    )
    provenance = SkillProvenanceInputSerializer(required=False)


class SkillCreateInputSerializer(VersionInputSerializer):
    name = StrictCharField(max_length=200, help_text="Your name for the skill (unique).")
    session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class VersionCreateInputSerializer(VersionInputSerializer):
    supersedes = serializers.UUIDField(
        required=False, allow_null=True, default=None, help_text="Default: the latest version."
    )
    session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class SkillReasonInputSerializer(StrictSerializer):
    reason = StrictCharField(max_length=300, required=False, allow_blank=True, default="")


class SkillPromoteInputSerializer(SkillReasonInputSerializer):
    from_status = version_status(
        required=False,
        help_text="The status you read. When the version is no longer in it — another "
        "promotion got there first — the answer is 409 stale_status, instead of a second "
        "step up.",
    )


class SkillRequiredReasonInputSerializer(StrictSerializer):
    reason = StrictCharField(max_length=300)


class ValidateInputSerializer(StrictSerializer):
    kind = EnumField(
        component="ValidationKindEnum",
        choices=ValidationKind.choices,
        required=False,
        default=ValidationKind.EXAMPLES,
    )


class MatchInputSerializer(StrictSerializer):
    task = StrictCharField(max_length=4000, help_text="What the agent is about to do.")
    context = JSONObjectField(
        required=False, default=dict, help_text="What preconditions and contraindications see."
    )
    limit = StrictIntegerField(min_value=1, max_value=50, required=False, default=5)


class ExecuteQuerySerializer(StrictSerializer):
    wait = serializers.FloatField(
        min_value=0,
        max_value=settings.SKILLS_MAX_WAIT_SECONDS,
        required=False,
        help_text="Wait up to this many seconds for the result (200 when it came, else 202).",
    )


class ExecuteInputSerializer(StrictSerializer):
    params = JSONObjectField(help_text="Checked against the version's parameter_schema (422).")
    allow_unvalidated = StrictBooleanField(
        required=False,
        default=False,
        help_text="Run a version that is not validated (candidate, experimental, deprecated, "
        "retired); otherwise 409 not_validated.",
    )
    task = StrictCharField(max_length=4000, required=False, allow_blank=True, default="")
    context = JSONObjectField(required=False, default=dict)
    session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class ExecutionReportInputSerializer(StrictSerializer):
    params = JSONObjectField()
    succeeded = StrictBooleanField(help_text="Did the run achieve its purpose?")
    result = AnyJSONField(required=False, default=None)
    evidence = AnyJSONField(
        required=False, default=None, help_text="What shows the outcome (required if verified)."
    )
    externally_verified = StrictBooleanField(
        required=False,
        default=False,
        help_text="The outcome was checked by something outside the agent (a test suite, a "
        "user, a downstream system).",
    )
    duration_ms = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False, default=None)
    error = StrictCharField(max_length=10000, required=False, allow_blank=True, default="")
    task = StrictCharField(max_length=4000, required=False, allow_blank=True, default="")
    context = JSONObjectField(required=False, default=dict)
    session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class SkillTraceStepSerializer(StrictSerializer):
    tool = serializers.CharField(max_length=100, help_text="One of the skills tools.")
    args = JSONObjectField(required=False, default=dict, help_text="The tool's arguments.")
    result = AnyJSONField(required=False, default=None, help_text="What the call returned.")


class SkillTraceInputSerializer(PolicyClassesSerializer, StrictSerializer):
    task = StrictCharField(max_length=4000, help_text="What the agent was doing.")
    inputs = JSONObjectField(
        help_text="The values the procedure started from, by name: what a skill learned from "
        "this trace takes as its parameters."
    )
    steps = SkillTraceStepSerializer(many=True, help_text="The tool calls, in the order they ran.")
    output = AnyJSONField(required=False, default=None, help_text="What the procedure produced.")
    succeeded = StrictBooleanField(help_text="Did it achieve its purpose?")
    verified = StrictBooleanField(
        required=False,
        default=False,
        help_text="Something outside the agent's own say-so checked the outcome (a validator, "
        "a test, a user). Only verified successes are mined into candidate skills.",
    )
    verification = JSONObjectField(
        required=False,
        default=None,
        allow_null=True,
        help_text="{by, evidence}: what checked it and what it saw (required if verified).",
    )
    source_type = serializers.ChoiceField(
        choices=SourceType.choices,
        required=False,
        default=SourceType.AGENT_INFERENCE,
        help_text="Where the procedure came from: a third party's or a document's is kept, "
        "never mined.",
    )
    session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    task_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class SkillTraceListQuerySerializer(CursorQuerySerializer):
    succeeded = serializers.BooleanField(required=False, allow_null=True, default=None)
    verified = serializers.BooleanField(required=False, allow_null=True, default=None)
    session_id = serializers.CharField(max_length=200, required=False)
    task_id = serializers.CharField(max_length=200, required=False)


class ExecutionListQuerySerializer(CursorQuerySerializer):
    source = EnumField(
        component="ExecutionSourceEnum", choices=ExecutionSource.choices, required=False
    )


class SkillListQuerySerializer(CursorQuerySerializer):
    name = serializers.CharField(max_length=200, required=False, help_text="Exact name.")


# ------------------------------------------------------------------------ outputs


class SkillRateSerializer(serializers.Serializer):
    executions = serializers.IntegerField()
    successes = serializers.IntegerField()
    success_rate = serializers.FloatField(allow_null=True)


class SkillStatsOutputSerializer(serializers.Serializer):
    executions = serializers.IntegerField(help_text="Finished executions (sandbox and reported).")
    successes = serializers.IntegerField()
    failures = serializers.IntegerField()
    verified_successes = serializers.IntegerField(
        help_text="Successes whose validator passed or that were externally verified."
    )
    success_rate = serializers.FloatField(allow_null=True)
    recent = SkillRateSerializer(help_text="The last SKILLS_RECENT_WINDOW executions.")
    transfer = SkillRateSerializer(
        help_text="Executions on parameters that are none of the examples: the transfer score."
    )
    last_used_at = serializers.DateTimeField(allow_null=True)
    last_validated_at = serializers.DateTimeField(allow_null=True)
    last_validation_status = EnumField(
        component="ValidationStatusEnum", choices=ValidationStatus.choices, allow_null=True
    )

    def to_representation(self, v: SkillVersion) -> dict:
        return {
            "executions": v.executions_total,
            "successes": v.successes,
            "failures": v.failures,
            "verified_successes": v.verified_successes,
            "success_rate": rate(v.successes, v.executions_total),
            "recent": {
                "executions": v.recent_total,
                "successes": v.recent_successes,
                "success_rate": rate(v.recent_successes, v.recent_total),
            },
            "transfer": {
                "executions": v.transfer_total,
                "successes": v.transfer_successes,
                "success_rate": rate(v.transfer_successes, v.transfer_total),
            },
            "last_used_at": api_datetime(v.last_used_at),
            "last_validated_at": api_datetime(v.last_validated_at),
            "last_validation_status": v.last_validation_status,
        }


_STATS = SkillStatsOutputSerializer()


class VersionSummaryOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    skill_id = serializers.UUIDField()
    number = serializers.IntegerField()
    status = version_status()
    purpose = serializers.CharField()
    supersedes = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    status_changed_at = serializers.DateTimeField()
    stats = SkillStatsOutputSerializer()

    def to_representation(self, v: SkillVersion) -> dict:
        return {
            "id": str(v.pk),
            "skill_id": str(v.skill_id),
            "number": v.number,
            "status": v.status,
            "purpose": v.purpose,
            "supersedes": api_id(v.supersedes_id),
            "created_at": api_datetime(v.created_at),
            "status_changed_at": api_datetime(v.status_changed_at),
            "stats": _STATS.to_representation(v),
        }


_SUMMARY = VersionSummaryOutputSerializer()


class SkillOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    created_at = serializers.DateTimeField()
    source_event_id = serializers.UUIDField()
    validated_version = serializers.UUIDField(
        allow_null=True, help_text="The newest validated version: the one match offers."
    )
    versions = VersionSummaryOutputSerializer(many=True, help_text="Newest first.")

    def to_representation(self, skill: Skill) -> dict:
        versions = skill.version_list
        validated = next((v for v in versions if v.status == VersionStatus.VALIDATED), None)
        return {
            "id": str(skill.pk),
            "name": skill.name,
            "created_at": api_datetime(skill.created_at),
            "source_event_id": str(skill.source_event_id),
            "validated_version": api_id(validated.pk if validated else None),
            "versions": [_SUMMARY.to_representation(v) for v in versions],
        }


SkillPageSerializer = page_of(SkillOutputSerializer, "SkillPageSerializer")


class SkillTransitionOutputSerializer(serializers.Serializer):
    from_status = serializers.CharField(help_text="Empty for the creation.")
    to_status = version_status()
    reason = serializers.CharField()
    actor = serializers.CharField()
    event_id = serializers.UUIDField()
    at = serializers.DateTimeField()

    def to_representation(self, t: VersionTransition) -> dict:
        return {
            "from_status": t.from_status,
            "to_status": t.to_status,
            "reason": t.reason,
            "actor": t.actor,
            "event_id": str(t.event_id),
            "at": api_datetime(t.at),
        }


_TRANSITION = SkillTransitionOutputSerializer()


class SkillProvenanceOutputSerializer(serializers.Serializer):
    events = serializers.ListField(child=serializers.UUIDField())
    episodes = serializers.ListField(child=serializers.CharField())


class VersionDetailOutputSerializer(VersionSummaryOutputSerializer):
    skill_name = serializers.CharField()
    scope = serializers.CharField()
    trigger = JSONObjectField()
    preconditions = JSONListField()
    contraindications = JSONListField()
    required_tools = serializers.ListField(child=serializers.CharField())
    required_permissions = serializers.ListField(child=serializers.CharField())
    parameter_schema = JSONObjectField()
    procedure = serializers.CharField()
    entry_point = serializers.CharField()
    validator = serializers.CharField()
    rollback = serializers.CharField()
    examples = JSONListField()
    holdout = JSONListField()
    provenance = SkillProvenanceOutputSerializer()
    superseded_by = serializers.ListField(child=serializers.UUIDField())
    source_event_id = serializers.UUIDField()
    transitions = SkillTransitionOutputSerializer(many=True, help_text="In order.")

    def to_representation(self, v: SkillVersion) -> dict:
        return {
            **super().to_representation(v),
            "skill_name": v.skill.name,
            "scope": v.scope,
            "trigger": v.trigger,
            "preconditions": v.preconditions,
            "contraindications": v.contraindications,
            "required_tools": list(v.required_tools),
            "required_permissions": list(v.required_permissions),
            "parameter_schema": v.parameter_schema,
            "procedure": v.procedure,
            "entry_point": v.entry_point,
            "validator": v.validator,
            "rollback": v.rollback,
            "examples": v.examples,
            "holdout": v.holdout,
            "provenance": {
                "events": [str(p.event_id) for p in v.provenance.all()],
                "episodes": list(v.provenance_episodes),
            },
            "superseded_by": [str(s.pk) for s in v.superseded_by_list],
            "source_event_id": str(v.source_event_id),
            "transitions": [_TRANSITION.to_representation(t) for t in v.transition_list],
        }


class ValidationCaseOutputSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    params = JSONObjectField()
    expected = AnyJSONField(help_text="null when the case gave none (see has_expected).")
    has_expected = serializers.BooleanField()
    outcome = serializers.CharField(help_text="The sandbox's outcome: ok, error, timeout, …")
    passed = serializers.BooleanField()
    result = AnyJSONField()
    verdict = JSONObjectField(allow_null=True, help_text="The validator's verdict.")
    error = serializers.CharField()
    stdout = serializers.CharField()
    stderr = serializers.CharField()
    duration_ms = serializers.IntegerField()

    def to_representation(self, c: ValidationCase) -> dict:
        return {
            "index": c.index,
            "params": c.params,
            "expected": c.expected,
            "has_expected": c.has_expected,
            "outcome": c.outcome,
            "passed": c.passed,
            "result": c.result,
            "verdict": c.verdict,
            "error": c.error,
            "stdout": c.stdout,
            "stderr": c.stderr,
            "duration_ms": c.duration_ms,
        }


_CASE = ValidationCaseOutputSerializer()


class ValidationOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    version_id = serializers.UUIDField()
    kind = EnumField(component="ValidationKindEnum", choices=ValidationKind.choices)
    status = EnumField(component="ValidationStatusEnum", choices=ValidationStatus.choices)
    cases_total = serializers.IntegerField()
    cases_passed = serializers.IntegerField()
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    cases = ValidationCaseOutputSerializer(many=True, help_text="Empty while queued.")

    def to_representation(self, v: Validation) -> dict:
        return {
            "id": str(v.pk),
            "version_id": str(v.version_id),
            "kind": v.kind,
            "status": v.status,
            "cases_total": v.cases_total,
            "cases_passed": v.cases_passed,
            "error": v.error,
            "created_at": api_datetime(v.created_at),
            "finished_at": api_datetime(v.finished_at),
            "cases": [_CASE.to_representation(c) for c in getattr(v, "case_list", [])],
        }


ValidationPageSerializer = page_of(ValidationOutputSerializer, "ValidationPageSerializer")


class ExecutionOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    version_id = serializers.UUIDField()
    source = EnumField(component="ExecutionSourceEnum", choices=ExecutionSource.choices)
    status = EnumField(component="ExecutionStatusEnum", choices=ExecutionStatus.choices)
    version_status = version_status(help_text="The version's status when the run was asked for.")
    params = JSONObjectField()
    novel_params = serializers.BooleanField(help_text="None of the examples' parameters.")
    task = serializers.CharField()
    context = JSONObjectField()
    outcome = serializers.CharField(
        help_text="ok, error, invalid_result, timeout, cpu_limit, memory_limit, output_limit, "
        "process_limit, crashed, unavailable; empty while queued."
    )
    succeeded = serializers.BooleanField(allow_null=True, help_text="null while queued.")
    result = AnyJSONField()
    verdict = JSONObjectField(allow_null=True, help_text="The validator's verdict.")
    validator_passed = serializers.BooleanField(allow_null=True)
    externally_verified = serializers.BooleanField()
    evidence = AnyJSONField()
    error = serializers.CharField()
    stdout = serializers.CharField()
    stderr = serializers.CharField()
    tool_calls = JSONListField()
    duration_ms = serializers.IntegerField(allow_null=True)
    session_id = serializers.CharField()
    source_event_id = serializers.UUIDField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def to_representation(self, e: Execution) -> dict:
        return {
            "id": str(e.pk),
            "version_id": str(e.version_id),
            "source": e.source,
            "status": e.status,
            "version_status": e.version_status,
            "params": e.params,
            "novel_params": e.novel_params,
            "task": e.task,
            "context": e.context,
            "outcome": e.outcome,
            "succeeded": e.succeeded,
            "result": e.result,
            "verdict": e.verdict,
            "validator_passed": e.validator_passed,
            "externally_verified": e.externally_verified,
            "evidence": e.evidence,
            "error": e.error,
            "stdout": e.stdout,
            "stderr": e.stderr,
            "tool_calls": e.tool_calls,
            "duration_ms": e.duration_ms,
            "session_id": e.session_id,
            "source_event_id": str(e.source_event_id),
            "created_at": api_datetime(e.created_at),
            "finished_at": api_datetime(e.finished_at),
        }


ExecutionPageSerializer = page_of(ExecutionOutputSerializer, "ExecutionPageSerializer")


class TriggerMatchSerializer(serializers.Serializer):
    matched = serializers.BooleanField()
    regex_matched = serializers.BooleanField()
    keywords_found = serializers.ListField(child=serializers.CharField())
    strength = serializers.FloatField()


class MatchedVersionSerializer(serializers.Serializer):
    version_id = serializers.UUIDField()
    skill_id = serializers.UUIDField()
    skill_name = serializers.CharField()
    number = serializers.IntegerField()
    status = version_status()
    purpose = serializers.CharField()
    scope = serializers.CharField()
    parameter_schema = JSONObjectField()
    required_tools = serializers.ListField(child=serializers.CharField())
    similarity = serializers.FloatField(help_text="Cosine similarity of task and intent.")
    score = serializers.FloatField(help_text="similarity + 0.1 × trigger strength.")
    trigger = TriggerMatchSerializer()
    reasons = JSONListField(
        help_text="Why it was rejected (near misses only): typed objects, type one of "
        "not_validated, below_similarity, trigger_not_matched, precondition_failed (path, op, "
        "value, actual), contraindicated (path/op/value/actual or keywords/found, reason), "
        "missing_permission."
    )

    def to_representation(self, c: Candidate) -> dict:
        v = c.version
        return {
            "version_id": str(v.pk),
            "skill_id": str(v.skill_id),
            "skill_name": v.skill.name,
            "number": v.number,
            "status": v.status,
            "purpose": v.purpose,
            "scope": v.scope,
            "parameter_schema": v.parameter_schema,
            "required_tools": list(v.required_tools),
            "similarity": c.similarity,
            "score": c.score,
            "trigger": {
                "matched": c.trigger.matched,
                "regex_matched": c.trigger.regex_matched,
                "keywords_found": list(c.trigger.keywords_found),
                "strength": round(c.trigger.strength, 4),
            },
            "reasons": c.reasons,
        }


_MATCHED = MatchedVersionSerializer()


class MatchOutputSerializer(serializers.Serializer):
    applicable = MatchedVersionSerializer(many=True, help_text="Best first; may be empty.")
    no_applicable_skill = serializers.BooleanField()
    near_misses = MatchedVersionSerializer(many=True, help_text="Rejected, with reasons.")

    def to_representation(self, result: MatchResult) -> dict:
        return {
            "applicable": [_MATCHED.to_representation(c) for c in result.applicable],
            "no_applicable_skill": not result.applicable,
            "near_misses": [_MATCHED.to_representation(c) for c in result.near_misses],
        }


class SkillTraceOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    task = serializers.CharField()
    inputs = JSONObjectField()
    steps = JSONListField()
    output = AnyJSONField()
    succeeded = serializers.BooleanField()
    verified = serializers.BooleanField()
    verification = JSONObjectField(allow_null=True)
    source_type = serializers.CharField()
    instruction_like = serializers.BooleanField(
        help_text="Its text tries to act as an instruction: kept as evidence, never mined."
    )
    session_id = serializers.CharField()
    task_id = serializers.CharField()
    source_event_id = serializers.UUIDField()
    created_at = serializers.DateTimeField()

    def to_representation(self, t: SkillTrace) -> dict:
        return {
            "id": str(t.pk),
            "task": t.task,
            "inputs": t.inputs,
            "steps": t.steps,
            "output": t.output,
            "succeeded": t.succeeded,
            "verified": t.verified,
            "verification": t.verification,
            "source_type": t.source_type,
            "instruction_like": t.instruction_like,
            "session_id": t.session_id,
            "task_id": t.task_id,
            "source_event_id": str(t.source_event_id),
            "created_at": api_datetime(t.created_at),
        }


SkillTracePageSerializer = page_of(SkillTraceOutputSerializer, "SkillTracePageSerializer")
