"""Request and response shapes of the episodes and source-ingest API.

Inputs are strict (unknown fields and mistyped values are refused, never
coerced), and their limits and messages are the service's, so a request says
the same thing whether the serializer or the service catches it. Outputs
declare their fields (OpenAPI) and build the dict directly: a page of 1,000
episodes through nested field serializers is most of a request.
"""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from piper.api.serializers import (
    AwareDateTimeField,
    CursorQuerySerializer,
    PolicyClassesSerializer,
    QueryDateTimeField,
    StrictCharField,
    StrictFloatField,
    StrictSerializer,
    api_datetime,
    api_id,
    page_of,
)
from piper.provenance import Authority, SourceType

from .models import EMBEDDING_DIM, Episode, EpisodeStatus, Outcome, SourceChunk
from .salience import effective_salience
from .services import (
    MAX_BATCH,
    MAX_CONTENT_CHARS,
    MAX_ENTITIES,
    MAX_ENTITY_CHARS,
    MAX_LABEL_CHARS,
    MAX_MEDIA_TYPE_CHARS,
    MAX_REASON_CHARS,
    MAX_RELATED,
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    MAX_URI_CHARS,
    EpisodeDraft,
)

UNIT_INTERVAL = {"min_value": "must be between 0 and 1", "max_value": "must be between 0 and 1"}


def _at_most(limit: int, unit: str = "characters") -> dict[str, str]:
    """A max_length message in the service's words."""
    return {"max_length": f"at most {limit:,} {unit}"}


def _text(limit: int, **kwargs) -> StrictCharField:
    """A text field with the service's limit and message; whitespace kept as sent."""
    kwargs.setdefault("required", False)
    kwargs.setdefault("allow_blank", True)
    kwargs.setdefault("default", "")
    return StrictCharField(
        max_length=limit,
        trim_whitespace=False,
        error_messages=_at_most(limit),
        **kwargs,
    )


def _embedding_field() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.FloatField(),
        required=False,
        allow_null=True,
        min_length=EMBEDDING_DIM,
        max_length=EMBEDDING_DIM,
        help_text="The vector itself: only with include_embedding=true.",
    )


def _vector(value) -> list[float] | None:
    return None if value is None else [float(x) for x in value]


# ------------------------------------------------------------------------ episodes


class EpisodeInputSerializer(PolicyClassesSerializer, StrictSerializer):
    occurred_at = AwareDateTimeField(help_text="When it happened (ISO 8601 with a time zone).")
    summary = _text(
        MAX_TEXT_CHARS,
        help_text="One or two sentences. At least one of summary, "
        "action and observation is needed.",
    )
    action = _text(MAX_TEXT_CHARS, help_text="What was done.")
    observation = _text(MAX_TEXT_CHARS, help_text="What was seen (the raw evidence).")
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False, default="unknown")
    score = StrictFloatField(
        required=False, allow_null=True, default=None, help_text="An outcome score, if any."
    )
    actor = _text(MAX_LABEL_CHARS["actor"], help_text="Who acted.")
    environment = _text(MAX_LABEL_CHARS["environment"], help_text="Where: a host, a repo, …")
    session_id = _text(MAX_LABEL_CHARS["session_id"])
    goal_id = _text(MAX_LABEL_CHARS["goal_id"])
    task_id = _text(MAX_LABEL_CHARS["task_id"])
    salience = StrictFloatField(
        min_value=0.0,
        max_value=1.0,
        required=False,
        default=0.5,
        error_messages=UNIT_INTERVAL,
        help_text="How much it matters, 0–1.",
    )
    confidence = StrictFloatField(
        min_value=0.0, max_value=1.0, required=False, default=1.0, error_messages=UNIT_INTERVAL
    )
    entities = serializers.ListField(
        child=StrictCharField(
            max_length=MAX_ENTITY_CHARS,
            error_messages=_at_most(MAX_ENTITY_CHARS),
        ),
        max_length=MAX_ENTITIES,
        required=False,
        default=list,
        error_messages=_at_most(MAX_ENTITIES, "names"),
        help_text="Names of the entities it mentions (stored lower-cased, de-duplicated).",
    )
    related_ids = serializers.ListField(
        child=serializers.UUIDField(),
        max_length=MAX_RELATED,
        required=False,
        default=list,
        error_messages=_at_most(MAX_RELATED, "episodes"),
        help_text="Other episodes of this agent it relates to (422 for an unknown one).",
    )
    source_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The source (document) read in this episode (422 for an unknown one).",
    )
    source_type = serializers.ChoiceField(
        choices=SourceType.choices, required=False, default=SourceType.OBSERVATION
    )
    source_ref = _text(MAX_LABEL_CHARS["source_ref"], help_text="Where it came from: a URI, …")
    authority = serializers.ChoiceField(
        choices=Authority.choices,
        required=False,
        allow_null=True,
        default=None,
        help_text="Defaults from source_type.",
    )
    parent_event_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The ledger event this episode summarises, if it is already recorded.",
    )

    @staticmethod
    def to_draft(data: dict) -> EpisodeDraft:
        return EpisodeDraft(**data)


