# The README's two commands: `make run` and `make test`. Nothing to install
# beforehand beyond python3: PostgreSQL (with pgvector) and Redis start embedded
# when DATABASE_URL / REDIS_URL are unset, and `install` fetches bubblewrap (the
# skills sandbox) from apt when it is missing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Written after a successful install; a pyproject.toml change triggers a re-install.
STAMP := $(VENV)/.piper-installed
PORT ?= 8000
export PORT

.PHONY: install run test stop lint

install: $(STAMP)
	@# The skills sandbox runs skill code under bubblewrap (docs/sandbox.md).
	@command -v bwrap >/dev/null 2>&1 || { \
		echo "installing bubblewrap for the skills sandbox"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq bubblewrap; }

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: pip takes the 2.13.0 CPU wheel from this machine's disk;
# left to sentence-transformers it would download a CUDA build of several GB.
$(STAMP): pyproject.toml clients/python/pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet 'torch==2.13.0'
	$(PY) -m pip install --quiet -e '.[dev]'
	@# The Python SDK, its own package (clients/python); its tests run with the suite.
	$(PY) -m pip install --quiet -e clients/python
	@# The default embedder's int8 ONNX model, built once from the bundled
	@# weights into var/embeddings/ (docs/embeddings.md; ~20 s).
	$(PY) -m piper.onnx_export --prepare
	touch $@

run: install
	$(PY) scripts/run.py

# One pytest-xdist worker per core, each with its own test database, Celery
# queue and cache prefix (piper/settings/test.py); PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= auto
# The slowest tests are listed at the end of every run: the suite's budget is 15 min.
PYTEST_ARGS ?= --durations=25
test: install
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

stop:
	$(PY) -m piper.embedded stop

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
