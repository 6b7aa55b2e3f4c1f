"""Entities and their names (aliases), each name naming one entity of an agent."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction

from piper.errors import Conflict, InvalidInput, NotFound
from piper.ids import uuid7
from piper.tenancy.models import Agent

from .. import projection as p
from ..models import (
    Entity,
    EntityAlias,
)
from ..selectors import alias_lookup
from .common import MAX_NAME, EntityRef, Provenance, append_and_apply


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
        return append_and_apply(agent=agent, drafts=[draft])[0].obj


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
        return append_and_apply(agent=agent, drafts=[draft])[0].obj


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


def parse_entity_id(ref: EntityRef) -> uuid.UUID | None:
    if isinstance(ref, uuid.UUID):
        return ref
    try:
        return uuid.UUID(ref)
    except (ValueError, AttributeError, TypeError):
        return None


def resolve_entities(agent: Agent, refs: Sequence[EntityRef]) -> dict[str, str]:
    """Map each ref (id string or lower-cased name) to an existing entity id."""
    ids = {str(i) for r in refs if (i := parse_entity_id(r)) is not None}
    names = {r.strip().lower() for r in refs if isinstance(r, str) and parse_entity_id(r) is None}
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
