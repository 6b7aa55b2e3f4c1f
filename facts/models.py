"""Semantic memory: entities, predicates and bitemporal facts (DESIGN.md §4).

A Fact row is one *version*: a value for (subject, predicate) over a valid-time
interval [valid_from, valid_to) — when it was true in the world — believed
over a record-time interval [recorded_at, superseded_at) — when the system
held it. Versions are never edited in place: a new belief closes the old
row's record time and inserts new rows. PostgreSQL's exclusion constraint
makes two currently believed values of a single-valued predicate that overlap
in valid time impossible, whatever the code does.

Every row is a projection of ledger events (`facts/projection.py` applies
them); `rebuild_projection facts` drops these tables' rows and replays the
ledger to the same state. FactText, the words a plain question finds a fact
by, is an index derived from that projection after commit (`facts/fact_texts.py`).
"""

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import (
    ArrayField,
    DateTimeRangeField,
    RangeBoundary,
    RangeOperators,
)
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F, Func, Q
from django.db.models.functions import Lower

from ledger.models import Event
from piper.embedded_text import (
    EmbeddedText,
    embedding_has_model,
    embedding_hnsw,
    search_vector_field,
    unembedded_index,
)
from piper.ids import uuid7
from piper.provenance import Authority
from piper.tenancy.models import Agent


class TsTzRange(Func):
    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class Entity(models.Model):
    """A thing facts are about: a person, a service, a city. Named by aliases."""

    id = models.UUIDField(primary_key=True, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=300, help_text="Canonical name (also an alias).")
    entity_type = models.CharField(
        max_length=100, default="thing", help_text="e.g. person, service, city."
    )
    created_at = models.DateTimeField()
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "entities"
        constraints = [
            # The target of same-agent foreign keys (migration 0004).
            models.UniqueConstraint(fields=["agent", "id"], name="facts_entity_agent_id_uniq"),
        ]

    def __str__(self) -> str:
        return self.name


class EntityAlias(models.Model):
    """A name that resolves to an entity; unique per agent, case-insensitively."""

    id = models.UUIDField(primary_key=True, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="aliases")
    alias = models.CharField(max_length=300)
    created_at = models.DateTimeField()
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["alias"]
        verbose_name_plural = "entity aliases"
        constraints = [
            models.UniqueConstraint(F("agent"), Lower("alias"), name="facts_alias_unique_ci"),
        ]
        indexes = [
            GinIndex(OpClass(Lower("alias"), name="gin_trgm_ops"), name="facts_alias_trgm"),
        ]

    def __str__(self) -> str:
        return self.alias


class Cardinality(models.TextChoices):
    ONE = "one", "One value at a time"
    MANY = "many", "Many values at a time"


class ValueType(models.TextChoices):
    ANY = "any", "Any JSON value"
    STRING = "string", "String"
    NUMBER = "number", "Number"
    INTEGER = "integer", "Integer"
    BOOLEAN = "boolean", "Boolean"
    OBJECT = "object", "JSON object"
    ARRAY = "array", "JSON array"
    DATETIME = "datetime", "ISO 8601 date-time string"
    ENTITY = "entity", "Entity (a relation)"


MAX_PREDICATE_ALIASES = 20
# A value trusted for longer than a century is trusted forever: say null.
MAX_VOLATILITY_SECONDS = 100 * 365 * 86400
MAX_PREDICATE_ALIAS_CHARS = 100
MAX_PREDICATE_EXAMPLES = 10
MAX_PREDICATE_EXAMPLE_CHARS = 200