class EpisodeBatchInputSerializer(StrictSerializer):
    episodes = serializers.ListField(
        child=EpisodeInputSerializer(),
        allow_empty=False,
        max_length=MAX_BATCH,
        help_text=f"Up to {MAX_BATCH:,} episodes, recorded all or nothing.",
    )


class EpisodeOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    occurred_at = serializers.DateTimeField()
    session_id = serializers.CharField()
    actor = serializers.CharField()
    environment = serializers.CharField()
    goal_id = serializers.CharField()
    task_id = serializers.CharField()
    summary = serializers.CharField()
    action = serializers.CharField()
    observation = serializers.CharField()
    outcome = serializers.ChoiceField(choices=Outcome.choices)
    score = serializers.FloatField(allow_null=True)
    salience = serializers.FloatField(help_text="How much it matters, as written (0–1).")
    effective_salience = serializers.FloatField(
        help_text="Its salience now: decayed with time since it happened or was last used, "
        "lifted by uses (retrieval ranks by it, a little)."
    )
    use_count = serializers.IntegerField(
        help_text="How often recall evidence that included it was used (recall feedback)."
    )
    last_used_at = serializers.DateTimeField(allow_null=True)
    confidence = serializers.FloatField()
    entities = serializers.ListField(child=serializers.CharField())
    related_ids = serializers.ListField(child=serializers.UUIDField())
    source_id = serializers.UUIDField(allow_null=True)
    source_type = serializers.ChoiceField(choices=SourceType.choices)
    authority = serializers.ChoiceField(choices=Authority.choices)
    raw_event_id = serializers.UUIDField(help_text="The ledger event it was built from.")
    instruction_like = serializers.BooleanField(
        help_text="Its text tries to act as an instruction to the model reading it "
        "(flagged at write time; kept as evidence, never consolidated)."
    )
    canonical_id = serializers.UUIDField(
        allow_null=True,
        help_text="It is a near-duplicate of this episode: kept, and searches answer with "
        "that one instead.",
    )
    status = serializers.ChoiceField(
        choices=EpisodeStatus.choices,
        help_text="active; retracted (withdrawn) or corrected (replaced by superseded_by): "
        "readable by id, left out of search, recall and context.",
    )
    status_reason = serializers.CharField(help_text="Why it was retracted or corrected.")
    status_changed_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was retracted or corrected."
    )
    supersedes = serializers.UUIDField(
        allow_null=True, help_text="The version this one corrects, if it is a correction."
    )
    superseded_by = serializers.UUIDField(
        allow_null=True, help_text="The version that corrects this one (status corrected)."
    )
    created_at = serializers.DateTimeField()
    embedded = serializers.BooleanField(help_text="Has its vector been computed yet?")
    embedding_model = serializers.CharField(help_text="The model that made the vector, or ''.")
    embedded_at = serializers.DateTimeField(allow_null=True)
    embedding = _embedding_field()

    def to_representation(self, episode: Episode) -> dict:
        data = {
            "id": str(episode.pk),
            "occurred_at": api_datetime(episode.occurred_at),
            "session_id": episode.session_id,
            "actor": episode.actor,
            "environment": episode.environment,
            "goal_id": episode.goal_id,
            "task_id": episode.task_id,
            "summary": episode.summary,
            "action": episode.action,
            "observation": episode.observation,
            "outcome": episode.outcome,
            "score": None if episode.score is None else float(episode.score),
            "salience": float(episode.salience),
            "effective_salience": round(
                effective_salience(
                    salience=episode.salience,
                    occurred_at=episode.occurred_at,
                    last_used_at=episode.last_used_at,
                    use_count=episode.use_count,
                    now=timezone.now(),
                ),
                6,
            ),
            "use_count": episode.use_count,
            "last_used_at": api_datetime(episode.last_used_at),
            "confidence": float(episode.confidence),
            "entities": list(episode.entities),
            "related_ids": [str(r) for r in episode.related_ids],
            "source_id": api_id(episode.source_id),
            "source_type": episode.source_type,
            "authority": episode.authority,
            "raw_event_id": str(episode.raw_event_id),
            "instruction_like": episode.instruction_like,
            "canonical_id": api_id(episode.canonical_id),
            "status": episode.status,
            "status_reason": episode.status_reason,
            "status_changed_at": api_datetime(episode.status_changed_at),
            "supersedes": api_id(episode.supersedes),
            "superseded_by": api_id(episode.superseded_by),
            "created_at": api_datetime(episode.created_at),
            "embedded": _embedded(episode),
            "embedding_model": episode.embedding_model,
            "embedded_at": api_datetime(episode.embedded_at),
        }
        if self.context.get("include_embedding"):
            data["embedding"] = _vector(episode.embedding)
        return data


