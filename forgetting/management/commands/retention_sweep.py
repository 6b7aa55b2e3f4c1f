"""Run the retention sweep now (what celery-beat runs every 15 minutes), with a progress bar."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from forgetting.models import RetentionPolicy
from forgetting.services.retention import SWEEP_CHUNK, expired_events, retention_sweep
from piper.progress import progress_bar
from piper.tenancy.commands import agent_named


class Command(BaseCommand):
    help = (
        "Erase the events the active retention policies let expire (every agent's, or one "
        "agent's), in chunks with a receipt each. --dry-run counts what each policy would "
        "erase and changes nothing. Safe beside the beat's own sweep: an agent another "
        "sweep holds is skipped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every agent)")
        parser.add_argument("--dry-run", action="store_true")
        parser.add_argument("--chunk", type=int, default=SWEEP_CHUNK)
        parser.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")

    def handle(self, *args, agent=None, dry_run=False, chunk=SWEEP_CHUNK, **options):
        target = agent_named(agent) if agent else None
        started = time.perf_counter()
        if dry_run:
            result = retention_sweep(agent=target, dry_run=True)
            for name, count in sorted(result.would_erase.items()):
                self.stdout.write(f"would erase {count:>8} events  policy {name}")
            self.stdout.write(f"{result.agents} agent(s) with active policies; nothing changed")
            return
        policies = RetentionPolicy.objects.filter(is_active=True)
        if target is not None:
            policies = policies.filter(agent=target)
        total = sum(expired_events(p).count() for p in policies)
        with progress_bar(
            total, "retention", disabled=options["no_progress"], out=self.stderr, unit="event"
        ) as bar:
            result = retention_sweep(
                agent=target, chunk=chunk, budget_seconds=float("inf"), on_chunk=bar.update
            )
        elapsed = time.perf_counter() - started
        self.stdout.write(
            f"erased {result.erased} events in {len(result.receipts)} receipt(s), kept "
            f"{result.kept} that younger events depend on, in {elapsed:.1f} s"
        )
        if result.skipped_locked:
            self.stdout.write(f"{result.skipped_locked} agent(s) skipped: another sweep holds them")
