"""What recall accepts: the question, its limit and filters, checked before anything is written."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from django.utils import timezone

from piper.api.serializers import api_datetime
from piper.errors import InvalidInput

MAX_QUERY_CHARS = 2000
MAX_LIMIT = 50


@dataclass(frozen=True)
class RecallFilters:
    """Narrow a recall. Episodes use all of them (source_id: chunks only)."""

    actor: str | None = None
    environment: str | None = None
    session_id: str | None = None
    goal_id: str | None = None
    task_id: str | None = None
    outcome: str | None = None
    occurred_after: datetime | None = None
    occurred_before: datetime | None = None
    source_id: uuid.UUID | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = api_datetime(value) if isinstance(value, datetime) else str(value)
        return out


FILTER_NAMES = tuple(f.name for f in fields(RecallFilters))


def check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput(
            "query must be a non-empty question", details={"query": ["must not be empty"]}
        )
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"query must be at most {MAX_QUERY_CHARS} characters (got {len(query)}); "
            "ask about one thing at a time",
            details={"query": [f"at most {MAX_QUERY_CHARS} characters"]},
        )
    return query.strip()


def check_filters(filters: RecallFilters | dict | None) -> RecallFilters:
    if filters is None:
        return RecallFilters()
    if isinstance(filters, dict):
        unknown = sorted(set(filters) - set(FILTER_NAMES))
        if unknown:
            raise InvalidInput(
                f"filters.{unknown[0]}: unknown filter; allowed: {', '.join(FILTER_NAMES)}",
                details={"filters": {name: ["unknown filter"] for name in unknown}},
            )
        filters = RecallFilters(**filters)
    for name in ("occurred_after", "occurred_before"):
        moment = getattr(filters, name)
        if moment is not None and timezone.is_naive(moment):
            raise InvalidInput(
                f"filters.{name}: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
                details={"filters": {name: ["naive date-time"]}},
            )
    after, before = filters.occurred_after, filters.occurred_before
    if after is not None and before is not None and before < after:
        raise InvalidInput(
            "filters.occurred_before: the window ends before it starts; "
            "occurred_before must not be earlier than occurred_after",
            code="invalid_window",
            details={"filters": {"occurred_before": ["earlier than occurred_after"]}},
        )
    return filters


def check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(
            f"limit must be an integer from 1 to {MAX_LIMIT}",
            details={"limit": [f"between 1 and {MAX_LIMIT}"]},
        )
    return limit
