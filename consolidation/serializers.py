"""Request and response shapes of the consolidation API: strict inputs, declared outputs."""

from __future__ import annotations

from rest_framework import serializers

from piper.api.serializers import (
    CursorQuerySerializer,
    StrictCharField,
    StrictSerializer,
    api_datetime,
    api_id,
    page_of,
)

from .models import (
    CandidateFact,
    CandidateSkill,
    CandidateSkillStatus,
    CandidateStatus,
    ConsolidationRun,
    RunKind,
    RunStatus,
)
from .services import MAX_REASON_CHARS

# ------------------------------------------------------------------------- inputs


class RunListQuerySerializer(CursorQuerySerializer):
    kind = serializers.ChoiceField(choices=RunKind.choices, required=False)
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)


class RunStartInputSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=RunKind.choices, required=False, default=RunKind.FACTS)


class CandidateListQuerySerializer(CursorQuerySerializer):
    status = serializers.ChoiceField(choices=CandidateStatus.choices, required=False)
    predicate = serializers.CharField(max_length=100, required=False)
    subject = serializers.CharField(max_length=300, required=False, help_text="Any case.")
    run = serializers.UUIDField(required=False, help_text="Proposed by this run.")


class CandidateSkillListQuerySerializer(CursorQuerySerializer):
    status = serializers.ChoiceField(choices=CandidateSkillStatus.choices, required=False)
    run = serializers.UUIDField(required=False, help_text="First seen by this run.")


class CandidateAcceptInputSerializer(StrictSerializer):
    pass


class CandidateRejectInputSerializer(StrictSerializer):
    reason = StrictCharField(max_length=MAX_REASON_CHARS, help_text="Why (kept with it).")


# ------------------------------------------------------------------------ outputs


class RunOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.ChoiceField(choices=RunKind.choices)
    status = serializers.ChoiceField(choices=RunStatus.choices)
    from_seq = serializers.IntegerField(help_text="It read episode events after this seq …")
    to_seq = serializers.IntegerField(help_text="… up to this one.")
    cursor_seq = serializers.IntegerField(help_text="Done up to here.")
    episodes_read = serializers.IntegerField()
    episodes_excluded = serializers.IntegerField()
    statements_found = serializers.IntegerField()
    statements_skipped = serializers.IntegerField()
    candidates_proposed = serializers.IntegerField()
    candidates_asserted = serializers.IntegerField()
    steps = serializers.IntegerField()
    details = serializers.JSONField()
    error = serializers.CharField()
    started_at = serializers.DateTimeField()
    heartbeat_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    source_event_id = serializers.UUIDField()
    finish_event_id = serializers.UUIDField(allow_null=True)

    def to_representation(self, run: ConsolidationRun) -> dict:
        return {
            "id": str(run.pk),
            "kind": run.kind,
            "status": run.status,
            "from_seq": run.from_seq,
            "to_seq": run.to_seq,
            "cursor_seq": run.cursor_seq,
            "episodes_read": run.episodes_read,
            "episodes_excluded": run.episodes_excluded,
            "statements_found": run.statements_found,
            "statements_skipped": run.statements_skipped,
            "candidates_proposed": run.candidates_proposed,
            "candidates_asserted": run.candidates_asserted,
            "steps": run.steps,
            "details": run.details,
            "error": run.error,
            "started_at": api_datetime(run.started_at),
            "heartbeat_at": api_datetime(run.heartbeat_at),
            "finished_at": api_datetime(run.finished_at),
            "duration_ms": run.duration_ms,
            "source_event_id": str(run.source_event_id),
            "finish_event_id": api_id(run.finish_event_id),
        }


class EpisodeExcerptSerializer(serializers.Serializer):
    summary = serializers.CharField()
    action = serializers.CharField()
    observation = serializers.CharField()
    actor = serializers.CharField()
    session_id = serializers.CharField()
    source_type = serializers.CharField()


class EvidenceOutputSerializer(serializers.Serializer):
    episode_id = serializers.UUIDField()
    event_id = serializers.UUIDField()
    field = serializers.CharField(help_text="Where it was read: summary, action or observation.")
    extractor = serializers.CharField()
    rule = serializers.CharField()
    confidence = serializers.FloatField()
    source = serializers.CharField(help_text="source type | actor | session: who said it.")
    occurred_at = serializers.DateTimeField()
    withdrawn_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When its episode version was retracted or corrected: it supports nothing "
        "any more. Null while it stands.",
    )
    withdrawn_by_event_id = serializers.UUIDField(
        allow_null=True, help_text="The episode.retracted or episode.corrected event."
    )
    episode = EpisodeExcerptSerializer(
        allow_null=True, help_text="The episode's text; null once it was erased."
    )


# What every candidate (fact or skill) carries: the run that proposed it, and who
# decided on it, when and why, with the events that recorded both. A comment, not
# a docstring: the schema would give it to both candidates as their description.
class CandidateDecisionSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    reason = serializers.CharField()
    decided_by = serializers.CharField()
    decided_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    source_event_id = serializers.UUIDField()
    decision_event_id = serializers.UUIDField(allow_null=True)


