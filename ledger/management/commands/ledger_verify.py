from django.core.management.base import BaseCommand, CommandError

from ledger.selectors import chain_verify
from piper.tenancy.models import Agent


class Command(BaseCommand):
    help = (
        "Walk each agent's hash chain and report the first broken link. Exits 1 if any is broken."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every agent)")

    def handle(self, *args, agent=None, **options):
        agents = Agent.objects.order_by("name")
        if agent:
            agents = agents.filter(name=agent) if not _is_uuid(agent) else agents.filter(pk=agent)
            if not agents.exists():
                raise CommandError(f"no agent {agent!r}")
        broken = 0
        for each in agents:
            report = chain_verify(agent=each)
            if report.ok:
                self.stdout.write(f"ok      {each.name}: {report.events_checked} events")
            else:
                broken += 1
                brk = report.first_break
                self.stdout.write(
                    f"BROKEN  {each.name}: first break at seq {brk.seq}"
                    f"{f' (event {brk.event_id})' if brk.event_id else ''}: {brk.reason}"
                )
        if broken:
            raise CommandError(f"{broken} chain(s) broken")


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
        return True
    except ValueError:
        return False
