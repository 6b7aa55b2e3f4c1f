"""What PostgreSQL itself enforces on the facts tables, whatever the writer does.

Rows here are made by hand (ORM or raw SQL), on purpose: these tests prove the
database refuses what the services are merely careful not to do.
"""

import uuid
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from facts.models import AuthorityPolicy, EntityAlias, Fact, FactEvidence, Predicate
from facts.tests.factories import EntityFactory, PredicateFactory, at, claim
from ledger.models import Event
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

EXCLUSION = "facts_one_believed_value_at_a_time"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def world():
    agent = AgentFactory()
    subject = EntityFactory(agent=agent, name="Alice")
    predicate = PredicateFactory(agent=agent, name="lives_in")
    return agent, subject, predicate, Event.objects.filter(agent=agent).first()


def fact_row(world, **fields) -> Fact:
    """A believed single-valued version; `fields` override any column."""
    agent, subject, predicate, event = world
    values = dict(
        id=uuid.uuid4(),
        agent=agent,
        subject=subject,
        predicate=predicate,
        object_value="Paris",
        valid_from=at(2020),
        valid_to=None,
        recorded_at=NOW,
        status="active",
        origin="asserted",
        single_valued=True,
        authority="agent_inference",
        confidence=1.0,
        source_event=event,
        last_confirmed_at=NOW,
    )
    values.update(fields)
    return Fact(**values)


def insert(fact: Fact) -> None:
    with transaction.atomic():
        fact.save(force_insert=True)


def run_sql(sql: str, params=()) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


class TestOneBelievedValueAtATime:
    @pytest.mark.parametrize(
        ("first", "second"),
        [
            ((at(2020), None), (at(2021), None)),
            ((at(2020), at(2022)), (at(2021), at(2023))),
            ((at(2020), at(2022)), (at(2020), at(2022))),
            ((at(2020), at(2022)), (at(2020, 6), at(2020, 7))),
            ((at(2020), None), (at(2019), at(2020, 1, 2))),
        ],
        ids=["open-open", "crossing", "identical", "inside", "touching-the-start"],
    )
    def test_an_orm_overlap_is_refused(self, world, first, second):
        insert(fact_row(world, valid_from=first[0], valid_to=first[1]))
        with pytest.raises(IntegrityError, match=EXCLUSION):
            insert(fact_row(world, object_value="Rome", valid_from=second[0], valid_to=second[1]))
        assert Fact.objects.count() == 1

    def test_a_raw_sql_overlap_with_a_service_made_version_is_refused(self, world):
        agent, subject, predicate, event = world
        believed = claim(agent, subject, predicate, "Paris", at(2020)).fact
        with pytest.raises(IntegrityError, match=EXCLUSION):
            run_sql(
                "INSERT INTO facts_fact (id, agent_id, subject_id, predicate_id, object_value, "
                "valid_from, valid_to, recorded_at, superseded_at, status, origin, single_valued, "
                "authority, confidence, source_event_id, last_confirmed_at) VALUES "
                "(gen_random_uuid(), %s, %s, %s, '\"Rome\"', '2022-01-01Z', NULL, now(), NULL, "
                "'active', 'asserted', true, 'operator', 1, %s, now())",
                [agent.pk, subject.pk, predicate.pk, event.pk],
            )
        assert list(Fact.objects.values_list("id", flat=True)) == [believed.pk]

    def test_reopening_a_closed_version_over_a_believed_one_is_refused(self, world):
        agent, subject, predicate, _ = world
        old = claim(agent, subject, predicate, "Paris", at(2020)).fact
        claim(agent, subject, predicate, "Rome", at(2020))
        with pytest.raises(IntegrityError, match=EXCLUSION):
            run_sql(
                "UPDATE facts_fact SET status = 'active', superseded_at = NULL, "
                "superseded_by_id = NULL WHERE id = %s",
                [old.pk],
            )

    def test_stretching_a_version_over_its_neighbour_is_refused(self, world):
        agent, subject, predicate, _ = world
        claim(agent, subject, predicate, "Paris", at(2020))
        claim(agent, subject, predicate, "Rome", at(2022))
        earlier = Fact.objects.get(object_value="Paris", superseded_at__isnull=True)
        with pytest.raises(IntegrityError, match=EXCLUSION), transaction.atomic():
            Fact.objects.filter(pk=earlier.pk).update(valid_to=at(2023))

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            ({"valid_to": at(2021)}, {"valid_from": at(2021)}),
            ({}, {"status": "contested"}),
            ({}, {"status": "contested", "superseded_at": NOW}),
            ({}, {"status": "superseded", "superseded_at": NOW}),
            ({}, {"status": "retracted", "superseded_at": NOW}),
            ({}, {"superseded_at": NOW}),
            ({"single_valued": False}, {"single_valued": False}),
        ],
        ids=[
            "adjacent",
            "contested",
            "closed-contest",
            "superseded",
            "retracted",
            "closed",
            "many-valued",
        ],
    )
    def test_allowed_beside_a_believed_version(self, world, first, second):
        insert(fact_row(world, **first))
        insert(fact_row(world, object_value="Rome", **second))
        assert Fact.objects.count() == 2

    def test_other_subjects_predicates_and_agents_are_independent(self, world):
        agent, subject, predicate, _ = world
        insert(fact_row(world))
        insert(fact_row(world, subject=EntityFactory(agent=agent, name="Bob")))
        insert(fact_row(world, predicate=PredicateFactory(agent=agent, name="works_in")))
        other = AgentFactory()
        insert(
            fact_row(
                world,
                agent=other,
                subject=EntityFactory(agent=other, name="Alice"),
                predicate=PredicateFactory(agent=other, name="lives_in"),
            )
        )
        assert Fact.objects.count() == 4


