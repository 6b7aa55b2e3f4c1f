"""The tenant isolation attack, shared by its test (test_tenant_isolation.py) and the
scope table test: every endpoint from the URL conf, an agent A that holds one of
everything, and what A holds, to compare before and after another agent attacks it.

The endpoints come from `django.urls.get_resolver()`, so a new one cannot escape:
a path id this module does not know how to fill, or a write it has no body for,
fails the tests that use it until it is added here.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.views import APIView

from conftest import AgentClient, make_client
from piper.tenancy.models import Agent, Scope

API_PREFIX = "api/v1/"
SAFE = {"GET", "HEAD", "OPTIONS"}
# A word nothing but agent A's data contains: an answer to B that holds it leaks A.
MARK = "quillfeather"


@dataclass(frozen=True)
class Endpoint:
    route: str  # without API_PREFIX, e.g. "facts/<uuid:fact_id>/retract"
    view: type[APIView]
    methods: tuple[str, ...]
    kwargs: tuple[str, ...]  # the path's parameters, in order

    def path(self, **values: object) -> str:
        """The URL with each <converter:name> replaced by values[name]."""
        path = "/" + API_PREFIX + self.route
        for name in self.kwargs:
            start = path.index("<")
            path = path[:start] + str(values[name]) + path[path.index(">", start) + 1 :]
        return path


def _walk(patterns, prefix: str = ""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern


def view_methods(view: type[APIView]) -> tuple[str, ...]:
    """The methods a view answers (OPTIONS and HEAD are DRF's, not the view's)."""
    return tuple(
        m.upper()
        for m in view.http_method_names
        if m not in {"options", "head"} and hasattr(view, m)
    )


def api_endpoints() -> list[Endpoint]:
    """Every pattern under /api/v1/, in URL-conf order."""
    found = []
    for route, pattern in _walk(get_resolver().url_patterns):
        if not route.startswith(API_PREFIX):
            continue
        view = getattr(pattern.callback, "cls", None)
        assert view is not None, f"/{route} is not a DRF view: give it a scope decision"
        found.append(
            Endpoint(
                route=route.removeprefix(API_PREFIX),
                view=view,
                methods=view_methods(view),
                kwargs=tuple(pattern.pattern.converters),
            )
        )
    return found


def collection(route: str) -> str:
    """What a path id names: the route up to and with its first parameter, converter
    dropped ("skills/traces/<trace_id>" is not "recall/<trace_id>")."""
    head, _, rest = route.partition("<")
    return head + "<" + rest.split(">", 1)[0].split(":")[-1] + ">"


# --------------------------------------------------------------------------- A's world

T0 = "2026-11-29T09:00:00Z"


def fingerprint_trace(text: str) -> dict:
    from consolidation.tests.test_skill_mining import fingerprint_trace as make

    inputs, steps, output = make(text)
    return {
        "task": f"Fingerprint the scanned {text} for the audit ledger",
        "inputs": inputs,
        "steps": steps,
        "output": output,
        "succeeded": True,
        "verified": True,
        "verification": {"by": "reconciliation job", "evidence": {"matched": True}},
        "session_id": f"{MARK}-session",
    }


PROCEDURE = """
def run(params, tools):
    record = params["record"]
    digest = tools.sha256({"text": "piper:" + record})
    return {"record": record, "check": digest[:8]}
