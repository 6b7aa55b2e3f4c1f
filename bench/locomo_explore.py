"""LoCoMo evidence retrieval: a research harness for ranking signals (issue 6).

    .venv/bin/python bench/locomo_explore.py [--data ../shared/data/locomo/locomo10.json]
        [--only REGEX] [--list]

Loads locomo10.json, normalises its evidence ids (battery.locomo does the same
for the product), and measures evidence recall@5/@10 — the fraction of a
question's evidence turns found in the top k, searching only the question's
own conversation — per category and overall over the 1,982 questions with
usable evidence, for a series of retrieval recipes. It prints one table row
per recipe; the table in docs/benchmarks.md ("LoCoMo evidence retrieval") was
made with it.

Everything a recipe uses is something the product can do at query time with
PostgreSQL and the local all-MiniLM-L6-v2 model: the dense model (through
piper.embeddings), PostgreSQL's 'english' text search configuration (stemming
and stop words: the harness asks the database to tokenise, so the lexemes are
exactly the product's), the turn's speaker, session and date, and its
neighbouring turns. No LLM, no other model, nothing from the answers.

Turn and question embeddings are cached under var/locomo_cache/ (gitignored),
keyed by a hash of the texts, so a second run costs seconds. The database is
only read (to_tsvector on literals), never written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHE = ROOT / "var" / "locomo_cache"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


# --------------------------------------------------------------------------- data


@dataclass
class Turn:
    index: int  # position in its conversation (0-based, conversation order)
    dia_id: str
    session: int
    turn: int  # position inside its session (0-based)
    speaker: str
    text: str
    caption: str
    date: datetime
    date_text: str


@dataclass
class Question:
    conv: int
    question: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    by_dia: dict[str, int] = field(default_factory=dict)
    sessions: dict[int, list[int]] = field(default_factory=dict)


def load(path: Path) -> tuple[list[Conversation], list[Question], dict]:
    """Conversations, usable questions, and counts of what normalisation did."""
    from battery.locomo import normalise_evidence, parse_session_date

    raw = json.loads(path.read_text())
    convs: list[Conversation] = []
    questions: list[Question] = []
    stats: Counter = Counter()
    for ci, record in enumerate(raw):
        c = record["conversation"]
        turns: list[Turn] = []
        nums = sorted(
            int(k.split("_")[1])
            for k in c
            if re.fullmatch(r"session_\d+", k) and isinstance(c[k], list)
        )
        for s in nums:
            date_text = c[f"session_{s}_date_time"]
            date = parse_session_date(date_text)
            for ti, t in enumerate(c[f"session_{s}"]):
                turns.append(
                    Turn(
                        index=len(turns),
                        dia_id=t["dia_id"],
                        session=s,
                        turn=ti,
                        speaker=t["speaker"],
                        text=t["text"],
                        caption=t.get("blip_caption", "") or "",
                        date=date,
                        date_text=date_text,
                    )
                )
        conv = Conversation(record["sample_id"], (c["speaker_a"], c["speaker_b"]), turns)
        conv.by_dia = {t.dia_id: t.index for t in turns}
        for t in turns:
            conv.sessions.setdefault(t.session, []).append(t.index)
        convs.append(conv)
        for qa in record["qa"]:
            stats["questions"] += 1
            ev, dropped = normalise_evidence(qa["evidence"], known=conv.by_dia.keys())
            stats["dropped_ids"] += len(dropped)
            if not ev:
                stats["no_usable_evidence"] += 1
                continue
            questions.append(Question(ci, qa["question"], int(qa["category"]), ev))
    stats["usable"] = len(questions)
    return convs, questions, dict(stats)


# --------------------------------------------------------------------------- caches


def _key(kind: str, texts: list[str]) -> str:
    h = hashlib.sha1(kind.encode())
    for t in texts:
        h.update(b"\x00" + t.encode())
    return h.hexdigest()[:20]


_EMBEDDER = None


def embed(texts: list[str]) -> np.ndarray:
    """Unit vectors from piper.embeddings (MiniLM), cached on disk by text list."""
    global _EMBEDDER
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"emb_{_key('minilm', texts)}.npy"
    if path.exists():
        return np.load(path)
    if _EMBEDDER is None:
        from piper.embeddings import get_embedder

        _EMBEDDER = get_embedder()
    started = time.perf_counter()
    out = np.asarray(_EMBEDDER.embed(texts), dtype=np.float32)
    print(f"  (embedded {len(texts)} texts in {time.perf_counter() - started:.1f}s)", flush=True)
    np.save(path, out)
    return out


def pg_lexemes(texts: list[str]) -> list[Counter]:
    """to_tsvector('english', text) for each text, as lexeme -> count, cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"lex_{_key('pg-english', texts)}.json"
    if path.exists():
        return [Counter(d) for d in json.loads(path.read_text())]
    from django.db import connection

    out: list[Counter] = [Counter() for _ in texts]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT x.i, (u).lexeme, coalesce(array_length((u).positions, 1), 1) "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS x(t, i), "
            "LATERAL (SELECT unnest(to_tsvector('english', x.t)) AS u) s",
            [texts],
        )
        for i, lex, n in cur.fetchall():
            out[i - 1][lex] = n
    path.write_text(json.dumps([dict(c) for c in out]))
    return out


