"""python manage.py rebuild_projection facts [--agent NAME|ID]: dropping the facts
projection and replaying the ledger gives back exactly what was there."""

from __future__ import annotations

import ast
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from facts import services
from facts.models import AuthorityPolicy, Entity, EntityAlias, Fact, FactEvidence, Predicate
from facts.tests.api_helpers import admin_key_for, claim, ok, post, put
from ledger import projections
from ledger.models import Event
from piper.tenancy.tests.factories import AgentFactory

T = "{}-01-01T00:00:00Z".format

PROJECTION = (Entity, EntityAlias, Predicate, Fact, FactEvidence, AuthorityPolicy)


def snapshot(*, with_evidence_ids: bool = False) -> dict:
    """Every row of every facts table, every column, in a stable order."""
    rows = {}
    for model in PROJECTION:
        values = model.objects.order_by("pk").values()
        if model is FactEvidence and not with_evidence_ids:
            # A serial id, which no replay can reproduce; nothing refers to it.
            values = [
                {k: v for k, v in row.items() if k != "id"}
                for row in values.order_by("fact_id", "event_id")
            ]
        rows[model._meta.label] = list(values)
    return rows


def rebuild(*args) -> str:
    out = StringIO()
    call_command("rebuild_projection", "facts", *args, stdout=out)
    return out.getvalue()


def build_history(client, admin) -> None:
    """A varied history, all through the API: entities and aliases, predicates defined and
    redefined, an authority order, supersessions, late evidence, re-assertions, contests
    settled by a stronger claim, by acceptance and by rejection, retract, correct (also a
    weaker, contested correction), end, relations and a batch."""
    alice = post(
        client, "/api/v1/entities", {"name": "Alice", "entity_type": "person", "aliases": ["Al"]}
    ).json()
    post(client, f"/api/v1/entities/{alice['id']}/aliases", {"alias": "Ally"})
    put(client, "/api/v1/predicates/lives_in", {"value_type": "string", "volatility_seconds": 60})
    put(client, "/api/v1/predicates/email", {"cardinality": "many"})

    paris = claim(
        client,
        subject="Alice",
        predicate="lives_in",
        value="Paris",
        valid_from=T(2020),
        source_type="user_statement",
    )["fact"]
    claim(
        client,
        subject="Al",
        predicate="lives_in",
        value="Paris",
        valid_from=T(2021),
        source_type="tool_result",
    )  # the same value again: evidence, no version
    rome = claim(
        client,
        subject="Alice",
        predicate="lives_in",
        value="Rome",
        valid_from=T(2022),
        source_type="user_statement",
    )["fact"]
    claim(
        client,
        subject="Alice",
        predicate="lives_in",
        value="Nice",
        valid_from=T(2018),
        source_type="user_statement",
    )  # late evidence
    claim(
        client,
        subject="Alice",
        predicate="lives_in",
        value="Berlin",
        valid_from=T(2023),
        source_type="third_party",
    )  # contested …
    claim(
        client,
        subject="Alice",
        predicate="lives_in",
        value="Milan",
        valid_from=T(2023),
        source_type="user_statement",
    )  # … and resolved by a stronger claim
    oslo = claim(
        client,
        subject="Alice",
        predicate="lives_in",
        value="Oslo",
        valid_from=T(2024),
        source_type="third_party",
    )["fact"]
    assert ok(post(admin, f"/api/v1/facts/{oslo['id']}/resolve", {"accept": True}))

    claim(
        client,
        subject="Bob",
        predicate="lives_in",
        value="Lima",
        valid_from=T(2020),
        source_type="user_statement",
        subject_type="person",
    )
    quito = claim(
        client,
        subject="Bob",
        predicate="lives_in",
        value="Quito",
        valid_from=T(2021),
        source_type="third_party",
    )["fact"]
    assert ok(post(admin, f"/api/v1/facts/{quito['id']}/resolve", {"accept": False}))

    emails = post(
        client,
        "/api/v1/facts",
        {
            "facts": [
                {"subject": "Alice", "predicate": "email", "value": "a@x", "valid_from": T(2020)},
                {"subject": "Alice", "predicate": "email", "value": "b@x", "valid_from": T(2021)},
                {
                    "subject": "Alice",
                    "predicate": "email",
                    "value": "a@x",
                    "valid_from": T(2019),
                    "valid_to": T(2021),
                },
            ]
        },
    ).json()
    b_email = emails["results"][1]["fact_id"]
    assert ok(post(client, f"/api/v1/facts/{b_email}/retract", {"reason": "typo"}))

    works = claim(
        client,
        subject="Alice",
        predicate="works_for",
        object_entity="Acme",
        valid_from=T(2020),
        object_type="company",
    )["fact"]
    claim(client, subject="Acme", predicate="located_in", object_entity="Paris", valid_from=T(2020))
    post(client, "/api/v1/entities", {"name": "Globex", "entity_type": "company"})
    assert ok(
        post(
            client,
            f"/api/v1/facts/{works['id']}/correct",
            {"object_entity": "Globex", "source_type": "operator"},
        )
    )

    age = claim(
        client,
        subject="Bob",
        predicate="age",
        value=41,
        valid_from=T(2020),
        source_type="user_statement",
    )["fact"]
    assert ok(
        post(
            client,
            f"/api/v1/facts/{age['id']}/correct",
            {"value": 40, "source_type": "third_party"},
        )
    )  # a weaker correction: contested
    current_age = ok(client.get("/api/v1/facts/current", {"subject": "Bob", "predicate": "age"}))
    assert ok(
        post(
            client,
            f"/api/v1/facts/{current_age['facts'][0]['id']}/end",
            {"valid_to": T(2025), "source_type": "user_statement"},
        )
    )

    put(client, "/api/v1/facts/authority-order", {"order": ["tool_result", "user_statement"]})
    claim(
        client,
        subject="Alice",
        predicate="lives_in",
        value="Turin",
        valid_from=T(2025),
        source_type="tool_result",
    )
    put(client, "/api/v1/predicates/lives_in", {"cardinality": "many", "description": "homes"})
    put(client, "/api/v1/predicates/email", {"volatility_seconds": 3600})
    assert paris["id"] != rome["id"]