def _embedded(row: Episode | SourceChunk) -> bool:
    # The selectors annotate `embedded` and defer the vector; a row a write just
    # built holds its (null) vector.
    if "embedded" in row.__dict__:
        return bool(row.embedded)
    return row.__dict__.get("embedding") is not None


def _reason(**kwargs) -> StrictCharField:
    return StrictCharField(
        max_length=MAX_REASON_CHARS,
        error_messages=_at_most(MAX_REASON_CHARS),
        **kwargs,
    )


class EpisodeRetractInputSerializer(StrictSerializer):
    reason = _reason(help_text="Why it is withdrawn: it did not happen as recorded.")


class EpisodeCorrectInputSerializer(StrictSerializer):
    """The fields to correct (at least one with a new value); the others stay the version's."""

    occurred_at = AwareDateTimeField(required=False)
    summary = _text(MAX_TEXT_CHARS, default=serializers.empty)
    action = _text(MAX_TEXT_CHARS, default=serializers.empty)
    observation = _text(MAX_TEXT_CHARS, default=serializers.empty)
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False)
    score = StrictFloatField(required=False, allow_null=True)
    actor = _text(MAX_LABEL_CHARS["actor"], default=serializers.empty)
    environment = _text(MAX_LABEL_CHARS["environment"], default=serializers.empty)
    goal_id = _text(MAX_LABEL_CHARS["goal_id"], default=serializers.empty)
    task_id = _text(MAX_LABEL_CHARS["task_id"], default=serializers.empty)
    entities = serializers.ListField(
        child=StrictCharField(
            max_length=MAX_ENTITY_CHARS,
            error_messages=_at_most(MAX_ENTITY_CHARS),
        ),
        max_length=MAX_ENTITIES,
        required=False,
        error_messages=_at_most(MAX_ENTITIES, "names"),
        help_text="The whole corrected list (stored lower-cased, de-duplicated).",
    )
    reason = _reason(
        required=False, allow_blank=True, default="", help_text="What was wrong, for the record."
    )


class EpisodeBatchOutputSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    episodes = EpisodeOutputSerializer(many=True)


