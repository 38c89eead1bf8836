"""Chat turns on the real agent runtime: one open runtime per chat session (memory session, model, tools), the
channel as the memory source, the shell and file tools off unless the channel's ``tools`` setting turns them on, and
the files the agent wrote returned with the answer. It runs in the chat turns' worker process
(:mod:`memmy.agent.channels.turn_worker`), on that process's event loop: the channels' process never runs a turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
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
        self.gate = Gate()  # the chats' turns reach their provider requests one after another, in arrival order
        # shared by every chat's runtime: the daemon's URL and token (read again when the config file changes, not
        # parsed for each chat's first message), the usage meter's connection and the provider clients
        self.memory_settings: FileCache[ClientSettings] = FileCache()
        self.shared = SharedParts(self._settings(), UsageBook(config.home, keep_open=True), ProviderCache())

    async def warm(self) -> None:
        """Get a chat's first turn ready before the first message arrives, instead of in front of it (20 chats'
        first messages at once all waited for it): import what it needs (the tool loop, MCP, the image tool, the
        provider's SDK: most of a second), build the default model's client, load the async network backend the
        provider's HTTP client takes on its first request (anyio's, ~15 ms), and start the threads the sessions are
        written in (~2 ms each, started one by one as the first turns' writes came)."""
        from memmy.agent import imagegen, loop, mcp_tools, tools  # noqa: F401 - imported to be loaded

        if self.config.default is not None:
            self.shared.providers.get(self.config.default)  # the client every chat of the default model uses
        await network_backend()
        await start_threads()

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
            await self.gate.enter()
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


class Gate:
    """Lets the turns that start together run the first stretch of their work (up to where it first waits: the
    session opened, the model request built and on its way) one at a time, in the order they arrived.

    Without it, 20 chats' first messages arriving at once each ran their stretch to its first wait, then each came
    back to send its request, every one of them behind the other 19's CPU work: the first request reached the
    provider no sooner than the last. With it the requests leave one after another, each about one stretch after the
    one before. A turn holds the gate only until it first yields (to the network, a thread, a timer), never while
    it waits."""

    def __init__(self) -> None:  # noqa: D107
        self.lock = asyncio.Lock()  # its waiters are woken first come, first served

    async def enter(self) -> None:
        """Wait for the turns that came before to reach their first wait; the caller then has the gate until its
        own first (released from the event loop's next pass, which runs only once the caller has yielded)."""
        await self.lock.acquire()
        asyncio.get_running_loop().call_soon(self.lock.release)


async def network_backend() -> None:
    """Load anyio's backend for this event loop (httpx's connections run on it; loaded at its first use)."""
    import anyio

    await anyio.sleep(0)


async def start_threads() -> None:
    """Start every thread of the event loop's default executor (``asyncio.to_thread``) now: the executor starts one
    for each call that finds none idle, each start a few milliseconds of the loop's time."""
    loop = asyncio.get_running_loop()
    count = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default size
    everyone = threading.Barrier(count)

    def meet() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            everyone.wait(timeout=5)

    await asyncio.gather(*(loop.run_in_executor(None, meet) for _ in range(count)))


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
