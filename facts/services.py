"""Every write to semantic memory.

Each service validates its request completely, then — in one transaction —
appends the ledger events that carry it and applies them to the projection
(`facts/projection.py`). Bad input raises before anything is written.
Writers of one (agent, subject, predicate) are serialised by an advisory lock
taken in a fixed order — after the agent's ledger chain — and a write that
still meets the exclusion constraint is retried: never a 5xx, never an overlap.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger.models import Event
from ledger.services import EventDraft, chain_lock, events_append, json_storage_error
from piper import safety
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.ids import uuid7
from piper.provenance import Authority, PrivacyClass, RetentionClass, SourceType, authority_rank
from piper.tenancy.models import Agent

from . import projection as p
from .models import (
    MAX_VOLATILITY_SECONDS,
    AuthorityPolicy,
    Cardinality,
    Entity,
    EntityAlias,
    Fact,
    FactStatus,
    Predicate,
    ValueType,
)
from .selectors import alias_lookup

PREDICATE_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")
MAX_NAME = 300
MAX_BATCH = 1000
CONSTRAINT_RETRIES = 3
MISSING: Any = object()


@dataclass(frozen=True)
class Provenance:
    """Who claims it, how they know, how sure they are (DESIGN §3)."""

    source_type: str = SourceType.AGENT_INFERENCE
    source_ref: str = ""
    authority: str | None = None
    confidence: float = 1.0
    actor: str = ""
    session_id: str = ""
    privacy_class: str = PrivacyClass.INTERNAL
    retention_class: str = RetentionClass.STANDARD

    def draft(self, event_type: str, payload: dict) -> EventDraft:
        return EventDraft(
            event_type=event_type,
            payload=payload,
            source_type=self.source_type,
            source_ref=self.source_ref,
            authority=self.authority,
            confidence=self.confidence,
            actor=self.actor,
            session_id=self.session_id,
            privacy_class=self.privacy_class,
            retention_class=self.retention_class,
        )


OPERATOR = Provenance(source_type=SourceType.OPERATOR)

EntityRef = uuid.UUID | str


@dataclass(frozen=True)
class ClaimInput:
    """One fact to assert. `subject` and `object_entity` are entity ids or names
    (a name nobody has used yet creates the entity)."""

    subject: EntityRef
    predicate: str
    value: Any = MISSING
    object_entity: EntityRef | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    cardinality: str | None = None
    value_type: str | None = None
    subject_type: str = "thing"
    object_type: str = "thing"
    provenance: Provenance = field(default_factory=Provenance)


# ------------------------------------------------------------------------ helpers


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _append_and_apply(
    *,
    agent: Agent,
    drafts: Sequence[EventDraft],
    preload: dict[tuple[str, str], datetime] | None = None,
) -> list[p.Applied]:
    """Append the events, apply them through one store, write the net result.
    `preload` names the pairs the events touch, each with the earliest valid
    time asserted for it (older history need not be read)."""
    events = events_append(agent=agent, drafts=drafts)
    store = p.Store()
    if preload:
        store.preload_from(
            agent.pk, {(uuid.UUID(s), uuid.UUID(pr)): at for (s, pr), at in preload.items()}
        )
    applied = [p.apply(event, store) for event in events]
    store.flush()
    return applied


# Constraints a concurrent writer can make us meet; a retry re-plans and
# then sees the other's row (its version, or the entity it just named).
RETRYABLE_CONSTRAINTS = (
    "facts_one_believed_value_at_a_time",
    "facts_alias_unique_ci",
    "facts_predicate_unique",
)


def _with_retry(write):
    """Run `write` in a savepoint; retry when a concurrent writer's row got in first."""
    for attempt in range(CONSTRAINT_RETRIES):
        try:
            with transaction.atomic():
                return write()
        except IntegrityError as exc:
            if not any(name in str(exc) for name in RETRYABLE_CONSTRAINTS):
                raise  # a bug, not a race: let it surface
            if attempt == CONSTRAINT_RETRIES - 1:
                raise Conflict(
                    "another write to the same fact kept getting there first; retry the request",
                    code="concurrent_write",
                ) from exc
    raise AssertionError("unreachable")


