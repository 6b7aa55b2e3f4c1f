"""The Redis fault in short, for the test suite (redis_restart.py in full,
docs/reliability.md): with Redis gone — the rate-limit counter unreachable, no
task can be queued — writes are still accepted, exactly once, and the
reconcilers derive afterwards what the lost tasks would have (episode
vectors, fact texts and their vectors). A few seconds.

The PostgreSQL restart and the worker kills have no short form here: the
first needs a server of its own (piper/api/tests/test_database_trouble.py cuts
a request's connection instead), the second is intentions/tests/test_faults.py.
"""

from __future__ import annotations

import pytest
from celery.app.task import Task
from kombu.exceptions import OperationalError as BrokerDown

from conftest import make_client
from episodes import tasks as episode_tasks
from episodes.models import Episode
from facts import tasks as fact_tasks
from facts.models import FactText
from piper import embeddings
from piper.api import throttling
from piper.api.models import IdempotencyRecord

pytestmark = pytest.mark.django_db(transaction=True)


class Unreachable:
    """The rate limit's Redis, refusing every connection."""

    def pipeline(self):
        return self

    def incr(self, *args):
        pass

    expire = incr

    def execute(self):
        import redis

        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


@pytest.fixture
def redis_gone(monkeypatch):
    """Every task a commit queues fails to reach the broker; the rate limit's
    Redis refuses connections. Returns the tasks that could not be queued."""
    lost = []

    def refuse(self, *args, **kwargs):
        lost.append(self.name)
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(Task, "apply_async", refuse)
    monkeypatch.setattr(throttling, "get_redis_connection", lambda alias: Unreachable())
    return lost


@pytest.fixture
def hash_embedder(settings, monkeypatch):
    settings.PIPER_EMBEDDER = "episodes.tests.factories.HashEmbedder"
    monkeypatch.setattr(embeddings, "_singleton", None)


def test_with_redis_gone_writes_are_accepted_and_the_reconcilers_derive_the_rest(
    redis_gone, hash_embedder
):
    client = make_client("redis-gone", rate_per_minute=1)  # a limit nobody can count now
    thread = client.post("/api/v1/threads", {"key": "t"}, format="json").json()
    answers = []
    for n in range(3):
        answers.append(
            client.post(
                "/api/v1/facts",
                {"subject": f"host-{n}", "predicate": "status", "value": "up",
                 "cardinality": "one", "source_type": "observation"},
                format="json",
                HTTP_IDEMPOTENCY_KEY=f"fact-{n}",
            )
        )  # fmt: skip
        answers.append(
            client.post(
                "/api/v1/episodes",
                {"occurred_at": "2026-01-01T00:00:00Z", "summary": f"checked host {n}"},
                format="json",
                HTTP_IDEMPOTENCY_KEY=f"episode-{n}",
            )
        )
        answers.append(
            client.put(
                f"/api/v1/threads/{thread['id']}/state",
                {"state": {"goal": f"step {n}"}, "based_on": n},
                format="json",
                HTTP_IDEMPOTENCY_KEY=f"state-{n}",
            )
        )
    assert [a.status_code for a in answers] == [201] * 9
    assert IdempotencyRecord.objects.filter(agent=client.agent).count() == 9
    assert {"facts.index_fact_texts", "episodes.embed_episodes"} <= set(redis_gone)
    # Nothing derived: the tasks never left the web process.
    assert Episode.objects.filter(agent=client.agent, embedding__isnull=True).count() == 3
    assert not FactText.objects.filter(agent=client.agent).exists()

    # What celery-beat runs, once Redis is back.
    assert episode_tasks.embed_backlog(grace_seconds=0)["episodes"] == 3
    done = fact_tasks.fact_texts_backlog(grace_seconds=0)
    assert (done["texts_changed"], done["texts_embedded"]) == (3, 3)
    assert not Episode.objects.filter(agent=client.agent, embedding__isnull=True).exists()
    texts = FactText.objects.filter(agent=client.agent)
    assert sorted(texts.values_list("text", flat=True)) == [
        f"status — host-{n}: up" for n in range(3)
    ]
    assert not texts.filter(embedding__isnull=True).exists()
