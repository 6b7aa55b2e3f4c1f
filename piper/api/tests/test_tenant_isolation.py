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
import statistics
import time
import uuid
from urllib.parse import urlencode

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
    ("intentions/<uuid:intention_id>/escalation-policy", "PUT"): {"escalation_policy": {}},
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


def assert_no_leak(response, a_ids: set[str], allowed: str | list[str] = ()) -> None:
    """Nothing of A's in an answer to B but what B sent (a message may echo it)."""
    text = response.content.decode()
    for value in sorted([allowed] if isinstance(allowed, str) else allowed, key=len)[::-1]:
        text = text.replace(value, "<sent>").replace(value.lower(), "<sent>")
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
    ("POST", "recall/decisions", {"task": "b", "looked": True, "trace": "{recall_trace}"}),
    ("POST", "erasure", {"source_id": "{source}", "reason": "b", "dry_run": True}),
    ("POST", "erasure", {"event_ids": ["{event}"], "reason": "b", "dry_run": True}),
    ("POST", "erasure", {"subject": "{entity}", "reason": "b", "dry_run": True}),
    ("POST", "recall", {"query": "b", "filters": {"source_id": "{source}"}}),
    ("GET", "threads/{thread}/state?version=1", None),
]


def fill(template, values: dict[str, str]):
    text = template if isinstance(template, str) else json.dumps(template)
    for kind, value in values.items():
        text = text.replace("{" + kind + "}", value)
    return text if isinstance(template, str) else json.loads(text)


def test_ids_of_another_agent_in_a_body_are_made_up_ids(world):
    victim, attacker, ids = world
    before = snapshot(victim.agent)
    a_ids = snapshot_ids(before)
    differences = []
    for method, route, template in BODY_REFERENCES:
        made_up = {kind: random_value(kind) for kind in ids}
        replace = {v: f"<{k}>" for k, v in ids.items()} | {v: f"<{k}>" for k, v in made_up.items()}
        theirs = send(attacker, method, "/api/v1/" + fill(route, made_up), fill(template, made_up))
        aimed = send(attacker, method, "/api/v1/" + fill(route, ids), fill(template, ids))
        got = [outcome_of_read(r, replace) for r in (aimed, theirs)]
        if got[0] != got[1]:
            differences.append((route, template, *got))
        assert_no_leak(aimed, a_ids - set(ids.values()), allowed=list(ids.values()))
    assert differences == []
    assert snapshot(victim.agent) == before


# ------------------------------------------------------------ lists, searches, lookups

T = "2026-11-30T00:00:00Z"
# Every list, search or lookup (a GET without a path id, or a read sent as a POST),
# with A's names, sessions, subjects and ids as filters. {name} is A's value or a
# made-up one. An endpoint not here fails test_every_list_is_attacked.
LIST_QUERIES: dict[tuple[str, str], list[dict]] = {
    ("agent", "GET"): [{}],
    ("keys", "GET"): [{}],
    ("events", "GET"): [{"session_id": "{session}"}, {"actor": "{actor}"}, {}],
    ("sources", "GET"): [{}],
    ("entities", "GET"): [{}],
    ("entities/search", "GET"): [{"q": "{entity_name}"}, {"q": "{alias}"}],
    ("predicates", "GET"): [{}],
    ("facts/authority-order", "GET"): [{}],
    ("facts/current", "GET"): [
        {"subject": "{entity_name}"},
        {"subject": "{entity}"},
        {"subject": "{alias}", "predicate": "{predicate}"},
    ],
    ("facts/as-of", "GET"): [{"subject": "{entity_name}", "valid_time": T}],
    ("facts/as-known-at", "GET"): [{"subject": "{entity_name}", "valid_time": T, "record_time": T}],
    ("facts/chain", "GET"): [{"subject": "{entity_name}", "predicate": "{predicate}"}],
    ("facts/contested", "GET"): [{}],
    ("graph/paths", "GET"): [{"start": "{entity_name}"}, {"start": "{entity}"}],
    ("skills", "GET"): [{"name": "{skill_name}"}, {}],
    ("skills/traces", "GET"): [{"session_id": "{session}"}, {}],
    ("threads", "GET"): [{}],
    ("intentions", "GET"): [{"thread": "{thread}"}, {}],
    ("intentions/due", "GET"): [{"thread": "{thread}"}, {}],
    ("webhook", "GET"): [{}],
    ("clock", "GET"): [{}],
    ("consolidation/runs", "GET"): [{}],
    ("consolidation/candidates", "GET"): [{"subject": "{person}"}, {"run": "{run}"}, {}],
    ("consolidation/skill-candidates", "GET"): [{"run": "{run}"}, {}],
    ("carry-over", "GET"): [{}],
    ("erasure", "GET"): [{}],
    ("retention-policies", "GET"): [{}],
    ("episodes", "GET"): [{"session_id": "{session}"}, {"actor": "{actor}"}, {}],
    ("episodes/search", "GET"): [{"q": "{text}"}, {"q": "{text}", "session_id": "{session}"}],
    ("sources/search", "GET"): [{"q": "{text}"}, {"q": "{text}", "source_id": "{source}"}],
    ("skills/match", "POST"): [{"task": "compute the {skill_name} checksum of a record"}],
    ("recall", "POST"): [{"query": "Where is {entity_name} located?"}, {"query": "{text}"}],
    ("context", "POST"): [{"task": "{text}", "session_id": "{session}"}],
}
# Writes without a path id: what they answer is B's own (BODY_REFERENCES and the
# idempotency test aim A's ids and keys at them).
NOT_A_READ = {
    ("keys", "POST"),
    ("events", "POST"),
    ("sources", "POST"),
    ("entities", "POST"),
    ("facts", "POST"),
    ("facts/authority-order", "PUT"),
    ("skills", "POST"),
    ("skills/traces", "POST"),
    ("threads", "POST"),
    ("intentions", "POST"),
    ("intentions/tick", "POST"),
    ("webhook", "PUT"),
    ("webhook", "DELETE"),
    ("clock", "PUT"),
    ("clock", "DELETE"),
    ("consolidation/runs", "POST"),
    ("recall/decisions", "POST"),
    ("erasure", "POST"),
    ("retention-policies", "POST"),
    ("episodes", "POST"),
    ("sources/ingest", "POST"),
}