@pytest.fixture
def histories(client_a, client_b) -> None:
    build_history(client_a, admin_key_for(client_a))
    build_history(client_b, admin_key_for(client_b))


def facts_events(agent=None) -> int:
    events = Event.objects.filter(event_type__startswith="facts.")
    return (events.filter(agent=agent) if agent else events).count()


OUTPUT = re.compile(r"^rebuilt facts for (.+): (\d+) events applied in \d+\.\d\d s\n$")


@pytest.mark.django_db(transaction=True)  # real record times: one transaction per request
class TestRebuild:
    def test_the_history_is_varied(self, client_a, histories):
        statuses = set(Fact.objects.values_list("status", flat=True))
        origins = set(Fact.objects.values_list("origin", flat=True))
        assert statuses == {"active", "superseded", "retracted", "contested"}
        assert origins == {"asserted", "split", "corrected", "ended", "accepted"}
        assert Fact.objects.filter(status="contested", superseded_at__isnull=True).exists()
        assert len(set(Fact.objects.values_list("recorded_at", flat=True))) > 10

    def test_rebuild_of_every_agent_equals_what_was_there(self, histories):
        before = snapshot()
        output = rebuild()
        assert OUTPUT.match(output).groups() == ("all agents", str(facts_events()))
        assert snapshot() == before

    def test_rebuild_restores_a_damaged_projection(self, client_a, histories):
        before = snapshot()
        Fact.objects.filter(agent=client_a.agent, status="superseded").update(status="retracted")
        FactEvidence.objects.filter(fact__agent=client_a.agent).delete()
        Predicate.objects.filter(agent=client_a.agent).update(description="tampered")
        assert snapshot() != before
        rebuild()
        assert snapshot() == before

    def test_rebuild_of_one_agent(self, client_a, client_b, histories):
        before = snapshot()
        Fact.objects.filter(agent=client_a.agent, status="active").update(confidence=0.5)
        output = rebuild("--agent", client_a.agent.name)
        assert OUTPUT.match(output).groups() == (
            f"agent {client_a.agent.name}",
            str(facts_events(client_a.agent)),
        )
        assert snapshot() == before

        Fact.objects.filter(agent=client_b.agent, status="active").update(confidence=0.5)
        rebuild("--agent", str(client_b.agent.pk))  # by id
        assert snapshot() == before

    def test_the_api_answers_the_same_after_a_rebuild(self, client_a, histories):
        queries = [
            ("/api/v1/facts/chain", {"subject": "Alice", "predicate": "lives_in"}),
            ("/api/v1/facts/as-of", {"subject": "Bob", "valid_time": T(2022)}),
            ("/api/v1/facts/contested", {}),
            ("/api/v1/graph/paths", {"start": "Alice", "valid_time": T(2021)}),
            ("/api/v1/entities", {}),
        ]

        def answers():
            bodies = [ok(client_a.get(path, params)) for path, params in queries]
            return re.sub(r'"age_seconds": \d+', "", json.dumps(bodies))

        before = answers()
        rebuild()
        assert answers() == before

    def test_rebuild_reproduces_evidence_ids_too(self, histories):
        before = snapshot(with_evidence_ids=True)
        rebuild()
        assert snapshot(with_evidence_ids=True) == before


