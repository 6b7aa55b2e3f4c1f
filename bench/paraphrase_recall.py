"""Recall in other words (issue #19): suite G3's draw asked through recall, in process.

    .venv/bin/python bench/paraphrase_recall.py [--seeds 1,2,3] [--items 160]

Runs in a database of its own on the embedded server (PIPER_DB_NAME, default
piper_bench_paraphrase). Per seed: one throwaway agent; battery G3's draw
(battery/suites/metamemory/paraphrase.py) of `items` items, half with the
seen vocabulary and half with the held-out one (in blocks of four, so each
split gets every item kind); every fact asserted through facts_assert (the
first value of the family asked superseded by the second), the fact texts
rendered and embedded; then every question asked with route auto.

Reports per item kind and split: answered correctly (the current value
first) for `answer` items, abstained for `never_stated` and `lookalike`,
the stale-as-current count (a superseded value presented as current), and
each failure's route and why. Gates of issue #19: held-out answer rate ≥ 0.95,
false answers ≤ 0.02, stale-as-current 0.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("PIPER_DB_NAME", "piper_bench_paraphrase")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import git_commit, machine, migrate, setup_django  # noqa: E402

KINDS = ("answer", "never_stated", "lookalike")


def world(items, seed: int):
    from facts import services as facts
    from facts.fact_texts import fact_texts_embed, fact_texts_refresh
    from facts.models import FactText
    from piper.tenancy.services import agent_create

    agent = agent_create(name=f"paraphrase-bench-{seed}-{os.getpid()}", is_throwaway=True)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    claims = [
        facts.ClaimInput(
            subject=fact["subject"],
            predicate=fact["predicate"],
            value=fact["value"],
            valid_from=start if fact["ref"].endswith(":old") else start + timedelta(days=30),
        )
        for item in items
        for fact in item["facts"]
    ]
    for begin in range(0, len(claims), 500):
        facts.facts_assert(agent=agent, claims=claims[begin : begin + 500])
    fact_texts_refresh(agent_id=agent.pk, embed="never")
    fact_texts_embed(ids=list(FactText.objects.filter(agent=agent).values_list("id", flat=True)))
    return agent


def ask(agent, item, tally, failures) -> None:
    from recall.services import recall

    question = item["question"]
    result = recall(agent=agent, query=question["text"], limit=5)
    facts = [e for e in result.evidence if e.kind == "fact"]
    key = (item["kind"], item["split"])
    tally[key, "n"] += 1
    if item["kind"] == "answer":
        expects = question["expects"]
        ok = bool(facts) and facts[0].obj.object_value == expects["value"]
        stale = any(
            e.obj.object_value == expects["stale"] and e.memory_status["currentness"] == "current"
            for e in facts
        )
        tally[key, "stale"] += stale
    else:
        ok = not facts
    tally[key, "ok"] += ok
    if not ok:
        why = result.details.get("facts", {}).get("abstained_because") or (
            facts[0].signals.get("about") if facts else None
        )
        failures.append((item["kind"], item["split"], question["text"], result.decision.route, why))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--items", type=int, default=160)
    parser.add_argument("--failures", action="store_true", help="list every failure")
    args = parser.parse_args()
    setup_django()
    migrate()
    from battery.suites.metamemory import paraphrase

    tally: collections.Counter = collections.Counter()
    failures: list = []
    for seed in (int(s) for s in args.seeds.split(",")):
        draw = paraphrase.ParaphraseDraw(random.Random(seed))
        items = [
            paraphrase.draw_item(draw, n, paraphrase.SEEN if (n // 4) % 2 else paraphrase.HELD_OUT)
            for n in range(1, args.items + 1)
        ]
        agent = world(items, seed)
        for item in items:
            ask(agent, item, tally, failures)
    print(f"# {machine()} · commit {git_commit()} · seeds {args.seeds} · {args.items} items each")
    print("| item kind | split | right | rate | stale as current |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        for split in (paraphrase.SEEN, paraphrase.HELD_OUT):
            n, ok = tally[(kind, split), "n"], tally[(kind, split), "ok"]
            stale = tally[(kind, split), "stale"] if kind == "answer" else "—"
            print(f"| {kind} | {split} | {ok}/{n} | {ok / n if n else 0:.3f} | {stale} |")
    negatives = [(k, s) for k in KINDS[1:] for s in (paraphrase.SEEN, paraphrase.HELD_OUT)]
    wrong = sum(tally[key, "n"] - tally[key, "ok"] for key in negatives)
    total = sum(tally[key, "n"] for key in negatives)
    print(f"\nfalse answers on negatives: {wrong}/{total} = {wrong / max(total, 1):.3f}")
    routes = collections.Counter(route for *_, route, _ in failures)
    print(f"failures by route: {dict(routes)}")
    if args.failures:
        for failure in failures:
            print(failure)


if __name__ == "__main__":
    main()
