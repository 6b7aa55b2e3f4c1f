"""Tenant isolation under attack (issue 18, input and security).

Agent A holds one of everything (isolation.build_world). Agent B, with a key that
has every scope, aims at A's data through every endpoint the URL conf has:

* every path id: each method with A's id answers B exactly as it does for an id
  that exists nowhere (same status, same error code, same message but for the
  id; no 403-vs-404 oracle) and changes nothing of A's;
* ids of A's inside a body (a thread, a source, an event, a trace…): the same;
* every list, search and lookup with A's names, sessions, keys, subjects and ids
  as filters: what B gets for made-up values, and nothing of A's;
* A's pagination cursors, A's Idempotency-Key, feedback on A's trace;
* the time an answer takes does not tell A's ids from made-up ones.

A new endpoint with a path parameter, a write or a list fails here until this
module knows how to aim at it (PATH_IDS, BODIES, LIST_QUERIES).
"""

from __future__ import annotations

import json
import uuid

import pytest

from piper.api.tests.isolation import (
    MARK,
    SAFE,
    Endpoint,
    api_endpoints,
    build_world,
    collection,
    make_attacker,
    make_victim,
    send,
    snapshot,
    snapshot_ids,
)

pytestmark = pytest.mark.django_db

# What each path parameter names, by collection (isolation.collection): A's id of
# that kind. A path parameter not here fails test_every_path_parameter_is_known.
PATH_IDS = {
    "keys/<key_id>": "key",
    "events/<event_id>": "event",
    "sources/<source_id>": "source",
    "entities/<entity_id>": "entity",
    "predicates/<name>": "predicate",
    "facts/<fact_id>": "fact",
    "skills/traces/<trace_id>": "skill_trace",
    "skills/<skill_id>": "skill",
    "skills/versions/<version_id>": "version",
    "skills/validations/<validation_id>": "validation",
    "skills/executions/<execution_id>": "execution",
    "threads/<thread_id>": "thread",
    "intentions/<intention_id>": "intention",
    "consolidation/runs/<run_id>": "run",
    "consolidation/candidates/<candidate_id>": "candidate",
    "consolidation/skill-candidates/<candidate_id>": "skill_candidate",
    "recall/<trace_id>": "recall_trace",
    "erasure/<erasure_id>": "erasure",
    "retention-policies/<policy_id>": "policy",
    "episodes/<episode_id>": "episode",
}

# A valid body for every write that takes a path id, so that B's request gets past
# validation to the lookup (a made-up id must then be a 404).
REASON = {"reason": "mine now"}
BODIES = {
    ("keys/<uuid:key_id>", "DELETE"): None,
    ("entities/<uuid:entity_id>/aliases", "POST"): {"alias": "stolen name"},
    ("predicates/<str:name>", "PUT"): {"cardinality": "one", "value_type": "entity"},
    ("facts/<uuid:fact_id>/retract", "POST"): REASON,
    ("facts/<uuid:fact_id>/correct", "POST"): {"value": 41},
    ("facts/<uuid:fact_id>/end", "POST"): {"valid_to": "2026-12-01T00:00:00Z"},
    ("facts/<uuid:fact_id>/resolve", "POST"): {"accept": True},
    ("skills/<uuid:skill_id>/versions", "POST"): {
        "purpose": "mine now",
        "procedure": "def run(params, tools):\n    return 1\n",
    },
    ("skills/versions/<uuid:version_id>/promote", "POST"): REASON,
    ("skills/versions/<uuid:version_id>/deprecate", "POST"): REASON,
    ("skills/versions/<uuid:version_id>/retire", "POST"): REASON,
    ("skills/versions/<uuid:version_id>/validate", "POST"): {},
    ("skills/versions/<uuid:version_id>/execute", "POST"): {
        "params": {"record": "B"},
        "allow_unvalidated": True,
    },
    ("skills/versions/<uuid:version_id>/executions", "POST"): {
        "params": {"record": "B"},
        "succeeded": True,
    },
    ("threads/<uuid:thread_id>/state", "PUT"): {"state": {"mine": True}, "based_on": 1},
    ("threads/<uuid:thread_id>/handover", "POST"): {"to_session": "b-session"},
    ("threads/<uuid:thread_id>/resume", "POST"): {"session_id": "b-session"},
    ("threads/<uuid:thread_id>/acknowledge", "POST"): {"session_id": "b-session"},
    ("threads/<uuid:thread_id>/pending/clear", "POST"): {"ids": [1]},
    ("intentions/<uuid:intention_id>/start", "POST"): {},
    ("intentions/<uuid:intention_id>/complete", "POST"): {},
    ("intentions/<uuid:intention_id>/skip", "POST"): {},
    ("intentions/<uuid:intention_id>/fail", "POST"): REASON,
    ("intentions/<uuid:intention_id>/cancel", "POST"): {},
    ("intentions/<uuid:intention_id>/expire", "POST"): {},
    ("intentions/<uuid:intention_id>/fire", "POST"): {},
    ("intentions/<uuid:intention_id>/dependencies", "PUT"): {"dependencies": []},
    ("consolidation/candidates/<uuid:candidate_id>/accept", "POST"): {},
    ("consolidation/candidates/<uuid:candidate_id>/reject", "POST"): REASON,
    ("consolidation/skill-candidates/<uuid:candidate_id>/reject", "POST"): REASON,
    ("recall/<uuid:trace_id>/feedback", "POST"): {"used": [], "outcome": "failure"},
    ("retention-policies/<uuid:policy_id>", "PATCH"): {"max_age_days": 1},
    ("retention-policies/<uuid:policy_id>", "DELETE"): None,
    ("episodes/<uuid:episode_id>/retract", "POST"): REASON,
    ("episodes/<uuid:episode_id>/correct", "POST"): {"summary": "mine now", "reason": "mine"},
}

