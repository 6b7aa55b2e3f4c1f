"""A version's lifecycle: candidate → experimental → validated → deprecated → retired.

Promotion needs outcome evidence, never a request alone:

* candidate (or deprecated) → experimental: its latest examples validation
  passed in the sandbox;
* experimental → validated: evidence the author did not produce alone —
  either a successful, externally verified run reported with a different API
  key than the one that wrote the version (a verifier: CI, a reviewer, another
  service), or a passing *drawn* replay (the procedure run in the sandbox on
  inputs the service drew from its parameter_schema, judged by its validator:
  skills.drawing) together with SKILLS_PROMOTION_SUCCESSES verified
  successful executions (the validator passed, or the run was externally
  verified). The author's own validator on inputs the author chose, the
  author's hold-out cases, or a self-reported `externally_verified` flag is
  never enough on its own.

A version that becomes validated deprecates the earlier versions of its skill
("superseded by vN"); they stay readable with all their executions. A
validated version whose recent success rate drops below SKILLS_DEPRECATE_BELOW
is deprecated automatically. Every move is a compare-and-set under a row lock,
a VersionTransition row and a `skill.version_transitioned` ledger event.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from ledger.models import Event
from ledger.services import event_append
from piper.errors import Conflict, InvalidInput, NotFound
from piper.provenance import SourceType
from piper.tenancy.models import Agent

from .. import events
from ..models import (
    STATUS_TRANSITIONS,
    Execution,
    ExecutionStatus,
    Skill,
    SkillVersion,
    Validation,
    ValidationKind,
    ValidationStatus,
    VersionStatus,
    VersionTransition,
)

logger = logging.getLogger(__name__)
MAX_REASON = 300


def record_transition(
    version: SkillVersion, from_status: str, to_status: str, reason: str, event: Event, actor: str
) -> VersionTransition:
    return VersionTransition.objects.create(
        agent_id=version.agent_id,
        version=version,
        from_status=from_status,
        to_status=to_status,
        reason=reason,
        actor=actor,
        event=event,
        at=event.recorded_at,
    )


def _check_reason(reason: object, *, required: bool) -> str:
    if not isinstance(reason, str) or len(reason) > MAX_REASON or (required and not reason.strip()):
        raise InvalidInput(
            f"reason: {'required, ' if required else ''}text of at most {MAX_REASON} characters",
            details={"reason": ["required" if required else "invalid"]},
        )
    return reason.strip()


def locked_version(agent: Agent | None, version_id: uuid.UUID) -> SkillVersion:
    """The version, locked for a change, after its skill's row.

    Writers of one skill's versions queue on the skill first (the lock is held
    to the end of the transaction). Validating a version locks the older ones
    to deprecate them, while holding the agent's ledger chain: were the older
    versions lockable without the skill, a report on one of them could hold it
    and wait for that chain — a deadlock (scripts/chaos/state_races.py found it).
    """
    scope = SkillVersion.objects.filter(pk=version_id)
    if agent is not None:
        scope = scope.filter(agent=agent)
    skill_id = scope.values_list("skill_id", flat=True).first()
    if skill_id is None:
        raise NotFound(f"skill version {version_id} not found")
    # NO KEY: a new version's insert (a key share on the skill) need not wait.
    list(Skill.objects.select_for_update(no_key=True).filter(pk=skill_id).values_list("pk"))
    version = (
        SkillVersion.objects.select_for_update(of=("self",))
        .select_related("skill", "agent")
        .filter(pk=version_id)
        .first()
    )
    if version is None:  # erased meanwhile
        raise NotFound(f"skill version {version_id} not found")
    return version


def move(version: SkillVersion, to_status: str, reason: str, *, actor: str = "") -> None:
    """Move a locked version; Conflict `invalid_transition` when the lifecycle forbids it."""
    if to_status not in STATUS_TRANSITIONS[version.status]:
        raise Conflict(
            f"skill version is {version.status}; it cannot become {to_status}",
            code="invalid_transition",
            details={"status": version.status, "to": to_status},
        )
    event = event_append(
        agent=version.agent,
        event_type=events.VERSION_TRANSITIONED,
        payload={
            "skill_id": str(version.skill_id),
            "version_id": str(version.pk),
            "number": version.number,
            "from": version.status,
            "to": to_status,
            "reason": reason,
        },
        actor=actor,
        source_type=SourceType.OPERATOR
        if actor.startswith("admin:")
        else SourceType.AGENT_INFERENCE,
    )
    record_transition(version, version.status, to_status, reason, event, actor)
    changed = SkillVersion.objects.filter(pk=version.pk, status=version.status).update(
        status=to_status, status_changed_at=event.recorded_at
    )
    if not changed:  # cannot happen under the row lock; guard anyway
        raise Conflict("skill version changed concurrently; retry", code="concurrent_change")
    version.status = to_status


# ------------------------------------------------------------------------ evidence


@dataclass(frozen=True)
class Evidence:
    ready: bool
    why: str


def _latest_validation(version: SkillVersion, kind: str) -> Validation | None:
    return (
        Validation.objects.filter(version=version, kind=kind)
        .exclude(status=ValidationStatus.QUEUED)
        .order_by("-id")
        .first()
    )


def experimental_evidence(version: SkillVersion) -> Evidence:
    latest = _latest_validation(version, ValidationKind.EXAMPLES)
    if latest is None:
        return Evidence(False, "its examples have not been run in the sandbox yet")
    if latest.status != ValidationStatus.PASSED:
        return Evidence(
            False,
            f"its latest examples validation {latest.pk} {latest.status} "
            f"({latest.cases_passed}/{latest.cases_total} passed)",
        )
    return Evidence(True, f"all {latest.cases_total} examples passed in the sandbox")


def _verified_successes(version: SkillVersion):
    return Execution.objects.filter(
        version=version, status=ExecutionStatus.FINISHED, succeeded=True
    ).filter(Q(validator_passed=True) | Q(externally_verified=True))


def _author(version: SkillVersion) -> str:
    """Who wrote the version: its ledger event's actor ("key:<prefix>" through the API)."""
    return Event.objects.filter(pk=version.source_event_id).values_list("actor", flat=True).first()


