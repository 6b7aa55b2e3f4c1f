"""Every read of procedural memory, scoped to one agent — and matching.

Another agent's skill, version, validation or execution is NotFound, exactly
like one that never existed. A version's statistics are derived here from
its executions and validations (`with_stats`), never stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Count,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.expressions import RawSQL

from piper.errors import NotFound
from piper.tenancy.models import Agent

from . import conditions
from .models import (
    Execution,
    ExecutionStatus,
    Skill,
    SkillTrace,
    SkillVersion,
    Validation,
    ValidationCase,
    ValidationStatus,
    VersionStatus,
    VersionTransition,
)

FINISHED = Q(executions__status=ExecutionStatus.FINISHED)
# Heavy columns a listing never shows.
CODE_COLUMNS = ("procedure", "validator", "rollback", "intent_embedding")


# The last SKILLS_RECENT_WINDOW finished runs of a version: how many, how many worked.
_RECENT = (
    "SELECT count(*), count(*) FILTER (WHERE r.succeeded) FROM (SELECT e.succeeded "
    "FROM skills_execution e WHERE e.version_id = skills_skillversion.id "
    "AND e.status = 'finished' ORDER BY e.id DESC LIMIT %s) r"
)


def _run_figures() -> dict:
    """The annotations of a version's runs that its evidence shows: finished runs,
    the last one's time, and the last SKILLS_RECENT_WINDOW runs and successes."""
    window = settings.SKILLS_RECENT_WINDOW
    return {
        "executions_total": Count("executions", filter=FINISHED),
        "last_used_at": Max("executions__created_at"),
        "recent_total": RawSQL(f"SELECT count FROM ({_RECENT}) x(count, ok)", [window]),
        "recent_successes": RawSQL(f"SELECT ok FROM ({_RECENT}) x(count, ok)", [window]),
    }


def with_stats(versions: QuerySet[SkillVersion]) -> QuerySet[SkillVersion]:
    """Annotate what is derived from executions and validations:

    executions_total, successes, failures (finished runs), verified_successes
    (validator passed, or externally verified), last_used_at, transfer_total
    and transfer_successes (runs on parameters that are none of the examples),
    recent_total and recent_successes (the last SKILLS_RECENT_WINDOW runs),
    last_validated_at and last_validation_status."""
    latest_validation = Validation.objects.filter(version=OuterRef("pk")).exclude(
        status=ValidationStatus.QUEUED
    )
    return versions.annotate(
        **_run_figures(),
        successes=Count("executions", filter=FINISHED & Q(executions__succeeded=True)),
        failures=Count("executions", filter=FINISHED & Q(executions__succeeded=False)),
        verified_successes=Count(
            "executions",
            filter=FINISHED
            & Q(executions__succeeded=True)
            & (Q(executions__validator_passed=True) | Q(executions__externally_verified=True)),
        ),
        transfer_total=Count("executions", filter=FINISHED & Q(executions__novel_params=True)),
        transfer_successes=Count(
            "executions",
            filter=FINISHED & Q(executions__novel_params=True, executions__succeeded=True),
        ),
        last_validated_at=Subquery(latest_validation.order_by("-id").values("finished_at")[:1]),
        last_validation_status=Subquery(latest_validation.order_by("-id").values("status")[:1]),
    )


def rate(successes: int, total: int) -> float | None:
    return round(successes / total, 4) if total else None


# ------------------------------------------------------------------------- skills


def _latest_versions() -> Prefetch:
    return Prefetch(
        "versions",
        queryset=with_stats(SkillVersion.objects.defer(*CODE_COLUMNS)).order_by("-number"),
        to_attr="version_list",
    )


def skill_list(*, agent: Agent, name: str | None = None) -> QuerySet[Skill]:
    skills = Skill.objects.filter(agent=agent)
    if name:
        skills = skills.filter(name=name)
    return skills.prefetch_related(_latest_versions()).order_by("-id")


def skill_get(*, agent: Agent, skill_id: uuid.UUID) -> Skill:
    skill = (
        Skill.objects.filter(agent=agent, pk=skill_id).prefetch_related(_latest_versions()).first()
    )
    if skill is None:
        raise NotFound(f"skill {skill_id} not found")
    return skill


# ----------------------------------------------------------------------- versions


def versions_as_evidence(
    *, agent: Agent, version_ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, SkillVersion]:
    """The versions a recall or a context call shows, by id, in one statement:
    what their evidence says of them (when made, by which event, how often run
    and how often it worked lately), not the rest of with_stats, whose query
    costs more to build than to run."""
    ids = list(version_ids)
    if not ids:
        return {}
    return (
        SkillVersion.objects.filter(agent=agent, pk__in=ids)
        .select_related("source_event")
        .only(
            "id",
            "created_at",
            "source_event__id",
            "source_event__source_type",
            "source_event__authority",
        )
        .annotate(**_run_figures())
        .in_bulk()
    )


