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
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from memmy.server.app import ROUTE_TABLE
from memmy.server.openapi import openapi_document
from tests.conftest import Daemon, free_port

#: Routes the run leaves out: stopping the daemon would end the run; export/import name files on the daemon's
#: machine and wipe empties the store the run is using (tests/test_data_governance.py covers all three).
SKIPPED = ("/api/v1/admin/shutdown", "/api/v1/admin/export", "/api/v1/admin/import", "/api/v1/admin/wipe")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    positive_data_acceptance,
]
EXAMPLES_PER_OPERATION = 3


def _normalise(path: str) -> str:
    parts = ["{}" if part.startswith("{") else part for part in path.split("/")]
    return "/".join(parts)


def test_every_route_is_documented_and_nothing_else() -> None:
    document = openapi_document()
    documented = {(method.upper(), _normalise(path)) for path, ops in document["paths"].items() for method in ops}
    served = {(method, _normalise(path)) for path, method, _name, _body in ROUTE_TABLE}
    scan_actions = {("POST", f"/api/v1/sources/scan/{{}}/{action}") for action in ("pause", "resume", "stop")}
    key_ops = {(m, p) for m, p in documented if p.startswith("/api/v1/keys/")}
    assert served - {("POST", "/api/v1/sources/scan/{}/{}"), ("POST", "/api/v1/keys/{}")} == documented - (
        scan_actions | key_ops
    )


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
    return schema.exclude(path=list(SKIPPED))


def _explore(operation: Any, mode: GenerationMode, url: str, failures: list[str], statuses: dict[str, int]) -> None:
    """Send up to :data:`EXAMPLES_PER_OPERATION` generated requests for one operation; record what fails."""
    headers = {"authorization": "Bearer openapi-token"}

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
            response = case.call_and_validate(base_url=url, headers=headers, checks=CHECKS, timeout=60)
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
    assert not failures, "\n\n".join(failures[:30])
