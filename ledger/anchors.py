"""Each chain's last verified end — (seq, hash) per agent — kept in a file
outside the database.

The chain is keyless: whoever can write the database can remove the last
events and rewind the head, or recompute every hash from a tampered event on,
and the database alone still verifies. A run of `ledger_verify --anchors FILE`
or of the nightly `ledger.verify_chains` (settings.PIPER_LEDGER_ANCHORS)
checks that each chain still holds the hash its anchor names, then moves the
anchors of the chains that verify to their ends; a broken chain's anchor
stays where it was, so the alarm repeats until someone looks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class AnchorsUnreadable(ValueError):
    """The file exists but is not an anchors file (left alone: it is evidence)."""


def chain_verify_anchored(*, agent, anchors: dict[str, dict]):
    """The agent's chain verified against its anchor in `anchors`, whose entry
    then moves to the chain's end if it verified (a broken chain's stays).
    (the ChainReport, whether it had an anchor, whether the anchor moved)."""
    from .selectors import chain_verify

    anchor = anchors.get(str(agent.pk))
    report = chain_verify(agent=agent, anchor=(anchor["seq"], anchor["hash"]) if anchor else None)
    moved = False
    if report.ok and report.last_seq:
        end = {"seq": report.last_seq, "hash": report.last_hash}
        moved = anchor != end
        anchors[str(agent.pk)] = end
    return report, anchor is not None, moved


def anchors_read(path: Path) -> dict[str, dict]:
    """{agent id: {"seq", "hash"}}; {} when the file does not exist yet."""
    if not path.exists():
        return {}
    try:
        kept = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise AnchorsUnreadable(f"{path} is not an anchors file: {exc}") from exc
    if not isinstance(kept, dict) or not all(
        isinstance(a, dict) and isinstance(a.get("seq"), int) and isinstance(a.get("hash"), str)
        for a in kept.values()
    ):
        raise AnchorsUnreadable(f"{path} is not an anchors file: not {{agent: {{seq, hash}}}}")
    return kept


def anchors_write(path: Path, anchors: dict[str, dict]) -> None:
    """Written whole to a file of this process's own, then renamed over the old one:
    an interrupted run, or two runs at once, leave a whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(anchors, indent=1, sort_keys=True) + "\n")
    os.replace(temporary, path)
