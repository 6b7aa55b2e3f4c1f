"""The pytest plugin's own pieces that need no worker."""

import os

import dj_database_url
import pytest

from testsupport.plugin import database_url


@pytest.mark.parametrize(
    "settings_dict",
    [
        {
            "NAME": "test_piper",
            "USER": "postgres",
            "PASSWORD": "",
            "HOST": "/work/x/var/postgres",
            "PORT": "",
        },
        {
            "NAME": "test_piper",
            "USER": "pi@per",
            "PASSWORD": "p:w/d@1",
            "HOST": "db.internal",
            "PORT": 6543,
        },
        {
            "NAME": "test_piper",
            "USER": "piper",
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": "5432",
            "OPTIONS": {"sslmode": "require"},
        },
    ],
    ids=["unix-socket", "tcp-quoted-credentials", "tcp-options"],
)
def test_database_url_parses_back_into_the_same_connection_settings(settings_dict):
    parsed = dj_database_url.parse(database_url(settings_dict))

    fields = ("NAME", "USER", "PASSWORD", "HOST")
    assert {f: parsed[f] for f in fields} == {f: settings_dict[f] for f in fields}
    assert str(parsed["PORT"]) == str(settings_dict["PORT"])
    assert parsed.get("OPTIONS", {}) == settings_dict.get("OPTIONS", {})


def test_database_url_for_the_embedded_socket():
    url = database_url(
        {"NAME": "test_piper", "USER": "postgres", "HOST": "/srv/piper/var/postgres"}
    )

    assert url == "postgresql://postgres@%2Fsrv%2Fpiper%2Fvar%2Fpostgres/test_piper"


@pytest.mark.skipif("DATABASE_URL" in os.environ, reason="set only on the embedded server")
def test_the_pytest_process_waits_longer_than_a_worker_before_looking_for_deadlocks(db):
    from django.db import connection

    from testsupport.plugin import PYTEST_DEADLOCK_TIMEOUT

    with connection.cursor() as cursor:
        cursor.execute("SHOW deadlock_timeout")
        assert cursor.fetchone()[0] == PYTEST_DEADLOCK_TIMEOUT == "5s"