def _safety_payload(value: Any) -> dict:
    """The safety verdict on a claimed value, for its event's payload (only when flagged):
    the projection reads it from there, so a replay decides as the write did."""
    verdict = safety.screen_value(value)
    return {"safety": verdict.as_dict()} if verdict.instruction_like else {}


def _a(word: str) -> str:
    # 'a user_statement', 'an integer': u mostly sounds like 'you' here.
    return f"{'an' if word[:1] in 'aeio' else 'a'} {word}"


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise InvalidInput(
            f"{what} must be a non-empty string of at most {MAX_NAME} characters",
            details={what: ["invalid"]},
        )
    return name.strip()


def _lock_alias(agent: Agent, alias: str) -> None:
    # Two requests creating the same new name must not both create it.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"facts-alias:{agent.pk}:{alias.lower()}"],
        )


# ------------------------------------------------------------------------ entities


def entity_create(
    *,
    agent: Agent,
    name: str,
    entity_type: str = "thing",
    aliases: Sequence[str] = (),
    provenance: Provenance = Provenance(),
) -> Entity:
    """Create an entity named `name` (also its first alias). Raises Conflict
    (alias_taken) if the name or an alias already names an entity of this agent."""
    name = _check_name(name, "name")
    entity_type = _check_name(entity_type, "entity_type")
    names = list(
        {a.lower(): a for a in [name, *(_check_name(a, "aliases") for a in aliases)]}.values()
    )
    with transaction.atomic():
        for alias in sorted(a.lower() for a in names):
            _lock_alias(agent, alias)
        taken = _aliases_taken(agent, names)
        if taken:
            raise Conflict(
                f"{taken[0]!r} already names another entity",
                code="alias_taken",
                details={"aliases": taken},
            )
        draft = provenance.draft(
            p.ENTITY_CREATED,
            {"entity_id": str(uuid7()), "name": name, "entity_type": entity_type, "aliases": names},
        )
        return _append_and_apply(agent=agent, drafts=[draft])[0].obj


def _aliases_taken(agent: Agent, names: Sequence[str]) -> list[str]:
    return sorted(alias for alias, _ in _alias_lookup(agent, {n.lower() for n in names}))


def entity_alias_add(
    *, agent: Agent, entity: Entity, alias: str, provenance: Provenance = Provenance()
) -> EntityAlias:
    """Add a name for the entity. Idempotent for its own alias; Conflict if another entity has it."""
    if entity.agent_id != agent.pk:  # another agent's entity is as good as missing
        raise NotFound(f"entity {entity.pk} not found")
    alias = _check_name(alias, "alias")
    with transaction.atomic():
        _lock_alias(agent, alias)
        existing = alias_lookup(agent=agent, name=alias).first()
        if existing:
            if existing.entity_id == entity.pk:
                return existing
            raise Conflict(
                f"{alias!r} already names another entity ({existing.entity_id})",
                code="alias_taken",
                details={"alias": [f"taken by {existing.entity_id}"]},
            )
        draft = provenance.draft(p.ALIAS_ADDED, {"entity_id": str(entity.pk), "alias": alias})
        return _append_and_apply(agent=agent, drafts=[draft])[0].obj


def _parse_entity_id(ref: EntityRef) -> uuid.UUID | None:
    if isinstance(ref, uuid.UUID):
        return ref
    try:
        return uuid.UUID(ref)
    except (ValueError, AttributeError, TypeError):
        return None


# ---------------------------------------------------------------------- predicates


def _value_type_error(value_type: str, value: Any) -> str | None:
    checks = {
        ValueType.ANY: lambda v: True,
        ValueType.STRING: lambda v: isinstance(v, str),
        ValueType.NUMBER: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        ValueType.INTEGER: lambda v: isinstance(v, int) and not isinstance(v, bool),
        ValueType.BOOLEAN: lambda v: isinstance(v, bool),
        ValueType.OBJECT: lambda v: isinstance(v, dict),
        ValueType.ARRAY: lambda v: isinstance(v, list),
        ValueType.DATETIME: lambda v: isinstance(v, str) and _is_datetime(v),
    }
    if value_type == ValueType.ENTITY:
        return "this predicate relates entities: send object_entity, not value"
    if value is None:
        return "a fact needs a value (to say it no longer holds, retract or end it)"
    if not checks[value_type](value):
        return (
            f"expected {_a(ValueType(value_type).label.lower())} value, got {type(value).__name__}"
        )
    return None


