"""Recall's request and response shapes. Inputs refuse unknown fields; outputs are
built directly in to_representation (the declared fields document them)."""

from __future__ import annotations

from rest_framework import serializers

from episodes.models import Outcome as EpisodeOutcome
from facts.serializers import FactOutputSerializer
from intentions.serializers import IntentionOutputSerializer
from piper.api.serializers import (
    AwareDateTimeField,
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    api_datetime,
    api_id,
)
from skills.serializers import MatchedVersionSerializer

from . import router
from .models import (
    TRACE_ROUTES,
    FailureCode,
    LookDecision,
    Outcome,
    RecallFeedback,
    RetrievalTrace,
    Route,
)
from .services import MAX_LIMIT, MAX_NOTE_CHARS, ContextBlock, Evidence, RecallResult
from .services import context as context_service
from .services.telemetry import MAX_TASK_CHARS

KINDS = ("fact", "episode", "chunk", "skill", "intention", "path")
CURRENTNESS = ("current", "superseded", "contested", "n/a")
ALLOWED_ROUTES = ", ".join(router.ALLOWED)


# ------------------------------------------------------------------------ input


class RecallFiltersSerializer(StrictSerializer):
    actor = StrictCharField(max_length=200, required=False)
    environment = StrictCharField(max_length=200, required=False)
    session_id = StrictCharField(max_length=200, required=False)
    goal_id = StrictCharField(max_length=200, required=False)
    task_id = StrictCharField(max_length=200, required=False)
    outcome = serializers.ChoiceField(choices=EpisodeOutcome.choices, required=False)
    occurred_after = AwareDateTimeField(required=False)
    occurred_before = AwareDateTimeField(required=False)
    source_id = serializers.UUIDField(required=False, help_text="Source chunks of one document.")

    def validate(self, data: dict) -> dict:
        after, before = data.get("occurred_after"), data.get("occurred_before")
        if after is not None and before is not None and before < after:
            raise serializers.ValidationError(
                {"occurred_before": ["the window ends before it starts: not before occurred_after"]}
            )
        return data


class RecallInputSerializer(StrictSerializer):
    query = StrictCharField(
        allow_blank=True,
        trim_whitespace=False,
        help_text="The question, in plain words (1–2,000 characters).",
    )
    route = serializers.ChoiceField(
        choices=router.ALLOWED,
        default=router.AUTO,
        error_messages={"invalid_choice": f'"{{input}}" is not a route; allowed: {ALLOWED_ROUTES}'},
        help_text="auto (default) classifies the question; any other value is taken as given.",
    )
    limit = StrictIntegerField(min_value=1, max_value=MAX_LIMIT, default=10)
    filters = RecallFiltersSerializer(required=False)
    context = JSONObjectField(
        check=True,
        required=False,
        default=dict,
        help_text="The agent's situation, a JSON object: skills check preconditions against it.",
    )


class FeedbackInputSerializer(StrictSerializer):
    used = serializers.ListField(
        child=StrictCharField(max_length=100),
        max_length=MAX_LIMIT,
        default=list,
        help_text="Ids of the evidence (as returned) that the agent used.",
    )
    outcome = serializers.ChoiceField(choices=Outcome.choices)
    failure_code = serializers.ChoiceField(
        choices=FailureCode.choices,
        required=False,
        allow_null=True,
        help_text="Where memory broke (failure or partial only).",
    )
    note = StrictCharField(max_length=MAX_NOTE_CHARS, required=False, allow_blank=True, default="")
    stale = StrictBooleanField(
        required=False,
        default=False,
        help_text="The answer showed a value as current that was no longer true.",
    )


# ----------------------------------------------------------------------- output


class DecisionSerializer(serializers.Serializer):
    chosen = serializers.ChoiceField(
        choices=TRACE_ROUTES, help_text="A recall route, or context for a context call's trace."
    )
    explicit = serializers.BooleanField(help_text="The agent named the route.")
    method = serializers.ChoiceField(choices=["explicit", "rules", "prototypes"])
    rule = serializers.CharField(
        allow_null=True, help_text="The rule that decided, e.g. current_fact.now."
    )
    matched = serializers.ListField(child=serializers.CharField(), help_text="Every rule matched.")
    scores = serializers.DictField(
        child=serializers.FloatField(),
        help_text="Per route: summed rule weights, or the best prototype similarity.",
    )
    nearest = serializers.CharField(
        allow_null=True, help_text="The nearest prototype question (method prototypes)."
    )
    fallback = serializers.ChoiceField(
        choices=Route.choices,
        allow_null=True,
        help_text="The route that answered when the classified one had no candidate at all.",
    )
    overridden = serializers.ChoiceField(
        choices=Route.choices,
        allow_null=True,
        default=None,
        help_text="The route the question's words chose, when the question named one known "
        "subject and asked one of its stated attributes: current_fact answered instead.",
    )


