"""The scope table (issue 18, input and security): every endpoint under /api/v1/
and every method it answers, from the URL conf, with the scope it needs.

SCOPE_TABLE is the reviewed decision; the test checks it against the URL conf (a
new endpoint, or a new method, fails until it is added here), against the views'
`required_scope` (piper/api/permissions.py: read for safe methods, write for the
rest, unless a view says otherwise), and against what the API does: a key without
the scope is refused with 403 permission_denied naming the scope, a key with it
gets past the permission, and no key is 401 everywhere but the public paths.
"""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from conftest import make_client
from ledger.tests.helpers import error
from piper.api.tests.isolation import SAFE, api_endpoints, send
from piper.tenancy.models import Scope

pytestmark = pytest.mark.django_db

# route (under /api/v1/) -> "METHOD scope, ...". Admin: the operator's actions (keys,
# webhooks, erasure, retention, settling contests, carry-over figures). Read on a
# POST: a read whose question is a body (recall, context, match; look decisions are
# telemetry about a read).
SCOPE_TABLE = {
    "agent": "GET read",
    "keys": "GET admin, POST admin",
    "keys/<uuid:key_id>": "DELETE admin",
    "events": "GET read, POST write",
    "events/<uuid:event_id>": "GET read",
    "sources": "GET read, POST write",
    "sources/<uuid:source_id>": "GET read",
    "entities": "GET read, POST write",
    "entities/search": "GET read",
    "entities/<uuid:entity_id>": "GET read",
    "entities/<uuid:entity_id>/aliases": "POST write",
    "predicates": "GET read",
    "predicates/<str:name>": "GET read, PUT write",
    "facts": "POST write",
    "facts/authority-order": "GET read, PUT write",
    "facts/current": "GET read",
    "facts/as-of": "GET read",
    "facts/as-known-at": "GET read",
    "facts/chain": "GET read",
    "facts/contested": "GET read",
    "facts/<uuid:fact_id>": "GET read",
    "facts/<uuid:fact_id>/chain": "GET read",
    "facts/<uuid:fact_id>/retract": "POST write",
    "facts/<uuid:fact_id>/correct": "POST write",
    "facts/<uuid:fact_id>/end": "POST write",
    "facts/<uuid:fact_id>/resolve": "POST admin",
    "graph/paths": "GET read",
    "skills": "GET read, POST write",
    "skills/match": "POST read",
    "skills/traces": "GET read, POST write",
    "skills/traces/<uuid:trace_id>": "GET read",
    "skills/<uuid:skill_id>": "GET read",
    "skills/<uuid:skill_id>/versions": "POST write",
    "skills/versions/<uuid:version_id>": "GET read",
    "skills/versions/<uuid:version_id>/promote": "POST write",
    "skills/versions/<uuid:version_id>/deprecate": "POST write",
    "skills/versions/<uuid:version_id>/retire": "POST write",
    "skills/versions/<uuid:version_id>/validate": "POST write",
    "skills/versions/<uuid:version_id>/validations": "GET read",
    "skills/versions/<uuid:version_id>/execute": "POST write",
    "skills/versions/<uuid:version_id>/executions": "GET read, POST write",
    "skills/validations/<uuid:validation_id>": "GET read",
    "skills/executions/<uuid:execution_id>": "GET read",
    "threads": "GET read, POST write",
    "threads/<uuid:thread_id>": "GET read",
    "threads/<uuid:thread_id>/state": "GET read, PUT write",
    "threads/<uuid:thread_id>/versions": "GET read",
    "threads/<uuid:thread_id>/handover": "POST write",
    "threads/<uuid:thread_id>/resume": "POST write",
    "threads/<uuid:thread_id>/acknowledge": "POST write",
    "threads/<uuid:thread_id>/pending/clear": "POST write",
    "intentions": "GET read, POST write",
    "intentions/due": "GET read",
    "intentions/tick": "POST write",
    "intentions/<uuid:intention_id>": "GET read",
    "intentions/<uuid:intention_id>/start": "POST write",
    "intentions/<uuid:intention_id>/complete": "POST write",
    "intentions/<uuid:intention_id>/skip": "POST write",
    "intentions/<uuid:intention_id>/fail": "POST write",
    "intentions/<uuid:intention_id>/escalation-policy": "PUT write",
    "intentions/<uuid:intention_id>/cancel": "POST write",
    "intentions/<uuid:intention_id>/expire": "POST write",
    "intentions/<uuid:intention_id>/fire": "POST write",
    "intentions/<uuid:intention_id>/dependencies": "PUT write",
    "webhook": "GET admin, PUT admin, DELETE admin",
    "clock": "GET read, PUT write, DELETE write",
    "consolidation/runs": "GET read, POST write",
    "consolidation/runs/<uuid:run_id>": "GET read",
    "consolidation/candidates": "GET read",
    "consolidation/candidates/<uuid:candidate_id>": "GET read",
    "consolidation/candidates/<uuid:candidate_id>/accept": "POST write",
    "consolidation/candidates/<uuid:candidate_id>/reject": "POST write",
    "consolidation/skill-candidates": "GET read",
    "consolidation/skill-candidates/<uuid:candidate_id>": "GET read",
    "consolidation/skill-candidates/<uuid:candidate_id>/reject": "POST write",
    "context": "POST read",
    "recall": "POST read",
    "recall/decisions": "POST read",
    "carry-over": "GET admin",
    "recall/<uuid:trace_id>": "GET read",
    "recall/<uuid:trace_id>/feedback": "POST write",
    "erasure": "GET admin, POST admin",
    "erasure/<uuid:erasure_id>": "GET admin",
    "retention-policies": "GET admin, POST admin",
    "retention-policies/<uuid:policy_id>": "GET admin, PATCH admin, DELETE admin",
    "episodes": "GET read, POST write",
    "episodes/<uuid:episode_id>": "GET read",
    "episodes/<uuid:episode_id>/retract": "POST write",
    "episodes/<uuid:episode_id>/correct": "POST write",
    "sources/ingest": "POST write",
    "sources/<uuid:source_id>/chunks": "GET read",
    "episodes/search": "GET read",
    "sources/search": "GET read",
}
# Outside /api/v1/: what answers without a key. Every other pattern is the admin site.
PUBLIC = {"healthz", "api/schema/", "api/docs/", "api/redoc/"}


