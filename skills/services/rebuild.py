"""Rebuild procedural memory from the ledger (DESIGN §1): skills, versions, their
lifecycle, validations, executions and traces are a fold of the agent's events,
in chain order.

| event | makes |
|---|---|
| skill.created | the skill (id, name) |
| skill.version_created | a candidate version (its whole definition), its provenance, its first transition |
| skill.version_transitioned | a transition; the version's status |
| skill.validation_requested / _finished | a validation; its status, counts and cases |
| skill.execution_requested / _finished | a sandbox execution and its outcome |
| skill.execution_reported | an execution the agent ran itself |
| skill.trace_recorded | a trace |

Every time is the record time of the event that set it (the writers stamp the
same). Erased events are skipped, and so is what hangs off them: a version of
an erased skill, a run of an erased version, a version's link to an erased
version it superseded (as the skills eraser leaves them). Two things are read
from the rows, because no event holds them:

* the intent embedding, which is the embedder's, not the agent's: kept for a
  version whose row is there, computed for one that is not;
* a surviving version's provenance_episodes, from which an erasure cut the
  episodes it erased (an erased episode's event is emptied, so the ledger no
  longer says which one it was).

Older ledgers are read too: what an event of an earlier release did not carry
(a skill's id, a run's context, its output and cases) is taken from the row the
same event made, if it is still there.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from ledger.models import Event
from ledger.projections import rebuild_each_agent
from piper import embeddings
from piper.tenancy.models import Agent

from .. import events as ev
from ..models import (
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
    VersionProvenance,
    VersionStatus,
    VersionTransition,
)
from .definitions import intent_text_of
from .runs import CASE_RESULT, EXECUTION_RESULT

logger = logging.getLogger(__name__)

BATCH = 2000
REBUILD_SETTING = "piper.rebuild"  # transaction-local; migration 0009
DEFINITION = (
    "purpose",
    "scope",
    "trigger",
    "preconditions",
    "contraindications",
    "required_tools",
    "required_permissions",
    "parameter_schema",
    "procedure",
    "entry_point",
    "validator",
    "rollback",
    "examples",
    "holdout",
)


def rebuild_projection(*, agent: Agent | None = None) -> int:
    """Rebuild procedural memory (one agent's, or every agent's) from the ledger,
    in one transaction, and return the number of events applied.

    The rows come back as they were: ids, definitions, statuses, transitions,
    runs with their cases and outcomes, traces, times. The rows a writer locks
    (skills, versions, queued runs) and then the chain heads are locked for the
    duration, in the writers' order, so no write interleaves."""
    return rebuild_each_agent(
        agent,
        lock=[
            Skill.objects.select_for_update(no_key=True),
            SkillVersion.objects.select_for_update(),
            Validation.objects.select_for_update(),
            Execution.objects.select_for_update(),
        ],
        projected=Skill,
        event_types=ev.ALL,
        rebuild_agent=_rebuild_agent,
    )


