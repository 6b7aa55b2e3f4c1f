"""Helpers shared by the facts API, admin and command tests: exact expected bodies
built from the rows themselves, and a snapshot of everything a write could touch."""

from __future__ import annotations

from datetime import UTC, datetime

from conftest import AgentClient
from facts.models import AuthorityPolicy, Entity, EntityAlias, Fact, FactEvidence, Predicate
from ledger.tests.helpers import ledger_state
from piper.tenancy.models import Scope
from piper.tenancy.services import api_key_create


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class _Age:
    """age_seconds is measured when the response is made: whole seconds, and a test is quick."""

    def __eq__(self, other):
        return isinstance(other, int) and not isinstance(other, bool) and 0 <= other <= 60

    def __repr__(self):
        return "<whole seconds, 0-60>"


AGE = _Age()


def ref(entity: Entity | None) -> dict | None:
    return None if entity is None else {"id": str(entity.pk), "name": entity.name}


def fact_body(fact_id, *, age=AGE, needs_recheck: bool = False) -> dict:
    """The API's representation of a stored fact version, built from the rows themselves."""
    fact = Fact.objects.select_related("subject", "predicate", "object_entity", "source_event").get(
        pk=fact_id
    )
    event = fact.source_event
    open_contests = Fact.objects.filter(
        contests=fact, status="contested", superseded_at__isnull=True
    ).order_by("recorded_at", "id")
    return {
        "id": str(fact.pk),
        "subject": ref(fact.subject),
        "predicate": fact.predicate.name,
        "value": fact.object_value,
        "object_entity": ref(fact.object_entity),
        "memory_status": {
            "source": {
                "event_id": str(event.pk),
                "source_type": event.source_type,
                "source_ref": event.source_ref,
                "actor": event.actor,
                "session_id": event.session_id,
            },
            "authority": fact.authority,
            "confidence": fact.confidence,
            "valid_from": iso(fact.valid_from),
            "valid_to": iso(fact.valid_to),
            "recorded_at": iso(fact.recorded_at),
            "superseded_at": iso(fact.superseded_at),
            "last_confirmed_at": iso(fact.last_confirmed_at),
            "age_seconds": age,
            "needs_recheck": needs_recheck,
            "status": fact.status,
            "origin": fact.origin,
            "supersedes": str(fact.supersedes_id) if fact.supersedes_id else None,
            "superseded_by": str(fact.superseded_by_id) if fact.superseded_by_id else None,
            "contests": str(fact.contests_id) if fact.contests_id else None,
            "contested_by": [str(c.pk) for c in open_contests],
            "instruction_like": fact.instruction_like,
        },
    }


def entity_body(entity: Entity) -> dict:
    return {
        "id": str(entity.pk),
        "name": entity.name,
        "entity_type": entity.entity_type,
        "aliases": sorted(entity.aliases.values_list("alias", flat=True), key=str.lower),
        "created_at": iso(entity.created_at),
        "source_event_id": str(entity.source_event_id),
    }


def predicate_body(predicate: Predicate) -> dict:
    predicate.refresh_from_db()
    return {
        "id": str(predicate.pk),
        "name": predicate.name,
        "cardinality": predicate.cardinality,
        "value_type": predicate.value_type,
        "volatility_seconds": predicate.volatility_seconds,
        "description": predicate.description,
        "aliases": predicate.aliases,
        "examples": predicate.examples,
        "created_at": iso(predicate.created_at),
        "source_event_id": str(predicate.source_event_id),
    }


def facts_state() -> dict:
    """Everything a facts write could touch. Bad-input tests assert it did not change."""
    return {
        **ledger_state(),
        "entities": sorted(Entity.objects.values_list("pk", "name", "entity_type")),
        "aliases": sorted(EntityAlias.objects.values_list("pk", "alias", "entity_id")),
        "predicates": sorted(
            Predicate.objects.values_list(
                "pk", "cardinality", "value_type", "volatility_seconds", "description"
            )
        ),
        "facts": sorted(
            Fact.objects.values_list(
                "pk", "status", "superseded_at", "superseded_by_id", "contests_id", "valid_to"
            ),
            key=str,
        ),
        "evidence": sorted(FactEvidence.objects.values_list("fact_id", "event_id")),
        "policies": sorted(AuthorityPolicy.objects.values_list("agent_id", "order")),
    }


def post(client, path: str, body, **extra):
    return client.post(path, body, format="json", **extra)


def put(client, path: str, body, **extra):
    return client.put(path, body, format="json", **extra)


def claim(client, **body) -> dict:
    """POST /facts with one claim; the answer's JSON."""
    response = post(client, "/api/v1/facts", body)
    assert response.status_code in (200, 201), response.json()
    return response.json()


def ok(response) -> dict:
    assert response.status_code == 200, response.json()
    return response.json()


def entity_named(name: str, agent=None) -> Entity:
    qs = EntityAlias.objects.filter(alias__iexact=name)
    if agent is not None:
        qs = qs.filter(agent=agent)
    return qs.get().entity


def admin_key_for(client: AgentClient) -> AgentClient:
    api_key, raw = api_key_create(
        agent=client.agent, name="ops", scopes=[Scope.READ, Scope.WRITE, Scope.ADMIN]
    )
    return AgentClient(client.agent, raw, api_key)
