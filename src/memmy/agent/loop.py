"""The agent loop: one turn = memory turn start, streamed model calls with tool calls until the model answers,
memory turn complete. Compaction summarises old messages when the conversation nears the model's window.
Provider failures end the turn with a clear message and keep the session; cancellation (Ctrl-C, ``/stop``)
ends it as ``cancelled`` without losing anything."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.agent.config import AgentConfig, ModelChoice
from memmy.agent.memory import MemoryBridge, Recall
from memmy.agent.providers import Completion, Provider, ProviderError, build_provider
from memmy.agent.sessions import Session, SessionStore
from memmy.agent.tools import ToolBox
from memmy.agent.usage import UsageBook
from memmy.sources.redact import redact

SUMMARY_PROMPT = (
    "Summarise the conversation below for your own later use: the user's goals, decisions, facts learned, files "
    "touched, open questions. Be concise; keep exact names, paths and numbers."
)
KEEP_RECENT = 6
#: What a provider gets of a saved message (the session keeps more: the workbench's ``artifacts`` of an answer).
MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


@dataclass
class TurnEvent:
    """Something the front end may show: memory, text, tool_call, tool_result, notice, error, compaction, done."""

    kind: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


Emit = Callable[[TurnEvent], None]


@dataclass
class TurnResult:
    """How a turn ended."""

    answer: str = ""
    status: str = "succeeded"  # succeeded | failed | cancelled
    error: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    recall: Recall | None = None
    elapsed_ms: float = 0.0


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """About four characters a token, over contents and tool calls."""
    chars = 0
    for message in messages:
        chars += len(str(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            chars += len(json.dumps(call))
    return chars // 4 + 4 * len(messages)


class Agent:
    """One session's agent: model, tools, memory, and the turn loop."""

    def __init__(
        self,
        config: AgentConfig,
        session: Session,
        store: SessionStore,
        tools: ToolBox,
        memory: MemoryBridge | None = None,
        emit: Emit | None = None,
        meter: UsageBook | None = None,
        provider_for: Callable[[ModelChoice], Provider] = build_provider,
    ) -> None:
        self.config = config
        self.provider_for = provider_for  # a host of many sessions shares one client a model
        self.session = session
        self.store = store
        self.tools = tools
        self.memory = memory
        self.emit: Emit = emit or (lambda event: None)
        self.appended: list[str] = []
        self.last_recall: Recall | None = None
        self.last_usage: dict[str, int] = {}
        self.meter = meter or UsageBook(config.home)
        self.running = False
        self.parts: list[dict[str, Any]] = []  # image parts the current turn's user message carries
        self._provider: Provider | None = None
        self._saving: asyncio.Task[None] | None = None  # the turn's first write, on disk while the model answers
        self._unsaved = False  # the user's message is not on disk yet (written once the model has the request)
        choice = config.model(session.preset) or config.default
        self.choice: ModelChoice | None = choice

    @property
    def workspace(self) -> Path:
        """Where file tools and the shell work: the session's project, else the workspace."""
        return Path(self.session.project) if self.session.project else self.config.workspace

    @property
    def provider(self) -> Provider:
        """The provider for the current model (built lazily)."""
        if self.choice is None:
            raise ProviderError("no model configured: run `memmy onboard` (or set agents.defaults)", "config")
        if self._provider is None or self._provider.choice != self.choice:
            self._provider = self.provider_for(self.choice)
        return self._provider

    def provider_ready(self, provider: Provider) -> None:
        """Use ``provider``, built already for the current model (a host of many sessions shares one)."""
        self._provider = provider

    def use_preset(self, name: str) -> ModelChoice:
        """Switch to a named preset (``/model fast``); raises KeyError for an unknown one."""
        choice = self.config.model(name)
        if choice is None:
            raise KeyError(name)
        self.choice = choice
        self.session.preset = name
        self.store.save(self.session)
        return choice

    def system_prompt(self) -> str:
        """The system message: who the agent is, where it works, the active goal."""
        lines = [
            self.config.system_prompt
            or "You are memmy, a capable terminal agent with long-term memory shared with the user's other agents.",
            f"Working directory: {self.workspace}",
            "Use tools when they help; keep answers short and concrete.",
        ]
        goal = self.session.goal
        if goal and goal.get("status") == "active":
            lines.append(f"Persistent goal (keep working towards it): {goal.get('text')}")
        return "\n".join(lines)

    def _view(self, user_index: int, recall: Recall | None) -> list[dict[str, Any]]:
        messages = [{k: v for k, v in m.items() if k in MESSAGE_KEYS} for m in self.session.messages]
        if (recall is not None or self.parts) and 0 <= user_index < len(messages):
            content = str(messages[user_index]["content"])
            content = recall.wrapped(content) if recall is not None else content
            # Images go to the provider for this turn only; the session file keeps the text (and their names).
            messages[user_index]["content"] = (
                [{"type": "text", "text": content}, *self.parts] if self.parts else content
            )
        return [{"role": "system", "content": self.system_prompt()}, *messages]

    async def compact(self, force: bool = False) -> str | None:
        """Summarise older messages when the conversation nears the window (or when forced); the summary."""
        if self.choice is None:
            return None
        messages = self.session.messages
        limit = int(self.choice.context_window * self.config.compact_ratio)
        if not force and estimate_tokens(messages) < limit:
            return None
        starts = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        cut = next((i for i in reversed(starts) if len(messages) - i >= KEEP_RECENT), None)
        if cut is None or cut == 0:
            cut = starts[-1] if starts and starts[-1] > 0 else None
        if cut is None:
            return None
        head = messages[:cut]
        transcript = "\n".join(f"{m.get('role')}: {str(m.get('content') or '')[:4000]}" for m in head)
        try:
            done = await self.provider.stream(
                [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": transcript}], []
            )
            summary = done.text.strip()
        except ProviderError as exc:
            self.emit(TurnEvent("notice", f"compaction summary failed ({exc}); keeping the first lines instead"))
            summary = ""
        if not summary:
            summary = "\n".join(f"- {m.get('role')}: {str(m.get('content') or '')[:200]}" for m in head[-20:])
        record = {"at": time.time(), "replaced": len(head), "summary": summary}
        self.session.compactions.append(record)
        self.session.messages = [
            {"role": "user", "content": f"[Summary of the earlier conversation]\n{summary}"},
            {"role": "assistant", "content": "Understood; I have the summary of our earlier conversation."},
            *messages[cut:],
        ]
        self.store.save(self.session)
        self.emit(TurnEvent("compaction", summary, record))
        return summary

    async def run_turn(self, text: str, parts: list[dict[str, Any]] | None = None) -> TurnResult:
        """Run one turn to its end; cancellation propagates after the turn is recorded as cancelled.

        ``parts`` are OpenAI-shaped content parts (images) sent with this turn's message but not saved."""
        started = time.perf_counter()
        result = TurnResult()
        self.running = True
        self.parts = list(parts or [])
        self.appended = []
        # Recall first: its request is on the wire while the agent compacts, saves the session and gets the
        # provider ready, so the turn waits only for what is left of the daemon's answer.
        recalling = self._start_recall(text)
        if recalling is not None:
            await asyncio.sleep(0)  # one loop pass: the request is sent before the synchronous work below
        try:
            await self.compact()
        except asyncio.CancelledError:
            self.running = False
            if recalling is not None:
                recalling.cancel()
            raise
        self.session.messages.append({"role": "user", "content": text})
        user_index = len(self.session.messages) - 1
        self._unsaved = True  # written once the model answers: the request goes first (see _save_once_asked)
        await self._ready_provider()
        recall: Recall | None = None
        if recalling is not None and self.memory is not None:
            try:
                recall = await recalling
            except asyncio.CancelledError:
                self.running = False
                recalling.cancel()
                raise
            warning = self.memory.take_warning()
            if warning:
                self.emit(TurnEvent("notice", warning))
        self.last_recall = result.recall = recall
        if recall is not None:
            self.emit(TurnEvent("memory", recall.markdown, {"ids": recall.memory_ids, "status": recall.status}))
        try:
            await self._iterate(user_index, recall, result)
        except asyncio.CancelledError:
            result.status = "cancelled"
            result.error = "stopped by the user"
            self._close_dangling_calls()
            await self._finish(result, recall, started)
            raise
        except ProviderError as exc:
            result.status, result.error = "failed", str(exc)
            self.emit(TurnEvent("error", str(exc), {"kind": exc.kind}))
        await self._finish(result, recall, started)
        return result

    def _start_recall(self, text: str) -> asyncio.Task[Recall | None] | None:
        """Turn start as a task of its own (None when memory is off: the turn then goes on without yielding)."""
        if self.memory is None or not self.memory.enabled:
            return None
        return asyncio.create_task(self.memory.start_turn(self.session.key, text, str(self.workspace)))

    async def _ready_provider(self) -> None:
        """Build the provider now (while recall runs); a configuration problem is reported by the first call.

        A provider not built yet is built in a thread: importing its SDK takes a second or more on a busy machine,
        and blocking the event loop that long would time out the recall request already on its way."""
        if self._provider is not None and self._provider.choice == self.choice:
            return
        try:
            await asyncio.to_thread(lambda: self.provider)
        except ProviderError:
            pass

    async def _iterate(self, user_index: int, recall: Recall | None, result: TurnResult) -> None:
        def on_text(delta: str) -> None:
            self._save_once_asked()
            self.emit(TurnEvent("text", delta))

        for _ in range(max(1, self.config.max_tool_iterations)):
            done: Completion = await self.provider.stream(self._view(user_index, recall), self.tools.specs(), on_text)
            self._count(done.usage, result)
            await asyncio.to_thread(self.meter.record, "primary", sum(done.usage.values()), done.cost)
            message: dict[str, Any] = {"role": "assistant", "content": done.text}
            if done.tool_calls:
                message["tool_calls"] = [call.as_message() for call in done.tool_calls]
            self.session.messages.append(message)
            if done.text:
                result.answer = done.text
            if not done.tool_calls and not self.appended:
                return  # the answer: saved by _finish, with nothing awaited between (one write, not two)
            await self._save()
            if not done.tool_calls:  # Tab-appended input that arrived after the model's last call
                self._take_appended()
                continue
            for call in done.tool_calls:
                self.emit(TurnEvent("tool_call", call.name, {"id": call.id, "arguments": call.arguments}))
                output, ok = await self.tools.call(call.name, call.arguments)
                self.emit(TurnEvent("tool_result", output, {"id": call.id, "name": call.name, "ok": ok}))
                self.session.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
                result.tool_calls.append(
                    {
                        "id": call.id,
                        "name": call.name,
                        "input": _parse_args(call.arguments),
                        "output": output if ok else "",
                        "error": None if ok else output,
                        "success": ok,
                    }
                )
            await self._save()
            self._take_appended()
        result.status = "failed"
        result.error = (
            f"stopped after {self.config.max_tool_iterations} tool rounds (agents.defaults.maxToolIterations)"
        )
        self.emit(TurnEvent("error", result.error, {"kind": "tool_loop"}))

    def _save_once_asked(self) -> None:
        """The turn's first write, started when the model's answer begins (the model has the request): the session
        with the user's message is on disk while the model answers, and its encoding and the thread it is written in
        no longer come between the turn and its request (many chats' turns at once: each one's write delayed every
        request after it)."""
        if self._unsaved:
            self._unsaved = False
            self._saving = asyncio.create_task(self.store.save_async(self.session))

    async def _save(self) -> None:
        """Write the session off the event loop, after the write still in flight (the file ends at the newest)."""
        self._unsaved = False
        if self._saving is not None:
            saving, self._saving = self._saving, None
            await saving
        await self.store.save_async(self.session)

    def _take_appended(self) -> None:
        for extra in self.appended:
            self.session.messages.append({"role": "user", "content": extra})
            self.emit(TurnEvent("notice", f"appended to the running turn: {extra}"))
        self.appended = []

    def _count(self, usage: dict[str, int], result: TurnResult) -> None:
        for key, value in usage.items():
            result.usage[key] = result.usage.get(key, 0) + value
            self.session.usage[key] = self.session.usage.get(key, 0) + value
        self.last_usage = dict(usage)
        goal = self.session.goal
        if goal and goal.get("status") == "active":
            goal["used"] = int(goal.get("used", 0)) + sum(usage.values())
            if goal.get("budget") and goal["used"] >= int(goal["budget"]):
                goal["status"] = "paused"
                self.emit(TurnEvent("notice", f"goal paused: its budget of {goal['budget']} tokens is spent"))

    def _close_dangling_calls(self) -> None:
        """After a cancel, answer every tool call that has no result so the conversation stays valid."""
        answered = {m.get("tool_call_id") for m in self.session.messages if m.get("role") == "tool"}
        for message in list(self.session.messages):
            for call in message.get("tool_calls") or []:
                if call["id"] not in answered:
                    self.session.messages.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": "cancelled by the user"}
                    )

    async def _finish(self, result: TurnResult, recall: Recall | None, started: float) -> None:
        self.running = False
        await self._save()
        result.elapsed_ms = (time.perf_counter() - started) * 1000
        if self.memory is not None and recall is not None:
            # Capture runs off the turn's critical path (the capture thread): the answer is out, the next turn
            # need not wait, and a cancelled event loop cannot lose it.
            answer = result.answer or (f"[{result.status}] {result.error}" if result.error else "")
            self.memory.capture_turn(
                recall, answer, result.status, list(result.tool_calls), str(self.workspace), result.usage or None
            )
        self.emit(TurnEvent("done", result.answer, {"status": result.status, "error": result.error}))

    async def flush(self) -> None:
        """Wait for the captures still in flight (before exit, or when a caller needs them stored)."""
        if self.memory is not None:
            await self.memory.flush()

    async def prepare(self) -> None:
        """Open the memory session before the first turn (the runtime does it while MCP servers start)."""
        if self.memory is not None:
            await self.memory.open_session(self.session.key, str(self.workspace))


def _parse_args(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return {"raw": redact(arguments)[:2000]}  # redacted whole: a cut could leave half a key unrecognised
