"""facts.selectors: the four query modes, the contest queue, entity search and graph paths.

The query-mode tests commit (transaction=True) so each write has its own record
time: as_known_at is only meaningful between distinct record times.
"""

import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection

from facts import selectors
from facts.models import Entity, Fact, Predicate
from facts.services import authority_order_set, fact_end, fact_retract
from facts.tests.factories import EntityFactory, PredicateFactory, at, claim, moments
from piper.errors import InvalidInput, NotFound
from piper.provenance import Authority
from piper.tenancy.tests.factories import AgentFactory

OP, AI, TP = Authority.OPERATOR, Authority.AGENT_INFERENCE, Authority.THIRD_PARTY


def values(facts) -> list[tuple]:
    """(value, valid_from, valid_to) of each fact, in the order the selector gave."""
    return [(f.object_value, f.valid_from, f.valid_to) for f in facts]


@pytest.fixture
def history(transactional_db):
    """Alice's `lives_in`, written one call at a time (R1…R7):

    R1 Paris  [2018, 2020)      operator
    R2 Rome   [2021, …)         operator          (a gap: 2020)
    R3 Lima   [2022, …)         agent inference   contested against Rome
    R4 Oslo   [2023, …)         operator          splits Rome, resolves Lima
    R5 Madrid [2019-01, 2019-07) operator (late)  splits Paris in two
    R6 Quito  [2024, …)         agent inference   contested against Oslo (open)
    R7 retract the later part of Paris: [2019-07, 2020) is no longer believed
    """
    agent = AgentFactory(name="historian")
    alice = EntityFactory(agent=agent, name="Alice")
    claim(agent, alice, "lives_in", "Paris", at(2018), at(2020), authority=OP)
    claim(agent, alice, "lives_in", "Rome", at(2021), authority=OP)
    claim(agent, alice, "lives_in", "Lima", at(2022), authority=AI)
    claim(agent, alice, "lives_in", "Oslo", at(2023), authority=OP)
    claim(agent, alice, "lives_in", "Madrid", at(2019), at(2019, 7), authority=OP)
    claim(agent, alice, "lives_in", "Quito", at(2024), authority=AI)
    tail = Fact.objects.get(agent=agent, object_value="Paris", valid_from=at(2019, 7))
    fact_retract(agent=agent, fact_id=tail.pk, reason="she had left already")
    predicate = Predicate.objects.get(agent=agent, name="lives_in")
    return agent, alice, predicate, moments(agent)


