"""The SDK against the service's own OpenAPI schema (generated here, in process).

Every SDK method is called (nothing sent) to learn the request it makes and the
model it reads the answer into. The request must be an operation of the API,
and the model must fit that operation's answer: each of its fields is in the
schema with a compatible type, and each field the schema requires is in the
model, nested models included. A server change that would break the client
(a path gone, a field renamed, retyped or dropped, a new required field the
client ignores) fails here first."""

from __future__ import annotations

import inspect
import re
import types
import typing
from datetime import datetime
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from piper_client import Memory
from piper_client.models import ApiModel

JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
JSON_TYPES |= {list: "array", dict: "object", datetime: "string"}
SOME_ID = "01234567-89ab-7def-8123-456789abcdef"


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


class Recording(Memory):
    """Sends nothing: records each call and the model it would read."""

    def __init__(self) -> None:
        super().__init__("http://recording", "pm_x")
        self.calls: list[tuple[str, str, Any, bool]] = []

    def _run(self, call, model):
        self.calls.append((call.method, call.url(), model, False))

    def _pages(self, call, model):
        self.calls.append((call.method, call.url(), model, True))
        return iter(())


def _argument(parameter: inspect.Parameter) -> Any:
    annotation = str(parameter.annotation)
    for kind, value in (("dict", {}), ("list", []), ("bool", True), ("int", 1)):
        if annotation.startswith(kind):
            return value
    return SOME_ID


def every_method(memory: Memory):
    """(name, bound method) of every call the SDK offers, resources and top level."""
    owners = {"": memory} | {
        name: value for name, value in vars(memory).items() if hasattr(value, "_client")
    }
    for prefix, owner in owners.items():
        for name, method in inspect.getmembers(owner, inspect.ismethod):
            if hasattr(method, "paginated"):
                yield f"{prefix}.{name}".lstrip("."), method


def recorded_calls() -> list[tuple[str, str, str, Any, bool]]:
    memory = Recording()
    calls = []
    for name, method in every_method(memory):
        required = [
            p
            for p in inspect.signature(method).parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        ]
        positional = [_argument(p) for p in required if p.kind != p.KEYWORD_ONLY]
        keywords = {p.name: _argument(p) for p in required if p.kind == p.KEYWORD_ONLY}
        method(*positional, **keywords)
        if name == "erasure.request":  # its model depends on dry_run
            method(reason="r", dry_run=False)
        if name == "context":
            method(as_text=True)
        calls += [(name, *call) for call in memory.calls]
        memory.calls.clear()
    return calls


def _operation(schema: dict, method: str, path: str) -> dict | None:
    # Literal paths first: /sources/search is not /sources/{source_id}.
    for template, item in sorted(schema["paths"].items(), key=lambda p: p[0].count("{")):
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path) and method.lower() in item:
            return item[method.lower()]
    return None


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node or ("allOf" in node and len(node["allOf"]) == 1):
        node = (
            schema["components"]["schemas"][node["$ref"].split("/")[-1]]
            if "$ref" in node
            else node["allOf"][0]
        )
    return node


def _json_type(schema: dict, node: dict) -> str | None:
    node = _resolve(schema, node)
    if "type" in node:
        return node["type"]
    if "enum" in node:
        return "string"
    for part in node.get("oneOf", []):  # e.g. an enum or null
        found = _json_type(schema, part)
        if found:
            return found
    return None  # any JSON


def _kinds(annotation: Any) -> set:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set().union(*(_kinds(a) for a in typing.get_args(annotation)))
    return set() if annotation is type(None) else {annotation}


def _nested_model(annotation: Any) -> tuple[type[ApiModel] | None, bool]:
    """The model a field holds, and whether it holds a list of them."""
    for kind in _kinds(annotation):
        if isinstance(kind, type) and issubclass(kind, ApiModel):
            return kind, False
        if typing.get_origin(kind) is list:
            (item,) = typing.get_args(kind)
            if isinstance(item, type) and issubclass(item, ApiModel):
                return item, True
    return None, False


def mismatches(schema: dict, model: type[ApiModel], node: dict, where: str = "") -> list[str]:
    component = _resolve(schema, node)
    where = where or model.__name__
    properties = component.get("properties", {})
    problems = []
    names = {field.alias or name: field for name, field in model.model_fields.items()}
    for required in component.get("required", []):
        if required not in names:
            problems.append(f"{where}: the API requires {required!r}, the model lacks it")
    for name, field in names.items():
        if name not in properties:
            problems.append(f"{where}.{name} is not in the API's answer")
            continue
        sent = _json_type(schema, properties[name])
        kinds = {JSON_TYPES.get(typing.get_origin(k) or k) for k in _kinds(field.annotation)}
        kinds |= {
            "object"
            for k in _kinds(field.annotation)
            if isinstance(k, type) and issubclass(k, ApiModel)
        }
        kinds.discard(None)
        if sent and kinds and sent not in kinds and not (sent == "integer" and "number" in kinds):
            problems.append(
                f"{where}.{name}: the API sends {sent}, the model reads {sorted(kinds)}"
            )
        nested, many = _nested_model(field.annotation)
        if nested and not problems:
            child = _resolve(schema, properties[name])
            child = child.get("items", {}) if many else child
            problems += mismatches(schema, nested, child, f"{where}.{name}")
    return problems


def _answers(schema: dict, operation: dict, paged: bool) -> list[dict]:
    """The schemas of the operation's 2xx answers (each variant of a oneOf; a page's items)."""
    found = []
    for status, answer in operation["responses"].items():
        node = answer.get("content", {}).get("application/json", {}).get("schema")
        if not status.startswith("2") or node is None:
            continue
        for variant in _resolve(schema, node).get("oneOf", [node]):
            variant = _resolve(schema, variant)
            if paged:
                variant = (
                    variant["properties"]["results"]
                    if "results" in variant.get("properties", {})
                    else variant
                )
                variant = _resolve(schema, variant).get("items", variant)
            found.append(variant)
    return found


def test_every_sdk_method_is_an_operation_of_the_api_and_its_model_fits(schema):
    calls = recorded_calls()
    assert len(calls) >= 100
    failures = []
    for name, method, path, model, paged in calls:
        operation = _operation(schema, method, path)
        if operation is None:
            failures.append(f"{name}: {method} {path} is not an operation of the API")
            continue
        if model is None:
            continue
        answers = _answers(schema, operation, paged)
        tried = [mismatches(schema, model, answer) for answer in answers]
        if not answers or all(tried):
            failures.append(f"{name} -> {model.__name__}: {tried}")
    assert failures == [], "\n".join(failures)


def test_the_check_catches_what_would_break_the_client(schema):
    """The check itself: a renamed, retyped or missing field is reported."""
    from piper_client.models import Agent

    answer = schema["components"]["schemas"]["Output"]
    assert mismatches(schema, Agent, answer) == []

    class Renamed(ApiModel):
        id: str
        full_name: str

    class Retyped(ApiModel):
        id: int
        name: str
        description: str
        created_at: datetime
        scopes: list[str]

    assert "Renamed.full_name is not in the API's answer" in mismatches(schema, Renamed, answer)
    assert "Renamed: the API requires 'scopes', the model lacks it" in mismatches(
        schema, Renamed, answer
    )
    assert mismatches(schema, Retyped, answer) == [
        "Retyped.id: the API sends string, the model reads ['integer']"
    ]
