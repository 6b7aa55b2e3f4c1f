import time

from django.core.management.base import BaseCommand, CommandError

from ledger import projections
from piper.tenancy.commands import agent_named


class Command(BaseCommand):
    help = (
        "Drop a projection (every agent's, or one agent's) and rebuild it by replaying the "
        "ledger in chain order, in one transaction. Prints the events applied and the time."
    )

    def add_arguments(self, parser):
        parser.add_argument("projection", help="the projection's name, e.g. 'facts'")
        parser.add_argument("--agent", help="agent name or id (default: every agent)")

    def handle(self, *args, projection, agent=None, **options):
        try:
            rebuild = projections.get(projection)
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        target = agent_named(agent) if agent else None
        started = time.perf_counter()
        applied = rebuild(agent=target)
        elapsed = time.perf_counter() - started
        scope = f"agent {target.name}" if target else "all agents"
        self.stdout.write(
            f"rebuilt {projection} for {scope}: {applied} events applied in {elapsed:.2f} s"
        )