def version_get(*, agent: Agent, version_id: uuid.UUID) -> SkillVersion:
    """One version with its statistics, transitions (in order) and provenance."""
    version = (
        with_stats(SkillVersion.objects.filter(agent=agent, pk=version_id))
        .select_related("skill")
        .defer("intent_embedding")
        .prefetch_related(
            Prefetch(
                "transitions",
                queryset=VersionTransition.objects.order_by("id"),
                to_attr="transition_list",
            ),
            "provenance",
            Prefetch(
                "superseded_by",
                queryset=SkillVersion.objects.only("id", "supersedes_id", "number"),
                to_attr="superseded_by_list",
            ),
        )
        .first()
    )
    if version is None:
        raise NotFound(f"skill version {version_id} not found")
    return version


# -------------------------------------------------------------------- validations


def validation_list(*, agent: Agent, version: SkillVersion) -> QuerySet[Validation]:
    return (
        Validation.objects.filter(agent=agent, version=version)
        .prefetch_related(
            Prefetch(
                "cases", queryset=ValidationCase.objects.order_by("index"), to_attr="case_list"
            )
        )
        .order_by("-id")
    )


def validation_get(*, agent: Agent, validation_id: uuid.UUID) -> Validation:
    validation = (
        Validation.objects.filter(agent=agent, pk=validation_id)
        .prefetch_related(
            Prefetch(
                "cases", queryset=ValidationCase.objects.order_by("index"), to_attr="case_list"
            )
        )
        .first()
    )
    if validation is None:
        raise NotFound(f"validation {validation_id} not found")
    return validation


# --------------------------------------------------------------------- executions


def execution_list(
    *, agent: Agent, version: SkillVersion | None = None, source: str | None = None
) -> QuerySet[Execution]:
    executions = Execution.objects.filter(agent=agent)
    if version is not None:
        executions = executions.filter(version=version)
    if source:
        executions = executions.filter(source=source)
    return executions.order_by("-id")


def execution_get(*, agent: Agent, execution_id: uuid.UUID) -> Execution:
    execution = Execution.objects.filter(agent=agent, pk=execution_id).first()
    if execution is None:
        raise NotFound(f"execution {execution_id} not found")
    return execution


def trace_list(
    *,
    agent: Agent,
    succeeded: bool | None = None,
    verified: bool | None = None,
    session_id: str | None = None,
    task_id: str | None = None,
) -> QuerySet[SkillTrace]:
    traces = SkillTrace.objects.filter(agent=agent)
    if succeeded is not None:
        traces = traces.filter(succeeded=succeeded)
    if verified is not None:
        traces = traces.filter(verified=verified)
    if session_id:
        traces = traces.filter(session_id=session_id)
    if task_id:
        traces = traces.filter(task_id=task_id)
    return traces.order_by("-id")


def trace_get(*, agent: Agent, trace_id: uuid.UUID) -> SkillTrace:
    trace = SkillTrace.objects.filter(agent=agent, pk=trace_id).first()
    if trace is None:
        raise NotFound(f"trace {trace_id} not found")
    return trace


# ----------------------------------------------------------------------- matching


@lru_cache(maxsize=2048)
def _task_embedding(task: str) -> tuple[float, ...]:
    from piper.embeddings import get_embedder

    return tuple(get_embedder().embed_one(task))


@dataclass
class Candidate:
    version: SkillVersion
    similarity: float
    trigger: conditions.TriggerMatch
    reasons: list[dict] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(self.similarity + 0.1 * self.trigger.strength, 4)


@dataclass(frozen=True)
class MatchResult:
    applicable: list[Candidate]
    near_misses: list[Candidate]


MATCH_COLUMNS = (
    "id",
    "agent_id",
    "skill_id",
    "number",
    "purpose",
    "scope",
    "status",
    "trigger",
    "preconditions",
    "contraindications",
    "required_tools",
    "required_permissions",
    "parameter_schema",
)

# One statement. Each branch ranks the agent's versions of some statuses by
# exact cosine distance through an index-only scan of skills_version_match_idx
# (agent, status, id) INCLUDE (intent_embedding), so only those columns are
# read for the thousands of versions ranked; the full rows are fetched for the
# few that are examined. Ties are broken by id, as before.
_NEAREST_SQL = """
WITH ranked AS (
    (SELECT id, intent_embedding <=> %(vector)s::vector AS distance, 0 AS pass
       FROM skills_skillversion
      WHERE agent_id = %(agent)s AND status = %(validated)s
      ORDER BY 2, id LIMIT %(candidates)s)
    UNION ALL
    (SELECT id, intent_embedding <=> %(vector)s::vector, 1
       FROM skills_skillversion
      WHERE agent_id = %(agent)s AND status IN (%(candidate)s, %(experimental)s)
      ORDER BY 2, id LIMIT %(trying)s)
)
SELECT {columns}, s.name AS skill_name, ranked.distance
  FROM ranked
  JOIN skills_skillversion v ON v.id = ranked.id
  JOIN skills_skill s ON s.id = v.skill_id
 ORDER BY ranked.pass, ranked.distance, v.id
""".format(columns=", ".join(f"v.{c}" for c in MATCH_COLUMNS))


