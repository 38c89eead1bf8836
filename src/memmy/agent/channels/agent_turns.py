"""The :class:`~memmy.agent.channels.router.TurnRunner` over the real agent runtime: one open runtime per chat session
(memory session, model, tools), the channel as the memory source, the shell and file tools off unless the
channel's ``tools`` setting turns them on, and the files the agent wrote returned with the answer.

The turns run on an event loop of their own, in a thread: the agent's CPU work (the provider SDK building requests
and parsing streams, the runtime) is what fills a loop when many chats talk at once, and on the channels' loop it
would sit between every platform's message and its hand-over, and between every answer and its send. On their own
loop the channels' loop stays nearly idle, so receiving and sending wait only for the interpreter's switch
interval (5 ms), not for the other chats' turns."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from memmy.agent.channels.router import Answer
from memmy.agent.config import AgentConfig
from memmy.agent.runtime import Runtime, open_runtime

MAX_OPEN = 32  # runtimes kept open (least recently used closed first)
WRITING_TOOLS = ("write_file", "edit_file")
SWITCH_INTERVAL_S = 0.001
T = TypeVar("T")


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
        self.locks: dict[str, asyncio.Lock] = {}  # used on the turns' loop only
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    def _turns_loop(self) -> asyncio.AbstractEventLoop:
        """The turns' event loop, in a thread started with the first turn."""
        if self.loop is None:
            # The two loops share the interpreter lock: a socket call on the channels' loop gives it up and then
            # waits for the turns' thread to hand it back, up to the switch interval. 1 ms (the default is 5) keeps
            # each of a send's socket calls from waiting 5 ms behind a busy turn.
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
            self.loop = asyncio.new_event_loop()
            self.thread = threading.Thread(target=self.loop.run_forever, name="memmy-chat-turns", daemon=True)
            self.thread.start()
        return self.loop

    async def _on_turns_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the turns' loop and wait for it here (cancelling the wait cancels it there)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._turns_loop()))

    def warm(self) -> None:
        """Import what a chat's first turn needs (the tool loop, MCP, the provider's SDK) before the first message
        arrives, instead of in front of it (the SDK import alone is most of a second; run in a thread)."""
        from memmy.agent import loop, mcp_tools, tools  # noqa: F401 - imported to be loaded
        from memmy.agent.providers import build_provider

        if self.config.default is not None:
            build_provider(self.config.default)

    async def _runtime(self, session: str, source: str, tools: bool) -> Runtime:
        key = (session, source, tools)
        runtime = self.open.get(key)
        if runtime is None:
            runtime = await open_runtime(
                chat_config(self.config, tools),
                session,
                approve=_deny if tools and self.config.tools.exec_approval == "ask" else None,
                config_file=self.config_file,
                source=source,
            )
            self.open[key] = runtime
            while len(self.open) > MAX_OPEN:
                _, oldest = self.open.popitem(last=False)
                await oldest.close()
        self.open.move_to_end(key)
        return runtime

    async def run(
        self, session: str, text: str, *, source: str, tools: bool, parts: list[dict[str, Any]] | None = None
    ) -> Answer:
        """Run one turn of ``session`` and return its answer and written files (``parts``: images sent along)."""
        return await self._on_turns_loop(self._run(session, text, source=source, tools=tools, parts=parts))

    async def _run(
        self, session: str, text: str, *, source: str, tools: bool, parts: list[dict[str, Any]] | None
    ) -> Answer:
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
        """Deliver pending captures, close every runtime and stop the turns' loop."""
        loop, thread = self.loop, self.thread
        if loop is None or thread is None:
            return
        await self._on_turns_loop(self._close_runtimes())
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 30)
        if not thread.is_alive():
            loop.close()
        self.loop = self.thread = None

    async def _close_runtimes(self) -> None:
        while self.open:
            _, runtime = self.open.popitem()
            with contextlib.suppress(Exception):
                await runtime.close()


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
