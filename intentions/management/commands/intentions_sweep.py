from django.core.management.base import BaseCommand

from intentions.services.dependencies import dependents_sweep
from piper.tenancy.commands import agent_named


class Command(BaseCommand):
    help = (
        "Cancel blocked intentions whose dependency has already ended undone (cancelled, "
        "expired, or a recurring series run out on skips) — rows from before that cascade "
        "existed, or any it missed — each with its transition and ledger event, as the "
        "cascade does. Idempotent."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every agent)")
        parser.add_argument(
            "--dry-run", action="store_true", help="list what would be cancelled; write nothing"
        )

    def handle(self, *args, agent=None, dry_run=False, **options):
        swept = dependents_sweep(agent=agent_named(agent) if agent else None, dry_run=dry_run)
        for each in swept:
            self.stdout.write(
                f"{each.intention.agent.name}  {each.intention.pk}  "
                f"{each.intention.description[:60]!r}: {each.reason}"
            )
        verb = "would cancel" if dry_run else "cancelled"
        self.stdout.write(f"{verb} {len(swept)} blocked intention(s)")