class Predicate(models.Model):
    """What a fact says about its subject: `lives_in`, `employer`, `status`."""

    id = models.UUIDField(primary_key=True, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100)
    cardinality = models.CharField(
        max_length=4, choices=Cardinality.choices, default=Cardinality.ONE
    )
    value_type = models.CharField(max_length=10, choices=ValueType.choices, default=ValueType.ANY)
    volatility_seconds = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="How long a value can be trusted before it should be re-checked; empty: forever.",
    )
    description = models.TextField(blank=True, default="")
    aliases = ArrayField(
        models.CharField(max_length=MAX_PREDICATE_ALIAS_CHARS),
        default=list,
        blank=True,
        help_text="Other words a question may use for it ('due', 'due by' for a deadline): "
        "recall takes a question that uses one as asking for this predicate.",
    )
    examples = ArrayField(
        models.CharField(max_length=MAX_PREDICATE_EXAMPLE_CHARS),
        default=list,
        blank=True,
        help_text="Questions that ask for it, about 'it' ('How far along is it?' for a "
        "progress): recall compares a question naming a subject with these by meaning.",
    )
    created_at = models.DateTimeField()
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="facts_predicate_unique"),
            models.UniqueConstraint(fields=["agent", "id"], name="facts_predicate_agent_id_uniq"),
        ]

    def __str__(self) -> str:
        return self.name


class FactStatus(models.TextChoices):
    ACTIVE = "active", "Active (believed)"
    SUPERSEDED = "superseded", "Superseded (a newer belief replaced it)"
    RETRACTED = "retracted", "Retracted (no longer believed)"
    CONTESTED = "contested", "Contested (a lower-authority claim, not in force)"


class FactOrigin(models.TextChoices):
    """Why this version exists — the 'why' of a chain."""

    ASSERTED = "asserted", "Asserted"
    SPLIT = "split", "Remainder of a version that a newer one cut"
    CORRECTED = "corrected", "Correction of a wrong record"
    ENDED = "ended", "Ended (valid_to set)"
    ACCEPTED = "accepted", "Contested claim accepted by an operator"