"""

SKILL = {
    "name": f"{MARK}-checksum",
    "purpose": f"Compute the {MARK} checksum of an invoice record",
    "trigger": {"keywords": ["checksum", MARK]},
    "required_tools": ["sha256"],
    "parameter_schema": {
        "type": "object",
        "properties": {"record": {"type": "string", "minLength": 1}},
        "required": ["record"],
        "additionalProperties": False,
    },
    "procedure": PROCEDURE,
    "examples": [{"params": {"record": "INV-1"}}],
}


def created(response, *statuses: int) -> dict:
    expected = statuses or (201,)
    assert response.status_code in expected, (response.status_code, response.content[:2000])
    return response.json()


def send(client, method: str, path: str, body=None, **headers):
    if method in SAFE:
        return client.generic(method, path, **headers)
    return client.generic(
        method,
        path,
        json.dumps(body if body is not None else {}),
        content_type="application/json",
        **headers,
    )


def build_world(client_a: AgentClient) -> dict[str, str]:
    """Agent A writes one of everything through the API (and through the consolidation
    service the candidates, which the API only queues). Returns A's ids by kind."""
    from consolidation.services import consolidate

    c = client_a
    ids: dict[str, str] = {"key": str(c.api_key.pk)}

    def post(path, body, *statuses, **headers):
        return created(send(c, "POST", "/api/v1/" + path, body, **headers), *statuses)

    event = post(
        "events",
        {
            "event_type": "user.said",
            "occurred_at": T0,
            "session_id": f"{MARK}-session",
            "actor": f"{MARK}-actor",
            "source_type": "user_statement",
            "payload": {"text": f"{MARK} ships on Friday"},
        },
        HTTP_IDEMPOTENCY_KEY="shared-idempotency-key",
    )
    ids["event"] = event["id"]
    ids["source"] = post(
        "sources/ingest",
        {
            "title": f"{MARK} handbook",
            "content": f"The {MARK} handbook.\n\nDeploys happen on Fridays in {MARK}.",
            "uri": f"https://example.com/{MARK}",
        },
    )["source"]["id"]
    ids["entity"] = post("entities", {"name": f"{MARK} Corp", "aliases": [f"{MARK}-co"]})["id"]
    post("entities", {"name": f"{MARK} Town"})
    ids["predicate"] = f"{MARK}.located_in"
    created(
        send(
            c,
            "PUT",
            f"/api/v1/predicates/{ids['predicate']}",
            {"cardinality": "one", "value_type": "entity"},
        ),
        201,
    )
    fact = post(
        "facts",
        {
            "subject": f"{MARK} Corp",
            "predicate": ids["predicate"],
            "object_entity": f"{MARK} Town",
            "source_type": "user_statement",
            "valid_from": T0,
        },
    )
    ids["fact"] = fact["fact"]["id"]
    post(
        "facts",
        {
            "subject": f"{MARK} Corp",
            "predicate": f"{MARK}.headcount",
            "value": 40,
            "source_type": "operator",
            "valid_from": T0,
        },
    )
    ids["episode"] = post(
        "episodes",
        {
            "occurred_at": T0,
            "summary": f"Alice {MARK.title()} moved to Berlin.",
            "action": "read the HR feed",
            "observation": f"Alice {MARK.title()} moved to Berlin.",
            "actor": f"{MARK}-actor",
            "session_id": f"{MARK}-session",
        },
    )["id"]
    skill = post("skills", SKILL)
    ids["skill"] = skill["id"]
    ids["version"] = skill["versions"][0]["id"]
    ids["validation"] = post(f"skills/versions/{ids['version']}/validate", {}, 202)["id"]
    ids["execution"] = post(
        f"skills/versions/{ids['version']}/executions",
        {"params": {"record": "INV-2"}, "succeeded": True, "session_id": f"{MARK}-session"},
    )["id"]
    for n in (4411, 4412, 4413):
        ids["skill_trace"] = post("skills/traces", fingerprint_trace(f"{MARK} {n}"))["id"]
    thread = post("threads", {"key": f"{MARK}-thread", "session_id": f"{MARK}-session"})
    ids["thread"] = thread["id"]
    created(
        send(
            c,
            "PUT",
            f"/api/v1/threads/{ids['thread']}/state",
            {"state": {"goal": f"{MARK} launch"}, "based_on": 0, "session_id": f"{MARK}-session"},
        ),
        200,
        201,
    )
    ids["intention"] = post(
        "intentions",
        {
            "description": f"Call {MARK} back",
            "trigger_type": "manual",
            "thread": ids["thread"],
        },
    )["id"]
    post("intentions", {"description": f"Then {MARK} again", "trigger_type": "manual"})
    post(
        f"threads/{ids['thread']}/handover",
        {"note": f"{MARK} handover", "to_session": f"{MARK}-next"},
    )
    recall = post("recall", {"query": f"Where is {MARK} Corp located?"}, 200, 201)
    ids["recall_trace"] = recall["id"]
    post(
        f"recall/{ids['recall_trace']}/feedback",
        {"used": [], "outcome": "success", "note": MARK},
        200,
        201,
    )
    post("context", {"task": f"Plan the {MARK} launch", "thread_id": ids["thread"]}, 200, 201)
    post(
        "recall/decisions", {"task": f"{MARK} launch", "looked": True, "trace": ids["recall_trace"]}
    )
    created(
        send(
            c,
            "PUT",
            "/api/v1/webhook",
            {"url": f"https://example.com/{MARK}-hook", "secret": f"{MARK}-secret-0001"},
        ),
        200,
        201,
    )
    ids["policy"] = post(
        "retention-policies",
        {"name": f"{MARK}-policy", "event_type": "user.said", "max_age_days": 3650},
    )["id"]
    post("events", {"event_type": "user.said", "actor": f"{MARK}-erased", "payload": {}})
    ids["erasure"] = post("erasure", {"actor": f"{MARK}-erased", "reason": f"{MARK} request"})["id"]
    agent = c.agent
    run = consolidate(agent=agent)
    ids["run"] = str(run.pk)
    from consolidation.models import CandidateFact, CandidateSkill

    ids["candidate"] = str(
        CandidateFact.objects.filter(agent=agent).values_list("pk", flat=True)[0]
    )
    consolidate(agent=agent, kind="skills")
    ids["skill_candidate"] = str(
        CandidateSkill.objects.filter(agent=agent).values_list("pk", flat=True)[0]
    )
    return ids


def make_attacker() -> AgentClient:
    return make_client("agent-b", scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN))


def make_victim() -> AgentClient:
    return make_client("agent-a", scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN))


# ----------------------------------------------------------------------- A's snapshot


def _agent_path(model) -> str | None:
    names = {f.name: f for f in model._meta.concrete_fields}
    if "agent" in names:
        return "agent"
    for f in model._meta.concrete_fields:
        if f.is_relation and any(g.name == "agent" for g in f.related_model._meta.concrete_fields):
            return f"{f.name}__agent"
    return None


def tenant_models() -> list[tuple[type, str]]:
    """(model, lookup to its agent) for every model that belongs to an agent."""
    found = []
    for model in apps.get_models():
        path = _agent_path(model)
        if path is not None:
            found.append((model, path))
    return found


def snapshot(agent: Agent) -> dict[str, list]:
    """Every row of A's, every column, by table: a write anywhere of A's changes it."""
    rows = {"tenancy.Agent": list(Agent.objects.filter(pk=agent.pk).values())}
    for model, path in tenant_models():
        rows[model._meta.label] = [
            {k: _comparable(v) for k, v in row.items()}
            for row in model.objects.filter(**{path: agent}).order_by("pk").values()
        ]
    return rows


def _comparable(value):
    # pgvector columns come back as numpy arrays, which == does not compare.
    return value.tolist() if hasattr(value, "tolist") else value


def snapshot_ids(rows: dict[str, list]) -> set[str]:
    """Every uuid primary key of A's: none may show in an answer to B."""
    found = set()
    for table in rows.values():
        for row in table:
            if isinstance(row.get("id"), uuid.UUID):
                found.add(str(row["id"]))
    return found


def now_iso() -> str:
    return timezone.now().isoformat()