def word_tokens(text: str) -> Counter:
    return Counter(re.findall(r"\w+", text.lower()))


# --------------------------------------------------------------------------- scorers


class BM25:
    """Okapi BM25 as rank-bm25's BM25Okapi computes it (k1 1.5, b 0.75, eps 0.25)."""

    def __init__(self, docs: list[Counter], k1: float = 1.5, b: float = 0.75, eps: float = 0.25):
        self.docs, self.k1, self.b = docs, k1, b
        self.lens = np.array([sum(d.values()) for d in docs], dtype=np.float64)
        self.avg = self.lens.mean() if len(docs) else 0.0
        df: Counter = Counter()
        for d in docs:
            df.update(d.keys())
        n = len(docs)
        idf = {w: math.log(n - f + 0.5) - math.log(f + 0.5) for w, f in df.items()}
        avg_idf = sum(idf.values()) / len(idf) if idf else 0.0
        self.idf = {w: (v if v >= 0 else eps * avg_idf) for w, v in idf.items()}
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, d in enumerate(docs):
            for w, c in d.items():
                self.postings[w].append((i, c))

    def scores(self, query: Counter | list[str]) -> np.ndarray:
        out = np.zeros(len(self.docs))
        terms = list(query.elements()) if isinstance(query, Counter) else list(query)
        for w in terms:
            if w not in self.postings:
                continue
            idf = self.idf[w]
            for i, c in self.postings[w]:
                out[i] += (
                    idf
                    * c
                    * (self.k1 + 1)
                    / (c + self.k1 * (1 - self.b + self.b * self.lens[i] / self.avg))
                )
        return out


def rrf(rankings: list[np.ndarray], weights: list[float] | None = None, k: int = 60) -> np.ndarray:
    """Reciprocal rank fusion of score arrays (higher is better)."""
    n = len(rankings[0])
    out = np.zeros(n)
    weights = weights or [1.0] * len(rankings)
    for scores, w in zip(rankings, weights, strict=True):
        order = np.argsort(-scores, kind="stable")
        ranks = np.empty(n)
        ranks[order] = np.arange(1, n + 1)
        out += w / (k + ranks)
    return out


# --------------------------------------------------------------------------- evaluation


def evaluate(
    convs: list[Conversation],
    questions: list[Question],
    score_fn: Callable[[Conversation, int, Question], np.ndarray],
    ks: tuple[int, ...] = (5, 10),
) -> dict:
    per_cat: dict[int, list[list[float]]] = defaultdict(lambda: [[] for _ in ks])
    for qi, q in enumerate(questions):
        conv = convs[q.conv]
        scores = score_fn(conv, qi, q)
        order = np.argsort(-scores, kind="stable")
        wanted = {conv.by_dia[e] for e in q.evidence}
        for j, k in enumerate(ks):
            top = set(order[:k].tolist())
            per_cat[q.category][j].append(len(wanted & top) / len(wanted))
    out = {
        "overall": [
            float(np.mean([v for c in per_cat.values() for v in c[j]])) for j in range(len(ks))
        ]
    }
    for cat in sorted(per_cat):
        out[cat] = [float(np.mean(per_cat[cat][j])) for j in range(len(ks))]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--only", default="", help="a regular expression on recipe names")
    parser.add_argument("--list", action="store_true")
    parser.add_argument(
        "--product",
        action="store_true",
        help="ask the questions through the product (battery.locomo.question_ask) instead",
    )
    parser.add_argument("--through", choices=("search", "recall"), default="search")
    parser.add_argument(
        "--variant",
        default="",
        help="with --product, prototypes patched over episodes.retrieval: 'ctx:T:V:C' "
        "(session neighbours brought in, text/vector/coverage spread by T/V/C), "
        "'session:B', 'set:NAME=VALUE', comma-separated",
    )
    parser.add_argument("--conversations", type=int, default=None)
    args = parser.parse_args()

    # A database of its own on the embedded server, as the other benchmarks do.
    os.environ.setdefault("PIPER_DB_NAME", "piper_locomo")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "piper.settings.local")
    import django

    django.setup()
    if args.product:
        return product_main(args)

    convs, questions, stats = load(args.data)
    print(f"{len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns; {stats}")
    ctx = Context(convs, questions)
    recipes = build_recipes(ctx)
    if args.list:
        print("\n".join(recipes))
        return
    chosen = [r for r in recipes if not args.only or re.search(args.only, r)]
    header = (
        f"| {'recipe':<44} | R@5 | R@10 | "
        + " | ".join(f"{CATEGORIES[c][:5]} @10" for c in CATEGORIES)
        + " |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name in chosen:
        res = evaluate(convs, questions, recipes[name])
        cats = " | ".join(f"{res[c][1]:.3f}" for c in CATEGORIES)
        print(
            f"| {name:<44} | {res['overall'][0]:.3f} | {res['overall'][1]:.3f} | {cats} |",
            flush=True,
        )


# --------------------------------------------------------------------------- product


def product_agents(data: Path, conversations: int | None) -> list[tuple]:
    """(conversation, agent, episode id -> dia id) for each conversation, ingested
    once into persistent agents "locomo-bench-<sample>" and reused after.

    Rows are written by battery.locomo.conversation_ingest (the command's own
    ingest); their vectors come from the disk cache (computed from each row's
    embedding_text(), so they are exactly what episodes_embed would store)."""
    import subprocess

    from django.db import connection

    from battery.locomo import conversation_ingest, conversations_load
    from episodes.models import Episode
    from episodes.services import episode_embeddings_store
    from piper.embeddings import get_embedder
    from piper.tenancy.models import Agent
    from piper.tenancy.services import agent_create

    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True, env=os.environ
    )
    out = []
    fresh = False
    for conv in conversations_load(data)[:conversations]:
        name = f"locomo-bench-{conv.sample_id}"
        agent = Agent.objects.filter(name=name).first()
        if agent is None or Episode.objects.filter(agent=agent).count() != len(conv.turns):
            if agent is not None:
                raise SystemExit(f"{name} holds a partial ingest; drop database piper_locomo")
            agent = agent_create(name=name, description="LoCoMo research harness")
            conversation_ingest(agent=agent, conversation=conv, embed=False)
            fresh = True
        rows = list(
            Episode.objects.filter(agent=agent)
            .select_related("raw_event")
            .order_by("occurred_at", "id")
        )
        missing = [r for r in rows if r.embedding is None]
        if missing:
            vectors = embed([r.embedding_text() for r in missing])
            episode_embeddings_store(
                vectors={r.pk: v.tolist() for r, v in zip(missing, vectors, strict=True)},
                model=get_embedder().name,
            )
        dia_of = {r.pk: r.raw_event.source_ref.split(":", 2)[2] for r in rows}
        out.append((conv, agent, dia_of))
    if fresh:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE episodes_episode")
    return out


