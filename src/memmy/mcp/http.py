"""The daemon's streamable-HTTP MCP endpoint (``/mcp``), an ASGI app the daemon mounts next to ``/api/v1``.

Code path: the tools call the daemon's own HTTP API **in-process** (an :class:`httpx.ASGITransport` around the
daemon's Starlette app), exactly as the stdio server calls it over loopback. One code path for both transports
means the same routes, token check, validation, idempotency, namespace headers, API logs and error envelope; the
keymem tools only exist as an HTTP contract anyway. In-process needs no port, cannot fail to connect and does not
block the event loop.

Mounting (in ``create_app``)::

    mcp_http = McpHttpEndpoint(token=lambda: service.config.storage.token)
    routes.append(mcp_http.route("/mcp"))
    app = Starlette(..., lifespan=mcp_http.lifespan)

The MCP SDK is heavy to import (about a second), so nothing of it is loaded until the first ``/mcp`` request;
that request imports it off the event loop and starts the SDK's session manager in a background task. The
``lifespan`` only stops that task and closes the API client at shutdown (without it they end with the loop).

Security: mounted inside the daemon app, :class:`~memmy.server.middleware.GuardMiddleware` already enforces the
bearer token, the loopback-origin rule and the body cap; this endpoint applies the same token and origin rules
itself too, so it stays closed wherever it is mounted. On a team server a person's token is let in as well (the
guard marked it); every tool call then reaches the API with the token and team project of the ``/mcp`` request
it serves, so a person's tools read and write as that person. The transcript tools are hidden here unless the daemon was
started with ``MEMMY_MCP_TRANSCRIPTS=1``: a host session id in the daemon's environment does not count, since the
daemon is shared rather than one host's child.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hmac
import importlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio.to_thread
import httpx
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memmy.daemon_client import DaemonClient, TokenSource
from memmy.mcp.api import api_client

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
INTERNAL_BASE_URL = "http://memmy.internal"


def presented_token(scope: Scope) -> str:
    """``Authorization: Bearer``, then ``x-api-key``, then ``?token=`` / ``?access_token=`` (like the daemon)."""
    headers: dict[str, str] = {
        bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in scope.get("headers", [])
    }
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if headers.get("x-api-key"):
        return headers["x-api-key"].strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    for name in ("token", "access_token"):
        if query.get(name):
            return str(query[name][0])
    return ""


def origin_allowed(scope: Scope) -> bool:
    """No Origin or a loopback page (the daemon's CSRF rule); ``null`` and ``file://`` pages are refused."""
    origin = next((bytes(v).decode("latin-1") for k, v in scope.get("headers", []) if k == b"origin"), None)
    if origin is None:
        return True
    if origin.strip().lower() in ("null", "file://"):
        return False
    return (urlsplit(origin).hostname or "") in LOOPBACK


async def send_error(send: Send, status: int, code: str, message: str) -> None:
    """The daemon's error envelope."""
    body = json.dumps({"error": {"code": code, "message": message, "requestId": ""}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


#: The ``/mcp`` request being served: its token and team-project header, which the tools' in-process API calls
#: present in its place (a team server's person reaches the API as themself, never as the owner). Unset: no token.
_CALLER: contextvars.ContextVar[tuple[bytes, bytes | None] | None] = contextvars.ContextVar("memmy_mcp_caller")
#: The caller's headers an in-process API call carries over from the ``/mcp`` request.
CARRIED = (b"x-memmy-team-project",)


def _caller_headers(scope: Scope) -> tuple[bytes, bytes | None]:
    """The ``/mcp`` request's bearer value (``Bearer <token>`` or empty) and its team-project header."""
    token = presented_token(scope)
    team = next((bytes(v) for k, v in scope.get("headers", []) if bytes(k).lower() == CARRIED[0]), None)
    return (f"Bearer {token}".encode() if token else b""), team


def _in_process(app: ASGIApp) -> ASGIApp:
    """``app`` with its scopes marked in-process (no socket: the daemon's Host guard has nothing to check), each
    call presenting the token (and team project) of the ``/mcp`` request it serves instead of its own."""

    async def marked(scope: Scope, receive: Receive, send: Send) -> None:
        caller = _CALLER.get(None)
        kept = [(k, v) for k, v in scope.get("headers", []) if bytes(k).lower() not in (b"authorization", *CARRIED)]
        if caller is not None and caller[0]:
            kept.append((b"authorization", caller[0]))
        if caller is not None and caller[1]:
            kept.append((CARRIED[0], caller[1]))
        await app({**scope, "headers": kept, "memmy.in_process": True}, receive, send)

    return marked


class McpHttpEndpoint:
    """An ASGI app serving MCP over streamable HTTP (stateless, JSON responses: nothing is held open).

    ``api`` is where the tools send their API calls: ``None`` (default) for the app this endpoint is mounted in,
    called in-process; another ASGI app; or a base URL such as ``http://127.0.0.1:18960``. ``token`` (a string or
    a zero-argument callable, read per request) is both required from MCP callers and presented to the API.
    """

    def __init__(
        self,
        api: ASGIApp | str | None = None,
        token: TokenSource = None,
        *,
        env: Mapping[str, str] | None = None,
        transcripts: bool | None = None,
    ) -> None:
        self._api_target = api
        self._token = token
        self._env = dict(os.environ if env is None else env)
        self._transcripts = transcripts
        self._client: DaemonClient | None = None
        self._manager: Any = None  # mcp.server.streamable_http_manager.StreamableHTTPSessionManager, once started
        self._background: asyncio.Task[None] | None = None
        self._start_lock: asyncio.Lock | None = None

    def route(self, path: str = "/mcp") -> Route:
        """A Starlette route for ``path`` (exact match, every method), to add to the daemon's routes."""
        return Route(path, endpoint=self)

    def expected_token(self) -> str | None:
        """The token callers must present (None or empty: no token configured)."""
        return self._token() if callable(self._token) else self._token

    @property
    def running(self) -> bool:
        """Whether the MCP session manager is serving."""
        return self._manager is not None and self._background is not None and not self._background.done()

    def _api(self) -> DaemonClient:
        if self._client is None:
            raise RuntimeError("the MCP endpoint has not received a request yet")
        return self._client

    def _make_client(self, scope: Scope) -> DaemonClient:
        target = self._api_target if self._api_target is not None else scope.get("app")
        headers = {"x-memmy-source": "mcp"}
        if isinstance(target, str):
            return api_client(target, token=self._token, headers=headers)
        if target is None:
            raise RuntimeError("McpHttpEndpoint needs api= when it is not mounted inside a Starlette app")
        transport = httpx.ASGITransport(app=_in_process(target))
        return api_client(INTERNAL_BASE_URL, token=self._token, headers=headers, transport=transport)

    async def _ensure_running(self) -> None:
        """Import the SDK (off the event loop) and start its session manager in a background task, once."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self.running:
                return
            manager_module = await anyio.to_thread.run_sync(
                importlib.import_module, "mcp.server.streamable_http_manager"
            )
            security = await anyio.to_thread.run_sync(importlib.import_module, "mcp.server.transport_security")
            server_module = await anyio.to_thread.run_sync(importlib.import_module, "memmy.mcp.server")
            transcripts = self._transcripts
            if transcripts is None:
                transcripts = server_module.transcripts_enabled(self._env, host_session=False)
            server = server_module.build_server(self._api, env=self._env, transcripts=transcripts)
            manager = manager_module.StreamableHTTPSessionManager(
                app=server,
                json_response=True,
                stateless=True,
                # Host/Origin are checked in __call__ (and by the daemon's GuardMiddleware) with the daemon's rules.
                security_settings=security.TransportSecuritySettings(enable_dns_rebinding_protection=False),
            )
            started = asyncio.Event()

            async def run_manager() -> None:
                async with manager.run():
                    started.set()
                    await asyncio.Event().wait()

            self._manager = manager
            self._background = asyncio.get_running_loop().create_task(run_manager(), name="memmy-mcp-sessions")
            waiter = asyncio.ensure_future(started.wait())
            await asyncio.wait({waiter, self._background}, return_when=asyncio.FIRST_COMPLETED)
            if not started.is_set():
                waiter.cancel()
                self._manager = None
                await self._background  # re-raises why the session manager could not start

    @asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """Stop the MCP session manager and close the API client at shutdown (``Starlette(lifespan=...)``)."""
        try:
            yield
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop the session manager task (if it was started) and close the API client."""
        task, self._background, self._manager = self._background, None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if not origin_allowed(scope):
            await send_error(send, 403, "forbidden", "cross-origin requests from non-local pages are refused")
            return
        expected = self.expected_token()
        person = scope.get("state", {}).get("person")  # a team server's person, whom GuardMiddleware let in
        if expected and not person and not hmac.compare_digest(presented_token(scope).encode(), expected.encode()):
            await send_error(send, 401, "unauthorized", "invalid memory service token")
            return
        _CALLER.set(_caller_headers(scope))  # read by this request's in-process API calls (the tools' context)
        if scope.get("method") == "GET":
            # Stateless JSON mode has no server-initiated messages: no SSE stream to hold open (spec: answer 405).
            await send_error(send, 405, "invalid_argument", "GET is not allowed on the MCP endpoint; POST JSON-RPC")
            return
        if self._client is None:
            self._client = self._make_client(scope)
        if not self.running:
            await self._ensure_running()
        await self._manager.handle_request(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        """Support running the endpoint as a standalone ASGI app (e.g. under uvicorn with ``api=<url>``)."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def build_asgi_app(api: ASGIApp | str | None = None, token: TokenSource = None) -> McpHttpEndpoint:
    """The ``/mcp`` endpoint: ``api`` is the daemon app, its URL, or None for the app it is mounted in."""
    return McpHttpEndpoint(api, token)
