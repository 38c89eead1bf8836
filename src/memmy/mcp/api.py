"""The async HTTP client the MCP tools use to reach the daemon's ``/api/v1`` routes.

One class serves both transports: over the network (the stdio server, ``base_url`` is the daemon's URL) or
in-process (the daemon's ``/mcp`` endpoint passes an :class:`httpx.ASGITransport` wrapping the daemon app).
Either way a request goes through the same routes, token check, validation and error envelope.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

TokenSource = str | Callable[[], str | None] | None
Reviver = Callable[[], Awaitable[bool]]

#: Identity headers a caller may set (see docs/api.md "Caller identity").
IDENTITY_HEADERS = (
    "x-memmy-user-id",
    "x-memmy-source",
    "x-memmy-workspace-path",
    "x-memmy-project-id",
    "x-memmy-session-key",
    "x-memmy-profile-id",
)


class ApiError(Exception):
    """A request the daemon refused (``status`` and ``code`` from its error envelope) or could not take."""

    def __init__(self, message: str, status: int | None = None, code: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def describe(self) -> str:
        """The message plus its code and HTTP status, e.g. ``memory not found (not_found, HTTP 404)``."""
        if self.status is None:
            return self.message
        return f"{self.message} ({self.code}, HTTP {self.status})"


class ApiClient:
    """Calls ``/api/v1/...`` and returns the decoded JSON, or raises :class:`ApiError` with the server's message."""

    def __init__(
        self,
        base_url: str,
        *,
        token: TokenSource = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 120.0,
        revive: Reviver | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._revive = revive
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"accept": "application/json", **(headers or {})},
            timeout=timeout_s,
            transport=transport,
            verify=verify,
        )

    def token(self) -> str | None:
        """The bearer token to present (read on every call, so a reloaded config token is picked up)."""
        return self._token() if callable(self._token) else self._token

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def call(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        """Send one request. ``path`` is ``/api/v1/...`` or relative to it (``/memory/search``)."""
        if not path.startswith("/"):
            path = "/" + path
        if not path.startswith("/api/"):
            path = "/api/v1" + path
        extra = dict(headers or {})
        token = self.token()
        if token:
            extra["authorization"] = f"Bearer {token}"
        try:
            response = await self._send(method, path, body, extra)
        except httpx.ConnectError:
            if self._revive is None or not await self._revive():
                raise ApiError(
                    f"the memmy memory service is not reachable at {self.base_url} "
                    "(start it with `memmy-memory serve`)",
                    code="unavailable",
                ) from None
            try:
                response = await self._send(method, path, body, extra)
            except httpx.HTTPError as exc:
                message = f"the memmy memory service at {self.base_url} failed: {exc}"
                raise ApiError(message, code="unavailable") from None
        except httpx.TimeoutException:
            message = f"the memmy memory service at {self.base_url} did not answer in time"
            raise ApiError(message, code="timeout") from None
        except httpx.HTTPError as exc:
            raise ApiError(f"request to the memmy memory service failed: {exc}", code="unavailable") from None
        return decode(response, method, path)

    async def _send(self, method: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
        if body is None or method.upper() == "GET":
            return await self._http.request(method.upper(), path, headers=headers)
        return await self._http.request(method.upper(), path, json=body, headers=headers)


def decode(response: httpx.Response, method: str, path: str) -> Any:
    """The JSON payload of a 2xx answer; otherwise an :class:`ApiError` carrying the error envelope."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.status_code < 400:
        return payload
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        message, code = str(error.get("message") or "request failed"), str(error.get("code") or "error")
    else:
        message, code = response.text[:300] or f"HTTP {response.status_code}", "http_error"
    if response.status_code == 404 and message.endswith("is not registered"):
        message = f"this memmy daemon does not offer {method.upper()} {path} (is it older than this MCP server?)"
        code = "not_registered"
    raise ApiError(message, status=response.status_code, code=code)
