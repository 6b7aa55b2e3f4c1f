"""WordNet from many threads at once, as a web worker's threads ask it: nltk's
reader shares its file objects, so unguarded lookups read each other's lines."""

import sys
import threading
import warnings

from recall import lexicon

THREADS = 16


def _clear(reader):
    """Forget every answer: ours, and the synsets nltk keeps once read."""
    for cached in (lexicon.forms, lexicon.synonyms, lexicon.kinds):
        cached.cache_clear()
    for by_offset in reader._synset_offset_cache.values():
        by_offset.clear()


def _look_up(words):
    return {w: (lexicon.synonyms(w), lexicon.kinds(w)) for w in words}


def test_lookups_from_many_threads_agree_with_one_thread():
    reader = lexicon.wordnet()
    words = sorted(set(list(reader.all_lemma_names("n"))[:12_000:8]))  # ~1,500 nouns
    _clear(reader)
    start = threading.Barrier(THREADS)
    together, failures = {}, []

    def run(share):
        start.wait()
        try:
            together.update(_look_up(share))
        except Exception as exc:  # a line read by another thread's seek
            failures.append(repr(exc))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads change hands mid-read, as under load
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nltk warns of the garbled lines it reads
            threads = [
                threading.Thread(target=run, args=(words[k::THREADS],)) for k in range(THREADS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert failures == []
    _clear(reader)
    assert together == _look_up(words)