@dataclass
class _Rows:
    """What the agent's rows hold now: the ids older events do not carry, the
    columns no event holds, and the serial numbers of rows to keep."""

    skill_ids: dict[uuid.UUID, uuid.UUID]  # skill.created event -> skill
    vectors: dict[uuid.UUID, Any]  # version -> intent embedding
    episodes: dict[uuid.UUID, list]  # version -> provenance_episodes
    validations: dict[uuid.UUID, dict]
    cases: dict[uuid.UUID, list[dict]]  # validation -> its cases' columns
    executions: dict[uuid.UUID, dict]
    transitions: dict[uuid.UUID, dict]  # event -> the transition it made (serial id, ...)
    provenance_ids: dict[tuple[uuid.UUID, uuid.UUID], int]  # (version, event) -> id

    @classmethod
    def of(cls, agent_id: Any) -> _Rows:
        cases: dict[uuid.UUID, list[dict]] = {}
        for case in (
            ValidationCase.objects.filter(validation__agent_id=agent_id)
            .order_by("validation_id", "index")
            .values()
        ):
            cases.setdefault(case["validation_id"], []).append(case)
        versions = SkillVersion.objects.filter(agent_id=agent_id).values_list(
            "id", "intent_embedding", "provenance_episodes"
        )
        vectors, episodes = {}, {}
        for pk, vector, cited in versions:
            vectors[pk], episodes[pk] = vector, cited
        return cls(
            skill_ids=dict(
                Skill.objects.filter(agent_id=agent_id).values_list("source_event_id", "id")
            ),
            vectors=vectors,
            episodes=episodes,
            validations={
                row["id"]: row for row in Validation.objects.filter(agent_id=agent_id).values()
            },
            cases=cases,
            executions={
                row["id"]: row for row in Execution.objects.filter(agent_id=agent_id).values()
            },
            transitions={
                row["event_id"]: row
                for row in VersionTransition.objects.filter(agent_id=agent_id).values()
            },
            provenance_ids={
                (version_id, event_id): pk
                for pk, version_id, event_id in VersionProvenance.objects.filter(
                    agent_id=agent_id
                ).values_list("id", "version_id", "event_id")
            },
        )


