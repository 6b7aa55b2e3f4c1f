"""Semantic memory in the admin: every page renders, nothing is edited behind the
services' back, and the operator settles contests through an action."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from facts import services
from facts.models import AuthorityPolicy, Entity, EntityAlias, Fact, Predicate
from facts.services import ClaimInput, Provenance
from facts.tests.api_helpers import facts_state
from ledger.models import Event
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def at(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


def assert_fact(agent, **fields) -> Fact:
    source_type = fields.pop("source_type", "agent_inference")
    applied = services.fact_assert(
        agent=agent,
        claim=ClaimInput(**fields, provenance=Provenance(source_type=source_type)),
    )
    return Fact.objects.get(pk=applied.fact.pk)


@pytest.fixture
def memory() -> dict:
    """Alice lived in Paris from 2020 and in Rome from 2022 (a user said so); a third party
    claims Berlin from 2023 (an open contest); she works for Acme."""
    agent = AgentFactory(name="admin-view")
    services.entity_create(agent=agent, name="Alice", entity_type="person", aliases=["Al"])
    paris = assert_fact(
        agent,
        subject="Alice",
        predicate="lives_in",
        value="Paris",
        valid_from=at(2020),
        source_type="user_statement",
    )
    rome = assert_fact(
        agent,
        subject="Alice",
        predicate="lives_in",
        value="Rome",
        valid_from=at(2022),
        source_type="user_statement",
    )
    berlin = assert_fact(
        agent,
        subject="Alice",
        predicate="lives_in",
        value="Berlin",
        valid_from=at(2023),
        source_type="third_party",
    )
    works = assert_fact(agent, subject="Alice", predicate="works_for", object_entity="Acme")
    services.authority_order_set(agent=agent, order=["user_statement", "operator"])
    return {
        "agent": agent,
        "alice": Entity.objects.get(agent=agent, name="Alice"),
        "paris": paris,
        "split": Fact.objects.get(agent=agent, origin="split"),
        "rome": rome,
        "berlin": berlin,
        "works": works,
        "lives_in": Predicate.objects.get(agent=agent, name="lives_in"),
        "policy": AuthorityPolicy.objects.get(agent=agent),
    }


MODELS = ["entity", "predicate", "fact", "authoritypolicy"]


def changelist(model: str) -> str:
    return reverse(f"admin:facts_{model}_changelist")


@pytest.mark.parametrize(
    ("model", "rows"), [("entity", 2), ("predicate", 2), ("fact", 5), ("authoritypolicy", 1)]
)
def test_changelist(admin_client, memory, model, rows, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):  # list_select_related: no query per row
        response = admin_client.get(changelist(model))
    assert response.status_code == 200
    assert response.context["cl"].result_count == rows


def test_fact_changelist_queries_do_not_grow_with_rows(
    admin_client, memory, django_assert_max_num_queries
):
    agent = memory["agent"]
    with django_assert_max_num_queries(12):
        admin_client.get(changelist("fact"))
    for n in range(20):
        assert_fact(agent, subject=f"E{n}", predicate="works_for", object_entity=f"E{n + 1}")
        assert_fact(agent, subject=f"E{n}", predicate="lives_in", value="x", source_type="operator")
        assert_fact(agent, subject=f"E{n}", predicate="lives_in", value="y")  # a contest
    with django_assert_max_num_queries(12):
        response = admin_client.get(changelist("fact"))
    assert response.context["cl"].result_count == 65


def change_page(model: str, pk) -> str:
    return reverse(f"admin:facts_{model}_change", args=[pk])


@pytest.mark.parametrize(
    ("model", "key"),
    [("entity", "alice"), ("fact", "rome"), ("fact", "works"), ("authoritypolicy", "policy")],
)
def test_change_page_is_view_only(admin_client, memory, model, key):
    response = admin_client.get(change_page(model, memory[key].pk))
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert 'name="_save"' not in response.content.decode()


def test_entity_page_shows_its_aliases(admin_client, memory):
    page = admin_client.get(change_page("entity", memory["alice"].pk)).content.decode()
    for alias in EntityAlias.objects.filter(entity=memory["alice"]):
        assert f"<p>{alias.alias}</p>" in page


def test_fact_page_shows_the_chain_as_a_timeline(admin_client, memory):
    rome = memory["rome"]
    response = admin_client.get(change_page("fact", rome.pk))
    page = response.content.decode()
    timeline = page[page.index('<table class="facts-timeline">') :]
    timeline = timeline[: timeline.index("</table>")]
    versions = list(
        Fact.objects.filter(subject=rome.subject, predicate=rome.predicate).order_by(
            "recorded_at", "valid_from", "id"
        )
    )
    assert len(versions) == 4  # Paris, its remainder, Rome, the Berlin contest
    rows = timeline.split("<tr")[2:]  # after the header row
    assert len(rows) == 4
    for row, version in zip(rows, versions, strict=True):
        valid_to = f"{version.valid_to:%Y-%m-%d %H:%M:%S}" if version.valid_to else "open"
        assert f"[{version.valid_from:%Y-%m-%d %H:%M:%S}, {valid_to})" in row
        assert change_page("fact", version.pk) in row
        assert f"<td>{version.status}</td>" in row
        assert f"<td>{version.origin}</td>" in row
        assert f"&quot;{version.object_value}&quot;" in row
        assert (version.pk == rome.pk) == ("(this)" in row)
    assert "[2020-01-01 00:00:00, 2022-01-01 00:00:00)" in timeline  # the remainder
    assert f'superseded by <a href="{change_page("fact", rome.pk)}">' in timeline
    assert f'contested by <a href="{change_page("fact", memory["berlin"].pk)}">' in timeline
    assert f'contests <a href="{change_page("fact", rome.pk)}">' in timeline
    assert "still believed" in timeline


def test_fact_page_shows_evidence_and_links(admin_client, memory):
    split = memory["split"]
    page = admin_client.get(change_page("fact", split.pk)).content.decode()
    assert f'<a href="{change_page("fact", memory["paris"].pk)}">{memory["paris"].pk}</a>' in page
    assert "Evidence (the claim, and every re-assertion of it)" in page


@pytest.mark.parametrize(
    ("params", "values"),
    [
        ({"contest": "open"}, ["Berlin"]),
        ({"status": "contested"}, ["Berlin"]),
        ({"status": "superseded"}, ["Paris"]),
        ({"origin": "split"}, ["Paris"]),
        ({"authority": "third_party"}, ["Berlin"]),
        ({"q": "works_for"}, [None]),
    ],
)
def test_fact_filters_and_search(admin_client, memory, params, values):
    response = admin_client.get(changelist("fact"), params)
    assert response.status_code == 200
    assert [f.object_value for f in response.context["cl"].result_list] == values


def test_filter_by_predicate_name_across_agents(admin_client, memory):
    other = AgentFactory(name="other")
    assert_fact(other, subject="Bob", predicate="lives_in", value="Lima")
    response = admin_client.get(changelist("fact"), {"predicate": "lives_in"})
    assert response.context["cl"].result_count == 5  # four versions of Alice's, Bob's one
    lookups = [
        choice["display"]
        for spec in response.context["cl"].filter_specs
        if spec.title == "predicate"
        for choice in spec.choices(response.context["cl"])
    ]
    assert lookups == ["All", "lives_in", "works_for"]
    narrowed = admin_client.get(
        changelist("fact"), {"predicate": "lives_in", "agent__id__exact": str(other.pk)}
    )
    assert [f.object_value for f in narrowed.context["cl"].result_list] == ["Lima"]


def test_changelist_names_what_a_contest_challenges(admin_client, memory):
    page = admin_client.get(changelist("fact"), {"contest": "open"}).content.decode()
    assert f'<a href="{change_page("fact", memory["rome"].pk)}">&quot;Rome&quot;</a>' in page
    assert "(user_statement)" in page


# ------------------------------------------------------------------- contest actions


def act(client, action: str, *facts: Fact):
    return client.post(
        changelist("fact") + "?contest=open",
        {"action": action, "_selected_action": [str(f.pk) for f in facts]},
        follow=True,
    )


def test_accept_a_contested_claim(admin_client, admin_user, memory):
    berlin, rome = memory["berlin"], memory["rome"]
    response = act(admin_client, "accept_contests", berlin)
    assert response.status_code == 200
    assert [str(m) for m in response.context["messages"]] == ["Accepted 1 contested claim(s)."]

    event = Event.objects.filter(agent=memory["agent"]).latest("seq")
    assert (event.event_type, event.payload, event.actor, event.authority) == (
        "facts.contest_resolved",
        {"fact_id": str(berlin.pk), "accept": True},
        admin_user.username,
        "operator",
    )
    accepted = Fact.objects.get(source_event=event, origin="accepted")
    assert (accepted.object_value, accepted.status, accepted.authority) == (
        "Berlin",
        "active",
        "operator",
    )
    assert (accepted.valid_from, accepted.valid_to) == (at(2023), None)
    berlin.refresh_from_db()
    assert (berlin.superseded_at is not None, berlin.superseded_by_id) == (True, accepted.pk)
    rome.refresh_from_db()
    assert (rome.status, rome.superseded_by_id) == ("superseded", accepted.pk)
    assert response.context["cl"].result_count == 0  # the queue is empty


def test_reject_a_contested_claim(admin_client, admin_user, memory):
    berlin = memory["berlin"]
    before = Fact.objects.filter(status="active", superseded_at__isnull=True).count()
    response = act(admin_client, "reject_contests", berlin)
    assert [str(m) for m in response.context["messages"]] == ["Rejected 1 contested claim(s)."]
    berlin.refresh_from_db()
    assert (berlin.status, berlin.superseded_at is not None) == ("contested", True)
    assert Fact.objects.filter(status="active", superseded_at__isnull=True).count() == before
    event = Event.objects.filter(agent=memory["agent"]).latest("seq")
    assert (event.payload, event.actor) == (
        {"fact_id": str(berlin.pk), "accept": False},
        admin_user.username,
    )


def test_an_action_on_a_fact_that_is_no_contest_writes_nothing(admin_client, memory):
    before = facts_state()
    rome = memory["rome"]
    response = admin_client.post(
        changelist("fact"),
        {"action": "reject_contests", "_selected_action": [str(rome.pk)]},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == [
        f"Skipped 1: {rome.pk}: fact {rome.pk} is not an open contest"
    ]
    assert facts_state() == before


def test_two_contests_of_one_version_accepting_the_first_settles_the_second(admin_client, memory):
    agent, berlin = memory["agent"], memory["berlin"]
    oslo = assert_fact(
        agent,
        subject="Alice",
        predicate="lives_in",
        value="Oslo",
        valid_from=at(2023),
        source_type="third_party",
    )
    response = act(admin_client, "accept_contests", berlin, oslo)
    messages = [str(m) for m in response.context["messages"]]
    assert messages[0] == "Accepted 1 contested claim(s)."
    assert messages[1].startswith("Skipped 1: ")
    current = Fact.objects.get(
        agent=agent,
        predicate__name="lives_in",
        status="active",
        superseded_at__isnull=True,
        valid_to__isnull=True,
    )
    assert current.object_value in ("Berlin", "Oslo")


def test_staff_without_change_permission_cannot_resolve(client, memory):
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_fact"))
    client.force_login(viewer)
    response = client.get(changelist("fact"))
    assert response.status_code == 200
    assert "accept_contests" not in response.content.decode()
    before = facts_state()
    act(client, "accept_contests", memory["berlin"])
    assert facts_state() == before


# ------------------------------------------------------------------------ predicates


def test_predicate_volatility_and_description_change_through_the_service(
    admin_client, admin_user, memory
):
    predicate = memory["lives_in"]
    url = change_page("predicate", predicate.pk)
    page = admin_client.get(url)
    assert page.status_code == 200
    assert page.context["has_change_permission"] is True
    response = admin_client.post(
        url,
        {"volatility_seconds": "3600", "description": "home city", "cardinality": "many"},
    )
    assert response.status_code == 302
    predicate.refresh_from_db()
    assert (predicate.volatility_seconds, predicate.description, predicate.cardinality) == (
        3600,
        "home city",
        "one",  # read-only here: it changes through the API, which refuses breaking changes
    )
    event = Event.objects.filter(agent=memory["agent"]).latest("seq")
    assert (event.event_type, event.actor, event.payload["volatility_seconds"]) == (
        "facts.predicate_defined",
        admin_user.username,
        3600,
    )


def test_predicate_form_refuses_zero_volatility(admin_client, memory):
    before = facts_state()
    response = admin_client.post(
        change_page("predicate", memory["lives_in"].pk),
        {"volatility_seconds": "0", "description": ""},
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "volatility_seconds": [
            "from 1 second to 3153600000 (a century), or empty for 'never re-check'"
        ]
    }
    assert facts_state() == before


# ------------------------------------------------------------------ nothing by hand


@pytest.mark.parametrize("model", MODELS)
def test_no_add(admin_client, model):
    assert admin_client.get(reverse(f"admin:facts_{model}_add")).status_code == 403


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("entity", "alice"),
        ("predicate", "lives_in"),
        ("fact", "rome"),
        ("authoritypolicy", "policy"),
    ],
)
def test_no_delete(admin_client, memory, model, key):
    before = facts_state()
    url = reverse(f"admin:facts_{model}_delete", args=[memory[key].pk])
    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert facts_state() == before


def test_no_change_of_a_fact_by_post(admin_client, memory):
    before = facts_state()
    response = admin_client.post(change_page("fact", memory["rome"].pk), {"status": "retracted"})
    assert response.status_code == 403
    assert facts_state() == before


@pytest.mark.parametrize("model", MODELS)
def test_no_bulk_delete_action(admin_client, memory, model):
    assert "delete_selected" not in admin_client.get(changelist(model)).content.decode()


def test_admin_index_lists_the_facts_app(admin_client, memory):
    response = admin_client.get(reverse("admin:app_list", args=["facts"]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Facts (semantic memory)" in page
    for model in MODELS:
        assert changelist(model) in page


def test_predicate_example_questions_one_a_line(admin_client, memory):
    predicate = memory["lives_in"]
    url = change_page("predicate", predicate.pk)
    examples = "Where does it live?\r\n\r\n  In which city, or town, is it?  \r\n"
    response = admin_client.post(url, {"description": "", "examples": examples})
    assert response.status_code == 302
    predicate.refresh_from_db()
    assert predicate.examples == ["Where does it live?", "In which city, or town, is it?"]
    page = admin_client.get(url)
    shown = page.context["adminform"].form.initial["examples"]
    assert shown == "Where does it live?\nIn which city, or town, is it?"
    too_long = admin_client.post(url, {"description": "", "examples": "x" * 201})
    assert too_long.status_code == 200
    assert "examples" in too_long.context["adminform"].form.errors
