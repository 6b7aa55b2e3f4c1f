"""Live carry-over (suite H): how memory served real agents over a window.

Computed from what the service records while agents use it, never from the
battery's own throwaway agents:

* **Open items across successions.** At each handover in the window, the
  open items are the intentions of the handed-over thread, and the agent's
  intentions that belong to no thread, that were not finished at that
  moment (their last status transition before it). One *survived* when the
  successor's resume surfaced it (Handover.surfaced). A handover not
  resumed within the grace period lost all of its items; one still within
  it is in flight and not judged. An item open at a succession was
  *executed* when it was completed after it; it was *not executed* when it
  expired, or has been due (or overdue) for longer than the grace period;
  cancelled items (a decision, not a loss), items being executed now (the
  work is under way, however long ago it fell due) and items not yet due
  are counted apart and judged neither way.
* **Skills.** Finished runs in the window and how many succeeded; the skills
  run that were run in at least two sessions (reused); skill matches that
  returned a skill and whether one of those versions was run within the
  grace period after (followed).
* **Reads.** Every read that returned something (recall, context, searches,
  fact lookups, skill matches: piper.reads) and the agent's feedback on it:
  a read whose feedback used nothing was retrieved without use.
* **Feedback.** Answers the agent marked stale (a value shown as current that
  was no longer true), over all feedback.
* **Looks.** The agent's "do I need to look?" decisions: a look missed is
  one the agent later said was needed but did not make.

A rate with nothing to count is None, never 0 or 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from intentions.models import TERMINAL, Handover, Intention, IntentionStatus, Transition
from piper.tenancy.models import Agent
from skills.models import Execution, ExecutionStatus

from .models import LookDecision, RecallFeedback, RetrievalTrace

TERMINAL_STATUSES = tuple(str(status) for status in TERMINAL)
# A handover older than this and never resumed lost its items; kept small so
# one agent's long history cannot make the page slow.
MAX_HANDOVERS_PER_AGENT = 5000


def _rate(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None


@dataclass
class CarryOver:
    """One agent's (or, summed, every agent's) live figures over a window."""

    agents: list[str] = field(default_factory=list)
    successions: int = 0
    open_items: int = 0  # (succession, item) pairs judged for survival
    surfaced: int = 0
    in_flight: int = 0  # pairs of handovers not resumed yet, within grace
    items_judged: int = 0  # distinct items open at a succession, now executed or not
    executed: int = 0
    cancelled: int = 0
    executing: int = 0  # being executed now: not judged either way
    not_yet_due: int = 0
    skill_runs: int = 0
    skill_runs_succeeded: int = 0
    skills_run: int = 0
    skills_reused: int = 0
    skill_matches: int = 0
    skill_matches_followed: int = 0
    reads: int = 0  # reads that returned something
    reads_with_feedback: int = 0
    reads_unused: int = 0
    feedback: int = 0
    stale_answers: int = 0
    decisions: int = 0
    looked: int = 0
    needed: int = 0
    missed_looks: int = 0

    def __add__(self, other: CarryOver) -> CarryOver:
        counts = {
            name: getattr(self, name) + getattr(other, name)
            for name in asdict(self)
            if name != "agents"
        }
        return CarryOver(agents=self.agents + other.agents, **counts)

    @property
    def measured(self) -> bool:
        """There is carry-over to judge: an open item at a succession."""
        return bool(self.open_items or self.items_judged)

    def rates(self) -> dict[str, float | None]:
        return {
            "open_item_survival_rate": _rate(self.surfaced, self.open_items),
            "open_item_execution_rate": _rate(self.executed, self.items_judged),
            "skill_success_rate": _rate(self.skill_runs_succeeded, self.skill_runs),
            "skill_reuse_rate": _rate(self.skills_reused, self.skills_run),
            "skill_follow_rate": _rate(self.skill_matches_followed, self.skill_matches),
            "retrieval_without_use_rate": _rate(self.reads_unused, self.reads_with_feedback),
            "feedback_coverage": _rate(self.reads_with_feedback, self.reads),
            "stale_answer_rate": _rate(self.stale_answers, self.feedback),
            "look_rate": _rate(self.looked, self.decisions),
            "missed_look_rate": _rate(self.missed_looks, self.needed),
        }

    def as_dict(self) -> dict:
        return {**asdict(self), "rates": self.rates()}


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    grace: timedelta

    @classmethod
    def ending(cls, end: datetime | None = None, *, days: int | None = None) -> Window:
        end = end or timezone.now()
        days = settings.PIPER_LIVE_WINDOW_DAYS if days is None else days
        grace = timedelta(seconds=settings.PIPER_LIVE_GRACE_SECONDS)
        return cls(start=end - timedelta(days=days), end=end, grace=grace)


# The items open at each handover of the window: the handed-over thread's
# intentions and the agent's threadless ones, created before it, whose last
# transition up to it (in database time, as the handover's) was not terminal.
_OPEN_AT_SUCCESSION = """
SELECT h.id, i.id
FROM intentions_handover h
JOIN intentions_intention i
  ON i.agent_id = h.agent_id
 AND (i.thread_id = h.thread_id OR i.thread_id IS NULL)
 AND i.created_at < h.created_at