@dataclass
class _Fold:
    """Procedural memory of one agent, as its events make it."""

    agent_id: Any
    rows: _Rows
    live: set[uuid.UUID]  # the agent's events that are not erased
    skills: dict[uuid.UUID, Skill] = field(default_factory=dict)
    versions: dict[uuid.UUID, SkillVersion] = field(default_factory=dict)
    provenance: list[VersionProvenance] = field(default_factory=list)
    transitions: list[VersionTransition] = field(default_factory=list)
    validations: dict[uuid.UUID, Validation] = field(default_factory=dict)
    cases: list[ValidationCase] = field(default_factory=list)
    executions: dict[uuid.UUID, Execution] = field(default_factory=dict)
    traces: list[SkillTrace] = field(default_factory=list)
    unnamed: Skill | None = None  # an older skill.created, waiting for its first version
    applied: int = 0

    # -- skills and versions

    def skill_created(self, event: Event) -> None:
        payload = event.payload
        skill = Skill(
            agent_id=self.agent_id,
            name=payload["name"],
            source_event_id=event.pk,
            created_at=event.recorded_at,
        )
        known = payload.get("skill_id") or self.rows.skill_ids.get(event.pk)
        if known:
            skill.id = uuid.UUID(str(known))
            self.skills[skill.id] = skill
        else:
            # An earlier release named the skill only in its first version's event,
            # the next one on the chain (one transaction).
            self.unnamed = skill
        self.applied += 1

    def version_created(self, event: Event) -> None:
        payload = event.payload
        skill_id = uuid.UUID(payload["skill_id"])
        if skill_id not in self.skills and self.unnamed is not None and payload["number"] == 1:
            self.unnamed.id = skill_id
            self.skills[skill_id] = self.unnamed
        self.unnamed = None
        if skill_id not in self.skills:
            return  # its skill was erased
        version_id = uuid.UUID(payload["version_id"])
        supersedes = payload.get("supersedes")
        supersedes = uuid.UUID(supersedes) if supersedes else None
        version = SkillVersion(
            id=version_id,
            agent_id=self.agent_id,
            skill_id=skill_id,
            number=payload["number"],
            intent_embedding=self.rows.vectors.get(version_id),
            provenance_episodes=self.rows.episodes.get(
                version_id, list(payload["provenance"]["episodes"])
            ),
            # A link to an erased version is cut, as the eraser cuts it.
            supersedes_id=supersedes if supersedes in self.versions else None,
            status=VersionStatus.CANDIDATE,
            status_changed_at=event.recorded_at,
            source_event_id=event.pk,
            created_at=event.recorded_at,
            **{name: payload[name] for name in DEFINITION},
        )
        self.versions[version_id] = version
        for event_id in dict.fromkeys(payload["provenance"]["events"]):
            event_id = uuid.UUID(event_id)
            if event_id in self.live:
                self.provenance.append(
                    VersionProvenance(
                        id=self.rows.provenance_ids.get((version_id, event_id)),
                        agent_id=self.agent_id,
                        version_id=version_id,
                        event_id=event_id,
                    )
                )
        self._transition(version, event, "", VersionStatus.CANDIDATE, "created")

    def version_transitioned(self, event: Event) -> None:
        payload = event.payload
        version = self.versions.get(uuid.UUID(payload["version_id"]))
        if version is None:
            return
        self._transition(version, event, payload["from"], payload["to"], payload["reason"])

    def _transition(self, version, event, from_status: str, to_status: str, reason: str) -> None:
        self.transitions.append(
            VersionTransition(
                id=(self.rows.transitions.get(event.pk) or {}).get("id"),
                agent_id=self.agent_id,
                version_id=version.id,
                from_status=from_status,
                to_status=to_status,
                reason=reason,
                actor=event.actor,
                event_id=event.pk,
                at=event.recorded_at,
            )
        )
        version.status = to_status
        version.status_changed_at = event.recorded_at
        self.applied += 1

    def transition_erased(self, event: Event) -> None:
        """An erased transition event: the eraser keeps the transition it made (the
        version's status rests on it), so it comes back from its row."""
        row = self.rows.transitions.get(event.pk)
        version = self.versions.get(row["version_id"]) if row else None
        if version is None:
            return
        self.transitions.append(VersionTransition(**row))
        version.status = row["to_status"]
        version.status_changed_at = row["at"]

    # -- validations

    def validation_requested(self, event: Event) -> None:
        payload = event.payload
        version_id = uuid.UUID(payload["version_id"])
        if version_id not in self.versions:
            return
        validation_id = uuid.UUID(payload["validation_id"])
        self.validations[validation_id] = Validation(
            id=validation_id,
            agent_id=self.agent_id,
            version_id=version_id,
            kind=payload["kind"],
            status=ValidationStatus.QUEUED,
            cases_total=payload["cases"],
            drawn_cases=payload.get("drawn_cases"),
            requested_by=event.actor,
            source_event_id=event.pk,
            created_at=event.recorded_at,
        )
        self.applied += 1

    def validation_finished(self, event: Event) -> None:
        payload = event.payload
        validation = self.validations.get(uuid.UUID(payload["validation_id"]))
        if validation is None:
            return
        row = self.rows.validations.get(validation.id) or {}
        validation.status = payload["status"]
        validation.cases_passed = payload["cases_passed"]
        validation.finish_event_id = event.pk
        validation.finished_at = event.recorded_at
        if "cases" in payload:
            validation.error = payload["error"]
            asked = self._cases_asked(validation)
            numbers = {k["index"]: k["id"] for k in self.rows.cases.get(validation.id, [])}
            for result in payload["cases"]:
                case = asked[result["index"]]
                self.cases.append(
                    ValidationCase(
                        id=numbers.get(result["index"]),
                        validation_id=validation.id,
                        params=case["params"],
                        expected=case.get("expected"),
                        has_expected="expected" in case,
                        **{name: result[name] for name in CASE_RESULT},
                    )
                )
        else:  # an earlier release's event: its error was cut short, its cases not in it
            validation.error = row.get("error", payload.get("error", ""))
            self.cases.extend(
                ValidationCase(**case) for case in self.rows.cases.get(validation.id, [])
            )
        self.applied += 1

    def _cases_asked(self, validation: Validation) -> list[dict]:
        if validation.kind == ValidationKind.DRAWN:
            return validation.drawn_cases or []
        version = self.versions[validation.version_id]
        return version.examples if validation.kind == ValidationKind.EXAMPLES else version.holdout

    # -- executions

    def execution_requested(self, event: Event) -> None:
        payload = event.payload
        version = self.versions.get(uuid.UUID(payload["version_id"]))
        if version is None:
            return
        execution_id = uuid.UUID(payload["execution_id"])
        row = self.rows.executions.get(execution_id) or {}
        self.executions[execution_id] = Execution(
            id=execution_id,
            agent_id=self.agent_id,
            version_id=version.id,
            source=ExecutionSource.SANDBOX,
            status=ExecutionStatus.QUEUED,
            version_status=payload["version_status"],
            params=payload["params"],
            novel_params=_novel(version, payload["params"]),
            task=payload["task"],
            context=payload["context"] if "context" in payload else row.get("context", {}),
            session_id=event.session_id,
            source_event_id=event.pk,
            created_at=event.recorded_at,
        )
        self.applied += 1

    def execution_finished(self, event: Event) -> None:
        payload = event.payload
        execution = self.executions.get(uuid.UUID(payload["execution_id"]))
        if execution is None:
            return
        row = self.rows.executions.get(execution.id) or {}
        for name in EXECUTION_RESULT:
            setattr(execution, name, payload[name] if name in payload else row.get(name))
        execution.status = ExecutionStatus.FINISHED
        execution.finish_event_id = event.pk
        execution.finished_at = event.recorded_at
        self.applied += 1

    def execution_reported(self, event: Event) -> None:
        payload = event.payload
        version = self.versions.get(uuid.UUID(payload["version_id"]))
        if version is None:
            return
        execution_id = uuid.UUID(payload["execution_id"])
        row = self.rows.executions.get(execution_id) or {}

        def given(name: str, default: Any) -> Any:
            return payload[name] if name in payload else row.get(name, default)

        self.executions[execution_id] = Execution(
            id=execution_id,
            agent_id=self.agent_id,
            version_id=version.id,
            source=ExecutionSource.REPORTED,
            status=ExecutionStatus.FINISHED,
            version_status=payload["version_status"],
            params=payload["params"],
            novel_params=_novel(version, payload["params"]),
            task=given("task", ""),
            context=given("context", {}),
            outcome="ok" if payload["succeeded"] else "error",
            result=payload["result"],
            succeeded=payload["succeeded"],
            externally_verified=payload["externally_verified"],
            evidence=payload["evidence"],
            error=given("error", ""),
            duration_ms=given("duration_ms", None),
            session_id=event.session_id,
            source_event_id=event.pk,
            finish_event_id=event.pk,
            created_at=event.recorded_at,
            finished_at=event.recorded_at,
        )
        self.applied += 1

    # -- traces

    def trace_recorded(self, event: Event) -> None:
        payload = event.payload
        self.traces.append(
            SkillTrace(
                id=uuid.UUID(payload["trace_id"]),
                agent_id=self.agent_id,
                task=payload["task"],
                inputs=payload["inputs"],
                steps=payload["steps"],
                output=payload["output"],
                succeeded=payload["succeeded"],
                verified=payload["verified"],
                verification=payload["verification"],
                source_type=event.source_type,
                instruction_like=bool((payload.get("screen") or {}).get("instruction_like")),
                session_id=event.session_id,
                task_id=payload["task_id"],
                source_event_id=event.pk,
                created_at=event.recorded_at,
            )
        )
        self.applied += 1