@pytest.mark.django_db
class TestCommand:
    def test_an_empty_ledger(self):
        AgentFactory(name="quiet")
        assert OUTPUT.match(rebuild()).groups() == ("all agents", "0")

    def test_only_facts_events_are_replayed(self, client_a):
        post(client_a, "/api/v1/events", {"event_type": "user.said"})
        claim(client_a, subject="Alice", predicate="lives_in", value="Paris")
        # an entity, a predicate and the claim; not the user.said event
        assert OUTPUT.match(rebuild()).groups() == ("all agents", "3")

    def test_unknown_projection(self):
        with pytest.raises(
            CommandError, match=r"^no projection named 'nope'; known: (.+, )?facts(, .+)?$"
        ):
            call_command("rebuild_projection", "nope", stdout=StringIO())

    def test_unknown_agent(self):
        with pytest.raises(CommandError, match=r"^no agent 'gamma'$"):
            rebuild("--agent", "gamma")

    def test_unknown_agent_id(self):
        with pytest.raises(
            CommandError, match=r"^no agent '00000000-0000-0000-0000-000000000000'$"
        ):
            rebuild("--agent", "00000000-0000-0000-0000-000000000000")


class TestRegistry:
    def test_facts_registers_its_rebuild(self):
        assert "facts" in projections.names()
        assert projections.get("facts") is services.rebuild_projection

    def test_registering_again_is_harmless_and_a_clash_is_an_error(self):
        projections.register("facts", services.rebuild_projection)
        with pytest.raises(ValueError, match="^projection 'facts' is already registered by "):
            projections.register("facts", lambda *, agent=None: 0)
        assert projections.get("facts") is services.rebuild_projection

    def test_unknown_name(self):
        with pytest.raises(
            LookupError, match=r"^no projection named 'x'; known: (.+, )?facts(, .+)?$"
        ):
            projections.get("x")

    @pytest.mark.parametrize(
        "path", ["ledger/projections.py", "ledger/management/commands/rebuild_projection.py"]
    )
    def test_the_ledger_does_not_import_the_apps_built_on_it(self, path):
        tree = ast.parse((Path(__file__).resolve().parents[2] / path).read_text())
        modules = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert not {m for m in modules if m and m.split(".")[0] in {"facts", "episodes"}}
