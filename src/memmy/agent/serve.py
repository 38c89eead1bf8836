"""``memmy serve``: an OpenAI-compatible API (``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions``)
on 127.0.0.1:18990 with a bearer token. Each request is answered by the configured provider with memory recalled
for the last user message (injected as history) and the exchange captured afterwards. The body's ``user`` field
(or ``x-memmy-user``) stamps the memory's user id; one memory session per conversation (``x-memmy-session-key``,
else the user plus the conversation's first message). Tools are passed through: tool
calls go back to the client, as with any Chat Completions endpoint. Stopping it (SIGTERM, SIGINT, Ctrl-C) first
delivers the captures still queued (or spools them for the next start)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memmy import __version__
from memmy.agent.config import AgentConfig, ModelChoice
from memmy.agent.memory import MemoryBridge, Recall, resolve_settings, short_hash
from memmy.agent.providers import Completion, Provider, ProviderCache, ProviderError, request_options
from memmy.agent.runtime import capture_spool
from memmy.httpguard import refusal

SOURCE = "memmy_serve"
_STATUS = {"unreachable": 502, "timeout": 504, "rate_limited": 429, "auth": 502, "bad_request": 400, "config": 503}


def serve_token(config: AgentConfig) -> str:
    """The configured bearer token, or a new random one."""
    return config.serve_token or secrets.token_urlsafe(24)


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


class LocalGuard:
    """The daemon's Host/Origin guard in front of every route: a foreign ``Host`` (DNS rebinding) is a 421, a
    foreign or ``null`` ``Origin`` a 403 (``serve.allowedOrigins`` lists browser origins that may call)."""

    def __init__(self, app: ASGIApp, allowed_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.allowed_origins = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = refusal(scope, self.allowed_origins)
            if refused is not None:
                await _error(refused.status, refused.message, refused.code)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ServeApp:
    """Request handling with one provider per model and one memory client."""

    def __init__(self, config: AgentConfig, memory: MemoryBridge) -> None:
        self.config = config
        self.memory = memory
        self.providers = ProviderCache()

    def choose(self, requested: Any) -> ModelChoice | None:
        """A preset by name, the default model, or the default provider with the requested model id."""
        if isinstance(requested, str) and requested in self.config.presets:
            return self.config.presets[requested]
        default = self.config.default
        if default is None or not isinstance(requested, str) or requested in ("", "default", "memmy", default.model):
            return default
        return replace(default, name=requested, model=requested)

    def authorised(self, request: Request) -> bool:
        """Constant-time bearer token check."""
        token = self.config.serve_token or ""
        presented = request.headers.get("authorization", "")
        return bool(token) and hmac.compare_digest(presented.encode(), f"Bearer {token}".encode())

    async def health(self, request: Request) -> Response:
        """``GET /health`` (no token needed)."""
        return JSONResponse(
            {
                "status": "ok",
                "version": __version__,
                "model": self.config.default.model if self.config.default else None,
                "memory": self.memory.state,
            }
        )

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the default model and the presets."""
        if not self.authorised(request):
            return _error(401, "missing or wrong bearer token (serve.token)", "authentication_error")
        ids = ([self.config.default.model] if self.config.default else []) + sorted(self.config.presets)
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "memmy"} for i in dict.fromkeys(ids)]
        return JSONResponse({"object": "list", "data": data})

    async def chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions``, streaming or not."""
        if not self.authorised(request):
            return _error(401, "missing or wrong bearer token (serve.token)", "authentication_error")
        try:
            body = await request.json()
        except (ValueError, RecursionError):  # malformed, or nested deeper than the parser allows
            return _error(400, "the body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return _error(400, "messages: expected a non-empty array of message objects")
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            return _error(400, "tools: expected an array")
        options, problem = request_options(body)
        if problem:
            return _error(400, problem)
        choice = self.choose(body.get("model"))
        if choice is None:
            return _error(503, "no model configured: run `memmy onboard`", "server_error")
        user = request.headers.get("x-memmy-user") or (body.get("user") if isinstance(body.get("user"), str) else None)
        # One memory session per conversation: the client's key, else the user plus the conversation's first
        # user message (a client resends the whole history, so that stays the same across its requests).
        first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        scope = request.headers.get("x-memmy-session-key") or f"{user or 'default'}:{short_hash(first_user)}"
        messages = [dict(m) for m in messages]
        recall: Recall | None = None
        last = messages[-1]
        query = _text(last.get("content"))
        recalling = None
        if last.get("role") == "user" and query.strip():  # recall runs while the provider is made ready
            recalling = asyncio.create_task(self.memory.start_turn(f"serve:{scope}", query, None, user))
            await asyncio.sleep(0)
        try:
            provider = await self.providers.ready(choice)
        except BaseException:
            if recalling is not None:
                recalling.cancel()
            raise
        if recalling is not None:
            recall = await recalling
            if recall is not None and recall.markdown.strip():
                if isinstance(last.get("content"), str):
                    last["content"] = recall.wrapped(query)
                else:
                    last["content"] = [{"type": "text", "text": recall.wrapped("")}, *last["content"]]
        headers = {"x-memmy-memory": self.memory.state}
        if recall is not None:
            headers["x-memmy-memory-ids"] = ",".join(recall.memory_ids)[:2000]
        if body.get("stream"):
            return await self._stream(provider, choice, messages, tools, recall, body, headers, options)
        try:
            done = await provider.stream(messages, tools, None, options)
        except ProviderError as exc:
            await self._capture(recall, None, str(exc))
            return _error(_STATUS.get(exc.kind, 502), str(exc), "upstream_error")
        await self._capture(recall, done, None)
        message: dict[str, Any] = {"role": "assistant", "content": done.text or None}
        if done.tool_calls:
            message["tool_calls"] = [call.as_message() for call in done.tool_calls]
        usage = {**done.usage, "total_tokens": sum(done.usage.values())} if done.usage else None
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": choice.model,
                "choices": [{"index": 0, "message": message, "finish_reason": _finish(done)}],
                "usage": usage,
            },
            headers=headers,
        )

    async def _stream(
        self,
        provider: Provider,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        recall: Recall | None,
        body: dict[str, Any],
        headers: dict[str, str],
        options: dict[str, Any],
    ) -> Response:
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        async def produce() -> None:
            try:
                done = await provider.stream(messages, tools, lambda delta: queue.put_nowait(("text", delta)), options)
                queue.put_nowait(("done", done))
            except ProviderError as exc:
                queue.put_nowait(("error", exc))

        task = asyncio.create_task(produce())
        first = await queue.get()
        if first[0] == "error":
            await self._capture(recall, None, str(first[1]))
            return _error(_STATUS.get(first[1].kind, 502), str(first[1]), "upstream_error")
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": choice.model,
        }
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            payload = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        async def events() -> AsyncIterator[str]:
            yield chunk({"role": "assistant", "content": ""})
            item = first
            while True:
                kind, value = item
                if kind == "text":
                    yield chunk({"content": value})
                elif kind == "error":
                    await self._capture(recall, None, str(value))
                    error = {"message": str(value), "type": "upstream_error", "code": _STATUS.get(value.kind, 502)}
                    yield f"data: {json.dumps({'error': error})}\n\n"
                    break
                else:
                    done: Completion = value
                    for index, call in enumerate(done.tool_calls):
                        yield chunk({"tool_calls": [{"index": index, **call.as_message()}]})
                    yield chunk({}, _finish(done))
                    if include_usage and done.usage:
                        usage = {**done.usage, "total_tokens": sum(done.usage.values())}
                        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
                    await self._capture(recall, done, None)
                    break
                item = await queue.get()
            await task
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def _capture(self, recall: Recall | None, done: Completion | None, error: str | None) -> None:
        """Capture the exchange in the background (the answer never waits for it)."""
        if recall is None:
            return
        if done is None:
            self.memory.capture_turn(recall, f"[failed] {error}", "failed", [])
        else:
            calls = [{"id": c.id, "name": c.name, "input": c.arguments, "output": ""} for c in done.tool_calls]
            answer = done.text or ("requested tools: " + ", ".join(c.name for c in done.tool_calls))
            self.memory.capture_turn(recall, answer, "succeeded", calls, None, done.usage or None)


def _finish(done: Completion) -> str:
    return "tool_calls" if done.tool_calls else ("length" if done.finish_reason == "length" else "stop")


#: Adds routes to the app (the workbench) and returns what to await when the server stops.
Extension = Callable[[Starlette], Callable[[], Awaitable[None]]]


def create_app(
    config: AgentConfig,
    memory: MemoryBridge | None = None,
    config_file: str | None = None,
    with_channels: bool = True,
    extend: Extension | None = None,
) -> Starlette:
    """The Starlette app (tests mount it under uvicorn on a free port); ``extend`` mounts the workbench, and the IM
    channels config.yaml enables (``channels.<name>``) run with it unless ``with_channels`` is false."""
    bridge = memory or MemoryBridge(
        resolve_settings(config_file), enabled=config.memory_enabled, source=SOURCE, spool=capture_spool(config)
    )
    handler = ServeApp(config, bridge)

    closers: list[Callable[[], Awaitable[None]]] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from memmy.agent.channels.supervisor import supervisor_for  # only when serving: the SDKs load lazily

        channels = supervisor_for(config, config_file) if with_channels else None
        if channels is not None:
            channels.start()
        app.state.channels = channels
        for start in app.state.starters:  # the workbench's scheduler: tasks of the server's event loop
            start()
        yield
        for close in closers:  # the workbench: running turns are recorded as cancelled, captures delivered
            await close()
        if channels is not None:
            await channels.close()
        # Shutdown (SIGTERM, SIGINT, Ctrl-C): deliver the captures still queued, or spool what the daemon cannot
        # take now, before the process goes. uvicorn re-raises SIGTERM after shutdown, so an ``atexit`` flush
        # would never run.
        await bridge.aclose()

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/health", handler.health, methods=["GET"]),
            Route("/v1/models", handler.models, methods=["GET"]),
            Route("/v1/chat/completions", handler.chat, methods=["POST"]),
        ],
        middleware=[Middleware(LocalGuard, allowed_origins=config.serve_allowed_origins)],
    )
    app.state.memmy = handler
    app.state.starters = []
    if extend is not None:
        closers.append(extend(app))
    return app


def run_server(
    config: AgentConfig, host: str, port: int, config_file: str | None = None, extend: Extension | None = None
) -> None:
    """Serve until interrupted (a streaming workbench page gets 5 s to go when it is stopped)."""
    if host not in ("127.0.0.1", "localhost", "::1") and not config.serve_token:
        raise SystemExit("memmy serve: refusing a non-loopback address without serve.token")
    print(f"memmy serve: http://{host}:{port}/v1 (model {config.default.model if config.default else 'none'})")
    if extend is not None:
        print(f"memmy serve: the workbench is at http://{host}:{port}/ (sign in with `memmy workbench`)")
    app = create_app(config, config_file=config_file, extend=extend)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
