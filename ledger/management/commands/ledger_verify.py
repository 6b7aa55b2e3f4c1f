from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ledger.anchors import AnchorsUnreadable, anchors_read, anchors_write, chain_verify_anchored
from piper.tenancy.models import Agent


class Command(BaseCommand):
    help = (
        "Walk each agent's hash chain and report the first broken link. Exits 1 if any is broken."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every agent)")
        parser.add_argument(
            "--anchors",
            metavar="FILE",
            help="a JSON file of each agent's last verified (seq, hash), kept outside the "
            "database (another machine, write-once storage). Each chain must still hold the "
            "hash its anchor names — which catches a chain whose hashes were all recomputed "
            "or whose last events were removed with the head rewound; the anchors of chains "
            "that verify are then moved to their ends.",
        )

    def handle(self, *args, agent=None, anchors=None, **options):
        agents = Agent.objects.order_by("name")
        if agent:
            agents = agents.filter(name=agent) if not _is_uuid(agent) else agents.filter(pk=agent)
            if not agents.exists():
                raise CommandError(f"no agent {agent!r}")
        kept = _read_anchors(Path(anchors)) if anchors else {}
        broken = 0
        for each in agents:
            report, _, _ = chain_verify_anchored(agent=each, anchors=kept)
            if report.ok:
                self.stdout.write(f"ok      {each.name}: {report.events_checked} events")
            else:
                broken += 1
                brk = report.first_break
                self.stdout.write(
                    f"BROKEN  {each.name}: first break at seq {brk.seq}"
                    f"{f' (event {brk.event_id})' if brk.event_id else ''}: {brk.reason}"
                )
        if anchors:
            anchors_write(Path(anchors), kept)
        if broken:
            raise CommandError(f"{broken} chain(s) broken")


def _read_anchors(path: Path) -> dict:
    try:
        return anchors_read(path)
    except AnchorsUnreadable as exc:
        raise CommandError(str(exc)) from exc


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
        return True
    except ValueError:
        return False