class Fact(models.Model):
    # Foreign-key indexes: Django's one per column cost an index entry for each
    # of the three row versions a superseding claim writes (two INSERTs and the
    # closing, non-HOT UPDATE). Those a query needs are in Meta.indexes, partial
    # where the column is mostly empty; the rest are served by a composite index
    # or serve nothing (see the migration 0006 docstring for each).
    id = models.UUIDField(primary_key=True, editable=False)
    # Every facts index leads with agent.
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+", db_index=False)
    # Subject, predicate and object are checked by the composite foreign keys
    # over (agent_id, …) of migration 0004, which imply these: a second check per
    # row at commit is waste. Every query by subject also names the agent
    # (facts_versions_idx).
    subject = models.ForeignKey(
        Entity, on_delete=models.CASCADE, related_name="facts", db_index=False, db_constraint=False
    )
    # Indexed: a predicate's redefinition checks its believed facts.
    predicate = models.ForeignKey(
        Predicate, on_delete=models.CASCADE, related_name="facts", db_constraint=False
    )
    object_value = models.JSONField(null=True, blank=True, help_text="The value (not a relation).")
    object_entity = models.ForeignKey(
        Entity,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="incoming_facts",
        db_index=False,  # facts_object_entity_fk_idx, relations only
        db_constraint=False,
        help_text="The object, when the fact is a relation.",
    )
    valid_from = models.DateTimeField(help_text="Valid time: true in the world from …")
    valid_to = models.DateTimeField(
        null=True, blank=True, help_text="… until (exclusive); empty: open."
    )
    recorded_at = models.DateTimeField(help_text="Record time: believed from … (the event's).")
    superseded_at = models.DateTimeField(
        null=True, blank=True, help_text="… until (exclusive); empty: still believed."
    )
    status = models.CharField(max_length=10, choices=FactStatus.choices)
    origin = models.CharField(max_length=10, choices=FactOrigin.choices)
    single_valued = models.BooleanField(
        help_text="Copied from the predicate's cardinality: the exclusion constraint needs it here."
    )
    authority = models.CharField(max_length=20, choices=Authority.choices)
    confidence = models.FloatField()
    # No query looks facts up by their event, and events are never deleted.
    source_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
        help_text="The claim's ledger event.",
    )
    # The version links are indexed where set (Meta.indexes): deleting versions
    # (a rebuild's clear) checks each link to the deleted rows.
    supersedes = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    superseded_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    contests = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="contested_by",
        db_index=False,
        help_text="The higher-authority version this claim challenged.",
    )
    last_confirmed_at = models.DateTimeField(
        help_text="Record time of the latest evidence for this version."
    )
    instruction_like = models.BooleanField(
        default=False,
        db_default=False,
        verbose_name="instruction-like",
        help_text="Its value tries to act as an instruction to the model that reads it "
        "(piper.safety, when the claim was written; the verdict is in its event). Below a "
        "user's authority such a claim is only ever contested, never in force.",
    )

    class Meta:
        ordering = ["subject", "predicate", "valid_from", "recorded_at"]
        constraints = [
            ExclusionConstraint(
                name="facts_one_believed_value_at_a_time",
                expressions=[
                    ("agent", RangeOperators.EQUAL),
                    ("subject", RangeOperators.EQUAL),
                    ("predicate", RangeOperators.EQUAL),
                    (
                        TsTzRange("valid_from", "valid_to", RangeBoundary()),
                        RangeOperators.OVERLAPS,
                    ),
                ],
                condition=Q(status="active", superseded_at__isnull=True, single_valued=True),
            ),
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gt=F("valid_from")),
                name="facts_valid_to_after_valid_from",
            ),
            models.CheckConstraint(
                condition=Q(superseded_at__isnull=True) | Q(superseded_at__gte=F("recorded_at")),
                name="facts_superseded_after_recorded",
            ),
            models.CheckConstraint(
                condition=Q(object_entity__isnull=True, object_value__isnull=False)
                | Q(object_entity__isnull=False, object_value__isnull=True),
                name="facts_value_xor_entity",
            ),
            models.CheckConstraint(
                condition=Q(status__in=FactStatus.values), name="facts_status_known"
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0.0, confidence__lte=1.0), name="facts_confidence_0_1"
            ),
            # Closed rows say why they closed; believed rows are not closed.
            models.CheckConstraint(
                condition=~Q(status="superseded") | Q(superseded_at__isnull=False),
                name="facts_superseded_is_closed",
            ),
            models.CheckConstraint(
                condition=~Q(status="retracted") | Q(superseded_at__isnull=False),
                name="facts_retracted_is_closed",
            ),
        ]
        indexes = [
            # current / as_of: the believed versions of one subject+predicate.
            models.Index(
                fields=["agent", "subject", "predicate", "valid_from"],
                name="facts_believed_idx",
                condition=Q(status="active", superseded_at__isnull=True),
            ),
            # chain / as_known_at: every version of one subject+predicate.
            models.Index(
                fields=["agent", "subject", "predicate", "recorded_at"], name="facts_versions_idx"
            ),
            # graph walks backwards and "who points at X".
            models.Index(
                fields=["agent", "object_entity"],
                name="facts_object_entity_idx",
                condition=Q(
                    object_entity__isnull=False, status="active", superseded_at__isnull=True
                ),
            ),
            # the operator's queue of open contests.
            models.Index(
                fields=["agent", "recorded_at"],
                name="facts_open_contests_idx",
                condition=Q(status="contested", superseded_at__isnull=True),
            ),
            # The links, where set: a version's open contests (selectors), and the
            # foreign-key checks when versions or entities are deleted.
            models.Index(
                fields=["supersedes"],
                name="facts_supersedes_idx",
                condition=Q(supersedes__isnull=False),
            ),
            models.Index(
                fields=["superseded_by"],
                name="facts_superseded_by_idx",
                condition=Q(superseded_by__isnull=False),
            ),
            models.Index(
                fields=["contests"], name="facts_contests_idx", condition=Q(contests__isnull=False)
            ),
            models.Index(
                fields=["object_entity"],
                name="facts_object_entity_fk_idx",
                condition=Q(object_entity__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject_id}.{self.predicate_id} [{self.valid_from}, {self.valid_to})"

    @property
    def open_contests(self) -> list["Fact"]:
        """Open contests against this version, oldest first. The selectors load
        their ids with the version (open_contest_ids); otherwise this queries."""
        ids = getattr(self, "open_contest_ids", None)
        if ids is not None:
            return [Fact(pk=i, contests_id=self.pk) for i in ids]
        return list(
            Fact.objects.filter(
                contests=self, status=FactStatus.CONTESTED, superseded_at__isnull=True
            )
            .order_by("recorded_at")
            .only("id", "contests_id")
        )


class FactEvidence(models.Model):
    """A ledger event supporting a version: the claim that created it, and every
    re-assertion of the same value (idempotent re-asserts add evidence, not versions)."""

    # Derived from the event and the fact, so a rebuild reproduces it.
    id = models.UUIDField(primary_key=True, editable=False)
    # facts_evidence_once (fact, event) serves the lookups by fact; nothing
    # looks evidence up by event, and events are never deleted.
    fact = models.ForeignKey(
        Fact, on_delete=models.CASCADE, related_name="evidence", db_index=False
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+", db_index=False)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["recorded_at"]
        verbose_name_plural = "fact evidence"
        constraints = [
            models.UniqueConstraint(fields=["fact", "event"], name="facts_evidence_once"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} → {self.fact_id}"


class AuthorityPolicy(models.Model):
    """An agent's own precedence of authorities, most trusted first."""

    agent = models.OneToOneField(
        Agent, on_delete=models.PROTECT, primary_key=True, related_name="+"
    )
    order = ArrayField(models.CharField(max_length=20, choices=Authority.choices))
    admit_from = models.CharField(
        max_length=20,
        choices=Authority.choices,
        blank=True,
        default="",
        help_text="The least trusted authority whose unopposed claim becomes the believed "
        "value; a claim ranked below it is kept as contested until a trusted source says the "
        "same or an operator accepts it. Empty: every claim is admitted.",
    )
    updated_at = models.DateTimeField()
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")

    class Meta:
        verbose_name_plural = "authority policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(order__contained_by=Authority.values), name="facts_policy_known_levels"
            ),
        ]

    def __str__(self) -> str:
        return " > ".join(self.order)


# Text search over facts uses the same configuration as episodes (episodes.models).
FACT_TEXT_SEARCH_CONFIG = "english"
FACT_TEXT_TSVECTOR_SQL = "to_tsvector('english'::regconfig, coalesce(text, ''))"


class FactText(EmbeddedText):
    """One (subject, predicate) rendered as words, so a plain question can find it.

    "deployment window — team platform: Tuesdays 14:00". A search index, not a
    source of truth: similarity over this text only *proposes* (subject,
    predicate) pairs, and the facts selectors decide which value is current.
    Rendered after commit from fact events (`facts/fact_texts.py`, task
    `facts.index_fact_texts`); the text holds the values believed and valid
    when it was rendered, and the embedding is recomputed whenever the text
    changes. The rebuild re-renders every pair it replays.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    subject = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="+")
    predicate = models.ForeignKey(Predicate, on_delete=models.CASCADE, related_name="+")
    text = models.TextField(help_text="Predicate, subject (with its names) and current values.")
    search_vector = search_vector_field(FACT_TEXT_TSVECTOR_SQL)
    rendered_at = models.DateTimeField(help_text="When the text was last rendered.")

    class Meta:
        ordering = ["agent", "subject", "predicate"]
        verbose_name = "fact text"
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "subject", "predicate"], name="facts_facttext_pair_uniq"
            ),
            embedding_has_model("facts_facttext_embedding_has_model"),
        ]
        indexes = [
            GinIndex(fields=["search_vector"], name="facts_facttext_search_gin"),
            embedding_hnsw("facts_facttext_embedding_hnsw"),
            unembedded_index("facts_facttext_unembedded_idx"),
        ]

    def __str__(self) -> str:
        return self.text[:80]


class FactTextCursor(models.Model):
    """How far the fact-text backlog sweep (`facts.fact_texts_backlog`) has
    checked an agent's ledger: every pair the events up to `last_seq` touched
    has been rendered again since they were recorded. The texts are kept by
    tasks queued after commit; the sweep is the safety net for a task that was
    lost (Redis flushed or down, a worker killed), and works from this row, in
    PostgreSQL, so a lost broker cannot lose its place."""

    agent = models.OneToOneField(
        Agent, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    last_seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.agent_id} @ {self.last_seq}"
