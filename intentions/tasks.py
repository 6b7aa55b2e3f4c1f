"""Thin, idempotent tasks: the engine's beat-driven scans and post-commit matchers."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="intentions.engine_cycle", ignore_result=True, soft_time_limit=50, time_limit=60)
def engine_cycle() -> None:
    """celery-beat, every few seconds: time triggers, expiry, state re-checks, an
    event catch-up for agents whose post-commit task was lost (e.g. Redis flushed),
    and escalations whose policy's condition holds (each at most once)."""
    from .services import engine, escalation

    engine.scan_time()
    engine.check_states()
    engine.catch_up_events()
    escalation.escalate_due()


@shared_task(name="intentions.match_events", ignore_result=True, soft_time_limit=50, time_limit=60)
def match_events(agent_id: str) -> None:
    from .services import engine

    engine.match_events(agent_id=uuid.UUID(agent_id))


@shared_task(name="intentions.check_states", ignore_result=True, soft_time_limit=50, time_limit=60)
def check_states(agent_id: str) -> None:
    from piper.tenancy.models import Agent

    from .services import engine

    agent = Agent.objects.filter(pk=agent_id).first()
    if agent is None:
        logger.info("check_states: agent %s is gone", agent_id)
        return
    engine.check_states(agent=agent)


@shared_task(name="intentions.rehearse", ignore_result=True, soft_time_limit=300, time_limit=330)
def rehearse() -> None:
    from .services import engine

    engine.rehearse()


@shared_task(
    name="intentions.deliver_outbox_message",
    ignore_result=True,
    soft_time_limit=30,
    time_limit=40,
)
def deliver_outbox_message(message_id: str) -> None:
    from .services import outbox

    outbox.deliver(message_id=uuid.UUID(message_id))


@shared_task(
    name="intentions.retry_outbox", ignore_result=True, soft_time_limit=120, time_limit=150
)
def retry_outbox() -> None:
    from .services import outbox

    outbox.deliver_due()
