"""Erasure in procedural memory: skills, their versions, runs and provenance.

Called by the forgetting app, inside its transaction, after episodic memory
has erased its rows (the episode ids it removed are in the scope). A version,
validation or execution made by an erased event goes, with what hangs off it;
a surviving version loses the erased events and episodes from its provenance.
The history guards (migration 0006) allow this only while the erasure's
transaction-local setting is on.
"""

from __future__ import annotations

import uuid

from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL

from ledger.erasure import ErasureScope, allow_erasure_in_this_transaction, finding
from piper.tenancy.models import Agent

from ..models import (
    Execution,
    Skill,
    SkillTrace,
    SkillVersion,
    Validation,
    ValidationCase,
    VersionProvenance,
    VersionTransition,
)

SKILLS = "skills"
VERSIONS = "skill_versions"
VALIDATIONS = "skill_validations"
EXECUTIONS = "skill_executions"
TRACES = "skill_traces"
PROVENANCE = "skill_provenance"  # links from surviving versions to erased evidence
EPISODES = "episodes"
MADE = "made_from_erased_event"  # the episodic eraser's name for the episodes it removed


def expand(*, agent: Agent, event_ids: set[uuid.UUID], staged: RawSQL) -> set[uuid.UUID]:
    """A run goes whole: the request and the finish of every validation or
    execution one of whose events is erased (the eraser removes the run, and a
    rebuild from the ledger must not find half of it)."""
    more: set[uuid.UUID] = set()
    for model in (Validation, Execution):
        for request, finish in (
            model.objects.filter(agent=agent)
            .filter(Q(source_event_id__in=staged) | Q(finish_event_id__in=staged))
            .values_list("source_event_id", "finish_event_id")
        ):
            more.update(e for e in (request, finish) if e is not None)
    return more - event_ids


def erase(scope: ErasureScope) -> None:
    agent, erased = scope.agent, scope.erased_events()
    erased_episodes = [str(e) for e in scope.removed_ids(EPISODES)]
    skills = Skill.objects.filter(agent=agent, source_event_id__in=erased)
    versions = SkillVersion.objects.filter(agent=agent).filter(
        Q(source_event_id__in=erased) | Q(skill__in=skills)
    )
    version_ids = list(versions.values_list("id", flat=True))
    validations = Validation.objects.filter(agent=agent).filter(
        Q(version_id__any=version_ids)
        | Q(source_event_id__in=erased)
        | Q(finish_event_id__in=erased)
    )
    executions = Execution.objects.filter(agent=agent).filter(
        Q(version_id__any=version_ids)
        | Q(source_event_id__in=erased)
        | Q(finish_event_id__in=erased)
    )
    provenance = VersionProvenance.objects.filter(agent=agent).filter(
        Q(version_id__any=version_ids) | Q(event_id__in=erased)
    )
    quoting = SkillVersion.objects.none()
    if erased_episodes:
        quoting = (
            SkillVersion.objects.filter(agent=agent)
            .exclude(pk__any=version_ids)
            .filter(provenance_episodes__has_any_keys=erased_episodes)
        )
    superseding = SkillVersion.objects.filter(agent=agent, supersedes_id__any=version_ids).exclude(
        pk__any=version_ids
    )
    traces = SkillTrace.objects.filter(agent=agent, source_event_id__in=erased)
    if not (
        version_ids
        or traces.exists()
        or validations.exists()
        or executions.exists()
        or provenance.exists()
        or quoting.exists()
    ):
        return
    allow_erasure_in_this_transaction()

    for purpose, procedure, vector in versions.values_list(
        "purpose", "procedure", "intent_embedding"
    ):
        scope.add_texts([purpose, procedure])
        scope.add_vector(SkillVersion._meta.db_table, vector)
    for task, stdout in executions.values_list("task", "stdout")[:200]:
        scope.add_texts([task, stdout])

    scope.add_texts(traces.values_list("task", flat=True)[:200])
    scope.note_removed(TRACES, traces.values_list("id", flat=True))
    traces.delete()
    ValidationCase.objects.filter(validation__in=validations).delete()
    scope.note_removed(VALIDATIONS, validations.values_list("id", flat=True))
    validations.delete()
    scope.note_removed(EXECUTIONS, executions.values_list("id", flat=True))
    executions.delete()
    scope.note_removed(
        PROVENANCE, provenance.filter(event_id__in=erased).values_list("id", flat=True)
    )
    provenance.delete()
    # Surviving versions keep their other provenance, and lose links to what went.
    cut = list(quoting.values_list("id", "provenance_episodes"))
    for version_id, episodes in cut:
        SkillVersion.objects.filter(pk=version_id).update(
            provenance_episodes=[e for e in episodes if e not in set(erased_episodes)]
        )
    scope.note_removed(PROVENANCE, [f"{v}:episodes" for v, _ in cut])
    superseding.update(supersedes=None)
    if version_ids:
        VersionTransition.objects.filter(version_id__any=version_ids).delete()
        with connection.cursor() as cursor:
            # Versions of one skill may supersede each other: one statement.
            cursor.execute(
                f"DELETE FROM {SkillVersion._meta.db_table} WHERE id = ANY(%s)", [version_ids]
            )
        scope.note_removed(VERSIONS, version_ids)
    gone = list(skills.values_list("id", flat=True))
    scope.note_removed(SKILLS, gone)
    Skill.objects.filter(pk__any=gone).delete()


def residue(scope: ErasureScope) -> list[dict]:
    agent, erased = scope.agent, scope.erased_events()
    erased_episodes = [str(e) for e in scope.removed_ids(EPISODES)]
    findings = [
        finding(SKILLS, MADE, Skill.objects.filter(agent=agent, source_event_id__in=erased)),
        finding(
            VERSIONS, MADE, SkillVersion.objects.filter(agent=agent, source_event_id__in=erased)
        ),
        finding(
            VALIDATIONS,
            MADE,
            Validation.objects.filter(agent=agent).filter(
                Q(source_event_id__in=erased) | Q(finish_event_id__in=erased)
            ),
        ),
        finding(
            EXECUTIONS,
            MADE,
            Execution.objects.filter(agent=agent).filter(
                Q(source_event_id__in=erased) | Q(finish_event_id__in=erased)
            ),
        ),
        finding(
            PROVENANCE, MADE, VersionProvenance.objects.filter(agent=agent, event_id__in=erased)
        ),
        finding(TRACES, MADE, SkillTrace.objects.filter(agent=agent, source_event_id__in=erased)),
    ]
    links = (
        SkillVersion.objects.filter(agent=agent, provenance_episodes__has_any_keys=erased_episodes)
        if erased_episodes
        else SkillVersion.objects.none()
    )
    findings.append(finding(PROVENANCE, "links_to_erased_row", links))
    return findings