# Where a path parameter is a name in the caller's own namespace, not an id: B
# writing A's name makes B's own (the answer must still match a made-up name's).
OWN_NAMESPACE = {("predicates/<str:name>", "PUT")}


def random_value(kind: str) -> str:
    return f"nobody.{uuid.uuid4().hex[:12]}" if kind == "predicate" else str(uuid.uuid4())


@pytest.fixture
def world():
    victim, attacker = make_victim(), make_attacker()
    ids = build_world(victim)
    return victim, attacker, ids


def path_endpoints() -> list[Endpoint]:
    return [e for e in api_endpoints() if e.kwargs]


def outcome(response, replace: dict[str, str]) -> tuple:
    """What B can tell from an answer: status, content type and the body, with the
    ids it aimed at (which a message may name) replaced by their placeholder."""
    text = response.content.decode()
    for value, placeholder in replace.items():
        text = text.replace(value, placeholder)
    body = json.loads(text) if text else None
    if response.status_code < 300:
        body = "<2xx body>"  # B's own object (OWN_NAMESPACE): compared for leaks below
    return response.status_code, response.get("Content-Type"), body


def assert_no_leak(response, a_ids: set[str], allowed: str = "") -> None:
    text = response.content.decode()
    if allowed:
        text = text.replace(allowed, "<aimed at>")
    leaked = sorted(i for i in a_ids if i in text)
    assert not leaked and MARK not in text.lower(), (response.request["PATH_INFO"], text[:800])


class TestTheMap:
    """The attack covers every endpoint: a new one has to be added to it."""

    def test_every_path_parameter_is_known(self):
        unknown = {
            collection(e.route) for e in path_endpoints() if collection(e.route) not in PATH_IDS
        }
        assert not unknown, f"add these path parameters to PATH_IDS: {sorted(unknown)}"
        for e in path_endpoints():
            assert len(e.kwargs) == 1, f"{e.route}: more than one path parameter; extend the map"

    def test_every_write_on_a_path_id_has_a_body(self):
        writes = {(e.route, m) for e in path_endpoints() for m in e.methods if m not in SAFE}
        assert not writes - set(BODIES), (
            f"add a valid body to BODIES: {sorted(writes - set(BODIES))}"
        )
        assert not set(BODIES) - writes, f"stale BODIES entries: {sorted(set(BODIES) - writes)}"


