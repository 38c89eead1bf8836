"""The HTTP API: Starlette routes that parse requests, call MemoryService and shape responses."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
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
from memmy.config import store_id
from memmy.errors import Conflict, MemmyError, StorageFullError, http_status_for, storage_failure
from memmy.mcp.http import McpHttpEndpoint
from memmy.namespace import Namespace
from memmy.panel import Panel
from memmy.panel import routes as panel_routes
from memmy.server.bodies import parse_body
from memmy.server.docs_page import docs_page
from memmy.server.middleware import GuardMiddleware, error_body, json_dumps
from memmy.server.openapi import openapi_document
from memmy.service import MemoryService
from memmy.service.idempotency import idempotency_key

log = logging.getLogger("memmy.server")

Handler = Callable[[Request], Awaitable[Response]]


def json_response(value: Any, status: int = 200) -> Response:
    """A pretty-printed JSON response."""
    return Response(json_dumps(value), status_code=status, media_type="application/json")


def _request_id(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", ""))


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
        #: Why the last write failed for want of storage (health clears it once a probe write succeeds).
        self.storage_fault: str | None = None

    def namespace(self, request: Request) -> Namespace:
        """Caller identity from the ``x-memmy-*`` headers and ``?source=``."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        if request.query_params.get("source"):
            headers["x-memmy-source"] = request.query_params["source"]
        return Namespace.from_headers(headers, self.service.config.user_id)

    async def call(
        self,
        request: Request,
        fn: Callable[..., dict[str, Any]],
        *args: Any,
        idempotency_op: str | None = None,
        body: Any = None,
    ) -> Response:
        """Run a service call in the thread pool with idempotency and error mapping."""
        try:
            if idempotency_op and isinstance(body, dict) and body.get("adapterId") and body.get("requestId"):
                result = await run_in_threadpool(self._idempotent, idempotency_op, body, fn, args)
            else:
                result = await run_in_threadpool(fn, *args)
        except MemmyError as exc:
            if isinstance(exc, StorageFullError):
                self.storage_fault = exc.message
            return error_response(request, exc)
        except (sqlite3.Error, OSError, StorageFullError) as exc:  # the store raises StorageFullError itself
            failure = exc if isinstance(exc, StorageFullError) else storage_failure(exc)
            if failure is None:
                raise
            self.storage_fault = failure.message
            return error_response(request, failure)
        return json_response(result)

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

    async def json_call(
        self,
        request: Request,
        fn: Callable[..., dict[str, Any]],
        make_args: Callable[[Any], tuple[Any, ...]],
        op: str | None = None,
    ) -> Response:
        """Parse the JSON body, then :meth:`call` with the arguments built from it."""
        try:
            body = await read_json(request)
        except MemmyError as exc:
            return error_response(request, exc)
        return await self.call(request, fn, *make_args(body), idempotency_op=op, body=body)

    # -- handlers ---------------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        """``{ok, version}`` for anyone; the details (storage, models, queue, store id) only with the token."""
        fault = await run_in_threadpool(self._storage_probe) if self.storage_fault else None
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

    def _storage_probe(self) -> str | None:
        """After a failed write: try one small committed write; clear the fault when it succeeds."""
        try:
            with self.service.db.transaction() as conn:
                conn.execute(
                    "INSERT INTO runtime_kv(key, value_json, updated_at) VALUES ('health.writeProbe', ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value_json = excluded.value_json, updated_at = excluded.updated_at",
                    (json.dumps(time.time()), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
                )
        except (sqlite3.Error, OSError, StorageFullError) as exc:  # the store raises StorageFullError itself
            failure = exc if isinstance(exc, StorageFullError) else storage_failure(exc)
            return failure.message if failure is not None else f"the store cannot write: {exc}"
        self.storage_fault = None
        return None

    async def open_session(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.open_session, lambda b: (b, ns), "sessions.create")

    async def close_session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        return await self.json_call(
            request, self.service.close_session, lambda b: (session_id,), f"sessions.close:{session_id}"
        )

    async def start_turn(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.start_turn, lambda b: (b, ns), "turn.start")

    async def complete_turn(self, request: Request) -> Response:
        ns, turn_id = self.namespace(request), request.path_params["turn_id"]
        return await self.json_call(
            request, self.service.complete_turn, lambda b: (turn_id, b, ns), f"turn.complete:{turn_id}"
        )

    async def search(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.search, lambda b: (b, ns), "memory.search")

    async def add(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.add_memory, lambda b: (b, ns), "memory.add")

    async def get_memory(self, request: Request) -> Response:
        return await self.call(request, self.service.get_memory, request.path_params["memory_id"])

    async def delete_memory(self, request: Request) -> Response:
        ns, memory_id = self.namespace(request), request.path_params["memory_id"]
        return await self.json_call(
            request, self.service.delete_memory, lambda b: (memory_id, b, ns), f"memory.delete:{memory_id}"
        )

    async def archive_memory(self, request: Request) -> Response:
        ns, memory_id = self.namespace(request), request.path_params["memory_id"]
        return await self.json_call(request, self.service.archive_memory, lambda b: (memory_id, b, ns))

    async def memory_history(self, request: Request) -> Response:
        return await self.call(request, self.service.memory_history, request.path_params["memory_id"])

    async def keys_op(self, request: Request) -> Response:
        """``POST /api/v1/keys/<op>``: one key-graph tool; the body is its arguments, the answer its result."""
        ns, op = self.namespace(request), request.path_params["op"]
        return await self.json_call(request, self.service.keys_call, lambda b: (op, b, ns))

    async def tombstones(self, request: Request) -> Response:
        return await self.call(request, self.service.list_tombstones, dict(request.query_params))

    async def restore_tombstone(self, request: Request) -> Response:
        ns, tombstone_id = self.namespace(request), request.path_params["tombstone_id"]
        return await self.json_call(request, self.service.restore_tombstone, lambda b: (tombstone_id, b, ns))

    async def dream_run(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.dream_run, lambda b: (b, ns))

    async def dream_log(self, request: Request) -> Response:
        return await self.call(request, self.service.dream_log, dict(request.query_params))

    async def dream_get(self, request: Request) -> Response:
        dream_id = request.path_params["dream_id"]
        return await self.call(request, self.service.dream_get, dream_id, dict(request.query_params))

    async def dream_restore(self, request: Request) -> Response:
        dream_id = request.path_params["dream_id"]
        ns = self.namespace(request)
        return await self.json_call(request, self.service.dream_restore, lambda b: (dream_id, b, ns))

    async def processing_status(self, request: Request) -> Response:
        return await self.json_call(request, self.service.processing_status, lambda b: (b,))

    async def processing_retry(self, request: Request) -> Response:
        return await self.call(request, self.service.retry_processing, request.path_params["memory_id"])

    async def logs(self, request: Request) -> Response:
        return await self.call(request, self.service.panel.api_logs, dict(request.query_params))

    async def overview(self, request: Request) -> Response:
        return await self.call(request, self.service.panel.overview)

    async def analysis(self, request: Request) -> Response:
        return await self.call(request, self.service.panel.analysis)

    async def items(self, request: Request) -> Response:
        return await self.call(request, self.service.panel.items, dict(request.query_params))

    async def tasks(self, request: Request) -> Response:
        return await self.call(request, self.service.panel.tasks, dict(request.query_params))

    async def reload_config(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.reload_config, lambda b: (b, ns))

    async def worker_run(self, request: Request) -> Response:
        limit = request.query_params.get("limit")

        def args(body: Any) -> tuple[Any, ...]:
            if isinstance(body, dict) and "limit" not in body and limit:
                body = {**body, "limit": limit}
            return (body,)

        return await self.json_call(request, self.service.run_worker, args)

    async def feedback(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.give_feedback, lambda b: (b, ns))

    async def episodes(self, request: Request) -> Response:
        return await self.call(request, self.service.list_episodes, dict(request.query_params))

    async def evolution_jobs(self, request: Request) -> Response:
        return await self.call(request, self.service.list_jobs, dict(request.query_params))

    async def sources(self, request: Request) -> Response:
        return await self.call(request, self.service.imports.sources)

    async def start_scan(self, request: Request) -> Response:
        return await self.json_call(request, self.service.imports.start, lambda b: (b,))

    async def scan_status(self, request: Request) -> Response:
        return await self.call(request, self.service.imports.status, request.path_params["job_id"])

    async def scan_control(self, request: Request) -> Response:
        job_id, action = request.path_params["job_id"], request.path_params["action"]
        return await self.call(request, self.service.imports.control, job_id, action)

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

    async def logs_page(self, request: Request) -> Response:
        return await self.call(request, self.service.governance.logs_page, dict(request.query_params))

    async def review_queue(self, request: Request) -> Response:
        return await self.call(request, self.service.governance.review_queue, dict(request.query_params))

    async def review_item(self, request: Request) -> Response:
        ns, memory_id = self.namespace(request), request.path_params["memory_id"]
        review = self.service.governance.review
        return await self.json_call(request, review, lambda b: (memory_id, self.service.redact(b), ns))

    async def export_store(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.ownership.export, lambda b: (b, ns))

    async def import_store(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.ownership.import_, lambda b: (b, ns))

    async def wipe_store(self, request: Request) -> Response:
        ns = self.namespace(request)
        return await self.json_call(request, self.service.ownership.wipe, lambda b: (b, ns))

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


#: The HTTP routes in match order: (path, method, Api handler name, whether the handler reads a JSON body).
ROUTE_TABLE: tuple[tuple[str, str, str, bool], ...] = (
    ("/", "GET", "index", False),
    ("/api/v1/health", "GET", "health", False),
    ("/api/v1/openapi.json", "GET", "openapi", False),
    ("/api/v1/sessions/open", "POST", "open_session", True),
    ("/api/v1/sessions/{session_id}/close", "POST", "close_session", True),
    ("/api/v1/turns/start", "POST", "start_turn", True),
    ("/api/v1/turns/{turn_id}/complete", "POST", "complete_turn", True),
    ("/api/v1/memory/search", "POST", "search", True),
    ("/api/v1/memory/add", "POST", "add", True),
    ("/api/v1/memory/logs", "GET", "logs", False),
    ("/api/v1/memory/processing/status", "POST", "processing_status", True),
    ("/api/v1/memory/{memory_id}/processing/retry", "POST", "processing_retry", False),
    ("/api/v1/memory/{memory_id}/archive", "POST", "archive_memory", True),
    ("/api/v1/memory/{memory_id}/history", "GET", "memory_history", False),
    ("/api/v1/keys/{op}", "POST", "keys_op", True),
    ("/api/v1/tombstones", "GET", "tombstones", False),
    ("/api/v1/feedback", "POST", "feedback", True),
    ("/api/v1/episodes", "GET", "episodes", False),
    ("/api/v1/evolution/jobs", "GET", "evolution_jobs", False),
    ("/api/v1/tombstones/{tombstone_id}/restore", "POST", "restore_tombstone", True),
    ("/api/v1/dream/run", "POST", "dream_run", True),
    ("/api/v1/dream/log", "GET", "dream_log", False),
    ("/api/v1/dream/{dream_id}", "GET", "dream_get", False),
    ("/api/v1/dream/{dream_id}/restore", "POST", "dream_restore", True),
    ("/api/v1/memory/{memory_id}", "GET", "get_memory", False),
    ("/api/v1/memory/{memory_id}", "DELETE", "delete_memory", True),
    ("/api/v1/panel/overview", "GET", "overview", False),
    ("/api/v1/panel/analysis", "GET", "analysis", False),
    ("/api/v1/panel/items", "GET", "items", False),
    ("/api/v1/panel/tasks", "GET", "tasks", False),
    ("/api/v1/admin/reload-config", "POST", "reload_config", True),
    ("/api/v1/admin/shutdown", "POST", "shutdown", False),
    ("/api/v1/worker/run", "POST", "worker_run", True),
    ("/api/v1/sources", "GET", "sources", False),
    ("/api/v1/sources/scan", "POST", "start_scan", True),
    ("/api/v1/sources/scan/{job_id}", "GET", "scan_status", False),
    ("/api/v1/sources/scan/{job_id}/events", "GET", "scan_events", False),
    ("/api/v1/sources/scan/{job_id}/{action:str}", "POST", "scan_control", False),
    ("/api/v1/logs", "GET", "logs_page", False),
    ("/api/v1/review", "GET", "review_queue", False),
    ("/api/v1/review/{memory_id}", "POST", "review_item", True),
    ("/api/v1/admin/export", "POST", "export_store", True),
    ("/api/v1/admin/import", "POST", "import_store", True),
    ("/api/v1/admin/wipe", "POST", "wipe_store", True),
)


def create_app(service: MemoryService, shutdown: Callable[[], None] | None = None) -> Starlette:
    """Build the ASGI app for a service (the daemon's composition root calls this)."""
    api = Api(service, shutdown)
    routes = [Route(path, getattr(api, name), methods=[method]) for path, method, name, _body in ROUTE_TABLE]
    routes.append(Route("/docs", docs_page, methods=["GET"]))  # the browsable API page (same guard)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 405:
            code, message = "invalid_argument", f"{request.method} is not allowed on {request.url.path}"
        elif status == 404:
            code, message = "not_found", f"{request.method} {request.url.path} is not registered"
        else:
            code, message = "internal", "internal error"
        return Response(
            error_body(code, message, _request_id(request)), status_code=status, media_type="application/json"
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
            )
        ],
    )
    app.state.service = service
    return app
