"""Fixtures shared by every app's tests: agents, keys and authenticated API clients."""

import pytest
from rest_framework.test import APIClient

from piper.tenancy.models import Scope
from piper.tenancy.services import agent_create, api_key_create

pytest_plugins = ["testsupport.plugin"]


class AgentClient(APIClient):
    """An API client that authenticates as one agent's key."""

    def __init__(self, agent, raw_key, api_key):
        super().__init__()
        self.agent, self.raw_key, self.api_key = agent, raw_key, api_key
        self.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")


def make_client(name: str, scopes=(Scope.READ, Scope.WRITE), rate_per_minute=None) -> AgentClient:
    agent = agent_create(name=name)
    api_key, raw = api_key_create(
        agent=agent, name="test", scopes=scopes, rate_per_minute=rate_per_minute
    )
    return AgentClient(agent, raw, api_key)


@pytest.fixture
def client_a(db) -> AgentClient:
    return make_client("agent-a")


@pytest.fixture
def client_b(db) -> AgentClient:
    return make_client("agent-b")


@pytest.fixture
def agent_a(client_a):
    return client_a.agent


@pytest.fixture
def read_only_client(db) -> AgentClient:
    return make_client("agent-readonly", scopes=(Scope.READ,))


@pytest.fixture
def anonymous_client() -> APIClient:
    return APIClient()