def _value_error(value_type: str, value: Any) -> str | None:
    """Why `value` cannot be a fact's value: the predicate's type, or the ledger's limits."""
    return _value_type_error(value_type, value) or json_storage_error(value, path="value")


def _is_datetime(text: str) -> bool:
    try:
        parsed = parse_datetime(text)
    except ValueError:
        return False
    return parsed is not None and parsed.tzinfo is not None


def predicate_define(
    *,
    agent: Agent,
    name: str,
    cardinality: str | None = None,
    value_type: str | None = None,
    volatility_seconds: int | None | Any = MISSING,
    description: str | None = None,
    aliases: Sequence[str] | None = None,
    provenance: Provenance = OPERATOR,
) -> Predicate:
    """Create a predicate, or change one. Unchanged definitions write nothing.

    `aliases`: other words a question may use for it (recall, recall/about.py);
    trimmed, lower-cased, each once, in the order given.

    Raises Conflict (cardinality_conflict / value_type_conflict) when existing
    believed facts would break under the new definition.
    """
    if not isinstance(name, str) or len(name) > 100 or not PREDICATE_NAME.fullmatch(name):
        raise InvalidInput(
            "predicate names are lower-case words joined by '_' or '.', e.g. 'lives_in'",
            details={"predicate": ["invalid format"]},
        )
    if cardinality is not None and cardinality not in Cardinality.values:
        raise InvalidInput(
            f"cardinality must be one of {Cardinality.values}", details={"cardinality": ["invalid"]}
        )
    if value_type is not None and value_type not in ValueType.values:
        raise InvalidInput(
            f"value_type must be one of {ValueType.values}", details={"value_type": ["invalid"]}
        )
    if volatility_seconds not in (MISSING, None) and (
        isinstance(volatility_seconds, bool)
        or not isinstance(volatility_seconds, int)
        or not 1 <= volatility_seconds <= MAX_VOLATILITY_SECONDS
    ):
        raise InvalidInput(
            f"volatility_seconds must be an integer from 1 to {MAX_VOLATILITY_SECONDS} (a "
            "century), or null for a value that never needs re-checking",
            details={"volatility_seconds": ["invalid"]},
        )
    if aliases is not None:
        aliases = clean_aliases(aliases)
    with transaction.atomic():
        current = Predicate.objects.select_for_update().filter(agent=agent, name=name).first()
        definition = {
            "predicate_id": str(current.pk if current else uuid7()),
            "name": name,
            "cardinality": cardinality or (current.cardinality if current else Cardinality.ONE),
            "value_type": value_type or (current.value_type if current else ValueType.ANY),
            "volatility_seconds": (
                (current.volatility_seconds if current else None)
                if volatility_seconds is MISSING
                else volatility_seconds
            ),
            "description": description
            if description is not None
            else (current.description if current else ""),
            "aliases": aliases if aliases is not None else (current.aliases if current else []),
        }
        if current:
            unchanged = all(
                getattr(current, key) == definition[key]
                for key in (
                    "cardinality",
                    "value_type",
                    "volatility_seconds",
                    "description",
                    "aliases",
                )
            )
            if unchanged:
                return current
            _check_redefinition(current, definition)
        return _append_and_apply(
            agent=agent, drafts=[provenance.draft(p.PREDICATE_DEFINED, definition)]
        )[0].obj


