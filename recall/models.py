"""Retrieval telemetry (issue 6, seed phase 0): what each recall did, and how it went.

A RetrievalTrace records one recall: the query, the route and why (explicit,
or the classifier's rule and per-route scores), the filters, every candidate
considered with its score, what was returned, whether it abstained, the
latency and the embedding model. It is telemetry, not evidence, and is *not*
written to the ledger: a recall is a read, and a ledger event per read would
make every read a write on the agent's hash chain (serialised on its chain
head, waking the event-trigger matchers) and keep query text forever under
the ledger's retention. Traces can be pruned; nothing is derived from them.

RecallFeedback is the agent's own statement about a recall — which evidence
it used and whether that worked. That is evidence about the agent's
behaviour, so it *is* appended to the ledger (`recall.feedback`) in the same
transaction, and the row points at its event.

The app sits above facts, episodes, skills and intentions and below battery.
"""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.models import Event
from piper.ids import uuid7
from piper.tenancy.models import Agent


class Route(models.TextChoices):
    CURRENT_FACT = "current_fact", "What is true now (facts)"
    WHAT_HAPPENED = "what_happened", "What happened (episodes)"
    HOW_TO = "how_to", "How to do it (skills)"
    WHAT_TO_DO = "what_to_do", "What am I supposed to do (intentions)"
    SOURCE = "source", "What a document said (source chunks)"
    MULTI_HOP = "multi_hop", "How things are related (fact graph)"


# A trace's route: one recall route, the context assembly (POST /context),
# which asks several memories at once, or one of the direct read endpoints
# (piper.reads: the agent chose the store itself). None of these is a Route:
# nothing classifies to them.
CONTEXT_ROUTE = "context"
READ_ROUTES = [
    ("episodes_search", "Episode search (GET /episodes/search)"),
    ("sources_search", "Source search (GET /sources/search)"),
    ("facts_lookup", "Fact lookup (GET /facts/current, as-of, as-known-at)"),
    ("skill_match", "Skill match (POST /skills/match)"),
]
TRACE_ROUTES = [
    *Route.choices,
    (CONTEXT_ROUTE, "Context assembly (several memories)"),
    *READ_ROUTES,
]


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    FAILURE = "failure", "Failure"
    PARTIAL = "partial", "Partial"


class FailureCode(models.TextChoices):
    """The retrieval and use codes of the failure taxonomy (DESIGN.md §9). The
    battery app holds the whole taxonomy; recall sits below it and keeps its
    own copy of the codes an agent can report about a recall, with the same
    meanings (feedback stored under the earlier ones was rewritten by
    migration 0003)."""

    R0 = "R0", "R0 retrieval: the need to look was not detected (the agent did not look)"
    R1 = "R1", "R1 retrieval: the wrong store, or a poor query"
    R2 = "R2", "R2 retrieval: the memory was not among the candidates"
    R3 = "R3", "R3 retrieval: a stale or irrelevant memory outranked it"
    A0 = "A0", "A0 attention: in context, but ignored"
    U0 = "U0", "U0 use: used wrongly"


class RetrievalTrace(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    query = models.TextField(help_text="The question as the agent asked it.")
    route = models.CharField(max_length=20, choices=TRACE_ROUTES, help_text="The route taken.")
    explicit = models.BooleanField(
        help_text="The agent named the route; otherwise the classifier chose it."
    )
    decision = models.JSONField(
        default=dict,
        blank=True,
        help_text="The classifier's decision: method, rule, matched rules, per-route scores.",
    )
    filters = models.JSONField(default=dict, blank=True)
    candidates = models.JSONField(
        default=list,
        blank=True,
        help_text="Everything considered, with scores and signals, best first.",
    )
    returned = models.JSONField(
        default=list, blank=True, help_text="The evidence returned: [{kind, id, score}], in order."
    )
    abstained = models.BooleanField(help_text="Answered 'no supporting memory'.")
    latency_ms = models.FloatField(help_text="Time to answer, embedding included.")
    embedding_model = models.CharField(
        max_length=200, blank=True, default="", help_text="Empty: no embedding was used."
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "retrieval trace"
        constraints = [
            models.UniqueConstraint(fields=["agent", "id"], name="recall_trace_agent_id_uniq"),
            models.CheckConstraint(
                condition=Q(route__in=[r for r, _ in TRACE_ROUTES]), name="recall_trace_route_known"
            ),
            models.CheckConstraint(
                condition=Q(latency_ms__gte=0), name="recall_trace_latency_not_negative"
            ),
            models.CheckConstraint(condition=~Q(query=""), name="recall_trace_query_not_empty"),
        ]
        indexes = [
            models.Index(fields=["agent", "-created_at"], name="recall_trace_agent_time_idx"),
            models.Index(fields=["route", "created_at"], name="recall_trace_route_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.route}: {self.query[:60]}"


class RecallFeedback(models.Model):
    """The agent's word on one recall: the evidence it used and the outcome."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    # Same agent as the trace: a composite foreign key (migration 0001).
    trace = models.OneToOneField(RetrievalTrace, on_delete=models.PROTECT, related_name="feedback")
    used = models.JSONField(
        default=list, blank=True, help_text="Ids of the returned evidence the agent used."
    )
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    failure_code = models.CharField(
        max_length=2,
        choices=FailureCode.choices,
        blank=True,
        default="",
        help_text="Where memory broke (failure or partial outcomes only).",
    )
    stale = models.BooleanField(
        default=False,
        help_text="The answer showed a value as current that was no longer true.",
    )
    note = models.TextField(blank=True, default="")
    source_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The recall.feedback ledger event.",
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "recall feedback"
        verbose_name_plural = "recall feedback"
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=Outcome.values), name="recall_feedback_outcome_known"
            ),
            models.CheckConstraint(
                condition=Q(failure_code="") | Q(failure_code__in=FailureCode.values),
                name="recall_feedback_code_known",
            ),
            models.CheckConstraint(
                condition=~Q(outcome=Outcome.SUCCESS) | Q(failure_code=""),
                name="recall_feedback_success_has_no_code",
            ),
        ]
        indexes = [
            models.Index(
                fields=["failure_code", "created_at"], name="recall_feedback_code_time_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id}: {self.outcome} {self.failure_code}".strip()


class LookDecision(models.Model):
    """The agent's "do I need to look?" decision for one task: whether it
    looked in memory before acting, and, when it knows, whether it needed to.
    Telemetry like a trace (not in the ledger): suite H counts the looks that
    were missed (needed, not looked: R0) and the looks that found nothing to use."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    task = models.TextField(help_text="The task or message the decision was about.")
    session_id = models.CharField(max_length=200, blank=True, default="")
    looked = models.BooleanField(help_text="The agent read memory before acting.")
    needed = models.BooleanField(
        null=True,
        blank=True,
        help_text="The agent's verdict afterwards: memory was needed (unknown when empty).",
    )
    # Same agent as the trace: a composite foreign key (migration 0004).
    trace = models.ForeignKey(
        RetrievalTrace,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The read it made, when it looked.",
    )
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "look decision"
        constraints = [
            models.CheckConstraint(condition=~Q(task=""), name="recall_look_task_not_empty"),
            models.CheckConstraint(
                condition=Q(looked=True) | Q(trace__isnull=True),
                name="recall_look_trace_only_when_looked",
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "-created_at"], name="recall_look_agent_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{'looked' if self.looked else 'did not look'}: {self.task[:60]}"