class TestQueryModes:
    def test_current(self, history):
        agent, alice, lives_in, _ = history
        (oslo,) = selectors.facts_current(agent=agent, subject=alice, predicate=lives_in)
        assert (oslo.object_value, oslo.valid_from, oslo.valid_to, oslo.authority) == (
            "Oslo",
            at(2023),
            None,
            OP,
        )
        quito = Fact.objects.get(agent=agent, object_value="Quito")
        assert [c.pk for c in oslo.open_contests] == [quito.pk]

    @pytest.mark.parametrize(
        ("moment", "expected"),
        [
            (at(2017), []),
            (at(2018, 6), [("Paris", at(2018), at(2019))]),
            (at(2019, 3), [("Madrid", at(2019), at(2019, 7))]),
            (at(2019, 7), []),  # retracted
            (at(2019, 9), []),
            (at(2020, 6), []),  # never known
            (at(2021), [("Rome", at(2021), at(2023))]),
            (at(2022, 6), [("Rome", at(2021), at(2023))]),  # Lima was contested
            (at(2023), [("Oslo", at(2023), None)]),
            (at(2025), [("Oslo", at(2023), None)]),  # Quito is contested
        ],
    )
    def test_as_of(self, history, moment, expected):
        agent, alice, lives_in, _ = history
        facts = selectors.facts_as_of(
            agent=agent, subject=alice, predicate=lives_in, valid_time=moment
        )
        assert values(facts) == expected

    @pytest.mark.parametrize(
        ("moment", "record", "expected"),
        [
            (at(2019, 9), "before R1", []),
            (at(2019, 9), "R1", [("Paris", at(2018), at(2020))]),
            (at(2019, 9), "R4", [("Paris", at(2018), at(2020))]),
            (at(2019, 9), "R5", [("Paris", at(2019, 7), at(2020))]),
            (at(2019, 9), "R6", [("Paris", at(2019, 7), at(2020))]),
            (at(2019, 9), "R7", []),
            (at(2019, 3), "R4", [("Paris", at(2018), at(2020))]),
            (at(2019, 3), "R5", [("Madrid", at(2019), at(2019, 7))]),
            (at(2022, 6), "R1", []),
            (at(2022, 6), "R2", [("Rome", at(2021), None)]),
            (at(2022, 6), "R3", [("Rome", at(2021), None)]),  # a contest is never believed
            (at(2022, 6), "R4", [("Rome", at(2021), at(2023))]),
            (at(2025), "R3", [("Rome", at(2021), None)]),
            (at(2025), "R4", [("Oslo", at(2023), None)]),
            (at(2025), "R7", [("Oslo", at(2023), None)]),
        ],
    )
    def test_as_known_at(self, history, moment, record, expected):
        agent, alice, lives_in, r = history
        record_time = r["R1"] - timedelta(microseconds=1) if record == "before R1" else r[record]
        facts = selectors.facts_as_known_at(
            agent=agent,
            subject=alice,
            predicate=lives_in,
            valid_time=moment,
            record_time=record_time,
        )
        assert values(facts) == expected

    def test_as_known_at_just_before_a_change_is_the_old_belief(self, history):
        agent, alice, lives_in, r = history
        just_before = r["R4"] - timedelta(microseconds=1)
        facts = selectors.facts_as_known_at(
            agent=agent,
            subject=alice,
            predicate=lives_in,
            valid_time=at(2025),
            record_time=just_before,
        )
        assert values(facts) == [("Rome", at(2021), None)]

    def test_chain_is_every_version_in_record_order_with_its_links(self, history):
        agent, alice, lives_in, r = history
        chain = list(selectors.fact_chain(agent=agent, subject=alice, predicate=lives_in))
        index = {f.pk: n for n, f in enumerate(chain)}

        def link(fact_id):
            return None if fact_id is None else index[fact_id]

        rows = [
            (
                f.object_value,
                f.valid_from,
                f.valid_to,
                f.recorded_at,
                f.superseded_at,
                f.status,
                f.origin,
                f.authority,
                link(f.supersedes_id),
                link(f.superseded_by_id),
                link(f.contests_id),
                [link(c.pk) for c in f.open_contests],
            )
            for f in chain
        ]
        R = r
        assert rows == [
            ("Paris", at(2018), at(2020), R["R1"], R["R5"], "superseded", "asserted", OP, None, 6, None, []),
            ("Rome", at(2021), None, R["R2"], R["R4"], "superseded", "asserted", OP, None, 4, None, []),
            ("Lima", at(2022), None, R["R3"], R["R4"], "contested", "asserted", AI, None, 4, 1, []),
            ("Rome", at(2021), at(2023), R["R4"], None, "active", "split", OP, 1, None, None, []),
            ("Oslo", at(2023), None, R["R4"], None, "active", "asserted", OP, 1, None, None, [8]),
            ("Paris", at(2018), at(2019), R["R5"], None, "active", "split", OP, 0, None, None, []),
            ("Madrid", at(2019), at(2019, 7), R["R5"], None, "active", "asserted", OP, 0, None, None, []),
            ("Paris", at(2019, 7), at(2020), R["R5"], R["R7"], "retracted", "split", OP, 0, None, None, []),
            ("Quito", at(2024), None, R["R6"], None, "contested", "asserted", AI, None, None, 4, []),
        ]  # fmt: skip
        # Provenance comes with every version, without another query.
        assert {f.source_event.event_type for f in chain} == {"facts.asserted"}
        assert {(f.subject.name, f.predicate.name) for f in chain} == {("Alice", "lives_in")}

    def test_contested_queue(self, history):
        agent, _, _, _ = history
        bob = EntityFactory(agent=agent, name="Bob")
        claim(agent, bob, "lives_in", "Bern", at(2020), authority=OP)
        bern_contest = claim(agent, bob, "lives_in", "Cork", at(2021), authority=TP).fact
        quito = Fact.objects.get(agent=agent, object_value="Quito")
        assert [f.pk for f in selectors.contested_queue(agent=agent)] == [quito.pk, bern_contest.pk]

    def test_all_predicates_of_a_subject(self, history):
        agent, alice, _, _ = history
        claim(agent, alice, "age", 30, at(2020))
        claim(agent, alice, "speaks", "French", at(2000), cardinality="many")
        claim(agent, alice, "speaks", "Dutch", at(2010))
        facts = selectors.facts_as_of(
            agent=agent, subject=alice, predicate=None, valid_time=at(2025)
        )
        assert [(f.predicate.name, f.object_value) for f in facts] == [
            ("age", 30),
            ("lives_in", "Oslo"),
            ("speaks", "French"),
            ("speaks", "Dutch"),
        ]
        assert [
            f.object_value
            for f in selectors.facts_current(agent=agent, subject=alice, predicate=None)
        ] == [30, "Oslo", "French", "Dutch"]

    def test_an_ended_value_is_not_current_but_still_as_of(self, history):
        agent, alice, _, _ = history
        age = claim(agent, alice, "age", 30, at(2020)).fact
        fact_end(agent=agent, fact_id=age.pk, valid_to=at(2021))
        age_predicate = Predicate.objects.get(agent=agent, name="age")
        assert (
            list(selectors.facts_current(agent=agent, subject=alice, predicate=age_predicate)) == []
        )
        assert [
            f.object_value
            for f in selectors.facts_as_of(
                agent=agent, subject=alice, predicate=age_predicate, valid_time=at(2020, 6)
            )
        ] == [30]

    def test_reads_take_a_fixed_number_of_queries(self, history, django_assert_num_queries):
        agent, alice, lives_in, _ = history
        with django_assert_num_queries(1):  # the versions, their links and open contests
            chain = list(selectors.fact_chain(agent=agent, subject=alice, predicate=lives_in))
            for fact in chain:
                _ = (fact.subject.name, fact.predicate.name, fact.source_event.authority)
                _ = (fact.object_entity, fact.open_contests)
        assert len(chain) == 9


