"""The facts API: entities, predicates, authority order, fact writes, the four
query modes, the contest queue and graph paths — through HTTP, with exact bodies."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conftest import AgentClient, make_client
from facts.models import Entity, Fact, FactEvidence, Predicate
from facts.tests.api_helpers import (
    AGE,
    admin_key_for,
    at,
    claim,
    entity_body,
    entity_named,
    fact_body,
    facts_state,
    iso,
    ok,
    post,
    predicate_body,
    put,
    ref,
)
from ledger.models import Event
from ledger.tests.helpers import error
from piper.provenance import AUTHORITY_ORDER
from piper.tenancy.models import Scope

pytestmark = pytest.mark.django_db

DATETIME_RULE = (
    "Datetime has wrong format. Use one of these formats instead: "
    "YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z]."
)
NAIVE_RULE = "must carry a time zone, e.g. 2026-01-31T09:00:00Z"
PREDICATE_RULE = "lower-case words joined by '_' or '.', e.g. 'lives_in'"
CLAIM_FIELDS = (
    "actor, authority, cardinality, confidence, object_entity, object_type, predicate, "
    "privacy_class, retention_class, session_id, source_ref, source_type, subject, "
    "subject_type, valid_from, valid_to, value, value_type"
)
T2020 = "2020-01-01T00:00:00Z"
T2021 = "2021-01-01T00:00:00Z"
T2022 = "2022-01-01T00:00:00Z"
T2024 = "2024-01-01T00:00:00Z"


@pytest.fixture
def admin_a(client_a) -> AgentClient:
    return admin_key_for(client_a)


# ------------------------------------------------------------------------ entities


class TestEntities:
    def test_create_every_field(self, client_a):
        response = post(
            client_a,
            "/api/v1/entities",
            {"name": "Alice Smith", "entity_type": "person", "aliases": ["alice", "A. Smith"]},
        )
        assert response.status_code == 201
        entity = Entity.objects.get(pk=response.json()["id"])
        event = Event.objects.get(agent=client_a.agent, seq=1)
        assert response.json() == {
            "id": str(entity.pk),
            "name": "Alice Smith",
            "entity_type": "person",
            "aliases": ["A. Smith", "alice", "Alice Smith"],
            "created_at": iso(event.recorded_at),
            "source_event_id": str(event.pk),
        }
        assert (entity.agent, event.event_type) == (client_a.agent, "facts.entity_created")
        assert Event.objects.filter(agent=client_a.agent).count() == 1

    def test_defaults(self, client_a):
        response = post(client_a, "/api/v1/entities", {"name": "Rome"})
        assert response.status_code == 201
        entity = Entity.objects.get(pk=response.json()["id"])
        assert response.json() == entity_body(entity)
        assert (response.json()["entity_type"], response.json()["aliases"]) == ("thing", ["Rome"])

    def test_a_taken_name_is_a_conflict(self, client_a):
        post(client_a, "/api/v1/entities", {"name": "Alice"})
        before = facts_state()
        response = post(client_a, "/api/v1/entities", {"name": "Bob", "aliases": ["ALICE"]})
        assert response.status_code == 409
        assert response.json() == error(
            "alias_taken", "'Alice' already names another entity", {"aliases": ["Alice"]}
        )
        assert facts_state() == before

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "name", "This field is required."),
            ({"name": ""}, "name", "This field may not be blank."),
            ({"name": 5}, "name", "Not a valid string."),
            ({"name": "x" * 301}, "name", "Ensure this field has no more than 300 characters."),
            (
                {"name": "x", "aliases": "y"},
                "aliases",
                'Expected a list of items but got type "str".',
            ),
            (
                {"name": "x", "colour": "red"},
                "colour",
                "unknown field; allowed: aliases, entity_type, name",
            ),
        ],
    )
    def test_bad_input(self, client_a, body, field, message):
        before = facts_state()
        response = post(client_a, "/api/v1/entities", body)
        assert response.status_code == 400
        assert response.json() == error("invalid", f"{field}: {message}", {field: [message]})
        assert facts_state() == before

    def test_list_is_cursor_paginated_newest_first(self, client_a):
        ids = [
            post(client_a, "/api/v1/entities", {"name": n}).json()["id"] for n in ("a", "b", "c")
        ]
        first = ok(client_a.get("/api/v1/entities", {"limit": 2}))
        assert [e["id"] for e in first["results"]] == [ids[2], ids[1]]
        assert first["results"][0] == entity_body(Entity.objects.get(pk=ids[2]))
        assert first["previous"] is None
        second = ok(client_a.get(first["next"]))
        assert ([e["id"] for e in second["results"]], second["next"]) == ([ids[0]], None)

    def test_list_refuses_a_forged_cursor_and_unknown_parameters(self, client_a):
        response = client_a.get("/api/v1/entities", {"cursor": "forged"})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_cursor"
        response = client_a.get("/api/v1/entities", {"name": "x"})
        assert response.json() == error(
            "invalid",
            "name: unknown field; allowed: cursor, limit",
            {"name": ["unknown field; allowed: cursor, limit"]},
        )

    def test_get_one(self, client_a):
        created = post(client_a, "/api/v1/entities", {"name": "Alice", "aliases": ["Al"]}).json()
        assert ok(client_a.get(f"/api/v1/entities/{created['id']}")) == created

    def test_get_unknown(self, client_a):
        missing = uuid.uuid4()
        response = client_a.get(f"/api/v1/entities/{missing}")
        assert response.status_code == 404
        assert response.json() == error("not_found", f"entity {missing} not found")

    def test_add_alias_new_then_known_then_taken(self, client_a):
        alice = post(client_a, "/api/v1/entities", {"name": "Alice"}).json()
        bob = post(client_a, "/api/v1/entities", {"name": "Bob"}).json()
        url = f"/api/v1/entities/{alice['id']}/aliases"

        response = post(client_a, url, {"alias": "Ali"})
        assert response.status_code == 201
        assert response.json() == {**alice, "aliases": ["Ali", "Alice"]}
        event = Event.objects.filter(agent=client_a.agent).latest("seq")
        assert (event.event_type, event.payload) == (
            "facts.alias_added",
            {"entity_id": alice["id"], "alias": "Ali"},
        )

        before = facts_state()
        for same in ("Ali", "ALI"):
            again = post(client_a, url, {"alias": same})
            assert (again.status_code, again.json()) == (200, response.json())
        assert facts_state() == before

        taken = post(client_a, url, {"alias": "bob"})
        assert taken.status_code == 409
        assert taken.json() == error(
            "alias_taken",
            f"'bob' already names another entity ({bob['id']})",
            {"alias": [f"taken by {bob['id']}"]},
        )
        assert facts_state() == before

    def test_add_alias_bad_input_and_unknown_entity(self, client_a):
        alice = post(client_a, "/api/v1/entities", {"name": "Alice"}).json()
        before = facts_state()
        response = post(client_a, f"/api/v1/entities/{alice['id']}/aliases", {"alias": 7})
        assert response.json() == error(
            "invalid", "alias: Not a valid string.", {"alias": ["Not a valid string."]}
        )
        missing = uuid.uuid4()
        response = post(client_a, f"/api/v1/entities/{missing}/aliases", {"alias": "x"})
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", f"entity {missing} not found"),
        )
        assert facts_state() == before


class TestEntitySearch:
    @pytest.fixture
    def people(self, client_a):
        return {
            name: post(
                client_a, "/api/v1/entities", {"name": name, "entity_type": "person"}
            ).json()["id"]
            for name in ("Alice Smith", "Alice Smithers", "Bob")
        }

    @staticmethod
    def similarity(a: str, b: str) -> float:
        with connection.cursor() as cursor:
            cursor.execute("SELECT similarity(lower(%s), lower(%s))", [a, b])
            return round(float(cursor.fetchone()[0]), 4)

    def test_fuzzy_best_first_with_similarity(self, client_a, people):
        body = ok(client_a.get("/api/v1/entities/search", {"q": "alice smit"}))
        assert body == {
            "results": [
                {
                    "entity": {"id": people[name], "name": name, "entity_type": "person"},
                    "alias": name,
                    "similarity": self.similarity(name, "alice smit"),
                }
                for name in ("Alice Smith", "Alice Smithers")
            ]
        }
        assert 1 > body["results"][0]["similarity"] > body["results"][1]["similarity"]

    def test_exact_name_first_and_limit(self, client_a, people):
        alias = post(client_a, f"/api/v1/entities/{people['Bob']}/aliases", {"alias": "Alicia"})
        assert alias.status_code == 201
        body = ok(client_a.get("/api/v1/entities/search", {"q": "ALICIA", "limit": 1}))
        assert [(r["entity"]["name"], r["alias"]) for r in body["results"]] == [("Bob", "Alicia")]
        assert body["results"][0]["similarity"] == 1.0

    def test_no_match(self, client_a, people):
        assert ok(client_a.get("/api/v1/entities/search", {"q": "zzzz"})) == {"results": []}

    @pytest.mark.parametrize("q", ["%", "_", "%ob"])
    def test_wildcards_are_literal(self, client_a, people, q):
        assert ok(client_a.get("/api/v1/entities/search", {"q": q})) == {"results": []}

    @pytest.mark.parametrize(
        ("params", "field", "message"),
        [
            ({}, "q", "This field is required."),
            ({"q": ""}, "q", "This field may not be blank."),
            ({"q": "a", "limit": 0}, "limit", "Ensure this value is greater than or equal to 1."),
            ({"q": "a", "limit": "x"}, "limit", "A valid integer is required."),
        ],
    )
    def test_bad_query(self, client_a, params, field, message):
        response = client_a.get("/api/v1/entities/search", params)
        assert (response.status_code, response.json()) == (
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
        )


# ---------------------------------------------------------------------- predicates


class TestPredicates:
    def test_define_get_redefine(self, client_a):
        body = {
            "cardinality": "one",
            "value_type": "string",
            "volatility_seconds": 86400,
            "description": "city of residence",
        }
        created = put(client_a, "/api/v1/predicates/lives_in", body)
        assert created.status_code == 201
        predicate = Predicate.objects.get(agent=client_a.agent, name="lives_in")
        assert created.json() == predicate_body(predicate)
        assert {k: created.json()[k] for k in body} == body
        assert ok(client_a.get("/api/v1/predicates/lives_in")) == created.json()

        before = facts_state()
        same = put(client_a, "/api/v1/predicates/lives_in", body)
        assert (same.status_code, same.json()) == (200, created.json())
        assert facts_state() == before  # an unchanged definition writes nothing

        changed = put(client_a, "/api/v1/predicates/lives_in", {"description": "home city"})
        assert changed.status_code == 200
        assert changed.json() == {**created.json(), "description": "home city"}
        assert (
            Event.objects.filter(agent=client_a.agent, event_type="facts.predicate_defined").count()
            == 2
        )

    def test_aliases_are_declared_replaced_and_cleared(self, client_a):
        created = put(
            client_a, "/api/v1/predicates/deadline", {"aliases": ["Due", "due  by", "due"]}
        )
        assert (created.status_code, created.json()["aliases"]) == (201, ["due", "due by"])
        before = facts_state()
        same = put(client_a, "/api/v1/predicates/deadline", {"aliases": ["due", "due by"]})
        assert (same.status_code, same.json()) == (200, created.json())
        assert facts_state() == before  # the same aliases again write nothing
        kept = put(client_a, "/api/v1/predicates/deadline", {"description": "when it is due"})
        assert kept.json()["aliases"] == ["due", "due by"]  # left out: kept
        cleared = put(client_a, "/api/v1/predicates/deadline", {"aliases": []})
        assert cleared.json()["aliases"] == []

    @pytest.mark.parametrize(
        ("aliases", "field"),
        [
            ("due", "aliases"),
            (["x" * 101], "aliases.0"),
            (["due"] * 21, "aliases"),
            ([""], "aliases.0"),
            ([7], "aliases.0"),
        ],
    )
    def test_bad_aliases_are_refused_and_write_nothing(self, client_a, aliases, field):
        before = facts_state()
        response = put(client_a, "/api/v1/predicates/deadline", {"aliases": aliases})
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["code"] == "invalid"
        assert response.json()["error"]["message"].startswith(field.split(".")[0])
        assert facts_state() == before

    def test_example_questions_are_declared_replaced_and_cleared(self, client_a):
        asked = ["How far along is it?", "  What stage is it at? ", "How far along is it?"]
        created = put(client_a, "/api/v1/predicates/progress", {"examples": asked})
        assert (created.status_code, created.json()["examples"]) == (
            201,
            ["How far along is it?", "What stage is it at?"],
        )
        before = facts_state()
        same = put(client_a, "/api/v1/predicates/progress", {"examples": asked[:2]})
        assert (same.status_code, same.json()) == (200, created.json())
        assert facts_state() == before  # the same examples again write nothing
        kept = put(client_a, "/api/v1/predicates/progress", {"aliases": ["stage"]})
        assert kept.json()["examples"] == ["How far along is it?", "What stage is it at?"]
        cleared = put(client_a, "/api/v1/predicates/progress", {"examples": []})
        assert cleared.json()["examples"] == []

    @pytest.mark.parametrize(
        ("examples", "field"),
        [
            ("How far along is it?", "examples"),
            (["x" * 201], "examples.0"),
            (["Where is it?"] * 11, "examples"),
            ([" "], "examples"),
            ([7], "examples.0"),
        ],
    )
    def test_bad_examples_are_refused_and_write_nothing(self, client_a, examples, field):
        before = facts_state()
        response = put(client_a, "/api/v1/predicates/progress", {"examples": examples})
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["code"] == "invalid"
        assert response.json()["error"]["message"].startswith(field.split(".")[0])
        assert facts_state() == before

    def test_defaults_and_list_by_name(self, client_a):
        for name in ("works_for", "age"):
            assert put(client_a, f"/api/v1/predicates/{name}", {}).status_code == 201
        body = ok(client_a.get("/api/v1/predicates"))
        assert body == {
            "next": None,
            "previous": None,
            "results": [
                predicate_body(Predicate.objects.get(agent=client_a.agent, name=name))
                for name in ("age", "works_for")
            ],
        }
        assert [(p["cardinality"], p["value_type"]) for p in body["results"]] == [
            ("one", "any"),
            ("one", "any"),
        ]

    def test_unknown(self, client_a):
        response = client_a.get("/api/v1/predicates/nope")
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", "no predicate named 'nope'"),
        )

    def test_cardinality_change_that_would_break_data(self, client_a):
        put(client_a, "/api/v1/predicates/tags", {"cardinality": "many"})
        claim(client_a, subject="Alice", predicate="tags", value="a")
        claim(client_a, subject="Alice", predicate="tags", value="b")
        alice = entity_named("Alice")
        before = facts_state()
        response = put(client_a, "/api/v1/predicates/tags", {"cardinality": "one"})
        assert response.status_code == 409
        assert response.json() == error(
            "cardinality_conflict",
            "predicate 'tags' cannot become single-valued: some subjects hold several values at "
            "the same time; end or retract the extra values first",
            {"subjects": [str(alice.pk)]},
        )
        assert facts_state() == before

    def test_value_type_change_that_would_break_data(self, client_a):
        claim(client_a, subject="Alice", predicate="age", value="old")
        before = facts_state()
        response = put(client_a, "/api/v1/predicates/age", {"value_type": "integer"})
        assert response.status_code == 409
        assert response.json() == error(
            "value_type_conflict",
            "predicate 'age' has believed values that are not of type 'integer'",
            {"value_type": ["integer"]},
        )
        assert facts_state() == before

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({"cardinality": "two"}, "cardinality", '"two" is not a valid choice.'),
            ({"value_type": "colour"}, "value_type", '"colour" is not a valid choice.'),
            ({"volatility_seconds": "60"}, "volatility_seconds", "A valid integer is required."),
            ({"volatility_seconds": 60.0}, "volatility_seconds", "A valid integer is required."),
            ({"volatility_seconds": True}, "volatility_seconds", "A valid integer is required."),
            (
                {"volatility_seconds": 0},
                "volatility_seconds",
                "Ensure this value is greater than or equal to 1.",
            ),
            (
                # Found by scripts/fuzz_api.py: beyond a bigint it was a 500.
                {"volatility_seconds": 2**63},
                "volatility_seconds",
                "Ensure this value is less than or equal to 3153600000.",
            ),
            ({"description": 5}, "description", "Not a valid string."),
            (
                {"name": "x"},
                "name",
                "unknown field; allowed: aliases, cardinality, description, examples, value_type, "
                "volatility_seconds",
            ),
        ],
    )
    def test_bad_input(self, client_a, body, field, message):
        before = facts_state()
        response = put(client_a, "/api/v1/predicates/lives_in", body)
        assert (response.status_code, response.json()) == (
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
        )
        assert facts_state() == before

    def test_bad_name(self, client_a):
        before = facts_state()
        response = put(client_a, "/api/v1/predicates/Lives-In", {})
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            "predicate names are lower-case words joined by '_' or '.', e.g. 'lives_in'",
            {"predicate": ["invalid format"]},
        )
        assert facts_state() == before


class TestAuthorityOrder:
    def test_default(self, client_a):
        assert ok(client_a.get("/api/v1/facts/authority-order")) == {
            "order": list(AUTHORITY_ORDER),
            "admit_from": "",
        }

    def test_set_and_it_decides_later_claims(self, client_a):
        claim(
            client_a, subject="Alice", predicate="email", value="a@x", source_type="user_statement"
        )
        contested = claim(
            client_a, subject="Alice", predicate="email", value="b@x", source_type="tool_result"
        )
        assert contested["outcome"] == "contested"

        response = put(
            client_a, "/api/v1/facts/authority-order", {"order": ["tool_result", "user_statement"]}
        )
        expected = {
            "order": [
                "tool_result",
                "user_statement",
                "operator",
                "system_observation",
                "agent_inference",
                "third_party",
            ],
            "admit_from": "",
        }
        assert (response.status_code, response.json()) == (200, expected)
        assert ok(client_a.get("/api/v1/facts/authority-order")) == expected
        event = Event.objects.filter(agent=client_a.agent).latest("seq")
        assert (event.event_type, event.payload) == (
            "facts.authority_order_set",
            {"order": ["tool_result", "user_statement"]},
        )

        wins = claim(
            client_a, subject="Alice", predicate="email", value="c@x", source_type="tool_result"
        )
        assert wins["outcome"] == "created"
        current = ok(client_a.get("/api/v1/facts/current", {"subject": "Alice"}))
        assert [f["value"] for f in current["facts"]] == ["c@x"]

    @pytest.mark.parametrize(
        ("body", "message", "details"),
        [
            (
                {"order": ["god"]},
                'order[0]: "god" is not a valid choice.',
                {"order": {"0": ['"god" is not a valid choice.']}},
            ),
            ({"order": []}, "order: This list may not be empty.", None),
            ({}, "order: This field is required.", None),
            (
                {"order": ["operator", "operator"]},
                f"order must list distinct authority levels from {list(AUTHORITY_ORDER)}",
                {"order": ["empty or repeated"]},
            ),
        ],
    )
    def test_bad_input(self, client_a, body, message, details):
        before = facts_state()
        response = put(client_a, "/api/v1/facts/authority-order", body)
        assert response.status_code == 400
        if details is None:
            field, text = message.split(": ", 1)
            details = {field: [text]}
        assert response.json() == error("invalid", message, details)
        assert facts_state() == before


# --------------------------------------------------------------------- fact writes


class TestAssert:
    def test_one_claim_every_field(self, client_a):
        body = {
            "subject": "Alice",
            "predicate": "lives_in",
            "value": "Paris",
            "valid_from": "2020-01-01T01:00:00+01:00",
            "valid_to": "2030-01-01T00:00:00Z",
            "cardinality": "one",
            "value_type": "string",
            "subject_type": "person",
            "source_type": "user_statement",
            "source_ref": "chat-17",
            "authority": "user_statement",
            "confidence": 0.9,
            "actor": "alice",
            "session_id": "s-1",
        }
        response = post(client_a, "/api/v1/facts", body)
        assert response.status_code == 201
        fact = Fact.objects.get(pk=response.json()["fact"]["id"])
        assert response.json() == {
            "outcome": "created",
            "fact": fact_body(fact.pk),
            "superseded": [],
            "resolved_contests": [],
        }
        alice = entity_named("Alice")
        event = fact.source_event
        assert response.json()["fact"] == {
            "id": str(fact.pk),
            "subject": {"id": str(alice.pk), "name": "Alice"},
            "predicate": "lives_in",
            "value": "Paris",
            "object_entity": None,
            "memory_status": {
                "source": {
                    "event_id": str(event.pk),
                    "source_type": "user_statement",
                    "source_ref": "chat-17",
                    "actor": "alice",
                    "session_id": "s-1",
                },
                "authority": "user_statement",
                "confidence": 0.9,
                "valid_from": "2020-01-01T00:00:00Z",
                "valid_to": "2030-01-01T00:00:00Z",
                "recorded_at": iso(event.recorded_at),
                "superseded_at": None,
                "last_confirmed_at": iso(event.recorded_at),
                "age_seconds": AGE,
                "needs_recheck": False,
                "status": "active",
                "origin": "asserted",
                "supersedes": None,
                "superseded_by": None,
                "contests": None,
                "contested_by": [],
                "instruction_like": False,
            },
        }
        assert alice.entity_type == "person"
        predicate = Predicate.objects.get(agent=client_a.agent, name="lives_in")
        assert (predicate.cardinality, predicate.value_type) == ("one", "string")
        assert list(
            Event.objects.filter(agent=client_a.agent).order_by("seq").values_list("event_type")
        ) == [("facts.entity_created",), ("facts.predicate_defined",), ("facts.asserted",)]

    def test_defaults(self, client_a):
        body = claim(client_a, subject="Alice", predicate="mood", value={"level": 3})
        fact = Fact.objects.get(pk=body["fact"]["id"])
        status = body["fact"]["memory_status"]
        assert body["fact"]["value"] == {"level": 3}
        assert (status["valid_from"], status["valid_to"]) == (iso(fact.recorded_at), None)
        assert (status["authority"], status["confidence"], status["source"]["source_type"]) == (
            "agent_inference",
            1.0,
            "agent_inference",
        )
        predicate = Predicate.objects.get(agent=client_a.agent, name="mood")
        assert (predicate.cardinality, predicate.value_type) == ("one", "any")

    def test_relation_by_names_creates_the_entities(self, client_a):
        body = claim(
            client_a,
            subject="Alice",
            predicate="works_for",
            object_entity="Acme",
            object_type="company",
            valid_from=T2020,
        )
        acme = entity_named("Acme")
        assert acme.entity_type == "company"
        assert body["fact"] == fact_body(body["fact"]["id"])
        assert (body["fact"]["value"], body["fact"]["object_entity"]) == (None, ref(acme))
        assert Predicate.objects.get(name="works_for").value_type == "entity"

        by_id = claim(
            client_a,
            subject=str(entity_named("Alice").pk),
            predicate="works_for",
            object_entity=str(acme.pk),
            valid_from=T2020,
        )
        assert (by_id["outcome"], by_id["fact"]["id"]) == ("confirmed", body["fact"]["id"])

    def test_the_same_value_again_confirms(self, client_a):
        first = claim(
            client_a, subject="Alice", predicate="lives_in", value="Paris", valid_from=T2020
        )
        response = post(
            client_a,
            "/api/v1/facts",
            {"subject": "alice", "predicate": "lives_in", "value": "Paris", "valid_from": T2021},
        )
        assert response.status_code == 200
        assert response.json() == {
            "outcome": "confirmed",
            "fact": fact_body(first["fact"]["id"]),
            "superseded": [],
            "resolved_contests": [],
        }
        assert Fact.objects.count() == 1
        assert FactEvidence.objects.filter(fact_id=first["fact"]["id"]).count() == 2

    def test_a_new_value_supersedes_and_splits(self, client_a):
        paris = claim(
            client_a, subject="Alice", predicate="lives_in", value="Paris", valid_from=T2020
        )
        rome = claim(
            client_a, subject="Alice", predicate="lives_in", value="Rome", valid_from=T2022
        )
        paris_id = paris["fact"]["id"]
        assert rome == {
            "outcome": "created",
            "fact": fact_body(rome["fact"]["id"]),
            "superseded": [paris_id],
            "resolved_contests": [],
        }
        assert rome["fact"]["memory_status"]["supersedes"] == paris_id
        old = Fact.objects.get(pk=paris_id)
        assert (old.status, str(old.superseded_by_id)) == ("superseded", rome["fact"]["id"])
        split = Fact.objects.get(supersedes_id=paris_id, origin="split")
        assert (split.object_value, iso(split.valid_from), iso(split.valid_to)) == (
            "Paris",
            T2020,
            T2022,
        )
        current = ok(client_a.get("/api/v1/facts/current", {"subject": "Alice"}))
        assert [f["value"] for f in current["facts"]] == ["Rome"]
        then = ok(
            client_a.get(
                "/api/v1/facts/as-of",
                {"subject": "Alice", "predicate": "lives_in", "valid_time": T2021},
            )
        )
        assert then["facts"] == [fact_body(split.pk)]

    def test_late_evidence_lands_in_its_interval(self, client_a):
        rome = claim(
            client_a, subject="Alice", predicate="lives_in", value="Rome", valid_from=T2022
        )
        paris = claim(
            client_a, subject="Alice", predicate="lives_in", value="Paris", valid_from=T2020
        )
        assert (paris["outcome"], paris["superseded"]) == ("created", [])
        status = paris["fact"]["memory_status"]
        assert (status["valid_from"], status["valid_to"]) == (T2020, T2022)
        assert Fact.objects.get(pk=rome["fact"]["id"]).status == "active"
        current = ok(
            client_a.get("/api/v1/facts/current", {"subject": "Alice", "predicate": "lives_in"})
        )
        assert [f["id"] for f in current["facts"]] == [rome["fact"]["id"]]

    def test_lower_authority_is_contested_and_changes_nothing_current(self, client_a):
        paris = claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Paris",
            valid_from=T2020,
            source_type="user_statement",
        )
        response = post(
            client_a,
            "/api/v1/facts",
            {
                "subject": "Alice",
                "predicate": "lives_in",
                "value": "Berlin",
                "valid_from": T2022,
                "source_type": "third_party",
            },
        )
        assert response.status_code == 201
        berlin = response.json()
        assert berlin == {
            "outcome": "contested",
            "fact": fact_body(berlin["fact"]["id"]),
            "superseded": [],
            "resolved_contests": [],
        }
        assert berlin["fact"]["memory_status"]["status"] == "contested"
        assert berlin["fact"]["memory_status"]["contests"] == paris["fact"]["id"]

        current = ok(client_a.get("/api/v1/facts/current", {"subject": "Alice"}))
        assert current["facts"] == [fact_body(paris["fact"]["id"])]
        assert current["facts"][0]["memory_status"]["contested_by"] == [berlin["fact"]["id"]]

        queue = ok(client_a.get("/api/v1/facts/contested"))
        assert queue == {"next": None, "previous": None, "results": [berlin["fact"]]}

    def test_a_stronger_claim_resolves_the_contest(self, client_a):
        claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Paris",
            valid_from=T2020,
            source_type="user_statement",
        )
        berlin = claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Berlin",
            valid_from=T2022,
            source_type="third_party",
        )
        rome = claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Rome",
            valid_from=T2022,
            source_type="user_statement",
        )
        assert (rome["outcome"], rome["resolved_contests"]) == ("created", [berlin["fact"]["id"]])
        assert ok(client_a.get("/api/v1/facts/contested"))["results"] == []
        closed = Fact.objects.get(pk=berlin["fact"]["id"])
        assert (closed.status, str(closed.superseded_by_id)) == ("contested", rome["fact"]["id"])


class TestBatch:
    def test_a_batch_is_applied_in_order(self, client_a):
        body = {
            "facts": [
                {
                    "subject": "Alice",
                    "predicate": "lives_in",
                    "value": "Paris",
                    "valid_from": T2020,
                },
                {"subject": "Alice", "predicate": "works_for", "object_entity": "Acme"},
                {"subject": "Alice", "predicate": "lives_in", "value": "Rome", "valid_from": T2022},
                {"subject": "ALICE", "predicate": "lives_in", "value": "Rome", "valid_from": T2022},
            ]
        }
        response = post(client_a, "/api/v1/facts", body)
        assert response.status_code == 201
        paris = Fact.objects.get(object_value="Paris", origin="asserted")
        works = Fact.objects.get(predicate__name="works_for")
        rome = Fact.objects.get(object_value="Rome")
        # One batch, one record time: the value to ask as-known-at with.
        recorded = iso(rome.recorded_at)
        assert response.json() == {
            "count": 4,
            "results": [
                {
                    "outcome": "created",
                    "fact_id": str(paris.pk),
                    "recorded_at": recorded,
                    "superseded": [],
                    "resolved_contests": [],
                },
                {
                    "outcome": "created",
                    "fact_id": str(works.pk),
                    "recorded_at": recorded,
                    "superseded": [],
                    "resolved_contests": [],
                },
                {
                    "outcome": "created",
                    "fact_id": str(rome.pk),
                    "recorded_at": recorded,
                    "superseded": [str(paris.pk)],
                    "resolved_contests": [],
                },
                {
                    "outcome": "confirmed",
                    "fact_id": str(rome.pk),
                    "recorded_at": recorded,
                    "superseded": [],
                    "resolved_contests": [],
                },
            ],
        }
        assert Entity.objects.filter(agent=client_a.agent).count() == 2  # Alice once, Acme

    def test_one_bad_claim_fails_the_batch_and_names_its_index(self, client_a):
        put(client_a, "/api/v1/predicates/age", {"value_type": "integer"})
        before = facts_state()
        claims = [
            {"subject": "Alice", "predicate": "lives_in", "value": "Paris"},
            {"subject": "Bob", "predicate": "age", "value": 30},
            {"subject": "Carol", "predicate": "age", "value": "thirty"},
        ]
        response = post(client_a, "/api/v1/facts", {"facts": claims})
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            "facts[2].value: expected an integer value, got str",
            {"facts": {"2": {"value": ["expected an integer value, got str"]}}},
        )
        assert facts_state() == before

    def test_an_unknown_field_in_one_claim(self, client_a):
        before = facts_state()
        claims = [{"subject": "A", "predicate": "p", "value": 1}] * 2
        claims = [*claims, {"subject": "A", "predicate": "p", "value": 1, "colour": "red"}]
        response = post(client_a, "/api/v1/facts", {"facts": claims})
        message = f"unknown field; allowed: {CLAIM_FIELDS}"
        assert response.json() == error(
            "invalid", f"facts[2].colour: {message}", {"facts": {"2": {"colour": [message]}}}
        )
        assert facts_state() == before

    def test_empty_and_oversized_batches(self, client_a):
        before = facts_state()
        empty = post(client_a, "/api/v1/facts", {"facts": []})
        assert empty.json() == error(
            "invalid",
            "facts: This list may not be empty.",
            {"facts": ["This list may not be empty."]},
        )
        big = post(
            client_a,
            "/api/v1/facts",
            {"facts": [{"subject": "A", "predicate": "p", "value": 1}] * 1001},
        )
        assert big.status_code == 413
        assert big.json() == error(
            "batch_too_large",
            "a batch holds at most 1000 facts; this one has 1001: split it",
            {"max_facts": 1000, "received": 1001},
        )
        assert facts_state() == before

    def test_batch_of_1000(self, client_a):
        claims = [
            {
                "subject": f"s{i % 100}",
                "predicate": "reading",
                "value": i,
                "valid_from": f"2020-01-{1 + i // 100:02d}T00:00:00Z",
            }
            for i in range(1000)
        ]
        response = post(client_a, "/api/v1/facts", {"facts": claims})
        assert response.status_code == 201
        assert response.json()["count"] == 1000
        assert [r["outcome"] for r in response.json()["results"]] == ["created"] * 1000
        # 100 subjects × 10 versions: each later one superseded the one before.
        assert Fact.objects.filter(status="active", superseded_at__isnull=True).count() == 1000
        assert Fact.objects.filter(status="superseded").count() == 900


class TestBadClaims:
    """The issue's bad input, and every kind of malformed field: a clear error, nothing written."""

    @pytest.fixture(autouse=True)
    def predicates(self, client_a):
        put(client_a, "/api/v1/predicates/age", {"value_type": "integer"})
        put(client_a, "/api/v1/predicates/lives_in", {"value_type": "string"})
        put(client_a, "/api/v1/predicates/works_for", {"value_type": "entity"})
        post(client_a, "/api/v1/entities", {"name": "Alice"})

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            (
                {"valid_from": T2022, "valid_to": T2021},
                "valid_to",
                "must be after valid_from",
            ),
            ({"valid_from": T2022, "valid_to": T2022}, "valid_to", "must be after valid_from"),
            ({"predicate": "age", "value": "old"}, "value", "expected an integer value, got str"),
            ({"predicate": "age", "value": True}, "value", "expected an integer value, got bool"),
            ({"predicate": "age", "value": 1.5}, "value", "expected an integer value, got float"),
            (
                {"predicate": "age", "value": None},
                "value",
                "a fact needs a value (to say it no longer holds, retract or end it)",
            ),
            (
                {"value": None, "object_entity": None},
                "object_entity",
                "This field may not be null.",
            ),
            (
                {"predicate": "age", "value": 3, "object_entity": "Bob"},
                "object_entity",
                "predicate 'age' holds integer values, not entities",
            ),
            (
                {"predicate": "works_for", "value": "Acme"},
                "object_entity",
                "this predicate relates entities: send object_entity",
            ),
            (
                {"predicate": "works_for", "value": "Acme", "object_entity": "Acme"},
                "value",
                "send object_entity or value, not both",
            ),
            (
                {"value": None, "predicate": "mood"},
                "value",
                "a fact needs a value (to say it no longer holds, retract or end it)",
            ),
            ({"predicate": "Lives In"}, "predicate", PREDICATE_RULE),
            ({"subject": 5}, "subject", "Not a valid string."),
            ({"subject": ""}, "subject", "This field may not be blank."),
            ({"subject": ["Alice"]}, "subject", "Not a valid string."),
            ({"predicate": None}, "predicate", "This field may not be null."),
            ({"valid_from": "yesterday"}, "valid_from", DATETIME_RULE),
            ({"valid_from": 1767225600}, "valid_from", DATETIME_RULE),
            ({"valid_from": "2020-01-01T00:00:00"}, "valid_from", NAIVE_RULE),
            ({"valid_to": "2020-02-30T00:00:00Z"}, "valid_to", DATETIME_RULE),
            ({"confidence": "high"}, "confidence", "A valid number is required."),
            ({"confidence": 1.5}, "confidence", "Ensure this value is less than or equal to 1.0."),
            ({"authority": "god"}, "authority", '"god" is not a valid choice.'),
            ({"source_type": "rumour"}, "source_type", '"rumour" is not a valid choice.'),
            ({"cardinality": "few"}, "cardinality", '"few" is not a valid choice.'),
            ({"actor": 5}, "actor", "Not a valid string."),
            ({"colour": "red"}, "colour", f"unknown field; allowed: {CLAIM_FIELDS}"),
        ],
    )
    def test_field_errors(self, client_a, body, field, message):
        body = {"subject": "Alice", "predicate": "lives_in", "value": "Paris", **body}
        before = facts_state()
        response = post(client_a, "/api/v1/facts", body)
        assert response.status_code == 400, response.json()
        assert response.json() == error("invalid", f"{field}: {message}", {field: [message]})
        assert facts_state() == before

    @pytest.mark.parametrize(
        "value", ['"nul \\u0000 inside"', "[" * 101 + "]" * 101], ids=["nul", "deep"]
    )
    def test_a_value_the_ledger_cannot_store_is_blamed_on_value(self, client_a, value):
        before = facts_state()
        body = '{"subject": "Alice", "predicate": "notes", "value": ' + value + "}"
        response = client_a.post("/api/v1/facts", body, content_type="application/json")
        assert response.status_code == 400
        assert response.json()["error"]["message"].startswith("value: ")
        assert list(response.json()["error"]["details"]) == ["value"]
        assert facts_state() == before

    def test_value_is_required(self, client_a):
        before = facts_state()
        response = post(client_a, "/api/v1/facts", {"subject": "Alice", "predicate": "lives_in"})
        assert response.json() == error(
            "invalid", "value: This field is required.", {"value": ["This field is required."]}
        )
        assert facts_state() == before

    @pytest.mark.parametrize("field", ["subject", "object_entity"])
    def test_unknown_entity_id(self, client_a, field):
        before = facts_state()
        missing = str(uuid.uuid4())
        body = {
            "subject": "Alice",
            "predicate": "works_for",
            "object_entity": "Acme",
            field: missing,
        }
        response = post(client_a, "/api/v1/facts", body)
        assert response.status_code == 422
        assert response.json() == error(
            "unknown_entity",
            f"{field}: unknown entity {missing}",
            {field: [f"unknown entity {missing}"]},
        )
        assert facts_state() == before

    @pytest.mark.parametrize(
        ("body", "code", "message", "details"),
        [
            (
                {"cardinality": "many"},
                "cardinality_conflict",
                "predicate 'lives_in' is cardinality 'one', not 'many'; redefine it through "
                "/api/v1/predicates first",
                {"cardinality": ["one"]},
            ),
            (
                {"value_type": "any"},
                "value_type_conflict",
                "predicate 'lives_in' is value_type 'string', not 'any'; redefine it through "
                "/api/v1/predicates first",
                {"value_type": ["string"]},
            ),
        ],
    )
    def test_a_definition_that_contradicts_the_predicate(
        self, client_a, body, code, message, details
    ):
        before = facts_state()
        response = post(
            client_a,
            "/api/v1/facts",
            {"subject": "Alice", "predicate": "lives_in", "value": "Paris", **body},
        )
        assert (response.status_code, response.json()) == (409, error(code, message, details))
        assert facts_state() == before

    @pytest.mark.parametrize("body", ["[]", '"Alice"', "42", "null"])
    def test_body_must_be_an_object(self, client_a, body):
        before = facts_state()
        response = client_a.post("/api/v1/facts", body, content_type="application/json")
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            'send a fact object, or {"facts": [...]} for a batch',
            {"body": ["expected a JSON object"]},
        )
        assert facts_state() == before


