"""Changing a believed version: retraction, correction, an end to its valid time,
and an operator settling a contest. Each locks the version's pair first."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from ledger.services import chain_lock
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.provenance import SourceType, authority_rank
from piper.tenancy.models import Agent

from .. import projection as p
from ..models import (
    Fact,
    FactStatus,
    ValueType,
)
from .common import (
    MISSING,
    EntityRef,
    Provenance,
    a_or_an,
    append_and_apply,
    run_facts_write,
    safety_payload,
)
from .entities import parse_entity_id, resolve_entities
from .predicates import value_error


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
        return append_and_apply(agent=agent, drafts=[draft])[0]

    return run_facts_write(write)


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
            entity_id = parse_entity_id(object_entity)
            resolved = resolve_entities(agent, [object_entity]).get(
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
            if error := value_error(fact.predicate.value_type, value):
                raise InvalidInput(f"value: {error}", details={"value": [error]})
            payload["value"] = value
            payload.update(safety_payload(value))
        return append_and_apply(agent=agent, drafts=[provenance.draft(p.CORRECTED, payload)])[0]

    return run_facts_write(write)


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
                f"{a_or_an(authority)} claim cannot end {a_or_an(fact.authority)} fact; a contest needs a value "
                "(assert one) or an operator",
                code="insufficient_authority",
                details={"authority": [authority], "fact_authority": [fact.authority]},
            )
        draft = provenance.draft(
            p.ENDED, {"fact_id": str(fact.pk), "valid_to": valid_to.isoformat()}
        )
        return append_and_apply(agent=agent, drafts=[draft])[0]

    return run_facts_write(write)


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
        return append_and_apply(agent=agent, drafts=[draft])[0]

    return run_facts_write(write)
