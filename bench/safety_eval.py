"""Score piper.safety on its evaluation set, and on LoCoMo's dialogue turns if given.

    .venv/bin/python bench/safety_eval.py [--locomo /path/to/locomo10.json] [--misses]

Prints recall, false-positive rate and precision per split (see
piper/tests/safety_eval.py for what the splits are) and the screening speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piper import safety  # noqa: E402
from piper.tests import safety_eval  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--locomo", help="locomo10.json: its turns are scored as ordinary text")
    parser.add_argument("--misses", action="store_true", help="print what the detector got wrong")
    args = parser.parse_args()
    items = safety_eval.generate()
    print(f"{'split':<12} {'pos':>5} {'neg':>5} {'recall':>7} {'fp rate':>8} {'precision':>9}")
    for split in ("dev", "held_out_a", "held_out_b", "held_out_c"):
        s = safety_eval.score([i for i in items if i.split == split])
        print(
            f"{split:<12} {s.positives:>5} {s.negatives:>5} {s.recall:>7.3f} "
            f"{s.false_positive_rate:>8.3f} {s.precision:>9.3f}"
        )
        caught, total = Counter(), Counter()
        for i in items:
            if i.split == split and i.instruction_like:
                total[i.family] += 1
                caught[i.family] += safety.screen(i.text).instruction_like
        print("             " + ", ".join(f"{f} {caught[f]}/{total[f]}" for f in total))
    if args.locomo:
        turns = safety_eval.locomo_turns(args.locomo)
        started = time.perf_counter()
        flagged = [t for t in turns if safety.screen(t).instruction_like]
        elapsed = time.perf_counter() - started
        print(
            f"locomo turns {len(turns)}: {len(flagged)} flagged "
            f"({len(flagged) / len(turns):.4f}); {elapsed / len(turns) * 1e6:.0f} us a text"
        )
    if args.misses:
        for i in items:
            verdict = safety.screen(i.text)
            if verdict.instruction_like != i.instruction_like:
                kind = "MISS" if i.instruction_like else "FP"
                print(f"{kind:<4} {i.split:<11} {i.family:<10} {verdict.signals} | {i.text!r}")


if __name__ == "__main__":
    main()
