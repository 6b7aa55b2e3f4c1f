"""piper.tenancy.selectors."""

import time

import pytest

from piper.tenancy.selectors import api_key_for_secret, api_key_list
from piper.tenancy.services import agent_deactivate, api_key_revoke
from piper.tenancy.tests.factories import AgentFactory, ApiKeyFactory

pytestmark = pytest.mark.django_db


def test_api_key_for_secret(django_assert_num_queries):
    api_key = ApiKeyFactory()
    with django_assert_num_queries(1):
        found = api_key_for_secret(api_key.raw)
        assert (found, found.agent) == (api_key, api_key.agent)  # agent joined, no second query


@pytest.mark.parametrize("secret", ["", "pm_unknown", "not-our-format"])
def test_unknown_secret(secret):
    ApiKeyFactory()
    assert api_key_for_secret(secret) is None


def test_wrong_prefix_costs_no_query(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert api_key_for_secret("sk_whatever") is None


def test_revoked_key_and_inactive_agent_are_not_found():
    revoked, dormant = ApiKeyFactory(), ApiKeyFactory()
    api_key_revoke(api_key=revoked)
    agent_deactivate(agent=dormant.agent)
    assert api_key_for_secret(revoked.raw) is None
    assert api_key_for_secret(dormant.raw) is None


def test_api_key_list_is_scoped_and_newest_first():
    agent = AgentFactory()
    first = ApiKeyFactory(agent=agent)
    time.sleep(0.002)  # ids are time-ordered to the millisecond
    second = ApiKeyFactory(agent=agent)
    ApiKeyFactory()
    assert list(api_key_list(agent=agent)) == [second, first]
