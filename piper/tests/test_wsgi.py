"""The web worker's start: its models loaded before the first request, and what
it holds then frozen out of the garbage collector's full collections."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_warm_and_freeze_loads_the_models_and_freezes_what_is_alive():
    probe = (
        "import gc, piper.wsgi as w; from recall import lexicon; from piper import tokens;"
        "assert gc.get_freeze_count() == 0; w.warm_and_freeze();"
        "print(gc.get_freeze_count() > 10000, lexicon._reader is not None,"
        " tokens._encoding.cache_info().currsize)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "piper.settings.test"}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True", "1"]


def test_gunicorn_calls_it_in_each_worker_once_the_app_is_loaded(monkeypatch):
    # A stand-in module: importing piper.wsgi here would set the web process's
    # statement bound in this process's environment, for every test after it.
    called = []
    wsgi = types.ModuleType("piper.wsgi")
    wsgi.warm_and_freeze = lambda: called.append(True)
    monkeypatch.setitem(sys.modules, "piper.wsgi", wsgi)
    config = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    config["post_worker_init"](worker=None)
    assert called == [True]