def a_values(ids: dict[str, str]) -> dict[str, str]:
    from piper.api.tests.isolation import SKILL

    return {
        **ids,
        "session": f"{MARK}-session",
        "actor": f"{MARK}-actor",
        "entity_name": f"{MARK} Corp",
        "alias": f"{MARK}-co",
        "person": f"Alice {MARK.title()}",
        "skill_name": SKILL["name"],
        "text": f"{MARK} Corp moved to Berlin",
    }


def made_up_values(values: dict[str, str]) -> dict[str, str]:
    """A made-up id for each of A's ids; A's names and texts as they are (asked before
    A wrote them, they are the baseline of what B sees when A does not exist)."""
    return {k: str(uuid.uuid4()) if _is_uuid(v) else v for k, v in values.items()}


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


VOLATILE = {"latency_ms", "age_seconds", "elapsed_ms", "duration_ms"}


def shape(value):
    """An answer with what differs between two identical requests blanked: ids
    (B's new trace of each read), times and timings."""
    if isinstance(value, dict):
        return {k: "<n>" if k in VOLATILE else shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, str) and (_is_uuid(value) or value[:4].isdigit() and "T" in value):
        return "<id or time>"
    return value


def read(client, method: str, route: str, query: dict):
    if method == "GET":
        return client.get(f"/api/v1/{route}?{urlencode(query)}" if query else f"/api/v1/{route}")
    return send(client, method, f"/api/v1/{route}", query)


def test_every_list_is_attacked():
    found = {(e.route, m) for e in api_endpoints() if not e.kwargs for m in e.methods}
    missing = found - set(LIST_QUERIES) - NOT_A_READ
    assert not missing, f"add these to LIST_QUERIES (or NOT_A_READ): {sorted(missing)}"
    assert not (set(LIST_QUERIES) | NOT_A_READ) - found


