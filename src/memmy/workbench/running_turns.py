"""Running turns, owned by the one long-lived process: one :class:`Runner` per agent session that has run here,
an :class:`EventHub` every browser tab listens to, stop / restart, messages queued while a turn runs, and shell
approvals asked in the browser. A turn is an asyncio task of the server, so it keeps running when the window
closes; the session file is the same one ``memmy agent`` and the TUI read and write."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.agent import imagegen
from memmy.agent.config import AgentConfig
from memmy.agent.loop import Agent, TurnEvent
from memmy.agent.mcp_tools import McpHub
from memmy.agent.memory import MemoryBridge
from memmy.agent.sessions import Session, SessionStore
from memmy.agent.tools import ToolBox

#: How long a finished session still takes the pet's next message (seconds).
PET_CONTINUE_S = 300.0
HISTORY = 20_000


@dataclass(frozen=True)
class Event:
    """One thing a browser shows: ``seq`` orders every event of the process, ``session`` is the session id."""

    seq: int
    session: str
    kind: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The event as sent on the stream."""
        return {"seq": self.seq, "session": self.session, "kind": self.kind, "text": self.text, "data": self.data}


class EventHub:
    """Every event of the process in order (the last :data:`HISTORY`), and the listeners waiting for more."""

    def __init__(self) -> None:
        self.events: deque[Event] = deque(maxlen=HISTORY)
        # Numbered from the start time in milliseconds: after a restart of the process the numbers keep growing,
        # so a page that reconnects with its last number still gets every new event.
        self.seq = int(time.time() * 1000)
        self._listeners: set[asyncio.Queue[Event]] = set()

    def publish(self, session: str, kind: str, text: str = "", data: dict[str, Any] | None = None) -> Event:
        """Record an event and hand it to every listener."""
        self.seq += 1
        event = Event(self.seq, session, kind, text, data or {})
        self.events.append(event)
        for queue in self._listeners:
            queue.put_nowait(event)
        return event

    def since(self, seq: int) -> list[Event]:
        """The recorded events after ``seq``."""
        if not self.events or seq >= self.seq:
            return []
        start = max(0, len(self.events) - (self.seq - seq))
        return list(itertools.islice(self.events, start, None))

    def listen(self) -> asyncio.Queue[Event]:
        """A queue that receives every event from now on (call :meth:`leave` when done)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._listeners.add(queue)
        return queue

    def leave(self, queue: asyncio.Queue[Event]) -> None:
        """Stop delivering to ``queue``."""
        self._listeners.discard(queue)


@dataclass
class Input:
    """One user message: its text (attachments' text included) and image parts for the provider."""

    text: str
    parts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Runner:
    """One session's agent, its running task, the current turn's events and the messages waiting for it."""

    agent: Agent
    task: asyncio.Task[None] | None = None
    waiting: deque[Input] = field(default_factory=deque)
    live: list[Event] = field(default_factory=list)
    last: Input | None = None
    finished: float = 0.0
    approvals: dict[str, asyncio.Future[bool]] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Whether a turn is running now."""
        return self.task is not None and not self.task.done()


class Turns:
    """Starts, stops and restarts turns; the session files stay the source of truth."""

    def __init__(self, config: AgentConfig, store: SessionStore, memory: MemoryBridge | None, hub: EventHub) -> None:
        self.config = config
        self.store = store
        self.memory = memory
        self.hub = hub
        self.runners: dict[str, Runner] = {}
        self.hub_mcp: McpHub | None = None
        self._mcp_lock = asyncio.Lock()

    # -- sessions -------------------------------------------------------------------------------------
    def session(self, session_id: str) -> Session | None:
        """The live session object while a turn runs (its metadata edits must reach that object), else the file."""
        runner = self.runners.get(session_id)
        if runner is not None and runner.running:
            return runner.agent.session
        return self.store.by_id(session_id)

    def running_ids(self) -> set[str]:
        """Ids of the sessions with a turn running."""
        return {sid for sid, runner in self.runners.items() if runner.running}

    def live_events(self, session_id: str) -> list[Event]:
        """The events of the turn running in the session (empty when none runs)."""
        runner = self.runners.get(session_id)
        return list(runner.live) if runner is not None and runner.running else []

    def waiting(self, session_id: str) -> int:
        """How many messages wait for the running turn."""
        runner = self.runners.get(session_id)
        return len(runner.waiting) if runner else 0

    def recent(self, within_s: float = PET_CONTINUE_S) -> Session | None:
        """The pet's thread: a running session, else the one that finished last within ``within_s``."""
        running = [r for r in self.runners.values() if r.running]
        if running:
            return max(running, key=lambda r: r.agent.session.updated).agent.session
        done = [r for r in self.runners.values() if r.finished and time.time() - r.finished <= within_s]
        if done:
            return self.store.by_id(max(done, key=lambda r: r.finished).agent.session.id)
        return None

    def new_session(self, prefix: str = "web", save: bool = True) -> Session:
        """A new, empty session named ``web:<time>-<n>`` (saved unless ``save`` is false)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in itertools.count(1):
            name = f"{prefix}:{stamp}-{n}"
            if not self.store.exists(name):
                session = Session(name=name)
                if save:
                    self.store.save(session)
                return session
        raise AssertionError("unreachable")

    def save_meta(self, session: Session) -> None:
        """Save a metadata change (title, pin, archive, unread) without moving the session in the list."""
        self.store.save(session, touch=False)
        self.hub.publish(session.id, "meta")

    async def delete(self, session: Session) -> None:
        """Stop its turn (which saves the session one last time), then remove the session."""
        await self.stop(session.id)
        self.runners.pop(session.id, None)
        self.store.delete(session)
        self.hub.publish(session.id, "deleted")

    # -- turns ----------------------------------------------------------------------------------------
    def agent(self, session: Session) -> Agent:
        """The session's agent (built once; its session object reloaded from the file before each turn)."""
        runner = self.runners.get(session.id)
        if runner is None:
            base = Path(session.project) if session.project else self.config.workspace
            base.mkdir(parents=True, exist_ok=True)
            tools = ToolBox(self.config.tools, base, memory=self.memory, approve=None)
            imagegen.install(self.config, tools)
            agent = Agent(self.config, session, self.store, tools, self.memory)
            runner = self.runners[session.id] = Runner(agent)
            tools.approve = self._approver(session.id, runner)
            agent.emit = self._emitter(session.id, runner)
        elif not runner.running:  # the config may have changed since (a Settings edit): the next turn uses it
            runner.agent.session = session
            runner.agent.config = self.config
            runner.agent.choice = self.config.model(session.preset) or self.config.default
            imagegen.install(self.config, runner.agent.tools)
        return runner.agent

    def send(self, session: Session, message: Input) -> str:
        """Run the message now (``started``) or after the running turn (``queued``)."""
        self.agent(session)
        runner = self.runners[session.id]
        if runner.running:
            runner.waiting.append(message)
            self.hub.publish(session.id, "queued", message.text, {"waiting": len(runner.waiting)})
            return "queued"
        self._start(runner, message)
        return "started"

    def _start(self, runner: Runner, message: Input) -> None:
        runner.last = message
        runner.live = []
        sid = runner.agent.session.id
        runner.task = asyncio.create_task(self._run(runner, message), name=f"memmy-turn-{sid}")
        runner.live.append(self.hub.publish(sid, "start", message.text, {"images": len(message.parts)}))

    async def _mcp(self, runner: Runner) -> None:
        """Give the agent the MCP servers' tools; the servers are connected once, at the process's first turn."""
        if not self.config.tools.mcp_servers:
            return
        async with self._mcp_lock:
            if self.hub_mcp is None:
                self.hub_mcp = McpHub(self.config.tools.mcp_servers)
                await self.hub_mcp.start()
                for problem in self.hub_mcp.problems:
                    runner.live.append(self.hub.publish(runner.agent.session.id, "notice", problem))
        self.hub_mcp.install(runner.agent.tools)

    async def _run(self, runner: Runner, message: Input) -> None:
        agent = runner.agent
        with contextlib.suppress(asyncio.CancelledError):
            await self._mcp(runner)
            await agent.run_turn(message.text, message.parts)
        runner.finished = time.time()
        agent.session.unread = True
        self.store.save(agent.session, touch=False)
        self.hub.publish(agent.session.id, "idle", agent.session.label)  # the label: what a notification says
        if runner.waiting:  # stop() empties it, so a stopped turn starts nothing
            self._start(runner, runner.waiting.popleft())

    def _emitter(self, session_id: str, runner: Runner) -> Callable[[TurnEvent], None]:
        def emit(event: TurnEvent) -> None:
            runner.live.append(self.hub.publish(session_id, event.kind, event.text, dict(event.data)))

        return emit

    def _approver(self, session_id: str, runner: Runner) -> Callable[[str], Any] | None:
        if self.config.tools.exec_approval != "ask":
            return None

        async def approve(command: str) -> bool:
            ask = f"a{len(runner.approvals) + 1}-{int(time.time() * 1000)}"
            future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            runner.approvals[ask] = future
            runner.live.append(self.hub.publish(session_id, "approval", command, {"id": ask}))
            try:
                return await future
            finally:
                runner.approvals.pop(ask, None)

        return approve

    def answer(self, session_id: str, ask: str, allow: bool) -> bool:
        """Answer a shell approval; whether it was still waiting."""
        runner = self.runners.get(session_id)
        future = runner.approvals.get(ask) if runner else None
        if future is None or future.done():
            return False
        future.set_result(allow)
        return True

    async def stop(self, session_id: str) -> bool:
        """Cancel the running turn (recorded as ``cancelled``) and drop the queued messages; whether one ran."""
        runner = self.runners.get(session_id)
        if runner is None or not runner.running or runner.task is None:
            return False
        runner.waiting.clear()
        runner.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner.task
        return True

    async def restart(self, session: Session) -> bool:
        """Stop the running turn (if any) and run its message again in place of the old answer."""
        await self.stop(session.id)
        runner = self.runners.get(session.id)
        fresh = self.store.by_id(session.id) or session
        last = runner.last if runner is not None else None
        users = [i for i, m in enumerate(fresh.messages) if m.get("role") == "user"]
        if not users:
            return False
        cut = users[-1]
        if last is None:
            content = fresh.messages[cut].get("content")
            last = Input(content if isinstance(content, str) else "")
        fresh.messages = fresh.messages[:cut]
        self.store.save(fresh)
        self.hub.publish(session.id, "restart")
        self.send(fresh, last)
        return True

    async def close(self) -> None:
        """Cancel every running turn (the server is stopping; each is recorded as cancelled), close the MCP servers."""
        for session_id in list(self.running_ids()):
            await self.stop(session_id)
        if self.hub_mcp is not None:
            await self.hub_mcp.close()
