"""Skills and their versions: everything checked before anything is written.

A version's code is compiled (never run here), its JSON Schema checked, its
examples validated against that schema, its tools looked up, its trigger and
conditions parsed, its provenance events found among the agent's own. Any
refusal raises before the transaction writes a row or an event.
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from django.db import IntegrityError, transaction

from ledger.models import Event
from ledger.services import event_append, json_storage_error
from piper import embeddings
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.provenance import PrivacyClass, RetentionClass, SourceType
from piper.tenancy.models import Agent, Scope

from .. import conditions, events, tools
from ..models import (
    MAX_SOURCE_BYTES,
    Skill,
    SkillVersion,
    ValidationKind,
    VersionProvenance,
    VersionStatus,
)
from ..schemas import parameter_validator

MAX_NAME = 200
MAX_PURPOSE = 2000
MAX_SCOPE = 500
MAX_CASES = 100
MAX_PROVENANCE = 100
CODE_ROLES = {"procedure": None, "validator": "validate", "rollback": "rollback"}


@dataclass(frozen=True)
class VersionInput:
    """What an agent writes for a version; see skills.conditions for the languages."""

    purpose: str
    trigger: dict
    parameter_schema: dict
    procedure: str
    examples: list
    scope: str = ""
    preconditions: list = field(default_factory=list)
    contraindications: list = field(default_factory=list)
    required_tools: Sequence[str] = ()
    required_permissions: Sequence[str] = ()
    entry_point: str = "run"
    validator: str = ""
    rollback: str = ""
    holdout: list = field(default_factory=list)
    provenance_events: Sequence[uuid.UUID] = ()
    provenance_episodes: Sequence[str] = ()
    privacy_class: str = PrivacyClass.INTERNAL
    retention_class: str = RetentionClass.STANDARD


def _invalid(name: str, message: str) -> InvalidInput:
    return InvalidInput(f"{name}: {message}", details={name: [message]})


def check_code(role: str, source: str, entry: str) -> None:
    """Compile `source` (never run it) and find a top-level `def entry(...)`.

    Unprocessable `syntax_error` names the role and line; `missing_entry_point`
    when the function is not defined at the top level."""
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise _invalid(role, f"at most {MAX_SOURCE_BYTES} bytes of Python source")
    try:
        compile(source, f"<{role}>", "exec", dont_inherit=True)
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise Unprocessable(
            f"{role}: syntax error on line {exc.lineno}: {exc.msg}",
            code="syntax_error",
            details={role: {"line": exc.lineno, "offset": exc.offset, "message": exc.msg}},
        ) from None
    except (ValueError, TypeError) as exc:  # e.g. NUL bytes
        raise Unprocessable(
            f"{role}: cannot be compiled: {exc}",
            code="syntax_error",
            details={role: {"line": None, "offset": None, "message": str(exc)}},
        ) from None
    defined = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    if entry not in defined:
        raise Unprocessable(
            f"{role}: must define a top-level function {entry}(…)",
            code="missing_entry_point",
            details={role: {"entry_point": entry, "defined": sorted(defined)}},
        )


def schema_errors(schema: dict, instance: Any, *, limit: int = 20) -> list[dict]:
    """Every way `instance` fails `schema`, as {path, message}, in a stable order."""
    errors = sorted(
        parameter_validator(schema).iter_errors(instance),
        key=lambda e: (list(map(str, e.absolute_path)), e.message),
    )
    return [
        {"path": "/".join(str(p) for p in error.absolute_path), "message": error.message}
        for error in errors[:limit]
    ]


def _check_schema(schema: Any) -> None:
    if not isinstance(schema, dict):
        raise _invalid("parameter_schema", "a JSON Schema object")
    if problem := json_storage_error(schema, path="parameter_schema", depth=1):
        raise _invalid("parameter_schema", problem)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise Unprocessable(
            f"parameter_schema: not a valid JSON Schema at {where}: {exc.message}",
            code="invalid_schema",
            details={"parameter_schema": {"path": where, "message": exc.message}},
        ) from None


def _check_cases(name: str, cases: Any, schema: dict, *, least: int) -> list:
    if not isinstance(cases, list) or not least <= len(cases) <= MAX_CASES:
        raise _invalid(name, f"a list of {least}-{MAX_CASES} cases {{params, expected?}}")
    for i, case in enumerate(cases):
        where = f"{name}[{i}]"
        if not isinstance(case, dict) or "params" not in case or set(case) - {"params", "expected"}:
            raise _invalid(where, 'an object {"params": {...}, "expected": …} (expected optional)')
        if problem := json_storage_error(case, path=where, depth=1):
            raise _invalid(where, problem)
        if errors := schema_errors(schema, case["params"]):
            first = errors[0]
            raise Unprocessable(
                f"{where}.params do not match parameter_schema: "
                f"{first['path'] or '(root)'}: {first['message']}",
                code="invalid_example",
                details={where: errors},
            )
    return cases


def _check(data: VersionInput) -> None:
    if not isinstance(data.purpose, str) or not data.purpose.strip():
        raise _invalid("purpose", "required: what the skill achieves")
    if len(data.purpose) > MAX_PURPOSE:
        raise _invalid("purpose", f"at most {MAX_PURPOSE} characters")
    if not isinstance(data.scope, str) or len(data.scope) > MAX_SCOPE:
        raise _invalid("scope", f"text of at most {MAX_SCOPE} characters")
    for name in ("purpose", "scope", "procedure", "validator", "rollback"):
        if problem := json_storage_error(getattr(data, name), path=name, depth=1):
            raise _invalid(name, problem)
    try:
        conditions.check_trigger(data.trigger)
        conditions.check_preconditions(data.preconditions)
        conditions.check_contraindications(data.contraindications)
    except conditions.ConditionError as exc:
        raise InvalidInput(
            str(exc), code="invalid_condition", details={exc.field: [exc.message]}
        ) from None
    for name in ("preconditions", "contraindications", "trigger"):
        if problem := json_storage_error(getattr(data, name), path=name, depth=1):
            raise _invalid(name, problem)
    if len(set(data.required_tools)) != len(data.required_tools):
        raise _invalid("required_tools", "each tool once")
    if unknown := tools.unknown_tools(data.required_tools):
        raise Unprocessable(
            f"required_tools: no tool named {unknown[0]!r}; known: {', '.join(sorted(tools.TOOLS))}",
            code="unknown_tool",
            details={"required_tools": unknown},
        )
    if bad := [p for p in data.required_permissions if p not in Scope.values]:
        raise _invalid("required_permissions", f"{bad[0]!r} is not a scope; use {Scope.values}")
    if not isinstance(data.entry_point, str) or not data.entry_point.isidentifier():
        raise _invalid("entry_point", "a Python function name")
    if not isinstance(data.procedure, str) or not data.procedure.strip():
        raise _invalid(
            "procedure", f"required: Python source defining {data.entry_point}(params, tools)"
        )
    _check_schema(data.parameter_schema)
    check_code("procedure", data.procedure, data.entry_point)
    for role in ("validator", "rollback"):
        source = getattr(data, role)
        if not isinstance(source, str):
            raise _invalid(role, "Python source")
        if source.strip():
            check_code(role, source, CODE_ROLES[role])
    _check_cases("examples", data.examples, data.parameter_schema, least=1)
    _check_cases("holdout", data.holdout, data.parameter_schema, least=0)
    if (
        len(data.provenance_events) > MAX_PROVENANCE
        or len(data.provenance_episodes) > MAX_PROVENANCE
    ):
        raise _invalid(
            "provenance", f"at most {MAX_PROVENANCE} events and {MAX_PROVENANCE} episodes"
        )
    if not all(isinstance(e, str) and 0 < len(e) <= 200 for e in data.provenance_episodes):
        raise _invalid("provenance.episodes", "episode references of 1-200 characters")


def intent_text(data: VersionInput) -> str:
    """What the intent embedding is computed from: purpose, then the trigger's words."""
    return intent_text_of(data.purpose, data.trigger)


