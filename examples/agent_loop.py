"""A small agent loop on Piper Memory, through the Python SDK.

One process works a task and hands it over; a second process (a successor:
a restart, another worker) resumes it where the first stopped:

    python examples/agent_loop.py work   --base-url http://127.0.0.1:8000 --api-key pm_…
    python examples/agent_loop.py resume --base-url http://127.0.0.1:8000 --api-key pm_…

work:   open the thread, checkpoint the plan, ask for context, "act" (here: a
        canned step), record what happened as an episode, state a fact it
        learned, promise a follow-up, checkpoint the next action, hand over.
resume: resume the thread in a new session, read the working state, the
        open intentions (due first) and what to re-check, ask for context,
        finish the follow-up, acknowledge the handover.

The model call is left out: `block.text` is what would go into its prompt.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

from piper_client import Memory

THREAD = "export-repair"
FIRST, SECOND = "session-1", "session-2"


def now() -> str:
    return datetime.now(UTC).isoformat()


def work(memory: Memory) -> dict:
    thread = memory.working_state.thread(THREAD, session_id=FIRST)
    state = {
        "goal": "Get the nightly billing export running again",
        "plan": ["find why it failed", "free the disk", "rerun it"],
        "next_action": "find why it failed",
    }
    saved = memory.working_state.checkpoint(
        thread.id, state, based_on=thread.current_version, session_id=FIRST
    )
    block = memory.context(task="Find why the nightly billing export failed", thread_id=thread.id)
    # … the model reads block.text and decides; here the step is canned:
    observation = "db-2's disk is full; the export could not write its file"
    memory.episodes.record(
        occurred_at=now(),
        session_id=FIRST,
        actor="export-agent",
        action="checked the export's log",
        observation=observation,
        summary="The nightly billing export failed because db-2's disk is full",
        outcome="failure",
    )
    memory.facts.assert_("db-2", "disk_status", "full", source_type="observation")
    follow_up = memory.intentions.create(
        "Rerun the nightly billing export once db-2 has space",
        due_at=(datetime.now(UTC) + timedelta(minutes=10)).isoformat(),
        thread=thread.id,
    )
    state |= {"next_action": "free disk on db-2, then rerun", "last_observation": observation}
    memory.working_state.checkpoint(thread.id, state, based_on=saved.version, session_id=FIRST)
    memory.working_state.handover(
        thread.id, from_session=FIRST, to_session=SECOND, note="disk full on db-2"
    )
    return {"thread": thread.id, "context_tokens": block.budget["used"], "promise": follow_up.id}


def resume(memory: Memory) -> dict:
    thread = memory.working_state.thread(THREAD)
    package = memory.working_state.resume(thread.id, session_id=SECOND)
    state = package.checkpoint.state
    block = memory.context(task=state["next_action"], thread_id=thread.id, session_id=SECOND)
    open_items = [i.description for i in package.intentions]
    for intention in package.intentions:  # … after doing it:
        memory.intentions.complete(intention.id, evidence={"rerun": "ok"})
    memory.working_state.acknowledge(thread.id, session_id=SECOND)
    return {
        "next_action": state["next_action"],
        "open_intentions": open_items,
        "disk": memory.facts.current("db-2", "disk_status").values,
        "prompt_block": block.text,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phase", choices=["work", "resume"])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", required=True)
    args = parser.parse_args()
    with Memory(args.base_url, args.api_key) as memory:
        result = work(memory) if args.phase == "work" else resume(memory)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
