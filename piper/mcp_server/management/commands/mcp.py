"""`manage.py mcp`: the MCP tool server, over stdio (desktop agents) or streamable HTTP.

manage.py mcp --api-key pm_…                      # stdio; or PIPER_API_KEY in the env
manage.py mcp --transport http --port 8765        # each request: Authorization: Bearer <key>
manage.py mcp … --api-url https://memory.example  # call a running service, not in process
"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError

from piper.mcp_server import api
from piper.mcp_server.auth import caller_for, http_auth, process_key
from piper.mcp_server.bounds import bound_statements, statement_timeout_ms
from piper.mcp_server.server import build_server


class Command(BaseCommand):
    help = "Serve Piper Memory's MCP tools (stdio, or streamable HTTP with bearer keys)."

    def add_arguments(self, parser):
        parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
        parser.add_argument(
            "--api-key", default=None, help="stdio: the key every call uses (else PIPER_API_KEY)."
        )
        parser.add_argument(
            "--api-url",
            default=None,
            help="Send calls to this running service instead of in process.",
        )
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument(
            "--public-url",
            default=None,
            help="http: this server's URL as clients reach it (OAuth resource metadata).",
        )

    def handle(self, *args, **options):
        api.base_url = options["api_url"]
        # Each statement of a tool call is bounded, as a web request's (bounds.py).
        bound_statements(statement_timeout_ms())
        if options["transport"] == "stdio":
            raw = options["api_key"] or os.environ.get("PIPER_API_KEY", "")
            if not raw:
                raise CommandError("stdio needs a key: --api-key pm_… or PIPER_API_KEY")
            if caller_for(raw) is None:
                raise CommandError("the API key is unknown or has been revoked")
            process_key.set(raw)
            build_server().run("stdio")
            return
        self._serve_http(options)

    def _serve_http(self, options) -> None:
        public = options["public_url"] or f"http://{options['host']}:{options['port']}"
        server = build_server(**http_auth(public))
        self.stderr.write(f"MCP over streamable HTTP on {public}/mcp (Bearer <api key>)")
        server.run("streamable-http", host=options["host"], port=options["port"])