# ------------------------------------------------------------------ entities


@pytest.mark.django_db
class TestEntities:
    def test_entity_get_and_resolve(self):
        agent = AgentFactory()
        robert = EntityFactory(agent=agent, name="Robert", aliases=["Bob"])
        assert selectors.entity_get(agent=agent, entity_id=robert.pk) == robert
        for ref in (robert.pk, str(robert.pk), "robert", "BOB"):
            assert selectors.entity_resolve(agent=agent, ref=ref) == robert
        with pytest.raises(NotFound) as caught:
            selectors.entity_resolve(agent=agent, ref="Roberta")
        assert caught.value.message == "no entity named 'Roberta'"
        missing = uuid.uuid4()
        with pytest.raises(NotFound) as caught:
            selectors.entity_get(agent=agent, entity_id=missing)
        assert caught.value.message == f"entity {missing} not found"

    def test_entity_list_is_newest_first(self):
        agent = AgentFactory()
        names = ["Alice", "Bob", "Carol"]
        for name in names:
            EntityFactory(agent=agent, name=name)
            time.sleep(0.002)  # ids are UUIDv7: time-ordered to the millisecond
        assert [e.name for e in selectors.entity_list(agent=agent)] == names[::-1]

    def test_predicates(self):
        agent = AgentFactory()
        for name in ["lives_in", "age"]:
            PredicateFactory(agent=agent, name=name)
        assert [p.name for p in selectors.predicate_list(agent=agent)] == ["age", "lives_in"]
        assert selectors.predicate_get(agent=agent, name="age").name == "age"
        with pytest.raises(NotFound) as caught:
            selectors.predicate_get(agent=agent, name="height")
        assert caught.value.message == "no predicate named 'height'"


