"""piper.tenancy.services: agents and API keys."""

import hashlib
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from piper.errors import Conflict, InvalidInput
from piper.tenancy.models import Agent, ApiKey, Scope
from piper.tenancy.services import (
    KEY_PREFIX,
    LAST_USED_RESOLUTION,
    agent_create,
    agent_deactivate,
    agent_update,
    api_key_create,
    api_key_revoke,
    api_key_touch,
    api_key_update,
    hash_key,
)
from piper.tenancy.tests.factories import AgentFactory, ApiKeyFactory

pytestmark = pytest.mark.django_db

NAME_RULE = "use 1-100 letters, digits, '-', '_' or '.', starting with a letter or digit"


class TestAgentCreate:
    @pytest.mark.parametrize("name", ["a", "agent-1", "Agent_2.prod", "9lives", "x" * 100])
    def test_valid_names(self, name):
        agent = agent_create(name=name, description="does things")
        agent.refresh_from_db()
        assert (agent.name, agent.description, agent.is_active, agent.is_throwaway) == (
            name,
            "does things",
            True,
            False,
        )
        assert agent.created_at is not None

    @pytest.mark.parametrize(
        "name",
        [
            "",
            "-leading",
            ".hidden",
            "has space",
            "slash/name",
            "x" * 101,
            "tab\t",
            "trailing\n",
            "émile",
        ],
    )
    def test_invalid_names(self, name):
        with pytest.raises(InvalidInput) as caught:
            agent_create(name=name)
        assert (caught.value.code, caught.value.message, caught.value.details) == (
            "invalid",
            f"agent name {name!r} is invalid: {NAME_RULE}",
            {"name": ["invalid format"]},
        )
        assert not Agent.objects.exists()

    def test_duplicate_name_is_a_conflict(self):
        agent_create(name="twin")
        with pytest.raises(Conflict) as caught:
            agent_create(name="twin")
        assert (caught.value.status, caught.value.code, caught.value.message) == (
            409,
            "agent_exists",
            "an agent named 'twin' already exists",
        )
        assert Agent.objects.filter(name="twin").count() == 1

    def test_throwaway(self):
        assert agent_create(name="battery-run", is_throwaway=True).is_throwaway is True

    def test_database_refuses_a_bad_name_too(self):
        with pytest.raises(IntegrityError, match="agent_name_format"), transaction.atomic():
            Agent.objects.create(name="bad name")

    def test_deactivate(self):
        agent = AgentFactory()
        assert agent_deactivate(agent=agent).is_active is False
        assert Agent.objects.get(pk=agent.pk).is_active is False


class TestApiKeyCreate:
    def test_secret_is_returned_once_and_only_its_hash_stored(self):
        agent = AgentFactory()
        api_key, raw = api_key_create(
            agent=agent, name="worker", scopes=[Scope.READ], rate_per_minute=30
        )
        stored = ApiKey.objects.get(pk=api_key.pk)
        assert raw.startswith(KEY_PREFIX)
        assert len(raw) == len(KEY_PREFIX) + 43  # 32 random bytes, base64url
        assert stored.key_hash == hash_key(raw) == hashlib.sha256(raw.encode()).hexdigest()
        assert stored.prefix == raw[:10]
        assert (stored.agent, stored.name, stored.scopes, stored.rate_per_minute) == (
            agent,
            "worker",
            ["read"],
            30,
        )
        assert (stored.last_used_at, stored.revoked_at) == (None, None)
        stored_values = [
            str(v) for v in ApiKey.objects.filter(pk=api_key.pk).values().get().values()
        ]
        assert raw not in stored_values
        assert not hasattr(stored, "raw")

    def test_secrets_differ(self):
        agent = AgentFactory()
        raws = {api_key_create(agent=agent, name=f"k{i}")[1] for i in range(5)}
        assert len(raws) == 5

    def test_default_scopes_and_duplicates_collapse(self):
        agent = AgentFactory()
        assert api_key_create(agent=agent, name="default")[0].scopes == ["read", "write"]
        assert api_key_create(agent=agent, name="dupes", scopes=["read", "read", "admin"])[
            0
        ].scopes == ["read", "admin"]

    @pytest.mark.parametrize(
        ("scopes", "message", "details"),
        [
            (
                [],
                "scopes must be a non-empty subset of ['read', 'write', 'admin']; got []",
                {"scopes": ["empty"]},
            ),
            (
                ["read", "root"],
                "scopes must be a non-empty subset of ['read', 'write', 'admin']; got ['read', 'root']",
                {"scopes": ["unknown scope 'root'"]},
            ),
            (
                ["READ"],
                "scopes must be a non-empty subset of ['read', 'write', 'admin']; got ['READ']",
                {"scopes": ["unknown scope 'READ'"]},
            ),
        ],
    )
    def test_bad_scopes_are_refused(self, scopes, message, details):
        agent = AgentFactory()
        with pytest.raises(InvalidInput) as caught:
            api_key_create(agent=agent, name="x", scopes=scopes)
        assert (caught.value.message, caught.value.details) == (message, details)
        assert not ApiKey.objects.exists()

    @pytest.mark.parametrize("rate", [0, -5, 2.5, "10", True, 2**31])
    def test_bad_rate_is_refused(self, rate):
        agent = AgentFactory()
        with pytest.raises(InvalidInput) as caught:
            api_key_create(agent=agent, name="x", rate_per_minute=rate)
        assert (caught.value.message, caught.value.details) == (
            f"rate_per_minute must be an integer from 1 to 1000000, or empty; got {rate!r}",
            {"rate_per_minute": ["must be an integer from 1 to 1000000"]},
        )
        assert not ApiKey.objects.exists()

    def test_database_refuses_unknown_or_empty_scopes(self):
        agent = AgentFactory()
        for scopes in ([], ["root"]):
            with (
                pytest.raises(IntegrityError, match="apikey_scopes_known_and_nonempty"),
                transaction.atomic(),
            ):
                ApiKey.objects.create(
                    agent=agent, name="x", prefix="pm_x", key_hash=str(scopes), scopes=scopes
                )

    def test_allows(self):
        read = ApiKeyFactory(scopes=[Scope.READ])
        admin = ApiKeyFactory(scopes=[Scope.ADMIN])
        assert (read.allows("read"), read.allows("write"), read.allows("admin")) == (
            True,
            False,
            False,
        )
        assert (admin.allows("read"), admin.allows("write"), admin.allows("admin")) == (
            True,
            True,
            True,
        )