class EvidenceStatusSerializer(serializers.Serializer):
    """Why to believe the evidence, and how far. Every kind has these five; facts
    add valid/record times, status and contests; episodes occurred_at and outcome;
    skills status, similarity and use; intentions status, due_at and trigger."""

    source = serializers.DictField(help_text="Where it came from: type, ref, event_id, …")
    age_seconds = serializers.IntegerField(allow_null=True)
    authority = serializers.CharField(allow_null=True)
    currentness = serializers.ChoiceField(
        choices=CURRENTNESS,
        help_text="current; superseded (a fact no longer valid); contested (in force, "
        "challenged); n/a (episodes and documents: events are neither).",
    )
    confidence = serializers.FloatField(allow_null=True)


class EpisodeBriefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    occurred_at = serializers.DateTimeField()
    session_id = serializers.CharField()
    actor = serializers.CharField()
    environment = serializers.CharField()
    goal_id = serializers.CharField()
    task_id = serializers.CharField()
    action = serializers.CharField()
    observation = serializers.CharField()
    outcome = serializers.CharField()
    summary = serializers.CharField()
    entities = serializers.ListField(child=serializers.CharField())


class ChunkBriefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    source_id = serializers.UUIDField()
    ordinal = serializers.IntegerField()
    char_start = serializers.IntegerField()
    char_end = serializers.IntegerField()


class PathBriefSerializer(serializers.Serializer):
    entities = serializers.ListField(child=serializers.DictField())
    facts = FactOutputSerializer(many=True)


class EvidenceSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=KINDS)
    id = serializers.CharField()
    text = serializers.CharField()
    score = serializers.FloatField()
    signals = serializers.DictField(help_text="The ranking signals behind the score.")
    memory_status = EvidenceStatusSerializer()
    fact = FactOutputSerializer(required=False)
    episode = EpisodeBriefSerializer(required=False)
    chunk = ChunkBriefSerializer(required=False)
    skill = MatchedVersionSerializer(required=False)
    intention = IntentionOutputSerializer(required=False)
    path = PathBriefSerializer(required=False)

    def to_representation(self, e: Evidence) -> dict:
        return {
            "kind": e.kind,
            "id": e.id,
            "text": e.text,
            "score": e.score,
            "signals": e.signals,
            "memory_status": e.memory_status,
            e.kind: _object(e, self.context),
        }


def _object(e: Evidence, context: dict) -> dict:
    obj = e.obj
    if e.kind == "fact":
        return FactOutputSerializer(obj, context=context).data
    if e.kind == "episode":
        return {
            "id": str(obj.pk),
            "occurred_at": api_datetime(obj.occurred_at),
            "session_id": obj.session_id,
            "actor": obj.actor,
            "environment": obj.environment,
            "goal_id": obj.goal_id,
            "task_id": obj.task_id,
            "action": obj.action,
            "observation": obj.observation,
            "outcome": obj.outcome,
            "summary": obj.summary,
            "entities": list(obj.entities),
        }
    if e.kind == "chunk":
        return {
            "id": str(obj.pk),
            "source_id": str(obj.source_id),
            "ordinal": obj.ordinal,
            "char_start": obj.char_start,
            "char_end": obj.char_end,
        }
    if e.kind == "skill":
        return MatchedVersionSerializer(obj).data
    if e.kind == "intention":
        return IntentionOutputSerializer(obj).data
    return {
        "entities": [{"id": str(x.pk), "name": x.name} for x in obj.entities],
        "facts": FactOutputSerializer(obj.facts, many=True, context=context).data,
    }


class GroupSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    evidence = serializers.ListField(child=serializers.CharField(), help_text="In time order.")
    first_at = serializers.DateTimeField()
    last_at = serializers.DateTimeField()
    best_score = serializers.FloatField()


class RecallOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="The trace's id: GET it, or send feedback on it.")
    route = DecisionSerializer()
    abstained = serializers.BooleanField(help_text="true: no supporting memory.")
    evidence = EvidenceSerializer(many=True, help_text="Best first; empty when abstained.")
    near_misses = EvidenceSerializer(many=True, help_text="The best below the bar.")
    groups = GroupSerializer(many=True, help_text="Episode evidence by session.")
    details = serializers.DictField(help_text="What the store reported (threshold, …).")
    latency_ms = serializers.FloatField()

    def to_representation(self, result: RecallResult) -> dict:
        evidence = EvidenceSerializer(context=self.context)
        return {
            "id": str(result.trace.pk),
            "route": result.decision.as_dict(),
            "abstained": result.abstained,
            "evidence": [evidence.to_representation(e) for e in result.evidence],
            "near_misses": [evidence.to_representation(e) for e in result.near_misses],
            "groups": result.groups,
            "details": result.details,
            "latency_ms": result.latency_ms,
        }


class FeedbackOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    trace = serializers.UUIDField()
    used = serializers.ListField(child=serializers.CharField())
    outcome = serializers.ChoiceField(choices=Outcome.choices)
    failure_code = serializers.ChoiceField(choices=FailureCode.choices, allow_null=True)
    note = serializers.CharField()
    stale = serializers.BooleanField()
    source_event_id = serializers.UUIDField(help_text="The recall.feedback ledger event.")
    created_at = serializers.DateTimeField()

    def to_representation(self, f: RecallFeedback) -> dict:
        return {
            "id": str(f.pk),
            "trace": str(f.trace_id),
            "used": list(f.used),
            "outcome": f.outcome,
            "failure_code": f.failure_code or None,
            "note": f.note,
            "stale": f.stale,
            "source_event_id": str(f.source_event_id),
            "created_at": api_datetime(f.created_at),
        }


class TraceOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    query = serializers.CharField()
    route = DecisionSerializer()
    filters = serializers.DictField()
    candidates = serializers.ListField(
        child=serializers.DictField(), help_text="What was considered, with scores."
    )
    returned = serializers.ListField(child=serializers.DictField(), help_text="{kind, id, score}")
    abstained = serializers.BooleanField()
    latency_ms = serializers.FloatField()
    embedding_model = serializers.CharField()
    created_at = serializers.DateTimeField()
    feedback = FeedbackOutputSerializer(allow_null=True)

    def to_representation(self, t: RetrievalTrace) -> dict:
        feedback = getattr(t, "feedback", None)  # the reverse one-to-one raises when absent
        decision = dict(t.decision)
        decision.pop("details", None)
        return {
            "id": str(t.pk),
            "query": t.query,
            "route": decision,
            "filters": t.filters,
            "candidates": t.candidates,
            "returned": t.returned,
            "abstained": t.abstained,
            "latency_ms": t.latency_ms,
            "embedding_model": t.embedding_model,
            "created_at": api_datetime(t.created_at),
            "feedback": None
            if feedback is None
            else FeedbackOutputSerializer().to_representation(feedback),
        }


# --------------------------------------------------------------------- context


class ContextBudgetSerializer(StrictSerializer):
    tokens = StrictIntegerField(
        required=False,
        min_value=context_service.BUDGET_RANGE["tokens"][0],
        max_value=context_service.BUDGET_RANGE["tokens"][1],
        help_text="cl100k_base tokens (the default unit: 2,000).",
    )
    characters = StrictIntegerField(
        required=False,
        min_value=context_service.BUDGET_RANGE["characters"][0],
        max_value=context_service.BUDGET_RANGE["characters"][1],
    )


class ContextLimitsSerializer(StrictSerializer):
    facts = StrictIntegerField(required=False, min_value=0, max_value=50, help_text="Default 20.")
    episodes = StrictIntegerField(
        required=False, min_value=0, max_value=50, help_text="Search hits; default 10."
    )
    recent = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=20,
        help_text="The session's latest episodes (with session_id); default 5.",
    )
    skills = StrictIntegerField(required=False, min_value=0, max_value=5, help_text="Default 1.")