def patch_variants(variant: str) -> None:
    """Prototype signals over the product's episode search (research only; what
    wins moves into episodes.retrieval)."""
    from django.db import connection

    from bench._harness import retrieval_modules
    from episodes.models import Episode
    from episodes.retrieval import fusion, search
    from episodes.retrieval.session_context import session_neighbours, spread, symmetric

    for part in filter(None, variant.split(",")):
        name, *nums = part.split(":")
        if name == "ctx":
            a_t, a_v, a_c = (float(x) for x in (nums + ["0.5", "0.5", "0.5"])[:3])
            original_fetch = search._fetch

            def with_context(
                spec,
                agent,
                query,
                vector,
                entities,
                k,
                model_name,
                _orig=original_fetch,
                _w=(a_t, a_v, a_c),
            ):
                w_t, w_v, w_c = _w
                fetched = _orig(spec, agent, query, vector, entities, k, model_name)
                if spec.kind != "episode" or not fetched.cands:
                    return fetched
                known = {c.obj.pk: c for c in fetched.cands}
                with connection.cursor() as cursor:
                    nbrs, dists = session_neighbours(
                        table=spec.table,
                        where_sql=spec.where_sql,
                        params=spec.params,
                        ids=list(known),
                        query_vector=spec.params.get("qv"),
                        cursor=cursor,
                    )
                new = [i for i in dists if i not in known]
                for obj in Episode.objects.filter(id__in=new).defer("embedding", "search_vector"):
                    d = dists[obj.pk]
                    obj.embedded = d is not None
                    c = fusion._Candidate(
                        obj=obj,
                        text_rank=None,
                        similarity=None if d is None else 1.0 - d,
                        shared=None,
                        coverage=None,
                        embedded=d is not None,
                    )
                    known[obj.pk] = c
                    fetched.cands.append(c)
                rel = symmetric(nbrs)
                sims = {i: c.similarity for i, c in known.items()}
                floor = min((v for v in sims.values() if v is not None), default=0.0)
                text = spread({i: c.text_rank for i, c in known.items()}, rel, weight=w_t)
                cov = spread({i: c.coverage for i, c in known.items()}, rel, weight=w_c)
                sim = spread(sims, rel, weight=w_v, floor=floor)
                for i, c in known.items():
                    c.text_rank, c.similarity = text[i], sim[i]
                    c.coverage = None if cov[i] is None else min(cov[i], 1.0)
                return fetched

            search._fetch = with_context
        elif name == "session":
            beta = float(nums[0]) if nums else 0.2
            original_fuse = search._fuse

            def with_session(lists, _orig=original_fuse, _b=beta):
                _orig(lists)
                everyone = {id(c): c for ranked in lists.values() for c in ranked}.values()
                best: dict[str, float] = {}
                for c in everyone:
                    sid = c.obj.session_id
                    if sid:
                        best[sid] = max(best.get(sid, 0.0), c.score)
                for c in everyone:
                    if c.obj.session_id:
                        c.score += _b * best[c.obj.session_id]

            search._fuse = with_session
        elif name == "set":
            # set:NAME=VALUE — a constant in episodes.retrieval (dict keys: NAME.KEY)
            key, value = nums[0].split("=")
            if "." in key:
                d, k2 = key.split(".")
                getattr(retrieval_modules(d)[0], d)[k2] = float(value)
            else:
                for module in retrieval_modules(key):
                    setattr(module, key, type(getattr(module, key))(float(value)))
        else:
            raise SystemExit(f"unknown variant {part!r}")


