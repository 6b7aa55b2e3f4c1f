"""Procedural memory: versioned skills, matching, execution, validation and traces."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import models as m
from ._base import Resource, body, get, operation, paginated, post


class Skills(Resource):
    @operation
    def create(
        self,
        name: str,
        *,
        purpose: str,
        trigger: dict,
        procedure: str,
        parameter_schema: dict,
        examples: list[dict],
        **definition: Any,
    ) -> m.Skill:
        """A skill and its first version, a candidate until validated. Also entry_point,
        validator, rollback, preconditions, contraindications, required_tools, holdout, …"""
        version = body(
            purpose=purpose,
            trigger=trigger,
            procedure=procedure,
            parameter_schema=parameter_schema,
            examples=examples,
            **definition,
        )
        return post("/skills", m.Skill, {"name": name, **version})

    @operation
    def new_version(self, skill_id: str, **definition: Any) -> m.SkillVersion:
        """The next version (same fields as create, all of them again)."""
        return post(f"/skills/{skill_id}/versions", m.SkillVersion, body(**definition))

    @operation
    def get(self, skill_id: str) -> m.Skill:
        return get(f"/skills/{skill_id}", m.Skill)

    @paginated
    def list(self, *, name: str | None = None, limit: int | None = None) -> Iterator[m.Skill]:
        return get("/skills", m.Skill, name=name, limit=limit)

    @operation
    def version(self, version_id: str) -> m.SkillVersion:
        return get(f"/skills/versions/{version_id}", m.SkillVersion)

    @operation
    def match(
        self, task: str, *, context: dict | None = None, limit: int | None = None
    ) -> m.SkillMatch:
        """Which skills apply to `task` here, and which nearly did (and why not)."""
        return post("/skills/match", m.SkillMatch, body(task=task, context=context, limit=limit))

    @operation
    def execute(
        self, version_id: str, params: dict, *, wait: bool = True, **fields: Any
    ) -> m.Execution:
        """Run a version in the sandbox (task, context, session_id, allow_unvalidated).
        wait=False answers at once with the queued execution."""
        path = f"/skills/versions/{version_id}/execute"
        return post(path, m.Execution, body(params=params, **fields), wait=wait)

    @operation
    def report_execution(
        self, version_id: str, *, params: dict, succeeded: bool, **fields: Any
    ) -> m.Execution:
        """An execution done outside the sandbox, and how it went (result, evidence,
        externally_verified, duration_ms, error, task, context, session_id)."""
        report = body(params=params, succeeded=succeeded, **fields)
        return post(f"/skills/versions/{version_id}/executions", m.Execution, report)

    @paginated
    def executions(
        self, version_id: str, *, source: str | None = None, limit: int | None = None
    ) -> Iterator[m.Execution]:
        path = f"/skills/versions/{version_id}/executions"
        return get(path, m.Execution, source=source, limit=limit)

    @operation
    def execution(self, execution_id: str) -> m.Execution:
        return get(f"/skills/executions/{execution_id}", m.Execution)

    @operation
    def validate(self, version_id: str, *, kind: str | None = None) -> m.Validation:
        """Run its examples (or its holdout) in the sandbox; queued, see validation()."""
        return post(f"/skills/versions/{version_id}/validate", m.Validation, body(kind=kind))

    @paginated
    def validations(self, version_id: str, *, limit: int | None = None) -> Iterator[m.Validation]:
        return get(f"/skills/versions/{version_id}/validations", m.Validation, limit=limit)

    @operation
    def validation(self, validation_id: str) -> m.Validation:
        return get(f"/skills/validations/{validation_id}", m.Validation)

    @operation
    def promote(
        self, version_id: str, *, reason: str | None = None, from_status: str | None = None
    ) -> m.SkillVersion:
        """One step up (candidate → experimental → validated), if the evidence allows.
        With `from_status` (as read), from that status only: Conflict stale_status when a
        concurrent promotion already moved the version."""
        path = f"/skills/versions/{version_id}/promote"
        return post(path, m.SkillVersion, body(reason=reason, from_status=from_status))

    @operation
    def deprecate(self, version_id: str, *, reason: str) -> m.SkillVersion:
        return post(f"/skills/versions/{version_id}/deprecate", m.SkillVersion, {"reason": reason})

    @operation
    def retire(self, version_id: str, *, reason: str) -> m.SkillVersion:
        return post(f"/skills/versions/{version_id}/retire", m.SkillVersion, {"reason": reason})

    @operation
    def record_trace(
        self, *, task: str, inputs: dict, steps: list[dict], succeeded: bool, **fields: Any
    ) -> m.SkillTrace:
        """How a task was done, step by step (output, verified, verification, session_id,
        task_id): repeated verified traces become candidate skills."""
        trace = body(task=task, inputs=inputs, steps=steps, succeeded=succeeded, **fields)
        return post("/skills/traces", m.SkillTrace, trace)

    @paginated
    def traces(self, *, limit: int | None = None, **filters: Any) -> Iterator[m.SkillTrace]:
        """Filters: session_id, task_id, succeeded, verified."""
        return get("/skills/traces", m.SkillTrace, limit=limit, **filters)

    @operation
    def trace(self, trace_id: str) -> m.SkillTrace:
        return get(f"/skills/traces/{trace_id}", m.SkillTrace)
