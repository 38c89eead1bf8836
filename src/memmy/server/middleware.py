"""ASGI middleware: body size cap, bearer-token auth, origin check, request ids, error envelope."""

from __future__ import annotations

import hmac
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("memmy.server")

ANONYMOUS_PATHS = frozenset({"/api/v1/health"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def error_body(code: str, message: str, request_id: str) -> bytes:
    """The error envelope ``{"error": {"code", "message", "requestId"}}`` as bytes."""
    return json.dumps({"error": {"code": code, "message": message, "requestId": request_id}}, indent=2).encode()


async def send_error(send: Send, status: int, code: str, message: str, request_id: str) -> None:
    """Write a complete JSON error response."""
    body = error_body(code, message, request_id)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-request-id", request_id.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def request_token(scope: Scope) -> str | None:
    """The presented token: ``Authorization: Bearer``, then ``x-api-key``, then ``?token=``/``?access_token=``."""
    auth = _header(scope, b"authorization")
    if auth and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    api_key = _header(scope, b"x-api-key")
    if api_key:
        return api_key.strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    for name in ("token", "access_token"):
        if query.get(name):
            return str(query[name][0])
    return None


def origin_allowed(origin: str | None) -> bool:
    """Browsers may only call from loopback pages (or file://); other sites are refused (CSRF guard)."""
    if origin is None or origin in ("null", "file://"):
        return True
    host = urlsplit(origin).hostname or ""
    return host in LOOPBACK_HOSTS


class GuardMiddleware:
    """Request id, origin check, token check and body cap, before any route runs."""

    def __init__(
        self,
        app: ASGIApp,
        token_getter: Callable[[], str],
        max_body_bytes: int,
        session_paths: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.token_getter = token_getter
        self.max_body_bytes = max_body_bytes
        #: Path prefixes whose routes check their own session (the panel's cookie + CSRF) instead of the token.
        self.session_paths = session_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _header(scope, b"x-request-id") or _header(scope, b"x-correlation-id") or str(uuid.uuid4())
        request_id = request_id[:128]
        scope.setdefault("state", {})["request_id"] = request_id
        if not origin_allowed(_header(scope, b"origin")):
            await send_error(
                send, 403, "forbidden", "cross-origin requests from non-local pages are refused", request_id
            )
            return
        path = scope.get("path", "")
        expected = self.token_getter()
        own_session = any(path == p or path.startswith(p + "/") for p in self.session_paths)
        if expected and path not in ANONYMOUS_PATHS and not own_session and scope.get("method") != "OPTIONS":
            presented = request_token(scope) or ""
            if not hmac.compare_digest(presented.encode(), expected.encode()):
                await send_error(send, 401, "unauthorized", "invalid memory service token", request_id)
                return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await send_error(
                send,
                413,
                "payload_too_large",
                f"request body is too large (limit {self.max_body_bytes} bytes)",
                request_id,
            )
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge()
            return message

        response_started = False

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not response_started:
                await send_error(
                    send,
                    413,
                    "payload_too_large",
                    f"request body is too large (limit {self.max_body_bytes} bytes)",
                    request_id,
                )
        except Exception:
            log.exception("unhandled error on %s %s (request %s)", scope.get("method"), path, request_id)
            if not response_started:
                await send_error(send, 500, "internal", "internal error; see the daemon log", request_id)


class BodyTooLarge(Exception):
    """Raised from receive() when the streamed body passes the cap."""


def json_dumps(value: Any) -> bytes:
    """Pretty JSON (2-space indent, UTF-8), the API's response format."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str).encode("utf-8")
