"""A tiny MCP server for the agent tests (the SDK's own ``MCPServer``): ``shout`` and ``hidden``; stdio by
default, ``sse PORT`` or ``streamable-http PORT`` to serve over HTTP."""

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
    import sys

    if len(sys.argv) > 2:  # mcp_echo_server.py sse|streamable-http PORT
        server.run(sys.argv[1], host="127.0.0.1", port=int(sys.argv[2]))  # type: ignore[call-overload]
    else:
        server.run("stdio")
