"""The consolidation API: runs, candidates with evidence, accept and reject; tenancy,
scopes, bad input and Idempotency-Key, with exact bodies."""

from __future__ import annotations

import uuid

import pytest

from conftest import AgentClient
from consolidation import tasks
from consolidation.models import CandidateFact, ConsolidationRun
from consolidation.services import consolidate
from consolidation.tests.factories import said, state
from piper.api.serializers import api_datetime
from piper.tenancy.models import Scope
from piper.tenancy.services import api_key_create

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/consolidation/runs"
CANDIDATES = "/api/v1/consolidation/candidates"


def post(client, url, body=None, **headers):
    return client.post(url, body if body is not None else {}, format="json", headers=headers)


def run_body(run: ConsolidationRun) -> dict:
    run.refresh_from_db()
    return {
        "id": str(run.pk),
        "kind": run.kind,
        "status": run.status,
        "from_seq": run.from_seq,
        "to_seq": run.to_seq,
        "cursor_seq": run.cursor_seq,
        "episodes_read": run.episodes_read,
        "episodes_excluded": run.episodes_excluded,
        "statements_found": run.statements_found,
        "statements_skipped": run.statements_skipped,
        "candidates_proposed": run.candidates_proposed,
        "candidates_asserted": run.candidates_asserted,
        "steps": run.steps,
        "details": run.details,
        "error": run.error,
        "started_at": api_datetime(run.started_at),
        "heartbeat_at": api_datetime(run.heartbeat_at),
        "finished_at": api_datetime(run.finished_at),
        "duration_ms": run.duration_ms,
        "source_event_id": str(run.source_event_id),
        "finish_event_id": str(run.finish_event_id) if run.finish_event_id else None,
    }


@pytest.fixture
def consolidated(client_a):
    agent = client_a.agent
    episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
    said(agent, "The nightly export finished.", minutes=1)
    run = consolidate(agent=agent)
    return {"run": run, "episode": episode, "candidate": CandidateFact.objects.get(agent=agent)}


class TestRuns:
    def test_list_and_detail(self, client_a, consolidated):
        run = consolidated["run"]
        listed = client_a.get(RUNS)
        assert listed.status_code == 200
        assert listed.json() == {"next": None, "previous": None, "results": [run_body(run)]}
        detail = client_a.get(f"{RUNS}/{run.pk}")
        assert detail.json() == run_body(run)
        assert detail.json()["details"] == {
            "batch_size": 200,
            "excluded": {},
            "extractors": ["patterns/1"],
            "not_asserted": {},
        }
        assert client_a.get(RUNS, {"status": "failed"}).json()["results"] == []

    def test_start_queues_the_work_after_commit(
        self, client_a, monkeypatch, django_capture_on_commit_callbacks
    ):
        queued = []
        monkeypatch.setattr(tasks.consolidate_agent, "delay", lambda *a: queued.append(a))
        nothing = post(client_a, RUNS)
        assert (nothing.status_code, nothing.json()) == (200, {"run": None, "queued": False})
        said(client_a.agent, "Alice Chen moved to Berlin.")
        with django_capture_on_commit_callbacks(execute=True):
            response = post(client_a, RUNS, {"kind": "facts"})
        run = ConsolidationRun.objects.get(agent=client_a.agent)
        assert response.status_code == 202
        assert response.json() == {"run": run_body(run), "queued": True}
        assert (run.status, run.episodes_read) == ("running", 0)  # nothing read in the request
        assert queued == [(str(client_a.agent.pk), "facts")]

    def test_a_retry_with_the_same_key_writes_nothing(self, client_a, monkeypatch):
        monkeypatch.setattr(tasks.consolidate_agent, "delay", lambda *a: None)
        said(client_a.agent, "Alice Chen moved to Berlin.")
        first = post(client_a, RUNS, {}, **{"Idempotency-Key": "start-1"})
        before = state(client_a.agent)
        again = post(client_a, RUNS, {}, **{"Idempotency-Key": "start-1"})
        assert (again.status_code, again.json()) == (first.status_code, first.json())
        assert again.headers["Idempotent-Replayed"] == "true"
        assert state(client_a.agent) == before

    def test_bad_input(self, client_a):
        response = post(client_a, RUNS, {"kind": "dreams"})
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "code": "invalid",
                "message": 'kind: "dreams" is not a valid choice.',
                "details": {"kind": ['"dreams" is not a valid choice.']},
            }
        }
        unknown = post(client_a, RUNS, {"kind": "facts", "force": True})
        assert unknown.status_code == 400
        assert unknown.json()["error"]["details"] == {"force": ["unknown field; allowed: kind"]}
        assert client_a.get(RUNS, {"status": "sleeping"}).status_code == 400
        assert not ConsolidationRun.objects.exists()

    def test_another_agents_run_is_not_found(self, client_a, client_b, consolidated):
        run = consolidated["run"]
        assert client_b.get(f"{RUNS}/{run.pk}").status_code == 404
        assert client_b.get(RUNS).json()["results"] == []
        assert client_a.get(f"{RUNS}/{uuid.uuid4()}").status_code == 404


