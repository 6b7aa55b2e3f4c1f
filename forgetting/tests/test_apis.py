"""POST /api/v1/erasure and its receipts, end to end against the real stores.

Every erasure here is checked from outside (the API answers 404, search and
recall no longer find it), from inside (no row anywhere made from the erased
events, the ledger holds tombstones and still verifies), for collateral (what
was not asked stays, another agent's identical memories included), and for
regeneration (rebuilds, the embedding backlog, a retried write).
"""

from __future__ import annotations

import uuid

import pytest
from django.db.models import TextField
from django.db.models.functions import Cast

from conftest import make_client
from episodes.models import Episode, SourceChunk
from episodes.services import rebuild_projection as episodes_rebuild
from episodes.tasks import embed_backlog
from facts.models import Entity, Fact, FactText
from forgetting.models import Erasure
from forgetting.tests.world import BACKUP, DOCUMENT, MOVED, build
from intentions.models import Intention, WorkingState
from ledger.models import Event, Source
from ledger.selectors import chain_verify
from ledger.tests.helpers import error, ledger_state
from piper.tenancy.models import Scope
from recall.models import RecallFeedback, RetrievalTrace

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

URL = "/api/v1/erasure"


@pytest.fixture
def admin():
    return make_client("eraser", scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN))


@pytest.fixture
def other():
    return make_client("bystander", scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN))


def erase(client, **body):
    return client.post(URL, {"reason": "data subject request 17", **body}, format="json")


def created(response) -> dict:
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["residue_found"]) == ("completed", 0), [
        f for f in body["residue"] if f["found"]
    ]
    return body


def everything(agent) -> dict:
    """Every row the erasure could touch, by table, for 'nothing else changed'."""
    return {
        "episodes": sorted(Episode.objects.filter(agent=agent).values_list("id", "related_ids")),
        "sources": sorted(Source.objects.filter(agent=agent).values_list("id", flat=True)),
        "chunks": SourceChunk.objects.filter(agent=agent).count(),
        "facts": sorted(Fact.objects.filter(agent=agent).values_list("id", "status")),
        "texts": sorted(FactText.objects.filter(agent=agent).values_list("text", flat=True)),
        "states": sorted(WorkingState.objects.filter(agent=agent).values_list("id", "state")),
        "intentions": sorted(
            Intention.objects.filter(agent=agent).values_list("description", flat=True)
        ),
        "traces": RetrievalTrace.objects.filter(agent=agent).count(),
        "events": sorted(
            Event.objects.filter(agent=agent).values_list("id", "redacted_at", "payload_salt")
        ),
    }


def test_erasing_one_episode_reaches_every_copy_and_nothing_else(admin, other):
    mine, theirs = build(admin.agent), build(other.agent)
    before_theirs = everything(other.agent)
    event_id = mine.moved.raw_event_id

    body = created(erase(admin, event_ids=[str(event_id)]))

    assert body["kind"] == "request"
    assert body["selector"] == {"event_ids": [str(event_id)]}
    assert body["requested_by"].startswith("key test (")
    counts = body["counts"]
    assert counts["episodes"] == 1
    assert counts["episodes.links"] == 1  # the follow-up's link to it was cut
    assert counts["retrieval_traces"] == 1 and counts["recall_feedback"] == 1
    assert counts["working_states.scrubbed"] == 1 and counts["intentions.scrubbed"] == 1
    assert body["removed"]["episodes"] == [str(mine.moved.pk)]
    # From outside: gone for the API, for search and for recall.
    assert admin.get(f"/api/v1/episodes/{mine.moved.pk}").status_code == 404
    assert admin.get(f"/api/v1/events/{event_id}").json()["payload"] == {}
    found = admin.get(
        "/api/v1/episodes/search", {"q": "payroll export Lisbon cluster", "abstain": "false"}
    ).json()
    assert str(mine.moved.pk) not in {
        h["episode"]["id"] for h in found["hits"] + found["near_misses"]
    }
    assert str(mine.verified.pk) in {
        h["episode"]["id"] for h in found["hits"] + found["near_misses"]
    }
    # Inside: the quotes are scrubbed, and the ledger keeps no copy of them.
    state = WorkingState.objects.get(thread=mine.thread)
    assert state.state == {"goal": "close the payroll migration", "last_observation": "[erased]"}
    assert Intention.objects.get(pk=mine.intention.pk).description == "Tell finance: [erased]"
    assert not RetrievalTrace.objects.filter(pk=mine.trace_id).exists()
    assert not RecallFeedback.objects.filter(agent=admin.agent).exists()
    assert Episode.objects.get(pk=mine.verified.pk).related_ids == []
    assert not (
        Event.objects.filter(agent=admin.agent)
        .annotate(text=Cast("payload", TextField()))
        .filter(text__contains=MOVED)
        .exists()
    )
    assert chain_verify(agent=admin.agent).ok
    # Nothing else of mine went, and nothing of theirs.
    assert Episode.objects.filter(agent=admin.agent).count() == 2
    assert admin.get(f"/api/v1/episodes/{mine.backup.pk}").status_code == 200
    assert Source.objects.filter(pk=mine.source.pk).exists()
    assert everything(other.agent) == before_theirs
    assert Episode.objects.get(pk=theirs.moved.pk).summary == MOVED


