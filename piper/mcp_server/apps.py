from django.apps import AppConfig


class McpServerConfig(AppConfig):
    name = "piper.mcp_server"
    label = "mcp_server"
    verbose_name = "MCP tool server"
