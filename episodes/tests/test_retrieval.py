"""Hybrid retrieval (episodes.retrieval) without the embedding model: synthetic unit
vectors along known axes stand in for embeddings, so which row is nearest is known."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from episodes import retrieval
from episodes.models import AbstentionCalibration, Episode
from episodes.retrieval import (
    SearchFilters,
    chunk_search,
    episode_search,
    fetch,
    fusion,
    plan,
    stats,
)
from episodes.tests.factories import SourceFactory
from episodes.tests.retrieval_fixtures import T0, record, set_embedding, topic
from piper.embeddings import get_embedder
from piper.errors import InvalidInput
from piper.tenancy.services import agent_create

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(days=1)
# A query vector that points at nothing recorded below.
NOWHERE = topic(300)


def search(agent, query, vector=NOWHERE, **kwargs):
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("abstain", False)
    return episode_search(agent=agent, query=query, query_embedding=vector, **kwargs)


def summaries(result):
    return [h.obj.summary for h in result.hits]


@pytest.fixture(autouse=True)
def _fresh_statistics():
    retrieval.forget_statistics()
    yield
    retrieval.forget_statistics()


# ---------------------------------------------------------------- full text


def test_a_row_sharing_only_some_of_the_words_is_found(agent_a):
    # plainto_tsquery would AND all five words and find nothing.
    record(agent_a, summary="The nightly batch run was OOM-killed")
    record(agent_a, summary="Deployed the web frontend")
    result = search(agent_a, "why does the nightly export keep failing halfway?")
    assert summaries(result) == ["The nightly batch run was OOM-killed"]
    assert result.lexemes == ("night", "export", "keep", "fail", "halfway")
    assert result.hits[0].signals["text_position"] == 1
    # BM25 idf over the agent's 2 rows: "night" in one, the other four in none.
    night, unseen = math.log(1 + 1.5 / 1.5), math.log(1 + 2.5 / 0.5)
    assert result.hits[0].signals["coverage"] == pytest.approx(
        night / (night + 4 * unseen), abs=1e-6
    )


def test_rows_without_embeddings_are_found_by_full_text(agent_a):
    embedded = record(agent_a, summary="Rotated the database password", embedding=topic(1))
    waiting = record(agent_a, summary="Kafka consumer lag alarm fired on the orders topic")
    result = search(agent_a, "kafka lag", vector=topic(1))
    assert [h.obj.pk for h in result.hits] == [waiting.pk, embedded.pk]
    first, second = result.hits
    assert first.signals["vector_similarity"] is None
    assert first.signals["embedded"] == 0
    assert first.signals["text_position"] == 1
    assert second.signals["vector_similarity"] == pytest.approx(1.0)
    assert "text_position" not in second.signals
    assert Episode.objects.get(pk=waiting.pk).embedding is None


def test_a_rare_word_outweighs_a_common_one(agent_a):
    # "deploy" is in every row, "kafka" in one: the one with the rare word
    # first, although the others say "deploy" three times.
    for i in range(6):
        record(agent_a, summary=f"Deploy {i}: deploy the deploy pipeline")
    kafka = record(agent_a, summary="Kafka upgrade, then deploy")
    result = search(agent_a, "deploy kafka")
    assert result.hits[0].obj.pk == kafka.pk
    assert result.hits[0].signals["coverage"] == 1.0
    others = [h.signals["coverage"] for h in result.hits[1:]]
    assert len(others) == 6 and max(others) < 0.5


def test_a_query_of_stop_words_only_still_searches_by_vector(agent_a):
    near = record(agent_a, summary="Renewed the certificate", embedding=topic(5))
    result = search(agent_a, "what was it?", vector=topic(5))
    assert result.lexemes == ()
    assert [h.obj.pk for h in result.hits] == [near.pk]
    assert result.hits[0].signals["coverage"] is None


def test_quotes_and_backslashes_in_a_query_are_only_text(agent_a):
    record(agent_a, summary="Fixed it's path C:\\temp\\x")
    result = search(agent_a, "it's C:\\temp\\x ' \\ & | ! :*")
    assert len(result.hits) == 1


# ------------------------------------------------------------------- hybrid


@pytest.fixture
def incidents(agent_a):
    """Episodes with known answers: the vectors encode what each is about."""
    rows = {
        "oom": record(
            agent_a,
            summary="ECS task OOM-killed during the nightly batch run; raised memory to 4 GB",
            occurred_at=T0 - timedelta(days=30),
            embedding=topic(1),
        ),
        "cert": record(
            agent_a,
            summary="TLS certificate expired; renewed it with certbot",
            occurred_at=T0 - timedelta(days=20),
            embedding=topic(2),
        ),
        "disk": record(
            agent_a,
            summary="Postgres primary ran out of disk during the batch import",
            occurred_at=T0 - timedelta(days=10),
            embedding=topic(3, mix={1: 0.3}),
        ),
        "deploy": record(
            agent_a,
            summary="Deployed release 3.2 of the checkout service",
            occurred_at=T0,
            embedding=topic(4),
        ),
    }
    return rows


def test_a_paraphrase_with_no_word_in_common_is_found_by_meaning(agent_a, incidents):
    result = search(agent_a, "the overnight job keeps dying", vector=topic(1, mix={3: 0.2}))
    assert [h.obj.pk for h in result.hits[:2]] == [incidents["oom"].pk, incidents["disk"].pk]
    assert "text_position" not in result.hits[0].signals
    assert result.hits[0].signals["vector_position"] == 1


def test_words_and_meaning_together_rank_first(agent_a, incidents):
    # "batch" is in oom and disk; the vector points at disk.
    result = search(agent_a, "batch import failure", vector=topic(3))
    assert result.hits[0].obj.pk == incidents["disk"].pk
    signals = result.hits[0].signals
    assert (signals["text_position"], signals["vector_position"]) == (1, 1)
    # oom shares only "batch" (coverage ~0.17): a weak text match barely counts.
    oom = next(h for h in result.hits if h.obj.pk == incidents["oom"].pk)
    assert oom.signals["text_position"] == 2
    assert oom.signals["coverage"] < 0.2


def test_the_fused_score_is_reciprocal_rank_fusion_of_the_lists(agent_a, incidents):
    result = search(agent_a, "certificate", vector=topic(2))
    top = result.hits[0]
    assert top.obj.pk == incidents["cert"].pk
    w, k = fusion.SIGNAL_WEIGHTS, fusion.RRF_K
    expected = (
        w["text"] * top.signals["coverage"] ** fusion.TEXT_COVERAGE_POWER / (k + 1)
        + w["vector"] / (k + 1)
        + w["recency"] / (k + top.signals["recency_position"])
    ) * (
        (1 + fusion.SALIENCE_WEIGHT * (top.signals["salience"] - 0.5))
        * (1 + fusion.AUTHORITY_WEIGHT * (top.signals["trust"] - 0.5))
    )
    assert top.score == pytest.approx(expected, abs=1e-6)


def test_recency_decays_with_the_half_life(agent_a, incidents):
    result = search(agent_a, "anything", vector=topic(4))
    by_id = {h.obj.pk: h for h in result.hits}
    assert by_id[incidents["deploy"].pk].signals["recency"] == pytest.approx(
        0.5 ** (1 / fusion.RECENCY_HALF_LIFE_DAYS), abs=1e-6
    )
    assert by_id[incidents["oom"].pk].signals["recency"] == pytest.approx(
        0.5 ** (31 / fusion.RECENCY_HALF_LIFE_DAYS), abs=1e-6
    )
    assert by_id[incidents["deploy"].pk].signals["recency_position"] == 1


def test_recency_breaks_a_tie_between_equal_matches(agent_a):
    old = record(agent_a, summary="Rebooted the router", occurred_at=T0 - timedelta(days=40))
    new = record(agent_a, summary="Rebooted the router", occurred_at=T0 - timedelta(days=2))
    assert [h.obj.pk for h in search(agent_a, "router reboot").hits] == [new.pk, old.pk]


def test_shared_entities_boost_and_bring_in_candidates(agent_a):
    plain = record(agent_a, summary="Payments API latency rose", embedding=topic(7))
    tagged = record(
        agent_a,
        summary="Something else entirely",
        entities=["payments-api", "stripe"],
        embedding=topic(8),
    )
    result = search(
        agent_a, "latency", vector=topic(7), filters=SearchFilters(entities=("Payments-API",))
    )
    by_id = {h.obj.pk: h for h in result.hits}
    assert by_id[tagged.pk].signals["shared_entities"] == 1
    assert by_id[tagged.pk].signals["entities_position"] == 1
    assert by_id[plain.pk].signals["shared_entities"] == 0
    without = search(agent_a, "latency", vector=topic(7))
    assert "shared_entities" not in without.hits[0].signals


def test_the_entity_list_can_read_the_entities_index(agent_a):
    # Compared in another type than the column's, the entity condition can only
    # be answered by scanning every row (at 100k episodes, most of a context
    # call). With sequential scans priced out, the plan shows whether the GIN
    # index is usable at all.
    record(agent_a, summary="Rotated the keys", entities=["payments-api"], embedding=topic(7))
    with CaptureQueriesContext(connection) as queries:
        search(agent_a, "keys", vector=topic(7), filters=SearchFilters(entities=("payments-api",)))
    assert any(plan.ENTITY_MATCH_SQL.split(" %")[0] in q["sql"] for q in queries)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            f"EXPLAIN SELECT e.id FROM episodes_episode e WHERE {plan.ENTITY_MATCH_SQL}",
            {"entities": ["payments-api"]},
        )
        explained = "\n".join(row[0] for row in cursor.fetchall())
    assert "episodes_entities_gin" in explained, explained


# ------------------------------------------------------------------ filters


@pytest.fixture
def varied(agent_a):
    base = dict(summary="Restarted the worker", embedding=topic(9))
    rows = {
        "a": record(
            agent_a,
            actor="alice",
            environment="prod",
            session_id="s1",
            goal_id="g1",
            task_id="t1",
            outcome="success",
            occurred_at=T0 - timedelta(days=3),
            **base,
        ),
        "b": record(
            agent_a,
            actor="bob",
            environment="staging",
            session_id="s2",
            goal_id="g2",
            task_id="t2",
            outcome="failure",
            occurred_at=T0 - timedelta(days=2),
            **base,
        ),
        "c": record(
            agent_a,
            actor="carol",
            environment="prod",
            session_id="s2",
            goal_id="g1",
            task_id="t3",
            outcome="partial",
            occurred_at=T0 - timedelta(days=1),
            **base,
        ),
    }
    return rows


@pytest.mark.parametrize(
    "filters, expected",
    [
        (SearchFilters(actor="bob"), {"b"}),
        (SearchFilters(environment="prod"), {"a", "c"}),
        (SearchFilters(session_id="s2"), {"b", "c"}),
        (SearchFilters(goal_id="g1"), {"a", "c"}),
        (SearchFilters(task_id="t3"), {"c"}),
        (SearchFilters(outcome="failure"), {"b"}),
        (SearchFilters(occurred_after=T0 - timedelta(days=2)), {"b", "c"}),
        (SearchFilters(occurred_before=T0 - timedelta(days=2)), {"a"}),
        (
            SearchFilters(
                occurred_after=T0 - timedelta(days=2), occurred_before=T0 - timedelta(days=2)
            ),
            set(),
        ),
        (SearchFilters(environment="prod", outcome="partial"), {"c"}),
        (SearchFilters(actor="nobody"), set()),
    ],
)
def test_filters_apply_to_text_and_vector_alike(agent_a, varied, filters, expected):
    names = {row.pk: name for name, row in varied.items()}
    # Words and vector both match every row: only the filter decides.
    result = search(agent_a, "restarted worker", vector=topic(9), filters=filters)
    assert {names[h.obj.pk] for h in result.hits} == expected
    for hit in result.hits:
        assert hit.signals["text_position"] is not None
        assert hit.signals["vector_position"] is not None


def test_another_agents_episodes_are_never_found(agent_a):
    other = agent_create(name="agent-other")
    record(other, summary="Kafka consumer lag alarm", embedding=topic(11))
    mine = record(agent_a, summary="Lunch order for the team", embedding=topic(12))
    result = search(agent_a, "kafka consumer lag alarm", vector=topic(11))
    assert [h.obj.pk for h in result.hits] == [mine.pk]
    assert result.hits[0].signals["coverage"] == 0.0
    assert search(other, "lunch", vector=topic(12)).hits[0].obj.agent_id == other.pk


# --------------------------------------------------------------- abstention


def test_nothing_supporting_the_question_abstains_with_near_misses(agent_a, incidents):
    result = episode_search(
        agent=agent_a,
        query="when did we migrate to Oracle?",
        query_embedding=topic(200),
        now=NOW,
    )
    assert result.abstained is True
    assert result.hits == []
    assert 1 <= len(result.near_misses) <= retrieval.NEAR_MISSES
    assert result.evidence_score is not None
    assert result.evidence_score < result.threshold == retrieval.DEFAULT_ABSTENTION_THRESHOLD
    assert result.threshold_source == "default"
    assert result.embedding_model == get_embedder().name
    assert result.metric == retrieval.EVIDENCE_METRIC


def test_supporting_evidence_is_answered(agent_a, incidents):
    result = episode_search(agent=agent_a, query="out of memory", query_embedding=topic(1), now=NOW)
    assert result.abstained is False
    assert result.near_misses == []
    assert result.hits[0].obj.pk == incidents["oom"].pk
    assert result.evidence_score == pytest.approx(1.0 + fusion.COVERAGE_WEIGHT * 1.0)


def test_an_agent_with_no_episodes_abstains_without_candidates(agent_a):
    result = episode_search(agent=agent_a, query="anything", query_embedding=topic(1))
    assert (result.abstained, result.hits, result.near_misses) == (True, [], [])
    assert result.evidence_score is None


def test_abstain_false_returns_the_hits_anyway(agent_a, incidents):
    result = search(agent_a, "when did we migrate to Oracle?", vector=topic(200))
    assert result.abstained is False
    assert len(result.hits) == 4


def test_the_newest_calibration_for_the_embedder_sets_the_threshold(agent_a, incidents):
    name = get_embedder().name

    def calibrate(threshold, model=name, metric=retrieval.EVIDENCE_METRIC):
        return AbstentionCalibration.objects.create(
            embedding_model=model,
            threshold=threshold,
            metric=metric,
            dataset="test",
            sample_size=10,
            answerable_accuracy=1.0,
            unanswerable_accuracy=1.0,
        )

    calibrate(0.1)
    newest = calibrate(1.5)
    calibrate(0.0, model="another/model")
    calibrate(0.0, metric="an-older-metric")
    result = episode_search(agent=agent_a, query="out of memory", query_embedding=topic(1), now=NOW)
    assert (result.threshold, result.threshold_source) == (1.5, str(newest.pk))
    # The evidence (cosine 1.0) is below 1.5 now.
    assert result.abstained is True
    assert result.near_misses[0].obj.pk == incidents["oom"].pk


def test_an_unembedded_row_is_evidence_by_its_coverage(agent_a):
    record(agent_a, summary="Kafka consumer lag alarm fired")
    result = episode_search(agent=agent_a, query="kafka consumer lag", query_embedding=topic(1))
    assert result.evidence_score == pytest.approx(fusion.UNEMBEDDED_COVERAGE_EVIDENCE)
    assert fusion.UNEMBEDDED_COVERAGE_EVIDENCE > retrieval.DEFAULT_ABSTENTION_THRESHOLD
    assert result.abstained is False


# ------------------------------------------------------------ by session


def test_by_session_groups_hits_by_session_in_time_order(agent_a):
    s1_late = record(
        agent_a,
        summary="deploy failed again",
        session_id="s1",
        occurred_at=T0 + timedelta(hours=3),
        embedding=topic(20),
    )
    s2 = record(
        agent_a,
        summary="deploy failed in staging",
        session_id="s2",
        occurred_at=T0 + timedelta(hours=2),
        embedding=topic(20),
    )
    s1_early = record(
        agent_a,
        summary="deploy failed",
        session_id="s1",
        occurred_at=T0 + timedelta(hours=1),
        embedding=topic(20),
    )
    result = search(agent_a, "deploy failed", vector=topic(20))
    groups = result.by_session()
    assert [g["session_id"] for g in groups] == ["s1", "s2"]
    assert [h.obj.pk for h in groups[0]["hits"]] == [s1_early.pk, s1_late.pk]
    assert [h.obj.pk for h in groups[1]["hits"]] == [s2.pk]
    assert groups[0]["first_at"] == T0 + timedelta(hours=1)
    assert groups[0]["last_at"] == T0 + timedelta(hours=3)
    assert groups[0]["best_score"] == max(h.score for h in groups[0]["hits"])
    assert groups[0]["source_id"] is None


# --------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"query": ""}, "q: the query must not be empty"),
        ({"query": "   \n"}, "q: the query must not be empty"),
        ({"query": "x" * 2001}, "q: at most 2,000 characters; shorten the query"),
        ({"limit": 0}, "limit: must be an integer from 1 to 100"),
        ({"limit": 101}, "limit: must be an integer from 1 to 100"),
        (
            {"filters": SearchFilters(occurred_after=T0, occurred_before=T0 - timedelta(1))},
            "occurred_before: the time window ends before it starts; "
            "occurred_before must not be earlier than occurred_after",
        ),
        (
            {"filters": SearchFilters(occurred_after=T0.replace(tzinfo=None))},
            "occurred_after: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
        ),
        ({"filters": SearchFilters(outcome="meh")}, "outcome: must be one of"),
        ({"query_embedding": [0.1] * 3}, "query_embedding: must have 384 numbers"),
    ],
)
def test_bad_input_is_refused(agent_a, kwargs, message):
    kwargs.setdefault("query", "deploy")
    kwargs.setdefault("query_embedding", topic(1))
    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidInput) as error:
        episode_search(agent=agent_a, **kwargs)
    assert error.value.message.startswith(message)
    assert len(queries) == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"query": ""}, "q: the query must not be empty"),
        ({"query": "x" * 2001}, "q: at most 2,000 characters; shorten the query"),
        ({"limit": 101}, "limit: must be an integer from 1 to 100"),
        ({"query_embedding": [0.1] * 3}, "query_embedding: must have 384 numbers"),
    ],
)
def test_chunk_search_refuses_the_same_bad_input(agent_a, kwargs, message):
    kwargs.setdefault("query", "deploy")
    kwargs.setdefault("query_embedding", topic(1))
    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidInput) as error:
        chunk_search(agent=agent_a, **kwargs)
    assert error.value.message == message
    assert len(queries) == 0


# -------------------------------------------------------------- mechanics


def test_two_statements_and_the_hnsw_settings_put_back(agent_a, incidents):
    search(agent_a, "warm the caches", vector=topic(1))
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('hnsw.ef_search', '77', true)")
        with CaptureQueriesContext(connection) as queries:
            search(agent_a, "batch", vector=topic(1))
        # prepare (lexemes, threshold, settings), the search with the candidates'
        # session neighbours (episodes.retrieval.session_context), the settings put back,
        # the hits' rows
        assert len(queries) == 4
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan'),"
                " current_setting('hnsw.max_scan_tuples')"
            )
            assert cursor.fetchone() == ("77", "off", "20000")


def test_the_vector_list_is_exact_for_a_small_agent(agent_a, incidents):
    result = search(agent_a, "batch", vector=topic(1))
    assert result.vector_strategy == "exact"


def _counts_the_set(queries) -> bool:
    return any("SELECT 1 FROM episodes_episode e WHERE" in q["sql"] for q in queries)


def test_a_filtered_set_is_counted_once_a_minute(agent_a, monkeypatch):
    for i in range(6):
        record(agent_a, summary=f"step {i}", actor="ops", embedding=topic(i))
    record(agent_a, summary="someone else's step", actor="dev", embedding=topic(1))
    ops = SearchFilters(actor="ops")

    with CaptureQueriesContext(connection) as first:
        before = search(agent_a, "step", vector=topic(1), filters=ops)
    with CaptureQueriesContext(connection) as second:
        again = search(agent_a, "step", vector=topic(1), filters=ops)
    with CaptureQueriesContext(connection) as other_actor:
        search(agent_a, "step", vector=topic(1), filters=SearchFilters(actor="dev"))

    assert _counts_the_set(first) and not _counts_the_set(second)
    assert _counts_the_set(other_actor)  # another set, another count
    assert summaries(again) == summaries(before) and again.vector_strategy == "exact"
    # A minute later the set is counted again.
    clock = stats.time.monotonic() + stats.ROW_COUNT_CACHE_SECONDS + 1
    monkeypatch.setattr(stats.time, "monotonic", lambda: clock)
    with CaptureQueriesContext(connection) as later:
        search(agent_a, "step", vector=topic(1), filters=ops)
    assert _counts_the_set(later)


def test_a_stale_count_picks_a_slower_plan_never_a_wrong_answer(agent_a, monkeypatch):
    for i in range(6):
        record(agent_a, summary=f"step {i}", actor="ops", embedding=topic(i))
    ops = SearchFilters(actor="ops")
    expected = search(agent_a, "step", vector=topic(2), filters=ops)
    nearest = min(expected.hits, key=lambda h: h.signals["vector_position"])
    assert nearest.obj.summary == "step 2"
    # As if the set had shrunk from far above the limit since it was counted:
    # the graph walk is taken, finds fewer than k rows and the exact scan answers.
    monkeypatch.setattr(fetch, "_cached_filtered_count", lambda key: 10**6)

    result = search(agent_a, "step", vector=topic(2), filters=ops)

    assert result.vector_strategy == "hnsw+exact"
    assert [(h.obj.pk, h.signals) for h in result.hits] == [
        (h.obj.pk, h.signals) for h in expected.hits
    ]


def test_a_hit_carries_every_column_as_the_orm_loads_it(agent_a):
    # The hits are loaded from binary results (psycopg's loaders, not Django's
    # text ones): every field must come back with the value and type the ORM gives.
    earlier = record(agent_a, summary="the backup job started")
    log = SourceFactory(agent=agent_a, title="Job log", content="OOM at 03:12")
    record(
        agent_a,
        summary="the backup job ran out of memory",
        related_ids=[earlier.pk],
        source_id=log.pk,
        actor="ops-bot",
        environment="prod",
        session_id="s-1",
        outcome="failure",
        score=0.25,
        entities=["Backup Job", "oom"],
        embedding=topic(3),
    )
    hit = search(agent_a, "backup memory", vector=topic(3)).hits[0]
    assert hit.obj.summary == "the backup job ran out of memory"
    chunk = chunk_search(agent=agent_a, query="OOM", query_embedding=topic(3), abstain=False)
    assert chunk.hits[0].obj.source_id == log.pk
    for found in (hit.obj, chunk.hits[0].obj):
        model = type(found)
        expected = model.objects.get(pk=found.pk)
        for f in model._meta.concrete_fields:
            if f.column in plan.SEARCH_COLUMNS:
                continue
            got, want = getattr(found, f.attname), getattr(expected, f.attname)
            assert (got, type(got)) == (want, type(want)), f"{model.__name__}.{f.name}"


# ------------------------------------------------------------------- chunks


def test_chunk_search_finds_passages_of_this_agents_sources(agent_a):
    runbook = SourceFactory(
        agent=agent_a,
        title="Runbook",
        content="Failing over the database.\n\nPromote the replica with pg_ctl promote, "
        "then repoint the app.\n\nRestoring backups.\n\nUse pg_restore from last night.",
    )
    other = SourceFactory(agent=agent_a, title="Menu", content="Lunch is at noon on Fridays.")
    chunks = list(runbook.chunks.order_by("ordinal"))
    set_embedding(chunks[0], topic(30))
    result = chunk_search(
        agent=agent_a, query="promote the replica", query_embedding=topic(30), abstain=False
    )
    assert result.hits[0].kind == "chunk"
    assert "pg_ctl promote" in result.hits[0].obj.text
    assert {h.obj.source_id for h in result.hits} <= {runbook.pk, other.pk}
    only = chunk_search(
        agent=agent_a,
        query="lunch",
        query_embedding=topic(30),
        source_id=other.pk,
        abstain=False,
    )
    assert {h.obj.source_id for h in only.hits} == {other.pk}
    groups = only.by_session()
    assert [g["source_id"] for g in groups] == [other.pk]
    stranger = agent_create(name="agent-stranger")
    assert (
        chunk_search(
            agent=stranger, query="promote the replica", query_embedding=topic(30)
        ).near_misses
        == []
    )


def test_chunk_search_drops_the_agents_cached_counts_after_an_erasure_elsewhere(
    agent_a, monkeypatch
):
    """Another process's erasure bumps the agent's generation: the next chunk
    search here drops what its caches hold of the agent, as episode_search does."""
    from django.core.cache import cache

    from episodes.retrieval import stats
    from piper import generations

    source = SourceFactory(agent=agent_a, title="Runbook", content="Promote the replica.")
    generations.current(agent_a.pk)  # this process has seen the agent's generation
    # A filtered count's key holds the filter's values, the agent among them.
    key = ("episodes_sourcechunk", "source", 100, (("agent", agent_a.pk), ("source", source.pk)))
    stats._remember_filtered_count(key, 7)
    assert stats._cached_filtered_count(key) == 7
    cache.add(f"piper:agent-generation:{agent_a.pk}", 0, timeout=None)
    cache.incr(f"piper:agent-generation:{agent_a.pk}")  # the other process's erasure
    monkeypatch.setattr(generations, "CHECK_SECONDS", 0.0)

    chunk_search(agent=agent_a, query="promote", query_embedding=topic(30), source_id=source.pk)

    assert stats._cached_filtered_count(key) is None


# ---------------------------------------------------------------- duplicates


def test_a_collapsed_duplicate_is_answered_by_its_canonical_episode(agent_a):
    from episodes.services import episodes_collapse

    canonical = record(
        agent_a, summary="Kafka consumer lag alarm fired on orders", embedding=topic(1)
    )
    copy = record(agent_a, summary="Kafka consumer lag alarm fired on orders!", embedding=topic(1))
    closer = record(agent_a, summary="Kafka consumer lag alarm fired on the orders topic again")
    other = record(agent_a, summary="Rotated the database password", embedding=topic(2))
    before = search(agent_a, "kafka consumer lag orders topic", vector=topic(1), limit=3)
    assert {h.obj.pk for h in before.hits} == {canonical.pk, copy.pk, closer.pk}
    episodes_collapse(
        agent=agent_a, canonical_id=canonical.pk, duplicate_ids=[copy.pk, closer.pk], reason="same"
    )
    after = search(agent_a, "kafka consumer lag orders topic", vector=topic(1), limit=3)
    # The canonical episode answers once, at the best of its group's ranks; the
    # duplicates are kept (never deleted) and never listed; the room they leave
    # goes to the next candidate.
    assert [h.obj.pk for h in after.hits] == [canonical.pk, other.pk]
    assert after.hits[0].score == before.hits[0].score
    assert (
        Episode.objects.filter(pk__in=[copy.pk, closer.pk], canonical_id=canonical.pk).count() == 2
    )
    if before.hits[0].obj.pk != canonical.pk:
        assert after.hits[0].signals["duplicate_of"] == str(canonical.pk)
        assert after.hits[0].signals["collapsed_hit"] == str(before.hits[0].obj.pk)
    # Asked for what only the other episode says, it still answers.
    found = search(agent_a, "database password", vector=topic(2)).hits
    assert [h.obj.pk for h in found] == [other.pk, canonical.pk]


def test_without_duplicates_no_statement_is_added(agent_a):
    for n in range(5):
        record(agent_a, summary=f"Kafka lag alarm number {n}", embedding=topic(1))
    search(agent_a, "kafka lag alarm", vector=topic(1))  # warm the statistics
    with CaptureQueriesContext(connection) as plain:
        search(agent_a, "kafka lag alarm", vector=topic(1), limit=3)
    assert not any("IS NOT NULL FROM" in q["sql"] for q in plain.captured_queries)


# ------------------------------------------------------- retracted and corrected


def test_a_retracted_episode_is_found_by_nothing(agent_a):
    from episodes.services import episode_retract

    kept = record(
        agent_a,
        summary="Kafka consumer lag alarm fired on orders",
        entities=["orders"],
        session_id="s-1",
        embedding=topic(1),
    )
    gone = record(
        agent_a,
        summary="Kafka consumer lag alarm fired on payments",
        entities=["orders"],
        session_id="s-1",
        embedding=topic(1, mix={2: 0.1}),
    )
    orders = SearchFilters(entities=["orders"])
    both = search(agent_a, "kafka consumer lag alarm", vector=topic(1), filters=orders)
    assert {h.obj.pk for h in both.hits} == {kept.pk, gone.pk}
    episode_retract(agent=agent_a, episode_id=gone.pk, reason="a test alarm")
    for vector in (topic(1), topic(1, mix={2: 0.1}), None):
        result = search(agent_a, "kafka consumer lag alarm payments", vector=vector, filters=orders)
        assert [h.obj.pk for h in result.hits] == [kept.pk]
        assert gone.pk not in {h.obj.pk for h in result.near_misses}
    # Asked for its own words alone, nothing supports an answer.
    assert search(agent_a, "payments", abstain=True).hits == []


def test_a_correction_is_found_by_its_new_text_only(agent_a):
    from episodes.services import episode_correct

    old = record(agent_a, summary="The nightly export failed on host mercury", embedding=topic(1))
    new = episode_correct(
        agent=agent_a,
        episode_id=old.pk,
        changes={"summary": "The nightly export failed on host venus"},
    )
    assert [h.obj.pk for h in search(agent_a, "mercury").hits] == []
    assert [h.obj.pk for h in search(agent_a, "nightly export venus").hits] == [new.pk]
    # Not embedded yet: found by its words; then by its vector too.
    assert [h.obj.pk for h in search(agent_a, "zzz", vector=topic(1)).hits] == []
    set_embedding(new, topic(1))
    assert [h.obj.pk for h in search(agent_a, "zzz", vector=topic(1)).hits] == [new.pk]


def test_a_duplicate_of_a_withdrawn_episode_answers_for_itself(agent_a):
    from episodes.services import episode_retract, episodes_collapse

    canonical = record(agent_a, summary="Kafka lag alarm on orders", embedding=topic(1))
    copy = record(agent_a, summary="Kafka lag alarm on orders!", embedding=topic(1))
    episodes_collapse(
        agent=agent_a, canonical_id=canonical.pk, duplicate_ids=[copy.pk], reason="same"
    )
    episode_retract(agent=agent_a, episode_id=canonical.pk, reason="wrong agent")
    result = search(agent_a, "kafka lag alarm orders", vector=topic(1))
    assert [h.obj.pk for h in result.hits] == [copy.pk]
    assert "duplicate_of" not in result.hits[0].signals
