"""Reads for agents and API keys."""

from __future__ import annotations

from django.db import connection
from django.db.models import QuerySet

from piper.db import fetchall_prepared

from .models import Agent, ApiKey
from .services import KEY_PREFIX, hash_key

# Every API request authenticates, so the key lookup is one statement written
# once (the columns from the models) and prepared: through the ORM, compiling
# the statement cost many times the index probe it runs (docs/benchmarks.md).
_KEY_FIELDS = list(ApiKey._meta.concrete_fields)
_AGENT_FIELDS = list(Agent._meta.concrete_fields)
_KEY_SQL = f"""
    SELECT {", ".join(f'k."{f.column}"' for f in _KEY_FIELDS)},
           {", ".join(f'a."{f.column}"' for f in _AGENT_FIELDS)}
      FROM {ApiKey._meta.db_table} k
      JOIN {Agent._meta.db_table} a ON a.id = k.agent_id
     WHERE k.key_hash = %(key_hash)s AND k.revoked_at IS NULL AND a.is_active
"""


def api_key_for_secret(raw_key: str) -> ApiKey | None:
    """The live key (not revoked, agent active) matching a raw secret, with its
    agent loaded, or None. One query; none for a secret without our prefix."""
    if not raw_key.startswith(KEY_PREFIX):
        return None
    rows = fetchall_prepared(_KEY_SQL, {"key_hash": hash_key(raw_key)})
    if not rows:  # key_hash is unique: at most one row
        return None
    row = rows[0]
    api_key = _from_row(ApiKey, _KEY_FIELDS, row[: len(_KEY_FIELDS)])
    agent = _from_row(Agent, _AGENT_FIELDS, row[len(_KEY_FIELDS) :])
    ApiKey.agent.field.set_cached_value(api_key, agent)
    return api_key


def _from_row(model, fields, values):
    values = [
        f.from_db_value(v, None, connection) if v is not None and hasattr(f, "from_db_value") else v
        for f, v in zip(fields, values, strict=True)
    ]
    return model.from_db("default", [f.attname for f in fields], values)


def api_key_list(*, agent: Agent) -> QuerySet[ApiKey]:
    """This agent's keys, newest first. Keys made in one transaction share
    created_at; the time-ordered (UUIDv7) id breaks the tie to the millisecond."""
    return ApiKey.objects.filter(agent=agent).order_by("-created_at", "-id")
