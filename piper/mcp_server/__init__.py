"""The MCP tool server: Piper Memory for MCP clients (desktop agents, IDEs, frameworks).

Every tool is one call of the REST API made with the caller's own API key —
in process through Django's WSGI application (`manage.py mcp`), or to a
running service (`--api-url`) — so keys, scopes, clearance, tenancy,
validation and error messages are exactly the API's. The tenant comes from
the key, never from a tool argument.
"""