def _decision(candidate: CandidateFact | CandidateSkill) -> dict:
    return {
        "reason": candidate.reason,
        "decided_by": candidate.decided_by,
        "decided_at": api_datetime(candidate.decided_at),
        "created_at": api_datetime(candidate.created_at),
        "source_event_id": str(candidate.source_event_id),
        "decision_event_id": api_id(candidate.decision_event_id),
    }


class CandidateOutputSerializer(CandidateDecisionSerializer):
    subject = serializers.CharField()
    predicate = serializers.CharField()
    value = serializers.CharField()
    status = serializers.ChoiceField(choices=CandidateStatus.choices)
    extractor = serializers.CharField()
    confidence = serializers.FloatField()
    sources = serializers.IntegerField(help_text="Distinct sources among the evidence.")
    valid_from = serializers.DateTimeField()
    evidence_key = serializers.CharField()
    fact_id = serializers.UUIDField(allow_null=True, help_text="The fact version it asserted.")
    fact_outcome = serializers.CharField()
    evidence = EvidenceOutputSerializer(many=True)

    def to_representation(self, candidate: CandidateFact) -> dict:
        return {
            "id": str(candidate.pk),
            "run_id": str(candidate.run_id),
            "subject": candidate.subject,
            "predicate": candidate.predicate,
            "value": candidate.value,
            "status": candidate.status,
            "extractor": candidate.extractor,
            "confidence": candidate.confidence,
            "sources": candidate.sources,
            "valid_from": api_datetime(candidate.valid_from),
            "evidence_key": candidate.evidence_key,
            "fact_id": api_id(candidate.fact_id),
            "fact_outcome": candidate.fact_outcome,
            **_decision(candidate),
            "evidence": [_evidence(e) for e in candidate.evidence.all()],
        }


def _evidence(evidence) -> dict:
    episode = evidence.episode
    return {
        "episode_id": str(evidence.episode_id),
        "event_id": str(evidence.event_id),
        "field": evidence.field,
        "extractor": evidence.extractor,
        "rule": evidence.rule,
        "confidence": evidence.confidence,
        "source": evidence.source_key,
        "occurred_at": api_datetime(evidence.occurred_at),
        "withdrawn_at": api_datetime(evidence.withdrawn_at),
        "withdrawn_by_event_id": str(evidence.withdrawn_by_id)
        if evidence.withdrawn_by_id
        else None,
        "episode": None
        if episode is None
        else {
            "summary": episode.summary,
            "action": episode.action,
            "observation": episode.observation,
            "actor": episode.actor,
            "session_id": episode.session_id,
            "source_type": episode.source_type,
        },
    }


class RunStartOutputSerializer(serializers.Serializer):
    run = RunOutputSerializer(allow_null=True, help_text="null: nothing new to consolidate.")
    queued = serializers.BooleanField(help_text="A worker consolidates it (poll the run).")


RunPageSerializer = page_of(RunOutputSerializer, "ConsolidationRunPage")
CandidatePageSerializer = page_of(CandidateOutputSerializer, "CandidateFactPage")


class SkillEvidenceOutputSerializer(serializers.Serializer):
    trace_id = serializers.UUIDField()
    event_id = serializers.UUIDField()
    inputs_key = serializers.CharField(help_text="sha256 of the trace's inputs.")
    occurred_at = serializers.DateTimeField()


class CandidateSkillOutputSerializer(CandidateDecisionSerializer):
    shape_key = serializers.CharField(help_text="sha256 of the procedure's shape.")
    tools = serializers.ListField(child=serializers.CharField())
    task = serializers.CharField()
    status = serializers.ChoiceField(choices=CandidateSkillStatus.choices)
    traces = serializers.IntegerField(help_text="Supporting verified traces.")
    distinct_inputs = serializers.IntegerField(help_text="Of which with different inputs.")
    skill_id = serializers.UUIDField(allow_null=True)
    version_id = serializers.UUIDField(
        allow_null=True, help_text="The candidate skill version it proposed (skills API)."
    )
    evidence = SkillEvidenceOutputSerializer(many=True)

    def to_representation(self, c: CandidateSkill) -> dict:
        return {
            "id": str(c.pk),
            "run_id": str(c.run_id),
            "shape_key": c.shape_key,
            "tools": list(c.tools),
            "task": c.task,
            "status": c.status,
            "traces": c.traces,
            "distinct_inputs": c.distinct_inputs,
            "skill_id": api_id(c.skill_id),
            "version_id": api_id(c.version_id),
            **_decision(c),
            "evidence": [
                {
                    "trace_id": str(e.trace_id),
                    "event_id": str(e.event_id),
                    "inputs_key": e.inputs_key,
                    "occurred_at": api_datetime(e.occurred_at),
                }
                for e in c.evidence.all()
            ],
        }


CandidateSkillPageSerializer = page_of(CandidateSkillOutputSerializer, "CandidateSkillPage")