# ------------------------------------------------------------- retract, correct, end


@pytest.fixture
def paris(client_a) -> dict:
    return claim(
        client_a,
        subject="Alice",
        predicate="lives_in",
        value="Paris",
        valid_from=T2020,
        value_type="string",
        source_type="user_statement",
    )["fact"]


class TestRetract:
    def test_retract(self, client_a, paris):
        url = f"/api/v1/facts/{paris['id']}/retract"
        response = post(
            client_a,
            url,
            {"reason": "she never lived there", "actor": "alice", "source_type": "user_statement"},
        )
        assert response.status_code == 200
        assert response.json() == {
            "outcome": "retracted",
            "fact": fact_body(paris["id"]),
            "superseded": [],
            "resolved_contests": [],
        }
        status = response.json()["fact"]["memory_status"]
        assert (status["status"], status["superseded_at"] is not None) == ("retracted", True)
        event = Event.objects.filter(agent=client_a.agent).latest("seq")
        assert (event.event_type, event.payload, event.actor) == (
            "facts.retracted",
            {"fact_id": paris["id"], "reason": "she never lived there"},
            "alice",
        )
        assert ok(client_a.get("/api/v1/facts/current", {"subject": "Alice"}))["facts"] == []

        before = facts_state()
        again = post(client_a, url, {"reason": "twice"})
        fact = Fact.objects.get(pk=paris["id"])
        assert again.status_code == 409
        assert again.json() == error(
            "not_current",
            f"fact {paris['id']} is retracted (closed at {fact.superseded_at}), not a believed "
            "version; act on the current version (see its chain)",
            {"status": "retracted", "superseded_by": ""},
        )
        assert facts_state() == before

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "reason", "This field is required."),
            ({"reason": "   "}, "reason", "This field may not be blank."),
            ({"reason": 5}, "reason", "Not a valid string."),
            (
                {"reason": "x", "value": 1},
                "value",
                "unknown field; allowed: actor, authority, confidence, privacy_class, reason, "
                "retention_class, session_id, source_ref, source_type",
            ),
        ],
    )
    def test_bad_input(self, client_a, paris, body, field, message):
        before = facts_state()
        response = post(client_a, f"/api/v1/facts/{paris['id']}/retract", body)
        assert (response.status_code, response.json()) == (
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
        )
        assert facts_state() == before

    def test_unknown_fact(self, client_a):
        missing = uuid.uuid4()
        response = post(client_a, f"/api/v1/facts/{missing}/retract", {"reason": "x"})
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", f"fact {missing} not found"),
        )


