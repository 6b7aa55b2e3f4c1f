from django.core.management.base import BaseCommand, CommandError

from episodes.agent_graphs import (
    BuildRunning,
    agent_graphs,
    agent_graphs_build_missing,
    agents_with_graphs,
    global_graph_excluded,
)


class Command(BaseCommand):
    help = (
        "Give every agent with at least --min-rows episodes (default "
        "EPISODES_AGENT_GRAPH_MIN_ROWS) an HNSW graph of its own, the --max-graphs "
        "(EPISODES_AGENT_GRAPH_MAX_GRAPHS) largest first: a partial index built "
        "CONCURRENTLY (writes go on). Within one agent, its searches then have full "
        "recall and filtered searches are faster (docs/benchmarks.md). Idempotent: "
        "agents that have one are left alone; a failed build is redone. Then the "
        "global graph is rebuilt without the agents that have their own, when they "
        "changed (a whole-table build, CONCURRENTLY too). celery-beat runs the same hourly."
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
        graphs = agent_graphs(min_rows=min_rows, max_graphs=max_graphs)
        built, report = {}, None
        if not dry_run:
            try:
                report = agent_graphs_build_missing(min_rows=min_rows, max_graphs=max_graphs)
            except BuildRunning as exc:
                raise CommandError(f"{exc}; try again when it has finished") from exc
            built = {b.graph.agent_id: b.seconds for b in report.built}
        for graph in graphs:
            line = f"{graph.agent_id}  {graph.rows:,} episodes  {graph.index}: {graph.state}"
            if graph.agent_id in built:
                line += f" -> built in {built[graph.agent_id]:.1f} s"
            self.stdout.write(line)
        todo = sum(g.state in ("missing", "invalid") for g in graphs)
        summary = f"{len(graphs)} large agent(s); "
        summary += f"would build {todo}" if dry_run else f"built {len(built)}"
        over = sum(g.state == "over-limit" for g in graphs)
        if over:
            summary += f"; {over} over the limit of graphs, left without one"
        self.stdout.write(summary)
        if report is not None and report.global_seconds is not None:
            self.stdout.write(
                f"global graph rebuilt in {report.global_seconds:.1f} s, "
                f"leaving out {report.excluded} agent(s) with their own"
            )
        elif dry_run and agents_with_graphs() != global_graph_excluded():
            self.stdout.write(
                "would rebuild the global graph without the agents that have their own"
            )
        else:
            self.stdout.write(f"global graph leaves out {len(global_graph_excluded())} agent(s)")
