"""Generates ``memmy/daemon_client/routes.py`` from the route table: one typed :class:`~memmy.daemon_client.Route`
per documented JSON endpoint, so the client and the OpenAPI document read the same answer types.

``python -m memmy.server.client_routes`` rewrites the file; ``tests/test_daemon_client.py`` fails while it is
stale. A route's name is its path's fixed segments, upper-cased (``/api/v1/memory/search`` ->
``MEMORY_SEARCH``), plus the method when the path ends in a ``{value}`` (``GET /api/v1/memory/{memory_id}`` ->
``MEMORY_GET``) or when the table serves the same path with another method (``ADMIN_USERS_GET``/``_POST``)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args, get_origin

from memmy.commands import answers
from memmy.server.routes import ROUTES, Row

TARGET = Path(__file__).resolve().parents[1] / "daemon_client" / "routes.py"
HEADER = '''"""The daemon's routes with their answer types, for :class:`memmy.daemon_client.DaemonClient`.

Generated from ``memmy/server/routes.py`` by ``python -m memmy.server.client_routes``; do not edit."""

from memmy.commands import answers as a
from memmy.daemon_client.route import Route
'''


def route_name(row: Row) -> str:
    """The constant a row is known by in the client."""
    parts = row.path.removeprefix("/api/v1/").split("/")
    fixed = [p.replace("-", "_").replace(".", "_") for p in parts if not p.startswith("{")]
    shared = any(other.path == row.path and other.method != row.method for other in client_rows())
    if parts[-1].startswith("{") or shared:
        fixed.append(row.method)
    return "_".join(fixed).upper()


def type_source(hint: object) -> str:
    """A row's answer type as source text (names of :mod:`memmy.commands.answers` as ``a.Name``)."""
    if hint == answers.JSONObject:
        return "a.JSONObject"
    origin = get_origin(hint)
    if origin is list:
        return f"list[{type_source(get_args(hint)[0])}]"
    name = getattr(hint, "__name__", "")
    if getattr(answers, name, None) is hint:
        return f"a.{name}"
    raise TypeError(f"no source form for the answer type {hint!r}")


def client_rows() -> list[Row]:
    """The rows the client can call: documented, answering JSON (or JSON events)."""
    return [r for r in ROUTES if r.documented and r.media in ("application/json", "text/event-stream")]


def render() -> str:
    """The text of ``routes.py``."""
    lines = [HEADER]
    for row in client_rows():
        lines.append(f"#: {row.summary}")
        lines.append(f'{route_name(row)}: Route[{type_source(row.response)}] = Route("{row.method}", "{row.path}")')
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET}")
