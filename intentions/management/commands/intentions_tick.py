from django.core.management.base import BaseCommand

from intentions.services import engine
from piper.tenancy.commands import agent_named


class Command(BaseCommand):
    help = (
        "Run one engine cycle now, as celery-beat does (time triggers and expiry, state "
        "re-checks, event matching, escalations), and print what fired and escalated. With "
        "--agent, that agent at its own clock (simulated for battery agents), rehearsal "
        "included."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every wall-clock agent)")

    def handle(self, *args, agent=None, **options):
        cycle = engine.tick(agent=agent_named(agent)) if agent else engine.cycle()
        fired = [(cause, f) for cause in ("time", "events", "states") for f in cycle[cause]]
        for cause, f in fired:
            self.stdout.write(f"fired  {f.intention_id} #{f.occurrence}  ({cause})")
        for e in cycle["escalated"]:
            self.stdout.write(f"escalated  {e.intention_id} #{e.occurrence}  ({e.reason})")
        rehearsed = f", rehearsed {cycle['rehearsed']}" if "rehearsed" in cycle else ""
        escalated = f", escalated {len(cycle['escalated'])}" if cycle["escalated"] else ""
        self.stdout.write(f"fired {len(fired)} intention(s){rehearsed}{escalated}")
