"""The HTTP API: Starlette routes that parse requests, call MemoryService and shape responses."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from memmy import __version__
from memmy.commands.base import check_body
from memmy.commands.idempotency import IDEMPOTENCY_KEYS, idempotency_key
from memmy.config import store_id
from memmy.errors import (
    Conflict,
    InvalidArgument,
    MemmyError,
    StorageFullError,
    StoreDamaged,
    http_status_for,
    storage_failure,
)
from memmy.mcp.http import McpHttpEndpoint
from memmy.namespace import Namespace
from memmy.panel import Panel
from memmy.panel import routes as panel_routes
from memmy.server.bodies import parse_body
from memmy.server.docs_page import docs_page
from memmy.server.middleware import GuardMiddleware, error_body, json_dumps
from memmy.server.openapi import openapi_document
from memmy.server.routes import ROUTES, Call, Row
from memmy.service import MemoryService

log = logging.getLogger("memmy.server")

Handler = Callable[[Request], Awaitable[Response]]


def json_response(value: Any, status: int = 200) -> Response:
    """A pretty-printed JSON response."""
    return Response(json_dumps(value), status_code=status, media_type="application/json")


def _request_id(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", ""))


#: The line an agent gets instead of silence while the store cannot write (first in the injected context).
UNAVAILABLE = "memmy: memory unavailable ({reason}); recalled memory may be incomplete and nothing new is being saved"


def mark_unavailable(answer: dict[str, Any], reason: str) -> dict[str, Any]:
    """A recall answer (turn start, search) told that memory is unavailable: ``unavailable`` holds the line, and
    the injected context opens with it (so a hook, the MCP tool and the agent's memory block all show it)."""
    line = UNAVAILABLE.format(reason=reason)
    injected = answer.get("injectedContext")
    if isinstance(injected, dict):
        markdown = str(injected.get("markdown") or "")
        answer["injectedContext"] = {**injected, "markdown": f"{line}\n\n{markdown}".strip()}
    elif isinstance(injected, str):
        answer["injectedContext"] = f"{line}\n\n{injected}".strip()
    answer["unavailable"] = line
    return answer


def error_response(request: Request, exc: MemmyError) -> Response:
    """Map a domain error to its status and the error envelope."""
    status = http_status_for(exc.code)
    if status >= 500:
        log.error("request %s failed: %s", _request_id(request), exc.message)
    return Response(
        error_body(exc.code, exc.message, _request_id(request)), status_code=status, media_type="application/json"
    )


async def read_json(request: Request) -> Any:
    """Parse the body as JSON (see :func:`memmy.server.bodies.parse_body`): empty is ``{}``, bad JSON a 400."""
    return parse_body(await request.body())


class Api:
    """Route handlers bound to one service."""

    def __init__(self, service: MemoryService, shutdown: Callable[[], None] | None) -> None:
        self.service = service
        self.shutdown_callback = shutdown

    def namespace(self, request: Request) -> Namespace:
        """Caller identity from the ``x-memmy-*`` headers and ``?source=``."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        if request.query_params.get("source"):
            headers["x-memmy-source"] = request.query_params["source"]
        person = request.scope.get("state", {}).get("person")  # a team member's token (GuardMiddleware)
        return Namespace.from_headers(headers, self.service.config.user_id, person)

    async def call(
        self,
        request: Request,
        fn: Callable[..., dict[str, Any]],
        *args: Any,
        idempotency_op: str | None = None,
        body: Any = None,
        recall: bool = False,
    ) -> Response:
        """Run a service call in the thread pool with idempotency and error mapping (``recall``: an answer with
        context for an agent, marked while the store cannot write)."""
        try:
            if idempotency_op and isinstance(body, dict) and body.get("adapterId") and body.get("requestId"):
                person = request.scope.get("state", {}).get("person")  # one person's keys never answer another
                op = f"person:{person}:{idempotency_op}" if person else idempotency_op
                result = await run_in_threadpool(self._idempotent, op, body, fn, args)
            else:
                result = await run_in_threadpool(fn, *args)
        except MemmyError as exc:
            if isinstance(exc, StorageFullError):
                self.service.db.mark_failed(exc.message)
            return error_response(request, exc)
        except (sqlite3.Error, OSError) as exc:
            failure = storage_failure(exc)
            if failure is None:
                return error_response(request, await run_in_threadpool(self._damage, exc))
            self.service.db.mark_failed(failure.message)
            return error_response(request, failure)
        if recall and isinstance(result, dict):
            reason = await run_in_threadpool(self.service.db.write_probe)
            if reason is not None:
                result = mark_unavailable(dict(result), reason)
        return json_response(result)

    def _damage(self, exc: BaseException) -> MemmyError:
        """An unexpected store error: SQLITE_CORRUPT in the full-text index is repaired now (as at start) and the
        caller told to retry; damage elsewhere is named with ``doctor``; anything else is re-raised (a 500)."""
        found = self.service.db.recover(exc)
        if found is None:
            raise exc
        return StoreDamaged(found)

    def _idempotent(
        self, op: str, body: dict[str, Any], fn: Callable[..., dict[str, Any]], args: tuple[Any, ...]
    ) -> dict[str, Any]:
        ident = idempotency_key(op, body)
        assert ident is not None  # call() only comes here when the body carries both fields
        key, request_hash = ident.key, ident.request_hash
        # One transaction: the write and its stored answer commit together, so an answer is an error only when
        # nothing was committed (a full disk failing the key's write rolls the whole request back).
        with self.service.db.transaction():
            stored = self.service.logs.idempotent_response(key)
            if stored is not None:
                if stored[0] != request_hash:
                    raise Conflict("idempotency key reused with different request body")
                return {**stored[1], "duplicate": True}
            response = fn(*args)
            self.service.logs.store_idempotent_response(key, request_hash, response)  # same transaction
            return response

    def endpoint(self, row: Row) -> Handler:
        """The Starlette endpoint of one route row: its own handler, or parse -> service call -> JSON."""
        if row.handler is not None:
            handler: Handler = getattr(self, row.handler)
            return handler
        call = row.call
        assert call is not None, f"{row.method} {row.path}: a row needs a call or a handler"

        async def endpoint(request: Request) -> Response:
            body: Any = None
            path = {key: str(value) for key, value in request.path_params.items()}
            try:
                if row.method != "GET" and row.request is not None:
                    body = await read_json(request)
                request_value = self.parse(row, request, body, path)
            except MemmyError as exc:
                return error_response(request, exc)
            context = Call(self.service, self.namespace(request), path)
            op = row.idempotency.format(**path) if row.idempotency else None
            return await self.call(
                request, call, context, request_value, idempotency_op=op, body=body, recall=row.recall
            )

        return endpoint

    @staticmethod
    def parse(row: Row, request: Request, body: Any, path: dict[str, str]) -> Any:
        """The row's request: a Command from the body (or the query string), the raw body, or the query dict.

        A JSON body is checked first (:func:`~memmy.commands.base.check_body`): an object, no unknown key, ``null``
        only where a field is optional; the idempotency pair, where the row takes one, must be strings.
        """
        if isinstance(row.request, type):
            if row.method != "GET" and not row.request.in_query:
                extra = dict.fromkeys(IDEMPOTENCY_KEYS, True) if row.idempotency else None
                data = check_body(row.request, body, extra)
                for key in IDEMPOTENCY_KEYS if row.idempotency else ():
                    if data.get(key) is not None and not isinstance(data[key], str):
                        raise InvalidArgument(f"{key}: expected a string")
            return row.request.from_request(body, dict(request.query_params), path)
        if row.request is not None:
            return body
        return dict(request.query_params)

    # -- handlers ---------------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        """``{ok, version}`` for anyone; the details (storage, models, queue, store id) only with the token."""
        fault = await run_in_threadpool(self.service.db.write_probe)
        if not request.scope.get("state", {}).get("authenticated"):
            return json_response({"ok": fault is None, "version": __version__})
        try:
            payload = await run_in_threadpool(self.service.health)
        except MemmyError as exc:
            return error_response(request, exc)
        payload["storeId"] = store_id(self.service.config.storage.sqlite_path)
        payload["status"] = "ok"
        if fault is not None:
            payload.update({"ok": False, "status": "degraded", "reason": fault})
        return json_response(payload)

    async def scan_events(self, request: Request) -> Response:
        """Server-sent events: one ``progress`` event per change until the job ends."""
        job_id = request.path_params["job_id"]
        try:
            version, status = await run_in_threadpool(self.service.imports.wait_for_change, job_id, -1, 0.0)
        except MemmyError as exc:
            return error_response(request, exc)

        async def stream() -> AsyncIterator[bytes]:
            nonlocal version, status
            self.service.imports.follow(job_id)
            try:
                while True:
                    yield f"event: progress\ndata: {json.dumps(status, ensure_ascii=False)}\n\n".encode()
                    if status["state"] in ("done", "stopped", "failed"):
                        return
                    if await request.is_disconnected():
                        return
                    imports = self.service.imports
                    version, status = await run_in_threadpool(imports.wait_for_change, job_id, version, 1.0)
            finally:  # the client went away (or the job ended): a job that dies with its client is stopped
                self.service.imports.unfollow(job_id)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    async def shutdown(self, request: Request) -> Response:
        if self.shutdown_callback is None:
            return error_response(request, Conflict("this service is not managed by `memmy-memory serve`"))
        callback = self.shutdown_callback
        response = json_response({"accepted": True})
        response.background = BackgroundTask(callback)
        return response

    async def openapi(self, request: Request) -> Response:
        return json_response(openapi_document())

    async def index(self, request: Request) -> Response:
        return HTMLResponse(
            "<!doctype html><meta charset=utf-8><title>memmy</title><h1>memmy memory service</h1>"
            "<p>API: <a href=/docs>/docs</a> (<a href=/api/v1/openapi.json>openapi.json</a>) · health: "
            "<a href=/api/v1/health>/api/v1/health</a> · Memory panel: <a href=/panel>/panel</a> "
            "(sign in with <code>memmy-memory panel</code>)</p>"
        )


def by_method(handlers: dict[str, Handler]) -> Handler:
    """One endpoint serving several methods of a path (HEAD as GET)."""

    async def endpoint(request: Request) -> Response:
        return await handlers["GET" if request.method == "HEAD" else request.method](request)

    return endpoint


def create_app(
    service: MemoryService,
    shutdown: Callable[[], None] | None = None,
    *,
    public: bool = False,
    behind_proxy: bool = False,
) -> Starlette:
    """Build the ASGI app for a service (the daemon's composition root calls this).

    ``public``: a team server bound to a non-loopback address (over TLS); ``behind_proxy``: reached through a
    TLS-terminating reverse proxy. Either way it is reached under its own DNS name, so the loopback Host check is
    off (TLS and the tokens guard it); behind a proxy a request must say ``X-Forwarded-Proto: https``.
    """
    api = Api(service, shutdown)
    by_path: dict[str, dict[str, Handler]] = {}
    for row in ROUTES:  # one route per path, so a 405 names every method of the path in its Allow header
        by_path.setdefault(row.path, {})[row.method] = api.endpoint(row)
    routes = [Route(path, by_method(handlers), methods=list(handlers)) for path, handlers in by_path.items()]
    routes.append(Route("/docs", docs_page, methods=["GET"]))  # the browsable API page (same guard)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 405:
            code, message = "invalid_argument", f"{request.method} is not allowed on {request.url.path}"
        elif status == 404:
            code, message = "not_found", f"{request.method} {request.url.path} is not registered"
        else:
            code, message = "internal", "internal error"
        headers = exc.headers if isinstance(exc, HTTPException) else None  # 405 names the methods (Allow)
        return Response(
            error_body(code, message, _request_id(request)),
            status_code=status,
            media_type="application/json",
            headers=headers,
        )

    def token() -> str:
        """The token callers must present; empty with ``server.auth: none``."""
        return "" if service.config.server.auth_disabled else service.config.storage.token

    mcp_http = McpHttpEndpoint(token=token)
    routes.append(mcp_http.route("/mcp"))
    panel = Panel(service)  # /panel/*: its own cookie session + CSRF instead of the bearer token

    async def panel_sign_in(request: Request) -> Response:
        """``POST /api/v1/panel/sign-in`` (needs the API token): a one-time link that signs a browser in."""
        base = f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"
        return json_response({"url": f"{base}/panel/login?code={panel.auth.new_link_code()}", "expiresInS": 600})

    routes.append(Route("/api/v1/panel/sign-in", panel_sign_in, methods=["POST"]))

    app = Starlette(
        routes=[*routes, *panel.routes()],
        lifespan=mcp_http.lifespan,
        exception_handlers={404: not_found, 405: not_found},
        middleware=[
            Middleware(
                GuardMiddleware,
                token_getter=token,
                session_paths=("/panel",),
                max_body_bytes=service.config.server.max_body_bytes,
                allowed_origins=lambda: service.config.server.allowed_origins,
                upload_limits=dict.fromkeys(panel_routes.UPLOAD_PATHS, panel_routes.MAX_UPLOAD_BYTES),
                person_of=service.team.person_for,
                check_host=not (public or behind_proxy),
                proxied_https=behind_proxy,
            )
        ],
    )
    app.state.service = service
    return app