def _novel(version: SkillVersion, params: dict) -> bool:
    return not any(params == case["params"] for case in version.examples)


HANDLERS = {
    ev.SKILL_CREATED: _Fold.skill_created,
    ev.VERSION_CREATED: _Fold.version_created,
    ev.VERSION_TRANSITIONED: _Fold.version_transitioned,
    ev.VALIDATION_REQUESTED: _Fold.validation_requested,
    ev.VALIDATION_FINISHED: _Fold.validation_finished,
    ev.EXECUTION_REQUESTED: _Fold.execution_requested,
    ev.EXECUTION_FINISHED: _Fold.execution_finished,
    ev.EXECUTION_REPORTED: _Fold.execution_reported,
    ev.TRACE_RECORDED: _Fold.trace_recorded,
}


def _fold(agent_id: Any) -> _Fold:
    fold = _Fold(
        agent_id=agent_id,
        rows=_Rows.of(agent_id),
        live=set(
            Event.objects.filter(agent_id=agent_id, redacted_at__isnull=True).values_list(
                "pk", flat=True
            )
        ),
    )
    events = (
        Event.objects.filter(agent_id=agent_id, event_type__in=ev.ALL)
        .order_by("seq")
        .only(
            "id",
            "seq",
            "event_type",
            "payload",
            "session_id",
            "actor",
            "source_type",
            "recorded_at",
            "redacted_at",
        )
    )
    for event in events.iterator(chunk_size=BATCH):
        if event.redacted_at is not None:
            if event.event_type == ev.VERSION_TRANSITIONED:
                fold.transition_erased(event)
            continue
        HANDLERS[event.event_type](fold, event)
    return fold