def product_main(args) -> None:
    from battery.locomo import Answered, question_ask, summarise, summary_table

    started = time.perf_counter()
    patch_variants(args.variant)
    ingested = product_agents(args.data, args.conversations)
    answered = []
    for conv, agent, dia_of in ingested:
        now = max(t.session_date for t in conv.turns) + timedelta(days=1)
        for q in conv.questions:
            episodes, ms, would = question_ask(
                agent=agent, question=q.question, limit=10, now=now, through=args.through
            )
            answered.append(
                Answered(
                    q.category, [dia_of.get(e.pk, "?") for e in episodes], q.evidence, ms, would
                )
            )
    summary = summarise(
        answered,
        conversations=len(ingested),
        turns=sum(len(c.turns) for c, _, _ in ingested),
        skipped_questions=sum(c.skipped_questions for c, _, _ in ingested),
        dropped_ids=sum(len(c.dropped_ids) for c, _, _ in ingested),
    )
    print("\n".join(summary_table(summary)))
    print(f"({time.perf_counter() - started:.0f} s)")


# --------------------------------------------------------------------------- recipes

_POSSESSIVE = re.compile(r"['’]s\b")


def speakers_named(conv: Conversation, question: str) -> list[str]:
    """The conversation's speakers the question names (first names, whole words)."""
    out = []
    for name in conv.speakers:
        first = name.split()[0]
        if re.search(rf"\b{re.escape(first)}\b", question, re.IGNORECASE):
            out.append(name)
    return out


def strip_speakers(conv: Conversation, question: str) -> str:
    text = question
    for name in conv.speakers:
        first = name.split()[0]
        text = re.sub(rf"\b{re.escape(first)}(['’]s)?\b", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"\s+", " ", text).strip()
    return text or question


class Context:
    """Per-conversation indexes and embeddings the recipes share (built lazily)."""

    def __init__(self, convs: list[Conversation], questions: list[Question]):
        self.convs, self.questions = convs, questions
        self._memo: dict = {}

    def memo(self, key, build):
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    # turn texts
    def turn_texts(self, style: str) -> list[list[str]]:
        def render(t: Turn) -> str:
            cap = f" [shares {t.caption}]" if t.caption else ""
            if style == "ref":
                return f"[{t.date_text}] {t.speaker}: {t.text}"
            if style == "text":
                return t.text
            if style == "text+cap":
                return f"{t.text}{cap}"
            if style == "plain":
                return f"{t.speaker}: {t.text}"
            if style == "plain+cap":
                return f"{t.speaker}: {t.text}{cap}"
            if style == "ref+cap":
                return f"[{t.date_text}] {t.speaker}: {t.text}{cap}"
            raise ValueError(style)

        return self.memo(
            ("texts", style), lambda: [[render(t) for t in c.turns] for c in self.convs]
        )

    def window_texts(self, style: str, before: int, after: int) -> list[list[str]]:
        """Each turn's text with up to `before`/`after` neighbours of its session."""

        def build():
            base = self.turn_texts(style)
            out = []
            for conv, texts in zip(self.convs, base, strict=True):
                rows = []
                for t in conv.turns:
                    sess = conv.sessions[t.session]
                    lo, hi = max(0, t.turn - before), min(len(sess), t.turn + after + 1)
                    rows.append(" ".join(texts[j] for j in sess[lo:hi]))
                out.append(rows)
            return out

        return self.memo(("win", style, before, after), build)

    def _embed_nested(self, nested: list[list[str]]) -> list[np.ndarray]:
        flat = embed([t for conv in nested for t in conv])
        out, i = [], 0
        for conv in nested:
            out.append(flat[i : i + len(conv)])
            i += len(conv)
        return out

    def turn_emb(self, style: str) -> list[np.ndarray]:
        return self.memo(("emb", style), lambda: self._embed_nested(self.turn_texts(style)))

    def window_emb(self, style: str, before: int, after: int) -> list[np.ndarray]:
        return self.memo(
            ("wemb", style, before, after),
            lambda: self._embed_nested(self.window_texts(style, before, after)),
        )

    def smoothed_emb(self, style: str, w: float, radius: int = 1) -> list[np.ndarray]:
        """Each turn's vector plus w x its session neighbours' (within radius), renormalised."""

        def build():
            out = []
            for conv, e in zip(self.convs, self.turn_emb(style), strict=True):
                s = e.copy()
                for t in conv.turns:
                    sess = conv.sessions[t.session]
                    for d in range(1, radius + 1):
                        for j in (t.turn - d, t.turn + d):
                            if 0 <= j < len(sess):
                                s[t.index] += (w / d) * e[sess[j]]
                s /= np.linalg.norm(s, axis=1, keepdims=True)
                out.append(s)
            return out

        return self.memo(("semb", style, w, radius), build)

    def session_emb(self, style: str) -> list[dict[int, np.ndarray]]:
        """Mean of a session's turn vectors, renormalised."""

        def build():
            out = []
            for conv, e in zip(self.convs, self.turn_emb(style), strict=True):
                d = {}
                for s, idx in conv.sessions.items():
                    v = e[idx].mean(axis=0)
                    d[s] = v / np.linalg.norm(v)
                out.append(d)
            return out

        return self.memo(("sessemb", style), build)

    def question_emb(self, variant: str = "raw") -> np.ndarray:
        return self.memo(
            ("qemb", variant),
            lambda: embed([self.question_text(q, variant) for q in self.questions]),
        )

    def question_text(self, q: Question, variant: str) -> str:
        if variant == "raw":
            return q.question
        if variant == "nonames":
            return strip_speakers(self.convs[q.conv], q.question)
        raise ValueError(variant)

    def bm25(self, style: str, tokens: str, k1=1.5, b=0.75) -> list[BM25]:
        def build():
            out = []
            for conv in self.turn_texts(style):
                docs = [word_tokens(t) for t in conv] if tokens == "word" else pg_lexemes(conv)
                out.append(BM25(docs, k1=k1, b=b))
            return out

        return self.memo(("bm25", style, tokens, k1, b), build)

    def bm25_window(self, style: str, before: int, after: int) -> list[BM25]:
        return self.memo(
            ("bm25w", style, before, after),
            lambda: [BM25(pg_lexemes(c)) for c in self.window_texts(style, before, after)],
        )

    def q_tokens(self, tokens: str, variant: str = "raw") -> list[Counter]:
        def build():
            texts = [self.question_text(q, variant) for q in self.questions]
            return [word_tokens(t) for t in texts] if tokens == "word" else pg_lexemes(texts)

        return self.memo(("qtok", tokens, variant), build)

    def speaker_mask(self, conv_i: int, names: list[str]) -> np.ndarray:
        conv = self.convs[conv_i]
        return np.array([t.speaker in names for t in conv.turns], dtype=np.float64)


