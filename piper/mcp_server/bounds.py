"""Every statement an MCP request runs is bounded, as a web request's is.

The web process gets its bound from piper/wsgi.py before the settings load
(PIPER_WEB_STATEMENT_TIMEOUT_MS, 30 s). `manage.py mcp` is a command, whose
settings are loaded before it runs, so it gives the bound to its connections
itself: PIPER_MCP_STATEMENT_TIMEOUT_MS, else PIPER_WEB_STATEMENT_TIMEOUT_MS,
else 30 s (0: none). A tool call the database cannot finish in time then
fails in the API's own way — 503 `database_busy` with Retry-After — and the
tool error carries that message (piper.mcp_server.api). Without a bound a
call stuck behind a lock would hold its thread, and the client, for as long
as the lock lasts.
"""

from __future__ import annotations

import os
import re

DEFAULT_MS = 30_000
_OPTION = re.compile(r"\s*-c\s*statement_timeout=\S+")


def statement_timeout_ms(environ: dict | None = None) -> int:
    environ = os.environ if environ is None else environ
    for name in ("PIPER_MCP_STATEMENT_TIMEOUT_MS", "PIPER_WEB_STATEMENT_TIMEOUT_MS"):
        value = environ.get(name, "").strip()
        if value:
            return int(value)
    return DEFAULT_MS


def bound_statements(ms: int) -> None:
    """Give `statement_timeout` = `ms` to every connection this process opens from
    now on (at connect, as PIPER_DB_STATEMENT_TIMEOUT_MS does); 0 removes it. The
    connections open now are closed so that the next query opens a bounded one."""
    from django.db import connections

    for alias in connections:
        options = connections.settings[alias].setdefault("OPTIONS", {})
        kept = _OPTION.sub("", options.get("options", "")).strip()
        if ms:
            kept = f"{kept} -c statement_timeout={ms}".strip()
        if kept:
            options["options"] = kept
        else:
            options.pop("options", None)
    connections.close_all()