class TestCorrect:
    def test_correct_the_value_for_its_period(self, client_a, paris):
        response = post(
            client_a,
            f"/api/v1/facts/{paris['id']}/correct",
            {"value": "Lyon", "source_type": "user_statement", "source_ref": "chat-18"},
        )
        assert response.status_code == 200
        body = response.json()
        assert body == {
            "outcome": "corrected",
            "fact": fact_body(body["fact"]["id"]),
            "superseded": [paris["id"]],
            "resolved_contests": [],
        }
        status = body["fact"]["memory_status"]
        assert (body["fact"]["value"], status["origin"], status["supersedes"]) == (
            "Lyon",
            "corrected",
            paris["id"],
        )
        assert (status["valid_from"], status["valid_to"]) == (T2020, None)
        assert status["source"]["source_ref"] == "chat-18"

    def test_a_weaker_correction_is_contested(self, client_a, paris):
        body = ok(
            post(
                client_a,
                f"/api/v1/facts/{paris['id']}/correct",
                {"value": "Lyon", "source_type": "third_party"},
            )
        )
        assert (body["outcome"], body["superseded"]) == ("contested", [])
        assert body["fact"]["memory_status"]["contests"] == paris["id"]
        assert fact_body(paris["id"])["memory_status"]["contested_by"] == [body["fact"]["id"]]

    def test_correct_a_relation(self, client_a):
        works = claim(client_a, subject="Alice", predicate="works_for", object_entity="Acme")
        post(client_a, "/api/v1/entities", {"name": "Globex"})
        body = ok(
            post(
                client_a,
                f"/api/v1/facts/{works['fact']['id']}/correct",
                {"object_entity": "globex", "source_type": "operator"},
            )
        )
        assert body["fact"]["object_entity"] == ref(entity_named("Globex"))

    @pytest.mark.parametrize(
        ("body", "status", "code", "message", "details"),
        [
            (
                {"value": 5},
                400,
                "invalid",
                "value: expected a string value, got int",
                {"value": ["expected a string value, got int"]},
            ),
            (
                {},
                400,
                "invalid",
                "send the corrected value",
                {"value": ["This field is required."]},
            ),
            (
                {"object_entity": "Acme"},
                400,
                "invalid",
                "send the corrected value",
                {"value": ["This field is required."]},
            ),
            (
                {"value": "Lyon", "confidence": 2},
                400,
                "invalid",
                "confidence: Ensure this value is less than or equal to 1.0.",
                {"confidence": ["Ensure this value is less than or equal to 1.0."]},
            ),
        ],
    )
    def test_bad_input(self, client_a, paris, body, status, code, message, details):
        before = facts_state()
        response = post(client_a, f"/api/v1/facts/{paris['id']}/correct", body)
        assert (response.status_code, response.json()) == (status, error(code, message, details))
        assert facts_state() == before

    def test_unknown_object_entity(self, client_a):
        works = claim(client_a, subject="Alice", predicate="works_for", object_entity="Acme")
        before = facts_state()
        missing = uuid.uuid4()
        response = post(
            client_a,
            f"/api/v1/facts/{works['fact']['id']}/correct",
            {"object_entity": str(missing)},
        )
        assert (response.status_code, response.json()) == (
            422,
            error("unknown_entity", f"unknown entity {missing}", {"object_entity": ["unknown"]}),
        )
        assert facts_state() == before


