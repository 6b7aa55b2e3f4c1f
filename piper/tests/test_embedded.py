"""The embedded PostgreSQL's own settings (piper.embedded.server_settings)."""

from __future__ import annotations

import os

import pytest

from piper.embedded import PG_DATA, SETTINGS_FILE, server_settings

GIB = 1 << 30


@pytest.mark.parametrize(
    ("memory", "buffers"),
    [
        (256 << 20, "128MB"),  # never below initdb's default
        (2 * GIB, "512MB"),
        (8 * GIB, "2048MB"),
        (24 * GIB, "4096MB"),  # a quarter, capped at 4GB
        (256 * GIB, "4096MB"),
    ],
)
def test_shared_buffers_is_a_quarter_of_memory_within_bounds(memory, buffers):
    assert server_settings(memory)["shared_buffers"] == buffers


@pytest.mark.skipif("DATABASE_URL" in os.environ, reason="only the embedded server is ours")
def test_the_running_embedded_server_has_the_settings(db):
    from django.db import connection

    assert f"include_if_exists = '{SETTINGS_FILE}'" in (PG_DATA / "postgresql.conf").read_text()
    wanted = server_settings()["shared_buffers"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_size_bytes(current_setting('shared_buffers')) = pg_size_bytes(%s)", [wanted]
        )
        assert cursor.fetchone()[0], "an older server: `python -m piper.embedded stop`, run again"
        cursor.execute("SHOW io_method")
        assert cursor.fetchone()[0] == server_settings()["io_method"] == "sync"