def test_lists_and_searches_with_another_agents_filters_find_nothing():
    """B asks every list, search and lookup with A's names and texts before A wrote
    them and after; with made-up ids before, A's ids after: the answers are the same,
    and nothing of A's shows."""
    victim, attacker = make_victim(), make_attacker()
    kinds = set(PATH_IDS.values())
    made_up = made_up_values(a_values({kind: str(uuid.uuid4()) for kind in kinds}))
    baseline = {
        (route, method, n): read(attacker, method, route, fill(query, made_up))
        for (route, method), queries in LIST_QUERIES.items()
        for n, query in enumerate(queries)
    }
    ids = build_world(victim)
    assert set(ids) == kinds
    before = snapshot(victim.agent)
    a_ids = snapshot_ids(before)
    mine = a_values(ids)
    replace = {v: f"<{k}>" for k, v in mine.items()} | {v: f"<{k}>" for k, v in made_up.items()}
    differences = []
    for (route, method), queries in LIST_QUERIES.items():
        for n, query in enumerate(queries):
            aimed = read(attacker, method, route, fill(query, mine))
            got = [outcome_of_read(r, replace) for r in (aimed, baseline[route, method, n])]
            if got[0] != got[1]:
                differences.append((method, route, query, *got))
            assert_no_leak(aimed, a_ids - set(mine.values()), allowed=list(mine.values()))
            assert aimed.status_code < 500
    assert differences == []
    assert snapshot(victim.agent) == before
    assert len(baseline) >= 50


def outcome_of_read(response, replace: dict[str, str]) -> tuple:
    text = response.content.decode()
    for value, placeholder in sorted(replace.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(value, placeholder)
    return response.status_code, shape(json.loads(text)) if text else None


def test_another_agents_cursor_shows_nothing_of_theirs(world):
    """A's `next` link, followed with B's key: B's own page (here empty), never A's."""
    victim, attacker, ids = world
    a_ids = snapshot_ids(snapshot(victim.agent))
    followed = 0
    for route, method in LIST_QUERIES:
        if method != "GET":
            continue
        page = victim.get(f"/api/v1/{route}", {"limit": 1})
        if (
            page.status_code != 200
            or not isinstance(page.json(), dict)
            or not page.json().get("next")
        ):
            continue
        response = attacker.get(page.json()["next"])
        followed += 1
        assert response.status_code == 200, (route, response.content[:300])
        assert response.json()["results"] == [], route
        assert_no_leak(response, a_ids)
    assert followed >= 7


def test_another_agents_idempotency_key_is_not_replayed(world):
    """A wrote an event with Idempotency-Key shared-idempotency-key: B's write of the
    same body with the same key is B's own, never A's stored answer."""
    victim, attacker, ids = world
    from ledger.models import Event

    before = snapshot(victim.agent)
    a_event = Event.objects.get(pk=ids["event"])
    body = {
        "event_type": a_event.event_type,
        "occurred_at": "2026-11-29T09:00:00Z",
        "session_id": a_event.session_id,
        "actor": a_event.actor,
        "source_type": "user_statement",
        "payload": a_event.payload,
    }
    key = {"HTTP_IDEMPOTENCY_KEY": "shared-idempotency-key"}
    first = send(attacker, "POST", "/api/v1/events", body, **key)
    assert first.status_code == 201, first.content
    assert "Idempotent-Replayed" not in first
    assert first.json()["id"] != ids["event"]
    assert Event.objects.get(pk=first.json()["id"]).agent == attacker.agent
    again = send(attacker, "POST", "/api/v1/events", body, **key)
    assert (again["Idempotent-Replayed"], again.json()) == ("true", first.json())
    assert snapshot(victim.agent) == before


def test_feedback_on_another_agents_trace_is_a_404(world):
    victim, attacker, ids = world
    before = snapshot(victim.agent)
    response = send(
        attacker,
        "POST",
        f"/api/v1/recall/{ids['recall_trace']}/feedback",
        {"used": [], "outcome": "failure"},
    )
    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
    assert snapshot(victim.agent) == before


TIMED = ["events/{event}", "facts/{fact}", "recall/{recall_trace}", "threads/{thread}/state"]


def test_another_agents_ids_take_no_longer_than_made_up_ones(world):
    """A rough timing oracle: B's median time for A's id and for a made-up id are within
    3x (plus 5 ms for a busy machine), interleaved so that load hits both alike."""
    victim, attacker, ids = world
    for template in TIMED:
        aimed_times, made_up_times = [], []
        for n in range(25):
            made_up = {k: str(uuid.uuid4()) for k in ids}
            pair = [(aimed_times, ids), (made_up_times, made_up)]
            for times, values in pair if n % 2 else reversed(pair):
                path = "/api/v1/" + template.format(**values)
                started = time.perf_counter()
                response = attacker.get(path)
                times.append(time.perf_counter() - started)
                assert response.status_code == 404
        aimed, other = statistics.median(aimed_times), statistics.median(made_up_times)
        assert aimed <= 3 * other + 0.005 and other <= 3 * aimed + 0.005, (template, aimed, other)
