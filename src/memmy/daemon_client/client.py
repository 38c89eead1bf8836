"""The daemon client: every request a front end sends to ``/api/v1`` (the CLI, the MCP tools, the agent's memory
bridge) goes through :class:`DaemonClient`, with one error mapping.

A typed call names a route of :mod:`memmy.daemon_client.routes` (generated from the daemon's route table) and gets
its answer type back::

    found = client.call(routes.MEMORY_SEARCH, {"query": "deploy"})          # SearchAnswer
    detail = await client.acall(routes.MEMORY_GET, memory_id="trace_0a1b")  # MemoryDetail

``request`` / ``arequest`` send a raw method and path (a route outside the table, such as the panel's sign-in).
Requests go over httpx (sync and async; any transport, e.g. an ``ASGITransport`` around the daemon app) or, on
either side, over a caller's own sender (the agent's kept-alive connections, its capture thread's). httpx is
imported on the first request, so a CLI that only prints ``--help`` never loads it.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlencode

from memmy.daemon_client.route import Route
from memmy.errors import MemmyError

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")
#: A bearer token, or a function read on every request (a reloaded config token is picked up).
TokenSource = str | Callable[[], str | None] | None
#: ``(method, path, JSON body or None, headers) -> (status, decoded JSON body, or its text, or None)``.
AsyncSend = Callable[[str, str, Any, dict[str, str]], Awaitable[tuple[int, Any]]]
#: The same for a synchronous caller's own connection (the agent's capture thread).
SyncSend = Callable[[str, str, Any, dict[str, str]], tuple[int, Any]]
#: Called once when the daemon cannot be reached; True: it was started, send again.
Reviver = Callable[[], Awaitable[bool]]
API = "/api/v1"


class DaemonError(MemmyError):
    """A request the daemon refused (``status`` and ``code`` from its error envelope) or could not take
    (``status`` None)."""

    def __init__(self, message: str, status: int | None = None, code: str = "error", body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body = body

    def describe(self) -> str:
        """The message plus its code and HTTP status, e.g. ``memory not found (not_found, HTTP 404)``."""
        if self.status is None:
            return self.message
        return f"{self.message} ({self.code}, HTTP {self.status})"


class DaemonUnreachable(DaemonError):
    """Nothing listens at the URL, or the connection broke."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="unavailable")