class TestEnd:
    def test_end(self, client_a, paris):
        response = post(
            client_a,
            f"/api/v1/facts/{paris['id']}/end",
            {"valid_to": T2024, "source_type": "user_statement"},
        )
        assert response.status_code == 200
        body = response.json()
        assert body == {
            "outcome": "ended",
            "fact": fact_body(body["fact"]["id"]),
            "superseded": [paris["id"]],
            "resolved_contests": [],
        }
        status = body["fact"]["memory_status"]
        assert (status["valid_from"], status["valid_to"], status["origin"]) == (
            T2020,
            T2024,
            "ended",
        )
        assert ok(client_a.get("/api/v1/facts/current", {"subject": "Alice"}))["facts"] == []

    @pytest.mark.parametrize(
        ("body", "status", "code", "message", "details"),
        [
            (
                {"valid_to": "2019-01-01T00:00:00Z", "source_type": "user_statement"},
                400,
                "invalid",
                "valid_to must fall inside the fact's valid period [2020-01-01 00:00:00+00:00, open)",
                {"valid_to": ["outside the valid period"]},
            ),
            (
                {"valid_to": T2024},
                409,
                "insufficient_authority",
                "an agent_inference claim cannot end a user_statement fact; a contest needs a value "
                "(assert one) or an operator",
                {"authority": ["agent_inference"], "fact_authority": ["user_statement"]},
            ),
            (
                {},
                400,
                "invalid",
                "valid_to: This field is required.",
                {"valid_to": ["This field is required."]},
            ),
            (
                {"valid_to": "2024-01-01T00:00:00"},
                400,
                "invalid",
                f"valid_to: {NAIVE_RULE}",
                {"valid_to": [NAIVE_RULE]},
            ),
            (
                {"valid_to": None},
                400,
                "invalid",
                "valid_to: This field may not be null.",
                {"valid_to": ["This field may not be null."]},
            ),
        ],
    )
    def test_bad_input(self, client_a, paris, body, status, code, message, details):
        before = facts_state()
        response = post(client_a, f"/api/v1/facts/{paris['id']}/end", body)
        assert (response.status_code, response.json()) == (status, error(code, message, details))
        assert facts_state() == before