class EpisodeListQuerySerializer(CursorQuerySerializer):
    actor = serializers.CharField(required=False, help_text="Exact match.")
    environment = serializers.CharField(required=False, help_text="Exact match.")
    session_id = serializers.CharField(required=False)
    goal_id = serializers.CharField(required=False)
    task_id = serializers.CharField(required=False)
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False)
    occurred_after = QueryDateTimeField(required=False, help_text="Inclusive.")
    occurred_before = QueryDateTimeField(
        required=False, help_text="Exclusive; 400 when earlier than occurred_after."
    )
    status = serializers.ChoiceField(
        choices=[*EpisodeStatus.values, "all"],
        required=False,
        default=EpisodeStatus.ACTIVE,
        help_text="active (the default), retracted, corrected, or all versions.",
    )
    include_embedding = serializers.BooleanField(
        required=False, default=False, help_text="Also return each vector (384 numbers)."
    )


class IncludeEmbeddingQuerySerializer(StrictSerializer):
    include_embedding = serializers.BooleanField(
        required=False, default=False, help_text="Also return the vector (384 numbers)."
    )


# ------------------------------------------------------------------------- sources


class SourceIngestInputSerializer(PolicyClassesSerializer, StrictSerializer):
    title = StrictCharField(
        max_length=MAX_TITLE_CHARS,
        error_messages=_at_most(MAX_TITLE_CHARS),
    )
    content = StrictCharField(
        max_length=MAX_CONTENT_CHARS,
        trim_whitespace=False,
        error_messages=_at_most(MAX_CONTENT_CHARS),
        help_text="The document's text; split into passages of about 800 characters.",
    )
    uri = _text(MAX_URI_CHARS, help_text="Where the document lives.")
    media_type = StrictCharField(
        max_length=MAX_MEDIA_TYPE_CHARS,
        required=False,
        default="text/plain",
        error_messages=_at_most(MAX_MEDIA_TYPE_CHARS),
    )
    actor = _text(MAX_LABEL_CHARS["actor"], help_text="Who read or supplied it.")


class SourceSummarySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()
    uri = serializers.CharField()
    content_hash = serializers.CharField()
    media_type = serializers.CharField()
    source_event_id = serializers.UUIDField()
    created_at = serializers.DateTimeField()


class SourceIngestOutputSerializer(serializers.Serializer):
    source = SourceSummarySerializer()
    created = serializers.BooleanField(help_text="false: this content was registered before.")
    chunks = serializers.IntegerField(help_text="How many chunks the source has.")


class ChunkOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    source_id = serializers.UUIDField()
    ordinal = serializers.IntegerField(help_text="Position in the document, from 0.")
    text = serializers.CharField()
    char_start = serializers.IntegerField(help_text="content[char_start:char_end] == text")
    char_end = serializers.IntegerField()
    instruction_like = serializers.BooleanField(
        help_text="Its text tries to act as an instruction to the model reading it."
    )
    created_at = serializers.DateTimeField()
    embedded = serializers.BooleanField()
    embedding_model = serializers.CharField()
    embedded_at = serializers.DateTimeField(allow_null=True)
    embedding = _embedding_field()

    def to_representation(self, chunk: SourceChunk) -> dict:
        data = {
            "id": str(chunk.pk),
            "source_id": str(chunk.source_id),
            "ordinal": chunk.ordinal,
            "text": chunk.text,
            "char_start": chunk.char_start,
            "char_end": chunk.char_end,
            "instruction_like": chunk.instruction_like,
            "created_at": api_datetime(chunk.created_at),
            "embedded": _embedded(chunk),
            "embedding_model": chunk.embedding_model,
            "embedded_at": api_datetime(chunk.embedded_at),
        }
        if self.context.get("include_embedding"):
            data["embedding"] = _vector(chunk.embedding)
        return data


class ChunkListQuerySerializer(CursorQuerySerializer, IncludeEmbeddingQuerySerializer):
    """A page of a source's chunks, with or without their vectors."""


EpisodePageSerializer = page_of(EpisodeOutputSerializer, "EpisodePageSerializer")
ChunkPageSerializer = page_of(ChunkOutputSerializer, "ChunkPageSerializer")