def clean_aliases(aliases: Any) -> list[str]:
    from .models import MAX_PREDICATE_ALIAS_CHARS, MAX_PREDICATE_ALIASES

    if isinstance(aliases, str) or not isinstance(aliases, Sequence):
        raise InvalidInput(
            'aliases must be a list of words or short phrases, e.g. ["due", "due by"]',
            details={"aliases": ["not a list"]},
        )
    if len(aliases) > MAX_PREDICATE_ALIASES:
        raise InvalidInput(
            f"at most {MAX_PREDICATE_ALIASES} aliases per predicate (got {len(aliases)})",
            details={"aliases": ["too many"]},
        )
    cleaned: list[str] = []
    for alias in aliases:
        text = " ".join(alias.split()).lower() if isinstance(alias, str) else ""
        if not text or len(text) > MAX_PREDICATE_ALIAS_CHARS:
            raise InvalidInput(
                f"each alias is a word or phrase of 1 to {MAX_PREDICATE_ALIAS_CHARS} characters "
                f"(got {alias!r})",
                details={"aliases": ["invalid alias"]},
            )
        if text not in cleaned:
            cleaned.append(text)
    return cleaned


def _check_redefinition(current: Predicate, definition: dict) -> None:
    believed = Fact.objects.filter(
        predicate=current, status=FactStatus.ACTIVE, superseded_at__isnull=True
    )
    if current.cardinality == Cardinality.MANY and definition["cardinality"] == Cardinality.ONE:
        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT DISTINCT a.subject_id FROM facts_fact a JOIN facts_fact b
                  ON b.predicate_id = a.predicate_id AND b.subject_id = a.subject_id AND b.id > a.id
                 AND b.status = 'active' AND b.superseded_at IS NULL
                 AND tstzrange(a.valid_from, a.valid_to) && tstzrange(b.valid_from, b.valid_to)
                WHERE a.predicate_id = %s AND a.status = 'active' AND a.superseded_at IS NULL
                LIMIT 5
                """,
                [current.pk],
            )
            subjects = [str(row[0]) for row in cursor.fetchall()]
        if subjects:
            raise Conflict(
                f"predicate {current.name!r} cannot become single-valued: some subjects hold "
                "several values at the same time; end or retract the extra values first",
                code="cardinality_conflict",
                details={"subjects": subjects},
            )
    new_type = definition["value_type"]
    if new_type != current.value_type and new_type != ValueType.ANY:
        if new_type == ValueType.ENTITY or current.value_type == ValueType.ENTITY:
            clash = believed.exists()
        else:
            clash = any(
                _value_type_error(new_type, v)
                for v in believed.values_list("object_value", flat=True).iterator()
            )
        if clash:
            raise Conflict(
                f"predicate {current.name!r} has believed values that are not of type {new_type!r}",
                code="value_type_conflict",
                details={"value_type": [new_type]},
            )


def authority_order_set(
    *,
    agent: Agent,
    order: Sequence[str],
    admit_from: str = "",
    provenance: Provenance = OPERATOR,
) -> AuthorityPolicy:
    """Set the agent's precedence of authorities, most trusted first (levels left
    out rank below the listed ones), and its admission threshold: with
    `admit_from`, a claim ranked below that level never becomes the believed
    value on its own word — it is kept as contested (in the operator's queue)
    until a trusted source says so or an operator accepts it."""
    order = list(order)
    unknown = [a for a in order if a not in Authority.values]
    if not order or unknown or len(set(order)) != len(order):
        raise InvalidInput(
            f"order must list distinct authority levels from {Authority.values}",
            details={"order": [f"unknown level {a!r}" for a in unknown] or ["empty or repeated"]},
        )
    if admit_from and admit_from not in Authority.values:
        raise InvalidInput(
            f"admit_from must be one of {Authority.values}, or empty to admit every claim",
            details={"admit_from": [f"unknown level {admit_from!r}"]},
        )
    payload = {"order": order, **({"admit_from": admit_from} if admit_from else {})}
    with transaction.atomic():
        return _append_and_apply(
            agent=agent, drafts=[provenance.draft(p.AUTHORITY_ORDER_SET, payload)]
        )[0].obj


# --------------------------------------------------------------------------- facts


@dataclass
class _Plan:
    """A validated batch: what to create first, and the events to append."""

    # Made on first use, credited to the claim that first named them.
    new_entities: dict[str, tuple[Provenance, dict]] = field(default_factory=dict)  # by lower name
    new_predicates: dict[str, tuple[Provenance, dict]] = field(default_factory=dict)
    asserts: list[tuple[Provenance, dict]] = field(default_factory=list)
    locks: set[tuple[str, str]] = field(default_factory=set)


def facts_assert(*, agent: Agent, claims: Sequence[ClaimInput]) -> list[p.Applied]:
    """Assert claims in order, atomically: all apply or none.

    For each: a single-valued predicate gets the new value from valid_from
    until the next known change, closing and splitting what it replaces; a
    claim of lower authority than a believed overlapping value is stored as
    contested and changes nothing current; the same value again adds evidence.
    Raises InvalidInput (400) / Unprocessable (422, unknown entity id) /
    Conflict (409, predicate definition clash) before writing anything.
    """
    if not claims:
        raise InvalidInput("send at least one fact", details={"facts": ["empty"]})
    if len(claims) > MAX_BATCH:
        raise InvalidInput(
            f"at most {MAX_BATCH} facts per request", details={"facts": ["too many"]}
        )

    def write() -> list[p.Applied]:
        # The agent's chain first, then the pairs (as every facts writer): a
        # retry after meeting a constraint runs in the same transaction, and
        # writers queued on its chain lock stay queued until it commits — had
        # one of them taken a pair this retry needs, that was a deadlock.
        chain_lock(agent=agent)
        plan = _plan(agent, claims)
        p.lock_pairs(agent.pk, plan.locks)
        drafts = [prov.draft(p.ENTITY_CREATED, d) for prov, d in plan.new_entities.values()]
        drafts += [prov.draft(p.PREDICATE_DEFINED, d) for prov, d in plan.new_predicates.values()]
        first_assert = len(drafts)
        drafts += [prov.draft(p.ASSERTED, payload) for prov, payload in plan.asserts]
        # Each pair is read from its earliest claim on: older versions cannot be
        # touched. A claim without valid_from starts at its record time, after now.
        soon = timezone.now() - timedelta(minutes=1)
        starts: dict[tuple[str, str], datetime] = {}
        for _, payload in plan.asserts:
            pair = (payload["subject_id"], payload["predicate_id"])
            start = parse_datetime(payload["valid_from"]) if payload["valid_from"] else soon
            starts[pair] = min(start, starts.get(pair, start))
        return _append_and_apply(agent=agent, drafts=drafts, preload=starts)[first_assert:]

    return _with_retry(write)


def fact_assert(*, agent: Agent, claim: ClaimInput) -> p.Applied:
    return facts_assert(agent=agent, claims=[claim])[0]


def _plan(agent: Agent, claims: Sequence[ClaimInput]) -> _Plan:
    plan = _Plan()
    errors: dict[str, dict[str, list[str]]] = {}
    names = {c.predicate for c in claims if isinstance(c.predicate, str)}
    predicates = {pr.name: pr for pr in Predicate.objects.filter(agent=agent, name__in=names)}
    refs = [r for c in claims for r in (c.subject, c.object_entity) if r is not None]
    entities = _resolve_entities(agent, refs)

    for index, claim in enumerate(claims):
        problems: dict[str, list[str]] = {}
        definition = _claim_predicate(agent, claim, predicates, plan, problems)
        subject_id = _claim_entity(
            claim.subject, claim.subject_type, claim.provenance, entities, plan, problems, "subject"
        )
        object_id = None
        if definition is not None:
            if definition["value_type"] == ValueType.ENTITY:
                if claim.object_entity is None:
                    problems["object_entity"] = [
                        "this predicate relates entities: send object_entity"
                    ]
                elif claim.value is not MISSING:
                    problems["value"] = ["send object_entity or value, not both"]
                else:
                    object_id = _claim_entity(
                        claim.object_entity,
                        claim.object_type,
                        claim.provenance,
                        entities,
                        plan,
                        problems,
                        "object_entity",
                    )
            elif claim.object_entity is not None:
                problems["object_entity"] = [
                    f"predicate {claim.predicate!r} holds {definition['value_type']} values, not entities"
                ]
            elif claim.value is MISSING:
                problems["value"] = ["This field is required."]
            elif error := _value_error(definition["value_type"], claim.value):
                problems["value"] = [error]
        naive = False
        for name, moment in (("valid_from", claim.valid_from), ("valid_to", claim.valid_to)):
            if moment is not None and moment.tzinfo is None:
                problems[name] = ["must carry a time zone, e.g. 2026-01-31T09:00:00Z"]
                naive = True
        if not naive and claim.valid_from and claim.valid_to and claim.valid_to <= claim.valid_from:
            problems["valid_to"] = ["must be after valid_from"]
        if problems:
            errors[str(index)] = problems
            continue
        payload = {
            "subject_id": subject_id,
            "predicate_id": definition["predicate_id"],
            "valid_from": _iso(claim.valid_from),
            "valid_to": _iso(claim.valid_to),
        }
        if object_id:
            payload["object_entity_id"] = object_id
        else:
            payload["value"] = claim.value
            payload.update(_safety_payload(claim.value))
        plan.asserts.append((claim.provenance, payload))
        plan.locks.add((subject_id, definition["predicate_id"]))

    if errors:
        index, problems = next(iter(errors.items()))
        name, messages = next(iter(problems.items()))
        prefix = f"facts[{index}]." if len(claims) > 1 else ""
        unknown = any("unknown entity" in m for m in messages)
        error_class = Unprocessable if unknown else InvalidInput
        raise error_class(
            f"{prefix}{name}: {messages[0]}",
            code="unknown_entity" if unknown else "invalid",
            details={"facts": errors} if len(claims) > 1 else problems,
        )
    return plan


def _claim_predicate(agent, claim, predicates, plan, problems) -> dict | None:
    name = claim.predicate
    if not isinstance(name, str) or len(name) > 100 or not PREDICATE_NAME.fullmatch(name):
        problems["predicate"] = ["lower-case words joined by '_' or '.', e.g. 'lives_in'"]
        return None
    for key, allowed in (("cardinality", Cardinality.values), ("value_type", ValueType.values)):
        if getattr(claim, key) is not None and getattr(claim, key) not in allowed:
            problems[key] = [f"must be one of {allowed}"]
            return None
    existing = predicates.get(name)
    if existing is not None:
        known = {"cardinality": existing.cardinality, "value_type": existing.value_type}
        where = "redefine it through /api/v1/predicates first"
    elif name in plan.new_predicates:  # declared by an earlier claim of this batch
        known = plan.new_predicates[name][1]
        where = "declare it one way within a batch"
    else:
        known = None
    for key in ("cardinality", "value_type"):
        asked = getattr(claim, key)
        if known is not None and asked is not None and asked != known[key]:
            raise Conflict(
                f"predicate {name!r} is {key} {known[key]!r}, not {asked!r}; {where}",
                code=f"{key}_conflict",
                details={key: [known[key]]},
            )
    if existing is not None:
        return {"predicate_id": str(existing.pk), "value_type": existing.value_type}
    if name not in plan.new_predicates:
        plan.new_predicates[name] = (
            claim.provenance,
            {
                "predicate_id": str(uuid7()),
                "name": name,
                "cardinality": claim.cardinality or Cardinality.ONE,
                "value_type": claim.value_type
                or (ValueType.ENTITY if claim.object_entity is not None else ValueType.ANY),
                "volatility_seconds": None,
                "description": "",
            },
        )
    return plan.new_predicates[name][1]


def _resolve_entities(agent: Agent, refs: Sequence[EntityRef]) -> dict[str, str]:
    """Map each ref (id string or lower-cased name) to an existing entity id."""
    ids = {str(i) for r in refs if (i := _parse_entity_id(r)) is not None}
    names = {r.strip().lower() for r in refs if isinstance(r, str) and _parse_entity_id(r) is None}
    found = {
        str(i): str(i)
        for i in Entity.objects.filter(agent=agent, pk__in=ids).values_list("pk", flat=True)
    }
    if names:
        for alias, entity_id in _alias_lookup(agent, names):
            found[alias.lower()] = str(entity_id)
    return found


def _alias_lookup(agent: Agent, lowered: set[str]) -> list[tuple[str, uuid.UUID]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT alias, entity_id FROM facts_entityalias WHERE agent_id = %s AND lower(alias) = ANY(%s)",
            [agent.pk, list(lowered)],
        )
        return cursor.fetchall()


def _claim_entity(ref, entity_type, provenance, entities, plan, problems, what) -> str | None:
    entity_id = _parse_entity_id(ref)
    if entity_id is not None:
        if str(entity_id) not in entities:
            problems[what] = [f"unknown entity {entity_id}"]
            return None
        return str(entity_id)
    if not isinstance(ref, str) or not ref.strip() or len(ref) > MAX_NAME:
        problems[what] = [f"an entity id or a name of 1-{MAX_NAME} characters"]
        return None
    key = ref.strip().lower()
    if key in entities:
        return entities[key]
    if key not in plan.new_entities:
        name = ref.strip()
        plan.new_entities[key] = (
            provenance,
            {
                "entity_id": str(uuid7()),
                "name": name,
                "entity_type": entity_type or "thing",
                "aliases": [name],
            },
        )
    return plan.new_entities[key][1]["entity_id"]


def _locked_fact(agent: Agent, fact_id: uuid.UUID) -> Fact:
    """The fact, read after locking its subject+predicate, so its state cannot
    change between this check and the write (two retractions of one version)."""
    key = (
        Fact.objects.filter(agent=agent, pk=fact_id)
        .values_list("subject_id", "predicate_id")
        .first()
    )
    if key is None:
        raise NotFound(f"fact {fact_id} not found")
    chain_lock(agent=agent)  # before the pair, as in facts_assert
    p.lock_subject_predicate(agent.pk, *key)
    return Fact.objects.select_related("predicate").get(pk=fact_id)


def _believed_fact(agent: Agent, fact_id: uuid.UUID, *, allow_contested: bool = False) -> Fact:
    fact = _locked_fact(agent, fact_id)
    open_contest = fact.status == FactStatus.CONTESTED and fact.superseded_at is None
    if fact.superseded_at is not None or (
        fact.status == FactStatus.CONTESTED and not allow_contested
    ):
        state = (
            "an open contest" if open_contest else f"{fact.status} (closed at {fact.superseded_at})"
        )
        raise Conflict(
            f"fact {fact_id} is {state}, not a believed version; act on the current version "
            f"(see its chain)",
            code="not_current",
            details={"status": fact.status, "superseded_by": str(fact.superseded_by_id or "")},
        )
    return fact


def fact_retract(
    *, agent: Agent, fact_id: uuid.UUID, reason: str, provenance: Provenance = Provenance()
) -> p.Applied:
    """We no longer believe it: closes its record time. Valid time is untouched,
    so as_known_at for earlier record times still shows it."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(
            "a retraction needs a reason", details={"reason": ["This field is required."]}
        )

    def write():
        fact = _believed_fact(agent, fact_id, allow_contested=True)
        draft = provenance.draft(p.RETRACTED, {"fact_id": str(fact.pk), "reason": reason})
        return _append_and_apply(agent=agent, drafts=[draft])[0]

    return _with_retry(write)