class TestResolve:
    @pytest.fixture
    def berlin(self, client_a, paris) -> dict:
        return claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Berlin",
            valid_from=T2022,
            source_type="third_party",
        )["fact"]

    def test_needs_the_admin_scope(self, client_a, berlin):
        before = facts_state()
        response = post(client_a, f"/api/v1/facts/{berlin['id']}/resolve", {"accept": True})
        assert response.status_code == 403
        assert response.json() == error(
            "permission_denied",
            f"this API key lacks the 'admin' scope needed for POST "
            f"/api/v1/facts/{berlin['id']}/resolve; it has ['read', 'write']",
        )
        assert facts_state() == before

    def test_accept(self, client_a, admin_a, paris, berlin):
        response = post(admin_a, f"/api/v1/facts/{berlin['id']}/resolve", {"accept": True})
        assert response.status_code == 200
        body = response.json()
        assert body == {
            "outcome": "accepted",
            "fact": fact_body(body["fact"]["id"]),
            "superseded": [paris["id"]],
            "resolved_contests": [berlin["id"]],
        }
        status = body["fact"]["memory_status"]
        assert (body["fact"]["value"], status["origin"], status["authority"]) == (
            "Berlin",
            "accepted",
            "operator",
        )
        assert status["source"]["actor"] == "operator"
        current = ok(client_a.get("/api/v1/facts/current", {"subject": "Alice"}))
        assert [f["id"] for f in current["facts"]] == [body["fact"]["id"]]
        assert ok(client_a.get("/api/v1/facts/contested"))["results"] == []

    def test_reject(self, client_a, admin_a, paris, berlin):
        body = ok(
            post(
                admin_a,
                f"/api/v1/facts/{berlin['id']}/resolve",
                {"accept": False, "actor": "ops-jane"},
            )
        )
        assert body == {
            "outcome": "rejected",
            "fact": fact_body(berlin["id"]),
            "superseded": [],
            "resolved_contests": [],
        }
        assert body["fact"]["memory_status"]["superseded_at"] is not None
        assert Event.objects.filter(agent=client_a.agent).latest("seq").actor == "ops-jane"
        current = ok(client_a.get("/api/v1/facts/current", {"subject": "Alice"}))
        assert current["facts"] == [fact_body(paris["id"])]
        assert current["facts"][0]["memory_status"]["contested_by"] == []

    def test_not_a_contest(self, admin_a, paris):
        before = facts_state()
        response = post(admin_a, f"/api/v1/facts/{paris['id']}/resolve", {"accept": True})
        assert (response.status_code, response.json()) == (
            409,
            error("not_contested", f"fact {paris['id']} is not an open contest"),
        )
        assert facts_state() == before

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "accept", "This field is required."),
            ({"accept": "yes"}, "accept", "Must be a valid boolean."),
            ({"accept": 1}, "accept", "Must be a valid boolean."),
            ({"accept": True, "reason": "x"}, "reason", "unknown field; allowed: accept, actor"),
        ],
    )
    def test_bad_input(self, admin_a, berlin, body, field, message):
        before = facts_state()
        response = post(admin_a, f"/api/v1/facts/{berlin['id']}/resolve", body)
        assert (response.status_code, response.json()) == (
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
        )
        assert facts_state() == before


