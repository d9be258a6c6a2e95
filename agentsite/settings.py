"""Settings for agentsite.

The defaults are the embedded deployment: SQLite, in-process execution and an in-memory
channel layer. Environment variables switch to PostgreSQL, Redis and separate workers.
"""

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGENTSITE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = env_bool("AGENTSITE_DEBUG", True)
SECRET_KEY = os.environ.get("AGENTSITE_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("AGENTSITE_SECRET_KEY must be set when AGENTSITE_DEBUG is off")
    SECRET_KEY = "django-insecure-embedded-default-only"  # noqa: S105
# Production (AGENTSITE_DEBUG=0) assumes HTTPS in front: secure cookies, HSTS, redirects.
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("AGENTSITE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("AGENTSITE_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("AGENTSITE_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
ALLOWED_HOSTS = env_list(
    "AGENTSITE_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"]
)
CSRF_TRUSTED_ORIGINS = env_list("AGENTSITE_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "channels",
    "django_tasks_db",
    "ninja",
    "plans",
]

MIDDLEWARE = [
    # First, so it sees every response: an API client gets JSON errors, never a debug page.
    "plans.api.middleware.ApiErrorsAsJson",
    # A page or API call never waits for an MCP server to start (plans/mcp/middleware.py).
    "plans.mcp.middleware.RequestsNeverWaitForServers",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page needs a signed-in user; the login page opts out (login_not_required).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# Every page: scripts only from this site and with the page's nonce; no inline style, no
# eval, no framing; websockets to this site only.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

ROOT_URLCONF = "agentsite.urls"
ASGI_APPLICATION = "agentsite.asgi.application"
WSGI_APPLICATION = "agentsite.wsgi.application"

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
                "plans.views.context_processors.pending_approvals",
                "django.template.context_processors.csp",
            ],
        },
    },
]

# Database: SQLite in WAL mode by default (readers never block the run's writer);
# AGENTSITE_DATABASE_URL=postgres://user:pass@host:port/name for scale-out.
# A run's lease: a worker silent this long is replaced (also bounds idle transactions below).
AGENTSITE_LEASE_SECONDS = float(os.environ.get("AGENTSITE_LEASE_SECONDS", "15"))

