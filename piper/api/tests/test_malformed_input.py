"""Oversized and malformed input (issue 18, input and security): every write
endpoint from the URL conf, aimed at a real object of the caller's so the view
gets as far as reading the body, gets

* bodies that are no JSON object at all (`RAW`): over the body limit, invalid
  JSON, nested deeper than the parser goes, the wrong content type, form
  data, multipart, invalid UTF-8, NaN, a JSON array / number / string / null;
* a valid body (`BODIES`, `COLLECTION_BODIES`) with each top-level field in
  turn given a wrong value (`field_variants`: each JSON type, ±10^40, a very
  long string, a NUL byte, deep nesting, a long list) — and the valid body
  with a NUL byte in every string inside it;
* an empty body;

and one endpoint a body over the real 10 MiB limit and a batch over 1,000.

Every answer must be below 500, a 4xx must have the error shape
`{"error": {"code", "message", "details"}}` with a message, and a 4xx writes
nothing: the agent's ledger head does not move (every write appends its event
in the write's transaction), and after the raw bodies no row of the agent's
changed at all. A variant can be valid (an integer where a float is asked,
any object as a payload): a 2xx is fine then. The suite sends a rotating
subset (`chosen`); PIPER_MALFORMED_FULL=1 (scripts/chaos/malformed_input.py)
sends everything.

The counts go to docs/reliability.md ("Oversized and malformed input").
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest
from django.test import override_settings

from ledger.models import ChainHead
from piper.api.tests.isolation import (
    SAFE,
    api_endpoints,
    build_world,
    collection,
    make_victim,
    snapshot,
)
from piper.api.tests.test_tenant_isolation import BODIES, PATH_IDS

# Committed requests, as the server makes them: a database error inside one
# must not poison a test-wide transaction for the requests after it.
pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 256 * 1024  # the body limit for this test: the real one is 10 MiB

# A valid body for each write without a path id ("route, METHOD"), the ones
# with a path id are the tenant isolation attack's (BODIES).
COLLECTION_BODIES = {
    ("keys", "POST"): {"name": "ci", "scopes": ["read"]},
    ("events", "POST"): {
        "event_type": "user.said",
        "occurred_at": "2026-11-29T09:00:00Z",
        "session_id": "s-1",
        "actor": "alice",
        "source_type": "user_statement",
        "confidence": 0.9,
        "payload": {"text": "ship on Friday", "tags": ["a", "b"]},
    },
    ("sources", "POST"): {"title": "Handbook", "content": "Deploys on Fridays."},
    ("sources/ingest", "POST"): {"title": "Guide", "content": "Step one.\n\nStep two."},
    ("entities", "POST"): {"name": "Acme", "aliases": ["acme-co"]},
    ("facts", "POST"): {
        "subject": "Acme",
        "predicate": "located_in",
        "value": "Berlin",
        "source_type": "operator",
        "valid_from": "2026-11-29T09:00:00Z",
        "confidence": 0.8,
    },
    ("facts/authority-order", "PUT"): {
        "order": [
            "operator",
            "user_statement",
            "tool_result",
            "observation",
            "document",
            "third_party",
            "agent_inference",
        ],
    },
    ("skills", "POST"): None,  # filled from the isolation attack's skill below
    ("skills/match", "POST"): {"task": "compute a checksum", "limit": 3},
    ("skills/traces", "POST"): None,
    ("threads", "POST"): {"key": "thread-x", "session_id": "s-1"},
    ("intentions", "POST"): {
        "description": "call back",
        "trigger_type": "time",
        "due_at": "2027-01-01T09:00:00Z",
        "priority": 3,
    },
    ("intentions/tick", "POST"): {},
    ("webhook", "PUT"): {"url": "https://example.com/hook", "secret": "secret-000000001"},
    ("clock", "PUT"): {"now": "2026-12-01T00:00:00Z"},
    ("consolidation/runs", "POST"): {"kind": "facts"},
    ("context", "POST"): {"task": "plan the launch", "budget_tokens": 500},
    ("recall", "POST"): {"query": "where is Acme?", "limit": 5},
    ("recall/decisions", "POST"): {"task": "launch", "looked": False},
    ("erasure", "POST"): {"actor": "nobody-at-all", "reason": "request"},
    ("retention-policies", "POST"): {"name": "p", "event_type": "x.y", "max_age_days": 30},
    ("episodes", "POST"): {
        "occurred_at": "2026-11-29T09:00:00Z",
        "summary": "Deployed",
        "session_id": "s-1",
        "importance": 0.5,
    },
}

DEEP = 5_000  # JSON nesting past the parser's recursion limit


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


# name -> (raw body, content type); each must be a 4xx for every write.
RAW = {
    "too large (over the body limit)": (b'{"x": "' + b"a" * LIMIT + b'"}', "application/json"),
    "invalid JSON": (b'{"a": 1,', "application/json"),
    "invalid JSON (trailing garbage)": (b'{"a": 1} xyz', "application/json"),
    "deeply nested JSON": (deep_json(DEEP).encode(), "application/json"),
    "deeply nested JSON in an object": (
        ('{"a": ' + deep_json(DEEP) + "}").encode(),
        "application/json",
    ),
    "wrong content type (text/plain)": (b'{"a": 1}', "text/plain"),
    "form data": (b"a=1&b=2", "application/x-www-form-urlencoded"),
    "multipart": (
        b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n',
        "multipart/form-data; boundary=x",
    ),
    "invalid UTF-8": (b'{"a": "\xff\xfe\xc3"}', "application/json"),
    "NaN literal": (b'{"a": NaN}', "application/json"),
    "JSON array": (b"[1, 2]", "application/json"),
    "JSON number": (b"42", "application/json"),
    "JSON string": (b'"text"', "application/json"),
    "JSON null": (b"null", "application/json"),
}


def field_variants(value) -> dict[str, object]:
    """Replacements for one field's valid value."""
    variants = {
        "a list": [1, "x"],
        "an object": {"nested": {"a": 1}},
        "a number": 12345,
        "a boolean": True,
        "null": None,
        "a string": "not-what-you-think",
        "a huge integer": 10**40,
        "a negative huge integer": -(10**40),
        "a very long string (200,000 chars)": "x" * 200_000,
        "a string with a NUL byte": "abc\x00def",
        "deeply nested (400 levels)": json.loads(deep_json(400)),
        "a list of 10,000 items": ["x"] * 10_000,
    }
    return {name: v for name, v in variants.items() if v != value}