WHERE h.id = ANY(%s)
  AND COALESCE(
        (SELECT t.to_status FROM intentions_transition t
          WHERE t.intention_id = i.id AND t.recorded_at <= h.created_at
          ORDER BY t.recorded_at DESC, t.id DESC LIMIT 1),
        'active') <> ALL(%s)
"""


def _open_items(handovers: list[Handover]) -> list[tuple]:
    if not handovers:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_OPEN_AT_SUCCESSION, [[h.pk for h in handovers], list(TERMINAL_STATUSES)])
        return cursor.fetchall()


def _successions(agent: Agent, window: Window, figures: CarryOver) -> None:
    handovers = list(
        Handover.objects.filter(
            agent=agent, created_at__gte=window.start, created_at__lt=window.end
        ).order_by("created_at")[:MAX_HANDOVERS_PER_AGENT]
    )
    figures.successions = len(handovers)
    by_id = {h.pk: h for h in handovers}
    first_open: dict = {}  # intention id -> when it was first open at a succession
    for handover_id, intention_id in _open_items(handovers):
        handover = by_id[handover_id]
        first_open.setdefault(intention_id, handover.created_at)
        first_open[intention_id] = min(first_open[intention_id], handover.created_at)
        if handover.surfaced is not None:
            figures.open_items += 1
            figures.surfaced += str(intention_id) in handover.surfaced
        elif handover.status == Handover.Status.PENDING:
            if handover.created_at < window.end - window.grace:
                figures.open_items += 1  # never resumed: lost
            else:
                figures.in_flight += 1
        # Resumed before surfaced was recorded: unknown, not judged.
    _execution(first_open, window, figures)


def _execution(first_open: dict, window: Window, figures: CarryOver) -> None:
    if not first_open:
        return
    completed_after = {
        intention_id
        for intention_id, at in Transition.objects.filter(
            intention_id__in=list(first_open), to_status=IntentionStatus.COMPLETED
        ).values_list("intention_id", "recorded_at")
        if at > first_open[intention_id]
    }
    became_due = dict(
        Transition.objects.filter(intention_id__in=list(first_open), to_status=IntentionStatus.DUE)
        .order_by("intention_id", "-recorded_at")
        .distinct("intention_id")
        .values_list("intention_id", "recorded_at")
    )
    overdue_before = window.end - window.grace
    for intention in Intention.objects.filter(pk__in=list(first_open)).only(
        "id", "status", "due_at"
    ):
        if intention.pk in completed_after:
            figures.items_judged += 1
            figures.executed += 1
        elif intention.status == IntentionStatus.CANCELLED:
            figures.cancelled += 1
        elif intention.status == IntentionStatus.EXECUTING:
            figures.executing += 1
        elif (
            intention.status == IntentionStatus.EXPIRED
            or intention.status == IntentionStatus.DUE
            and (became_due.get(intention.pk, window.end) < overdue_before)
        ):
            figures.items_judged += 1
        elif (
            intention.status == IntentionStatus.ACTIVE
            and intention.due_at is not None
            and intention.due_at < overdue_before
        ):
            figures.items_judged += 1  # overdue, never fired
        else:
            figures.not_yet_due += 1


def _skills(agent: Agent, window: Window, figures: CarryOver) -> None:
    runs = Execution.objects.filter(
        agent=agent,
        status=ExecutionStatus.FINISHED,
        finished_at__gte=window.start,
        finished_at__lt=window.end,
    )
    totals = runs.aggregate(n_runs=Count("id"), n_succeeded=Count("id", filter=Q(succeeded=True)))
    figures.skill_runs = totals["n_runs"]
    figures.skill_runs_succeeded = totals["n_succeeded"]
    skill_ids = set(runs.values_list("version__skill_id", flat=True))
    figures.skills_run = len(skill_ids)
    if skill_ids:
        # A run without a session is a session of its own.
        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT count(*) FROM (
                  SELECT v.skill_id
                  FROM skills_execution e JOIN skills_skillversion v ON v.id = e.version_id
                  WHERE e.agent_id = %s AND e.status = %s AND e.finished_at < %s
                    AND v.skill_id = ANY(%s)
                  GROUP BY v.skill_id
                  HAVING count(DISTINCT COALESCE(NULLIF(e.session_id, ''), e.id::text)) >= 2
                ) reused
                """,
                [agent.pk, ExecutionStatus.FINISHED, window.end, list(skill_ids)],
            )
            figures.skills_reused = cursor.fetchone()[0]
    matches = RetrievalTrace.objects.filter(
        agent=agent,
        route="skill_match",
        created_at__gte=window.start,
        created_at__lt=window.end,
        abstained=False,
    ).values_list("created_at", "returned")
    for at, returned in matches:
        versions = [item["id"] for item in returned if item.get("kind") == "skill"]
        if not versions:
            continue
        figures.skill_matches += 1
        figures.skill_matches_followed += Execution.objects.filter(
            agent=agent,
            version_id__in=versions,
            created_at__gte=at,
            created_at__lt=at + window.grace,
        ).exists()