def _nearest(agent: Agent, vector: tuple[float, ...], trying: int) -> list[SkillVersion]:
    """The SKILLS_MATCH_CANDIDATES validated versions nearest to `vector`, then
    the `trying` nearest candidate and experimental ones, each with `distance`
    and its skill (only the name loaded)."""
    params = {
        "vector": SkillVersion._meta.get_field("intent_embedding").get_db_prep_value(
            list(vector), connection
        ),
        "agent": agent.pk,
        "validated": VersionStatus.VALIDATED,
        "candidate": VersionStatus.CANDIDATE,
        "experimental": VersionStatus.EXPERIMENTAL,
        "candidates": settings.SKILLS_MATCH_CANDIDATES,
        "trying": trying,
    }
    with transaction.atomic():
        # The rows sit in memory; at the default random_page_cost (4) the
        # planner prefers reading the whole table (every agent's rows) to the
        # index-only scan of this agent's entries, three times faster
        # (docs/benchmarks.md, skill matching). For this statement only:
        # the old value is put back, since a caller's transaction may go on.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('random_page_cost'),"
                " set_config('random_page_cost', '1.1', true)"
            )
            previous = cursor.fetchone()[0]
        try:
            versions = list(SkillVersion.objects.raw(_NEAREST_SQL, params))
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('random_page_cost', %s, true)", [previous])
    for version in versions:
        version.skill = Skill(
            id=version.skill_id, agent_id=version.agent_id, name=version.skill_name
        )
    return versions


def _examine(
    version: SkillVersion, similarity: float, task: str, context: Any, scopes: Any
) -> Candidate:
    candidate = Candidate(
        version, round(similarity, 4), conditions.trigger_match(version.trigger, task)
    )
    reasons = candidate.reasons
    if version.status != VersionStatus.VALIDATED:
        reasons.append({"type": "not_validated", "status": version.status})
    if similarity < settings.SKILLS_MATCH_MIN_SIMILARITY:
        reasons.append(
            {
                "type": "below_similarity",
                "similarity": candidate.similarity,
                "threshold": settings.SKILLS_MATCH_MIN_SIMILARITY,
            }
        )
    if not candidate.trigger.matched:
        reasons.append({"type": "trigger_not_matched", "trigger": version.trigger})
    for failed in conditions.failed_preconditions(version.preconditions, context):
        reasons.append({"type": "precondition_failed", **failed})
    for applying in conditions.applying_contraindications(version.contraindications, task, context):
        reasons.append({"type": "contraindicated", **applying})
    held = set(scopes or ())
    if (
        scopes is not None
        and "admin" not in held
        and (missing := sorted(set(version.required_permissions) - held))
    ):
        reasons.append({"type": "missing_permission", "missing": missing})
    return candidate


def skill_match(
    *,
    agent: Agent,
    task: str,
    context: Any,
    scopes: Any = None,
    limit: int = 5,
    near_miss_limit: int = 5,
    task_embedding: Sequence[float] | None = None,
) -> MatchResult:
    """The agent's validated skill versions that apply to `task` in `context`.

    The rule: a version applies only if it is validated, its intent is at
    least SKILLS_MATCH_MIN_SIMILARITY similar (cosine) to the task, its
    trigger matches the task text, every precondition holds in the context,
    no contraindication applies, and the key holds its required permissions.
    Similarity alone never makes one applicable. Applicable versions are
    ranked by similarity + 0.1 × trigger strength (1 for a regex match, else
    the share of keywords found). The SKILLS_MATCH_CANDIDATES most similar
    validated versions are examined, plus the most similar candidate and
    experimental ones (only ever near misses, "not_validated"). Near misses are
    rejected versions that were similar enough or whose trigger matched, each
    with its typed reasons, best first.
    """
    examined = [
        _examine(v, 1.0 - float(v.distance), task, context, scopes)
        for v in _nearest(
            agent,
            _task_embedding(task) if task_embedding is None else tuple(task_embedding),
            near_miss_limit,
        )
    ]
    applicable = sorted(
        (c for c in examined if not c.reasons),
        key=lambda c: (-c.score, -c.similarity, str(c.version.pk)),
    )
    near = [
        c
        for c in examined
        if c.reasons and (c.trigger.matched or c.similarity >= settings.SKILLS_MATCH_MIN_SIMILARITY)
    ]
    near.sort(key=lambda c: (-c.score, -c.similarity, str(c.version.pk)))
    return MatchResult(applicable=applicable[:limit], near_misses=near[:near_miss_limit])