def fact_correct(
    *,
    agent: Agent,
    fact_id: uuid.UUID,
    value: Any = MISSING,
    object_entity: EntityRef | None = None,
    provenance: Provenance = Provenance(),
) -> p.Applied:
    """The record was wrong for its valid period: a new version with the right
    value replaces it over exactly that period. A lower-authority correction is
    stored as contested."""

    def write():
        fact = _believed_fact(agent, fact_id)
        payload: dict[str, Any] = {"fact_id": str(fact.pk)}
        if fact.predicate.value_type == ValueType.ENTITY:
            if object_entity is None or value is not MISSING:
                raise InvalidInput(
                    "this predicate relates entities: send object_entity",
                    details={"object_entity": ["required"]},
                )
            entity_id = _parse_entity_id(object_entity)
            resolved = _resolve_entities(agent, [object_entity]).get(
                str(entity_id) if entity_id else str(object_entity).lower()
            )
            if resolved is None:
                raise Unprocessable(
                    f"unknown entity {object_entity}",
                    code="unknown_entity",
                    details={"object_entity": ["unknown"]},
                )
            payload["object_entity_id"] = resolved
        else:
            if value is MISSING or object_entity is not None:
                raise InvalidInput(
                    "send the corrected value", details={"value": ["This field is required."]}
                )
            if error := _value_error(fact.predicate.value_type, value):
                raise InvalidInput(f"value: {error}", details={"value": [error]})
            payload["value"] = value
            payload.update(_safety_payload(value))
        return _append_and_apply(agent=agent, drafts=[provenance.draft(p.CORRECTED, payload)])[0]

    return _with_retry(write)


