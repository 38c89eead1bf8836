"""The one daemon client: its routes are generated from the route table (and kept current), its typed calls and
error mapping work against a real daemon, it stays light to import, and the hook's own standard-library client
only calls routes of the table with body fields those routes read."""

from __future__ import annotations

import ast
import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memmy.commands.base import Command
from memmy.commands.schema import request_fields
from memmy.daemon_client import DaemonClient, DaemonError, DaemonTimeout, DaemonUnreachable, Wording, routes
from memmy.server.client_routes import TARGET, client_rows, render, route_name
from memmy.server.routes import ROUTES, Row
from tests.conftest import Daemon

HOOK = Path(__file__).resolve().parents[1] / "src" / "memmy" / "hook"
IDEMPOTENCY_FIELDS = {"adapterId", "requestId"}


def test_the_generated_routes_are_current() -> None:
    assert TARGET.read_text(encoding="utf-8") == render(), "run: python -m memmy.server.client_routes"
    names = [route_name(row) for row in client_rows()]
    assert len(names) == len(set(names)), "two rows got one name"
    for row, name in zip(client_rows(), names, strict=True):
        route = getattr(routes, name)
        assert (route.method, route.path) == (row.method, row.path)


def test_a_route_fills_its_path_and_percent_encodes_ids() -> None:
    assert routes.MEMORY_GET.url(memory_id="trace_1") == "/api/v1/memory/trace_1"
    assert routes.TURNS_COMPLETE.url(turn_id="a/b c") == "/api/v1/turns/a%2Fb%20c/complete"
    with pytest.raises(KeyError):
        routes.MEMORY_GET.url()
    with pytest.raises(KeyError):
        routes.MEMORY_SEARCH.url(memory_id="x")


def test_typed_calls_and_errors_against_a_real_daemon(daemon: Daemon) -> None:
    client = DaemonClient(daemon.url, token=daemon.token, source_in_body="client_test")
    try:
        added = client.call(routes.MEMORY_ADD, {"content": "The client test deploys with make ship."})
        memory_id = added["id"]
        assert memory_id is not None and added["sourceAgent"] == "client_test"
        detail = client.call(routes.MEMORY_GET, memory_id=memory_id)
        assert detail["id"] == memory_id and detail["content"].startswith("The client test")
        assert client.call(routes.HEALTH)["ok"] is True
        with pytest.raises(DaemonError) as missing:
            client.call(routes.MEMORY_GET, memory_id="trace_missing")
        assert missing.value.status == 404 and missing.value.code == "not_found"
        assert "(not_found, HTTP 404)" in missing.value.describe()
        with pytest.raises(DaemonError) as bad:
            client.call(routes.MEMORY_SEARCH, {"query": "x", "limit": "many"})
        assert bad.value.status == 400 and bad.value.code == "invalid_argument"
    finally:
        client.close()
    with pytest.raises(DaemonError) as refused:
        DaemonClient(daemon.url, token="wrong").call(routes.MEMORY_LOGS)
    assert refused.value.status == 401


def test_the_async_side_uses_a_callers_sender_and_revives_once(daemon: Daemon) -> None:
    sent: list[tuple[str, str]] = []
    revived: list[bool] = []

    async def send(method: str, path: str, body: object, headers: dict[str, str]) -> tuple[int, object]:
        sent.append((method, path))
        if len(sent) == 1:
            raise DaemonUnreachable("not yet")
        client = DaemonClient(daemon.url, token=daemon.token)
        try:
            return 200, await client.arequest(method, path, body, headers)
        finally:
            await client.aclose()

    async def revive() -> bool:
        revived.append(True)
        return True

    async def run() -> str:
        client = DaemonClient("http://127.0.0.1:9", send=send, revive=revive)
        answer = await client.acall(routes.MEMORY_SEARCH, {"query": "deploys with make ship"})
        return answer["injectedContext"]

    asyncio.run(run())
    assert sent == [("POST", "/api/v1/memory/search")] * 2 and revived == [True]


def test_the_sync_side_uses_a_callers_sender(daemon: Daemon) -> None:
    sent: list[tuple[str, str, dict[str, str]]] = []
    http = DaemonClient(daemon.url, token=daemon.token)

    def send(method: str, path: str, body: object, headers: dict[str, str]) -> tuple[int, object]:
        sent.append((method, path, headers))
        try:
            return 200, http.request(method, path, body)
        except DaemonError as exc:
            return exc.status or 0, exc.body

    client = DaemonClient("http://unused", token="t0k", headers={"x-memmy-source": "probe"}, sync_send=send)
    try:
        assert client.call(routes.MEMORY_LOGS, params={"limit": 1})["limit"] == 1
        with pytest.raises(DaemonError) as missing:
            client.call(routes.DREAM_GET, dream_id="dream_missing")
    finally:
        http.close()
    assert missing.value.status == 404 and missing.value.code == "not_found"
    assert [(m, p) for m, p, _h in sent] == [
        ("GET", "/api/v1/memory/logs?limit=1"),
        ("GET", "/api/v1/dream/dream_missing"),
    ]
    assert sent[0][2]["authorization"] == "Bearer t0k" and sent[0][2]["x-memmy-source"] == "probe"