class TestIdempotencyAndScopes:
    def test_a_retried_assert_writes_nothing(self, client_a):
        body = {"subject": "Alice", "predicate": "lives_in", "value": "Paris"}
        first = post(client_a, "/api/v1/facts", body, HTTP_IDEMPOTENCY_KEY="k-1")
        assert first.status_code == 201
        before = facts_state()
        again = post(client_a, "/api/v1/facts", body, HTTP_IDEMPOTENCY_KEY="k-1")
        assert (again.status_code, again.json()) == (201, first.json())
        assert again["Idempotent-Replayed"] == "true"
        assert facts_state() == before
        other = post(
            client_a, "/api/v1/facts", {**body, "value": "Rome"}, HTTP_IDEMPOTENCY_KEY="k-1"
        )
        assert other.status_code == 422
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        assert facts_state() == before

    def test_a_retried_retract_answers_as_the_first_time(self, client_a, paris):
        url = f"/api/v1/facts/{paris['id']}/retract"
        first = post(client_a, url, {"reason": "x"}, HTTP_IDEMPOTENCY_KEY="r-1")
        before = facts_state()
        again = post(client_a, url, {"reason": "x"}, HTTP_IDEMPOTENCY_KEY="r-1")
        assert (again.status_code, again.json()) == (200, first.json())
        assert facts_state() == before

    def test_a_read_only_key_reads_but_does_not_write(self, client_a, paris):
        reader = make_client("reader", scopes=(Scope.READ,))
        before = facts_state()
        response = post(reader, "/api/v1/facts", {"subject": "A", "predicate": "p", "value": 1})
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "permission_denied"
        assert facts_state() == before
        assert reader.get("/api/v1/entities").status_code == 200


# ------------------------------------------------------------------------- queries


@pytest.fixture
def history(client_a) -> dict:
    """Alice: lives_in Paris from 2020, Rome from 2022; email (many-valued); works_for Acme."""
    put(client_a, "/api/v1/predicates/email", {"cardinality": "many"})
    paris = claim(
        client_a,
        subject="Alice",
        predicate="lives_in",
        value="Paris",
        valid_from=T2020,
        source_type="user_statement",
    )
    rome = claim(
        client_a,
        subject="Alice",
        predicate="lives_in",
        value="Rome",
        valid_from=T2022,
        source_type="user_statement",
    )
    emails = [
        claim(client_a, subject="Alice", predicate="email", value=v, valid_from=T2020)["fact"]["id"]
        for v in ("a@x", "b@x")
    ]
    works = claim(
        client_a, subject="Alice", predicate="works_for", object_entity="Acme", valid_from=T2021
    )
    return {
        "alice": entity_named("Alice"),
        "paris": paris["fact"]["id"],
        "rome": rome["fact"]["id"],
        "split": str(Fact.objects.get(origin="split").pk),
        "emails": emails,
        "works": works["fact"]["id"],
    }


class TestCurrent:
    def test_all_predicates_of_a_subject(self, client_a, history):
        body = ok(client_a.get("/api/v1/facts/current", {"subject": "alice"}))
        expected = sorted(
            [history["rome"], *history["emails"], history["works"]],
            key=lambda i: (
                Fact.objects.get(pk=i).predicate.name,
                Fact.objects.get(pk=i).valid_from,
                Fact.objects.get(pk=i).pk,  # ties (two emails from one instant) by id
            ),
        )
        assert body == {
            "subject": ref(history["alice"]),
            "predicate": None,
            "facts": [fact_body(i) for i in expected],
        }

    def test_one_predicate_by_subject_id(self, client_a, history):
        body = ok(
            client_a.get(
                "/api/v1/facts/current",
                {"subject": str(history["alice"].pk), "predicate": "lives_in"},
            )
        )
        assert body == {
            "subject": ref(history["alice"]),
            "predicate": "lives_in",
            "facts": [fact_body(history["rome"])],
        }

    def test_needs_recheck_when_volatility_has_passed(self, client_a, history, monkeypatch):
        put(client_a, "/api/v1/predicates/lives_in", {"volatility_seconds": 3600})
        rome = Fact.objects.get(pk=history["rome"])
        params = {"subject": "Alice", "predicate": "lives_in"}
        for later, age, stale in ((3600, 3600, False), (3601, 3601, True)):
            monkeypatch.setattr(
                "django.utils.timezone.now",
                lambda later=later: rome.last_confirmed_at + timedelta(seconds=later),
            )
            body = ok(client_a.get("/api/v1/facts/current", params))
            assert body["facts"] == [fact_body(rome.pk, age=age, needs_recheck=stale)]

    @pytest.mark.parametrize(
        ("params", "status", "body"),
        [
            ({"subject": "Nobody"}, 404, error("not_found", "no entity named 'Nobody'")),
            (
                {"subject": "Alice", "predicate": "height"},
                404,
                error("not_found", "no predicate named 'height'"),
            ),
            (
                {},
                400,
                error(
                    "invalid",
                    "subject: This field is required.",
                    {"subject": ["This field is required."]},
                ),
            ),
            (
                {"subject": "Alice", "valid_time": T2020},
                400,
                error(
                    "invalid",
                    "valid_time: unknown field; allowed: predicate, subject",
                    {"valid_time": ["unknown field; allowed: predicate, subject"]},
                ),
            ),
        ],
    )
    def test_bad_queries(self, client_a, history, params, status, body):
        response = client_a.get("/api/v1/facts/current", params)
        assert (response.status_code, response.json()) == (status, body)

    def test_unknown_subject_id(self, client_a, history):
        missing = uuid.uuid4()
        response = client_a.get("/api/v1/facts/current", {"subject": str(missing)})
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", f"entity {missing} not found"),
        )


class TestAsOf:
    def test_value_at_a_valid_time(self, client_a, history):
        def as_of(moment):
            return ok(
                client_a.get(
                    "/api/v1/facts/as-of",
                    {"subject": "Alice", "predicate": "lives_in", "valid_time": moment},
                )
            )

        assert as_of(T2021) == {
            "subject": ref(history["alice"]),
            "predicate": "lives_in",
            "valid_time": T2021,
            "facts": [fact_body(history["split"])],
        }
        assert [f["value"] for f in as_of("2023-06-01T12:00:00+02:00")["facts"]] == ["Rome"]
        assert as_of("2019-12-31T23:59:59Z")["facts"] == []
        assert as_of("2023-06-01T12:00:00+02:00")["valid_time"] == "2023-06-01T10:00:00Z"

    def test_an_unencoded_plus_in_the_query_string_is_an_offset(self, client_a, history):
        query = "subject=Alice&predicate=lives_in&valid_time=2021-01-01T02:00:00+02:00"
        body = ok(client_a.get(f"/api/v1/facts/as-of?{query}"))
        assert (body["valid_time"], [f["value"] for f in body["facts"]]) == (T2021, ["Paris"])

    def test_every_predicate_at_a_valid_time(self, client_a, history):
        body = ok(client_a.get("/api/v1/facts/as-of", {"subject": "Alice", "valid_time": T2020}))
        assert body["predicate"] is None
        assert sorted(f["id"] for f in body["facts"]) == sorted(
            [*history["emails"], history["split"]]
        )
        assert [f["predicate"] for f in body["facts"]] == ["email", "email", "lives_in"]

    @pytest.mark.parametrize(
        ("params", "field", "message"),
        [
            ({"subject": "Alice"}, "valid_time", "This field is required."),
            ({"subject": "Alice", "valid_time": "1 Jan 2021"}, "valid_time", DATETIME_RULE),
            ({"subject": "Alice", "valid_time": "2021-01-01"}, "valid_time", NAIVE_RULE),
            ({"subject": "Alice", "valid_time": "2021-01-01T00:00:00"}, "valid_time", NAIVE_RULE),
        ],
    )
    def test_bad_queries(self, client_a, history, params, field, message):
        response = client_a.get("/api/v1/facts/as-of", params)
        assert (response.status_code, response.json()) == (
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
        )