def fact_end(
    *, agent: Agent, fact_id: uuid.UUID, valid_to: datetime, provenance: Provenance = Provenance()
) -> p.Applied:
    """It stopped being true at valid_to: a new version with that end replaces it.
    Needs at least the fact's authority (Conflict insufficient_authority)."""

    def write():
        fact = _believed_fact(agent, fact_id)
        if valid_to.tzinfo is None:
            raise InvalidInput("valid_to must carry a time zone", details={"valid_to": ["naive"]})
        if valid_to <= fact.valid_from or (fact.valid_to is not None and valid_to >= fact.valid_to):
            raise InvalidInput(
                f"valid_to must fall inside the fact's valid period [{fact.valid_from}, {fact.valid_to or 'open'})",
                details={"valid_to": ["outside the valid period"]},
            )
        authority = provenance.authority or _default_authority(provenance)
        order = p.authority_order_for(agent.pk)
        if authority_rank(authority, order) < authority_rank(fact.authority, order):
            raise Conflict(
                f"{_a(authority)} claim cannot end {_a(fact.authority)} fact; a contest needs a value "
                "(assert one) or an operator",
                code="insufficient_authority",
                details={"authority": [authority], "fact_authority": [fact.authority]},
            )
        draft = provenance.draft(
            p.ENDED, {"fact_id": str(fact.pk), "valid_to": valid_to.isoformat()}
        )
        return _append_and_apply(agent=agent, drafts=[draft])[0]

    return _with_retry(write)


