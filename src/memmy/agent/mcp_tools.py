"""MCP servers from ``tools.mcpServers`` (stdio, sse, streamableHttp) through the official ``mcp`` client; their
tools join the agent's tool box as ``mcp_<server>_<tool>``, filtered by ``enabledTools``, bounded by
``toolTimeout``. A server that fails to start is reported and skipped, never fatal."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
from contextlib import AsyncExitStack
from typing import Any

from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters

from memmy.agent.config import McpServerConfig
from memmy.agent.tools import Tool, ToolBox, ToolError


def tool_name(server: str, tool: str) -> str:
    """``mcp_<server>_<tool>`` with characters the providers accept."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp_{server}_{tool}")[:64]


def enabled(patterns: tuple[str, ...], name: str) -> bool:
    """Whether ``enabledTools`` lets ``name`` through (``*`` and shell-style patterns)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _transport(server: McpServerConfig) -> Any:
    if server.type == "stdio":
        return StdioServerParameters(
            command=server.command, args=list(server.args), env={**os.environ, **server.env} if server.env else None
        )
    if server.type == "sse":
        return sse_client(server.url, headers=server.headers or None)
    if server.headers:
        import httpx2  # the MCP SDK's HTTP client
        from mcp.client.streamable_http import streamable_http_client

        return streamable_http_client(server.url, http_client=httpx2.AsyncClient(headers=server.headers))
    return server.url


class McpHub:
    """Holds the MCP connections in one task (their context managers must exit where they entered)."""

    def __init__(self, servers: tuple[McpServerConfig, ...]) -> None:
        self.servers = servers
        self.clients: dict[str, Client] = {}
        self.problems: list[str] = []
        self.tools: list[Tool] = []
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float = 30.0) -> list[Tool]:
        """Connect every server (in a background task) and return their tools."""
        if not self.servers:
            return []
        self._task = asyncio.create_task(self._hold())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        if not self._ready.is_set():
            self.problems.append(f"MCP servers did not start within {timeout_s:g} s")
        return self.tools

    async def _hold(self) -> None:
        async with AsyncExitStack() as stack:
            for server in self.servers:
                try:
                    client = await stack.enter_async_context(
                        Client(_transport(server), read_timeout_seconds=server.tool_timeout_s, mode="legacy")
                    )
                    listed = await client.list_tools()
                except Exception as exc:  # noqa: BLE001 - any failing server is reported and skipped
                    self.problems.append(f"MCP server {server.name}: {type(exc).__name__}: {str(exc)[:200]}")
                    continue
                self.clients[server.name] = client
                for tool in listed.tools:
                    if enabled(server.enabled_tools, tool.name):
                        self.tools.append(self._wrap(server, client, tool))
            self._ready.set()
            await self._stop.wait()

    def _wrap(self, server: McpServerConfig, client: Client, tool: Any) -> Tool:
        async def run(args: dict[str, Any]) -> str:
            result = await client.call_tool(tool.name, args)
            text = "\n".join(
                str(getattr(block, "text", "") or f"[{getattr(block, 'type', 'content')}]")
                for block in getattr(result, "content", [])
            )
            if getattr(result, "is_error", False):
                raise ToolError(text or f"{tool.name} failed")
            return text

        schema = dict(getattr(tool, "input_schema", None) or {"type": "object"})
        return Tool(
            tool_name(server.name, tool.name),
            (tool.description or f"{tool.name} from MCP server {server.name}")[:1000],
            schema,
            run,
            timeout_s=server.tool_timeout_s,
        )

    def install(self, box: ToolBox) -> None:
        """Add the servers' tools to a tool box."""
        for tool in self.tools:
            box.add(tool)

    async def close(self) -> None:
        """Disconnect every server."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 10)
