"""The MCP server: which tools exist, argument validation, dispatch, error mapping, the prompt, and stdio.

The same :func:`build_server` backs both transports; only the :class:`~memmy.daemon_client.DaemonClient`'s transport
differs (network for stdio, in-process for the daemon's ``/mcp`` endpoint).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    ListPromptsResult,
    ListToolsResult,
    PaginatedRequestParams,
    Prompt,
    PromptMessage,
    TextContent,
)
from starlette.requests import Request

from memmy import __version__
from memmy.daemon_client import DaemonClient, DaemonError
from memmy.mcp.api import IDENTITY_HEADERS
from memmy.mcp.keymem import KEYMEM_TOOLS
from memmy.mcp.prompts import INSTRUCTIONS, MEMORY_SYSTEM_PROMPT, PROMPT_DESCRIPTION, PROMPT_NAME
from memmy.mcp.tools import MEMMY_TOOLS, ToolCall, ToolSpec, error_result, ok_result
from memmy.mcp.transcripts import TRANSCRIPT_TOOLS, TranscriptError, transcripts_enabled

log = logging.getLogger("memmy.mcp")

ApiGetter = Callable[[], DaemonClient]
#: After the client closes stdin, how long requests already read may still take to be answered.
DRAIN_TIMEOUT_S = 300.0
TRANSCRIPT_TOOL_NAMES = frozenset(t.name for t in TRANSCRIPT_TOOLS)


def available_tools(transcripts: bool) -> list[ToolSpec]:
    """memmy tools, keymem tools, and the transcript tools only when trusted."""
    return [*MEMMY_TOOLS, *KEYMEM_TOOLS, *(TRANSCRIPT_TOOLS if transcripts else [])]


def forwarded_headers(ctx: ServerRequestContext[Any, Any]) -> dict[str, str]:
    """The caller's ``x-memmy-*`` identity headers when MCP arrived over HTTP (nothing on stdio)."""
    request = ctx.request
    if not isinstance(request, Request):
        return {}
    return {name: request.headers[name] for name in IDENTITY_HEADERS if request.headers.get(name)}


class MemmyMcp:
    """The handlers behind :func:`build_server`."""

    def __init__(self, api: ApiGetter, env: Mapping[str, str], transcripts: bool) -> None:
        self.api = api
        self.env = dict(env)
        self.transcripts = transcripts
        self.tools = {spec.name: spec for spec in available_tools(transcripts)}

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """A listed tool's input schema."""
        spec = self.tools.get(name)
        return spec.schema if spec else None

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        """``tools/list``."""
        return ListToolsResult(tools=[spec.to_mcp() for spec in self.tools.values()])

    async def call_tool(self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> CallToolResult:
        """``tools/call``: validate against the schema, run, and map every failure to a readable result."""
        spec = self.tools.get(params.name)
        if spec is None:
            if params.name in TRANSCRIPT_TOOL_NAMES:
                raise MCPError(
                    INVALID_PARAMS,
                    f"tool {params.name} is not available: transcript access is off (it is on when a host agent "
                    "session id is present, CLAUDE_CODE_SESSION_ID / CODEX_THREAD_ID, or MEMMY_MCP_TRANSCRIPTS=1)",
                )
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}")
        args = dict(params.arguments or {})
        problems = spec.validation_errors(args)
        if problems:
            return error_result(f"invalid arguments for {spec.name}: " + "; ".join(problems))
        call = ToolCall(args=args, api=self.api(), headers=forwarded_headers(ctx), env=self.env)
        try:
            return ok_result(await spec.handler(call))
        except DaemonError as exc:
            return error_result(f"{spec.name} failed: {exc.describe()}")
        except TranscriptError as exc:
            return error_result(f"{spec.name} refused: {exc}")
        except Exception as exc:
            log.exception("tool %s crashed", spec.name)
            return error_result(f"{spec.name} failed unexpectedly: {type(exc).__name__}: {exc}")

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        """``prompts/list``: the one system prompt."""
        return ListPromptsResult(
            prompts=[Prompt(name=PROMPT_NAME, title="memmy memory system prompt", description=PROMPT_DESCRIPTION)]
        )

    async def get_prompt(self, ctx: ServerRequestContext[Any, Any], params: GetPromptRequestParams) -> GetPromptResult:
        """``prompts/get``."""
        if params.name != PROMPT_NAME:
            raise MCPError(INVALID_PARAMS, f"unknown prompt {params.name!r} (available: {PROMPT_NAME})")
        return GetPromptResult(
            description=PROMPT_DESCRIPTION,
            messages=[PromptMessage(role="user", content=TextContent(type="text", text=MEMORY_SYSTEM_PROMPT))],
        )


