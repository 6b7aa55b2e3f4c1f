"""What management commands share about agents."""

from __future__ import annotations

import uuid

from django.core.management.base import CommandError

from .models import Agent


def agent_named(ref: str) -> Agent:
    """The agent a command's --agent names, by id or by name (CommandError if none)."""
    try:
        agent = Agent.objects.filter(pk=uuid.UUID(ref)).first()
    except ValueError:
        agent = Agent.objects.filter(name=ref).first()
    if agent is None:
        raise CommandError(f"no agent {ref!r}")
    return agent
