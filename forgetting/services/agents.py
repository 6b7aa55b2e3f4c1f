"""The hard delete of a whole agent: everything of it, and nothing of anyone else.

An operator action (`manage.py agent_delete`, the admin), not an API call: it
removes every row whose agent is this one — in every table that has an agent
(found from the models, so a new app's tables are covered), and the rows
hanging off those — the ledger included, through the one path its guard
allows for this (migration ledger 0008), its own vector indexes and
partitions, and its keys in Redis. What stays is the receipt, which names the
agent and counts what went where, and a residue check that every table holds
no row of it.
"""

from __future__ import annotations

import time
import uuid

from django.apps import apps
from django.core.cache import cache
from django.db import connection, models, transaction

from episodes.actor_graphs import agent_partition_name
from episodes.agent_graphs import graph_name
from ledger.erasure import allow_erasure_in_this_transaction
from piper.errors import Conflict, InvalidInput
from piper.provenance import RetentionClass
from piper.tenancy.models import Agent

from ..models import Erasure, ErasureKind, ErasureStatus

AGENT_DELETE_SETTING = "piper.agent_delete"


def _owned_tables() -> tuple[list[type[models.Model]], list[tuple[type[models.Model], list]]]:
    """The models with an agent column, and those without one whose rows hang
    off one (each with its foreign keys to such models)."""
    owned, children = [], []
    for model in apps.get_models():
        if model is Agent or model._meta.proxy or not model._meta.managed:
            continue
        columns = {f.attname for f in model._meta.concrete_fields}
        if "agent_id" in columns:
            owned.append(model)
    owned_set = set(owned)
    for model in apps.get_models():
        if model in owned_set or model is Agent or model._meta.proxy:
            continue
        links = [
            f for f in model._meta.concrete_fields if f.is_relation and f.related_model in owned_set
        ]
        if links:
            children.append((model, links))
    return owned, children


def agent_hard_delete(
    *, agent: Agent, reason: str, requested_by: str, legal_hold_lifted: str = ""
) -> Erasure:
    """Delete the agent and everything of it; return the receipt (which outlives it).

    InvalidInput without a reason; Conflict (legal_hold) when any of its events
    is under legal hold, unless `legal_hold_lifted` gives the operator's reason.
    The agent's earlier erasure receipts go too (their selectors name its data).
    """
    if not reason.strip():
        raise InvalidInput("a hard delete needs a reason", details={"reason": ["required"]})
    from ledger.models import Event

    held = Event.objects.filter(agent=agent, retention_class=RetentionClass.PERMANENT)
    if held.exists() and not legal_hold_lifted.strip():
        raise Conflict(
            f"{held.count()} event(s) of agent {agent.name!r} are under legal hold; an "
            "operator must lift the hold, with a reason, to delete the agent",
            code="legal_hold",
        )
    started = time.perf_counter()
    agent_id, name = agent.pk, agent.name
    owned, children = _owned_tables()
    counts: dict[str, int] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, true)", [AGENT_DELETE_SETTING, str(agent_id)])
        allow_erasure_in_this_transaction()
        # The agent's own vector graph and actor leaves are objects, not rows.
        cursor.execute(f'DROP INDEX IF EXISTS "{graph_name(agent_id)}"')
        cursor.execute(f'DROP TABLE IF EXISTS "{agent_partition_name(agent_id)}" CASCADE')
        for model, links in children:
            table = model._meta.db_table
            condition = " OR ".join(
                f'"{f.column}" IN (SELECT "{f.target_field.column}" FROM '
                f'"{f.related_model._meta.db_table}" WHERE agent_id = %s)'
                for f in links
            )
            cursor.execute(f'DELETE FROM "{table}" WHERE {condition}', [agent_id] * len(links))
            if cursor.rowcount:
                counts[table] = cursor.rowcount
        for model in owned:
            table = model._meta.db_table
            cursor.execute(f'DELETE FROM "{table}" WHERE agent_id = %s', [agent_id])
            if cursor.rowcount:
                counts[table] = cursor.rowcount
        cursor.execute(f'DELETE FROM "{Agent._meta.db_table}" WHERE id = %s', [agent_id])
        receipt = Erasure.objects.create(
            agent=None,
            agent_ref=agent_id,
            agent_name=name,
            kind=ErasureKind.AGENT,
            selector={"agent": str(agent_id)},
            reason=reason,
            requested_by=requested_by,
            legal_hold_lifted=legal_hold_lifted,
            events=counts.get("ledger_event", 0),
            counts=counts,
            removed={},
            status=ErasureStatus.RESIDUE_FOUND,
            duration_ms=0,
        )
    for key in cache.keys(f"*{agent_id}*"):
        cache.delete(key)
    residue = agent_residue(agent_id)
    receipt.residue = residue
    receipt.residue_found = sum(f["found"] for f in residue)
    receipt.status = ErasureStatus.COMPLETED if not receipt.residue_found else receipt.status
    receipt.duration_ms = (time.perf_counter() - started) * 1000
    receipt.save(update_fields=["residue", "residue_found", "status", "duration_ms"])
    return receipt


def agent_residue(agent_id: uuid.UUID) -> list[dict]:
    """Every table with an agent column holds no row of the agent (its deletion
    receipts excepted), no index or partition is named after it, Redis holds no
    key naming it."""
    owned, _ = _owned_tables()
    findings = []
    with connection.cursor() as cursor:
        for model in owned:
            table = model._meta.db_table
            extra = " AND kind <> %s" if model is Erasure else ""
            params = [agent_id, ErasureKind.AGENT] if model is Erasure else [agent_id]
            if model is Erasure:
                cursor.execute(
                    f'SELECT count(*) FROM "{table}" WHERE agent_ref = %s{extra}', params
                )
            else:
                cursor.execute(f'SELECT count(*) FROM "{table}" WHERE agent_id = %s', params)
            findings.append(
                {"projection": table, "check": "rows_of_agent", "found": cursor.fetchone()[0]}
            )
        cursor.execute(
            "SELECT count(*) FROM pg_class WHERE relname LIKE %s",
            [f"%{uuid.UUID(str(agent_id)).hex}%"],
        )
        findings.append(
            {"projection": "catalog", "check": "named_after_agent", "found": cursor.fetchone()[0]}
        )
        cursor.execute(f'SELECT count(*) FROM "{Agent._meta.db_table}" WHERE id = %s', [agent_id])
        findings.append(
            {"projection": "agents", "check": "agent_row", "found": cursor.fetchone()[0]}
        )
    findings.append(
        {
            "projection": "redis",
            "check": "keys_naming_agent",
            "found": len(cache.keys(f"*{agent_id}*")),
        }
    )
    return findings
