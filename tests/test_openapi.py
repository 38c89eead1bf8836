"""The OpenAPI document against the real daemon: every route is in it, and a bounded schemathesis run finds no
server error and no answer the document does not describe."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as REGISTERED_CHECKS
from schemathesis.checks import load_all_checks

from memmy.commands.schema import request_fields, type_schema
from memmy.server.openapi import openapi_document
from memmy.server.routes import ROUTES
from tests.conftest import Daemon, free_port

#: Routes the run leaves out: stopping the daemon would end the run; export/import name files on the daemon's
#: machine and wipe empties the store the run is using (tests/test_data_governance.py covers all three).
SKIPPED = ("/api/v1/admin/shutdown", "/api/v1/admin/export", "/api/v1/admin/import", "/api/v1/admin/wipe")
load_all_checks()
#: Every check schemathesis has (its whole registry: what `st run --checks all` runs): server errors, status codes,
#: content types, answer schemas and headers, valid data accepted, invalid data refused, missing headers,
#: undeclared methods (405 with Allow), auth that is ignored, use after delete, ...
CHECKS = list(REGISTERED_CHECKS.get_all())
EXAMPLES_PER_OPERATION = 3


def _normalise(path: str) -> str:
    parts = ["{}" if part.startswith("{") else part for part in path.split("/")]
    return "/".join(parts)


def create_app_routes() -> list[Any]:
    """The Starlette routes the daemon serves (built from the same table)."""
    from starlette.routing import Route

    from memmy.server.app import Api

    api = Api.__new__(Api)
    return [Route(row.path, api.endpoint(row), methods=[row.method]) for row in ROUTES]


def test_every_route_is_documented_and_nothing_else() -> None:
    document = openapi_document()
    documented = {(method.upper(), _normalise(path)) for path, ops in document["paths"].items() for method in ops}
    served = {(row.method, _normalise(row.path)) for row in ROUTES}
    # the one undocumented row: the catch-all that answers 404 for an unknown key-graph operation
    assert served - {("POST", "/api/v1/keys/{}")} == documented
    assert len(documented) == len([row for row in ROUTES if row.documented])
    served_app = {
        (method, _normalise(route.path))
        for route in create_app_routes()
        for method in set(route.methods or ()) - {"HEAD"}
        if route.path.startswith("/api/v1/") and route.path not in ("/api/v1/panel/sign-in",)
    }
    assert served_app - {("POST", "/api/v1/keys/{}")} <= documented


def test_every_request_and_answer_type_is_in_the_document() -> None:
    """Each row's request fields and answer keys appear in its operation (the document is generated from them)."""
    document = openapi_document()
    for row in ROUTES:
        if not row.documented or row.handler is not None:
            continue
        operation = document["paths"][row.path][row.method.lower()]
        if isinstance(row.request, type):
            names = {key for key, _schema, _required in request_fields(row.request)}
            if row.request.in_query:
                documented = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            else:
                schema = operation["requestBody"]["content"]["application/json"]["schema"]
                documented = set(schema["properties"])
            assert names <= documented, row.path
        answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == type_schema(row.response), row.path


@pytest.fixture(scope="module")
def api_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon of its own: the run writes random memories, sessions and feedback."""
    home = tmp_path_factory.mktemp("openapi-home")
    proc = Daemon(home=home, port=free_port(), token="openapi-token")
    proc.start()
    yield proc
    if proc.process and proc.process.poll() is None:
        proc.stop()


@pytest.fixture(scope="module")
def api_schema(api_daemon: Daemon) -> Any:
    """The document as the daemon serves it, minus the skipped routes."""
    served = httpx.get(f"{api_daemon.url}/api/v1/openapi.json", headers={"authorization": "Bearer openapi-token"})
    served.raise_for_status()
    assert served.json() == openapi_document()
    schema = schemathesis.openapi.from_dict(served.json())

    @schema.auth()
    class Token:
        """The daemon's token, as explicit auth: the ignored_auth check probes each route without it."""

        def get(self, case: Any, context: Any) -> str:
            return "openapi-token"

        def set(self, case: Any, data: str, context: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    return schema.exclude(path=list(SKIPPED))


def _explore(operation: Any, mode: GenerationMode, url: str, failures: list[str], statuses: dict[str, int]) -> None:
    """Send up to :data:`EXAMPLES_PER_OPERATION` generated requests for one operation; record what fails."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=os.environ.get("OPENAPI_FUZZ_RANDOM") != "1",
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        try:
            response = case.call_and_validate(base_url=url, checks=CHECKS, timeout=60)
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - every failure is reported by the test
            failures.append(f"{operation.label} [{mode.value}]: {str(exc).strip()[:1500]}")
            statuses["failed"] = statuses.get("failed", 0) + 1
            return
        key = f"{mode.value} {response.status_code}"
        statuses[key] = statuses.get(key, 0) + 1

    try:
        run()
    except Unsatisfiable:  # nothing in this operation can be made invalid (no parameters, no body)
        pass


def test_daemon_answers_match_the_document(api_daemon: Daemon, api_schema: Any) -> None:
    """A bounded run (a few hundred requests); every failure is collected, so the report lists them all."""
    failures: list[str] = []
    statuses: dict[str, int] = {}
    for result in api_schema.get_all_operations():
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _explore(result.ok(), mode, api_daemon.url, failures, statuses)
    calls = sum(statuses.values())
    print(f"schemathesis: {calls} requests, {len(failures)} failures, statuses {sorted(statuses.items())}")
    assert calls >= 200
    assert len(CHECKS) >= 14 and "negative_data_rejection" in {getattr(c, "__name__", "") for c in CHECKS}
    assert not failures, "\n\n".join(failures[:30])


def test_every_json_answer_is_typed() -> None:
    """No route answers a bare "some object": each JSON answer is a TypedDict (or a list of them)."""
    untyped = []
    for row in ROUTES:
        if not row.documented or row.media != "application/json" or row.path == "/api/v1/openapi.json":
            continue
        schema = type_schema(row.response)
        if not schema.get("properties") and not schema.get("items", {}).get("properties"):
            untyped.append(f"{row.method} {row.path}")
    assert untyped == []


def test_turn_bodies_are_generated_from_the_turn_commands() -> None:
    """The session/turn routes are documented from their Command fields (no hand-written schema)."""
    paths = openapi_document()["paths"]

    def body(path: str) -> dict[str, Any]:
        schema: dict[str, Any] = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return schema

    start = body("/api/v1/turns/start")
    assert start["required"] == ["sessionId", "query"]
    assert {"scope", "channels", "contextHints", "tags", "layers", "limit", "adapterId"} <= set(start["properties"])
    assert "idempotency" not in start["properties"] and "anyOf" in start  # scope=project needs a workspacePath
    complete = body("/api/v1/turns/{turn_id}/complete")
    assert complete["required"] == ["sessionId", "query", "answer"]
    assert "turnId" not in complete["properties"]  # from the path
    assert {"hostConversationId", "hostMessageId", "toolCalls", "status"} <= set(complete["properties"])
    assert "sessionId" not in body("/api/v1/sessions/{session_id}/close")["properties"]
    assert "sessionId" in body("/api/v1/sessions/open")["properties"]
