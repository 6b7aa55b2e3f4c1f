"""Reads of erasure receipts and retention policies. Every query is scoped to one agent."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from piper.errors import NotFound
from piper.tenancy.models import Agent

from .models import Erasure, RetentionPolicy


def erasure_list(*, agent: Agent) -> QuerySet[Erasure]:
    return Erasure.objects.filter(agent_ref=agent.pk)


def erasure_get(*, agent: Agent, erasure_id: uuid.UUID) -> Erasure:
    """One receipt of this agent's; another agent's is NotFound like a missing one."""
    receipt = Erasure.objects.filter(agent_ref=agent.pk, pk=erasure_id).first()
    if receipt is None:
        raise NotFound(f"erasure {erasure_id} not found")
    return receipt


def retention_policy_list(*, agent: Agent) -> QuerySet[RetentionPolicy]:
    return RetentionPolicy.objects.filter(agent=agent).order_by("name")


def retention_policy_get(*, agent: Agent, policy_id: uuid.UUID) -> RetentionPolicy:
    policy = RetentionPolicy.objects.filter(agent=agent, pk=policy_id).first()
    if policy is None:
        raise NotFound(f"retention policy {policy_id} not found")
    return policy
