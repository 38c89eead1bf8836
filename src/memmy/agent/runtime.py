"""Wiring: config -> memory bridge, tool box (+ MCP servers), session and :class:`Agent`; one place for the CLI,
the TUI and ``memmy serve`` to build the same agent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memmy.agent.config import DEFAULT_SESSION, AgentConfig
from memmy.agent.memory import SOURCE, MemoryBridge, resolve_settings
from memmy.agent.sessions import SessionStore
from memmy.agent.usage import UsageBook
from memmy.cli.client import ClientSettings

if TYPE_CHECKING:  # the loop, the tools and MCP load when a runtime opens (`memmy status` needs only memory)
    from memmy.agent.loop import Agent, Emit
    from memmy.agent.mcp_tools import McpHub
    from memmy.agent.tools import Approver


@dataclass
class Runtime:
    """Everything one agent process holds open."""

    config: AgentConfig
    store: SessionStore
    memory: MemoryBridge | None
    hub: McpHub
    agent: Agent

    async def close(self) -> None:
        """Finish captures in flight, close MCP servers and the memory client."""
        await self.agent.flush()
        await self.hub.close()
        if self.memory is not None:
            await self.memory.aclose()


def capture_spool(config: AgentConfig) -> Path:
    """Where captures the daemon could not take wait to be sent again."""
    return config.home / "agent" / "pending-captures.jsonl"


def open_memory(
    config: AgentConfig,
    enabled: bool = True,
    config_file: str | None = None,
    source: str = SOURCE,
    settings: ClientSettings | None = None,
) -> MemoryBridge:
    """The memory client with the CLI's URL/token resolution (``settings``: resolved already, by a host of many
    sessions); ``source`` names the host in memory (``memmy``, or a chat channel such as ``telegram``)."""
    return MemoryBridge(
        settings or resolve_settings(config_file),
        enabled=enabled and config.memory_enabled,
        spool=capture_spool(config),
        source=source,
    )


async def open_runtime(
    config: AgentConfig,
    session_name: str = DEFAULT_SESSION,
    project: str | None = None,
    *,
    approve: Approver | None = None,
    emit: Emit | None = None,
    memory: bool = True,
    config_file: str | None = None,
    source: str = SOURCE,
    memory_settings: ClientSettings | None = None,
    meter: UsageBook | None = None,
) -> Runtime:
    """Load (or create) the session, connect memory and MCP servers, build the agent (``memory_settings`` and
    ``meter``: shared by a host of many sessions instead of resolved and opened for each)."""
    from memmy.agent import imagegen
    from memmy.agent.loop import Agent
    from memmy.agent.mcp_tools import McpHub
    from memmy.agent.tools import ToolBox

    store = SessionStore(config.home)
    session = store.load(session_name, str(Path(project).resolve()) if project else None)
    bridge = open_memory(config, memory, config_file, source, memory_settings)
    base = Path(session.project) if session.project else config.workspace
    base.mkdir(parents=True, exist_ok=True)
    tools = ToolBox(config.tools, base, memory=bridge, approve=approve)
    imagegen.install(config, tools)
    hub = McpHub(config.tools.mcp_servers)
    agent = Agent(config, session, store, tools, bridge, emit, meter)
    # The memory session opens while the MCP servers start, so the first turn makes one daemon call, not two.
    await asyncio.gather(hub.start(), agent.prepare())
    hub.install(tools)
    return Runtime(config, store, bridge, hub, agent)
