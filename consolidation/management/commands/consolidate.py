"""Consolidate agents' new episodes into candidate facts, in this process."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from consolidation import services
from consolidation.models import ConsolidationRun, RunKind
from ledger.models import Event
from piper.tenancy.commands import agent_named
from piper.tenancy.models import Agent


class Command(BaseCommand):
    help = (
        "Run consolidation (episodes -> candidate facts) for one agent or every active one, "
        "with a progress bar: starts a run or resumes the agent's running one, and steps it "
        "to the end. Safe beside the workers (one run per agent; a step is one transaction) "
        "and to interrupt (the next run resumes at the cursor)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every active agent)")
        parser.add_argument("--kind", choices=RunKind.values, default=RunKind.FACTS)
        parser.add_argument("--batch-size", type=int, help="episodes a step (default: settings)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")

    def handle(self, *args, agent=None, kind=RunKind.FACTS, batch_size=None, **options):
        if batch_size is not None and batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        agents = (
            [agent_named(agent)]
            if agent
            else list(Agent.objects.filter(is_active=True).order_by("name"))
        )
        started = time.perf_counter()
        for target in agents:
            progress = _RunProgress(target, disabled=options["no_progress"], out=self.stderr)
            try:
                run = services.consolidate(
                    agent=target, kind=kind, batch_size=batch_size, progress=progress
                )
            finally:
                progress.close()
            if run is None:
                self.stdout.write(f"{target.name}: nothing new to consolidate")
                continue
            self.stdout.write(
                f"{target.name}: run {run.pk} {run.status}: {run.episodes_read} episodes read "
                f"({run.episodes_excluded} excluded), {run.candidates_proposed} candidates "
                f"proposed, {run.candidates_asserted} asserted, in {run.duration_ms} ms"
            )
        self.stdout.write(f"done in {time.perf_counter() - started:.1f} s")


class _RunProgress:
    """A progress bar over the episodes a run has left, made at its first step."""

    def __init__(self, agent: Agent, *, disabled: bool, out):
        self.agent, self.disabled, self.out, self.bar = agent, disabled, out, None

    def __call__(self, run, step) -> None:
        if self.bar is None:
            left = Event.objects.filter(
                agent=self.agent,
                event_type=services.EPISODE_RECORDED,
                seq__gt=ConsolidationRun.objects.get(pk=run.pk).cursor_seq,
                seq__lte=run.to_seq,
            ).count()
            self.bar = _progress(
                left + step.episodes, self.agent.name, disabled=self.disabled, out=self.out
            )
        self.bar.update(step.episodes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, name: str, *, disabled: bool, out):
    if disabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=name, unit="ep", file=out._out, dynamic_ncols=True)
