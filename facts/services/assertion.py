"""Asserting facts: a batch validated completely into a plan (the entities and
predicates it names first), then its events appended and applied at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger.services import chain_lock
from piper.errors import Conflict, InvalidInput, Unprocessable
from piper.ids import uuid7
from piper.tenancy.models import Agent

from .. import projection as p
from ..models import (
    Cardinality,
    Predicate,
    ValueType,
)
from .common import (
    MAX_BATCH,
    MAX_NAME,
    MISSING,
    EntityRef,
    Provenance,
    append_and_apply,
    run_facts_write,
    safety_payload,
)
from .entities import parse_entity_id, resolve_entities
from .predicates import PREDICATE_NAME, value_error


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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


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
        # The agent's chain first, then the pairs (as every facts writer): run
        # again after a lost race inside a caller's transaction, a write still
        # holds the chain, and writers queued on it stay queued until it commits
        # — had one of them taken a pair the rerun needs, that was a deadlock.
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
        return append_and_apply(agent=agent, drafts=drafts, preload=starts)[first_assert:]

    return run_facts_write(write)


def fact_assert(*, agent: Agent, claim: ClaimInput) -> p.Applied:
    return facts_assert(agent=agent, claims=[claim])[0]


def _plan(agent: Agent, claims: Sequence[ClaimInput]) -> _Plan:
    plan = _Plan()
    errors: dict[str, dict[str, list[str]]] = {}
    names = {c.predicate for c in claims if isinstance(c.predicate, str)}
    predicates = {pr.name: pr for pr in Predicate.objects.filter(agent=agent, name__in=names)}
    refs = [r for c in claims for r in (c.subject, c.object_entity) if r is not None]
    entities = resolve_entities(agent, refs)

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
            elif error := value_error(definition["value_type"], claim.value):
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
            payload.update(safety_payload(claim.value))
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


def _claim_entity(ref, entity_type, provenance, entities, plan, problems, what) -> str | None:
    entity_id = parse_entity_id(ref)
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
