import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "piper.settings.local")
# Every statement of a web request is bounded (piper/settings/base.py); 0 turns it off.
os.environ.setdefault("PIPER_DB_STATEMENT_TIMEOUT_MS", "30000")
application = get_wsgi_application()
