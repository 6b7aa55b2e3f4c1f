"""The client against the service's own OpenAPI schema: a change to the API that
would break the client (a path or method gone, a field renamed, retyped or
removed) fails here."""

from __future__ import annotations

import contextlib
import re
import types
import typing
from typing import Any

import httpx
import pytest
from drf_spectacular.generators import SchemaGenerator
from piper_client import Memory
from piper_client.models import MODELS

JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
JSON_TYPES |= {list: "array", dict: "object"}


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].split("/")[-1]]
    return node


def _json_type(schema: dict, node: dict) -> str | None:
    node = _resolve(schema, node)
    if "type" in node:
        return node["type"]
    if "enum" in node:
        return "string"
    for key in ("allOf", "oneOf", "anyOf"):
        for part in node.get(key, []):
            found = _json_type(schema, part)
            if found:
                return found
    return None  # any JSON


def _python_types(annotation: Any) -> set:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_python_types(a) for a in typing.get_args(annotation)))
    if annotation is type(None):
        return set()
    return {origin or annotation}


def test_every_model_field_is_in_the_schema_with_a_compatible_type(schema):
    components = schema["components"]["schemas"]
    checked = 0
    for model in MODELS:
        component = components.get(model.__component__)
        assert component is not None, f"{model.__name__}: no component {model.__component__}"
        properties = component["properties"]
        for name, field in model.model_fields.items():
            assert name in properties, f"{model.__name__}.{name} is not in {model.__component__}"
            wanted = _json_type(schema, properties[name])
            kinds = _python_types(field.annotation)
            json_kinds = {JSON_TYPES[k] for k in kinds if k in JSON_TYPES}
            if wanted and json_kinds:  # a model or Any on either side: any JSON is fine
                assert wanted in json_kinds or (wanted == "integer" and "number" in json_kinds), (
                    f"{model.__name__}.{name}: the API sends {wanted}, the client reads "
                    f"{sorted(json_kinds)}"
                )
            checked += 1
    assert checked > 80


class _Recorder(httpx.BaseTransport):
    """Answers nothing; records what each client method would send."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append((request.method, request.url.path))
        return httpx.Response(204)


def _every_call(memory: Memory) -> None:
    some = "01234567-89ab-7def-8123-456789abcdef"
    attempts = [
        memory.agent,
        lambda: memory.events.append("x.y", {}, occurred_at="2026-01-01T00:00:00Z"),
        lambda: memory.events.get(some),
        lambda: list(memory.events.iter()),
        lambda: memory.facts.assert_("s", "p", 1),
        lambda: memory.facts.current("s"),
        lambda: memory.facts.as_of("s", "p", "2026-01-01T00:00:00Z"),
        lambda: memory.facts.chain("s", "p"),
        lambda: memory.facts.get(some),
        lambda: memory.facts.retract(some, reason="r"),
        lambda: memory.episodes.record(occurred_at="2026-01-01T00:00:00Z", summary="s"),
        lambda: memory.episodes.get(some),
        lambda: list(memory.episodes.iter()),
        lambda: memory.episodes.search("q"),
        lambda: memory.skills.create("n", purpose="p"),
        lambda: memory.skills.get(some),
        lambda: memory.skills.match("t"),
        lambda: memory.skills.execute(some, {}),
        lambda: memory.skills.version(some),
        lambda: memory.intentions.create("d"),
        lambda: memory.intentions.get(some),
        lambda: list(memory.intentions.iter()),
        lambda: list(memory.intentions.due()),
        lambda: memory.intentions.start(some),
        lambda: memory.intentions.complete(some),
        lambda: memory.intentions.cancel(some),
        lambda: memory.working_state.thread("k"),
        lambda: memory.working_state.get(some),
        lambda: memory.working_state.checkpoint(some, {}, based_on=0),
        lambda: memory.working_state.handover(some, to_session="s"),
        lambda: memory.working_state.resume(some, session_id="s"),
        lambda: memory.working_state.acknowledge(some, session_id="s"),
        lambda: memory.recall("q"),
        lambda: memory.recall_feedback(some, used=[], outcome="success"),
        lambda: memory.context(task="t"),
        lambda: memory.erasure.request(reason="r", subject="s"),
        lambda: memory.erasure.get(some),
    ]
    for attempt in attempts:
        # The recorder's empty answers are not what the models read.
        with contextlib.suppress(Exception):
            attempt()


def test_every_client_call_is_an_operation_of_the_api(schema):
    recorder = _Recorder()
    memory = Memory("http://recorder", "pm_x", transport=recorder, max_retries=0)
    _every_call(memory)
    operations = [
        (method.upper(), re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"))
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(recorder.calls) >= 37
    for method, path in recorder.calls:
        assert any(m == method and p.match(path) for m, p in operations), (method, path)
