"""Request and response shapes of the facts API.

Inputs are strict (unknown fields and mistyped values are refused, never
coerced); outputs are declared fields over what the selectors load, so a list
serializes without a query per row.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from piper.api.serializers import (
    AwareDateTimeField,
    CommaListField,
    PolicyClassesSerializer,
    QueryDateTimeField,
    SourceFieldsSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    api_datetime,
    api_id,
    page_of,
)
from piper.provenance import Authority, SourceType

from .models import (
    MAX_PREDICATE_ALIAS_CHARS,
    MAX_PREDICATE_ALIASES,
    MAX_PREDICATE_EXAMPLE_CHARS,
    MAX_PREDICATE_EXAMPLES,
    MAX_VOLATILITY_SECONDS,
    Cardinality,
    Fact,
    FactOrigin,
    FactStatus,
    ValueType,
)
from .services import MAX_BATCH, MAX_NAME, MISSING, ClaimInput, Provenance

ENTITY_REF_HELP = "An entity id, or any of the entity's names (case-insensitive)."


# ------------------------------------------------------------------------ provenance


class ProvenanceInputSerializer(PolicyClassesSerializer, SourceFieldsSerializer, StrictSerializer):
    """Who claims it, how they know, how sure they are (DESIGN §3)."""

    authority = serializers.ChoiceField(
        choices=Authority.choices,
        required=False,
        help_text="Defaults from source_type; a lower authority than the believed value's "
        "makes the claim contested instead of current.",
    )

    PROVENANCE_FIELDS = (
        "source_type",
        "source_ref",
        "authority",
        "confidence",
        "actor",
        "session_id",
        "privacy_class",
        "retention_class",
    )

    @classmethod
    def provenance(cls, data: dict) -> Provenance:
        return Provenance(**{k: data[k] for k in cls.PROVENANCE_FIELDS if k in data})


# ------------------------------------------------------------------------ entities


class EntityCreateInputSerializer(StrictSerializer):
    name = StrictCharField(max_length=MAX_NAME, help_text="Canonical name (also an alias).")
    entity_type = StrictCharField(max_length=100, required=False, default="thing")
    aliases = serializers.ListField(
        child=StrictCharField(max_length=MAX_NAME), required=False, default=list
    )


class AliasAddInputSerializer(StrictSerializer):
    alias = StrictCharField(max_length=MAX_NAME)


class EntityRefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()


class EntitySummarySerializer(EntityRefSerializer):
    entity_type = serializers.CharField()


class EntityOutputSerializer(EntitySummarySerializer):
    aliases = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    source_event_id = serializers.UUIDField()

    def get_aliases(self, entity) -> list[str]:
        # .all() reads the prefetch the selectors made; sorted here, not re-queried.
        return sorted((a.alias for a in entity.aliases.all()), key=str.lower)


class EntitySearchQuerySerializer(StrictSerializer):
    q = serializers.CharField(max_length=MAX_NAME, help_text="A name, or part of one.")
    limit = serializers.IntegerField(min_value=1, max_value=100, required=False, default=10)


class EntityMatchSerializer(serializers.Serializer):
    entity = EntitySummarySerializer()
    alias = serializers.CharField(help_text="The name that matched.")
    similarity = serializers.FloatField(help_text="pg_trgm similarity of that name, 0-1.")


class EntitySearchOutputSerializer(serializers.Serializer):
    results = EntityMatchSerializer(many=True)


# ---------------------------------------------------------------------- predicates


class PredicateDefineInputSerializer(StrictSerializer):
    """Fields left out keep their current value (or the default, for a new predicate)."""

    cardinality = serializers.ChoiceField(
        choices=Cardinality.choices,
        required=False,
        help_text="'one' value at a time (default) or 'many'. Becoming 'one' is refused (409) "
        "while a subject holds several values at once.",
    )
    value_type = serializers.ChoiceField(
        choices=ValueType.choices,
        required=False,
        help_text="Default 'any'. A type the believed values do not fit is refused (409).",
    )
    volatility_seconds = StrictIntegerField(
        min_value=1,
        max_value=MAX_VOLATILITY_SECONDS,
        required=False,
        allow_null=True,
        help_text="How long a value can be trusted before it should be re-checked; null: forever.",
    )
    description = StrictCharField(required=False, allow_blank=True, max_length=2000)
    aliases = serializers.ListField(
        child=StrictCharField(max_length=MAX_PREDICATE_ALIAS_CHARS),
        required=False,
        max_length=MAX_PREDICATE_ALIASES,
        help_text="Other words a question may use for this predicate ('due', 'due by' for a "
        "deadline): recall takes a question that uses one as asking for it. Replaces the "
        "list; [] removes them.",
    )
    examples = serializers.ListField(
        child=StrictCharField(max_length=MAX_PREDICATE_EXAMPLE_CHARS),
        required=False,
        max_length=MAX_PREDICATE_EXAMPLES,
        help_text="Questions that ask for this predicate, about 'it' ('How far along is it?' "
        "for a progress): recall compares a question that names a subject with these by "
        "meaning. Replaces the list; [] removes them.",
    )


class PredicateOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    cardinality = serializers.ChoiceField(choices=Cardinality.choices)
    value_type = serializers.ChoiceField(choices=ValueType.choices)
    volatility_seconds = serializers.IntegerField(allow_null=True)
    description = serializers.CharField()
    aliases = serializers.ListField(child=serializers.CharField())
    examples = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    source_event_id = serializers.UUIDField()


# The same enum as every `authority` field: spectacular would otherwise name this
# list's choice set a second time ("OrderEnum") and warn.
@extend_schema_field({"$ref": "#/components/schemas/AuthorityEnum"})
class AuthorityLevelField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=Authority.choices, **kwargs)


# An authority level, or "" for "no threshold": the schema says both.
@extend_schema_field(
    {"anyOf": [{"$ref": "#/components/schemas/AuthorityEnum"}, {"type": "string", "enum": [""]}]}
)
class AdmissionLevelField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=Authority.choices, allow_blank=True, **kwargs)


class AuthorityOrderSerializer(StrictSerializer):
    order = serializers.ListField(
        child=AuthorityLevelField(),
        allow_empty=False,
        help_text="Authority levels, most trusted first. Levels left out rank below the listed "
        "ones, in the default order.",
    )
    admit_from = AdmissionLevelField(
        required=False,
        default="",
        help_text="The admission threshold: a claim ranked below this level is never believed "
        "on its own word — it is kept as contested until a trusted source says the same or "
        "an operator accepts it. Empty: every claim is admitted.",
    )


# --------------------------------------------------------------------------- facts


class ClaimInputSerializer(ProvenanceInputSerializer):
    subject = StrictCharField(
        max_length=MAX_NAME, help_text=f"{ENTITY_REF_HELP} A new name creates the entity."
    )
    predicate = StrictCharField(max_length=100, help_text="e.g. 'lives_in'; new ones are created.")
    value = serializers.JSONField(
        required=False,
        allow_null=True,  # so that the service explains why null is not a value
        help_text="The value; send object_entity instead for a relation.",
    )
    object_entity = StrictCharField(
        max_length=MAX_NAME,
        required=False,
        help_text=f"The object of a relation. {ENTITY_REF_HELP} A new name creates the entity.",
    )
    valid_from = AwareDateTimeField(
        required=False, help_text="True in the world from (default: now)."
    )
    valid_to = AwareDateTimeField(
        required=False,
        allow_null=True,
        help_text="… until, exclusive (default: until the next known change, or open).",
    )
    cardinality = serializers.ChoiceField(
        choices=Cardinality.choices,
        required=False,
        help_text="For a new predicate (default 'one'); must match an existing one.",
    )
    value_type = serializers.ChoiceField(
        choices=ValueType.choices,
        required=False,
        help_text="For a new predicate (default 'any', or 'entity' for a relation).",
    )
    subject_type = StrictCharField(max_length=100, required=False, default="thing")
    object_type = StrictCharField(max_length=100, required=False, default="thing")

    def to_claim(self, data: dict) -> ClaimInput:
        return ClaimInput(
            subject=data["subject"],
            predicate=data["predicate"],
            value=data.get("value", MISSING),
            object_entity=data.get("object_entity"),
            valid_from=data.get("valid_from"),
            valid_to=data.get("valid_to"),
            cardinality=data.get("cardinality"),
            value_type=data.get("value_type"),
            subject_type=data["subject_type"],
            object_type=data["object_type"],
            provenance=self.provenance(data),
        )


class ClaimBatchInputSerializer(StrictSerializer):
    facts = serializers.ListField(
        child=ClaimInputSerializer(), allow_empty=False, max_length=MAX_BATCH
    )


class RetractInputSerializer(ProvenanceInputSerializer):
    reason = StrictCharField(max_length=2000, help_text="Why it is no longer believed.")


class CorrectInputSerializer(ProvenanceInputSerializer):
    value = serializers.JSONField(
        required=False, allow_null=True, help_text="The right value for the period."
    )
    object_entity = StrictCharField(
        max_length=MAX_NAME, required=False, help_text=f"For a relation. {ENTITY_REF_HELP}"
    )


class EndInputSerializer(ProvenanceInputSerializer):
    valid_to = AwareDateTimeField(help_text="When it stopped being true (exclusive).")


class ResolveInputSerializer(StrictSerializer):
    accept = StrictBooleanField(
        help_text="true puts the contested claim in force with operator authority; "
        "false rejects it."
    )
    actor = StrictCharField(max_length=200, required=False, default="operator")


# ---------------------------------------------------------------------- fact output


class SourceSerializer(serializers.Serializer):
    event_id = serializers.UUIDField(source="pk")
    source_type = serializers.ChoiceField(choices=SourceType.choices)
    source_ref = serializers.CharField()
    actor = serializers.CharField()
    session_id = serializers.CharField()


class MemoryStatusSerializer(serializers.Serializer):
    """Why to believe a fact, and how far: typed fields, never prose."""

    source = SourceSerializer(source="source_event", help_text="The claim's ledger event.")
    authority = serializers.ChoiceField(choices=Authority.choices)
    confidence = serializers.FloatField()
    valid_from = serializers.DateTimeField()
    valid_to = serializers.DateTimeField(allow_null=True)
    recorded_at = serializers.DateTimeField()
    superseded_at = serializers.DateTimeField(allow_null=True)
    last_confirmed_at = serializers.DateTimeField(
        help_text="Record time of the latest evidence for this version."
    )
    age_seconds = serializers.SerializerMethodField(
        help_text="Whole seconds since last_confirmed_at."
    )
    needs_recheck = serializers.SerializerMethodField(
        help_text="The predicate's volatility_seconds has passed since last_confirmed_at."
    )
    status = serializers.ChoiceField(choices=FactStatus.choices)
    origin = serializers.ChoiceField(choices=FactOrigin.choices)
    supersedes = serializers.UUIDField(source="supersedes_id", allow_null=True)
    superseded_by = serializers.UUIDField(source="superseded_by_id", allow_null=True)
    contests = serializers.UUIDField(
        source="contests_id",
        allow_null=True,
        help_text="The higher-authority version this claim challenged.",
    )
    contested_by = serializers.SerializerMethodField(
        help_text="Open contests against this version, oldest first."
    )

    def _now(self) -> datetime:
        # One clock per response: every fact's age is measured from the same moment.
        now = self.context.get("now")
        if now is None:
            now = self.context["now"] = timezone.now()
        return now

    def get_age_seconds(self, fact: Fact) -> int:
        return max(0, int((self._now() - fact.last_confirmed_at).total_seconds()))

    def get_needs_recheck(self, fact: Fact) -> bool:
        volatility = fact.predicate.volatility_seconds
        if volatility is None:
            return False
        return (self._now() - fact.last_confirmed_at).total_seconds() > volatility

    instruction_like = serializers.BooleanField(
        help_text="The value tries to instruct the model reading it (flagged at write time; "
        "below a user's authority such a claim is only ever contested)."
    )

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_contested_by(self, fact: Fact) -> list[str]:
        return [str(c.pk) for c in fact.open_contests]


# The declared fields document the shape (OpenAPI); to_representation builds it
# directly: nested serializers cost more than the lookup (docs/benchmarks.md).
class FactOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    subject = EntityRefSerializer()
    predicate = serializers.CharField(source="predicate.name")
    value = serializers.JSONField(
        source="object_value", allow_null=True, help_text="null for a relation."
    )
    object_entity = EntityRefSerializer(allow_null=True, help_text="The object of a relation.")
    memory_status = MemoryStatusSerializer(source="*")

    def to_representation(self, fact: Fact) -> dict:
        now = self.context.get("now")
        if now is None:  # one clock per response, shared with MemoryStatusSerializer
            now = self.context["now"] = timezone.now()
        event, obj = fact.source_event, fact.object_entity
        volatility = fact.predicate.volatility_seconds
        age = (now - fact.last_confirmed_at).total_seconds()
        return {
            "id": str(fact.pk),
            "subject": {"id": str(fact.subject.pk), "name": fact.subject.name},
            "predicate": fact.predicate.name,
            "value": fact.object_value,
            "object_entity": None if obj is None else {"id": str(obj.pk), "name": obj.name},
            "memory_status": {
                "source": {
                    "event_id": str(event.pk),
                    "source_type": event.source_type,
                    "source_ref": event.source_ref,
                    "actor": event.actor,
                    "session_id": event.session_id,
                },
                "authority": fact.authority,
                "confidence": float(fact.confidence),
                "valid_from": api_datetime(fact.valid_from),
                "valid_to": api_datetime(fact.valid_to),
                "recorded_at": api_datetime(fact.recorded_at),
                "superseded_at": api_datetime(fact.superseded_at),
                "last_confirmed_at": api_datetime(fact.last_confirmed_at),
                "age_seconds": max(0, int(age)),
                "needs_recheck": volatility is not None and age > volatility,
                "status": fact.status,
                "origin": fact.origin,
                "supersedes": api_id(fact.supersedes_id),
                "superseded_by": api_id(fact.superseded_by_id),
                "contests": api_id(fact.contests_id),
                "contested_by": [str(c.pk) for c in fact.open_contests],
                "instruction_like": fact.instruction_like,
            },
        }


class FactListOutputSerializer(serializers.Serializer):
    subject = EntityRefSerializer()
    predicate = serializers.CharField(allow_null=True)
    facts = FactOutputSerializer(many=True)


class FactAsOfOutputSerializer(FactListOutputSerializer):
    valid_time = serializers.DateTimeField()


class FactAsKnownAtOutputSerializer(FactAsOfOutputSerializer):
    record_time = serializers.DateTimeField()


class FactWriteOutputSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(
        choices=[
            "created",
            "confirmed",
            "contested",
            "retracted",
            "corrected",
            "ended",
            "accepted",
            "rejected",
        ]
    )
    fact = FactOutputSerializer(help_text="The version the write made, confirmed or closed.")
    superseded = serializers.ListField(
        child=serializers.UUIDField(), help_text="Versions this write closed and replaced."
    )
    resolved_contests = serializers.ListField(
        child=serializers.UUIDField(), help_text="Open contests this write settled."
    )


class FactReceiptSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["created", "confirmed", "contested"])
    fact_id = serializers.UUIDField()
    recorded_at = serializers.DateTimeField(
        help_text="When the service recorded this claim: use it as record_time in as-known-at."
    )
    superseded = serializers.ListField(child=serializers.UUIDField())
    resolved_contests = serializers.ListField(child=serializers.UUIDField())


class FactBatchOutputSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    results = FactReceiptSerializer(many=True, help_text="One per claim, in request order.")


# ---------------------------------------------------------------------- query shapes


class FactQuerySerializer(StrictSerializer):
    subject = serializers.CharField(max_length=MAX_NAME, help_text=ENTITY_REF_HELP)
    predicate = serializers.CharField(
        max_length=100, required=False, help_text="Leave out for every predicate of the subject."
    )


class FactAsOfQuerySerializer(FactQuerySerializer):
    valid_time = QueryDateTimeField(help_text="The moment in the world asked about.")


class FactAsKnownAtQuerySerializer(FactAsOfQuerySerializer):
    record_time = QueryDateTimeField(help_text="What the system believed at this moment.")


class FactChainQuerySerializer(StrictSerializer):
    subject = serializers.CharField(max_length=MAX_NAME, help_text=ENTITY_REF_HELP)
    predicate = serializers.CharField(max_length=100)


class GraphPathsQuerySerializer(StrictSerializer):
    start = serializers.CharField(max_length=MAX_NAME, help_text=ENTITY_REF_HELP)
    end = serializers.CharField(max_length=MAX_NAME, required=False, help_text=ENTITY_REF_HELP)
    min_hops = serializers.IntegerField(min_value=1, max_value=4, required=False, default=1)
    max_hops = serializers.IntegerField(min_value=1, max_value=4, required=False, default=3)
    predicates = CommaListField(
        child=serializers.CharField(max_length=100),
        required=False,
        min_length=1,
        max_length=4,
        help_text="The predicate of each hop, in order (comma-separated); fixes the length.",
    )
    valid_time = QueryDateTimeField(required=False, help_text="Default: now.")
    limit = serializers.IntegerField(min_value=1, max_value=1000, required=False, default=50)


class PathSerializer(serializers.Serializer):
    hops = serializers.SerializerMethodField()
    entities = EntitySummarySerializer(many=True, help_text="start, …, end")
    facts = FactOutputSerializer(many=True, help_text="The relation of each hop: the evidence.")

    def get_hops(self, path) -> int:
        return len(path.facts)


class GraphPathsOutputSerializer(serializers.Serializer):
    valid_time = serializers.DateTimeField()
    paths = PathSerializer(many=True)


EntityPageSerializer = page_of(EntityOutputSerializer, "EntityPageSerializer")
PredicatePageSerializer = page_of(PredicateOutputSerializer, "PredicatePageSerializer")
FactPageSerializer = page_of(FactOutputSerializer, "FactPageSerializer")
