"""Thin, idempotent tasks. Skill code runs only in `skills.sandbox.*` tasks, which
CELERY_TASK_ROUTES sends to the SKILLS_SANDBOX_QUEUE (workers started with
`-Q sandbox`); a re-delivered task finds its row finished and does nothing."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task

logger = logging.getLogger(__name__)

MAX_RETRIES = 3


def _unavailable():
    try:
        from skills.sandbox import SandboxUnavailable
    except ImportError:  # no sandbox package in this deployment
        return ImportError
    return SandboxUnavailable


@shared_task(
    bind=True,
    name="skills.sandbox.validate_version",
    ignore_result=True,
    max_retries=MAX_RETRIES,
    soft_time_limit=1200,
    time_limit=1260,
)
def validate_version(self, validation_id: str) -> None:
    """Run a queued validation's cases in the sandbox; promote on success."""
    from .services import runs

    try:
        runs.validation_run(validation_id=uuid.UUID(validation_id))
    except _unavailable() as exc:
        if self.request.retries >= MAX_RETRIES:
            runs.validation_fail(
                validation_id=uuid.UUID(validation_id), error=f"sandbox unavailable: {exc}"
            )
            return
        raise self.retry(exc=exc, countdown=2 ** (self.request.retries + 1)) from exc


@shared_task(
    bind=True,
    name="skills.sandbox.execute",
    ignore_result=True,
    max_retries=MAX_RETRIES,
    soft_time_limit=60,
    time_limit=90,
)
def execute_version(self, execution_id: str) -> None:
    """Run a queued execution in the sandbox and record its outcome."""
    from .services import runs

    try:
        runs.execution_run(execution_id=uuid.UUID(execution_id))
    except _unavailable() as exc:
        if self.request.retries >= MAX_RETRIES:
            runs.execution_fail(
                execution_id=uuid.UUID(execution_id), error=f"sandbox unavailable: {exc}"
            )
            return
        raise self.retry(exc=exc, countdown=2 ** (self.request.retries + 1)) from exc


@shared_task(
    name="skills.review_validated", ignore_result=True, soft_time_limit=240, time_limit=300
)
def review_validated() -> None:
    """celery-beat: deprecate validated versions whose recent success rate fell."""
    from .services import lifecycle

    deprecated = lifecycle.review_validated()
    if deprecated:
        logger.info("deprecated %d failing skill versions", len(deprecated))


@shared_task(
    name="skills.validation_backlog", ignore_result=True, soft_time_limit=50, time_limit=60
)
def validation_backlog(grace_seconds: int | None = None) -> dict:
    """celery-beat: queue again the validations and executions whose task was lost
    (Redis flushed, or taken by a killed worker), and give a version whose
    validation finished without its promotion that promotion
    (skills.services.runs.validation_backlog)."""
    from django.conf import settings

    from .services import runs

    grace = settings.SKILLS_VALIDATION_GRACE_SECONDS if grace_seconds is None else grace_seconds
    done = runs.validation_backlog(grace_seconds=grace)
    if done.requeued or done.promotions or done.executions_requeued:
        logger.info(
            "validations queued again: %d; promotions made up: %d; executions queued again: %d",
            len(done.requeued),
            len(done.promotions),
            len(done.executions_requeued),
        )
    return {
        "requeued": len(done.requeued),
        "running": done.running,
        "promotions": len(done.promotions),
        "executions_requeued": len(done.executions_requeued),
    }