class ContextInputSerializer(StrictSerializer):
    """The request's shape; its rules (what must be given, one budget unit) are
    context_assemble's, for every caller."""

    task = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=context_service.MAX_TASK_CHARS,
        help_text="The task or message at hand (up to 8,000 characters; the searches read "
        "its first 2,000). Without one, only the thread's state, due intentions, the "
        "session's latest episodes and what to re-check are assembled.",
    )
    thread_id = serializers.UUIDField(required=False, help_text="The working-state thread.")
    session_id = StrictCharField(
        required=False, allow_blank=True, max_length=200, help_text="The current session."
    )
    budget = ContextBudgetSerializer(required=False)
    sections = serializers.ListField(
        child=serializers.ChoiceField(
            choices=context_service.SECTIONS,
            error_messages={
                "invalid_choice": f'"{{input}}" is not a section; allowed: '
                f"{', '.join(context_service.SECTIONS)}"
            },
        ),
        required=False,
        allow_empty=False,
        help_text="Which sections to assemble (default all).",
    )
    due_within_seconds = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=int(context_service.MAX_HORIZON.total_seconds()),
        help_text="Active intentions due within this horizon are included (default 3,600).",
    )
    limits = ContextLimitsSerializer(required=False)
    context = JSONObjectField(
        check=True,
        required=False,
        default=dict,
        help_text="The agent's situation, a JSON object: skills check preconditions and "
        "contraindications against it.",
    )


class ContextItemSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["intention", "state", "fact", "episode", "skill", "recheck"]
    )
    id = serializers.CharField(help_text="The memory's id (state: thread:field; recheck: what).")
    text = serializers.CharField(help_text="The line as the plain text shows it.")
    score = serializers.FloatField(help_text="Its rank within the section.")
    cost = serializers.IntegerField(help_text="Its line's cost in the budget's unit.")
    memory_status = serializers.DictField(
        help_text="source, age_seconds, authority, currentness, confidence, and what the "
        "kind adds (a fact's contests and needs_recheck, an intention's due_at, …)."
    )
    field = serializers.CharField(required=False, help_text="state: the checkpoint field.")
    session_id = serializers.CharField(required=False, help_text="episode: its session.")
    occurred_at = serializers.DateTimeField(required=False, help_text="episode.")
    skill = serializers.CharField(required=False, help_text="skill: its name.")
    version = serializers.IntegerField(required=False, help_text="skill: its version number.")
    applicable = serializers.BooleanField(
        required=False, help_text="skill: false for one refused here, with the reason in text."
    )
    refers_to = serializers.DictField(required=False, help_text="recheck: what to re-check.")


class ContextSectionSerializer(serializers.Serializer):
    name = serializers.ChoiceField(choices=context_service.SECTIONS)
    title = serializers.CharField()
    items = ContextItemSerializer(many=True)


class ContextOmittedSerializer(serializers.Serializer):
    section = serializers.ChoiceField(choices=context_service.SECTIONS)
    kind = serializers.CharField()
    id = serializers.CharField()
    cost = serializers.IntegerField()


class ContextBudgetOutputSerializer(serializers.Serializer):
    unit = serializers.ChoiceField(choices=["tokens", "characters"])
    limit = serializers.IntegerField()
    used = serializers.IntegerField(help_text="The cost of `text`, measured whole.")
    tokenizer = serializers.CharField(help_text="cl100k_base.")


class ContextOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="The trace's id: GET /recall/{id}, or send feedback.")
    thread = serializers.DictField(allow_null=True, help_text="{id, key, version}.")
    session_id = serializers.CharField(allow_null=True)
    now = serializers.DateTimeField(help_text="The agent's clock the block was assembled at.")
    budget = ContextBudgetOutputSerializer()
    over_budget = serializers.BooleanField(
        help_text="true only when the due intentions alone exceed the budget (never cut)."
    )
    sections = ContextSectionSerializer(
        many=True, help_text="In the block's order; only sections with items."
    )
    omitted = ContextOmittedSerializer(many=True, help_text="What did not fit, by id.")
    withheld = serializers.IntegerField(help_text="Items above the key's clearance, not shown.")
    text = serializers.CharField(help_text="The block as plain text, ready for a prompt.")
    latency_ms = serializers.FloatField()

    def to_representation(self, block: ContextBlock) -> dict:
        thread = block.thread
        return {
            "id": str(block.trace.pk),
            "thread": None
            if thread is None
            else {"id": str(thread.pk), "key": thread.key, "version": block.state_version},
            "session_id": block.trace.filters.get("session_id"),
            "now": api_datetime(block.now),
            "budget": block.budget.as_dict()
            | {"used": block.used, "tokenizer": context_service.TOKENIZER},
            "over_budget": block.over_budget,
            "sections": [
                {
                    "name": name,
                    "title": context_service.TITLES[name],
                    "items": [item.as_dict() for item in items],
                }
                for name, items in block.sections.items()
                if items
            ],
            "omitted": [item.brief() for item in block.omitted],
            "withheld": block.withheld,
            "text": block.text,
            "latency_ms": block.latency_ms,
        }