class TestFactChecks:
    @pytest.mark.parametrize(
        ("fields", "constraint"),
        [
            ({"valid_to": at(2020)}, "facts_valid_to_after_valid_from"),
            ({"valid_to": at(2019)}, "facts_valid_to_after_valid_from"),
            ({"object_value": None}, "facts_value_xor_entity"),
            ({"object_entity": "subject"}, "facts_value_xor_entity"),
            ({"status": "superseded"}, "facts_superseded_is_closed"),
            ({"status": "retracted"}, "facts_retracted_is_closed"),
            ({"status": "deleted"}, "facts_status_known"),
            ({"confidence": 1.01}, "facts_confidence_0_1"),
            ({"confidence": -0.01}, "facts_confidence_0_1"),
            (
                {"superseded_at": datetime(2025, 12, 31, tzinfo=UTC)},
                "facts_superseded_after_recorded",
            ),
        ],
    )
    def test_check_constraints(self, world, fields, constraint):
        if fields.get("object_entity") == "subject":
            fields = {"object_entity": world[1]}  # both a value and an entity
        with pytest.raises(IntegrityError, match=constraint):
            insert(fact_row(world, **fields))
        assert not Fact.objects.exists()

    def test_a_relation_has_no_value(self, world):
        insert(fact_row(world, object_value=None, object_entity=world[1]))
        assert Fact.objects.get().object_entity_id == world[1].pk

    def test_closed_at_its_own_record_time_is_allowed(self, world):
        insert(fact_row(world, status="superseded", superseded_at=NOW))
        assert Fact.objects.get().superseded_at == NOW

    def test_evidence_is_recorded_once_per_event(self, world):
        agent, subject, predicate, _ = world
        fact = claim(agent, subject, predicate, "Paris", at(2020)).fact
        existing = FactEvidence.objects.get(fact=fact)
        with pytest.raises(IntegrityError, match="facts_evidence_once"), transaction.atomic():
            FactEvidence.objects.create(
                id=uuid.uuid4(), fact=fact, event=existing.event, recorded_at=NOW
            )