@pytest.mark.django_db
class TestEntitySearch:
    @pytest.fixture
    def agent(self):
        agent = AgentFactory()
        for name, aliases in [
            ("Alice.", ()),
            ("Alice Smith", ()),
            ("Alicia", ()),
            ("Alice", ()),
            ("Bob", ()),
            ("Robert", ("Bobby",)),
            ("Zed", ()),
        ]:
            EntityFactory(agent=agent, name=name, aliases=aliases)
        return agent

    def search(self, agent, query, **kwargs):
        return [
            (m.entity.name, m.alias, m.similarity)
            for m in selectors.entity_search(agent=agent, query=query, **kwargs)
        ]

    def test_exact_name_first_then_by_similarity(self, agent):
        # "Alice." has every trigram of "alice" (similarity 1.0), but is not the name asked for.
        assert self.search(agent, "ALICE") == [
            ("Alice", "Alice", 1.0),
            ("Alice.", "Alice.", 1.0),
            ("Alice Smith", "Alice Smith", 0.5),
            ("Alicia", "Alicia", 0.4444),
        ]

    def test_fuzzy(self, agent):
        found = self.search(agent, "Alise")
        # Equal scores come in no promised order.
        assert sorted(found[:2]) == [("Alice", "Alice", 0.3333), ("Alice.", "Alice.", 0.3333)]
        assert found[2:] == [("Alicia", "Alicia", 0.3)]
        assert self.search(agent, "smith") == [("Alice Smith", "Alice Smith", 0.5)]
        assert self.search(agent, "xyz") == []

    def test_prefix(self, agent):
        names = [name for name, _, _ in self.search(agent, "ali")]
        assert sorted(names) == ["Alice", "Alice Smith", "Alice.", "Alicia"]

    def test_an_alias_finds_its_entity_once(self, agent):
        assert self.search(agent, "bob") == [("Bob", "Bob", 1.0), ("Robert", "Bobby", 0.4286)]
        assert self.search(agent, "bobby") == [("Robert", "Bobby", 1.0), ("Bob", "Bob", 0.4286)]

    def test_limit(self, agent):
        assert [name for name, _, _ in self.search(agent, "alice", limit=2)] == ["Alice", "Alice."]

    @pytest.mark.parametrize("query", ["", "   "])
    def test_an_empty_query_is_refused(self, agent, query):
        with pytest.raises(InvalidInput) as caught:
            selectors.entity_search(agent=agent, query=query)
        assert caught.value.details == {"q": ["required"]}

    @pytest.mark.parametrize("query", ["%", "_", "z_d"])
    def test_like_wildcards_are_literal(self, agent, query):
        assert self.search(agent, query) == []

    def test_another_agents_names_are_never_found(self, agent):
        other = AgentFactory()
        EntityFactory(agent=other, name="Alice")
        assert [name for name, _, _ in self.search(other, "alice")] == ["Alice"]
        assert [m.entity.agent_id for m in selectors.entity_search(agent=other, query="ali")] == [
            other.pk
        ]
        assert self.search(AgentFactory(), "alice") == []


# ----------------------------------------------------------------------- graph


@pytest.fixture
def graph(db):
    """Relations, all from 2020 unless said:

    Ann -knows-> Ben -knows-> Cat -knows-> Dan -knows-> Eve
    Cat -knows-> Ann                       (a cycle)
    Ben -knows-> Fay  only during 2020     (ended)
    Ann -works_for-> Acme -located_in-> Oslo
    """
    agent = AgentFactory(name="grapher")

    def relate(subject, predicate, target, *, valid_to=None, authority=AI):
        return claim(
            agent,
            subject,
            predicate,
            object_entity=target,
            valid_from=at(2020),
            valid_to=valid_to,
            authority=authority,
            cardinality="many",
        ).fact

    facts = {
        "ann-ben": relate("Ann", "knows", "Ben"),
        "ben-cat": relate("Ben", "knows", "Cat"),
        "cat-dan": relate("Cat", "knows", "Dan"),
        "dan-eve": relate("Dan", "knows", "Eve"),
        "cat-ann": relate("Cat", "knows", "Ann"),
        "ben-fay": relate("Ben", "knows", "Fay", valid_to=at(2021)),
        "ann-acme": relate("Ann", "works_for", "Acme"),
        "acme-oslo": relate("Acme", "located_in", "Oslo"),
    }
    entities = {e.name: e for e in Entity.objects.filter(agent=agent)}
    return agent, entities, facts


