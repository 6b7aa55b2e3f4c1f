"""Generated agent episodes that read like the real thing, for the benchmarks.

An episode here is what a working agent records: who acted (an agent, a user, a
bot), where (a host, a repository, a channel), which tool it used and on what,
what it saw, how it ended — one to three sentences of embedding text
(summary, action, observation, as ``Episode.embedding_text`` joins them).
Deterministic for a seed. Used by bench/embedder_throughput.py (realistic texts
for the throughput figure) and bench/episodes_bench.py (the 1M-episode world).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

ACTORS = [
    "deploy-agent",
    "triage-bot",
    "support-agent",
    "ci-runner",
    "alice",
    "bob",
    "carol",
    "dmitri",
    "priya",
    "the on-call engineer",
    "research-agent",
    "billing-agent",
    "data-pipeline",
    "release-manager",
    "security-scanner",
    "ops-assistant",
]

ENVIRONMENTS = [
    "prod-eu-1",
    "prod-us-east",
    "staging",
    "dev-laptop",
    "acme/billing",
    "acme/web",
    "acme/data-platform",
    "#incidents",
    "#support",
    "jira:OPS",
    "k8s/cluster-a",
    "k8s/cluster-b",
    "ci/github-actions",
    "warehouse/snowflake",
    "crm/salesforce",
    "mail/inbox",
]

SERVICES = [
    "billing-api",
    "checkout service",
    "nightly export",
    "invoice run",
    "search indexer",
    "auth gateway",
    "payments worker",
    "report generator",
    "the batch job",
    "ETL pipeline",
    "notification service",
    "image resizer",
    "recommendation model",
    "ledger replica",
    "web frontend",
    "mobile API",
    "the scheduler",
    "the cache cluster",
    "the Kafka consumer",
    "the cron backup",
]

TOOLS = [
    ("kubectl", ["rolled out", "restarted", "scaled", "described", "drained the node under"]),
    ("terraform", ["applied a plan for", "planned changes to", "imported the state of"]),
    ("psql", ["ran a migration on", "queried the slow log of", "vacuumed the tables of"]),
    ("pytest", ["ran the test suite of", "re-ran the flaky tests of", "bisected a failure in"]),
    ("git", ["reverted the last commit of", "rebased the branch of", "tagged a release of"]),
    ("curl", ["probed the health endpoint of", "replayed a failed request to"]),
    ("grafana", ["checked the dashboards of", "annotated an incident on"]),
    ("the shell", ["tailed the logs of", "freed disk space on the host of", "rotated keys of"]),
    ("the ticket tracker", ["opened a ticket for", "escalated the ticket about", "closed"]),
    ("email", ["replied to the customer about", "sent the weekly summary of"]),
    ("the browser", ["read the runbook for", "searched the docs of"]),
    ("aws cli", ["raised the memory limit of", "resized the instances of", "rotated logs of"]),
]

SYMPTOMS = [
    "was killed by the OOM killer halfway through",
    "timed out after 30 seconds",
    "returned HTTP 502 for a fifth of requests",
    "ran out of disk space",
    "failed its health checks",
    "leaked database connections",
    "kept restarting in a crash loop",
    "exceeded its memory limit of 2GB",
    "slowed to a p95 of 4 seconds",
    "lost its lease on the lock",
    "wrote duplicate rows",
    "threw a null pointer exception on startup",
    "rejected valid tokens",
    "stalled on a deadlock",
    "ran without errors",
    "finished ahead of schedule",
    "dropped messages from the queue",
    "hit the API rate limit",
    "could not resolve the database host",
    "served stale prices from the cache",
]

FIXES = [
    "increased memory to 4GB",
    "rolled back to the previous release",
    "added an index on the orders table",
    "raised the timeout to 120 seconds",
    "restarted the pod",
    "pinned the dependency to the last good version",
    "cleared the cache",
    "rotated the credentials",
    "split the batch into smaller chunks",
    "added a retry with backoff",
    "moved the job to a larger node",
    "paused the consumer",
    "patched the config map",
    "asked the vendor for a quota increase",
    "left it as it was",
]

CUSTOMERS = [
    "Acme Corp",
    "Globex",
    "Initech",
    "Umbrella",
    "Hooli",
    "Stark Industries",
    "Wayne Enterprises",
    "Soylent",
    "Tyrell",
    "Cyberdyne",
]

REQUESTS = [
    "asked why their invoice doubled this month",
    "reported that exports were missing rows",
    "wanted the SSO login fixed before Friday",
    "asked for a refund of the annual plan",
    "complained that the dashboard loads slowly",
    "requested access for two new users",
    "asked when the outage would be over",
    "needed the data deletion confirmed",
    "asked to move their renewal date",
    "reported a wrong VAT rate on receipts",
]

WHEN = [
    "",
    "",
    "",
    "on Monday morning",
    "during the nightly run",
    "right after the deploy",
    "at peak traffic",
    "for the third time this week",
    "before the release freeze",
    "over the weekend",
    "after the database failover",
    "while the migration was running",
]

OUTCOMES = ["success", "success", "success", "failure", "failure", "partial", "unknown"]


@dataclass(frozen=True)
class GeneratedEpisode:
    summary: str
    action: str
    observation: str
    outcome: str
    actor: str
    environment: str
    entities: tuple[str, ...] = field(default_factory=tuple)

    def embedding_text(self) -> str:
        """What Episode.embedding_text() gives for this episode."""
        return "\n".join(p for p in (self.summary, self.action, self.observation) if p)

    def draft(self, *, occurred_at, session_id: str):
        """This episode as episodes_record takes it."""
        from episodes.services import EpisodeDraft

        return EpisodeDraft(
            occurred_at=occurred_at,
            summary=self.summary,
            action=self.action,
            observation=self.observation,
            outcome=self.outcome,
            actor=self.actor,
            environment=self.environment,
            session_id=session_id,
            entities=list(self.entities),
        )


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "?", "!")) else ".")


def _ops(rng: random.Random, actor: str, env: str) -> GeneratedEpisode:
    service = rng.choice(SERVICES)
    tool, verbs = rng.choice(TOOLS)
    verb = rng.choice(verbs)
    symptom = rng.choice(SYMPTOMS)
    fix = rng.choice(FIXES)
    when = rng.choice(WHEN)
    version = f"v{rng.randint(1, 4)}.{rng.randint(0, 19)}.{rng.randint(0, 9)}"
    good = symptom in ("ran without errors", "finished ahead of schedule")
    outcome = "success" if good else rng.choice(OUTCOMES)
    summary = _sentence(f"{service} {symptom} {when}")
    shape = rng.random()
    if shape < 0.34:
        # One sentence.
        return GeneratedEpisode(summary, "", "", outcome, actor, env, (service,))
    action = _sentence(f"{actor} {verb} {service} {version} with {tool} in {env}")
    if shape < 0.67:
        return GeneratedEpisode(summary, action, "", outcome, actor, env, (service, tool))
    if outcome == "success":
        observation = _sentence(f"{fix}; the next run passed")
    elif outcome == "failure":
        observation = _sentence(f"{fix}, but it {rng.choice(SYMPTOMS)} again")
    else:
        observation = _sentence(f"{fix} and will check it tomorrow")
    return GeneratedEpisode(summary, action, observation, outcome, actor, env, (service, tool))


def _support(rng: random.Random, actor: str, env: str) -> GeneratedEpisode:
    customer = rng.choice(CUSTOMERS)
    request = rng.choice(REQUESTS)
    ticket = f"#{rng.randint(1000, 99999)}"
    outcome = rng.choice(OUTCOMES)
    summary = _sentence(f"{customer} {request} in ticket {ticket}")
    if rng.random() < 0.4:
        return GeneratedEpisode(summary, "", "", outcome, actor, env, (customer.lower(),))
    tool, verbs = rng.choice(TOOLS[8:11])
    action = _sentence(f"{actor} {rng.choice(verbs)} {customer}'s account using {tool}")
    observation = (
        _sentence(f"the customer confirmed it was resolved {rng.choice(WHEN)}")
        if outcome == "success"
        else _sentence(f"still waiting on {rng.choice(['finance', 'engineering', 'legal'])}")
    )
    return GeneratedEpisode(summary, action, observation, outcome, actor, env, (customer.lower(),))


def generate(rng: random.Random) -> GeneratedEpisode:
    """One episode: mostly operations work, some customer support."""
    actor = rng.choice(ACTORS)
    env = rng.choice(ENVIRONMENTS)
    if rng.random() < 0.75:
        return _ops(rng, actor, env)
    return _support(rng, actor, env)


def episodes(n: int, seed: int = 7) -> list[GeneratedEpisode]:
    rng = random.Random(seed)
    return [generate(rng) for _ in range(n)]


def distinct_texts(n: int, seed: int = 7) -> list[GeneratedEpisode]:
    """`n` episodes whose embedding texts are pairwise distinct."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[GeneratedEpisode] = []
    while len(out) < n:
        episode = generate(rng)
        text = episode.embedding_text()
        if text not in seen:
            seen.add(text)
            out.append(episode)
    return out
