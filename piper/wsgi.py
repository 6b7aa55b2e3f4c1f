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
