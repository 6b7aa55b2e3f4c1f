"""piper.tenancy.selectors."""

import time

import pytest

from piper.tenancy.models import ApiKey
from piper.tenancy.selectors import api_key_for_secret, api_key_list
from piper.tenancy.services import agent_deactivate, api_key_revoke, api_key_touch
from piper.tenancy.tests.factories import AgentFactory, ApiKeyFactory

pytestmark = pytest.mark.django_db


def test_api_key_for_secret(django_assert_num_queries):
    api_key = ApiKeyFactory()
    with django_assert_num_queries(1):
        found = api_key_for_secret(api_key.raw)
        assert (found, found.agent) == (api_key, api_key.agent)  # agent joined, no second query


def test_api_key_for_secret_loads_every_field_as_the_orm_does():
    api_key = ApiKeyFactory(scopes=["read", "admin"], rate_per_minute=7)
    api_key_touch(api_key=api_key)
    found = api_key_for_secret(api_key.raw)
    orm = ApiKey.objects.select_related("agent").get(pk=api_key.pk)

    def fields(obj):
        return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}

    assert fields(found) == fields(orm)
    assert fields(found.agent) == fields(orm.agent)
    assert found.scopes == ["read", "admin"] and found.last_used_at is not None
    assert not found._state.adding and found._state.db == "default"


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
