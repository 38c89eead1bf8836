"""A tiny stdio MCP server for the agent tests (the SDK's own ``MCPServer``): ``shout`` and ``hidden``."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


@server.tool()
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper() + "!"


@server.tool()
def hidden(text: str) -> str:
    """A tool that enabledTools filters out."""
    return text


if __name__ == "__main__":
    server.run("stdio")
