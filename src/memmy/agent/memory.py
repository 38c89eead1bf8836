"""The agent's memory client: the daemon's session and turn routes (as the hooks use them) plus the
``memmy-memory`` tools, through the :class:`~memmy.daemon_client.DaemonClient` with the CLI's URL/token
resolution. Every call fails open: a daemon that is down, slow or refusing turns memory off for that call and
records why, never the turn.

The turn path is kept short: requests go over kept-alive connections (:mod:`memmy.agent.daemon_link`), the
memory session is opened once per agent session (when the runtime starts, in parallel with the MCP servers), and
the capture (turn complete) is handed to a background thread (:mod:`memmy.agent.capture_queue`)."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from memmy.agent.capture_queue import CaptureQueue
from memmy.agent.daemon_link import DaemonLink
from memmy.cli.client import ClientSettings
from memmy.config import load_config
from memmy.daemon_client import DaemonClient, DaemonError, DaemonTimeout, DaemonUnreachable, Route, answers, routes
from memmy.errors import MemmyError
from memmy.hook.runtime import packet
from memmy.redact import redact_json
from memmy.sources.redact import redact

SOURCE = "memmy"
ADAPTER = "memmy-agent"
T = TypeVar("T")


def short_hash(*parts: str) -> str:
    """A short stable hash (memory session ids)."""
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:20]


@dataclass
class Recall:
    """What turn start gave this turn: ids to complete it and the markdown memory told the model."""

    session_id: str
    turn_id: str
    query: str
    user: str | None = None
    markdown: str = ""
    memory_ids: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    elapsed_ms: float = 0.0

    def wrapped(self, request: str) -> str:
        """The user message the model sees: recalled memory as history, the request as authoritative."""
        return packet(self.markdown, request) if self.markdown.strip() else request


def resolve_settings(config_file: str | None = None) -> ClientSettings:
    """The daemon URL and bearer token, resolved exactly as ``memmy-memory`` resolves them."""
    try:
        config = load_config(config_file)
    except MemmyError:
        config = None
    return ClientSettings.resolve(url=None, token=None, user_id=None, source=SOURCE, config=config)


def _redact_value(value: Any) -> Any:
    """Redact secrets anywhere inside a JSON value (tool inputs), on its decoded strings (a line break in a
    heredoc is a line break to the rules, not the two characters of its JSON escape)."""
    return redact_json(value)


class MemoryBridge:
    """Fail-open async client of the memory daemon for one agent process."""

    def __init__(
        self,
        settings: ClientSettings,
        *,
        enabled: bool = True,
        timeout_s: float = 5.0,
        source: str = SOURCE,
        spool: Path | None = None,
    ) -> None:
        self.settings = settings
        self.enabled = enabled
        self.source = source
        self.error: str | None = None  # why the last call failed (None: memory is working)
        self.warned = False
        self._opened: set[str] = set()
        headers = {"x-memmy-source": source}
        if settings.user_id:
            headers["x-memmy-user-id"] = settings.user_id
        if settings.team_project:  # the folder the agent started in opted into a team project
            headers["x-memmy-team-project"] = settings.team_project
        self._link = DaemonLink(settings.url, {}, timeout_s=timeout_s, ca=settings.ca)
        self._client = DaemonClient(settings.url, token=settings.token, headers=headers, send=self._link.request)
        if settings.token:
            headers["authorization"] = f"Bearer {settings.token}"
        self._captures = CaptureQueue(settings.url, headers, spool=spool, on_error=self._capture_error, ca=settings.ca)

    async def aclose(self) -> None:
        """Deliver the captures still queued, then close the connections."""
        await asyncio.to_thread(self._captures.close)
        await self._link.aclose()

    @property
    def state(self) -> str:
        """``on``, ``off`` or ``down`` for the status line."""
        if not self.enabled:
            return "off"
        return "down" if self.error else "on"

    def take_warning(self) -> str | None:
        """The 'memory is down' message, once per outage."""
        if self.error and not self.warned:
            self.warned = True
            return f"memory unavailable ({self.error}); continuing without it"
        return None

    async def _call(
        self,
        route: Route[T],
        body: dict[str, Any] | None = None,
        workspace: str | None = None,
        user: str | None = None,
        **path: str,
    ) -> T:
        """One typed request (``path``: the route's ``{names}``); see :meth:`_send`."""
        return cast(T, await self._send(route.method, route.url(**path), body, workspace, user))

    async def _send(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        workspace: str | None = None,
        user: str | None = None,
    ) -> Any:
        """One request through the daemon client; a failure is recorded (memory goes ``down``) and raised."""
        headers = {"x-memmy-workspace-path": workspace} if workspace else {}
        if user:
            headers["x-memmy-user-id"] = user
        try:
            answer = await self._client.arequest(method, path, body, headers)
        except DaemonUnreachable:
            self._fail(f"daemon not running at {self.settings.url}")
            raise
        except DaemonTimeout:
            self._fail(f"daemon at {self.settings.url} did not answer in time")
            raise
        except DaemonError as exc:
            if exc.status == 401:
                self._fail("daemon refused the token (HTTP 401): check memmyMemory.storage.token")
            shown = path.removeprefix("/api/v1")
            raise DaemonError(
                f"HTTP {exc.status} on {method} {shown}: {exc.message}", exc.status, exc.code, exc.body
            ) from None
        self.error = None
        self.warned = False
        return answer

    def _fail(self, reason: str) -> None:
        if self.error != reason:
            self.warned = False
        self.error = reason

    def _capture_error(self, reason: str | None) -> None:
        """The capture thread's report (None: a capture went through)."""
        if reason is None:
            if self.error and "capture" in self.error:
                self.error = None
        else:
            self._fail(reason)

    def session_id(self, session_key: str) -> str:
        """The memory session id of an agent session (stable across processes)."""
        return f"{ADAPTER}-{short_hash(self.source, session_key)}"

    async def _open(self, session_id: str, workspace: str | None, user: str | None = None, force: bool = False) -> None:
        if session_id in self._opened and not force:
            return
        body = {"sessionId": session_id, "source": self.source}
        if workspace:
            body["workspacePath"] = workspace
        await self._call(routes.SESSIONS_OPEN, body, workspace, user)
        self._opened.add(session_id)

    async def open_session(self, session_key: str, workspace: str | None = None, user: str | None = None) -> bool:
        """Open the memory session ahead of the first turn (off the turn's critical path); False when it failed."""
        if not self.enabled:
            return False
        try:
            await self._open(self.session_id(session_key), workspace, user)
        except (DaemonError, ValueError) as exc:
            if self.error is None:
                self._fail(f"session open failed: {str(exc)[:200]}")
            return False
        return True

    async def start_turn(
        self, session_key: str, query: str, workspace: str | None = None, user: str | None = None
    ) -> Recall | None:
        """Open/continue the memory session and start the turn; None when memory is off or down."""
        if not self.enabled:
            return None
        started_at = time.perf_counter()
        session_id = self.session_id(session_key)
        turn_id = f"{ADAPTER}-turn-{uuid.uuid4().hex[:20]}"
        body: dict[str, Any] = {
            "sessionId": session_id,
            "turnId": turn_id,
            "query": query,
            "source": self.source,
            "adapterId": ADAPTER,
            "requestId": f"start:{turn_id}",
        }
        opened = False
        try:
            await self._open(session_id, workspace, user)
            opened = True
            try:
                started = await self._call(routes.TURNS_START, body, workspace, user)
            except DaemonError as exc:
                if exc.status not in (404, 409):
                    raise
                # The daemon forgot or closed the session: open it again (a closed one gets a fresh id).
                if exc.status == 409:
                    session_id = f"{session_id}-{uuid.uuid4().hex[:6]}"
                    body["sessionId"] = session_id
                await self._open(session_id, workspace, user, force=True)
                started = await self._call(routes.TURNS_START, body, workspace, user)
        except (DaemonError, ValueError) as exc:
            if self.error is None:
                self._fail(f"turn start failed: {str(exc)[:200]}")
            if not opened:
                return None
            # The session is open but the start timed out or failed (a daemon busy loading its model): the turn
            # goes on without recalled memory, and is still captured (a completion needs no start).
            return Recall(user=user, session_id=session_id, turn_id=turn_id, query=query, status=["start_failed"])
        if not isinstance(started, dict):
            self._fail("turn start answered something other than a JSON object")
            return None
        injected = started.get("injectedContext") or {}
        return Recall(
            user=user,
            session_id=session_id,
            turn_id=turn_id,
            query=query,
            markdown=str(injected.get("markdown") or ""),
            memory_ids=list(started.get("sourceMemoryIds") or []),
            status=list(started.get("status") or []),
            elapsed_ms=(time.perf_counter() - started_at) * 1000,
        )

    def capture_turn(
        self,
        recall: Recall,
        answer: str,
        status: str,
        tool_calls: list[dict[str, Any]],
        workspace: str | None = None,
        usage: dict[str, int] | None = None,
    ) -> Future[bool] | None:
        """Queue the turn's capture (request, answer, tool calls with redacted output, outcome) for the capture
        thread and return at once; the future says whether the daemon stored it. None when memory is off."""
        if not self.enabled:
            return None

        def prepare() -> dict[str, Any]:  # runs in the capture thread: redaction stays off the event loop
            calls = [
                {
                    **call,
                    "input": _redact_value(call.get("input")),
                    "output": redact(str(call.get("output") or "")),
                    "error": redact(str(call["error"])) if call.get("error") else None,
                }
                for call in tool_calls
            ]
            body: dict[str, Any] = {
                "sessionId": recall.session_id,
                "query": redact(recall.query),
                "answer": redact(answer) or "(no answer)",
                "status": status,
                "toolCalls": calls,
                "source": self.source,
                "adapterId": ADAPTER,
                "requestId": f"complete:{recall.turn_id}",
            }
            if usage:
                body["usage"] = usage
            return body

        headers = {"x-memmy-workspace-path": workspace} if workspace else {}
        if recall.user:
            headers["x-memmy-user-id"] = recall.user
        return self._captures.submit(routes.TURNS_COMPLETE.url(turn_id=recall.turn_id), prepare, headers)

    async def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued capture is delivered (or spooled)."""
        return await asyncio.to_thread(self._captures.flush, timeout_s)

    async def search(self, query: str, limit: int = 8, workspace: str | None = None) -> answers.SearchAnswer:
        """``memory/search`` (the model's ``memmy_memory_search`` tool)."""
        return await self._call(routes.MEMORY_SEARCH, {"query": query, "limit": limit}, workspace)

    async def get(self, memory_id: str) -> answers.MemoryDetail:
        """``GET memory/{id}``."""
        if not memory_id or "/" in memory_id or ".." in memory_id:
            raise ValueError("memory id: expected an id like trace_… or mem_…")
        return await self._call(routes.MEMORY_GET, memory_id=memory_id)

    async def add(
        self, content: str, tags: list[str] | None = None, workspace: str | None = None
    ) -> answers.MemoryAdded:
        """``memory/add``."""
        body: dict[str, Any] = {"content": redact(content)}
        if tags:
            body["tags"] = tags
        return await self._call(routes.MEMORY_ADD, body, workspace)

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any daemon route under ``/api/v1`` (the workbench's ``/dream`` commands); raises :class:`DaemonError`."""
        return await self._send(method, path, body)

    async def health(self) -> dict[str, Any] | None:
        """The daemon's health, or None when it cannot be reached."""
        try:
            result = await self._send("GET", "/health")
        except (DaemonError, ValueError):
            return None
        return result if isinstance(result, dict) else None