def walk(agent, entities, start, **kwargs):
    if "end" in kwargs:
        kwargs["end"] = entities[kwargs["end"]]
    if "predicates" in kwargs:
        kwargs["predicates"] = [
            Predicate.objects.get(agent=agent, name=name) for name in kwargs["predicates"]
        ]
    return selectors.graph_paths(agent=agent, start=entities[start], **kwargs)


def names(paths) -> list[list[str]]:
    return [[e.name for e in path.entities] for path in paths]


class TestGraphPaths:
    def test_paths_from_a_start_shortest_first(self, graph):
        agent, entities, facts = graph
        paths = walk(agent, entities, "Ann", max_hops=2)
        assert sorted(names(paths)[:2]) == [["Ann", "Acme"], ["Ann", "Ben"]]
        assert sorted(names(paths)[2:]) == [["Ann", "Acme", "Oslo"], ["Ann", "Ben", "Cat"]]

    def test_each_path_carries_its_facts_as_evidence(self, graph):
        agent, entities, facts = graph
        (path,) = walk(agent, entities, "Ann", end="Eve", max_hops=4)
        assert [e.name for e in path.entities] == ["Ann", "Ben", "Cat", "Dan", "Eve"]
        assert [f.pk for f in path.facts] == [
            facts["ann-ben"].pk,
            facts["ben-cat"].pk,
            facts["cat-dan"].pk,
            facts["dan-eve"].pk,
        ]
        assert [f.predicate.name for f in path.facts] == ["knows"] * 4
        assert all(f.source_event.event_type == "facts.asserted" for f in path.facts)

    @pytest.mark.parametrize(
        ("end", "min_hops", "max_hops", "expected"),
        [
            ("Eve", 1, 3, []),
            ("Eve", 4, 4, [["Ann", "Ben", "Cat", "Dan", "Eve"]]),
            ("Dan", 2, 4, [["Ann", "Ben", "Cat", "Dan"]]),
            ("Dan", 1, 2, []),
            ("Cat", 2, 2, [["Ann", "Ben", "Cat"]]),
            ("Cat", 3, 4, []),
            ("Oslo", 2, 3, [["Ann", "Acme", "Oslo"]]),
        ],
    )
    def test_hop_bounds_and_end(self, graph, end, min_hops, max_hops, expected):
        agent, entities, _ = graph
        paths = walk(agent, entities, "Ann", end=end, min_hops=min_hops, max_hops=max_hops)
        assert names(paths) == expected

    def test_a_predicate_path_fixes_each_hop(self, graph):
        agent, entities, _ = graph
        assert names(walk(agent, entities, "Ann", predicates=["works_for", "located_in"])) == [
            ["Ann", "Acme", "Oslo"]
        ]
        assert names(walk(agent, entities, "Ann", predicates=["knows", "knows", "knows"])) == [
            ["Ann", "Ben", "Cat", "Dan"]
        ]
        assert names(walk(agent, entities, "Ann", predicates=["knows", "located_in"])) == []

    def test_no_entity_twice_in_a_path(self, graph):
        agent, entities, _ = graph
        paths = walk(agent, entities, "Ann", min_hops=1, max_hops=4)
        for path in names(paths):
            assert len(path) == len(set(path))
        assert ["Ann", "Ben", "Cat", "Ann"] not in names(paths)
        assert names(walk(agent, entities, "Cat", end="Cat", max_hops=4)) == []

    def test_valid_time(self, graph):
        agent, entities, _ = graph
        assert names(walk(agent, entities, "Ben", end="Fay", valid_time=at(2020, 6))) == [
            ["Ben", "Fay"]
        ]
        # Ended before now (and on its end instant): not walked.
        assert names(walk(agent, entities, "Ben", end="Fay")) == []
        assert names(walk(agent, entities, "Ben", end="Fay", valid_time=at(2021))) == []
        # Before any relation held, there is no path at all.
        assert walk(agent, entities, "Ann", valid_time=at(2019)) == []

    def test_only_believed_relations_are_walked(self, graph):
        agent, entities, facts = graph
        fact_retract(agent=agent, fact_id=facts["ben-cat"].pk, reason="never met")
        authority_order_set(agent=agent, order=[OP])
        claim(agent, "Dan", "mentor", object_entity="Eve", valid_from=at(2020), authority=OP)
        claim(agent, "Dan", "mentor", object_entity="Ann", valid_from=at(2020), authority=TP)
        assert names(walk(agent, entities, "Ann", end="Dan", max_hops=4)) == []
        assert names(walk(agent, entities, "Dan", predicates=["mentor"])) == [["Dan", "Eve"]]

    def test_a_value_fact_is_not_an_edge(self, graph):
        agent, entities, _ = graph
        claim(agent, "Ann", "nickname", "Ben", at(2020))
        assert sorted(names(walk(agent, entities, "Ann", max_hops=1))) == [
            ["Ann", "Acme"],
            ["Ann", "Ben"],
        ]

    def test_limit(self, graph):
        agent, entities, _ = graph
        assert len(walk(agent, entities, "Ann", max_hops=4, limit=3)) == 3

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"min_hops": 0},
            {"max_hops": 5},
            {"min_hops": 3, "max_hops": 2},
            {"predicates": ["knows"] * 5},
        ],
    )
    def test_hop_bounds_are_validated(self, graph, kwargs):
        agent, entities, _ = graph
        with pytest.raises(InvalidInput) as caught:
            walk(agent, entities, "Ann", **kwargs)
        assert caught.value.details == {"max_hops": ["at most 4"]}

    def test_another_agents_graph_is_never_walked(self, graph):
        agent, entities, _ = graph
        other = AgentFactory()
        # The other agent has its own Ann who knows its own Zoe.
        claim(other, "Ann", "knows", object_entity="Zoe", valid_from=at(2020))
        their_ann = Entity.objects.get(agent=other, name="Ann")
        assert names(selectors.graph_paths(agent=other, start=their_ann, max_hops=4)) == [
            ["Ann", "Zoe"]
        ]
        # Handed this agent's entity, the other agent walks nothing of it.
        assert selectors.graph_paths(agent=other, start=entities["Ann"], max_hops=4) == []
        assert (
            selectors.graph_paths(agent=other, start=their_ann, end=entities["Ben"], max_hops=4)
            == []
        )