@pytest.mark.django_db(transaction=True)
class TestAsKnownAt:
    """Record time needs real transactions: inside one, PostgreSQL's clock stands still."""

    def test_what_was_believed_then(self, client_a):
        paris = claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Paris",
            valid_from=T2020,
            source_type="user_statement",
        )["fact"]
        believed_paris = at(paris["memory_status"]["recorded_at"])
        lyon = ok(
            post(
                client_a,
                f"/api/v1/facts/{paris['id']}/correct",
                {"value": "Lyon", "source_type": "user_statement"},
            )
        )["fact"]
        corrected = at(lyon["memory_status"]["recorded_at"])
        assert corrected > believed_paris

        def known_at(record_time):
            return ok(
                client_a.get(
                    "/api/v1/facts/as-known-at",
                    {
                        "subject": "Alice",
                        "predicate": "lives_in",
                        "valid_time": T2021,
                        "record_time": iso(record_time),
                    },
                )
            )

        before_anything = known_at(believed_paris - timedelta(microseconds=1))
        assert before_anything["facts"] == []
        then = known_at(believed_paris)
        assert then == {
            "subject": ref(entity_named("Alice")),
            "predicate": "lives_in",
            "valid_time": T2021,
            "record_time": iso(believed_paris),
            "facts": [fact_body(paris["id"])],
        }
        assert then["facts"][0]["memory_status"]["superseded_at"] == iso(corrected)
        now = known_at(corrected)
        assert now["facts"] == [fact_body(lyon["id"])]

    def test_contested_claims_were_never_believed(self, client_a):
        claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Paris",
            valid_from=T2020,
            source_type="user_statement",
        )
        claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Berlin",
            valid_from=T2020,
            source_type="third_party",
        )
        body = ok(
            client_a.get(
                "/api/v1/facts/as-known-at",
                {"subject": "Alice", "valid_time": T2021, "record_time": iso(datetime.now(UTC))},
            )
        )
        assert [f["value"] for f in body["facts"]] == ["Paris"]

    def test_record_time_is_required(self, client_a):
        claim(client_a, subject="Alice", predicate="lives_in", value="Paris")
        response = client_a.get(
            "/api/v1/facts/as-known-at", {"subject": "Alice", "valid_time": T2021}
        )
        assert response.json() == error(
            "invalid",
            "record_time: This field is required.",
            {"record_time": ["This field is required."]},
        )


def _timeless(chain: dict) -> dict:
    """The chain without age_seconds, which ticks between two requests under load."""
    facts = []
    for fact in chain["facts"]:
        status = dict(fact["memory_status"])
        assert status.pop("age_seconds") == AGE
        facts.append({**fact, "memory_status": status})
    return {**chain, "facts": facts}


class TestChain:
    def chain_ids(self, alice, predicate) -> list[str]:
        return [
            str(pk)
            for pk in Fact.objects.filter(subject=alice, predicate__name=predicate)
            .order_by("recorded_at", "valid_from", "id")
            .values_list("pk", flat=True)
        ]

    def test_every_version_with_its_links(self, client_a, history):
        berlin = claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Berlin",
            valid_from=T2024,
            source_type="third_party",
        )["fact"]
        body = ok(
            client_a.get("/api/v1/facts/chain", {"subject": "Alice", "predicate": "lives_in"})
        )
        ids = self.chain_ids(history["alice"], "lives_in")
        assert sorted(ids) == sorted(
            [history["paris"], history["split"], history["rome"], berlin["id"]]
        )
        assert body == {
            "subject": ref(history["alice"]),
            "predicate": "lives_in",
            "facts": [fact_body(i) for i in ids],
        }
        by_id = {f["id"]: f["memory_status"] for f in body["facts"]}
        assert by_id[history["paris"]]["superseded_by"] == history["rome"]
        assert by_id[history["split"]]["supersedes"] == history["paris"]
        assert by_id[history["rome"]]["contested_by"] == [berlin["id"]]
        assert by_id[berlin["id"]]["contests"] == history["rome"]

    def test_the_chain_of_one_version_is_the_same(self, client_a, history):
        by_query = ok(
            client_a.get("/api/v1/facts/chain", {"subject": "Alice", "predicate": "lives_in"})
        )
        for fact_id in (history["paris"], history["rome"]):
            by_id = ok(client_a.get(f"/api/v1/facts/{fact_id}/chain"))
            assert _timeless(by_id) == _timeless(by_query)

    def test_predicate_is_required(self, client_a, history):
        response = client_a.get("/api/v1/facts/chain", {"subject": "Alice"})
        assert response.json() == error(
            "invalid",
            "predicate: This field is required.",
            {"predicate": ["This field is required."]},
        )

    def test_one_fact(self, client_a, history):
        assert ok(client_a.get(f"/api/v1/facts/{history['paris']}")) == fact_body(history["paris"])
        missing = uuid.uuid4()
        for path in (f"/api/v1/facts/{missing}", f"/api/v1/facts/{missing}/chain"):
            response = client_a.get(path)
            assert (response.status_code, response.json()) == (
                404,
                error("not_found", f"fact {missing} not found"),
            )


class TestContestedQueue:
    def test_oldest_first_with_a_cursor(self, client_a):
        ids = []
        for name in ("Alice", "Bob", "Carol"):
            claim(
                client_a,
                subject=name,
                predicate="lives_in",
                value="Paris",
                source_type="user_statement",
                valid_from=T2020,
            )
            ids.append(
                claim(
                    client_a,
                    subject=name,
                    predicate="lives_in",
                    value="Rome",
                    source_type="third_party",
                    valid_from=T2020,
                )["fact"]["id"]
            )
        expected = [
            str(pk)
            for pk in Fact.objects.filter(status="contested")
            .order_by("recorded_at", "id")
            .values_list("pk", flat=True)
        ]
        assert sorted(expected) == sorted(ids)
        first = ok(client_a.get("/api/v1/facts/contested", {"limit": 2}))
        assert first["results"] == [fact_body(i) for i in expected[:2]]
        second = ok(client_a.get(first["next"]))
        assert (second["results"], second["next"]) == ([fact_body(expected[2])], None)


# --------------------------------------------------------------------------- graph


@pytest.fixture
def graph(client_a) -> dict:
    """Alice -works_for-> Acme -located_in-> Paris -in_country-> France; Alice -knows-> Bob
    -works_for-> Acme. Bob's job ended in 2024."""
    edges = [
        ("Alice", "works_for", "Acme", T2020, None),
        ("Acme", "located_in", "Paris", T2020, None),
        ("Paris", "in_country", "France", T2020, None),
        ("Alice", "knows", "Bob", T2020, None),
        ("Bob", "works_for", "Acme", T2020, T2024),
    ]
    facts = {}
    for subject, predicate, obj, start, end in edges:
        body = {
            "subject": subject,
            "predicate": predicate,
            "object_entity": obj,
            "valid_from": start,
        }
        if end:
            body["valid_to"] = end
        facts[(subject, predicate)] = claim(client_a, **body)["fact"]["id"]
    return facts


def summary(name: str) -> dict:
    entity = entity_named(name)
    return {"id": str(entity.pk), "name": entity.name, "entity_type": entity.entity_type}


class TestGraphPaths:
    def test_paths_to_an_end_with_their_evidence(self, client_a, graph):
        body = ok(
            client_a.get(
                "/api/v1/graph/paths",
                {"start": "alice", "end": "France", "max_hops": 4, "valid_time": T2021},
            )
        )
        via_acme = [("Alice", "works_for"), ("Acme", "located_in"), ("Paris", "in_country")]
        assert (
            body
            == {
                "valid_time": T2021,
                "paths": [  # shortest first
                    {
                        "hops": 3,
                        "entities": [summary(n) for n in ("Alice", "Acme", "Paris", "France")],
                        "facts": [fact_body(graph[k]) for k in via_acme],
                    },
                    {
                        "hops": 4,
                        "entities": [
                            summary(n) for n in ("Alice", "Bob", "Acme", "Paris", "France")
                        ],
                        "facts": [
                            fact_body(graph[k])
                            for k in [("Alice", "knows"), ("Bob", "works_for"), *via_acme[1:]]
                        ],
                    },
                ],
            }
        )
        three = ok(
            client_a.get(
                "/api/v1/graph/paths",
                {"start": "alice", "end": "France", "max_hops": 3, "valid_time": T2021},
            )
        )
        assert three["paths"] == body["paths"][:1]

    def test_a_predicate_path_fixes_the_hops(self, client_a, graph):
        body = ok(
            client_a.get(
                "/api/v1/graph/paths",
                {"start": "Alice", "predicates": "knows,works_for", "valid_time": T2021},
            )
        )
        assert [[e["name"] for e in p["entities"]] for p in body["paths"]] == [
            ["Alice", "Bob", "Acme"]
        ]

    def test_valid_time_decides_which_relations_hold(self, client_a, graph):
        params = {"start": "Alice", "predicates": "knows,works_for"}
        assert ok(client_a.get("/api/v1/graph/paths", params))["paths"] == []  # Bob left in 2024
        before = ok(client_a.get("/api/v1/graph/paths", {**params, "valid_time": T2022}))
        assert len(before["paths"]) == 1

    def test_every_path_from_start(self, client_a, graph):
        body = ok(
            client_a.get(
                "/api/v1/graph/paths",
                {"start": "Alice", "min_hops": 2, "max_hops": 2, "valid_time": T2021},
            )
        )
        names = sorted([e["name"] for e in p["entities"]] for p in body["paths"])
        assert names == [["Alice", "Acme", "Paris"], ["Alice", "Bob", "Acme"]]
        assert all(p["hops"] == 2 for p in body["paths"])

    @pytest.mark.parametrize(
        ("params", "status", "body"),
        [
            ({"start": "Nobody"}, 404, error("not_found", "no entity named 'Nobody'")),
            (
                {"start": "Alice", "end": "Nobody"},
                404,
                error("not_found", "no entity named 'Nobody'"),
            ),
            (
                {"start": "Alice", "predicates": "knows,likes"},
                404,
                error("not_found", "no predicate named 'likes'"),
            ),
            (
                {"start": "Alice", "max_hops": 5},
                400,
                error(
                    "invalid",
                    "max_hops: Ensure this value is less than or equal to 4.",
                    {"max_hops": ["Ensure this value is less than or equal to 4."]},
                ),
            ),
            (
                {"start": "Alice", "min_hops": 3, "max_hops": 2},
                400,
                error(
                    "invalid",
                    "hops must satisfy 1 <= min_hops <= max_hops <= 4",
                    {"max_hops": ["at most 4"]},
                ),
            ),
            (
                {"start": "Alice", "predicates": "a,b,c,d,e"},
                400,
                error(
                    "invalid",
                    "predicates: Ensure this field has no more than 4 elements.",
                    {"predicates": ["Ensure this field has no more than 4 elements."]},
                ),
            ),
            (
                {},
                400,
                error(
                    "invalid",
                    "start: This field is required.",
                    {"start": ["This field is required."]},
                ),
            ),
        ],
    )
    def test_bad_queries(self, client_a, graph, params, status, body):
        response = client_a.get("/api/v1/graph/paths", params)
        assert (response.status_code, response.json()) == (status, body)


