"""Give every episode and source chunk without a vector its vector, in this process."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from episodes import selectors, services
from piper.progress import progress_bar as _progress
from piper.tenancy.commands import agent_named
from piper.tenancy.models import Agent

KINDS = ("episodes", "chunks")


class Command(BaseCommand):
    help = (
        "Embed the episodes and source chunks that have no vector yet (what the after-commit "
        "tasks would do), agent by agent, in batches, with a progress bar. With "
        "--reembed-stale, also those embedded by another model than the current embedder. "
        "Safe to run beside the workers and to interrupt: a vector is written only where "
        "none (or a stale one) is."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="agent name or id (default: every agent)")
        parser.add_argument("--kind", choices=[*KINDS, "all"], default="all")
        parser.add_argument("--batch-size", type=int, default=128, help="texts per embed call")
        parser.add_argument(
            "--reembed-stale",
            action="store_true",
            help="also replace vectors whose embedding_model is not the current embedder's",
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")

    def handle(self, *args, agent=None, kind="all", batch_size=128, **options):
        from piper.embeddings import get_embedder

        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        agents = [agent_named(agent)] if agent else list(Agent.objects.order_by("name"))
        embedder = get_embedder()
        stale = embedder.name if options["reembed_stale"] else None
        kinds = KINDS if kind == "all" else (kind,)
        started = time.perf_counter()
        for name in kinds:
            total = sum(
                selectors.embedding_backlog(kind=name, agent_id=a.pk, stale_model=stale).count()
                for a in agents
            )
            written = 0
            with _progress(total, name, disabled=options["no_progress"], out=self.stderr) as bar:
                for a in agents:
                    written += _embed_agent(
                        kind=name,
                        agent=a,
                        embedder=embedder,
                        stale_model=stale,
                        batch_size=batch_size,
                        bar=bar,
                    )
            self.stdout.write(f"{name}: {written} embedded with {embedder.name}")
        self.stdout.write(f"done in {time.perf_counter() - started:.1f} s")


def _embed_agent(*, kind, agent, embedder, stale_model, batch_size, bar) -> int:
    embed = services.episodes_embed if kind == "episodes" else services.chunks_embed
    id_arg = "episode_ids" if kind == "episodes" else "chunk_ids"
    written = 0
    after = None
    while True:
        # Keyset over (agent, id): each batch starts after the last one, so rows a
        # worker embeds meanwhile are simply skipped.
        ids = list(
            selectors.embedding_backlog(
                kind=kind, agent_id=agent.pk, stale_model=stale_model, after_id=after
            )[:batch_size]
        )
        if not ids:
            return written
        written += embed(**{id_arg: ids}, embedder=embedder, reembed_stale=stale_model is not None)
        bar.update(len(ids))
        after = ids[-1]
