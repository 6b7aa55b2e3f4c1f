"""python manage.py create_agent NAME."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from piper.tenancy.models import Agent, ApiKey

pytestmark = pytest.mark.django_db


def create_agent(*args) -> list[str]:
    out = StringIO()
    call_command("create_agent", *args, stdout=out)
    return out.getvalue().splitlines()


def key_from(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("key:")).split()[1]


def test_prints_a_working_key():
    lines = create_agent("planner", "--description", "plans things")
    agent = Agent.objects.get(name="planner")
    raw = key_from(lines)
    assert lines == [
        f"agent:  planner ({agent.pk})",
        "scopes: read, write",
        f"key:    {raw}",
        "Store the key now: only its hash is kept. Send it as 'Authorization: Bearer <key>'.",
    ]
    assert agent.description == "plans things"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.get("/api/v1/agent")
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["scopes"]) == ("planner", ["read", "write"])
    assert client.post("/api/v1/events", {"event_type": "a.b"}, format="json").status_code == 201


def test_quiet_prints_only_the_key():
    lines = create_agent("quiet-one", "--quiet")
    assert len(lines) == 1 and lines[0].startswith("pm_")
    assert ApiKey.objects.get(agent__name="quiet-one").prefix == lines[0][:10]


def test_scopes_and_key_name():
    lines = create_agent("operator", "--scopes", "read, admin", "--key-name", "ops console")
    assert lines[1] == "scopes: read, admin"
    api_key = ApiKey.objects.get(agent__name="operator")
    assert (api_key.name, api_key.scopes) == ("ops console", ["read", "admin"])


def test_duplicate_name_fails_without_existing_ok():
    create_agent("twin")
    with pytest.raises(CommandError, match="^an agent named 'twin' already exists$"):
        create_agent("twin")
    assert ApiKey.objects.filter(agent__name="twin").count() == 1


def test_existing_ok_issues_another_key_for_the_same_agent():
    first = key_from(create_agent("twin"))
    second = key_from(create_agent("twin", "--existing-ok"))
    assert first != second
    assert Agent.objects.filter(name="twin").count() == 1
    assert ApiKey.objects.filter(agent__name="twin").count() == 2


def test_existing_ok_creates_a_missing_agent():
    create_agent("fresh", "--existing-ok")
    assert Agent.objects.filter(name="fresh").exists()


def test_bad_scopes_fail_and_leave_no_agent_behind():
    with pytest.raises(
        CommandError,
        match=r"^scopes must be a non-empty subset of \['read', 'write', 'admin'\]; got \['root'\]$",
    ):
        create_agent("keyless", "--scopes", "root")
    assert not Agent.objects.filter(name="keyless").exists()
    create_agent("keyless")  # the name is still free


def test_bad_name_fails():
    with pytest.raises(CommandError, match="^agent name 'bad name' is invalid"):
        create_agent("bad name")
    assert not Agent.objects.exists()