# The short form gives each field SHORT of the variants and each endpoint
# SHORT_RAW of the raw bodies, in turn, so that every variant meets many; PIPER_MALFORMED_FULL=1 (scripts/chaos/malformed_input.py)
# gives every field all of them.
FULL = os.environ.get("PIPER_MALFORMED_FULL") == "1"
SHORT = 3


SHORT_RAW = 5


def chosen(variants: dict, turn: int, count: int = SHORT) -> dict:
    if FULL:
        return variants
    names = list(variants)
    picked = {names[(turn + n) % len(names)] for n in range(count)}
    return {name: v for name, v in variants.items() if name in picked}


def with_nul(value):
    """The body with a NUL byte in every string value (a key with one is an unknown field)."""
    if isinstance(value, str):
        return value[:1] + "\x00" + value[1:]
    if isinstance(value, dict):
        return {k: with_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_nul(v) for v in value]
    return value


@dataclass
class Tally:
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    bad_shape: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    should_be_4xx: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)  # a variant that is valid
    seconds: Counter = field(default_factory=Counter)  # by attack


def _shape_problem(response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return f"not JSON: {response.content[:200]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or set(error) != {"code", "message", "details"}:
        return f"not the error shape: {str(body)[:200]}"
    if not error["code"] or len(error["message"]) < 10:
        return f"no actionable message: {error}"
    return None


def head(agent) -> int:
    return ChainHead.objects.filter(agent=agent).values_list("last_seq", flat=True).first() or 0


def send(client, method, path, raw: bytes, content_type: str):
    return client.generic(method, path, raw, content_type=content_type)


def check(tally: Tally, label: str, response, agent, before: int, must_fail: bool) -> None:
    tally.requests += 1
    tally.statuses[response.status_code] += 1
    if response.status_code >= 500:
        tally.server_errors.append(f"{label} -> {response.status_code} {response.content[:300]!r}")
        return
    if response.status_code >= 400:
        problem = _shape_problem(response)
        if problem:
            tally.bad_shape.append(f"{label} -> {response.status_code}: {problem}")
        if head(agent) != before:
            tally.written.append(f"{label} -> {response.status_code} moved the ledger head")
    else:
        tally.accepted.append(f"{label} -> {response.status_code}")
        if must_fail:
            tally.should_be_4xx.append(f"{label} -> {response.status_code}")


@pytest.fixture
def world():
    victim = make_victim()
    ids = build_world(victim)
    return victim, ids


def writes():
    """(endpoint, method) for every write from the URL conf."""
    return [(e, m) for e in api_endpoints() for m in e.methods if m not in SAFE and m != "DELETE"]


def target(endpoint, ids) -> str:
    if not endpoint.kwargs:
        return endpoint.path()
    return endpoint.path(**{endpoint.kwargs[0]: ids[PATH_IDS[collection(endpoint.route)]]})


def valid_body(endpoint, method):
    from piper.api.tests.isolation import SKILL, fingerprint_trace

    key = (endpoint.route, method)
    if key in BODIES:
        return BODIES[key]
    if key == ("skills", "POST"):
        return {**SKILL, "name": f"malformed-{uuid.uuid4().hex[:6]}"}
    if key == ("skills/traces", "POST"):
        return fingerprint_trace("malformed 1")
    return COLLECTION_BODIES[key]


@override_settings(PIPER_MAX_REQUEST_BYTES=LIMIT, DATA_UPLOAD_MAX_MEMORY_SIZE=LIMIT)
def test_bodies_that_are_no_json_object_are_refused_and_write_nothing(world):
    client, ids = world
    agent = client.agent
    before_rows = snapshot(agent)
    tally = Tally()
    for turn, (endpoint, method) in enumerate(writes()):
        path = target(endpoint, ids)
        for name, (raw, content_type) in chosen(RAW, turn * SHORT_RAW, SHORT_RAW).items():
            before = head(agent)
            response = send(client, method, path, raw, content_type)
            label = f"{method} {endpoint.route} [{name}]"
            check(tally, label, response, agent, before, must_fail=True)
    print(
        f"\nraw bodies: {tally.requests} requests, statuses {dict(sorted(tally.statuses.items()))}"
    )
    assert tally.server_errors == []
    assert tally.bad_shape == []
    assert tally.written == []
    assert tally.should_be_4xx == []
    # Nothing of the agent's changed, in any table (not only the ledger).
    assert snapshot(agent) == before_rows


def test_an_empty_body_is_refused_or_means_no_options(world):
    """{} is the whole valid body of some writes (start an intention, run a
    consolidation): an empty body may do the same, or be a 4xx that writes nothing."""
    client, ids = world
    agent = client.agent
    tally = Tally()
    for endpoint, method in writes():
        before = head(agent)
        response = send(client, method, target(endpoint, ids), b"", "application/json")
        check(tally, f"{method} {endpoint.route} [empty]", response, agent, before, False)
    assert tally.server_errors == []
    assert tally.bad_shape == []
    assert tally.written == []


def test_each_field_of_the_wrong_kind_is_a_4xx_or_valid_never_a_5xx(world):
    client, ids = world
    agent = client.agent
    tally, turn = Tally(), 0
    for endpoint, method in writes():
        path = target(endpoint, ids)
        body = valid_body(endpoint, method)
        if not body:
            continue
        variants = []
        for name, original in body.items():
            turn += SHORT
            variants += [
                (f"{name}: {variant}", {**body, name: value})
                for variant, value in chosen(field_variants(original), turn).items()
            ]
        variants.append(("a NUL byte in every string", with_nul(body)))
        for label, mutated in variants:
            before = head(agent)
            started = time.perf_counter()
            response = send(client, method, path, json.dumps(mutated).encode(), "application/json")
            tally.seconds[label.split(": ")[-1]] += time.perf_counter() - started
            check(tally, f"{method} {endpoint.route} [{label}]", response, agent, before, False)
    print(f"\nfields: {tally.requests} requests, statuses {dict(sorted(tally.statuses.items()))}")
    print("slowest: " + ", ".join(f"{k} {v:.2f} s" for k, v in tally.seconds.most_common(5)))
    print(f"valid variants accepted ({len(tally.accepted)}):\n  " + "\n  ".join(tally.accepted))
    assert tally.server_errors == []
    assert tally.bad_shape == []
    assert tally.written == []


def test_a_body_over_the_real_limit_is_a_413_before_it_is_read(client_a):
    from django.conf import settings

    limit = settings.PIPER_MAX_REQUEST_BYTES
    body = b'{"event_type": "a.b", "payload": {"text": "' + b"a" * limit + b'"}}'
    response = send(client_a, "POST", "/api/v1/events", body, "application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert response.json()["error"]["details"] == {
        "limit_bytes": limit,
        "received_bytes": len(body),
    }
    assert head(client_a.agent) == 0


def test_a_batch_over_the_limit_is_refused_whole(client_a):
    from django.conf import settings

    event = {"event_type": "a.b", "payload": {}}
    many = settings.PIPER_MAX_BATCH_EVENTS + 1
    body = json.dumps({"events": [event] * many}).encode()
    response = send(client_a, "POST", "/api/v1/events", body, "application/json")
    assert response.status_code in (400, 413), response.content[:300]
    assert str(settings.PIPER_MAX_BATCH_EVENTS) in response.json()["error"]["message"]
    assert head(client_a.agent) == 0