# -------------------------------------------------------------------- tenancy


@pytest.mark.django_db
class TestIsolation:
    def test_another_agent_never_reads_these_rows(self):
        owner, other = AgentFactory(), AgentFactory()
        alice = EntityFactory(agent=owner, name="Alice")
        claim(owner, alice, "lives_in", "Paris", at(2020), authority=OP)
        contest = claim(owner, alice, "lives_in", "Rome", at(2021)).fact
        lives_in = Predicate.objects.get(agent=owner, name="lives_in")
        reads = [
            selectors.facts_current(agent=other, subject=alice, predicate=lives_in),
            selectors.facts_current(agent=other, subject=alice, predicate=None),
            selectors.facts_as_of(
                agent=other, subject=alice, predicate=lives_in, valid_time=at(2022)
            ),
            selectors.facts_as_known_at(
                agent=other,
                subject=alice,
                predicate=lives_in,
                valid_time=at(2022),
                record_time=at(2100),
            ),
            selectors.fact_chain(agent=other, subject=alice, predicate=lives_in),
            selectors.contested_queue(agent=other),
            selectors.entity_list(agent=other),
            selectors.predicate_list(agent=other),
        ]
        assert [list(r) for r in reads] == [[]] * len(reads)
        for call in [
            lambda: selectors.fact_get(agent=other, fact_id=contest.pk),
            lambda: selectors.entity_get(agent=other, entity_id=alice.pk),
            lambda: selectors.entity_resolve(agent=other, ref=str(alice.pk)),
            lambda: selectors.entity_resolve(agent=other, ref="Alice"),
            lambda: selectors.predicate_get(agent=other, name="lives_in"),
        ]:
            with pytest.raises(NotFound):
                call()
        # The owner still sees everything.
        assert selectors.fact_get(agent=owner, fact_id=contest.pk).pk == contest.pk

    def test_not_found_reads_the_same_for_theirs_and_missing(self):
        owner, other = AgentFactory(), AgentFactory()
        fact = claim(owner, "Alice", "lives_in", "Paris", at(2020)).fact
        missing = uuid.uuid4()
        messages = []
        for fact_id in (fact.pk, missing):
            with pytest.raises(NotFound) as caught:
                selectors.fact_get(agent=other, fact_id=fact_id)
            messages.append(caught.value.message.replace(str(fact_id), "<id>"))
        assert messages == ["fact <id> not found"] * 2