def insert_checked(fact: Fact) -> None:
    """insert(), with the deferred foreign keys checked now rather than at commit."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        fact.save(force_insert=True)


class TestReferences:
    """A fact's subject, predicate and object are checked by the composite
    (agent_id, …) keys alone: the single-column keys Django would add are gone."""

    @pytest.mark.parametrize(
        ("field", "constraint"),
        [
            ("subject", "facts_fact_subject_same_agent"),
            ("predicate", "facts_fact_predicate_same_agent"),
            ("object_entity", "facts_fact_object_same_agent"),
        ],
    )
    def test_an_unknown_or_foreign_reference_is_refused(self, world, field, constraint):
        other = AgentFactory()
        theirs = (
            PredicateFactory(agent=other, name="lives_in")
            if field == "predicate"
            else EntityFactory(agent=other, name="Alice")
        )
        extra = {"object_value": None} if field == "object_entity" else {}
        for target_id in (theirs.pk, uuid.uuid4()):
            with pytest.raises(IntegrityError, match=constraint):
                insert_checked(fact_row(world, **{f"{field}_id": target_id}, **extra))
        assert not Fact.objects.exists()

    def test_a_version_link_to_a_missing_version_is_refused(self, world):
        for field in ("supersedes_id", "superseded_by_id", "contests_id"):
            with pytest.raises(IntegrityError, match=f"facts_fact_{field}_"):
                insert_checked(fact_row(world, **{field: uuid.uuid4()}))

    def test_the_indexes_are_the_ones_queries_use(self):
        """Each index costs an entry per row version written; Django's automatic
        foreign-key indexes are off (migration 0006 says why for each)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT tablename, indexname FROM pg_indexes "
                "WHERE tablename IN ('facts_fact', 'facts_factevidence') ORDER BY 1, 2"
            )
            rows = cursor.fetchall()
        assert rows == [
            ("facts_fact", "facts_believed_idx"),
            ("facts_fact", "facts_contests_idx"),
            ("facts_fact", "facts_fact_pkey"),
            ("facts_fact", "facts_fact_predicate_id_53b5fa2f"),
            ("facts_fact", "facts_object_entity_fk_idx"),
            ("facts_fact", "facts_object_entity_idx"),
            ("facts_fact", "facts_one_believed_value_at_a_time"),
            ("facts_fact", "facts_open_contests_idx"),
            ("facts_fact", "facts_superseded_by_idx"),
            ("facts_fact", "facts_supersedes_idx"),
            ("facts_fact", "facts_versions_idx"),
            ("facts_factevidence", "facts_evidence_once"),
            ("facts_factevidence", "facts_factevidence_pkey"),
        ]


class TestNames:
    def test_an_alias_is_unique_per_agent_case_insensitively(self, world):
        agent, alice, _, event = world
        bob = EntityFactory(agent=agent, name="Bob")
        with pytest.raises(IntegrityError, match="facts_alias_unique_ci"), transaction.atomic():
            EntityAlias.objects.create(
                id=uuid.uuid4(),
                agent=agent,
                entity=bob,
                alias="ALICE",
                created_at=NOW,
                source_event=event,
            )
        other = AgentFactory()
        theirs = EntityFactory(agent=other, name="Carol")
        EntityAlias.objects.create(
            id=uuid.uuid4(),
            agent=other,
            entity=theirs,
            alias="alice",
            created_at=NOW,
            source_event=event,
        )

    def test_a_predicate_name_is_unique_per_agent(self, world):
        agent, _, _, event = world
        with pytest.raises(IntegrityError, match="facts_predicate_unique"), transaction.atomic():
            Predicate.objects.create(
                id=uuid.uuid4(), agent=agent, name="lives_in", created_at=NOW, source_event=event
            )
        Predicate.objects.create(
            id=uuid.uuid4(),
            agent=AgentFactory(),
            name="lives_in",
            created_at=NOW,
            source_event=event,
        )

    def test_an_authority_policy_lists_known_levels_only(self, world):
        agent, _, _, event = world
        with pytest.raises(IntegrityError, match="facts_policy_known_levels"), transaction.atomic():
            AuthorityPolicy.objects.create(
                agent=agent, order=["operator", "god"], updated_at=NOW, source_event=event
            )


def test_models_and_migrations_agree():
    out = StringIO()
    call_command("makemigrations", "facts", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
