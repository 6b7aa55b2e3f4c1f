from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from piper.errors import PiperError
from piper.tenancy.models import Agent
from piper.tenancy.services import agent_create, api_key_create


class Command(BaseCommand):
    help = "Create an agent and print a new API key for it (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--scopes",
            default="read,write",
            help="comma-separated: read, write, admin (default read,write)",
        )
        parser.add_argument(
            "--existing-ok",
            action="store_true",
            help="if the agent exists, issue a new key for it instead of failing",
        )
        parser.add_argument("--key-name", default="created by create_agent")
        parser.add_argument("--quiet", action="store_true", help="print only the key")

    def handle(self, *args, name, description, scopes, existing_ok, key_name, quiet, **options):
        try:
            # One transaction: a refused key (bad scopes) must not leave a keyless agent behind.
            with transaction.atomic():
                agent = Agent.objects.filter(name=name).first() if existing_ok else None
                if agent is None:
                    agent = agent_create(name=name, description=description)
                api_key, raw = api_key_create(
                    agent=agent,
                    name=key_name,
                    scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                )
        except PiperError as exc:
            raise CommandError(exc.message) from exc
        if quiet:
            self.stdout.write(raw)
            return
        self.stdout.write(f"agent:  {agent.name} ({agent.pk})")
        self.stdout.write(f"scopes: {', '.join(api_key.scopes)}")
        self.stdout.write(f"key:    {raw}")
        self.stdout.write(
            "Store the key now: only its hash is kept. Send it as 'Authorization: Bearer <key>'."
        )
