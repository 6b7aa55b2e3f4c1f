"""Render (and embed) the fact texts a plain question finds facts by — for facts
recorded before the texts existed, or after a lost task. Idempotent."""

import time

from django.core.management.base import BaseCommand

from facts.fact_texts import fact_texts_refresh
from piper.tenancy.commands import agent_named
from piper.tenancy.models import Agent


class Command(BaseCommand):
    help = (
        "Render every (subject, predicate) of every agent (or one) as its fact text and "
        "embed the texts that changed. Unchanged texts are left alone."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every agent)")
        parser.add_argument(
            "--embed",
            choices=["now", "later", "never"],
            default="now",
            help="now: embed here (default); later: queue the embedding tasks; never: text only",
        )

    def handle(self, *args, agent=None, embed="now", **options):
        agents = [agent_named(agent)] if agent else list(Agent.objects.order_by("name"))
        started = time.perf_counter()
        rendered = changed = 0
        for target in agents:
            result = fact_texts_refresh(agent_id=target.pk, embed=embed)
            rendered += result.rendered
            changed += len(result.changed)
        self.stdout.write(
            f"fact texts: {rendered} rendered, {changed} new or changed, for {len(agents)} "
            f"agent(s) in {time.perf_counter() - started:.2f} s"
        )
