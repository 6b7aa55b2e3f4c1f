"""The current_fact route: fact texts propose, the question judges, the facts selectors decide."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from piper.api.serializers import api_datetime
from piper.tenancy.models import Agent

from .. import about
from .results import CONTESTED, CURRENT, SUPERSEDED, Answer, Ask, Evidence, age_seconds

NEAR_MISS_PAIRS = 3  # pairs shown as near misses when no fact answers
CANDIDATE_PAIRS = 20  # pairs the fact texts propose before the question's words judge them


def fact_text(fact) -> str:
    from facts.fact_texts import render, render_value

    value = fact.object_entity.name if fact.object_entity_id else render_value(fact.object_value)
    return render(predicate=fact.predicate.name, subject=fact.subject.name, values=[value])


def fact_evidence(fact, *, score: float, currentness: str, now: datetime, signals=None) -> Evidence:
    event = fact.source_event
    volatility = fact.predicate.volatility_seconds
    age = age_seconds(now, fact.last_confirmed_at)
    return Evidence(
        kind="fact",
        id=str(fact.pk),
        text=fact_text(fact),
        score=score,
        obj=fact,
        signals=signals or {},
        memory_status={
            "source": {
                "type": event.source_type,
                "ref": event.source_ref,
                "event_id": str(event.pk),
                "actor": event.actor,
                "session_id": event.session_id,
            },
            "age_seconds": age,
            "authority": fact.authority,
            "currentness": currentness,
            "confidence": float(fact.confidence),
            "status": fact.status,
            "valid_from": api_datetime(fact.valid_from),
            "valid_to": api_datetime(fact.valid_to),
            "recorded_at": api_datetime(fact.recorded_at),
            "needs_recheck": volatility is not None and age > volatility,
            "superseded_by": str(fact.superseded_by_id) if fact.superseded_by_id else None,
            "contested_by": [str(c.pk) for c in fact.open_contests],
            "instruction_like": fact.instruction_like,
        },
    )


def _subject_names(agent: Agent, subject_ids) -> dict[uuid.UUID, list[str]]:
    """Every name (canonical and alias) of each subject, one query."""
    from facts.models import EntityAlias

    names: dict[uuid.UUID, list[str]] = {}
    rows = EntityAlias.objects.filter(agent=agent, entity_id__in=list(subject_ids)).values_list(
        "entity_id", "alias"
    )
    for entity_id, alias in rows:
        names.setdefault(entity_id, []).append(alias)
    return names


_phrase_lock = threading.Lock()
_phrase_vectors: dict[tuple[str, str], list[float]] = {}
MAX_CACHED_PHRASES = 50_000


def _phrase_vectors_of(embedder, phrases: Sequence[str]) -> list[list[float]]:
    """Embeddings of predicate phrases, computed once per process and model."""
    with _phrase_lock:
        known = {p: _phrase_vectors.get((embedder.name, p)) for p in phrases}
    missing = [p for p, vector in known.items() if vector is None]
    if missing:
        known.update(zip(missing, embedder.embed(missing), strict=True))
        with _phrase_lock:
            if len(_phrase_vectors) + len(missing) > MAX_CACHED_PHRASES:
                _phrase_vectors.clear()
            _phrase_vectors.update(((embedder.name, p), known[p]) for p in missing)
    return [known[p] for p in phrases]


def _without_subjects(query: str, named) -> str:
    """The question with the things it names taken out ("it"): what it asks of them."""
    for match in sorted(named, key=lambda m: -len(m.alias)):
        query = re.sub(rf"(?i)\b{re.escape(match.alias)}\b", "it", query)
    return re.sub(r"(?i)\b(the|a|an) it\b", "it", query)


@dataclass(frozen=True)
class PredicateSimilarity:
    """What the question asks of the subject it names, against every predicate
    of the agent that competes (about.py: `meaning`)."""

    agent: Agent
    similarity: dict[uuid.UUID, float]
    names: dict[uuid.UUID, str]
    competing: frozenset[uuid.UUID]
    kinds: dict[uuid.UUID, about.PredicateKinds]
    # The kinds the question words ask for (when, where, who, how many); a
    # "which <noun>" kind only decides what competes.
    kinds_cued: frozenset[str]
    # Predicates the question asks for in words declared for them (an alias,
    # a family phrase): those are what it asks, never another name for it.
    declared: frozenset[uuid.UUID] = frozenset()

    def meaning(self, predicate_id: uuid.UUID, subject_predicates) -> about.Meaning | None:
        """The predicate's meaning verdict, among the subject's predicates:
        the subject's nearest competing predicate is asked when it is similar
        enough (any similarity, if of the kind asked), clear of the subject's
        next one, and no predicate the subject lacks is much nearer — unless
        that one may be the same attribute under another name."""
        if predicate_id not in self.similarity:
            return None
        own = set(subject_predicates)
        ranked = sorted(
            (p for p in own if p in self.competing),
            key=lambda p: (-self.similarity[p], self.names[p]),
        )
        nearest = max(self.competing, key=lambda p: (self.similarity[p], self.names[p]))
        value = self.similarity[predicate_id]
        # Of the kind the question words ask for (when, where, who, how many):
        # that is evidence enough. A "which <noun>" kind is WordNet's guess.
        of_kind_asked = bool(self.kinds[predicate_id].of & self.kinds_cued)
        floor = 0.0 if of_kind_asked else settings.PIPER_FACT_MEANING_MIN_SIMILARITY
        accepted = (
            bool(ranked)
            and ranked[0] == predicate_id
            and value >= floor
            and (len(ranked) < 2 or value - self.similarity[ranked[1]] >= MEANING_SUBJECT_MARGIN)
        )
        rivals = [
            p
            for p in self.competing
            if p not in own and self.similarity[p] - value > settings.PIPER_FACT_MEANING_MARGIN
        ]
        same: list[uuid.UUID] = []
        if accepted and rivals:
            same = self._same_attribute(predicate_id, rivals)
            accepted = len(same) == len(rivals)
        return about.Meaning(
            similarity=value,
            nearest=self.names[nearest],
            nearest_similarity=self.similarity[nearest],
            accepted=accepted,
            same_attribute=tuple(sorted(self.names[p] for p in same)) if accepted else (),
        )

    def _same_attribute(self, predicate_id: uuid.UUID, rivals) -> list[uuid.UUID]:
        """The rivals that may be the predicate's attribute under another name:
        of its kind and form, not asked for in words declared for it, never
        stated about one subject together with it
        — and no nearer predicate of its kind is known to be another
        attribute (stated together with it)."""
        from facts.selectors import predicates_stated_together

        mine = self.kinds[predicate_id]
        kin = [p for p in rivals if mine.alike(self.kinds[p]) and p not in self.declared]
        if len(kin) < len(rivals):
            return kin  # one rival is another attribute: no need to ask the data
        value = self.similarity[predicate_id]
        nearer = [
            p
            for p in self.competing
            if self.similarity[p] > value and mine.of & self.kinds[p].of and p != predicate_id
        ]
        if nearer and predicates_stated_together(
            agent=self.agent, predicate_id=predicate_id, others=nearer
        ):
            return []
        return kin


# The subject's nearest predicate must be this much nearer than its next one.
MEANING_SUBJECT_MARGIN = 0.03


def predicate_similarity(ask: Ask, named) -> PredicateSimilarity | None:
    """How near each of the agent's predicates (its name, an alias or an example question) is to
    what the question asks of the subject it names; None when it names none."""
    from facts.models import Predicate
    from facts.selectors import predicate_value_samples

    if not named:
        return None
    rows = list(
        Predicate.objects.filter(agent=ask.agent).values_list(
            "id", "name", "aliases", "value_type", "examples"
        )
    )
    if not rows:
        return None
    kinds_asked = about.asked_kinds(ask.query)
    refused = about.refused_forms(ask.query)
    values = predicate_value_samples(agent=ask.agent)
    phrases: list[tuple[uuid.UUID, str]] = []
    competing: set[uuid.UUID] = set()
    kinds: dict[uuid.UUID, about.PredicateKinds] = {}
    question = about.Question.of(ask.query, ())
    declared: set[uuid.UUID] = set()
    for predicate_id, name, aliases, value_type, examples in rows:
        kinds[predicate_id] = about.predicate_kinds(
            name, aliases, values.get(predicate_id, ()), value_type
        )
        phrases += [
            (predicate_id, about.as_question(n, kinds[predicate_id].of)) for n in (name, *aliases)
        ]
        # The questions the agent said ask for it, as it wrote them (about "it").
        phrases += [(predicate_id, example) for example in examples]
        if kinds[predicate_id].competes_for(kinds_asked, refused):
            competing.add(predicate_id)
            if about.declared_for(question, name, aliases):
                declared.add(predicate_id)
    if not competing:
        return None
    embedder = ask.vector.embedder
    residue = embedder.embed_one(_without_subjects(ask.query, named))
    vectors = _phrase_vectors_of(embedder, [phrase for _, phrase in phrases])
    similarity: dict[uuid.UUID, float] = {}
    for (predicate_id, _), vector in zip(phrases, vectors, strict=True):
        value = sum(a * b for a, b in zip(residue, vector, strict=True))
        similarity[predicate_id] = max(value, similarity.get(predicate_id, -1.0))
    names = {predicate_id: name for predicate_id, name, *_ in rows}
    return PredicateSimilarity(
        ask.agent,
        similarity,
        names,
        frozenset(competing),
        kinds,
        about.cued_kinds(ask.query),
        frozenset(declared),
    )


def _abstention_reason(verdicts: Sequence[about.Verdict], *, answering: int, weak: int) -> str:
    """Why no fact answered, in one word."""
    if not verdicts:
        return "no_candidate"
    if answering:
        return "nothing_current"  # the pair asked about holds no value now
    if weak:
        return "weak_similarity"  # no subject named, and no text close enough
    if any(v.subject in (about.NAMED, about.PARTIAL) for v in verdicts):
        return "predicate_not_known"  # the subject is known; what is asked of it is not
    return "subject_not_known"


def route_current_fact(ask: Ask) -> Answer:
    """Fact texts propose (subject, predicate) pairs; a pair answers only if
    the question is about its subject and its predicate (recall.about);
    the facts selectors say what is believed and valid now. The value just
    before it, if any, comes after every current value, marked superseded —
    never as current. With no pair that answers, it abstains: the best pairs'
    values are near misses."""
    from facts import selectors as facts
    from facts.search import fact_candidates

    named = ask.named
    candidates = fact_candidates(
        agent=ask.agent,
        query=ask.query,
        query_embedding=ask.vector.get(),
        limit=max(ask.limit, CANDIDATE_PAIRS),
        named=named,
    )
    question = about.Question.of(ask.query, (m.entity.pk for m in named))
    held_by: dict[uuid.UUID, set[uuid.UUID]] = {}
    for candidate in candidates:
        held_by.setdefault(candidate.fact_text.subject_id, set()).add(
            candidate.fact_text.predicate_id
        )
    names = _subject_names(ask.agent, {c.fact_text.subject_id for c in candidates})
    implied_floor = settings.PIPER_FACT_IMPLIED_MIN_SIMILARITY

    def judge_all(nearness: PredicateSimilarity | None = None):
        judged, weak = [], 0
        for candidate in candidates:
            text = candidate.fact_text
            verdict = about.judge(
                question,
                subject_id=text.subject_id,
                subject_names=names.get(text.subject_id) or [text.subject.name],
                predicate_name=text.predicate.name,
                predicate_description=text.predicate.description,
                predicate_aliases=text.predicate.aliases,
                meaning=nearness.meaning(text.predicate_id, held_by[text.subject_id])
                if nearness
                else None,
            )
            accepted = verdict.accepted
            if accepted and verdict.subject == about.IMPLIED:
                # No subject in the question: only a close text answers it.
                similarity = candidate.signals.get("vector_similarity")
                if similarity is None or similarity < implied_floor:
                    accepted = False
                    weak += 1
            judged.append((candidate, verdict, accepted))
        return judged, weak

    judged, weak = judge_all()
    named_pairs = [(v, accepted) for _, v, accepted in judged if v.subject == about.NAMED]
    # A subject named, but none of its predicates in the question's words: ask
    # which of them the question means (the embedding, only then).
    unanswered = named_pairs and not any(accepted for _, accepted in named_pairs)
    if unanswered and (nearness := predicate_similarity(ask, named)):
        judged, weak = judge_all(nearness)
    # What answers, best first: named subjects before implied ones, a stated
    # predicate before a described one; then the candidates' own order.
    order = {id(c): n for n, (c, _, _) in enumerate(judged)}
    answering = sorted(
        (x for x in judged if x[2]), key=lambda x: (x[1].sort_key(), order[id(x[0])])
    )
    rejected = [x for x in judged if not x[2]]

    def lookup(candidate):
        return facts.facts_valid_at_by_ref(
            agent=ask.agent,
            subject_ref=str(candidate.fact_text.subject_id),
            predicate_name=candidate.predicate_name,
            valid_time=ask.now,
        )

    def evidence_of(candidate, verdict, believed) -> list[Evidence]:
        signals = {**candidate.signals, "about": verdict.as_dict()}
        return [
            fact_evidence(
                fact,
                score=candidate.score,
                currentness=CONTESTED if fact.open_contests else CURRENT,
                now=ask.now,
                signals=signals,
            )
            for fact in believed
        ]

    def ended(candidate, verdict, subject, predicate) -> Evidence | None:
        # The latest believed value whose valid time has ended: what it was before.
        fact = (
            facts.fact_chain(agent=ask.agent, subject=subject, predicate=predicate)
            .filter(facts.BELIEVED, valid_to__lte=ask.now)
            .order_by("-valid_to", "-recorded_at", "id")
            .first()
        )
        if fact is None:
            return None
        return fact_evidence(
            fact,
            score=round(candidate.score / 2, 6),
            currentness=SUPERSEDED,
            now=ask.now,
            signals={**candidate.signals, "about": verdict.as_dict()},
        )

    traced: dict[int, dict[str, Any]] = {}

    def trace(candidate, verdict, accepted, believed=None) -> None:
        entry = traced.setdefault(
            id(candidate),
            {
                "kind": "fact_text",
                "id": str(candidate.fact_text.pk),
                "subject": candidate.fact_text.subject.name,
                "predicate": candidate.predicate_name,
                "score": candidate.score,
                "signals": candidate.signals,
                "about": verdict.as_dict(),
                "accepted": accepted,
            },
        )
        if believed is not None:
            entry["current"] = [str(f.pk) for f in believed]

    for candidate, verdict, accepted in judged:
        trace(candidate, verdict, accepted)
    current: list[Evidence] = []
    looked_up = []
    for candidate, verdict, accepted in answering:
        if len(current) >= ask.limit:
            break
        subject, predicate, believed = lookup(candidate)
        trace(candidate, verdict, accepted, believed)
        looked_up.append((candidate, verdict, subject, predicate, bool(believed)))
        current += evidence_of(candidate, verdict, believed)
    evidence = current[: ask.limit]
    if evidence:
        # What the kept pairs held before, after the current values, in the
        # room the limit leaves.
        kept = {(e.obj.subject_id, e.obj.predicate_id) for e in evidence}
        history = []
        for candidate, verdict, subject, predicate, has_current in looked_up:
            if len(evidence) + len(history) >= ask.limit:
                break
            if not has_current or (subject.pk, predicate.pk) not in kept:
                continue
            if (before := ended(candidate, verdict, subject, predicate)) is not None:
                history.append(before)
        return Answer(
            evidence=evidence + history,
            candidates=list(traced.values()),
            abstained=False,
            details={"facts": {"named": [m.alias for m in named], "answering": len(answering)}},
        )
    # Nothing answers: the pairs that did (with nothing current) or came
    # nearest, their current or last value each — a near miss, never evidence.
    near: list[Evidence] = []
    room = min(ask.limit, NEAR_MISS_PAIRS)
    nearest = [(c, v) for c, v, _ in answering] + sorted(
        ((c, v) for c, v, _ in rejected), key=lambda x: (x[1].sort_key(), order[id(x[0])])
    )
    for candidate, verdict in nearest[:room]:
        subject, predicate, believed = lookup(candidate)
        trace(candidate, verdict, False, believed)
        if believed:
            near += evidence_of(candidate, verdict, believed)
        elif (before := ended(candidate, verdict, subject, predicate)) is not None:
            near.append(before)
    reason = _abstention_reason([v for _, v, _ in judged], answering=len(answering), weak=weak)
    return Answer(
        evidence=[],
        near_misses=near[:room],
        candidates=list(traced.values()),
        abstained=True,
        details={"facts": {"named": [m.alias for m in named], "abstained_because": reason}},
    )
