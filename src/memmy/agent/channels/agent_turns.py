"""Chat turns on the real agent runtime: one open runtime per chat session (memory session, model, tools), the
channel as the memory source, the shell and file tools off unless the channel's ``tools`` setting turns them on, and
the files the agent wrote returned with the answer. It runs in the chat turns' worker process
(:mod:`memmy.agent.channels.turn_worker`), on that process's event loop: the channels' process never runs a turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any

from memmy.agent.channels.base import FileCache
from memmy.agent.channels.router import Answer
from memmy.agent.config import AgentConfig
from memmy.agent.memory import resolve_settings
from memmy.agent.providers import ProviderCache
from memmy.agent.runtime import Runtime, SharedParts, open_runtime
from memmy.agent.usage import UsageBook
from memmy.cli.client import ClientSettings
from memmy.config import config_path

MAX_OPEN = 32  # runtimes kept open (least recently used closed first)
WRITING_TOOLS = ("write_file", "edit_file")


def chat_config(config: AgentConfig, tools: bool) -> AgentConfig:
    """The agent config for a chat session: shell and file tools only when the channel allows them."""
    if tools:
        return config
    return replace(config, tools=replace(config.tools, exec_enabled=False, files_enabled=False))


class AgentTurns:
    """Runs chat turns on the agent runtime, one runtime per session, one turn at a time per session."""

    def __init__(self, config: AgentConfig, config_file: str | None = None) -> None:
        self.config = config
        self.config_file = config_file
        self.open: OrderedDict[tuple[str, str, bool], Runtime] = OrderedDict()
        self.locks: dict[str, asyncio.Lock] = {}
        # shared by every chat's runtime: the daemon's URL and token (read again when the config file changes, not
        # parsed for each chat's first message), the usage meter's connection and the provider clients
        self.memory_settings: FileCache[ClientSettings] = FileCache()
        self.shared = SharedParts(self._settings(), UsageBook(config.home, keep_open=True), ProviderCache())

    def warm(self) -> None:
        """Import what a chat's first turn needs (the tool loop, MCP, the provider's SDK) and build the default
        model's client before the first message arrives, instead of in front of it (the SDK import alone is most of
        a second)."""
        from memmy.agent import loop, mcp_tools, tools  # noqa: F401 - imported to be loaded

        if self.config.default is not None:
            self.shared.providers.get(self.config.default)  # the client every chat of the default model uses

    async def _runtime(self, session: str, source: str, tools: bool) -> Runtime:
        key = (session, source, tools)
        runtime = self.open.get(key)
        if runtime is None:
            self.shared.memory_settings = self._settings()
            runtime = await open_runtime(
                chat_config(self.config, tools),
                session,
                approve=_deny if tools and self.config.tools.exec_approval == "ask" else None,
                config_file=self.config_file,
                source=source,
                shared=self.shared,
            )
            self.open[key] = runtime
            while len(self.open) > MAX_OPEN:
                _, oldest = self.open.popitem(last=False)
                await oldest.close()
        self.open.move_to_end(key)
        return runtime

    def _settings(self) -> ClientSettings:
        """The daemon's URL and token, resolved again only when the config file changed."""
        return self.memory_settings.read(config_path(self.config_file), lambda _: resolve_settings(self.config_file))

    async def run(
        self, session: str, text: str, *, source: str, tools: bool, parts: list[dict[str, Any]] | None = None
    ) -> Answer:
        """Run one turn of ``session`` and return its answer and written files (``parts``: images sent along)."""
        async with self.locks.setdefault(session, asyncio.Lock()):
            runtime = await self._runtime(session, source, tools)
            result = await runtime.agent.run_turn(text, parts)
            files = []
            for call in result.tool_calls:
                if call.get("name") in WRITING_TOOLS and call.get("success"):
                    path = _written_path(runtime.agent.workspace, call.get("input"))
                    if path is not None and path not in files:
                        files.append(path)
            answer = result.answer or (f"[{result.status}] {result.error}" if result.error else "")
            recall = result.recall
            return Answer(answer, result.status, files, list(recall.memory_ids) if recall else [])

    async def describe(self, session: str) -> str:
        """The session's memory state for ``/status``."""
        for (name, _, _), runtime in self.open.items():
            if name == session and runtime.memory is not None:
                return f"Memory: {runtime.memory.state}"
        return "Memory: not connected yet (the first message connects it)"

    async def close(self) -> None:
        """Deliver pending captures and close every runtime."""
        while self.open:
            _, runtime = self.open.popitem()
            with contextlib.suppress(Exception):
                await runtime.close()
        await asyncio.to_thread(self.shared.meter.close)


async def _deny(command: str) -> bool:
    """Chat sessions cannot answer an approval prompt: a command that needs approval is refused."""
    return False


def _written_path(workspace: Path, arguments: object) -> Path | None:
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    if not isinstance(arguments, dict) or not isinstance(arguments.get("path"), str):
        return None
    path = (workspace / arguments["path"]).resolve()
    return path if path.is_file() and path.is_relative_to(workspace.resolve()) else None