def test_an_unreachable_or_silent_daemon_is_named_in_the_surfaces_words(dead_endpoint: str) -> None:
    wording = Wording(unreachable="nothing at {url}", timeout="{url} is silent")
    client = DaemonClient(dead_endpoint, timeout_s=0.5, wording=wording)
    with pytest.raises((DaemonUnreachable, DaemonTimeout)) as down:
        client.request("GET", "/health")
    assert down.value.message in (f"nothing at {dead_endpoint}", f"{dead_endpoint} is silent")
    assert down.value.status is None and down.value.code in ("unavailable", "timeout")


def test_importing_the_client_loads_no_http_library() -> None:
    code = "import sys, memmy.daemon_client; print(sorted(m for m in ('httpx', 'h11', 'anyio') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


# -- the hook's own client ---------------------------------------------------------------------------------------
def _path_pattern(node: ast.expr) -> str | None:
    """A call's path as text, each f-string value as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)  # type: ignore[misc]
    return None


def _dict_keys(node: ast.expr | None, assigned: dict[str, ast.expr]) -> set[str]:
    if isinstance(node, ast.Name) and node.id in assigned:
        node = assigned[node.id]
    if not isinstance(node, ast.Dict):
        return set()
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _expanded(args: list[ast.expr], assigned: dict[str, ast.expr]) -> list[ast.expr]:
    """A call's arguments with ``*name`` replaced by the tuple the function bound to ``name``."""
    out: list[ast.expr] = []
    for arg in args:
        bound = assigned.get(arg.value.id) if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name) else None
        out.extend(bound.elts if isinstance(bound, ast.Tuple) else [arg])
    return out


def hook_requests() -> list[tuple[str, str, str, set[str]]]:
    """(module, method, path, body fields) of every daemon request the hook's modules make."""
    found = []
    for module in sorted(HOOK.glob("*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            assigned = {
                t.id: n.value
                for n in ast.walk(function)
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
                is_request = isinstance(call.func, ast.Attribute) and call.func.attr in ("call", "send")
                args = _expanded(call.args, assigned)
                if not is_request or len(args) < 2:
                    continue
                method, path = args[0], _path_pattern(args[1])
                if isinstance(method, ast.Constant) and path is not None and path.startswith("/api/"):
                    body = args[2] if len(args) > 2 else None
                    found.append((module.name, str(method.value), path, _dict_keys(body, assigned)))
    return found


def _row_for(method: str, path: str) -> Row | None:
    return next(
        (r for r in ROUTES if r.method == method and re.sub(r"\{[^}]+\}", "{}", r.path) == path and r.documented),
        None,
    )


def unknown_fields(method: str, path: str, fields: set[str]) -> set[str]:
    """The body fields a request sends that its route does not read (all of them for a path not in the table)."""
    row = _row_for(method, path)
    if row is None:
        return fields | {"(no such route)"}
    known = set(IDEMPOTENCY_FIELDS) if row.idempotency else set()
    if isinstance(row.request, type) and issubclass(row.request, Command):
        known |= {name for name, _schema, _required in request_fields(row.request, body=True)}
    return fields - known


def test_the_hooks_requests_are_routes_of_the_table_with_fields_they_read() -> None:
    requests = hook_requests()
    paths = {(method, path) for _module, method, path, _fields in requests}
    assert {("POST", "/api/v1/sessions/open"), ("POST", "/api/v1/turns/start")} <= paths
    assert ("POST", "/api/v1/turns/{}/complete") in paths and ("GET", "/api/v1/memory/{}") in paths
    for module, method, path, fields in requests:
        assert unknown_fields(method, path, fields) == set(), f"{module}: {method} {path}"


def test_the_hook_check_sees_a_wrong_field_or_path() -> None:
    assert unknown_fields("POST", "/api/v1/turns/start", {"query", "queryText"}) == {"queryText"}
    assert unknown_fields("POST", "/api/v1/turns/{}/complete", {"answer", "requestId"}) == set()
    assert "(no such route)" in unknown_fields("POST", "/api/v1/turns/begin", set())
