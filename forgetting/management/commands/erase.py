"""Erase events of one agent, and everything made from them, from the command line."""

from __future__ import annotations

import getpass
import json

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime

from forgetting.services.erasure import Selector, erasure_run
from piper.errors import PiperError
from piper.tenancy.commands import agent_named


def _moment(value: str | None):
    if value is None:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"not a time: {value!r} (e.g. 2026-01-31T09:00:00Z)")
    return parsed


class Command(BaseCommand):
    help = (
        "Erase what the criteria name (they combine) for one agent: the events, everything "
        "made from them in every projection, tombstones in the ledger, and a residue check. "
        "Prints the receipt. --dry-run lists what would go and changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, help="agent name or id")
        parser.add_argument("--event-id", action="append", default=[], help="repeatable")
        parser.add_argument("--source", help="a document's id")
        parser.add_argument("--actor")
        parser.add_argument("--subject", help="an entity's id or any of its names")
        parser.add_argument("--session")
        parser.add_argument("--after", help="occurred at or after (ISO 8601)")
        parser.add_argument("--before", help="occurred before (ISO 8601)")
        parser.add_argument("--reason", required=True)
        parser.add_argument("--dry-run", action="store_true")
        parser.add_argument(
            "--lift-legal-hold", default="", metavar="REASON", help="erase held events too"
        )
        parser.add_argument("--json", action="store_true", help="print the receipt as JSON")

    def handle(self, *args, **options):
        agent = agent_named(options["agent"])
        try:
            selector = Selector(
                event_ids=tuple(options["event_id"]),
                source_id=options["source"],
                actor=options["actor"],
                subject=options["subject"],
                session_id=options["session"],
                occurred_after=_moment(options["after"]),
                occurred_before=_moment(options["before"]),
            )
            result = erasure_run(
                agent=agent,
                selector=selector,
                reason=options["reason"],
                requested_by=f"operator {getpass.getuser()} (manage.py erase)",
                legal_hold_lifted=options["lift_legal_hold"],
                dry_run=options["dry_run"],
            )
        except PiperError as exc:
            raise CommandError(f"{exc.message} ({exc.code})") from None
        except ValueError as exc:  # a malformed id
            raise CommandError(str(exc)) from None
        receipt = result.receipt
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "dry_run": result.dry_run,
                        "receipt": str(receipt.pk) if receipt else None,
                        "counts": result.counts,
                        "residue_found": receipt.residue_found if receipt else None,
                    },
                    indent=2,
                )
            )
            return
        head = "would erase" if result.dry_run else "erased"
        self.stdout.write(f"{head} {len(result.event_ids)} events of agent {agent.name}:")
        for name, count in sorted(result.counts.items()):
            self.stdout.write(f"  {name:<28} {count}")
        if receipt is not None:
            self.stdout.write(
                f"receipt {receipt.pk}: {receipt.status}, residue found {receipt.residue_found}, "
                f"{receipt.duration_ms:.0f} ms"
            )
            if receipt.residue_found:
                for finding in receipt.residue:
                    if finding["found"]:
                        self.stdout.write(
                            f"  RESIDUE {finding['projection']} {finding['check']}: "
                            f"{finding['found']} {finding.get('sample', [])}"
                        )
                raise CommandError("the residue check found something: see the receipt")