def build_server(
    api: ApiGetter, *, env: Mapping[str, str] | None = None, transcripts: bool | None = None
) -> Server[Any]:
    """A low-level MCP server whose tools call the daemon through ``api()``.

    ``transcripts`` overrides the trust gate; by default it is read from ``env`` (the process environment).
    """
    env = os.environ if env is None else env
    handlers = MemmyMcp(api, env, transcripts_enabled(env) if transcripts is None else transcripts)
    return Server(
        "memmy",
        version=__version__,
        title="memmy memory",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=handlers.input_schema,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt,
    )


class InFlight:
    """Ids of the requests read from the client and not answered yet."""

    def __init__(self) -> None:
        self.ids: set[Any] = set()
        self._changed = anyio.Event()

    def read(self, message: SessionMessage | Exception) -> None:
        """Note a request coming in (and forget one the client cancelled: it gets no answer)."""
        if not isinstance(message, SessionMessage):
            return
        if isinstance(message.message, JSONRPCRequest):
            self.ids.add(message.message.id)
        elif isinstance(message.message, JSONRPCNotification) and message.message.method == "notifications/cancelled":
            params = message.message.params or {}
            self.ids.discard(params.get("requestId"))
            self._changed.set()
            self._changed = anyio.Event()

    def written(self, message: SessionMessage) -> None:
        """Note an answer going out."""
        if isinstance(message.message, JSONRPCResponse | JSONRPCError) and message.message.id in self.ids:
            self.ids.discard(message.message.id)
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_answered(self) -> None:
        """Return once every request read so far has its answer written."""
        while self.ids:
            await self._changed.wait()


async def serve_draining(
    server: Server[Any],
    read_stream: ObjectReceiveStream[SessionMessage | Exception],
    write_stream: ObjectSendStream[SessionMessage],
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> None:
    """Run ``server`` on a transport's streams; when the client closes its side, every request already read is
    still answered before the server stops (the SDK alone cancels the ones in flight).

    A host that pipes a batch of requests and closes stdin gets all its replies.
    """
    in_flight = InFlight()
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](0)

    async def pump_in() -> None:
        async with to_server:
            async for message in read_stream:
                in_flight.read(message)
                await to_server.send(message)
            with anyio.move_on_after(drain_timeout_s):
                await in_flight.wait_answered()

    async def pump_out() -> None:
        async with write_stream, from_server:
            async for message in from_server:
                await write_stream.send(message)
                in_flight.written(message)

    async with anyio.create_task_group() as group:
        group.start_soon(pump_in)
        group.start_soon(pump_out)
        # run() returns once pump_in closed its side (stdin ended, answers drained) and it closed server_writes,
        # so pump_out finishes writing the last answer on its own.
        await server.run(server_reads, server_writes, server.create_initialization_options())


async def serve_stdio(api: DaemonClient, env: Mapping[str, str] | None = None) -> None:
    """Serve MCP on stdin/stdout until the client closes it, answering every request read before that."""
    server = build_server(lambda: api, env=env)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await serve_draining(server, read_stream, write_stream)
    finally:
        await api.aclose()
