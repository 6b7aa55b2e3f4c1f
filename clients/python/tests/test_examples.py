"""examples/agent_loop.py works: one process works and hands over, a second resumes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .sdk_support import make_keys

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "agent_loop.py"


def phase(name: str, url: str, key: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), name, "--base-url", url, "--api-key", key],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_agent_loop_survives_a_handover_to_a_new_process(live_server):
    key = make_keys("example-agent").write
    first = phase("work", live_server.url, key)
    assert first["context_tokens"] > 0
    second = phase("resume", live_server.url, key)
    assert second["next_action"] == "free disk on db-2, then rerun"
    assert second["open_intentions"] == ["Rerun the nightly billing export once db-2 has space"]
    assert second["disk"] == ["full"]
    assert "## Working state" in second["prompt_block"]
