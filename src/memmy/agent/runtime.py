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
    from memmy.agent.providers import ProviderCache
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


@dataclass
class SharedParts:
    """What a host of many sessions (the chat turns' worker) opens once for all its runtimes: the daemon's URL and
    token, the usage meter's connection, one provider client a model (its connections kept alive across chats)."""

    memory_settings: ClientSettings
    meter: UsageBook
    providers: ProviderCache


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
    shared: SharedParts | None = None,
) -> Runtime:
    """Load (or create) the session, connect memory and MCP servers, build the agent (``shared``: what a host of
    many sessions opens once for all of them)."""
    from memmy.agent import imagegen
    from memmy.agent.loop import Agent
    from memmy.agent.mcp_tools import McpHub
    from memmy.agent.tools import ToolBox

    store = SessionStore(config.home)
    session = store.load(session_name, str(Path(project).resolve()) if project else None)
    bridge = open_memory(config, memory, config_file, source, shared.memory_settings if shared else None)
    base = Path(session.project) if session.project else config.workspace
    base.mkdir(parents=True, exist_ok=True)
    tools = ToolBox(config.tools, base, memory=bridge, approve=approve)
    imagegen.install(config, tools)
    hub = McpHub(config.tools.mcp_servers)
    if shared is None:
        agent = Agent(config, session, store, tools, bridge, emit)
    else:
        agent = Agent(config, session, store, tools, bridge, emit, shared.meter, shared.providers.get)
        built = shared.providers.built(agent.choice) if agent.choice is not None else None
        if built is not None:  # handed over at once (the worker builds the default model's before the first chat)
            agent.provider_ready(built)
    if hub.servers:
        # The memory session opens while the MCP servers start, so the first turn makes one daemon call, not two.
        await asyncio.gather(hub.start(), agent.prepare())
        hub.install(tools)
    else:
        # Nothing to wait for beside the memory session: awaited directly, a chat's first turn does not yield to the
        # others here (a gather's tasks put it behind every other chat's work of the moment, 20 chats at once)
        await agent.prepare()
    return Runtime(config, store, bridge, hub, agent)