def candidate_body(candidate: CandidateFact) -> dict:
    candidate.refresh_from_db()
    return {
        "id": str(candidate.pk),
        "run_id": str(candidate.run_id),
        "subject": candidate.subject,
        "predicate": candidate.predicate,
        "value": candidate.value,
        "status": candidate.status,
        "extractor": candidate.extractor,
        "confidence": candidate.confidence,
        "sources": candidate.sources,
        "valid_from": api_datetime(candidate.valid_from),
        "evidence_key": candidate.evidence_key,
        "fact_id": str(candidate.fact_id) if candidate.fact_id else None,
        "fact_outcome": candidate.fact_outcome,
        "reason": candidate.reason,
        "decided_by": candidate.decided_by,
        "decided_at": api_datetime(candidate.decided_at),
        "created_at": api_datetime(candidate.created_at),
        "source_event_id": str(candidate.source_event_id),
        "decision_event_id": (
            str(candidate.decision_event_id) if candidate.decision_event_id else None
        ),
        "evidence": [
            {
                "episode_id": str(e.episode_id),
                "event_id": str(e.event_id),
                "field": e.field,
                "extractor": e.extractor,
                "rule": e.rule,
                "confidence": e.confidence,
                "source": e.source_key,
                "occurred_at": api_datetime(e.occurred_at),
                "withdrawn_at": api_datetime(e.withdrawn_at),
                "withdrawn_by_event_id": str(e.withdrawn_by_id) if e.withdrawn_by_id else None,
                "episode": {
                    "summary": e.episode.summary,
                    "action": e.episode.action,
                    "observation": e.episode.observation,
                    "actor": e.episode.actor,
                    "session_id": e.episode.session_id,
                    "source_type": e.episode.source_type,
                },
            }
            for e in candidate.evidence.order_by("occurred_at", "id")
        ],
    }