def independent_verifications(version: SkillVersion):
    """Successful, externally verified runs reported with an API key other than the
    one that wrote the version."""
    return (
        _verified_successes(version)
        .filter(externally_verified=True, source_event__actor__startswith="key:")
        .exclude(source_event__actor=_author(version) or "")
    )


def validated_evidence(version: SkillVersion) -> Evidence:
    verified_by_other = independent_verifications(version).count()
    if verified_by_other:
        return Evidence(True, "an externally verified run reported with another key")
    needed = settings.SKILLS_PROMOTION_SUCCESSES
    verified = _verified_successes(version).count()
    drawn = _latest_validation(version, ValidationKind.DRAWN)
    drawn_passed = drawn is not None and drawn.status == ValidationStatus.PASSED
    if drawn_passed and verified >= needed:
        return Evidence(
            True,
            f"a drawn replay passed ({drawn.cases_passed} inputs the service drew) and "
            f"{verified} verified successful executions (need {needed})",
        )
    missing = [f"{verified} of {needed} verified successful executions"]
    if drawn is None:
        missing.append("no drawn replay yet")
    elif not drawn_passed:
        missing.append(
            f"the latest drawn replay {drawn.status} ({drawn.cases_passed}/{drawn.cases_total})"
        )
    missing.append("no externally verified run reported with another key")
    return Evidence(False, "; ".join(missing))


# ---------------------------------------------------------------------- transitions


def _promote_locked(version: SkillVersion, reason: str, actor: str) -> None:
    if version.status in (VersionStatus.CANDIDATE, VersionStatus.DEPRECATED):
        target, evidence = VersionStatus.EXPERIMENTAL, experimental_evidence(version)
    elif version.status == VersionStatus.EXPERIMENTAL:
        target, evidence = VersionStatus.VALIDATED, validated_evidence(version)
    else:
        raise Conflict(
            f"skill version is {version.status}; there is nothing to promote it to",
            code="invalid_transition",
            details={"status": version.status},
        )
    if not evidence.ready:
        raise Conflict(
            f"cannot promote to {target}: {evidence.why}",
            code="evidence_missing",
            details={"status": version.status, "to": target, "missing": evidence.why},
        )
    move(version, target, f"{reason}: {evidence.why}" if reason else evidence.why, actor=actor)
    if target == VersionStatus.VALIDATED:
        _supersede_older(version, actor)


def _supersede_older(version: SkillVersion, actor: str) -> None:
    older = (
        # The versions' rows only: not the agent's (consolidation.services' run step).
        SkillVersion.objects.select_for_update(of=("self",))
        .select_related("agent")
        .filter(skill_id=version.skill_id, number__lt=version.number)
        .filter(
            status__in=(
                VersionStatus.CANDIDATE,
                VersionStatus.EXPERIMENTAL,
                VersionStatus.VALIDATED,
            )
        )
        .order_by("number")
    )
    for old in older:
        move(old, VersionStatus.DEPRECATED, f"superseded by v{version.number}", actor=actor)


def version_promote(
    *,
    agent: Agent,
    version_id: uuid.UUID,
    reason: str = "",
    actor: str = "",
    from_status: str | None = None,
) -> SkillVersion:
    """Promote one step if the evidence is there; Conflict `evidence_missing`
    (with what is missing) otherwise, `invalid_transition` for a validated or
    retired version. With `from_status`, only from that status: Conflict
    `stale_status` when the version has left it (two promotions sent at once
    would otherwise take two steps, e.g. deprecated → experimental → validated)."""
    reason = _check_reason(reason, required=False)
    with transaction.atomic():
        version = locked_version(agent, version_id)
        if from_status is not None and version.status != from_status:
            raise Conflict(
                f"skill version is {version.status}, not {from_status}; read it again",
                code="stale_status",
                details={"status": version.status, "from_status": from_status},
            )
        _promote_locked(version, reason, actor)
    return version


