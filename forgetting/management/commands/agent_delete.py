"""Hard-delete one agent and everything of it (an operator action with a receipt)."""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from forgetting.services.agents import agent_hard_delete
from piper.errors import PiperError
from piper.tenancy.commands import agent_named


class Command(BaseCommand):
    help = (
        "Delete an agent and every row of it in every table — its ledger included — its "
        "vector indexes and its Redis keys; nothing of any other agent. Prints the receipt, "
        "which is all that stays. Asks for the agent's name again unless --yes."
    )

    def add_arguments(self, parser):
        parser.add_argument("agent", help="agent name or id")
        parser.add_argument("--reason", required=True)
        parser.add_argument("--lift-legal-hold", default="", metavar="REASON")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def handle(self, *args, agent, reason, lift_legal_hold="", yes=False, **options):
        target = agent_named(agent)
        if not yes:
            typed = input(f"Type the agent's name ({target.name}) to delete it for good: ")
            if typed.strip() != target.name:
                raise CommandError("not confirmed; nothing deleted")
        try:
            receipt = agent_hard_delete(
                agent=target,
                reason=reason,
                requested_by=f"operator {getpass.getuser()} (manage.py agent_delete)",
                legal_hold_lifted=lift_legal_hold,
            )
        except PiperError as exc:
            raise CommandError(f"{exc.message} ({exc.code})") from None
        self.stdout.write(f"deleted agent {receipt.agent_name} ({receipt.agent_ref}):")
        for table, count in sorted(receipt.counts.items()):
            self.stdout.write(f"  {table:<32} {count}")
        self.stdout.write(
            f"receipt {receipt.pk}: {receipt.status}, residue found {receipt.residue_found}"
        )
        if receipt.residue_found:
            raise CommandError("the residue check found rows of the agent: see the receipt")