def intent_text_of(purpose: str, trigger: dict) -> str:
    words = " ".join(trigger.get("keywords") or [])
    return f"{purpose.strip()}\n{words}".strip()


def _provenance_events(agent: Agent, ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    ids = list(dict.fromkeys(ids))
    known = set(Event.objects.filter(agent=agent, pk__in=ids).values_list("pk", flat=True))
    # Another agent's event is indistinguishable from a missing one.
    if missing := [str(i) for i in ids if i not in known]:
        raise Unprocessable(
            f"provenance event {missing[0]} does not exist",
            code="unknown_event",
            details={"provenance": {"events": missing}},
        )
    return ids


def _definition_payload(version: SkillVersion, event_ids: list[uuid.UUID]) -> dict:
    """The whole definition, so the version can be rebuilt from the ledger."""
    return {
        "skill_id": str(version.skill_id),
        "version_id": str(version.pk),
        "number": version.number,
        "purpose": version.purpose,
        "scope": version.scope,
        "trigger": version.trigger,
        "preconditions": version.preconditions,
        "contraindications": version.contraindications,
        "required_tools": list(version.required_tools),
        "required_permissions": list(version.required_permissions),
        "parameter_schema": version.parameter_schema,
        "procedure": version.procedure,
        "entry_point": version.entry_point,
        "validator": version.validator,
        "rollback": version.rollback,
        "examples": version.examples,
        "holdout": version.holdout,
        "provenance": {
            "events": [str(e) for e in event_ids],
            "episodes": list(version.provenance_episodes),
        },
        "supersedes": str(version.supersedes_id) if version.supersedes_id else None,
    }


def _write_version(
    *,
    agent: Agent,
    skill: Skill,
    number: int,
    data: VersionInput,
    embedding: list[float],
    supersedes: SkillVersion | None,
    event_ids: list[uuid.UUID],
    actor: str,
    session_id: str,
) -> SkillVersion:
    from .runs import validation_request

    version = SkillVersion(
        agent=agent,
        skill=skill,
        number=number,
        purpose=data.purpose.strip(),
        scope=data.scope,
        trigger=data.trigger,
        intent_embedding=embedding,
        preconditions=data.preconditions,
        contraindications=data.contraindications,
        required_tools=list(data.required_tools),
        required_permissions=sorted(set(data.required_permissions)),
        parameter_schema=data.parameter_schema,
        procedure=data.procedure,
        entry_point=data.entry_point,
        validator=data.validator,
        rollback=data.rollback,
        examples=data.examples,
        holdout=data.holdout,
        provenance_episodes=list(data.provenance_episodes),
        supersedes=supersedes,
        status=VersionStatus.CANDIDATE,
    )
    version.source_event = event_append(
        agent=agent,
        event_type=events.VERSION_CREATED,
        payload=_definition_payload(version, event_ids),
        actor=actor,
        session_id=session_id,
        source_type=SourceType.AGENT_INFERENCE,
        privacy_class=data.privacy_class,
        retention_class=data.retention_class,
    )
    version.created_at = version.status_changed_at = version.source_event.recorded_at
    version.save(force_insert=True)
    VersionProvenance.objects.bulk_create(
        [VersionProvenance(agent=agent, version=version, event_id=e) for e in event_ids]
    )
    from .lifecycle import record_transition

    record_transition(version, "", VersionStatus.CANDIDATE, "created", version.source_event, actor)
    validation_request(agent=agent, version=version, kind=ValidationKind.EXAMPLES, actor=actor)
    return version


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise _invalid("name", f"required, at most {MAX_NAME} characters")
    if problem := json_storage_error(name, path="name", depth=1):
        raise _invalid("name", problem)
    return name.strip()


def skill_create(
    *, agent: Agent, name: str, data: VersionInput, actor: str = "", session_id: str = ""
) -> tuple[Skill, SkillVersion]:
    """A new skill with its first version (a candidate; its examples are queued
    for the sandbox after commit). Raises InvalidInput / Unprocessable for a
    bad definition and Conflict `skill_exists` for a name the agent already
    uses — all before writing anything."""
    name = _check_name(name)
    _check(data)
    if Skill.objects.filter(agent=agent, name=name).exists():
        raise Conflict(
            f"a skill named {name!r} exists; add a version to it instead",
            code="skill_exists",
            details={"name": [name]},
        )
    embedding = embeddings.get_embedder().embed_one(intent_text(data))
    try:
        with transaction.atomic():
            event_ids = _provenance_events(agent, data.provenance_events)
            skill = Skill(agent=agent, name=name)
            skill.source_event = event_append(
                agent=agent,
                event_type=events.SKILL_CREATED,
                payload={"skill_id": str(skill.pk), "name": name},
                actor=actor,
                session_id=session_id,
                source_type=SourceType.AGENT_INFERENCE,
                privacy_class=data.privacy_class,
                retention_class=data.retention_class,
            )
            # Every time a skill row keeps is its event's record time (a rebuild's too).
            skill.created_at = skill.source_event.recorded_at
            skill.save(force_insert=True)
            version = _write_version(
                agent=agent,
                skill=skill,
                number=1,
                data=data,
                embedding=embedding,
                supersedes=None,
                event_ids=event_ids,
                actor=actor,
                session_id=session_id,
            )
    except IntegrityError as exc:
        if "skills_skill_name_unique" in str(exc):
            raise Conflict(
                f"a skill named {name!r} exists; add a version to it instead",
                code="skill_exists",
                details={"name": [name]},
            ) from None
        raise
    return skill, version


def version_create(
    *,
    agent: Agent,
    skill: Skill,
    data: VersionInput,
    supersedes_id: uuid.UUID | None = None,
    actor: str = "",
    session_id: str = "",
) -> SkillVersion:
    """The skill's next version, superseding `supersedes_id` (default: the latest).

    It starts as a candidate and earns its way up; the version it supersedes
    keeps its status until this one is validated (then it is deprecated).
    Unprocessable `unknown_version` when supersedes_id is not a version of
    this skill."""
    if skill.agent_id != agent.pk:
        raise NotFound(f"skill {skill.pk} not found")
    _check(data)
    embedding = embeddings.get_embedder().embed_one(intent_text(data))
    with transaction.atomic():
        skill = Skill.objects.select_for_update().get(pk=skill.pk)
        event_ids = _provenance_events(agent, data.provenance_events)
        versions = SkillVersion.objects.filter(skill=skill)
        latest = versions.order_by("-number").first()
        if supersedes_id is None:
            supersedes = latest
        else:
            supersedes = versions.filter(pk=supersedes_id).first()
            if supersedes is None:
                raise Unprocessable(
                    f"supersedes: {supersedes_id} is not a version of skill {skill.name!r}",
                    code="unknown_version",
                    details={"supersedes": [str(supersedes_id)]},
                )
        return _write_version(
            agent=agent,
            skill=skill,
            number=(latest.number if latest else 0) + 1,
            data=data,
            embedding=embedding,
            supersedes=supersedes,
            event_ids=event_ids,
            actor=actor,
            session_id=session_id,
        )