@pytest.mark.django_db
def test_search_uses_the_trigram_index():
    """entity_search's condition is the one facts_alias_trgm serves (lower(alias) gin_trgm_ops)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'facts_alias_trgm'")
        (definition,) = cursor.fetchone()
    assert "gin (lower((alias)::text) gin_trgm_ops)" in definition


class TestOneStatementLookup:
    """facts_valid_at_by_ref (the API's path for one predicate) answers exactly
    what entity_resolve + predicate_get + facts_as_of answer, in one query."""

    @staticmethod
    def _same(fast, slow):
        assert [f.pk for f in fast] == [f.pk for f in slow]
        for a, b in zip(fast, slow, strict=True):
            for name in ("object_value", "object_entity_id", "valid_from", "valid_to", "status"):
                assert getattr(a, name) == getattr(b, name)
            assert [c.pk for c in a.open_contests] == [c.pk for c in b.open_contests]
            assert (a.subject.name, a.predicate.name) == (b.subject.name, b.predicate.name)
            assert a.source_event.source_ref == b.source_event.source_ref
            assert a.source_event.session_id == b.source_event.session_id

    def test_equals_the_orm_path_at_every_moment(self, history, django_assert_num_queries):
        agent, alice, lives_in, _ = history
        for moment in [at(y, m) for y in range(2017, 2026) for m in (1, 4, 8)]:
            slow = list(
                selectors.facts_as_of(
                    agent=agent, subject=alice, predicate=lives_in, valid_time=moment
                )
            )
            for ref in ("Alice", "aLiCe", str(alice.pk)):  # by name in any case, by id
                # one statement; three when nothing is believed (which 404, if any?)
                with django_assert_num_queries(1 if slow else 3):
                    subject, predicate, fast = selectors.facts_valid_at_by_ref(
                        agent=agent, subject_ref=ref, predicate_name="lives_in", valid_time=moment
                    )
                assert (subject.pk, predicate.pk) == (alice.pk, lives_in.pk)
                self._same(fast, slow)
        # the open contest (Quito against Oslo) travels with the current version
        _, _, (oslo,) = selectors.facts_valid_at_by_ref(
            agent=agent, subject_ref="Alice", predicate_name="lives_in"
        )
        assert oslo.object_value == "Oslo" and len(oslo.open_contests) == 1

    def test_relations_carry_their_object_entity(self, transactional_db):
        agent = AgentFactory(name="relations")
        claim(agent, "Ada", "works_at", valid_from=at(2020), object_entity="Analytical Engines")
        _, _, (fact,) = selectors.facts_valid_at_by_ref(
            agent=agent, subject_ref="ada", predicate_name="works_at"
        )
        assert fact.object_entity.name == "Analytical Engines" and fact.object_value is None

    def test_unknown_names_and_other_agents(self, history):
        agent, alice, _, _ = history
        with pytest.raises(NotFound, match="no entity named 'Bob'"):
            selectors.facts_valid_at_by_ref(
                agent=agent, subject_ref="Bob", predicate_name="lives_in"
            )
        with pytest.raises(NotFound, match="no predicate named 'owns'"):
            selectors.facts_valid_at_by_ref(agent=agent, subject_ref="Alice", predicate_name="owns")
        stranger = AgentFactory(name="stranger")
        for ref in ("Alice", str(alice.pk)):
            with pytest.raises(NotFound):
                selectors.facts_valid_at_by_ref(
                    agent=stranger, subject_ref=ref, predicate_name="lives_in"
                )
        # known subject and predicate, nothing believed at that moment: empty, not 404
        subject, _, facts = selectors.facts_valid_at_by_ref(
            agent=agent, subject_ref="Alice", predicate_name="lives_in", valid_time=at(2010)
        )
        assert subject.pk == alice.pk and facts == []
