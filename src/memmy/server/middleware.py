"""ASGI middleware: Host/Origin guard, bearer-token auth, content type, body cap, request ids, error envelope."""

from __future__ import annotations

import hmac
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memmy.errors import storage_failure
from memmy.httpguard import Refusal, is_loopback_name, refusal
from memmy.httpguard import header as _header

log = logging.getLogger("memmy.server")

ANONYMOUS_PATHS = frozenset({"/api/v1/health", "/favicon.ico"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
#: Methods whose body the routes read as JSON; any body on them must say ``content-type: application/json``.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Scope key set by in-process callers (the ``/mcp`` endpoint's ASGI transport): no socket, no Host to check.
IN_PROCESS_KEY = "memmy.in_process"
#: What a team server's person (a ``memmy-memory users add`` token) may call: their agents' sessions, turns,
#: memories, key graph and the ``/mcp`` endpoint, every read scoped to their own and their team project's memories.
#: Everything else (panel, admin, logs, imports, export) is the owner's.
PERSON_PREFIXES = ("/api/v1/sessions/", "/api/v1/turns/", "/api/v1/memory/", "/api/v1/feedback", "/api/v1/keys/")
PERSON_PATHS = frozenset({"/api/v1/health", "/api/v1/openapi.json", "/favicon.ico", "/mcp"})
#: What a person asking for the panel is told (the panel shows the whole store: the owner's view).
PANEL_REFUSED = (
    "the panel is the team server owner's view of the whole store; people reach their memories through their "
    "agents (hooks, MCP) and the CLI"
)
PERSON_REFUSED = frozenset({"/api/v1/memory/logs", "/api/v1/memory/processing/status"})
#: Per-memory routes that read or change a memory without asking whose it is: the owner's.
PERSON_REFUSED_ENDINGS = ("/history", "/processing/retry")


def person_may_call(path: str) -> bool:
    """Whether a team member's token may reach ``path`` (the owner's token reaches every route)."""
    if path in PERSON_PATHS:
        return True
    if path in PERSON_REFUSED or path.endswith(PERSON_REFUSED_ENDINGS):
        return False
    return any(path == p.rstrip("/") or path.startswith(p) for p in PERSON_PREFIXES)


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


def _forwarded_https(scope: Scope) -> bool:
    """A request the TLS proxy forwarded (``X-Forwarded-Proto: https``), or one from this machine itself."""
    proto = (_header(scope, b"x-forwarded-proto") or "").split(",", 1)[0].strip().lower()
    client = scope.get("client") or ("", None)
    return proto == "https" or (not _header(scope, b"x-forwarded-for") and is_loopback_name(str(client[0])))


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return _header(scope, b"transfer-encoding") is not None


class GuardMiddleware:
    """Request id, Host and Origin checks, token check, content type and body cap, before any route runs.

    ``token_getter`` returns the token callers must present; an empty string means ``server.auth: none``.
    A request that presents the right token is marked ``state.authenticated`` (health then shows details).
    """

    def __init__(
        self,
        app: ASGIApp,
        token_getter: Callable[[], str],
        max_body_bytes: int,
        allowed_origins: Callable[[], tuple[str, ...]] = tuple,
        session_paths: tuple[str, ...] = (),
        upload_limits: dict[str, int] | None = None,
        person_of: Callable[[str], str | None] | None = None,
        check_host: bool = True,
        proxied_https: bool = False,
    ) -> None:
        self.app = app
        #: A team server: who a token that is not the owner's belongs to (None: nobody), read on every request
        #: (in a worker thread), so a revoked token is refused at once.
        self.person_of = person_of
        #: False on a team server bound to a public address: it is reached under its own DNS name (TLS and the
        #: tokens protect it); the loopback daemon keeps the DNS-rebinding Host check.
        self.check_host = check_host
        #: Behind a TLS-terminating reverse proxy: a request from elsewhere must say ``X-Forwarded-Proto: https``.
        self.proxied_https = proxied_https
        self.token_getter = token_getter
        self.max_body_bytes = max_body_bytes
        #: Exact paths that accept a larger body (the panel's archive upload) and their own limit.
        self.upload_limits = upload_limits or {}
        self.allowed_origins = allowed_origins
        #: Path prefixes whose routes check their own session (the panel's cookie + CSRF) instead of the token.
        self.session_paths = session_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _header(scope, b"x-request-id") or _header(scope, b"x-correlation-id") or str(uuid.uuid4())
        request_id = request_id[:128]
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        in_process = bool(scope.get(IN_PROCESS_KEY))
        refused = refusal(scope, self.allowed_origins(), check_host=self.check_host and not in_process)
        if refused is None and self.proxied_https and not in_process and not _forwarded_https(scope):
            refused = Refusal(403, "forbidden", "this server is behind a TLS proxy: plain HTTP requests are refused")
        if refused is not None:
            await send_error(send, refused.status, refused.code, refused.message, request_id)
            return
        path = scope.get("path", "")
        expected = self.token_getter()
        presented = request_token(scope)
        authenticated = not expected or (
            presented is not None and hmac.compare_digest(presented.encode(), expected.encode())
        )
        person = None
        if not authenticated and presented and self.person_of is not None:
            person = await run_in_threadpool(self.person_of, presented)
            authenticated = person is not None
        state["authenticated"] = authenticated
        state["person"] = person
        anonymous_ok = path in ANONYMOUS_PATHS and presented is None
        # The panel's routes check their own session (HttpOnly cookie + CSRF token) instead of the bearer token.
        own_session = any(path == p or path.startswith(p + "/") for p in self.session_paths)
        if not authenticated and not anonymous_ok and not own_session:
            await send_error(send, 401, "unauthorized", "invalid memory service token", request_id)
            return
        if person is not None and not person_may_call(path):
            panel = path.startswith("/api/v1/panel")
            message = PANEL_REFUSED if panel else f"{path} is for the server's owner only"
            await send_error(send, 403, "forbidden", message, request_id)
            return
        limit = self.upload_limits.get(path, self.max_body_bytes)
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await send_error(
                send, 413, "payload_too_large", f"request body is too large (limit {limit} bytes)", request_id
            )
            return
        method = str(scope.get("method", "")).upper()
        content_type = _header(scope, b"content-type")
        # The panel posts HTML forms (its own CSRF token guards them); every other body must be JSON.
        if method in BODY_METHODS and not own_session and (content_type is not None or _has_body(scope)):
            if _media_type(content_type) != "application/json":
                await send_error(
                    send,
                    415,
                    "unsupported_media_type",
                    "request bodies must be sent as content-type: application/json",
                    request_id,
                )
                return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
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
                    send, 413, "payload_too_large", f"request body is too large (limit {limit} bytes)", request_id
                )
        except Exception as exc:
            failure = storage_failure(exc)
            if failure is not None:
                log.error("request %s on %s %s: %s", request_id, scope.get("method"), path, failure.message)
                if not response_started:
                    await send_error(send, 507, failure.code, failure.message, request_id)
                return
            log.exception("unhandled error on %s %s (request %s)", scope.get("method"), path, request_id)
            if not response_started:
                await send_error(send, 500, "internal", "internal error; see the daemon log", request_id)


class BodyTooLarge(Exception):
    """Raised from receive() when the streamed body passes the cap."""


def json_dumps(value: Any) -> bytes:
    """Pretty JSON (2-space indent, UTF-8), the API's response format."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate stored before the edge repaired input: answer, never a 500
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")