def needed(view, method: str) -> str:
    """What piper.api.permissions.HasScopeForMethod asks of this view and method."""
    return getattr(view, "required_scope", None) or (Scope.READ if method in SAFE else Scope.WRITE)


def table() -> dict[tuple[str, str], str]:
    return {
        (route, method): scope
        for route, decisions in SCOPE_TABLE.items()
        for method, scope in (d.split() for d in decisions.split(", "))
    }


def operations() -> list[tuple[str, str, type]]:
    return [(e.route, m, e) for e in api_endpoints() for m in e.methods]


def test_every_endpoint_and_method_has_a_scope_decision():
    found = {(route, method) for route, method, _ in operations()}
    decided = set(table())
    assert not found - decided, f"add a scope decision to SCOPE_TABLE: {sorted(found - decided)}"
    assert not decided - found, f"stale SCOPE_TABLE entries: {sorted(decided - found)}"


def test_the_views_ask_for_the_scope_the_table_says():
    differ = {
        (route, method): (str(needed(endpoint.view, method)), table()[route, method])
        for route, method, endpoint in operations()
        if needed(endpoint.view, method) != table()[route, method]
    }
    assert differ == {}, "(view asks, table says)"


def test_only_the_documented_paths_are_public():
    from django.urls import get_resolver

    from piper.api.tests.isolation import _walk

    outside = {
        route
        for route, _ in _walk(get_resolver().url_patterns)
        if not route.startswith("api/v1/") and not route.startswith("admin/")
    }
    assert outside == PUBLIC
    anonymous = APIClient()
    for route in sorted(PUBLIC):
        assert anonymous.get(f"/{route}").status_code == 200, route


def request(client, endpoint, method):
    path = endpoint.path(**{k: uuid.uuid4() for k in endpoint.kwargs})
    return send(client, method, path, None if method in SAFE else {}), path


def test_every_operation_refuses_what_its_scope_does_not_allow():
    keys = {
        (Scope.READ,): make_client("agent-read", scopes=(Scope.READ,)),
        (Scope.READ, Scope.WRITE): make_client("agent-rw", scopes=(Scope.READ, Scope.WRITE)),
        (Scope.WRITE,): make_client("agent-write", scopes=(Scope.WRITE,)),
        (Scope.ADMIN,): make_client("agent-admin", scopes=(Scope.ADMIN,)),
    }
    anonymous = APIClient()
    counted = {"operations": 0, "refused": 0, "allowed": 0}
    for route, method, endpoint in operations():
        counted["operations"] += 1
        scope = table()[route, method]
        response, path = request(anonymous, endpoint, method)
        assert response.status_code == 401, (method, path, response.status_code)
        assert response.json() == error(
            "not_authenticated", "authentication required: send 'Authorization: Bearer <api key>'"
        )
        for scopes, client in keys.items():
            response, path = request(client, endpoint, method)
            allowed = Scope.ADMIN in scopes or scope in scopes
            if allowed:
                counted["allowed"] += 1
                # Past the permission: whatever the view answers (a 404 for the made-up
                # id, a 400 for the empty body, a domain 403 such as battery_only), it
                # is not the scope refusal.
                refused = response.status_code == 401 or (
                    response.status_code == 403
                    and response.json()["error"]["code"] == "permission_denied"
                )
                assert not refused, (method, path, scopes, response.content)
            else:
                counted["refused"] += 1
                assert (response.status_code, response.json()) == (
                    403,
                    error(
                        "permission_denied",
                        f"this API key lacks the '{scope}' scope needed for {method} {path}; "
                        f"it has {sorted(str(s) for s in scopes)}",
                    ),
                ), (method, path, scopes)
    assert counted["operations"] >= 100, counted
