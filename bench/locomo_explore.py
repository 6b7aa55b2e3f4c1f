"""LoCoMo evidence retrieval: a research harness for ranking signals (issue 6).

    .venv/bin/python bench/locomo_explore.py [--data ../shared/data/locomo/locomo10.json]
        [--only NAME[,NAME…]] [--list]

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
from datetime import datetime
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
    parser.add_argument("--only", default="")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "piper.settings.local")
    import django

    django.setup()

    convs, questions, stats = load(args.data)
    print(f"{len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns; {stats}")
    ctx = Context(convs, questions)
    recipes = build_recipes(ctx)
    if args.list:
        print("\n".join(recipes))
        return
    chosen = [r for r in recipes if not args.only or r in args.only.split(",")]
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


# --------------------------------------------------------------------------- recipes


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

    def turn_emb(self, style: str) -> list[np.ndarray]:
        def build():
            texts = self.turn_texts(style)
            flat = embed([t for conv in texts for t in conv])
            out, i = [], 0
            for conv in texts:
                out.append(flat[i : i + len(conv)])
                i += len(conv)
            return out

        return self.memo(("emb", style), build)

    def question_emb(self, variant: str = "raw") -> np.ndarray:
        return self.memo(
            ("qemb", variant),
            lambda: embed([self.question_text(q, variant) for q in self.questions]),
        )

    def question_text(self, q: Question, variant: str) -> str:
        if variant == "raw":
            return q.question
        raise ValueError(variant)

    def bm25(self, style: str, tokens: str) -> list[BM25]:
        def build():
            out = []
            for conv in self.turn_texts(style):
                docs = [word_tokens(t) for t in conv] if tokens == "word" else pg_lexemes(conv)
                out.append(BM25(docs))
            return out

        return self.memo(("bm25", style, tokens), build)

    def q_tokens(self, tokens: str) -> list[Counter]:
        def build():
            texts = [q.question for q in self.questions]
            return [word_tokens(t) for t in texts] if tokens == "word" else pg_lexemes(texts)

        return self.memo(("qtok", tokens), build)


def build_recipes(ctx: Context) -> dict[str, Callable]:
    R: dict[str, Callable] = {}

    def bm25_scores(style, tokens):
        idx, qt = ctx.bm25(style, tokens), ctx.q_tokens(tokens)
        return lambda conv, qi, q: idx[q.conv].scores(qt[qi])

    def dense_scores(style, qvariant="raw"):
        def f(conv, qi, q):
            return ctx.turn_emb(style)[q.conv] @ ctx.question_emb(qvariant)[qi]

        return f

    R["ref: bm25 word tokens"] = bm25_scores("ref", "word")
    R["ref: dense MiniLM"] = dense_scores("ref")
    R["ref: rrf(bm25, dense) k=60"] = lambda c, qi, q: rrf(
        [bm25_scores("ref", "word")(c, qi, q), dense_scores("ref")(c, qi, q)]
    )
    return R


if __name__ == "__main__":
    main()