def version_deprecate(
    *, agent: Agent, version_id: uuid.UUID, reason: str, actor: str = ""
) -> SkillVersion:
    """No longer offered by match; its executions stay. Idempotent."""
    reason = _check_reason(reason, required=True)
    with transaction.atomic():
        version = locked_version(agent, version_id)
        if version.status != VersionStatus.DEPRECATED:
            move(version, VersionStatus.DEPRECATED, reason, actor=actor)
    return version


def version_retire(
    *, agent: Agent, version_id: uuid.UUID, reason: str, actor: str = ""
) -> SkillVersion:
    """Never to be used again (executing it needs allow_unvalidated). Idempotent."""
    reason = _check_reason(reason, required=True)
    with transaction.atomic():
        version = locked_version(agent, version_id)
        if version.status != VersionStatus.RETIRED:
            move(version, VersionStatus.RETIRED, reason, actor=actor)
    return version


def consider_promotion(*, version_id: uuid.UUID) -> str | None:
    """After new evidence (a validation or an execution finished): promote as far
    as the evidence goes. Returns the new status, or None when nothing moved."""
    with transaction.atomic():
        version = locked_version(None, version_id)
        moved = None
        for _ in range(2):
            if version.status not in (VersionStatus.CANDIDATE, VersionStatus.EXPERIMENTAL):
                break
            try:
                _promote_locked(version, "automatic", "piper")
            except Conflict:
                break
            moved = version.status
        if moved == VersionStatus.EXPERIMENTAL:
            # In the promotion's transaction: a worker killed between the two would
            # leave an experimental version that nothing replays (worker_kill.py).
            _request_replays(version)
    return moved


def _request_replays(version: SkillVersion) -> None:
    """Replay the hold-out cases (the author's check), and draw inputs the author
    did not choose: a passing drawn replay is evidence toward validated."""
    from .runs import validation_request

    if version.holdout:
        validation_request(
            agent=version.agent, version=version, kind=ValidationKind.HOLDOUT, actor="piper"
        )
    try:
        with transaction.atomic():
            validation_request(
                agent=version.agent, version=version, kind=ValidationKind.DRAWN, actor="piper"
            )
    except Conflict as exc:  # no validator, or a schema the drawer cannot draw from
        logger.info("version %s gets no drawn replay: %s", version.pk, exc.message)


def recent_success_rate(
    version: SkillVersion, window: int | None = None
) -> tuple[int, float | None]:
    """(how many of the last `window` finished executions there are, their success rate)."""
    window = window or settings.SKILLS_RECENT_WINDOW
    recent = list(
        Execution.objects.filter(version=version, status=ExecutionStatus.FINISHED)
        .order_by("-id")
        .values_list("succeeded", flat=True)[:window]
    )
    if not recent:
        return 0, None
    return len(recent), sum(recent) / len(recent)


def consider_deprecation(*, version_id: uuid.UUID) -> bool:
    """Deprecate a validated version whose recent success rate fell below the
    threshold (with at least SKILLS_DEPRECATE_MIN_EXECUTIONS recent runs)."""
    with transaction.atomic():
        version = locked_version(None, version_id)
        if version.status != VersionStatus.VALIDATED:
            return False
        count, rate = recent_success_rate(version)
        if (
            count < settings.SKILLS_DEPRECATE_MIN_EXECUTIONS
            or rate >= settings.SKILLS_DEPRECATE_BELOW
        ):
            return False
        move(
            version,
            VersionStatus.DEPRECATED,
            f"recent success rate {rate:.0%} of the last {count} executions is below "
            f"{settings.SKILLS_DEPRECATE_BELOW:.0%}",
            actor="piper",
        )
        logger.info("skill version %s deprecated: failing", version.pk)
        return True


def review_validated() -> list[uuid.UUID]:
    """celery-beat: deprecate every failing validated version. Returns their ids.

    One query finds the suspects (their recent rate, as with_stats derives it);
    each is then re-checked under its row lock."""
    from ..selectors import with_stats

    suspects = (
        with_stats(SkillVersion.objects.filter(status=VersionStatus.VALIDATED))
        .filter(recent_total__gte=settings.SKILLS_DEPRECATE_MIN_EXECUTIONS)
        .values_list("pk", "recent_total", "recent_successes")
    )
    ids = [
        pk
        for pk, total, successes in suspects
        if successes / total < settings.SKILLS_DEPRECATE_BELOW
    ]
    return [version_id for version_id in ids if consider_deprecation(version_id=version_id)]