class DaemonTimeout(DaemonError):
    """The daemon did not answer in time."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="timeout")


@dataclass(frozen=True)
class Wording:
    """How a front end names a daemon it cannot reach (``{url}`` is filled in); each surface keeps its own text."""

    unreachable: str = "memmy memory service is not running at {url} (start it with `memmy-memory serve`)"
    timeout: str = "memmy memory service at {url} did not answer in time"
    #: Who is newer than a daemon that lacks a route.
    client: str = "this client"


def api_path(path: str) -> str:
    """``/memory/search`` or ``memory/search`` as ``/api/v1/memory/search`` (a full ``/api/...`` path stays)."""
    path = path if path.startswith("/") else "/" + path
    return path if path.startswith("/api/") else API + path


def decode(status: int, payload: Any, text: str, method: str, path: str, wording: Wording = Wording()) -> Any:
    """The payload of a 2xx answer; otherwise a :class:`DaemonError` carrying the error envelope."""
    if status < 400:
        return payload
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        message, code = str(error.get("message") or "request failed"), str(error.get("code") or "error")
    else:
        message, code = text[:300] or f"HTTP {status}", "http_error"
    if status == 404 and message.endswith("is not registered"):
        message = f"this memmy daemon does not offer {method.upper()} {path} (is it older than {wording.client}?)"
        code = "not_registered"
    raise DaemonError(message, status=status, code=code, body=payload)


def _json_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


class DaemonClient:
    """Requests to one daemon: headers (token, caller identity) on every call, answers decoded, errors raised as
    :class:`DaemonError`."""

    def __init__(
        self,
        url: str,
        *,
        token: TokenSource = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        source_in_body: str | None = None,
        wording: Wording = Wording(),
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        send: AsyncSend | None = None,
        sync_send: SyncSend | None = None,
        revive: Reviver | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.url = url.rstrip("/")
        #: How HTTPS is verified: a team server's private CA, else the system's (never off).
        self.verify = verify
        self.headers = {"accept": "application/json", **(headers or {})}
        self.timeout_s = timeout_s
        #: Put into every non-GET JSON object body that has no ``source`` (the CLI's ``--source``).
        self.source_in_body = source_in_body
        self.wording = wording
        self._token = token
        self._transport = transport
        self._async_transport = async_transport
        self._send = send
        self._sync_send = sync_send
        self._revive = revive
        self._sync: httpx.Client | None = None
        self._async: httpx.AsyncClient | None = None

    # -- typed calls ------------------------------------------------------------------------------
    def call(
        self,
        route: Route[T],
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        **path: str,
    ) -> T:
        """Send one request to ``route`` (its ``{names}`` from ``path``); its answer type."""
        return cast(T, self.request(route.method, route.url(**path), body, params, headers))

    async def acall(
        self,
        route: Route[T],
        body: Mapping[str, Any] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        **path: str,
    ) -> T:
        """:meth:`call` on the event loop."""
        return cast(T, await self.arequest(route.method, route.url(**path), body, headers))

    # -- raw requests -----------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send one request (``path`` under ``/api/v1`` or relative to it); the decoded JSON."""
        method, path, body = method.upper(), api_path(path), self._body(method, body)
        if self._sync_send is not None:
            target = f"{path}?{urlencode(params)}" if params else path
            status, payload = self._sync_send(method, target, body, self._headers(headers))
            return decode(status, payload, payload if isinstance(payload, str) else "", method, path, self.wording)
        with self._transport_errors():
            response = self._http().request(method, path, json=body, params=params, headers=self._headers(headers))
        return decode(response.status_code, _json_of(response), response.text, method, path, self.wording)

    async def arequest(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        """:meth:`request` on the event loop (the caller's sender, or httpx); a daemon that cannot be reached is
        revived once when the client was given a ``revive``."""
        method, path, body = method.upper(), api_path(path), self._body(method, body)
        sent = self._headers(headers)
        try:
            status, payload, text = await self._asend(method, path, body, sent)
        except DaemonUnreachable:
            if self._revive is None or not await self._revive():
                raise
            status, payload, text = await self._asend(method, path, body, sent)
        return decode(status, payload, text, method, path, self.wording)

    async def _asend(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any, str]:
        if self._send is not None:
            status, payload = await self._send(method, path, body, headers)
            return status, payload, payload if isinstance(payload, str) else ""
        with self._transport_errors():
            response = await self._ahttp().request(method, path, json=body, headers=headers)
        return response.status_code, _json_of(response), response.text

    @contextmanager
    def stream_events(self, route: Route[T], **path: str) -> Iterator[Iterator[T]]:
        """Open a server-sent event stream and yield its decoded ``data`` payloads."""
        import httpx

        url = api_path(route.url(**path))
        with self._http().stream("GET", url, headers=self._headers(None), timeout=httpx.Timeout(30.0, read=None)) as r:
            if r.status_code >= 400:
                r.read()
                raise DaemonError(f"event stream refused: HTTP {r.status_code}", status=r.status_code)
            yield parse_sse(r.iter_lines())

    # -- plumbing ---------------------------------------------------------------------------------
    @contextmanager
    def _transport_errors(self) -> Iterator[None]:
        """httpx's connection failures as :class:`DaemonUnreachable` or :class:`DaemonTimeout`."""
        import httpx

        try:
            yield
        except httpx.ConnectError:
            raise DaemonUnreachable(self.wording.unreachable.format(url=self.url)) from None
        except httpx.TimeoutException:
            raise DaemonTimeout(self.wording.timeout.format(url=self.url)) from None
        except httpx.HTTPError as exc:
            raise DaemonUnreachable(f"request to the memmy memory service failed: {exc}") from None

    def token(self) -> str | None:
        """The bearer token presented now."""
        return self._token() if callable(self._token) else self._token

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {**self.headers, **(extra or {})}
        token = self.token()
        if token:
            headers["authorization"] = f"Bearer {token}"
        return headers

    def _body(self, method: str, body: Any) -> Any:
        if method.upper() == "GET":
            return None
        if self.source_in_body and isinstance(body, dict):
            return {"source": self.source_in_body, **body}
        return body

    def _http(self) -> httpx.Client:
        if self._sync is None:
            import httpx

            self._sync = httpx.Client(
                base_url=self.url, timeout=self.timeout_s, transport=self._transport, verify=self.verify
            )
        return self._sync

    def _ahttp(self) -> httpx.AsyncClient:
        if self._async is None:
            import httpx

            self._async = httpx.AsyncClient(
                base_url=self.url, timeout=self.timeout_s, transport=self._async_transport, verify=self.verify
            )
        return self._async

    def close(self) -> None:
        """Close the sync connection pool."""
        if self._sync is not None:
            self._sync.close()

    async def aclose(self) -> None:
        """Close the async connection pool."""
        if self._async is not None:
            await self._async.aclose()


def parse_sse(lines: Iterator[str]) -> Iterator[Any]:
    """Yield the JSON payload of each ``data:`` line of a server-sent event stream."""
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[6:])
