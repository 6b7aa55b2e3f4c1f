"""Suite C's view of the facts API: the requests an agent makes, and how to
read the answers. Everything that depends on the API's exact shapes is here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.utils.dateparse import parse_datetime

from ...transport import ApiClient, ApiResponse

FACTS = "/api/v1/facts"
PATHS = "/api/v1/graph/paths"
RECALL = "/api/v1/recall"
MAX_BATCH = 1000


class FactsApi:
    """The facts endpoints for one agent. With `memo`, a read asked twice (the
    value and the contest flag of one `current` answer) is made once."""

    def __init__(self, client: ApiClient, *, memo: dict[str, ApiResponse] | None = None) -> None:
        self.client = client
        self.memo = memo

    # writes ---------------------------------------------------------------

    def assert_one(self, claim: dict[str, Any]) -> ApiResponse:
        return self.client.post(FACTS, claim)

    def assert_many(self, claims: Sequence[dict[str, Any]]) -> ApiResponse:
        return self.client.post(FACTS, {"facts": list(claims)})

    def act(self, op: str, fact_id: str, body: dict[str, Any]) -> ApiResponse:
        """correct or end a fact by id."""
        return self.client.post(f"{FACTS}/{fact_id}/{op}", body)

    # reads ----------------------------------------------------------------

    def fact(self, fact_id: str) -> ApiResponse:
        return self.client.get(f"{FACTS}/{fact_id}")

    def _get(self, path: str, **params: Any) -> ApiResponse:
        query = urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{path}?{query}" if query else path
        if self.memo is None:
            return self.client.get(url)
        if url not in self.memo:
            self.memo[url] = self.client.get(url)
        return self.memo[url]

    def current(self, subject: str, predicate: str) -> ApiResponse:
        return self._get(f"{FACTS}/current", subject=subject, predicate=predicate)

    def as_of(self, subject: str, predicate: str, valid_time: str) -> ApiResponse:
        return self._get(
            f"{FACTS}/as-of", subject=subject, predicate=predicate, valid_time=valid_time
        )

    def as_known_at(
        self, subject: str, predicate: str, valid_time: str, record_time: str
    ) -> ApiResponse:
        return self._get(
            f"{FACTS}/as-known-at",
            subject=subject,
            predicate=predicate,
            valid_time=valid_time,
            record_time=record_time,
        )

    def chain(self, subject: str, predicate: str) -> ApiResponse:
        return self._get(f"{FACTS}/chain", subject=subject, predicate=predicate)

    def paths(
        self,
        start: str,
        end: str,
        *,
        predicates: Sequence[str] | None = None,
        hops: int | None = None,
        valid_time: str | None = None,
    ) -> ApiResponse:
        return self._get(
            PATHS,
            start=start,
            end=end,
            predicates=",".join(predicates) if predicates else None,
            min_hops=hops,
            max_hops=hops,
            valid_time=valid_time,
        )

    def recall(self, query: str, *, route: str = "auto", limit: int = 10) -> ApiResponse:
        """A question in plain words (C6); read the answer with episodic.api.answer_of."""
        return self.client.post(RECALL, {"query": query, "route": route, "limit": limit})


# ---------------------------------------------------------------- reading answers


def write_results(body: Any) -> list[dict[str, Any]]:
    """The per-claim results of POST /facts: a batch's list, or a single result."""
    if isinstance(body, dict):
        for key in ("results", "facts"):
            if isinstance(body.get(key), list):
                return body[key]
        if "outcome" in body:
            return [body]
    if isinstance(body, list):
        return body
    return []


def facts_of(body: Any) -> list[dict[str, Any]]:
    """The facts a query answered with."""
    if isinstance(body, list):
        return body
    if isinstance(body, dict):
        for key in ("facts", "results", "versions", "chain"):
            if isinstance(body.get(key), list):
                return body[key]
    return []


def status_of(fact: dict[str, Any]) -> dict[str, Any]:
    status = fact.get("memory_status")
    return status if isinstance(status, dict) else {}


def field_of(fact: dict[str, Any], name: str) -> Any:
    """A field of the fact, or of its memory_status."""
    if name in fact:
        return fact[name]
    return status_of(fact).get(name)


def value_of(fact: dict[str, Any]) -> Any:
    for key in ("value", "object_value"):
        if key in fact and fact[key] is not None:
            return fact[key]
    return entity_name(fact.get("object_entity") or fact.get("object"))


def entity_name(entity: Any) -> Any:
    if isinstance(entity, dict):
        return entity.get("name", entity.get("id"))
    return entity


def entity_id(entity: Any) -> Any:
    return entity.get("id") if isinstance(entity, dict) else entity


def fact_id(fact: dict[str, Any]) -> str | None:
    value = fact.get("id")
    return str(value) if value is not None else None


def ids(values: Any) -> list[str]:
    """Fact ids from a list of ids or of facts."""
    if not isinstance(values, list):
        return []
    return [str(v.get("id")) if isinstance(v, dict) else str(v) for v in values]


def moment(value: Any) -> datetime | None:
    return parse_datetime(value) if isinstance(value, str) else None


def paths_of(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, list):
        return body
    if isinstance(body, dict):
        for key in ("paths", "results"):
            if isinstance(body.get(key), list):
                return body[key]
    return []


def path_shape(path: dict[str, Any]) -> dict[str, list[str]]:
    """A path as its entity names (lower-cased) and its predicates, in order."""
    nodes = [str(entity_name(e)).lower() for e in path.get("entities") or path.get("nodes") or []]
    predicates = []
    for fact in path.get("facts") or path.get("edges") or []:
        predicate = fact.get("predicate")
        predicates.append(predicate.get("name") if isinstance(predicate, dict) else predicate)
    return {"nodes": nodes, "predicates": predicates}