class TestCandidates:
    def test_each_with_its_evidence(self, client_a, consolidated):
        candidate, episode = consolidated["candidate"], consolidated["episode"]
        listed = client_a.get(CANDIDATES)
        assert listed.json() == {
            "next": None,
            "previous": None,
            "results": [candidate_body(candidate)],
        }
        body = client_a.get(f"{CANDIDATES}/{candidate.pk}").json()
        assert body == candidate_body(candidate)
        assert (body["subject"], body["predicate"], body["value"], body["status"]) == (
            "Alice Chen",
            "location",
            "Berlin",
            "asserted",
        )
        assert body["evidence"][0]["episode"]["summary"] == "Alice Chen moved to Berlin."
        assert body["evidence"][0]["event_id"] == str(episode.raw_event_id)
        assert body["evidence"][0]["source"] == "observation|hr-sync|s1"

    def test_filters(self, client_a, consolidated):
        candidate = consolidated["candidate"]

        def ids(**params) -> list[str]:
            response = client_a.get(CANDIDATES, params)
            assert response.status_code == 200, response.json()
            return [c["id"] for c in response.json()["results"]]

        assert ids(status="asserted") == [str(candidate.pk)]
        assert ids(status="proposed") == []
        assert ids(predicate="location", subject="ALICE CHEN") == [str(candidate.pk)]
        assert ids(subject="Bob") == []
        assert ids(run=str(consolidated["run"].pk)) == [str(candidate.pk)]
        bad = client_a.get(CANDIDATES, {"status": "maybe"})
        assert bad.status_code == 400
        assert bad.json()["error"]["details"] == {"status": ['"maybe" is not a valid choice.']}

    def test_a_list_costs_a_fixed_number_of_queries(
        self, client_a, consolidated, django_assert_max_num_queries
    ):
        for n in range(5):
            said(client_a.agent, f"Person{chr(66 + n)} Stone joined Initech.", minutes=10 + n)
        consolidate(agent=client_a.agent)
        with django_assert_max_num_queries(8):
            response = client_a.get(CANDIDATES)
        assert len(response.json()["results"]) == 6

    def test_reject_then_accept_is_refused(self, client_a, consolidated):
        candidate = consolidated["candidate"]
        response = post(client_a, f"{CANDIDATES}/{candidate.pk}/reject", {"reason": "stale sync"})
        assert response.status_code == 200
        assert response.json() == candidate_body(candidate)
        assert (response.json()["status"], response.json()["reason"]) == ("rejected", "stale sync")
        assert response.json()["decided_by"] == f"key:{client_a.api_key.prefix}"
        again = post(client_a, f"{CANDIDATES}/{candidate.pk}/accept")
        assert again.status_code == 409
        assert again.json() == {
            "error": {
                "code": "not_proposed",
                "message": f"candidate {candidate.pk} is rejected, not proposed",
                "details": {"status": "rejected"},
            }
        }

    def test_accept_a_proposed_one(self, client_a, settings):
        settings.CONSOLIDATION_MIN_CONFIDENCE = 0.99
        said(client_a.agent, "Bob Stone joined Initech.")
        consolidate(agent=client_a.agent)
        candidate = CandidateFact.objects.get(agent=client_a.agent)
        assert candidate.status == "proposed"
        response = post(client_a, f"{CANDIDATES}/{candidate.pk}/accept", {})
        assert response.status_code == 200
        assert response.json() == candidate_body(candidate)
        assert (response.json()["status"], response.json()["fact_outcome"]) == (
            "asserted",
            "created",
        )

    def test_refusals_write_nothing(self, client_a, client_b, consolidated):
        candidate = consolidated["candidate"]
        before = state(client_a.agent)
        no_reason = post(client_a, f"{CANDIDATES}/{candidate.pk}/reject", {})
        assert no_reason.status_code == 400
        assert no_reason.json() == {
            "error": {
                "code": "invalid",
                "message": "reason: This field is required.",
                "details": {"reason": ["This field is required."]},
            }
        }
        blank = post(client_a, f"{CANDIDATES}/{candidate.pk}/reject", {"reason": " "})
        assert blank.status_code == 400
        not_json_object = post(client_a, f"{CANDIDATES}/{candidate.pk}/accept", [1])
        assert not_json_object.status_code == 400
        theirs = post(client_b, f"{CANDIDATES}/{candidate.pk}/reject", {"reason": "mine now"})
        assert theirs.status_code == 404
        assert theirs.json()["error"] == {
            "code": "not_found",
            "message": f"candidate {candidate.pk} not found",
            "details": {},
        }
        assert client_b.get(f"{CANDIDATES}/{candidate.pk}").status_code == 404
        assert client_b.get(CANDIDATES).json()["results"] == []
        assert state(client_a.agent) == before

    def test_scopes(self, consolidated, client_a):
        _, raw = api_key_create(agent=client_a.agent, name="ro", scopes=[Scope.READ])
        reader = AgentClient(client_a.agent, raw, None)
        candidate = consolidated["candidate"]
        assert reader.get(CANDIDATES).status_code == 200
        refused = post(reader, f"{CANDIDATES}/{candidate.pk}/reject", {"reason": "x"})
        assert refused.status_code == 403
        assert post(reader, RUNS).status_code == 403
        assert CandidateFact.objects.get(pk=candidate.pk).status == "asserted"