def propagate(conv: Conversation, scores: np.ndarray, a: float, radius: int = 1) -> np.ndarray:
    """A turn gains a x the best score of its session neighbours (within radius)."""
    out = scores.copy()
    for idx in conv.sessions.values():
        s = scores[idx]
        best = np.full(len(idx), -np.inf)
        for d in range(1, radius + 1):
            best[d:] = np.maximum(best[d:], s[:-d] / d if d > 1 else s[:-d])
            best[:-d] = np.maximum(best[:-d], s[d:] / d if d > 1 else s[d:])
        best[np.isinf(best)] = 0
        out[idx] = s + a * best
    return out


def session_boost(conv: Conversation, scores: np.ndarray, beta: float, how: str = "max"):
    """A turn gains beta x its session's aggregate score."""
    out = scores.copy()
    for idx in conv.sessions.values():
        s = scores[idx]
        agg = s.max() if how == "max" else np.sort(s)[-3:].mean()
        out[idx] = s + beta * agg
    return out


def minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def build_recipes(ctx: Context) -> dict[str, Callable]:
    R: dict[str, Callable] = {}

    def bm25(style="ref", tokens="word", qvariant="raw", k1=1.5, b=0.75):
        def f(conv, qi, q):
            return ctx.bm25(style, tokens, k1, b)[q.conv].scores(ctx.q_tokens(tokens, qvariant)[qi])

        return f

    def dense(style="ref", qvariant="raw", smooth=0.0, radius=1, window=None):
        def f(conv, qi, q):
            if window:
                e = ctx.window_emb(style, *window)
            elif smooth:
                e = ctx.smoothed_emb(style, smooth, radius)
            else:
                e = ctx.turn_emb(style)
            return e[q.conv] @ ctx.question_emb(qvariant)[qi]

        return f

    def fuse(*fns, weights=None, k=60):
        return lambda c, qi, q: rrf([fn(c, qi, q) for fn in fns], weights, k)

    def linear(*pairs):
        return lambda c, qi, q: sum(w * minmax(fn(c, qi, q)) for fn, w in pairs)

    def prop(fn, a, radius=1):
        return lambda c, qi, q: propagate(c, fn(c, qi, q), a, radius)

    def speaker(fn, boost, mode="add"):
        def f(c, qi, q):
            s = fn(c, qi, q)
            names = speakers_named(c, q.question)
            if not names or len(names) == len(c.speakers):
                return s
            m = ctx.speaker_mask(q.conv, names)
            if mode == "add":
                return s + boost * m * (s.max() - s.min())
            return s * (1 + boost * m)

        return f

    # ---- reference (README): reproduced exactly
    R["ref: bm25 word tokens"] = bm25()
    R["ref: dense MiniLM"] = dense()
    R["ref: rrf(bm25, dense) k=60"] = fuse(bm25(), dense())

    # ---- text processing
    R["bm25 pg-english lexemes"] = bm25(tokens="pg")
    R["bm25 pg, text+caption"] = bm25("ref+cap", "pg")
    R["bm25 pg, speaker: text+caption"] = bm25("plain+cap", "pg")
    R["bm25 pg, text+caption (no speaker, date)"] = bm25("text+cap", "pg")
    R["dense speaker: text+caption"] = dense("plain+cap")
    R["dense speaker: text+caption, names stripped"] = dense("plain+cap", "nonames")
    R["rrf(bm25 pg cap, dense cap)"] = fuse(bm25("ref+cap", "pg"), dense("plain+cap"))

    # ---- neighbours
    for w in (0.3, 0.5, 1.0):
        R[f"dense cap, neighbours smoothed w={w}"] = dense("plain+cap", smooth=w)
    for a in (0.3, 0.5):
        R[f"bm25 pg cap, propagate a={a}"] = prop(bm25("ref+cap", "pg"), a)

    # ---- round 2
    B = bm25("ref+cap", "pg")
    for k1, b in ((1.2, 0.75), (1.5, 0.5), (1.5, 0.3), (2.0, 0.5)):
        R[f"bm25 pg cap k1={k1} b={b}"] = bm25("ref+cap", "pg", k1=k1, b=b)
    R["bm25 pg text+cap b=0.3"] = bm25("text+cap", "pg", b=0.3)
    for a in (0.7, 1.0):
        R[f"bm25 pg cap, propagate a={a}"] = prop(B, a)
    R["bm25 pg cap, propagate a=0.5 r=2"] = prop(B, 0.5, 2)
    R["bm25 pg cap, names stripped"] = bm25("ref+cap", "pg", "nonames")
    Dn = dense("plain+cap", "nonames")
    for a in (0.3, 0.5, 0.7):
        R[f"dense nonames, propagate a={a}"] = prop(Dn, a)
    R["dense text+cap, nonames"] = dense("text+cap", "nonames")
    R["rrf(bm25 pg cap, dense nonames)"] = fuse(B, Dn)
    R["rrf(prop bm25 .5, prop dense .5)"] = fuse(prop(B, 0.5), prop(Dn, 0.5))
    R["prop .5 of rrf(bm25, dense nonames)"] = prop(fuse(B, Dn), 0.5)
    R["linear(bm25 .5, dense .5) prop .5"] = prop(linear((B, 0.5), (Dn, 0.5)), 0.5)
    R["speaker add .2 on prop bm25"] = speaker(prop(B, 0.5), 0.2)
    R["speaker mul .3 on prop bm25"] = speaker(prop(B, 0.5), 0.3, "mul")

    # ---- product simulation: what episodes.retrieval does with the product's rows
    P = ProductSim(ctx)
    R["product sim: as built (rrf text+vector+recency, k=30)"] = P.recipe()
    R["product sim: no recency"] = P.recipe(recency=0.0)
    R["product sim: per-conversation idf"] = P.recipe(idf="conv")
    R["product sim: names stripped (vector)"] = P.recipe(qvariant="nonames")
    R["product sim: names stripped, k=100"] = P.recipe(qvariant="nonames", k=100)
    R["product sim: names stripped, prop .5 (rrf)"] = P.recipe(qvariant="nonames", prop=0.5)
    R["product sim: names stripped, linear"] = P.recipe(qvariant="nonames", fusion="linear")
    R["product sim: names stripped, linear, prop .5"] = P.recipe(
        qvariant="nonames", fusion="linear", prop=0.5
    )
    nn = {"qvariant": "nonames"}
    R["psim2: nonames rrf prop .5 expand 1"] = P.recipe(**nn, prop=0.5, expand=1)
    R["psim2: nonames rrf prop 1.0 expand 1"] = P.recipe(**nn, prop=1.0, expand=1)
    R["psim2: nonames rrf prop .5 expand 1 no recency"] = P.recipe(
        **nn, prop=0.5, expand=1, recency=0
    )
    R["psim2: nonames rrf k=10 prop .5 expand 1"] = P.recipe(**nn, prop=0.5, expand=1, rrf_k=10)
    for a in (0.3, 0.5, 0.7):
        R[f"psim2: nonames linear prop {a} expand 1"] = P.recipe(
            **nn, fusion="linear", prop=a, expand=1
        )
    for wt in (0.4, 0.6):
        R[f"psim2: nonames linear wt {wt} prop .5 expand 1"] = P.recipe(
            **nn, fusion="linear", prop=0.5, expand=1, wt=wt
        )
    for a in (0.1, 0.2, 0.3):
        R[f"psim3: nonames rrf60 prop {a} expand 1"] = P.recipe(**nn, prop=a, expand=1)
    for a in (0.3, 0.5):
        R[f"psim3: nonames rrf k=20 prop {a} expand 1"] = P.recipe(**nn, prop=a, expand=1, rrf_k=20)
    for w in (0.5, 1.0, 1.5):
        R[f"psim3: nonames rrf60 + context list w={w} expand 1"] = P.recipe(
            **nn, context=w, expand=1
        )
    for a in (0.3, 0.5, 0.7):
        R[f"psim4: nonames rrf60 signal prop {a} expand 1"] = P.recipe(**nn, sigprop=a, expand=1)
    R["psim4: nonames rrf60 signal prop .5 (text), .3 (vector) expand 1"] = P.recipe(
        **nn, sigprop=0.5, sigprop_vec=0.3, expand=1
    )
    R["psim4: nonames rrf60 signal prop .5 expand 1 no recency"] = P.recipe(
        **nn, sigprop=0.5, expand=1, recency=0
    )
    base4 = P.recipe(**nn, sigprop=0.5, expand=1)
    for beta in (0.1, 0.3):
        R[f"psim5: signal prop .5 + session max boost {beta}"] = lambda c, qi, q, _b=beta: (
            session_boost(c, base4(c, qi, q), _b)
        )
    R["psim5: signal prop .5 expand 2"] = P.recipe(**nn, sigprop=0.5, expand=2)
    R["psim2: nonames linear raw cosine prop .5 expand 1"] = P.recipe(
        **nn, fusion="linear", prop=0.5, expand=1, vec_norm="raw"
    )
    R["psim2: nonames linear prop .5 expand 1 conv idf"] = P.recipe(
        **nn, fusion="linear", prop=0.5, expand=1, idf="conv"
    )
    return R