def test_the_receipt_reads_back_for_its_agent_only(admin, other):
    build(admin.agent, with_recall=False, embed=False)
    body = created(erase(admin, actor="backup-bot"))
    receipt = admin.get(f"{URL}/{body['id']}")
    assert (receipt.status_code, receipt.json()) == (200, body)
    assert admin.get(URL).json()["results"] == [body]
    assert other.get(f"{URL}/{body['id']}").json() == error(
        "not_found", f"erasure {body['id']} not found"
    )
    assert other.get(URL).json()["results"] == []
    assert Erasure.objects.get(pk=body["id"]).agent_name == "eraser"


def test_a_dry_run_lists_exactly_what_would_go_and_changes_nothing(admin):
    build(admin.agent)
    before, ledger_before = everything(admin.agent), ledger_state()

    dry = erase(admin, subject="Maria Lopez", dry_run=True)

    assert dry.status_code == 200, dry.content
    plan = dry.json()
    assert (everything(admin.agent), ledger_state()) == (before, ledger_before)
    assert not Erasure.objects.exists()
    body = created(erase(admin, subject="Maria Lopez"))
    assert plan["counts"] == body["counts"]
    assert plan["events"] == body["events"]
    assert {k: v for k, v in plan["removed"].items()} == {
        k: v for k, v in body["removed"].items() if k != "ledger_events"
    }
    assert sorted(plan["event_ids"]) == sorted(body["removed"]["ledger_events"])


def test_erasing_a_subject_takes_facts_names_texts_and_the_episodes_naming_it(admin):
    world = build(admin.agent)
    body = created(erase(admin, subject="maria lopez"))
    assert not Entity.objects.filter(agent=admin.agent, name="Maria Lopez").exists()
    assert not FactText.objects.filter(agent=admin.agent, text__icontains="maria").exists()
    assert list(
        Fact.objects.filter(agent=admin.agent, superseded_at__isnull=True).values_list(
            "object_value", flat=True
        )
    ) == ["Oslo"]
    assert not Episode.objects.filter(pk=world.moved.pk).exists()  # it named her
    assert Episode.objects.filter(pk=world.backup.pk).exists()
    assert body["counts"]["entities"] == 1
    current = admin.get(
        "/api/v1/facts/current", {"subject": "Maria Lopez", "predicate": "lives_in"}
    )
    assert current.status_code == 404


def test_erasing_a_document_takes_its_chunks_and_nothing_regenerates_them(admin):
    world = build(admin.agent, with_recall=False, embed=False)
    created(erase(admin, source_id=str(world.source.pk)))
    assert not Source.objects.filter(pk=world.source.pk).exists()
    assert not SourceChunk.objects.filter(agent=admin.agent).exists()
    assert admin.get(f"/api/v1/sources/{world.source.pk}").status_code == 404
    # The embedding backlog chunks sources left without chunks: none is left.
    embed_backlog.run(agent_id=str(admin.agent.pk), grace_seconds=0)
    episodes_rebuild(agent=admin.agent)
    assert not SourceChunk.objects.filter(agent=admin.agent).exists()
    assert not Event.objects.filter(
        agent=admin.agent, event_type="source.chunked", redacted_at__isnull=True
    ).exists()
    hits = admin.get(
        "/api/v1/sources/search", {"q": "badge number floor nine", "abstain": "false"}
    ).json()
    assert hits["hits"] == []


def test_rebuilding_after_an_erasure_changes_nothing(admin):
    world = build(admin.agent)
    created(erase(admin, event_ids=[str(world.moved.raw_event_id)]))
    created(erase(admin, subject="Bob"))
    after = everything(admin.agent)
    from ledger import projections

    for name in projections.names():
        projections.rebuild(name, agent=admin.agent)
    assert everything(admin.agent) == after


def test_a_retried_write_of_an_erased_item_is_refused_not_replayed(admin):
    body = {"occurred_at": "2026-11-01T10:00:00Z", "summary": "Maria's phone is 555-0199"}
    first = admin.post("/api/v1/episodes", body, format="json", HTTP_IDEMPOTENCY_KEY="ep-1")
    assert first.status_code == 201, first.content
    episode = Episode.objects.get(pk=first.json()["id"])
    created(erase(admin, event_ids=[str(episode.raw_event_id)]))
    before = ledger_state()
    retry = admin.post("/api/v1/episodes", body, format="json", HTTP_IDEMPOTENCY_KEY="ep-1")
    assert retry.status_code == 410
    assert retry.json()["error"]["code"] == "idempotent_write_erased"
    assert ledger_state() == before
    assert not Episode.objects.filter(agent=admin.agent).exists()


