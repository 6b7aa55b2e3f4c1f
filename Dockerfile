# Piper Memory: one image for web (gunicorn), the Celery worker, celery-beat and
# the one-shot migrate step; docker-compose.yml picks the command.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    DJANGO_SETTINGS_MODULE=piper.settings.production \
    PYTHONPATH=/app \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv \
    && useradd --system --create-home --home-dir /home/piper piper

# torch first, the CPU build: left to sentence-transformers, pip would fetch a
# CUDA build of several GB.
RUN pip install --index-url https://download.pytorch.org/whl/cpu 'torch==2.13.0'

WORKDIR /app
# Dependencies before the code, so a code change does not reinstall them.
# The code runs from /app (PYTHONPATH), not installed as a package.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY . .

# Static files are served by whitenoise from var/static. Settings need
# *some* URLs to import; nothing connects to them here.
RUN DJANGO_SECRET_KEY=collectstatic-only DJANGO_ALLOWED_HOSTS=build \
    DATABASE_URL=postgres://build@build/build REDIS_URL=redis://build:6379/0 \
    python manage.py collectstatic --noinput -v 0 \
    && chown -R piper:piper /app/var

USER piper
EXPOSE 8000
CMD ["gunicorn", "piper.wsgi", "--bind", "0.0.0.0:8000", "--workers", "2", "--threads", "4"]
