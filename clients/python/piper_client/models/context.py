"""The context block: what the next model call should see, packed to a budget."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel


class ContextBudget(ApiModel):
    unit: str
    limit: int
    used: int
    tokenizer: str


class ContextItem(ApiModel):
    kind: str
    id: str
    text: str
    score: float
    cost: int
    memory_status: dict[str, Any]
    field: str | None = None
    session_id: str | None = None
    occurred_at: datetime | None = None
    skill: str | None = None
    version: int | None = None
    applicable: bool | None = None
    refers_to: dict[str, Any] | None = None


class ContextSection(ApiModel):
    name: str
    title: str
    items: list[ContextItem]


class ContextOmitted(ApiModel):
    section: str
    kind: str
    id: str
    cost: int


class ContextBlock(ApiModel):
    id: str
    thread: dict[str, Any] | None
    session_id: str | None
    now: datetime
    budget: ContextBudget | None = None
    over_budget: bool
    sections: list[ContextSection]
    omitted: list[ContextOmitted]
    withheld: int
    text: str
    latency_ms: float

    def section(self, name: str) -> list[ContextItem]:
        """The items of one section (empty when the block has none of it)."""
        return next((section.items for section in self.sections if section.name == name), [])