def _embed_missing(versions: list[SkillVersion]) -> None:
    """The intent embedding of each version whose row was not there to keep it."""
    missing = [v for v in versions if v.intent_embedding is None]
    if missing:
        vectors = embeddings.get_embedder().embed(
            [intent_text_of(v.purpose, v.trigger) for v in missing]
        )
        for version, vector in zip(missing, vectors, strict=True):
            version.intent_embedding = vector


def _rebuild_agent(agent_id: Any) -> int:
    fold = _fold(agent_id)
    versions = list(fold.versions.values())
    _embed_missing(versions)
    drop_rows(agent_id)
    Skill.objects.bulk_create(fold.skills.values(), batch_size=BATCH)
    # A version supersedes an earlier one: chain order inserts it first.
    SkillVersion.objects.bulk_create(versions, batch_size=BATCH)
    _bulk_create_numbered(VersionProvenance, fold.provenance)
    _bulk_create_numbered(VersionTransition, fold.transitions)
    Validation.objects.bulk_create(fold.validations.values(), batch_size=BATCH)
    _bulk_create_numbered(ValidationCase, fold.cases)
    Execution.objects.bulk_create(fold.executions.values(), batch_size=BATCH)
    SkillTrace.objects.bulk_create(fold.traces, batch_size=BATCH)
    return fold.applied


def drop_rows(agent_id: Any) -> None:
    """Delete the agent's procedural memory, what hangs off a row before the row."""
    mine = {"agent_id": agent_id}
    with connection.cursor() as cursor:
        # History and finished runs refuse a DELETE but to a rebuild (0009).
        cursor.execute("SELECT set_config(%s, 'on', true)", [REBUILD_SETTING])
        ValidationCase.objects.filter(validation__agent_id=agent_id).delete()
        Validation.objects.filter(**mine).delete()
        Execution.objects.filter(**mine).delete()
        VersionProvenance.objects.filter(**mine).delete()
        VersionTransition.objects.filter(**mine).delete()
        # Versions of one skill may supersede each other: one statement.
        cursor.execute(f"DELETE FROM {SkillVersion._meta.db_table} WHERE agent_id = %s", [agent_id])
        Skill.objects.filter(**mine).delete()
        SkillTrace.objects.filter(**mine).delete()
        cursor.execute("SELECT set_config(%s, 'off', true)", [REBUILD_SETTING])


def _bulk_create_numbered(model, rows: list) -> None:
    """Rows numbered by a sequence keep the numbers of the rows they were (set
    when the fold made them); new ones are numbered after them, in chain order."""
    model.objects.bulk_create([row for row in rows if row.id is not None], batch_size=BATCH)
    model.objects.bulk_create([row for row in rows if row.id is None], batch_size=BATCH)
