"""Shared set-up for the HTTP benchmarks: a separate database, a real gunicorn, a bench agent.

The benchmarks run against the same stack production runs (gunicorn, the
embedded or configured PostgreSQL, Redis for throttling), in a database of
their own (PIPER_DB_NAME=piper_bench on the embedded server) so they never
touch a developer's data.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PIPER_DB_NAME", "piper_bench")
    env.setdefault("DJANGO_SETTINGS_MODULE", "piper.settings.local")
    env.setdefault("PIPER_CACHE_PREFIX", "piper-bench")
    env["PYTHONPATH"] = str(ROOT)
    return env


def setup_django() -> None:
    os.environ.update({k: v for k, v in bench_env().items() if k not in os.environ})
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)


def migrate() -> None:
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=bench_env(), check=True
    )


def bench_client_key(name: str) -> str:
    """A fresh agent with an unthrottled-for-benchmarks key."""
    from piper.tenancy.models import MAX_RATE_PER_MINUTE
    from piper.tenancy.services import agent_create, api_key_create

    agent = agent_create(name=f"{name}-{int(time.time() * 1000)}")
    _, raw = api_key_create(
        agent=agent, name="bench", scopes=["read", "write"], rate_per_minute=MAX_RATE_PER_MINUTE
    )
    return raw


@contextlib.contextmanager
def gunicorn(port: int, workers: int = 2, threads: int = 4):
    """The Procfile's web process: 2 workers x 4 threads (gthread, keep-alive)."""
    cmd = [
        PYTHON,
        "-m",
        "gunicorn",
        "piper.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=bench_env())
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code in (
                    200,
                    503,
                ):
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("gunicorn did not start")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50) * 1000, 2),
        "p90_ms": round(percentile(samples, 90) * 1000, 2),
        "p99_ms": round(percentile(samples, 99) * 1000, 2),
        "mean_ms": round(statistics.fmean(samples) * 1000, 2),
    }


def cpu_probe_ms() -> float:
    """The best of five runs of a fixed pure-Python loop, in ms. Machines of one
    kind differ by several times from one session to the next
    (docs/benchmarks.md), so the figures are only comparable next to it."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, CPU probe {cpu_probe_ms()} ms (1M-add loop)"
    )


def summary_ms_p95(samples: list[float]) -> dict[str, float]:
    """summary_ms with p95 as well (the facts targets are set at p50 and p95)."""
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50) * 1000, 2),
        "p90_ms": round(percentile(samples, 90) * 1000, 2),
        "p95_ms": round(percentile(samples, 95) * 1000, 2),
        "p99_ms": round(percentile(samples, 99) * 1000, 2),
        "mean_ms": round(statistics.fmean(samples) * 1000, 2),
    }


def load_average() -> str:
    """The 1/5/15-minute load average: the machine is shared, so every figure carries it."""
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def git_commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() + (" (tracked files modified)" if dirty.stdout.strip() else "")


def retrieval_modules(name: str) -> list:
    """The modules of episodes.retrieval that hold `name`: the one defining a
    constant and those importing it by name, so a value set on all of them
    reaches the code that reads it."""
    import importlib
    import pkgutil

    from episodes import retrieval

    modules = [retrieval] + [
        importlib.import_module(f"{retrieval.__name__}.{info.name}")
        for info in pkgutil.iter_modules(retrieval.__path__)
    ]
    return [module for module in modules if hasattr(module, name)]