def ts_rank_one(weights_in_order: list[float], length: int) -> float:
    """PostgreSQL ts_rank(vector, 'lexeme', 1) for one lexeme (calc_rank_or, then
    normalisation 1: divided by log2(1 + document length))."""
    if not weights_in_order:
        return 0.0
    resj, wjm, jm = 0.0, -1.0, 0
    for j, w in enumerate(weights_in_order):
        resj += w / ((j + 1) * (j + 1))
        if w > wjm:
            wjm, jm = w, j
    res = (wjm + resj - wjm / ((jm + 1) * (jm + 1))) / 1.64493406685
    return res / (math.log(length + 1) / math.log(2.0))


class ProductSim:
    """episodes.retrieval.episode_search on the rows battery.locomo writes, in numpy.

    A turn is an episode with summary = its text (weight A), observation = its
    photo's caption (B), actor = its speaker (C); embedding_text() is
    "speaker: text\n[shares …]" (the 'plain+cap' vectors). Text rank =
    Σ idf(lexeme) x ts_rank(vector, lexeme, 1) over the query's lexemes, with
    idf = log(1 + (1-f)/f) from the share f of rows holding the lexeme (the
    planner's statistics: the 1,000 commonest lexemes of the whole table,
    min/2 for the rest); candidates: rows holding a lexeme in at most 5% of rows
    (else the 2 rarest), best k. Vector: best k by cosine. Recency: all
    candidates newest first. Fused by RRF (k 60) with weights text 1, vector 1,
    recency 0.2.
    """

    WEIGHTS = {"A": 1.0, "B": 0.4, "C": 0.2, "D": 0.1}

    def __init__(self, ctx: Context):
        self.ctx = ctx
        convs = ctx.convs
        texts = [t.text for c in convs for t in c.turns]
        caps = [f"[shares {t.caption}]" if t.caption else "" for c in convs for t in c.turns]
        actors = [t.speaker for c in convs for t in c.turns]
        lt, lc, la = pg_lexemes(texts), pg_lexemes(caps), pg_lexemes(actors)
        self.docs: list[list[dict[str, list[float]]]] = []
        self.lengths: list[np.ndarray] = []
        i = 0
        for c in convs:
            docs, lens = [], []
            for _ in c.turns:
                d: dict[str, list[float]] = defaultdict(list)
                for part, w in ((lt[i], "A"), (lc[i], "B"), (la[i], "C")):
                    for lex, n in part.items():
                        d[lex].extend([self.WEIGHTS[w]] * n)
                docs.append(dict(d))
                lens.append(sum(len(v) for v in d.values()))
                i += 1
            self.docs.append(docs)
            self.lengths.append(np.array(lens))
        # global (table) and per-conversation document frequencies
        n_all = sum(len(c.turns) for c in convs)
        df: Counter = Counter()
        self.conv_freq = []
        for docs in self.docs:
            cdf: Counter = Counter()
            for d in docs:
                cdf.update(d.keys())
            df.update(cdf)
            self.conv_freq.append({w: f / len(docs) for w, f in cdf.items()})
        common = dict(df.most_common(1000))
        self.table_freq = {w: f / n_all for w, f in common.items()}
        self.table_other = min(self.table_freq.values()) / 2
        self.qlex = pg_lexemes([q.question for q in ctx.questions])
        self.qlex_order = self.qlex  # order does not matter below

    def freq(self, conv_i: int, lex: str, idf: str) -> float:
        if idf == "conv":
            f = self.conv_freq[conv_i].get(lex, 0.5 / len(self.docs[conv_i]))
        else:
            f = self.table_freq.get(lex, self.table_other)
        return min(max(f, 1e-6), 0.999)

    def text_scores(self, conv_i: int, qi: int, idf: str, k: int) -> dict[int, float]:
        lexemes = list(self.qlex[qi])
        freqs = {lx: self.freq(conv_i, lx, idf) for lx in lexemes}
        weights = {lx: math.log(1 + (1 - f) / f) for lx, f in freqs.items()}
        if len(lexemes) > 24:
            lexemes = sorted(lexemes, key=lambda lx: -weights[lx])[:24]
        pool = [lx for lx in lexemes if freqs[lx] <= 0.05] or sorted(
            lexemes, key=lambda lx: freqs[lx]
        )[:2]
        pool = set(pool)
        out = {}
        docs, lens = self.docs[conv_i], self.lengths[conv_i]
        for i, d in enumerate(docs):
            if not pool & d.keys():
                continue
            out[i] = sum(weights[lx] * ts_rank_one(d.get(lx, []), lens[i]) for lx in lexemes)
        best = sorted(out, key=lambda i: -out[i])[:k]
        return {i: out[i] for i in best}

    def recipe(
        self,
        *,
        k: int = 30,
        recency: float = 0.2,
        idf: str = "table",
        qvariant: str = "raw",
        prop: float = 0.0,
        fusion: str = "rrf",
        expand: int = 0,
        wt: float = 0.5,
        rrf_k: int = 60,
        vec_norm: str = "minmax",
        context: float = 0.0,
        sigprop: float = 0.0,
        sigprop_vec: float | None = None,
    ):
        """`expand`: the session neighbours (within this many turns) of every
        candidate join the candidates with their own signals; `prop`: a turn
        gains prop x its best neighbour's fused score; fusion "rrf" or "linear"
        (wt x text / best text + (1 - wt) x normalised cosine)."""
        ctx = self.ctx

        def f(conv: Conversation, qi: int, q: Question) -> np.ndarray:
            n = len(conv.turns)
            text_all = self.text_scores(q.conv, qi, idf, 10**9)
            text = dict(sorted(text_all.items(), key=lambda kv: -kv[1])[:k])
            sims = ctx.turn_emb("plain+cap")[q.conv] @ ctx.question_emb(qvariant)[qi]
            vec_top = np.argsort(-sims, kind="stable")[:k].tolist()
            cands = set(text) | set(vec_top)
            if expand:
                more = set()
                for i in cands:
                    t = conv.turns[i]
                    sess = conv.sessions[t.session]
                    for d in range(1, expand + 1):
                        for j in (t.turn - d, t.turn + d):
                            if 0 <= j < len(sess):
                                more.add(sess[j])
                cands |= more
            if sigprop:
                # each signal of a candidate gains sigprop x its best session
                # neighbour's value of it (cosine above the candidates' floor)
                a_vec = sigprop if sigprop_vec is None else sigprop_vec
                floor = min(sims[i] for i in cands)
                tvals = np.zeros(n)
                for i, v in text_all.items():
                    tvals[i] = v
                tp = propagate(conv, tvals, sigprop)
                sp = propagate(conv, np.maximum(sims - floor, 0.0), a_vec) + floor
                text_all = {i: tp[i] for i in cands if tp[i] > 0}
                sims = sp
                text = dict(sorted(text_all.items(), key=lambda kv: -kv[1])[:k])
                vec_top = sorted(cands, key=lambda i: -sims[i])[:k]
            score = np.full(n, -1e9)
            fused: dict[int, float] = defaultdict(float)
            if fusion == "rrf":
                # a neighbour brought in takes its place in the lists by its own signals
                tl = sorted((i for i in cands if i in text_all), key=lambda i: -text_all[i])
                vl = sorted(cands, key=lambda i: -sims[i])
                if not expand:
                    tl, vl = sorted(text, key=lambda i: -text[i]), vec_top
                for pos, i in enumerate(tl, start=1):
                    fused[i] += wt * 2 / (rrf_k + pos)
                for pos, i in enumerate(vl, start=1):
                    fused[i] += (1 - wt) * 2 / (rrf_k + pos)
                if recency:
                    for pos, i in enumerate(sorted(cands, key=lambda i: -i), start=1):
                        fused[i] += recency / (rrf_k + pos)
                if context:
                    # a "context" list: candidates by their best session neighbour's score
                    base = dict(fused)

                    def best_neighbour(i):
                        t = conv.turns[i]
                        sess = conv.sessions[t.session]
                        return max(
                            (
                                base.get(sess[j], 0.0)
                                for j in (t.turn - 1, t.turn + 1)
                                if 0 <= j < len(sess)
                            ),
                            default=0.0,
                        )

                    nb = {i: best_neighbour(i) for i in cands}
                    ranked = sorted((i for i in cands if nb[i] > 0), key=lambda i: -nb[i])
                    for pos, i in enumerate(ranked, start=1):
                        fused[i] += context / (rrf_k + pos)
            else:
                tmax = max(text.values(), default=0.0) or 1.0
                top = sims[vec_top]
                lo = top.min() if vec_norm == "minmax" else 0.0
                hi = top.max() if vec_norm in ("minmax", "max") else 1.0
                for i in cands:
                    fused[i] += wt * text_all.get(i, 0.0) / tmax
                    fused[i] += (1 - wt) * max(sims[i] - lo, 0.0) / ((hi - lo) or 1.0)
            for i, v in fused.items():
                score[i] = v
            if prop:
                base = np.where(score > -1e8, score, 0.0)
                score = np.where(score > -1e8, propagate(conv, base, prop), -1e9)
            return score

        return f


if __name__ == "__main__":
    main()
