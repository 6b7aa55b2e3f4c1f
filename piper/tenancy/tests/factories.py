"""Factories for agents and keys; both go through piper.tenancy.services."""

import factory

from piper.tenancy.models import Agent, ApiKey, Scope
from piper.tenancy.services import agent_create, api_key_create


class AgentFactory(factory.Factory):
    class Meta:
        model = Agent

    name = factory.Sequence(lambda n: f"agent-{n}")
    description = ""

    @classmethod
    def _create(cls, model_class, **fields):
        return agent_create(**fields)


class ApiKeyFactory(factory.Factory):
    """Creates a key and keeps its secret on `.raw` (the service shows it only once)."""

    class Meta:
        model = ApiKey

    agent = factory.SubFactory(AgentFactory)
    name = factory.Sequence(lambda n: f"key {n}")
    scopes = (Scope.READ, Scope.WRITE)
    rate_per_minute = None

    @classmethod
    def _create(cls, model_class, **fields):
        api_key, raw = api_key_create(**fields)
        api_key.raw = raw
        return api_key
