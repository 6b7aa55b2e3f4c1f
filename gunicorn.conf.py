"""gunicorn's settings file, read from the working directory by every gunicorn
started here (the Procfile, docker-compose, scripts/chaos). The command line
still sets the bind address, workers and threads."""


def post_worker_init(worker):
    # Each worker loads its models before its first request and freezes what
    # it holds then, so a full garbage collection does not walk it (piper/wsgi.py).
    from piper.wsgi import warm_and_freeze

    warm_and_freeze()
