import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "piper.settings.local")
# Every statement of a web request is bounded (piper/settings/base.py): 30 s, or
# PIPER_WEB_STATEMENT_TIMEOUT_MS (0 turns it off). Only here: workers and commands
# share the environment but not the bound.
os.environ.setdefault(
    "PIPER_DB_STATEMENT_TIMEOUT_MS", os.environ.get("PIPER_WEB_STATEMENT_TIMEOUT_MS", "30000")
)
application = get_wsgi_application()


def warm_and_freeze() -> None:
    """Load what requests need (the embedding model, the tokenizer, WordNet)
    before the first one, then move every object alive now out of the cyclic
    garbage collector's reach. A full collection otherwise walks all of them:
    ~110 ms on the context bench world, once every ~130 context calls, where
    frozen it takes ~9 ms (docs/benchmarks.md). gunicorn calls this in each
    worker once the app is loaded (gunicorn.conf.py)."""
    import gc

    from piper import embeddings, tokens
    from recall import lexicon

    embeddings.get_embedder().embed_one("warm")
    tokens.count_tokens("warm")
    lexicon.wordnet()
    gc.collect()
    gc.freeze()