DATABASE_URL = os.environ.get("AGENTSITE_DATABASE_URL", "")
if DATABASE_URL:
    from urllib.parse import unquote, urlparse

    _url = urlparse(DATABASE_URL)
    if _url.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(f"AGENTSITE_DATABASE_URL: unsupported scheme {_url.scheme!r}")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _url.path.lstrip("/"),
            "USER": unquote(_url.username or ""),
            "PASSWORD": unquote(_url.password or ""),
            "HOST": _url.hostname or "",
            "PORT": str(_url.port or ""),
            "CONN_MAX_AGE": 0,
            "OPTIONS": {
                # A stalled process (paused, partitioned) must not hold row locks or the
                # sweeper's lock longer than a run lease: the server ends its session.
                "options": "-c idle_in_transaction_session_timeout="
                + str(int(AGENTSITE_LEASE_SECONDS * 1000)),
            },
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("AGENTSITE_SQLITE_PATH", str(VAR_DIR / "agentsite.sqlite3")),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;"
                ),
            },
            # A file, not shared-cache memory: concurrent writers must wait, not fail at once.
            "TEST": {
                "NAME": str(Path(tempfile.gettempdir()) / f"agentsite-test-{os.getpid()}.sqlite3")
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Channels: in-memory for one process, Redis when processes must share events.
REDIS_URL = os.environ.get("AGENTSITE_REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 times reads out after 5 s by default, as long as channels-redis
                # blocks waiting for a message: an idle websocket would fail (redis-py #4091).
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                "capacity": 1000,
                "expiry": 60,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Tasks: the database backend; the embedded server runs a worker thread in-process.
TASKS = {
    "default": {
        "BACKEND": os.environ.get("AGENTSITE_TASKS_BACKEND", "django_tasks_db.DatabaseBackend"),
        "QUEUES": ["default"],
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("AGENTSITE_STATIC_ROOT", VAR_DIR / "staticfiles"))

# Email: SMTP when AGENTSITE_SMTP_HOST is set (or when not in debug); else kept in memory.
SMTP_HOST = os.environ.get("AGENTSITE_SMTP_HOST", "")
EMAIL_BACKEND_PATH = os.environ.get(
    "AGENTSITE_EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if SMTP_HOST or not DEBUG
    else "django.core.mail.backends.locmem.EmailBackend",
)
MAILERS: dict[str, dict[str, Any]] = {"default": {"BACKEND": EMAIL_BACKEND_PATH}}
if EMAIL_BACKEND_PATH.endswith("smtp.EmailBackend"):
    MAILERS["default"]["OPTIONS"] = {
        "host": SMTP_HOST or "localhost",
        "port": int(os.environ.get("AGENTSITE_SMTP_PORT", "0")) or None,
        "username": os.environ.get("AGENTSITE_SMTP_USER", ""),
        "password": os.environ.get("AGENTSITE_SMTP_PASSWORD", ""),
        "use_tls": env_bool("AGENTSITE_SMTP_STARTTLS", False),
        "use_ssl": env_bool("AGENTSITE_SMTP_SSL", False),
        "timeout": float(os.environ.get("AGENTSITE_SMTP_TIMEOUT_S", "10")),
    }
DEFAULT_FROM_EMAIL = os.environ.get("AGENTSITE_FROM_EMAIL", "agent@agentsite.localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"plans": {"handlers": ["console"], "level": "INFO"}},
}

# --- The agent -------------------------------------------------------------------------

# Anthropic is used when a key is set; otherwise the deterministic offline model.
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
AGENTSITE_MODEL_BACKEND = os.environ.get(
    "AGENTSITE_MODEL_BACKEND", "anthropic" if ANTHROPIC_API_KEY else "offline"
)
AGENTSITE_PLANNER_MODEL = os.environ.get("AGENTSITE_PLANNER_MODEL", "claude-sonnet-5-5")
AGENTSITE_ANSWER_MODEL = os.environ.get("AGENTSITE_ANSWER_MODEL", "claude-sonnet-5-5")
AGENTSITE_MODEL_MAX_RETRIES = 3
# How Claude's plan replies are bound to the plan's JSON Schema: "auto" (structured outputs
# where the model has them, else a forced tool call), "output_format", "tool" or "off".
AGENTSITE_PLAN_SCHEMA = os.environ.get("AGENTSITE_PLAN_SCHEMA", "auto")
AGENTSITE_MODEL_TIMEOUT_S = 60.0

# USD per million tokens. Each model call stores the prices it was charged at.
AGENTSITE_MODEL_PRICES = {
    # USD per million tokens; cache_write is the five-minute write, cache_write_1h the one-hour
    # write; web_search is USD per thousand server-side web searches.
    "claude-sonnet-5-5": {
        "input": 3.00,
        "output": 15.00,
        "cache_read": 0.30,
        "cache_write": 3.75,
        "cache_write_1h": 6.00,
        "web_search": 10.00,
    },
    "claude-opus-4-5": {
        "input": 5.00,
        "output": 25.00,
        "cache_read": 0.50,
        "cache_write": 6.25,
        "cache_write_1h": 10.00,
        "web_search": 10.00,
    },
    "claude-haiku-4-5": {
        "input": 1.00,
        "output": 5.00,
        "cache_read": 0.10,
        "cache_write": 1.25,
        "cache_write_1h": 2.00,
        "web_search": 10.00,
    },
    "offline": {
        "input": 0.0,
        "output": 0.0,
        "cache_read": 0.0,
        "cache_write": 0.0,
        "cache_write_1h": 0.0,
        "web_search": 0.0,
    },
}

AGENTSITE_MAX_PLAN_STEPS = int(os.environ.get("AGENTSITE_MAX_PLAN_STEPS", "5"))
AGENTSITE_MAX_REPLANS = int(os.environ.get("AGENTSITE_MAX_REPLANS", "1"))
# Tool calls a ReAct run (Goal.agent "react") may make before it must answer.
AGENTSITE_REACT_MAX_STEPS = int(
    os.environ.get("AGENTSITE_REACT_MAX_STEPS", str(2 * AGENTSITE_MAX_PLAN_STEPS))
)
# A reviewer approves each whole plan before any step runs (also per goal).
AGENTSITE_REQUIRE_PLAN_APPROVAL = env_bool("AGENTSITE_REQUIRE_PLAN_APPROVAL", False)
# The first call may answer a goal that needs no tool at once (one call, no plan), plan, or
# refuse; off, every goal is planned.
AGENTSITE_ROUTER = env_bool("AGENTSITE_ROUTER", True)
AGENTSITE_MAX_PARALLEL_STEPS = int(os.environ.get("AGENTSITE_MAX_PARALLEL_STEPS", "16"))
# Threads for tool calls in each process, shared by the runs it advances.
AGENTSITE_TOOL_THREADS = int(os.environ.get("AGENTSITE_TOOL_THREADS", "64"))
# Runs one worker process keeps in flight at most (each waiting one parks a thread, not one of
# its worker slots: see plans.runtime.worker). Each run in flight holds a database connection
# (and its recorder another): on PostgreSQL keep this under max_connections / 2 per process.
# The offline model's latency per call (0: none), to measure concurrency as with a real model.
AGENTSITE_OFFLINE_LATENCY_MS = float(os.environ.get("AGENTSITE_OFFLINE_LATENCY_MS", "0"))
AGENTSITE_MAX_ACTIVE_RUNS = int(os.environ.get("AGENTSITE_MAX_ACTIVE_RUNS", "500"))
AGENTSITE_RUN_BUDGET_USD = float(os.environ.get("AGENTSITE_RUN_BUDGET_USD", "0.50"))
AGENTSITE_RUN_BUDGET_TOKENS = int(os.environ.get("AGENTSITE_RUN_BUDGET_TOKENS", "200000"))
# Each author's model spend per UTC day (0: no cap), and the model-call rate shared by all.
AGENTSITE_AUTHOR_DAILY_USD = float(os.environ.get("AGENTSITE_AUTHOR_DAILY_USD", "5.00"))
AGENTSITE_MODEL_CALLS_PER_MINUTE = float(os.environ.get("AGENTSITE_MODEL_CALLS_PER_MINUTE", "120"))
AGENTSITE_MODEL_CALLS_BURST = int(os.environ.get("AGENTSITE_MODEL_CALLS_BURST", "20"))
AGENTSITE_RATE_LIMIT_PATIENCE_S = float(os.environ.get("AGENTSITE_RATE_LIMIT_PATIENCE_S", "30"))
AGENTSITE_TOOL_MODULES = env_list("AGENTSITE_TOOL_MODULES", [])
AGENTSITE_TOOL_TIMEOUT_S = float(os.environ.get("AGENTSITE_TOOL_TIMEOUT_S", "30"))
# A destructive call past its time limit may still act, so it is never repeated while it may
# run: its step waits this much longer for the call's own outcome (or its tool's reconcile
# hook) before it fails as "outcome unknown".
AGENTSITE_TOOL_OUTCOME_WAIT_S = float(os.environ.get("AGENTSITE_TOOL_OUTCOME_WAIT_S", "300"))
# A destructive tool's preview hook: its time limit (a tool may set its own), before a reviewer
# decides and again just before the call.
AGENTSITE_PREVIEW_TIMEOUT_S = float(os.environ.get("AGENTSITE_PREVIEW_TIMEOUT_S", "5"))
# MCP servers whose tools join the registry as <server>.<tool>: JSON mapping a short name to
# {"command", "args", "env", "cwd"} (stdio) or {"url", "headers"} (streamable HTTP), with
# optional per-tool "tools" overrides; see README "Tools from MCP servers".
# OpenTelemetry: traces are exported when OTEL_EXPORTER_OTLP_ENDPOINT is set; tool arguments,
# results and the goal go into span attributes (redacted as stored) only with this on.
AGENTSITE_TRACE_CONTENT = env_bool("AGENTSITE_TRACE_CONTENT", False)
AGENTSITE_MCP_SERVERS = json.loads(os.environ.get("AGENTSITE_MCP_SERVERS", "") or "{}")
# A larger result (as JSON text) fails its step: it would be stored three times and pushed to
# every watching browser. 1,000,000 so that a 200 KB report is kept whole, by reference.
AGENTSITE_TOOL_RESULT_MAX_CHARS = int(os.environ.get("AGENTSITE_TOOL_RESULT_MAX_CHARS", "1000000"))
# A longer result goes into later prompts (answer, replan) as an extract with a reference: its
# first AGENTSITE_PROMPT_RESULT_HEAD_CHARS, its shape, and how to read more (result_slice).
AGENTSITE_PROMPT_RESULT_MAX_CHARS = int(os.environ.get("AGENTSITE_PROMPT_RESULT_MAX_CHARS", "8000"))
AGENTSITE_PROMPT_RESULT_HEAD_CHARS = int(
    os.environ.get("AGENTSITE_PROMPT_RESULT_HEAD_CHARS", "2000")
)
# Retries of errors a tool declares retryable: exponential backoff with full jitter.
AGENTSITE_TOOL_MAX_ATTEMPTS = int(os.environ.get("AGENTSITE_TOOL_MAX_ATTEMPTS", "3"))
AGENTSITE_TOOL_RETRY_BASE_S = float(os.environ.get("AGENTSITE_TOOL_RETRY_BASE_S", "0.5"))
AGENTSITE_TOOL_RETRY_CAP_S = float(os.environ.get("AGENTSITE_TOOL_RETRY_CAP_S", "10"))
# A tool's circuit opens after this many consecutive failures, for this long.
AGENTSITE_BREAKER_FAILURES = int(os.environ.get("AGENTSITE_BREAKER_FAILURES", "5"))
AGENTSITE_BREAKER_COOLDOWN_S = float(os.environ.get("AGENTSITE_BREAKER_COOLDOWN_S", "30"))
# Redacted before text is stored in events and audit records: card numbers (Luhn-checked)
# and any extra regular expressions listed here.
AGENTSITE_REDACT_CARD_NUMBERS = env_bool("AGENTSITE_REDACT_CARD_NUMBERS", True)
AGENTSITE_REDACTION_PATTERNS = env_list("AGENTSITE_REDACTION_PATTERNS", [])
AGENTSITE_FOUR_EYES = env_bool("AGENTSITE_FOUR_EYES", True)
# A destructive step's approval request left undecided this long blocks the step.
AGENTSITE_APPROVAL_TTL_S = float(os.environ.get("AGENTSITE_APPROVAL_TTL", str(72 * 3600)))
# Approval policies as code: modules of @rule functions, tried in order before a person is
# asked (the demo shop's: plans.demo.approval_rules); see README "Approval rules".
AGENTSITE_APPROVAL_RULE_MODULES = env_list("AGENTSITE_APPROVAL_RULE_MODULES", [])
# A reviewer's "I'm on it" claim on a request lapses after this long.
AGENTSITE_APPROVAL_CLAIM_S = float(os.environ.get("AGENTSITE_APPROVAL_CLAIM_S", "1800"))
# How long an e-mail's approve/reject links stay usable (each also dies with its request).
AGENTSITE_DECISION_LINK_TTL_S = float(
    os.environ.get("AGENTSITE_DECISION_LINK_TTL", str(AGENTSITE_APPROVAL_TTL_S))
)

# --- The API and notifications ---------------------------------------------------------

# Runs created through the API, per token (or per signed-in user) per minute, with a burst.
AGENTSITE_API_RUNS_PER_MINUTE = float(os.environ.get("AGENTSITE_API_RUNS_PER_MINUTE", "30"))
AGENTSITE_API_RUNS_BURST = int(os.environ.get("AGENTSITE_API_RUNS_BURST", "10"))
# A request body over this many bytes is refused (the API answers 413 body_too_large).
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("AGENTSITE_MAX_BODY_BYTES", str(1024 * 1024)))
# How often an open event stream (SSE) or websocket re-reads the token or session it was opened
# with, and ends once that no longer holds (revoked, expired, signed out).
AGENTSITE_STREAM_RECHECK_S = float(os.environ.get("AGENTSITE_STREAM_RECHECK_S", "5"))
# Where links in emails and webhooks point (the address people reach the dashboard at).
AGENTSITE_BASE_URL = os.environ.get("AGENTSITE_BASE_URL", "http://127.0.0.1:8000")
AGENTSITE_NOTIFICATIONS = env_bool("AGENTSITE_NOTIFICATIONS", True)
AGENTSITE_NOTIFY_THREADS = int(os.environ.get("AGENTSITE_NOTIFY_THREADS", "16"))
# At most this many sends at once to one endpoint (or to the mail server).
AGENTSITE_NOTIFY_PER_TARGET = int(os.environ.get("AGENTSITE_NOTIFY_PER_TARGET", "2"))
AGENTSITE_NOTIFY_POLL_S = float(os.environ.get("AGENTSITE_NOTIFY_POLL_S", "2"))
AGENTSITE_NOTIFY_MAX_ATTEMPTS = int(os.environ.get("AGENTSITE_NOTIFY_MAX_ATTEMPTS", "6"))
AGENTSITE_NOTIFY_RETRY_BASE_S = float(os.environ.get("AGENTSITE_NOTIFY_RETRY_BASE_S", "2"))
AGENTSITE_NOTIFY_RETRY_CAP_S = float(os.environ.get("AGENTSITE_NOTIFY_RETRY_CAP_S", "600"))
AGENTSITE_WEBHOOK_TIMEOUT_S = float(os.environ.get("AGENTSITE_WEBHOOK_TIMEOUT_S", "10"))
# Webhooks to loopback, private or reserved addresses are refused (SSRF) unless this is set.
AGENTSITE_WEBHOOK_ALLOW_PRIVATE = env_bool("AGENTSITE_WEBHOOK_ALLOW_PRIVATE", False)
# An approvals email waits this long so the other steps of its round join it.
AGENTSITE_APPROVAL_EMAIL_DELAY_S = float(os.environ.get("AGENTSITE_APPROVAL_EMAIL_DELAY_S", "2"))
# The approval digest goes out from the workers' sweep once per this many seconds (periods
# counted from the Unix epoch: daily, the first sweep after midnight UTC); 0: only when
# `manage.py send_approval_digest` is run (from cron).
AGENTSITE_APPROVAL_DIGEST_S = float(os.environ.get("AGENTSITE_APPROVAL_DIGEST_S", str(24 * 3600)))