def test_every_path_id_of_another_agent_is_a_made_up_id(world):
    """B (every scope) aims every method of every path with A's id, then with an id
    that exists nowhere: the answers are the same but for the id, and nothing of A's
    changes."""
    victim, attacker, ids = world
    before = snapshot(victim.agent)
    a_ids = snapshot_ids(before)
    calls, differences = 0, []
    for endpoint in path_endpoints():
        [kwarg] = endpoint.kwargs
        kind = PATH_IDS[collection(endpoint.route)]
        for method in endpoint.methods:
            body = BODIES.get((endpoint.route, method))
            mine, made_up = ids[kind], random_value(kind)
            replace = {mine: "<id>", made_up: "<id>"}
            theirs = send(attacker, method, endpoint.path(**{kwarg: made_up}), body)
            aimed = send(attacker, method, endpoint.path(**{kwarg: mine}), body)
            calls += 1
            if (endpoint.route, method) not in OWN_NAMESPACE:
                assert theirs.status_code == 404, (
                    f"{method} {endpoint.route} with a made-up id: {theirs.status_code} "
                    f"{theirs.content[:300]!r} (give it a valid body in BODIES)"
                )
            if outcome(aimed, replace) != outcome(theirs, replace):
                differences.append(
                    (method, endpoint.route, outcome(aimed, replace), outcome(theirs, replace))
                )
            assert_no_leak(aimed, a_ids - {mine}, allowed=mine)
    assert differences == []
    assert snapshot(victim.agent) == before
    assert calls >= 60


# Ids of A's that B puts in a body: each request with A's id answers as with a made-up
# one. {kind} is replaced by A's id of that kind (or the made-up one).
BODY_REFERENCES = [
    ("POST", "events", {"event_type": "b.said", "parent_event_id": "{event}"}),
    ("POST", "events", {"event_type": "b.said", "correction_of": "{event}"}),
    (
        "POST",
        "episodes",
        {"occurred_at": "2026-11-29T09:00:00Z", "summary": "b", "source_id": "{source}"},
    ),
    (
        "POST",
        "episodes",
        {"occurred_at": "2026-11-29T09:00:00Z", "summary": "b", "parent_event_id": "{event}"},
    ),
    ("POST", "facts", {"subject": "{entity}", "predicate": "b.likes", "value": 1}),
    ("POST", "facts", {"subject": "b thing", "predicate": "b.near", "object_entity": "{entity}"}),
    ("POST", "intentions", {"description": "b", "trigger_type": "manual", "thread": "{thread}"}),
    (
        "POST",
        "intentions",
        {"description": "b", "trigger_type": "manual", "dependencies": ["{intention}"]},
    ),
    ("POST", "context", {"task": "b", "thread_id": "{thread}"}),
    ("POST", "recall/decisions", {"decision": "looked", "trace": "{recall_trace}"}),
    ("POST", "erasure", {"source_id": "{source}", "reason": "b", "dry_run": True}),
    ("POST", "erasure", {"event_ids": ["{event}"], "reason": "b", "dry_run": True}),
    ("POST", "erasure", {"subject": "{entity}", "reason": "b", "dry_run": True}),
    ("POST", "recall", {"query": "b", "filters": {"source_id": "{source}"}}),
]


def fill(template, values: dict[str, str]):
    text = json.dumps(template)
    for kind, value in values.items():
        text = text.replace("{" + kind + "}", value)
    return json.loads(text)


def test_ids_of_another_agent_in_a_body_are_made_up_ids(world):
    victim, attacker, ids = world
    before = snapshot(victim.agent)
    a_ids = snapshot_ids(before)
    differences = []
    for method, route, template in BODY_REFERENCES:
        made_up = {kind: random_value(kind) for kind in ids}
        replace = {v: f"<{k}>" for k, v in ids.items()} | {v: f"<{k}>" for k, v in made_up.items()}
        theirs = send(attacker, method, f"/api/v1/{route}", fill(template, made_up))
        aimed = send(attacker, method, f"/api/v1/{route}", fill(template, ids))
        if outcome(aimed, replace) != outcome(theirs, replace):
            differences.append((route, template, outcome(aimed, replace), outcome(theirs, replace)))
        assert_no_leak(aimed, a_ids - set(ids.values()))
    assert differences == []
    assert snapshot(victim.agent) == before
