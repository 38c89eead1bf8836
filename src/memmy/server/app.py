"""The HTTP API: Starlette routes that parse requests, call MemoryService and shape responses."""

from __future__ import annotations

import json
import logging
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

from memmy.domain import stable_hash
from memmy.errors import Conflict, InvalidArgument, MemmyError, http_status_for
from memmy.mcp.http import McpHttpEndpoint
from memmy.panel import Panel
from memmy.server.middleware import GuardMiddleware, error_body, json_dumps
from memmy.server.openapi import openapi_document
from memmy.service import MemoryService
from memmy.service.namespace import Namespace

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
    """Parse the body as JSON; an empty body is ``{}``; bad JSON is a clear 400."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidArgument("request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


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
                return json_response(await run_in_threadpool(self._idempotent, idempotency_op, body, fn, args))
            return json_response(await run_in_threadpool(fn, *args))
        except MemmyError as exc:
            return error_response(request, exc)

    def _idempotent(
        self, op: str, body: dict[str, Any], fn: Callable[..., dict[str, Any]], args: tuple[Any, ...]
    ) -> dict[str, Any]:
        key = f"{op}:{body['adapterId']}:{body['requestId']}"
        fingerprint = {k: v for k, v in body.items() if k not in ("adapterId", "requestId")}
        request_hash = stable_hash({"operation": op, "fingerprint": fingerprint})
        with self.service.db.lock:
            stored = self.service.logs.idempotent_response(key)
            if stored is not None:
                if stored[0] != request_hash:
                    raise Conflict("idempotency key reused with different request body")
                return {**stored[1], "duplicate": True}
            response = fn(*args)
            self.service.logs.store_idempotent_response(key, request_hash, response)
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
        return await self.call(request, self.service.health)

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
            while True:
                yield f"event: progress\ndata: {json.dumps(status, ensure_ascii=False)}\n\n".encode()
                if status["state"] in ("done", "stopped", "failed"):
                    return
                if await request.is_disconnected():
                    return
                version, status = await run_in_threadpool(self.service.imports.wait_for_change, job_id, version, 1.0)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    async def logs_page(self, request: Request) -> Response:
        return await self.call(request, self.service.governance.logs_page, dict(request.query_params))

    async def review_queue(self, request: Request) -> Response:
        return await self.call(request, self.service.governance.review_queue, dict(request.query_params))

    async def review_item(self, request: Request) -> Response:
        ns, memory_id = self.namespace(request), request.path_params["memory_id"]
        return await self.json_call(request, self.service.governance.review, lambda b: (memory_id, b, ns))

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
            "<p>API: <a href=/api/v1/openapi.json>/api/v1/openapi.json</a> · health: "
            "<a href=/api/v1/health>/api/v1/health</a> · Memory panel: <a href=/panel>/panel</a> "
            "(sign in with <code>memmy-memory panel</code>)</p>"
        )


def create_app(service: MemoryService, shutdown: Callable[[], None] | None = None) -> Starlette:
    """Build the ASGI app for a service (the daemon's composition root calls this)."""
    api = Api(service, shutdown)
    routes = [
        Route("/", api.index, methods=["GET"]),
        Route("/api/v1/health", api.health, methods=["GET"]),
        Route("/api/v1/openapi.json", api.openapi, methods=["GET"]),
        Route("/api/v1/sessions/open", api.open_session, methods=["POST"]),
        Route("/api/v1/sessions/{session_id}/close", api.close_session, methods=["POST"]),
        Route("/api/v1/turns/start", api.start_turn, methods=["POST"]),
        Route("/api/v1/turns/{turn_id}/complete", api.complete_turn, methods=["POST"]),
        Route("/api/v1/memory/search", api.search, methods=["POST"]),
        Route("/api/v1/memory/add", api.add, methods=["POST"]),
        Route("/api/v1/memory/logs", api.logs, methods=["GET"]),
        Route("/api/v1/memory/processing/status", api.processing_status, methods=["POST"]),
        Route("/api/v1/memory/{memory_id}/processing/retry", api.processing_retry, methods=["POST"]),
        Route("/api/v1/memory/{memory_id}/archive", api.archive_memory, methods=["POST"]),
        Route("/api/v1/memory/{memory_id}/history", api.memory_history, methods=["GET"]),
        Route("/api/v1/keys/{op}", api.keys_op, methods=["POST"]),
        Route("/api/v1/tombstones", api.tombstones, methods=["GET"]),
        Route("/api/v1/feedback", api.feedback, methods=["POST"]),
        Route("/api/v1/episodes", api.episodes, methods=["GET"]),
        Route("/api/v1/evolution/jobs", api.evolution_jobs, methods=["GET"]),
        Route("/api/v1/tombstones/{tombstone_id}/restore", api.restore_tombstone, methods=["POST"]),
        Route("/api/v1/dream/run", api.dream_run, methods=["POST"]),
        Route("/api/v1/dream/log", api.dream_log, methods=["GET"]),
        Route("/api/v1/dream/{dream_id}", api.dream_get, methods=["GET"]),
        Route("/api/v1/dream/{dream_id}/restore", api.dream_restore, methods=["POST"]),
        Route("/api/v1/memory/{memory_id}", api.get_memory, methods=["GET"]),
        Route("/api/v1/memory/{memory_id}", api.delete_memory, methods=["DELETE"]),
        Route("/api/v1/panel/overview", api.overview, methods=["GET"]),
        Route("/api/v1/panel/analysis", api.analysis, methods=["GET"]),
        Route("/api/v1/panel/items", api.items, methods=["GET"]),
        Route("/api/v1/panel/tasks", api.tasks, methods=["GET"]),
        Route("/api/v1/admin/reload-config", api.reload_config, methods=["POST"]),
        Route("/api/v1/admin/shutdown", api.shutdown, methods=["POST"]),
        Route("/api/v1/worker/run", api.worker_run, methods=["POST"]),
        Route("/api/v1/sources", api.sources, methods=["GET"]),
        Route("/api/v1/sources/scan", api.start_scan, methods=["POST"]),
        Route("/api/v1/sources/scan/{job_id}", api.scan_status, methods=["GET"]),
        Route("/api/v1/sources/scan/{job_id}/events", api.scan_events, methods=["GET"]),
        Route("/api/v1/sources/scan/{job_id}/{action:str}", api.scan_control, methods=["POST"]),
        Route("/api/v1/logs", api.logs_page, methods=["GET"]),
        Route("/api/v1/review", api.review_queue, methods=["GET"]),
        Route("/api/v1/review/{memory_id}", api.review_item, methods=["POST"]),
        Route("/api/v1/admin/export", api.export_store, methods=["POST"]),
        Route("/api/v1/admin/import", api.import_store, methods=["POST"]),
        Route("/api/v1/admin/wipe", api.wipe_store, methods=["POST"]),
    ]

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

    mcp_http = McpHttpEndpoint(token=lambda: service.config.storage.token)
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
                token_getter=lambda: service.config.storage.token,
                session_paths=("/panel",),
                max_body_bytes=service.config.server.max_body_bytes,
            )
        ],
    )
    app.state.service = service
    return app
