from django.core.management.base import BaseCommand, CommandError

from episodes import actor_graphs
from episodes.agent_graphs import BuildRunning, Built, agent_graphs, agent_graphs_build_missing


class Command(BaseCommand):
    help = (
        "Give every agent with at least --min-rows episodes (default "
        "EPISODES_AGENT_GRAPH_MIN_ROWS) an HNSW graph of its own, the --max-graphs "
        "(EPISODES_AGENT_GRAPH_MAX_GRAPHS) largest first: a partial index built "
        "CONCURRENTLY (writes go on). Within one agent, its searches then have full "
        "recall and filtered searches are faster (docs/benchmarks.md). Idempotent: "
        "agents that have one are left alone; a failed build is redone, and so is a "
        "graph built with other parameters than EPISODES_AGENT_GRAPH_M / "
        "_EF_CONSTRUCTION. Then every actor of such an agent with at least "
        "EPISODES_ACTOR_GRAPH_MIN_ROWS vectors gets a graph of its own too "
        "(episodes/actor_graphs.py). celery-beat runs the same hourly."
    )

    def add_arguments(self, parser):
        parser.add_argument("--min-rows", type=int, default=None)
        parser.add_argument("--max-graphs", type=int, default=None)
        parser.add_argument(
            "--dry-run", action="store_true", help="list the agents and their graphs; build none"
        )

    def handle(self, *args, min_rows=None, max_graphs=None, dry_run=False, **options):
        for value, flag in ((min_rows, "--min-rows"), (max_graphs, "--max-graphs")):
            if value is not None and value < 1:
                raise CommandError(f"{flag} must be at least 1, not {value}")
        if dry_run:
            runs = [Built(g, None) for g in agent_graphs(min_rows=min_rows, max_graphs=max_graphs)]
        else:
            try:
                runs = agent_graphs_build_missing(min_rows=min_rows, max_graphs=max_graphs)
            except BuildRunning as exc:
                raise CommandError(f"{exc}; try again when it has finished") from exc
        graphs = [run.graph for run in runs]
        for run in runs:
            graph = run.graph
            line = f"{graph.agent_id}  {graph.rows:,} episodes  {graph.index}: {graph.state}"
            if run.seconds is not None:
                line += f" -> built in {run.seconds:.1f} s"
            self.stdout.write(line)
        summary = f"{len(graphs)} large agent(s); "
        if dry_run:
            summary += f"would build {sum(g.needs_build for g in graphs)}"
        else:
            summary += f"built {sum(run.seconds is not None for run in runs)}"
        over = sum(g.state == "over-limit" for g in graphs)
        if over:
            summary += f"; {over} over the limit of graphs, left without one"
        self.stdout.write(summary)
        self._actors(dry_run)

    def _actors(self, dry_run: bool) -> None:
        if dry_run:
            runs = [actor_graphs.BuiltActor(s, None) for s in actor_graphs.actor_graphs()]
        else:
            try:
                runs = actor_graphs.actor_graphs_build_missing()
            except BuildRunning as exc:
                raise CommandError(f"{exc}; try again when it has finished") from exc
        for run in runs:
            s = run.actor_set
            line = f"{s.agent_id}  actor {s.actor}  {s.rows:,} vectors: {s.state}"
            if run.seconds is not None:
                line += f" -> built in {run.seconds:.1f} s"
            self.stdout.write(line)
        built = sum(run.seconds is not None for run in runs)
        missing = sum(run.actor_set.graph is None for run in runs)
        self.stdout.write(
            f"{len(runs)} large actor(s); "
            + (f"would build {missing}" if dry_run else f"built {built}")
        )
