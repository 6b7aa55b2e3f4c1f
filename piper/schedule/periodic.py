"""Every periodic task celery-beat runs, as code.

``manage.py setup_periodic_tasks`` writes this table into django-celery-beat's
tables (``services.periodic_tasks_sync``). The tasks are named, not imported:
the schedule sits in the wiring layer, above every app whose task it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

# Every task setup_periodic_tasks manages is named with this prefix; one it created
# earlier and no longer defines is disabled (never deleted, so its run history
# stays visible in the admin).
PREFIX = "piper:"


@dataclass(frozen=True)
class Every:
    seconds: int


@dataclass(frozen=True)
class Cron:
    minute: str = "*"
    hour: str = "*"
    day_of_week: str = "*"
    day_of_month: str = "*"
    month_of_year: str = "*"


@dataclass(frozen=True)
class Periodic:
    name: str
    task: str
    schedule: Every | Cron
    description: str
    # A run not started within this many seconds is dropped: when workers were
    # down, a backlog of identical runs helps nobody.
    expire_seconds: int | None = None


PERIODIC_TASKS: tuple[Periodic, ...] = (
    Periodic(
        name=PREFIX + "beat-heartbeat",
        task="piper.beat_heartbeat",
        schedule=Every(seconds=30),
        description="Stamps celery-beat's liveness in Redis for /healthz.",
        expire_seconds=30,
    ),
    Periodic(
        name=PREFIX + "purge-idempotency-records",
        task="api.purge_idempotency_records",
        schedule=Cron(minute="7"),
        description="Hourly: deletes Idempotency-Key answers older than PIPER_IDEMPOTENCY_TTL_HOURS.",
        expire_seconds=3600,
    ),
    Periodic(
        name=PREFIX + "verify-ledger-chains",
        task="ledger.verify_chains",
        schedule=Cron(minute="30", hour="3"),
        description="Nightly (03:30 UTC): walks every active agent's ledger hash chain and "
        "checks it still holds the end the last run kept outside the database "
        "(PIPER_LEDGER_ANCHORS); logs an ERROR per broken chain.",
        expire_seconds=6 * 3600,
    ),
    Periodic(
        name=PREFIX + "intentions-engine",
        task="intentions.engine_cycle",
        schedule=Every(seconds=settings.PIPER_INTENTIONS_CYCLE_SECONDS),
        description="Fires time triggers, expires what is past expires_at, re-checks state "
        "triggers, and catches up event triggers whose post-commit task was lost.",
        expire_seconds=settings.PIPER_INTENTIONS_CYCLE_SECONDS * 2,
    ),
    Periodic(
        name=PREFIX + "intentions-rehearse",
        task="intentions.rehearse",
        schedule=Cron(minute="17"),
        description="Hourly: re-surfaces long-pending intentions into their thread's working state.",
        expire_seconds=3600,
    ),
    Periodic(
        name=PREFIX + "intentions-webhook-retries",
        task="intentions.retry_outbox",
        schedule=Every(seconds=30),
        description="Retries webhook deliveries of firings that failed (exponential backoff).",
        expire_seconds=60,
    ),
    Periodic(
        name=PREFIX + "skills-review-validated",
        task="skills.review_validated",
        schedule=Every(seconds=settings.SKILLS_REVIEW_SECONDS),
        description="Deprecates validated skill versions whose recent success rate fell below "
        "SKILLS_DEPRECATE_BELOW.",
        expire_seconds=settings.SKILLS_REVIEW_SECONDS,
    ),
    Periodic(
        name=PREFIX + "skills-validation-backlog",
        task="skills.validation_backlog",
        schedule=Every(seconds=settings.SKILLS_VALIDATION_BACKLOG_SECONDS),
        description="Queues again the skill validations and executions a lost task left "
        "queued (older than SKILLS_VALIDATION_GRACE_SECONDS, no worker running them), and "
        "makes up the promotion of a version whose validation finished without it.",
        expire_seconds=settings.SKILLS_VALIDATION_BACKLOG_SECONDS,
    ),
    Periodic(
        name=PREFIX + "episodes-embed-backlog",
        task="episodes.embed_backlog",
        schedule=Every(seconds=60),
        description="Embeds episodes and source chunks a lost after-commit task left without "
        "a vector (and chunks recent sources left without chunks), for up to 50 s a run.",
        expire_seconds=60,
    ),
    Periodic(
        name=PREFIX + "facts-texts-backlog",
        task="facts.fact_texts_backlog",
        schedule=Every(seconds=60),
        description="Renders again the fact texts a lost after-commit task left missing or "
        "stale (from a cursor over each agent's ledger) and embeds texts left without a "
        "vector, for up to 50 s a run.",
        expire_seconds=60,
    ),
    Periodic(
        name=PREFIX + "forgetting-retention-sweep",
        task="forgetting.retention_sweep",
        schedule=Cron(minute="*/15"),
        description="Every 15 minutes: erases the events each agent's retention policies let "
        "expire, in chunks with a receipt each; re-queues itself while any are left.",
        expire_seconds=900,
    ),
    Periodic(
        name=PREFIX + "episodes-agent-graphs",
        task="episodes.build_agent_graphs",
        schedule=Cron(minute="43"),
        description="Hourly: builds an HNSW graph of its own for each agent past "
        "EPISODES_AGENT_GRAPH_MIN_ROWS episodes (the largest EPISODES_AGENT_GRAPH_MAX_GRAPHS).",
        expire_seconds=3600,
    ),
    Periodic(
        name=PREFIX + "consolidation-due",
        task="consolidation.consolidate_due",
        schedule=Every(seconds=settings.CONSOLIDATION_CYCLE_SECONDS),
        description="Queues a consolidation run for every agent with episodes recorded since "
        "its last one (episodes -> candidate facts), and resumes runs whose worker died.",
        expire_seconds=settings.CONSOLIDATION_CYCLE_SECONDS,
    ),
)
