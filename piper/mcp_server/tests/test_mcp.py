"""The MCP tool server through the `mcp` package's own client, against the real service.

In process (the client connected to the server object, the key the stdio
process's), over streamable HTTP with bearer keys (uvicorn on a free port),
and as the `manage.py mcp` stdio subprocess. Tools run in worker threads
with their own database connections, so these tests commit (transaction=True).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from django.db import connection

from conftest import make_client
from intentions.models import Intention, IntentionStatus
from piper.mcp_server.auth import process_key
from piper.mcp_server.server import TOOLS, build_server
from piper.tenancy.models import Scope
from piper.tenancy.services import api_key_create, api_key_revoke

pytestmark = pytest.mark.django_db(transaction=True)

READ_TOOLS = {"recall", "context", "current_fact", "fact_history", "list_due_intentions"}
READ_TOOLS |= {"find_skill"}
WRITE_TOOLS = {
    "remember",
    "assert_fact",
    "commit_intention",
    "complete_intention",
    "cancel_intention",
    "checkpoint",
    "resume",
    "handover",
    "run_skill",
}


def run(key: str, calls):
    """Connect the mcp client to the server in process, as the stdio process of `key`,
    and run `calls(client)`."""
    from mcp import Client

    async def main():
        token = process_key.set(key)
        try:
            async with Client(build_server()) as client:
                return await calls(client)
        finally:
            process_key.reset(token)

    return anyio.run(main)


def call(key: str, name: str, arguments: dict):
    async def calls(client):
        return await client.call_tool(name, arguments)

    return run(key, calls)


def structured(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error
    return result.content[0].text


def names(key: str) -> set[str]:
    async def calls(client):
        return {t.name for t in (await client.list_tools()).tools}

    return run(key, calls)


# -------------------------------------------------------------- what is listed


def test_a_key_lists_only_the_tools_its_scopes_and_allowlist_allow(db):
    rw = make_client("mcp-rw")
    assert names(rw.raw_key) == READ_TOOLS | WRITE_TOOLS
    _, read_only = api_key_create(agent=rw.agent, name="ro", scopes=[Scope.READ])
    assert names(read_only) == READ_TOOLS
    _, admin = api_key_create(agent=rw.agent, name="admin", scopes=[Scope.ADMIN])
    assert names(admin) == set(TOOLS) == READ_TOOLS | WRITE_TOOLS | {"forget"}
    _, narrow = api_key_create(agent=rw.agent, name="desk", tools=["recall", "context"])
    assert names(narrow) == {"recall", "context"}
    assert error_text(call(narrow, "remember", {"summary": "x", "occurred_at": "2026-01-01"}))


def test_every_tool_has_a_description_an_output_schema_and_honest_hints(db):
    admin = api_key_create(agent=make_client("mcp-hints").agent, name="a", scopes=["admin"])[1]

    async def calls(client):
        return (await client.list_tools()).tools

    tools = {t.name: t for t in run(admin, calls)}
    for tool in tools.values():
        assert tool.description and tool.output_schema, tool.name
        assert tool.input_schema["type"] == "object"
        read = tool.name in READ_TOOLS
        assert tool.annotations.read_only_hint is read, tool.name
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["cancel_intention"].annotations.destructive_hint is True
    assert tools["remember"].annotations.destructive_hint is False
    assert "idempotency_key" in tools["remember"].input_schema["properties"]


# ---------------------------------------------------------------- end to end


def test_the_tools_work_end_to_end_with_one_key(db):
    client = make_client("mcp-e2e")
    key = client.raw_key

    remembered = structured(
        call(
            key,
            "remember",
            {
                "summary": "The nightly billing export failed: the disk on db-2 was full",
                "occurred_at": "2026-03-01T02:00:00Z",
                "session_id": "night-1",
                "outcome": "failure",
            },
        )
    )
    assert remembered["summary"].startswith("The nightly billing export failed")

    structured(
        call(
            key,
            "assert_fact",
            {"subject": "billing export", "predicate": "deadline", "value": "March 3"},
        )
    )
    structured(
        call(
            key,
            "assert_fact",
            {"subject": "billing export", "predicate": "deadline", "value": "March 5"},
        )
    )
    current = structured(call(key, "current_fact", {"subject": "billing export"}))
    assert [f["value"] for f in current["facts"]] == ["March 5"]
    history = structured(
        call(key, "fact_history", {"subject": "billing export", "predicate": "deadline"})
    )
    values = [(f["value"], f["memory_status"]["status"]) for f in history["facts"]]
    assert values[0][0] == "March 3" and ("March 5", "active") in values

    intention = structured(
        call(
            key,
            "commit_intention",
            {"description": "Tell finance the export is fixed", "trigger_type": "manual"},
        )
    )
    assert intention["status"] == "active"
    due = structured(call(key, "list_due_intentions", {}))
    assert due["results"] == []
    Intention.objects.filter(pk=intention["id"]).update(status=IntentionStatus.DUE)
    due = structured(call(key, "list_due_intentions", {}))
    assert [i["id"] for i in due["results"]] == [intention["id"]]
    done = structured(call(key, "complete_intention", {"intention_id": intention["id"]}))
    assert done["status"] == "completed"
    other = structured(
        call(key, "commit_intention", {"description": "Call the bank", "trigger_type": "manual"})
    )
    cancelled = structured(
        call(key, "cancel_intention", {"intention_id": other["id"], "reason": "not needed"})
    )
    assert cancelled["status"] == "cancelled"

    saved = structured(
        call(
            key,
            "checkpoint",
            {
                "thread_key": "billing-fix",
                "state": {"goal": "Fix the export", "next_action": "Free disk on db-2"},
            },
        )
    )
    assert saved["version"] == 1
    again = structured(
        call(
            key,
            "checkpoint",
            {
                "thread_key": "billing-fix",
                "state": {"goal": "Fix the export", "next_action": "Rerun it"},
            },
        )
    )
    assert again["version"] == 2
    thread_id = saved["thread_id"]
    handed = structured(
        call(key, "handover", {"thread_id": thread_id, "to_session": "day-2", "note": "rerun"})
    )
    assert handed["to_session"] == "day-2"
    resumed = structured(call(key, "resume", {"thread_id": thread_id, "session_id": "day-2"}))
    assert resumed["checkpoint"]["state"]["next_action"] == "Rerun it"

    block = structured(
        call(
            key,
            "context",
            {"task": "Rerun the billing export", "thread_id": thread_id, "session_id": "day-2"},
        )
    )
    assert set(block) == {"id", "text", "budget", "over_budget", "omitted", "withheld"}
    assert "next action: Rerun it" in block["text"]
    assert "March 5" in block["text"] and "March 3" not in block["text"]

    from facts.fact_texts import fact_texts_refresh

    fact_texts_refresh(agent_id=client.agent.pk, embed="now")  # what the Celery task does
    answer = structured(
        call(key, "recall", {"query": "What is the deadline of the billing export now?"})
    )
    assert not answer["abstained"], (answer["route"], answer["details"])
    assert answer["evidence"][0]["fact"]["value"] == "March 5"
    assert (
        structured(call(key, "find_skill", {"task": "rerun the billing export"}))["applicable"]
        == []
    )


def test_the_api_s_errors_come_back_as_tool_errors_and_nothing_is_written(db):
    client = make_client("mcp-errors")
    key = client.raw_key
    before = Intention.objects.count()
    text = error_text(call(key, "commit_intention", {"description": "", "trigger_type": "time"}))
    assert "400 invalid: description: This field may not be blank." in text
    assert Intention.objects.count() == before
    text = error_text(call(key, "complete_intention", {"intention_id": str(uuid.uuid4())}))
    assert "404 not_found" in text and "not found" in text
    text = error_text(call(key, "assert_fact", {"subject": "x", "predicate": "y"}))
    assert (
        text
        == "Error executing tool assert_fact: 400 invalid: give exactly one of value and object_entity"
    )
    text = error_text(call(key, "recall", {"query": "x", "limit": 500}))
    assert "limit" in text  # the input schema refuses it before the API is asked
    text = error_text(call(key, "no_such_tool", {}))
    assert text == "Unknown tool: no_such_tool"


def test_a_key_never_reaches_another_agents_memory(db):
    a, b = make_client("mcp-tenant-a"), make_client("mcp-tenant-b")
    mine = structured(
        call(
            a.raw_key,
            "commit_intention",
            {"description": "Renew the lease", "trigger_type": "manual"},
        )
    )
    text = error_text(call(b.raw_key, "complete_intention", {"intention_id": mine["id"]}))
    assert f"intention {mine['id']} not found" in text
    structured(
        call(a.raw_key, "assert_fact", {"subject": "lease", "predicate": "ends", "value": "May"})
    )
    text = error_text(call(b.raw_key, "current_fact", {"subject": "lease"}))
    assert "404" in text
    assert Intention.objects.get(pk=mine["id"]).status == IntentionStatus.ACTIVE


def test_a_revoked_key_lists_nothing_and_calls_nothing(db):
    client = make_client("mcp-revoked")
    api_key_revoke(api_key=client.api_key)
    assert names(client.raw_key) == set()
    text = error_text(call(client.raw_key, "recall", {"query": "anything"}))
    assert "401" in text


def test_forget_is_for_admin_keys_and_a_dry_run_first(db):
    client = make_client("mcp-forget")
    structured(
        call(
            client.raw_key,
            "assert_fact",
            {"subject": "Bob", "predicate": "phone", "value": "555-0101"},
        )
    )
    assert "forget" not in names(client.raw_key)
    text = error_text(call(client.raw_key, "forget", {"reason": "asked", "subject": "Bob"}))
    assert "403" in text
    _, admin = api_key_create(agent=client.agent, name="ops", scopes=[Scope.ADMIN])
    dry = structured(call(admin, "forget", {"reason": "asked", "subject": "Bob"}))
    assert dry["dry_run"] is True
    assert structured(call(admin, "current_fact", {"subject": "Bob"}))["facts"]
    done = structured(
        call(admin, "forget", {"reason": "asked", "subject": "Bob", "dry_run": False})
    )
    assert (done["status"], done["residue_found"]) == ("completed", 0)
    assert "404" in error_text(call(admin, "current_fact", {"subject": "Bob"}))


def test_a_retried_write_with_its_idempotency_key_writes_once(db):
    client = make_client("mcp-retry")
    body = {
        "description": "Send the report",
        "trigger_type": "manual",
        "idempotency_key": "retry-1",
    }
    first = structured(call(client.raw_key, "commit_intention", body))
    second = structured(call(client.raw_key, "commit_intention", body))
    assert first == second
    assert Intention.objects.filter(agent=client.agent).count() == 1


def test_resources_read_the_working_state_and_due_intentions(db):
    client = make_client("mcp-resources")
    saved = structured(
        call(client.raw_key, "checkpoint", {"thread_key": "t", "state": {"goal": "ship it"}})
    )
    thread_id = saved["thread_id"]

    async def calls(mcp):
        state = await mcp.read_resource(f"piper://threads/{thread_id}/state")
        due = await mcp.read_resource("piper://intentions/due")
        return json.loads(state.contents[0].text), json.loads(due.contents[0].text)

    state, due = run(client.raw_key, calls)
    assert state["state"]["goal"] == "ship it" and due["results"] == []


# ----------------------------------------------------------- over the network


def _free_port() -> int:
    from testsupport.plugin import free_port

    return free_port()


def test_streamable_http_takes_each_requests_bearer_key(db):
    import httpx2
    import uvicorn
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from piper.mcp_server.auth import http_auth

    a, b = make_client("mcp-http-a"), make_client("mcp-http-b")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = build_server(**http_auth(base))
    web = uvicorn.Server(
        uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not web.started and time.time() < deadline:
        time.sleep(0.05)

    async def as_key(key: str | None, calls):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
        ):
            return await calls(client)

    async def commit(client):
        listed = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool(
            "commit_intention", {"description": "Water the plants", "trigger_type": "manual"}
        )
        return listed, result

    try:
        listed, result = anyio.run(as_key, a.raw_key, commit)
        assert listed == READ_TOOLS | WRITE_TOOLS
        made = structured(result)
        assert Intention.objects.get(pk=made["id"]).agent_id == a.agent.pk

        async def complete(client):
            return await client.call_tool("complete_intention", {"intention_id": made["id"]})

        assert "not found" in error_text(anyio.run(as_key, b.raw_key, complete))
        with httpx2.Client() as http:  # no key: refused before any tool runs
            response = http.post(
                f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            )
        assert response.status_code == 401
    finally:
        web.should_exit = True
        thread.join(timeout=10)


def test_manage_py_mcp_serves_stdio(db):
    from mcp import Client, StdioServerParameters

    from testsupport.plugin import _process_env

    client = make_client("mcp-stdio")
    env = _process_env(connection.settings_dict, None, None)
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(__file__).resolve().parents[3] / "manage.py"), "mcp"],
        env={**env, "PIPER_API_KEY": client.raw_key},
    )

    async def main():
        async with Client(params) as mcp:
            listed = {t.name for t in (await mcp.list_tools()).tools}
            result = await mcp.call_tool(
                "remember",
                {
                    "summary": "Started the stdio session",
                    "occurred_at": datetime.now(UTC).isoformat(),
                },
            )
            return listed, result

    listed, result = anyio.run(main)
    assert listed == READ_TOOLS | WRITE_TOOLS
    assert structured(result)["summary"] == "Started the stdio session"
    assert os.environ.get("PIPER_API_KEY") is None