def _reads(agent: Agent, window: Window, figures: CarryOver) -> None:
    reads = RetrievalTrace.objects.filter(
        agent=agent, created_at__gte=window.start, created_at__lt=window.end
    ).exclude(returned=[])
    totals = reads.aggregate(
        n_reads=Count("id"),
        n_with_feedback=Count(
            "id", filter=Q(Exists(RecallFeedback.objects.filter(trace=OuterRef("pk"))))
        ),
        n_unused=Count(
            "id",
            filter=Q(Exists(RecallFeedback.objects.filter(trace=OuterRef("pk"), used=[]))),
        ),
    )
    figures.reads = totals["n_reads"]
    figures.reads_with_feedback = totals["n_with_feedback"]
    figures.reads_unused = totals["n_unused"]
    feedback = RecallFeedback.objects.filter(
        agent=agent, created_at__gte=window.start, created_at__lt=window.end
    ).aggregate(n_total=Count("id"), n_stale=Count("id", filter=Q(stale=True)))
    figures.feedback = feedback["n_total"]
    figures.stale_answers = feedback["n_stale"]


def _looks(agent: Agent, window: Window, figures: CarryOver) -> None:
    looks = LookDecision.objects.filter(
        agent=agent, created_at__gte=window.start, created_at__lt=window.end
    ).aggregate(
        n_total=Count("id"),
        n_looked=Count("id", filter=Q(looked=True)),
        n_needed=Count("id", filter=Q(needed=True)),
        n_missed=Count("id", filter=Q(needed=True, looked=False)),
    )
    figures.decisions = looks["n_total"]
    figures.looked = looks["n_looked"]
    figures.needed = looks["n_needed"]
    figures.missed_looks = looks["n_missed"]


def agent_carry_over(agent: Agent, window: Window) -> CarryOver:
    figures = CarryOver(agents=[agent.name])
    _successions(agent, window, figures)
    _skills(agent, window, figures)
    _reads(agent, window, figures)
    _looks(agent, window, figures)
    return figures


def live_agents(window: Window) -> list[Agent]:
    """Agents that are not the battery's and used memory in the window: a
    handover, a trace, a skill run or a look decision."""
    in_window = {"created_at__gte": window.start, "created_at__lt": window.end}
    return list(
        Agent.objects.filter(is_throwaway=False)
        .filter(
            Exists(Handover.objects.filter(agent=OuterRef("pk"), **in_window))
            | Exists(RetrievalTrace.objects.filter(agent=OuterRef("pk"), **in_window))
            | Exists(Execution.objects.filter(agent=OuterRef("pk"), **in_window))
            | Exists(LookDecision.objects.filter(agent=OuterRef("pk"), **in_window))
        )
        .order_by("name")
    )


@dataclass
class LiveReport:
    window: Window
    per_agent: list[CarryOver]

    @property
    def total(self) -> CarryOver:
        total = CarryOver()
        for figures in self.per_agent:
            total = total + figures
        return total

    def as_dict(self) -> dict:
        return {
            "window": {
                "start": self.window.start.isoformat(),
                "end": self.window.end.isoformat(),
                "grace_seconds": int(self.window.grace.total_seconds()),
            },
            "total": self.total.as_dict(),
            "agents": [figures.as_dict() for figures in self.per_agent],
        }


def live_report(
    *, window: Window | None = None, agents: Iterable[Agent] | None = None
) -> LiveReport:
    """The carry-over figures of each live agent (or of `agents`) over the window."""
    window = window or Window.ending()
    chosen = live_agents(window) if agents is None else list(agents)
    return LiveReport(window=window, per_agent=[agent_carry_over(a, window) for a in chosen])
