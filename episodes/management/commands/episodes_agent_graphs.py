from django.core.management.base import BaseCommand

from episodes.agent_graphs import agent_graph_build, agent_graphs


class Command(BaseCommand):
    help = (
        "Give every agent with at least --min-rows episodes (default "
        "EPISODES_AGENT_GRAPH_MIN_ROWS) an HNSW graph of its own: a partial index "
        "built CONCURRENTLY (writes go on). Within one agent, its searches then "
        "have full recall and filtered searches are faster (docs/benchmarks.md). "
        "Idempotent: agents that have one are left alone; a failed build is redone."
    )

    def add_arguments(self, parser):
        parser.add_argument("--min-rows", type=int, default=None)
        parser.add_argument(
            "--dry-run", action="store_true", help="list the agents and their graphs; build none"
        )

    def handle(self, *args, min_rows=None, dry_run=False, **options):
        graphs = agent_graphs(min_rows=min_rows)
        built = 0
        for graph in graphs:
            line = f"{graph.agent_id}  {graph.rows:,} episodes  {graph.index}: {graph.state}"
            if graph.state != "present" and not dry_run:
                seconds = agent_graph_build(graph)
                built += 1
                line += f" -> built in {seconds:.1f} s"
            self.stdout.write(line)
        verb = "would build" if dry_run else "built"
        todo = sum(g.state != "present" for g in graphs)
        self.stdout.write(f"{len(graphs)} large agent(s); {verb} {todo if dry_run else built}")
