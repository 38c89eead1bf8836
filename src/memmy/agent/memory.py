"""The agent's memory client: the daemon's session and turn routes (as the hooks use them) plus the
``memmy-memory`` tools, over HTTP with the CLI's URL/token resolution. Every call fails open: a daemon that is
down, slow or refusing turns memory off for that call and records why, never the turn."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from memmy.cli.client import ClientSettings
from memmy.config import load_config
from memmy.errors import MemmyError
from memmy.hook.runtime import packet
from memmy.sources.redact import redact

SOURCE = "memmy"
ADAPTER = "memmy-agent"


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
    """Redact secrets anywhere inside a JSON value (tool inputs)."""
    try:
        return json.loads(redact(json.dumps(value, ensure_ascii=False)))
    except ValueError:
        return redact(str(value))


class MemoryBridge:
    """Fail-open async client of the memory daemon for one agent process."""

    def __init__(
        self, settings: ClientSettings, *, enabled: bool = True, timeout_s: float = 5.0, source: str = SOURCE
    ) -> None:
        self.settings = settings
        self.enabled = enabled
        self.source = source
        self.error: str | None = None  # why the last call failed (None: memory is working)
        self.warned = False
        self._opened: set[str] = set()
        headers = {"accept": "application/json", "content-type": "application/json", "x-memmy-source": source}
        if settings.token:
            headers["authorization"] = f"Bearer {settings.token}"
        if settings.user_id:
            headers["x-memmy-user-id"] = settings.user_id
        self._http = httpx.AsyncClient(
            base_url=settings.url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=1.0)
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

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
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        workspace: str | None = None,
        user: str | None = None,
    ) -> Any:
        headers = {"x-memmy-workspace-path": workspace} if workspace else {}
        if user:
            headers["x-memmy-user-id"] = user
        try:
            response = await self._http.request(method, "/api/v1" + path, json=body, headers=headers)
        except httpx.ConnectError:
            self._fail(f"daemon not running at {self.settings.url}")
            raise
        except httpx.TimeoutException:
            self._fail(f"daemon at {self.settings.url} did not answer in time")
            raise
        if response.status_code == 401:
            self._fail("daemon refused the token (HTTP 401): check memmyMemory.storage.token")
            response.raise_for_status()
        if response.status_code >= 400:
            response.raise_for_status()
        self.error = None
        self.warned = False
        return response.json()

    def _fail(self, reason: str) -> None:
        if self.error != reason:
            self.warned = False
        self.error = reason

    async def _open(self, session_id: str, workspace: str | None, user: str | None = None, force: bool = False) -> None:
        if session_id in self._opened and not force:
            return
        body = {"sessionId": session_id, "source": self.source}
        if workspace:
            body["workspacePath"] = workspace
        await self._call("POST", "/sessions/open", body, workspace, user)
        self._opened.add(session_id)

    async def start_turn(
        self, session_key: str, query: str, workspace: str | None = None, user: str | None = None
    ) -> Recall | None:
        """Open/continue the memory session and start the turn; None when memory is off or down."""
        if not self.enabled:
            return None
        started_at = time.perf_counter()
        session_id = f"{ADAPTER}-{short_hash(self.source, session_key)}"
        turn_id = f"{ADAPTER}-turn-{uuid.uuid4().hex[:20]}"
        body: dict[str, Any] = {
            "sessionId": session_id,
            "turnId": turn_id,
            "query": query,
            "source": self.source,
            "adapterId": ADAPTER,
            "requestId": f"start:{turn_id}",
        }
        try:
            await self._open(session_id, workspace, user)
            try:
                started = await self._call("POST", "/turns/start", body, workspace, user)
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code not in (404, 409):
                    raise
                # The daemon forgot or closed the session: open it again (a closed one gets a fresh id).
                if exc.response.status_code == 409:
                    session_id = f"{session_id}-{uuid.uuid4().hex[:6]}"
                    body["sessionId"] = session_id
                await self._open(session_id, workspace, user, force=True)
                started = await self._call("POST", "/turns/start", body, workspace, user)
        except (httpx.HTTPError, ValueError) as exc:
            if self.error is None:
                self._fail(f"turn start failed: {str(exc)[:200]}")
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

    async def complete_turn(
        self,
        recall: Recall,
        answer: str,
        status: str,
        tool_calls: list[dict[str, Any]],
        workspace: str | None = None,
        usage: dict[str, int] | None = None,
    ) -> bool:
        """Capture the turn (request, answer, tool calls with redacted output, outcome); False on failure."""
        if not self.enabled:
            return False
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
        try:
            await self._call("POST", f"/turns/{recall.turn_id}/complete", body, workspace, recall.user)
        except (httpx.HTTPError, ValueError) as exc:
            if self.error is None:
                self._fail(f"turn capture failed: {str(exc)[:200]}")
            return False
        return True

    async def search(self, query: str, limit: int = 8, workspace: str | None = None) -> Any:
        """``memory/search`` (the model's ``memmy_memory_search`` tool)."""
        return await self._call("POST", "/memory/search", {"query": query, "limit": limit}, workspace)

    async def get(self, memory_id: str) -> Any:
        """``GET memory/{id}``."""
        if not memory_id or "/" in memory_id or ".." in memory_id:
            raise ValueError("memory id: expected an id like trace_… or mem_…")
        return await self._call("GET", f"/memory/{memory_id}")

    async def add(self, content: str, tags: list[str] | None = None, workspace: str | None = None) -> Any:
        """``memory/add``."""
        body: dict[str, Any] = {"content": redact(content)}
        if tags:
            body["tags"] = tags
        return await self._call("POST", "/memory/add", body, workspace)

    async def health(self) -> dict[str, Any] | None:
        """The daemon's health, or None when it cannot be reached."""
        try:
            result = await self._call("GET", "/health")
        except (httpx.HTTPError, ValueError):
            return None
        return result if isinstance(result, dict) else None