# ------------------------------------------------------------------------ queries/N


class TestQueryCounts:
    """List endpoints read a fixed number of queries, however many rows they return."""

    @staticmethod
    def queries(client, path, params) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(path, params).status_code == 200
        return len(captured.captured_queries)

    def grow(self, client, n: int, start: int = 0):
        for i in range(start, n):
            claim(client, subject="Alice", predicate=f"p{i}", value=i, valid_from=T2020)
            claim(
                client,
                subject="Alice",
                predicate="lives_in",
                value=f"city {i}",
                valid_from=f"20{10 + i:02d}-01-01T00:00:00Z",
                source_type="user_statement",
            )
            claim(
                client,
                subject="Alice",
                predicate=f"p{i}",
                value=-i,
                source_type="third_party",
                valid_from=T2020,
            )
            claim(
                client,
                subject=f"E{i}",
                predicate="next",
                object_entity=f"E{i + 1}",
                valid_from=T2020,
            )
            post(client, "/api/v1/entities", {"name": f"X{i}", "aliases": [f"x{i}a", f"x{i}b"]})

    @pytest.mark.parametrize(
        ("path", "params"),
        [
            ("/api/v1/facts/current", {"subject": "Alice"}),
            ("/api/v1/facts/as-of", {"subject": "Alice", "valid_time": T2021}),
            (
                "/api/v1/facts/as-known-at",
                {"subject": "Alice", "valid_time": T2021, "record_time": "2100-01-01T00:00:00Z"},
            ),
            ("/api/v1/facts/chain", {"subject": "Alice", "predicate": "lives_in"}),
            ("/api/v1/facts/contested", {}),
            ("/api/v1/entities", {}),
            ("/api/v1/predicates", {}),
            ("/api/v1/entities/search", {"q": "x1"}),
            ("/api/v1/graph/paths", {"start": "E0", "max_hops": 4, "valid_time": T2021}),
        ],
    )
    def test_no_query_per_row(self, client_a, django_assert_max_num_queries, path, params):
        self.grow(client_a, 2)
        few = self.queries(client_a, path, params)
        self.grow(client_a, 8, start=2)
        with django_assert_max_num_queries(few):
            assert client_a.get(path, params).status_code == 200
        assert few <= 10


# ------------------------------------------------------------------------ isolation


class TestTenantIsolation:
    """Agent B never sees agent A's memory: ids and names are 404, lists and queries are empty."""

    @pytest.fixture
    def a_memory(self, client_a, admin_a) -> dict:
        paris = claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Paris",
            valid_from=T2020,
            source_type="user_statement",
        )["fact"]
        contest = claim(
            client_a,
            subject="Alice",
            predicate="lives_in",
            value="Berlin",
            valid_from=T2020,
            source_type="third_party",
        )["fact"]
        works = claim(
            client_a, subject="Alice", predicate="works_for", object_entity="Acme", valid_from=T2020
        )["fact"]
        claim(
            client_a,
            subject="Acme",
            predicate="located_in",
            object_entity="Paris",
            valid_from=T2020,
        )
        put(client_a, "/api/v1/facts/authority-order", {"order": ["third_party"]})
        return {
            "alice": str(entity_named("Alice", client_a.agent).pk),
            "acme": str(entity_named("Acme", client_a.agent).pk),
            "paris": paris["id"],
            "contest": contest["id"],
            "works": works["id"],
        }

    def test_ids_are_404_like_missing_ones(self, client_b, a_memory):
        admin_b = admin_key_for(client_b)
        before = facts_state()
        alice, fact = a_memory["alice"], a_memory["paris"]
        cases = [
            ("get", f"/api/v1/entities/{alice}", None, f"entity {alice} not found"),
            (
                "post",
                f"/api/v1/entities/{alice}/aliases",
                {"alias": "x"},
                f"entity {alice} not found",
            ),
            ("get", f"/api/v1/facts/{fact}", None, f"fact {fact} not found"),
            ("get", f"/api/v1/facts/{fact}/chain", None, f"fact {fact} not found"),
            ("post", f"/api/v1/facts/{fact}/retract", {"reason": "x"}, f"fact {fact} not found"),
            ("post", f"/api/v1/facts/{fact}/correct", {"value": "Rome"}, f"fact {fact} not found"),
            ("post", f"/api/v1/facts/{fact}/end", {"valid_to": T2024}, f"fact {fact} not found"),
            ("get", "/api/v1/facts/current?subject=" + alice, None, f"entity {alice} not found"),
            (
                "get",
                f"/api/v1/facts/as-of?subject={alice}&valid_time={T2021}",
                None,
                f"entity {alice} not found",
            ),
            (
                "get",
                f"/api/v1/facts/as-known-at?subject={alice}&valid_time={T2021}&record_time={T2021}",
                None,
                f"entity {alice} not found",
            ),
            (
                "get",
                f"/api/v1/facts/chain?subject={alice}&predicate=lives_in",
                None,
                f"entity {alice} not found",
            ),
            ("get", f"/api/v1/graph/paths?start={alice}", None, f"entity {alice} not found"),
            ("get", "/api/v1/facts/current?subject=Alice", None, "no entity named 'Alice'"),
            ("get", "/api/v1/graph/paths?start=Alice", None, "no entity named 'Alice'"),
            ("get", "/api/v1/predicates/lives_in", None, "no predicate named 'lives_in'"),
        ]
        for method, path, body, message in cases:
            response = getattr(client_b, method)(path, body, format="json")
            assert (response.status_code, response.json()) == (
                404,
                error("not_found", message),
            ), path
        response = post(admin_b, f"/api/v1/facts/{a_memory['contest']}/resolve", {"accept": True})
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", f"fact {a_memory['contest']} not found"),
        )
        assert facts_state() == before

    def test_a_write_naming_anothers_entity_is_an_unknown_entity(self, client_b, a_memory):
        before = facts_state()
        alice = a_memory["alice"]
        response = post(
            client_b, "/api/v1/facts", {"subject": alice, "predicate": "lives_in", "value": "x"}
        )
        assert (response.status_code, response.json()) == (
            422,
            error(
                "unknown_entity",
                f"subject: unknown entity {alice}",
                {"subject": [f"unknown entity {alice}"]},
            ),
        )
        assert facts_state() == before

    def test_lists_searches_and_queries_show_only_ones_own(self, client_b, a_memory):
        assert ok(client_b.get("/api/v1/entities"))["results"] == []
        assert ok(client_b.get("/api/v1/predicates"))["results"] == []
        assert ok(client_b.get("/api/v1/facts/contested"))["results"] == []
        assert ok(client_b.get("/api/v1/entities/search", {"q": "Alice"})) == {"results": []}
        assert ok(client_b.get("/api/v1/facts/authority-order")) == {
            "order": list(AUTHORITY_ORDER),
            "admit_from": "",
        }

        # B's own Alice, with the same names as A's: B sees only its own facts about her.
        mine = claim(
            client_b, subject="Alice", predicate="lives_in", value="Oslo", valid_from=T2020
        )
        claim(
            client_b, subject="Alice", predicate="works_for", object_entity="Acme", valid_from=T2020
        )
        b_alice = entity_named("Alice", client_b.agent)
        assert str(b_alice.pk) != a_memory["alice"]
        for path, params in [
            ("/api/v1/facts/current", {"subject": "Alice", "predicate": "lives_in"}),
            (
                "/api/v1/facts/as-of",
                {"subject": "Alice", "predicate": "lives_in", "valid_time": T2021},
            ),
            (
                "/api/v1/facts/as-known-at",
                {
                    "subject": "Alice",
                    "predicate": "lives_in",
                    "valid_time": T2021,
                    "record_time": "2100-01-01T00:00:00Z",
                },
            ),
            ("/api/v1/facts/chain", {"subject": "Alice", "predicate": "lives_in"}),
        ]:
            assert ok(client_b.get(path, params))["facts"] == [fact_body(mine["fact"]["id"])], path
        search = ok(client_b.get("/api/v1/entities/search", {"q": "Alice"}))
        assert [r["entity"]["id"] for r in search["results"]] == [str(b_alice.pk)]
        paths = ok(client_b.get("/api/v1/graph/paths", {"start": "Alice", "valid_time": T2021}))
        assert [[e["name"] for e in p["entities"]] for p in paths["paths"]] == [["Alice", "Acme"]]
        assert ok(client_b.get("/api/v1/entities"))["results"] == [
            entity_body(e) for e in Entity.objects.filter(agent=client_b.agent).order_by("-pk")
        ]


def test_an_admission_threshold_keeps_unvetted_claims_out_of_current(client_a):
    """PUT /facts/authority-order with admit_from: a third party's unopposed word
    is stored as a contest, not as the current value."""
    response = put(
        client_a,
        "/api/v1/facts/authority-order",
        {"order": ["operator", "user_statement"], "admit_from": "tool_result"},
    )
    assert response.json()["admit_from"] == "tool_result"
    rumour = claim(
        client_a, subject="Bo", predicate="lives_in", value="Atlantis", source_type="third_party"
    )
    assert rumour["outcome"] == "contested"
    current = client_a.get("/api/v1/facts/current", {"subject": "Bo", "predicate": "lives_in"})
    assert current.status_code == 404 or current.json()["facts"] == []