def test_erasing_what_is_already_erased_is_a_no_op(admin):
    world = build(admin.agent, with_recall=False, embed=False)
    created(erase(admin, session_id="nightly"))
    before = everything(admin.agent)
    again = created(erase(admin, session_id="nightly"))
    assert (again["events"], everything(admin.agent)) == (0, before)
    assert not Episode.objects.filter(pk=world.backup.pk).exists()


def test_a_window_takes_what_happened_inside_it(admin):
    world = build(admin.agent, with_recall=False, embed=False)
    created(
        erase(
            admin,
            occurred_after="2026-11-07T00:00:00Z",
            occurred_before="2026-11-08T00:00:00Z",
        )
    )
    assert list(Episode.objects.filter(agent=admin.agent).values_list("summary", flat=True)) != []
    assert not Episode.objects.filter(pk=world.backup.pk).exists()
    assert Episode.objects.filter(pk=world.moved.pk).exists()
    assert BACKUP not in str(everything(admin.agent))


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("body", "status", "code", "message"),
    [
        (
            {},
            400,
            "empty_selector",
            "say what to erase: event_ids, source_id, actor, subject, session_id, or a time "
            "window (occurred_after / occurred_before)",
        ),
        (
            {"occurred_after": "2026-11-08T00:00:00Z", "occurred_before": "2026-11-07T00:00:00Z"},
            400,
            "empty_window",
            "the time window ends before it starts: occurred_before must be later than "
            "occurred_after",
        ),
        ({"subject": "Nobody Known"}, 404, "not_found", "no entity named 'Nobody Known'"),
        (
            {"actor": "maria", "reason": "  "},
            400,
            "invalid",
            "reason: This field may not be blank.",
        ),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_removed(admin, body, status, code, message):
    build(admin.agent, with_recall=False, embed=False)
    before, ledger_before = everything(admin.agent), ledger_state()
    response = erase(admin, **body)
    assert response.status_code == status, response.content
    assert (response.json()["error"]["code"], response.json()["error"]["message"]) == (
        code,
        message,
    )
    assert (everything(admin.agent), ledger_state()) == (before, ledger_before)


def test_unknown_fields_and_classes_are_refused(admin):
    response = erase(admin, actor="maria", everything=True)
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "everything": [
            "unknown field; allowed: actor, dry_run, event_ids, legal_hold_lifted, "
            "occurred_after, occurred_before, reason, session_id, source_id, subject"
        ]
    }


def test_another_agents_ids_are_not_found_and_nothing_of_theirs_goes(admin, other):
    theirs = build(other.agent, with_recall=False, embed=False)
    before = everything(other.agent)
    for body in (
        {"event_ids": [str(theirs.moved.raw_event_id)]},
        {"source_id": str(theirs.source.pk)},
        {"subject": str(Entity.objects.get(agent=other.agent, name="Bob").pk)},
    ):
        response = erase(admin, **body)
        assert response.status_code == 404, response.content
    assert everything(other.agent) == before


def test_erasure_needs_the_admin_scope(client_a):
    response = erase(client_a, actor="maria")
    assert response.status_code == 403
    assert client_a.get(URL).status_code == 403


def test_a_legal_hold_refuses_until_an_operator_lifts_it(admin):
    held = admin.post(
        "/api/v1/events",
        {"event_type": "contract.signed", "actor": "maria", "retention_class": "permanent"},
        format="json",
    ).json()
    before = ledger_state()
    refused = erase(admin, actor="maria")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "legal_hold"
    assert refused.json()["error"]["details"] == {"held_event_ids": [held["id"]]}
    assert ledger_state() == before
    body = created(erase(admin, actor="maria", legal_hold_lifted="retention period ended"))
    assert body["legal_hold_lifted"] == "retention period ended"
    assert admin.get(f"/api/v1/events/{held['id']}").json()["payload"] == {}


def test_an_unknown_event_id_is_not_found(admin):
    missing = uuid.uuid4()
    response = erase(admin, event_ids=[str(missing)])
    assert response.json() == error(
        "not_found", f"event {missing} not found", {"missing_event_ids": [str(missing)]}
    )


def test_the_document_text_is_gone_from_every_table(admin):
    """A search of the whole database's text for the erased document's words."""
    world = build(admin.agent, with_recall=False, embed=False)
    created(erase(admin, source_id=str(world.source.pk)))
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'jsonb')"
        )
        columns = cursor.fetchall()
        hits = []
        for table, column in columns:
            cursor.execute(
                f'SELECT count(*) FROM "{table}" WHERE "{column}"::text LIKE %s',
                ["%7741-ALPHA%"],
            )
            if cursor.fetchone()[0]:
                hits.append((table, column))
    assert hits == []
    assert DOCUMENT  # the words searched for were in it
