"""Typed answers. Each model declares the fields an agent reads; a field the
service adds later is kept (extra="allow"), so an older client keeps working.
tests/test_schema.py checks every declared field against the service's
OpenAPI schema: a change there that would break this client fails a test."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, PrivateAttr


class ApiModel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    _response: httpx.Response | None = PrivateAttr(default=None)

    @property
    def raw_response(self) -> httpx.Response | None:
        """The HTTP answer this came from (headers, status, the text as sent)."""
        return self._response


# Each model names the schema component it mirrors (tests/test_schema.py).


class Agent(ApiModel):
    __component__ = "Output"
    id: str
    name: str
    scopes: list[str]


class Event(ApiModel):
    __component__ = "EventOutput"
    id: str
    seq: int
    event_type: str
    payload: Any = None
    occurred_at: str
    recorded_at: str


class Fact(ApiModel):
    __component__ = "FactOutput"
    id: str
    subject: Any
    predicate: Any
    value: Any = None
    memory_status: dict[str, Any]


class FactWrite(ApiModel):
    __component__ = "FactWriteOutput"
    outcome: str
    fact: Fact | None = None
    superseded: list[Any] = []


class FactList(ApiModel):
    __component__ = "FactListOutput"
    facts: list[Fact]

    @property
    def values(self) -> list[Any]:
        return [f.value for f in self.facts]


class Episode(ApiModel):
    __component__ = "EpisodeOutput"
    id: str
    occurred_at: str
    summary: str
    session_id: str
    actor: str
    outcome: str


class EpisodeSearch(ApiModel):
    __component__ = "EpisodeSearchOutput"
    abstained: bool
    hits: list[dict[str, Any]]
    near_misses: list[dict[str, Any]]


class Skill(ApiModel):
    __component__ = "SkillOutput"
    id: str
    name: str
    versions: list[dict[str, Any]]


class SkillMatch(ApiModel):
    __component__ = "MatchOutput"
    applicable: list[dict[str, Any]]
    near_misses: list[dict[str, Any]]
    no_applicable_skill: bool


class Execution(ApiModel):
    __component__ = "ExecutionOutput"
    id: str
    version_id: str
    status: str
    succeeded: bool | None = None
    result: Any = None
    error: Any = None


class Intention(ApiModel):
    __component__ = "IntentionOutput"
    id: str
    description: str
    status: str
    trigger_type: str
    priority: int
    due_at: str | None = None
    thread: str | None = None


class Thread(ApiModel):
    __component__ = "ThreadDetailOutput"
    id: str
    key: str
    status: str
    current_version: int


class WorkingState(ApiModel):
    __component__ = "WorkingStateOutput"
    thread_id: str
    version: int
    state: dict[str, Any]


class Handover(ApiModel):
    __component__ = "HandoverOutput"
    id: str
    thread_id: str
    to_session: str
    status: str


class Resume(ApiModel):
    __component__ = "ResumeOutput"
    checkpoint: WorkingState | None = None
    intentions: list[Intention]
    recheck: list[dict[str, Any]]
    failed_branches: list[dict[str, Any]]


class Evidence(ApiModel):
    __component__ = "Evidence"
    kind: str
    id: str
    text: str
    score: float
    memory_status: dict[str, Any]


class RecallAnswer(ApiModel):
    __component__ = "RecallOutput"
    id: str
    route: dict[str, Any]
    abstained: bool
    evidence: list[Evidence]
    near_misses: list[Evidence]


class Feedback(ApiModel):
    __component__ = "FeedbackOutput"
    id: str
    trace: str
    outcome: str


class ContextItem(ApiModel):
    __component__ = "ContextItem"
    kind: str
    id: str
    text: str
    cost: int
    memory_status: dict[str, Any]


class ContextSection(ApiModel):
    __component__ = "ContextSection"
    name: str
    title: str
    items: list[ContextItem]


class ContextBlock(ApiModel):
    __component__ = "ContextOutput"
    id: str
    sections: list[ContextSection]
    omitted: list[dict[str, Any]]
    budget: dict[str, Any]
    over_budget: bool
    text: str

    def section(self, name: str) -> list[ContextItem]:
        return next((s.items for s in self.sections if s.name == name), [])


class ErasurePreview(ApiModel):
    __component__ = "ErasureDryRun"
    dry_run: bool
    events: int
    counts: dict[str, Any]


class Erasure(ApiModel):
    __component__ = "ErasureOutput"
    id: str
    status: str
    events: int
    counts: dict[str, Any] | None = None
    residue_found: int | None = None


MODELS: tuple[type[ApiModel], ...] = tuple(
    m
    for m in list(globals().values())
    if isinstance(m, type) and issubclass(m, ApiModel) and m is not ApiModel
)