def _default_authority(provenance: Provenance) -> str:
    from piper.provenance import DEFAULT_AUTHORITY_FOR_SOURCE

    return DEFAULT_AUTHORITY_FOR_SOURCE[provenance.source_type]


def contest_resolve(
    *, agent: Agent, fact_id: uuid.UUID, accept: bool, actor: str = "operator"
) -> p.Applied:
    """An operator settles an open contest: accept puts the contested claim in
    force (vouched for with operator authority); reject closes it."""

    def write():
        fact = _locked_fact(agent, fact_id)
        if fact.status != FactStatus.CONTESTED or fact.superseded_at is not None:
            raise Conflict(f"fact {fact_id} is not an open contest", code="not_contested")
        provenance = Provenance(source_type=SourceType.OPERATOR, actor=actor)
        draft = provenance.draft(
            p.CONTEST_RESOLVED, {"fact_id": str(fact.pk), "accept": bool(accept)}
        )
        return _append_and_apply(agent=agent, drafts=[draft])[0]

    return _with_retry(write)


def rebuild_projection(*, agent: Agent | None = None) -> int:
    """Drop the facts projection (one agent's, or all) and replay the ledger in
    chain order, then re-render the fact texts. Erased events are skipped, and
    so is an event acting on a version only an erased event made. Returns the
    number of events applied."""
    events = Event.objects.filter(
        event_type__in=list(p.HANDLERS), redacted_at__isnull=True
    ).order_by("agent_id", "seq")
    if agent is not None:
        events = events.filter(agent=agent)
    with transaction.atomic():
        applied = p.rebuild(
            events=events.iterator(chunk_size=2000), agent_id=agent.pk if agent else None
        )
        # The fact texts are kept (same pair ids after a replay) and re-rendered;
        # only a text that changed loses its embedding (queued after commit).
        from .fact_texts import fact_texts_refresh

        agents = [agent.pk] if agent else Agent.objects.order_by("pk").values_list("pk", flat=True)
        for agent_id in agents:
            fact_texts_refresh(agent_id=agent_id)
        return applied