class TestApiKeyRevoke:
    def test_revoke_is_idempotent(self):
        api_key = ApiKeyFactory()
        first = api_key_revoke(api_key=api_key).revoked_at
        assert first is not None and api_key.is_revoked
        again = api_key_revoke(api_key=ApiKey.objects.get(pk=api_key.pk))
        assert again.revoked_at == first


class TestApiKeyTouch:
    def test_writes_at_most_once_a_minute(self, django_assert_num_queries):
        api_key = ApiKeyFactory()
        with django_assert_num_queries(1):
            api_key_touch(api_key=api_key)
        first = ApiKey.objects.get(pk=api_key.pk).last_used_at
        assert first is not None
        with django_assert_num_queries(0):
            api_key_touch(api_key=api_key)
        fresh = ApiKey.objects.get(pk=api_key.pk)  # as authentication loads it
        with django_assert_num_queries(0):
            api_key_touch(api_key=fresh)
        assert ApiKey.objects.get(pk=api_key.pk).last_used_at == first

    def test_writes_again_after_a_minute(self):
        api_key = ApiKeyFactory()
        old = timezone.now() - LAST_USED_RESOLUTION - timedelta(seconds=1)
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=old)
        api_key_touch(api_key=ApiKey.objects.get(pk=api_key.pk))
        assert ApiKey.objects.get(pk=api_key.pk).last_used_at > old

    def test_stale_copy_does_not_overwrite_a_recent_touch(self):
        api_key = ApiKeyFactory()
        stale = ApiKey.objects.get(pk=api_key.pk)  # loaded before another request touched it
        api_key_touch(api_key=api_key)
        recorded = ApiKey.objects.get(pk=api_key.pk).last_used_at
        api_key_touch(api_key=stale)
        assert ApiKey.objects.get(pk=api_key.pk).last_used_at == recorded


class TestAgentUpdate:
    def test_changes_description_and_activity(self):
        agent = AgentFactory(description="old")
        agent_update(agent=agent, description="new", is_active=False)
        agent.refresh_from_db()
        assert (agent.description, agent.is_active) == ("new", False)
        agent_update(agent=agent, description="new", is_active=True)
        agent.refresh_from_db()
        assert agent.is_active is True


class TestApiKeyUpdate:
    def test_renames_and_rerates_without_touching_the_secret(self):
        api_key = ApiKeyFactory()
        key_hash, scopes = api_key.key_hash, list(api_key.scopes)
        api_key_update(api_key=api_key, name="renamed", rate_per_minute=5)
        api_key.refresh_from_db()
        assert (api_key.name, api_key.rate_per_minute, api_key.key_hash, api_key.scopes) == (
            "renamed",
            5,
            key_hash,
            scopes,
        )

    @pytest.mark.parametrize("rate", [0, -1, True, 1.5])
    def test_refuses_a_rate_that_is_not_a_positive_integer(self, rate):
        api_key = ApiKeyFactory(name="before")
        with pytest.raises(InvalidInput) as excinfo:
            api_key_update(api_key=api_key, name="after", rate_per_minute=rate)
        assert excinfo.value.details == {
            "rate_per_minute": ["must be an integer from 1 to 1000000"]
        }
        api_key.refresh_from_db()
        assert api_key.name == "before"

    def test_database_refuses_a_zero_rate(self):
        api_key = ApiKeyFactory()
        with pytest.raises(IntegrityError), transaction.atomic():
            ApiKey.objects.filter(pk=api_key.pk).update(rate_per_minute=0)
