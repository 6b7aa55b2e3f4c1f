"""Production settings pass Django's deployment checks as docker-compose.yml sets
them, refuse to start without their secrets, and the admin stays behind its
login and CSRF (issue 18)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """manage.py with the production settings and the environment compose gives."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "PIPER_")) and k not in ("DATABASE_URL", "REDIS_URL")
    }
    compose = {
        "DJANGO_SETTINGS_MODULE": "piper.settings.production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "localhost,127.0.0.1",
        "DJANGO_CSRF_TRUSTED_ORIGINS": "",
        "DJANGO_SECURE_COOKIES": "true",
        # Never connected to by these commands.
        "DATABASE_URL": "postgres://piper:unused@127.0.0.1:1/piper",
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    merged = {**base, **compose, **env}
    merged = {k: v for k, v in merged.items() if v is not None and v != "<unset>"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=merged,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_compose_settings_pass_the_deployment_checks():
    done = _manage("check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_plain_http_for_a_local_admin_is_reported_by_the_deployment_checks():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", DJANGO_SECURE_COOKIES="false")
    assert done.returncode != 0
    assert "security.W008" in done.stderr  # no redirect to HTTPS
    assert "security.W004" in done.stderr  # no HSTS


def test_production_refuses_to_start_without_its_secret_key():
    done = _manage("check", DJANGO_SECRET_KEY="<unset>")
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY must be set in production" in done.stderr


@pytest.mark.django_db
def test_the_admin_asks_for_a_login_and_its_login_form_for_the_csrf_token():
    anonymous = Client(enforce_csrf_checks=True)
    index = anonymous.get("/admin/")
    assert index.status_code == 302
    assert index["Location"].startswith("/admin/login/")

    forged = anonymous.post("/admin/login/", {"username": "admin", "password": "x"})
    assert forged.status_code == 403  # no CSRF token: refused before the password is read
