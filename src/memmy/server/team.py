"""The owner's routes for a team server's people (``memmy-memory users``): list, add (the token is in the answer,
once), revoke. Under ``/api/v1/admin/``, which a person's token never reaches (``GuardMiddleware``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memmy.errors import MemmyError
from memmy.namespace import Namespace
from memmy.server.bodies import parse_body
from memmy.service import MemoryService

USERS_PATH = "/api/v1/admin/users"


def team_routes(
    service: MemoryService,
    namespace: Callable[[Request], Namespace],
    respond: Callable[[Any, int], Response],
    fail: Callable[[Request, MemmyError], Response],
) -> list[Route]:
    """The three routes, answering with ``respond`` and mapping errors with ``fail`` (the app's own)."""

    async def run(request: Request, fn: Callable[[], dict[str, Any]], status: int = 200) -> Response:
        try:
            result = await run_in_threadpool(fn)
        except MemmyError as exc:
            return fail(request, exc)
        return respond(result, status)

    async def users(request: Request) -> Response:
        if request.method == "GET":
            return await run(request, service.team.list)
        try:
            body = parse_body(await request.body())
        except MemmyError as exc:
            return fail(request, exc)
        name = body.get("name") if isinstance(body, dict) else None
        return await run(request, lambda: service.team.add(name, namespace(request)), 201)

    async def revoke(request: Request) -> Response:
        name = request.path_params["name"]
        return await run(request, lambda: service.team.revoke(name, namespace(request)))

    return [
        Route(USERS_PATH, users, methods=["GET", "POST"]),
        Route(USERS_PATH + "/{name}/revoke", revoke, methods=["POST"]),
    ]