# ------------------------------------------------------------------- telemetry


class LookDecisionInputSerializer(StrictSerializer):
    task = StrictCharField(max_length=MAX_TASK_CHARS, help_text="What the decision was about.")
    looked = StrictBooleanField(help_text="The agent read memory before acting.")
    needed = StrictBooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Afterwards: memory was needed (leave out when unknown).",
    )
    trace = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The read it made (a recall's or read's trace id); only when looked.",
    )
    session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    note = StrictCharField(max_length=MAX_NOTE_CHARS, required=False, allow_blank=True, default="")


class LookDecisionOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    task = serializers.CharField()
    looked = serializers.BooleanField()
    needed = serializers.BooleanField(allow_null=True)
    trace = serializers.UUIDField(allow_null=True)
    session_id = serializers.CharField()
    note = serializers.CharField()
    created_at = serializers.DateTimeField()

    def to_representation(self, d: LookDecision) -> dict:
        return {
            "id": str(d.pk),
            "task": d.task,
            "looked": d.looked,
            "needed": d.needed,
            "trace": api_id(d.trace_id),
            "session_id": d.session_id,
            "note": d.note,
            "created_at": api_datetime(d.created_at),
        }


class CarryOverQuerySerializer(StrictSerializer):
    window_days = serializers.IntegerField(
        required=False, min_value=1, max_value=366, help_text="Default 7 (PIPER_LIVE_WINDOW_DAYS)."
    )


class CarryOverRatesSerializer(serializers.Serializer):
    open_item_survival_rate = serializers.FloatField(allow_null=True)
    open_item_execution_rate = serializers.FloatField(allow_null=True)
    skill_success_rate = serializers.FloatField(allow_null=True)
    skill_reuse_rate = serializers.FloatField(allow_null=True)
    skill_follow_rate = serializers.FloatField(allow_null=True)
    retrieval_without_use_rate = serializers.FloatField(allow_null=True)
    feedback_coverage = serializers.FloatField(allow_null=True)
    stale_answer_rate = serializers.FloatField(allow_null=True)
    look_rate = serializers.FloatField(allow_null=True)
    missed_look_rate = serializers.FloatField(allow_null=True)


class CarryOverOutputSerializer(serializers.Serializer):
    """One agent's live carry-over over a window (recall.live)."""

    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    grace_seconds = serializers.IntegerField()
    successions = serializers.IntegerField(help_text="Handovers in the window.")
    open_items = serializers.IntegerField(help_text="(succession, open item) pairs judged.")
    surfaced = serializers.IntegerField(help_text="Of those, shown by the successor's resume.")
    in_flight = serializers.IntegerField(help_text="Pairs of handovers not yet resumed.")
    items_judged = serializers.IntegerField(help_text="Open items now executed or lapsed.")
    executed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    executing = serializers.IntegerField(help_text="Open items being executed now: not judged.")
    not_yet_due = serializers.IntegerField()
    skill_runs = serializers.IntegerField()
    skill_runs_succeeded = serializers.IntegerField()
    skills_run = serializers.IntegerField()
    skills_reused = serializers.IntegerField(help_text="Run in at least two sessions.")
    skill_matches = serializers.IntegerField()
    skill_matches_followed = serializers.IntegerField()
    reads = serializers.IntegerField(help_text="Traced reads that returned something.")
    reads_with_feedback = serializers.IntegerField()
    reads_unused = serializers.IntegerField(help_text="Feedback used none of what was returned.")
    feedback = serializers.IntegerField()
    stale_answers = serializers.IntegerField()
    decisions = serializers.IntegerField(help_text="'Do I need to look?' decisions.")
    looked = serializers.IntegerField()
    needed = serializers.IntegerField()
    missed_looks = serializers.IntegerField(help_text="Needed, but not looked.")
    rates = CarryOverRatesSerializer()

    def to_representation(self, report) -> dict:
        [figures] = report.per_agent
        data = figures.as_dict()
        data.pop("agents")
        return {
            "window_start": api_datetime(report.window.start),
            "window_end": api_datetime(report.window.end),
            "grace_seconds": int(report.window.grace.total_seconds()),
            **data,
        }
