"""Every request field is validated at the edge, against the real daemon: integers bounded, types strict, unknown
keys and ``null`` bodies refused with the key named (400, never a 500 nor a silent default), dry runs that say
so, ``Allow`` on a 405, and an OpenAPI document that states the same bounds (so a fuzzer's conformance checks agree).

On main each case below was a 500 (the big numbers), or was accepted (the rest)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from memmy.server.openapi import openapi_document
from tests.conftest import Daemon

HUGE = 2**64 + 1
DIGITS_5000 = "9" * 5000

#: (method, path, query, raw JSON body or None, the text the 400's message must hold)
REFUSED: list[tuple[str, str, dict[str, Any] | None, str | None, str]] = [
    ("GET", "/api/v1/logs", {"after": str(HUGE)}, None, "after: expected an integer"),
    ("GET", "/api/v1/logs", {"after": "-1"}, None, "after: expected an integer between 0"),
    ("GET", "/api/v1/logs", {"offset": str(2**63)}, None, "offset: expected an integer between 0 and"),
    ("GET", "/api/v1/logs", {"kind": ""}, None, "kind: expected one of audit, api, changes, recalls"),
    ("GET", "/api/v1/tombstones", {"offset": str(HUGE)}, None, "offset: expected an integer between 0 and"),
    ("GET", "/api/v1/dream/log", {"offset": str(2**63)}, None, "offset: expected an integer between 0 and"),
    ("GET", "/api/v1/panel/items", {"pageSize": "-1"}, None, "pageSize: expected an integer between 1 and 100"),
    ("GET", "/api/v1/panel/items", {"page": "0"}, None, "page: expected an integer between 1"),
    ("GET", "/api/v1/panel/items", {"pageSize": ""}, None, "pageSize: expected an integer"),
    ("GET", "/api/v1/panel/items", {"layer": ""}, None, "layer: expected one of L1, L2, L3, Skill"),
    ("GET", "/api/v1/dream/log", {"limit": "\u00b2"}, None, "limit: expected an integer, got a string ('\u00b2')"),
    ("GET", "/api/v1/memory/logs", {"offset": "-5"}, None, "offset: expected an integer between 0"),
    ("POST", "/api/v1/memory/search", None, '{"query": "x", "limit": ' + DIGITS_5000 + "}", "5000-digit number"),
    ("POST", "/api/v1/memory/add", None, '{"content": "x", "title": 1e999}', "too large for a float"),
    ("POST", "/api/v1/memory/add", None, '{"content": "x", "title": NaN}', "NaN is not a JSON number"),
    ("POST", "/api/v1/dream/run", None, "null", "request body must be a JSON object, got null"),
    ("POST", "/api/v1/keys/memory_stats", None, "null", "request body must be a JSON object, got null"),
    ("POST", "/api/v1/worker/run", None, " ", "not valid JSON"),
    ("POST", "/api/v1/worker/run", None, '{"limit": "10"}', "limit: expected an integer, got a string ('10')"),
    ("POST", "/api/v1/worker/run", None, '{"limit": null}', "limit: null is not a value here"),
    ("POST", "/api/v1/memory/search", None, '{"query": "x", "adapterId": 0}', "adapterId: expected a string"),
    ("POST", "/api/v1/memory/add", None, '{"content": "x", "tags": [["a", "b"]]}', "tags: expected an array of"),
    ("POST", "/api/v1/memory/add", None, '{"content": "x", "source": 7}', "source: expected a string"),
    ("POST", "/api/v1/memory/add", None, '{"content": "x", "layer": ""}', "layer: expected one of L1"),
    ("POST", "/api/v1/keys/recall", None, '{"query": "x", "top_k": "8"}', "top_k: expected an integer between 1"),
    ("POST", "/api/v1/memory/add", None, '{"content": "x", "colour": "red"}', "'colour': unknown field"),
    ("POST", "/api/v1/sources/scan", None, '{"dry_run": true}', "'dry_run': unknown field (expected confirm, dryRun"),
    ("POST", "/api/v1/sessions/open", None, '{"workspacePath": {}}', "workspacePath: expected a string"),
]


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "message"), REFUSED, ids=[f"{c[0]} {c[1]} {c[4][:40]}" for c in REFUSED]
)
def test_bad_input_is_a_400_naming_the_field(
    daemon: Daemon, method: str, path: str, query: dict[str, Any] | None, body: str | None, message: str
) -> None:
    with daemon.client() as client:
        headers = {"content-type": "application/json"}
        response = client.request(method, path, params=query, content=body, headers=headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] in ("invalid_argument", "invalid_json")
        assert message in error["message"], error


def test_refused_input_leaves_nothing_behind(daemon: Daemon) -> None:
    """Nested tags are not stored as Python reprs (``"['a']"``): the write is refused, nothing is saved."""
    with daemon.client() as client:
        marker = "nested-tag-probe-hibiscus"
        assert client.post("/api/v1/memory/add", json={"content": marker, "tags": [["a"]]}).status_code == 400
        items = client.get("/api/v1/panel/items", params={"q": marker}).json()["items"]
        assert items == []
        stored = client.post("/api/v1/memory/add", json={"content": marker, "tags": ["a", "b"]})
        assert stored.status_code == 200, stored.text
        detail = client.get(f"/api/v1/memory/{stored.json()['id']}").json()
        assert detail["tags"] == ["a", "b"]


def test_a_dry_run_says_it_is_one(daemon: Daemon) -> None:
    with daemon.client() as client:
        started = client.post("/api/v1/sources/scan", json={"dryRun": True})
        assert started.status_code == 200, started.text
        assert started.json()["dryRun"] is True
        dream = client.post("/api/v1/dream/run", json={"dryRun": True})
        assert dream.status_code == 200 and dream.json()["dryRun"] is True


def test_null_stands_for_absent_only_where_a_field_is_optional(daemon: Daemon) -> None:
    with daemon.client() as client:
        ok = client.post("/api/v1/memory/add", json={"content": "nullable probe", "source": None, "sessionId": None})
        assert ok.status_code == 200, ok.text
        refused = client.post("/api/v1/memory/add", json={"content": "nullable probe", "tags": None})
        assert refused.status_code == 400 and "tags: null" in refused.json()["error"]["message"]


def test_405_names_the_allowed_methods(daemon: Daemon) -> None:
    with daemon.client() as client:
        trace = client.request("TRACE", "/api/v1/health")
        assert trace.status_code == 405 and set(trace.headers["allow"].split(", ")) == {"GET", "HEAD"}
        put = client.put("/api/v1/memory/trace_x")
        assert put.status_code == 405 and set(put.headers["allow"].split(", ")) == {"GET", "HEAD", "DELETE"}
        assert put.json()["error"]["message"] == "PUT is not allowed on /api/v1/memory/trace_x"


def test_the_daemon_still_works_after_all_of_it(daemon: Daemon) -> None:
    with daemon.client() as client:
        assert client.post("/api/v1/memory/add", json={"content": "still alive after the strictness cases"}).is_success
        assert httpx.get(f"{daemon.url}/api/v1/health").json()["ok"] is True


def _body(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    schema: dict[str, Any] = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return schema


def _query(document: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    params = document["paths"][path]["get"]["parameters"]
    schema: dict[str, Any] = next(p["schema"] for p in params if p["name"] == name)
    return schema


def test_the_document_states_the_same_rules() -> None:
    """additionalProperties false on every body, bounds on every integer, null only on optional fields."""
    document = openapi_document()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            if body is not None:
                schema = body["content"]["application/json"]["schema"]
                assert schema.get("additionalProperties") is False, f"{method} {path}"
            for param in operation.get("parameters", []):
                if param["schema"].get("type") == "integer":
                    assert "minimum" in param["schema"] and "maximum" in param["schema"], f"{path} {param['name']}"
    assert _query(document, "/api/v1/logs", "after")["maximum"] == 2**53 - 1
    assert _query(document, "/api/v1/tombstones", "offset")["maximum"] == 1_000_000_000
    assert _query(document, "/api/v1/panel/items", "pageSize") == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 20,
    }
    add = _body(document, "post", "/api/v1/memory/add")["properties"]
    assert add["source"]["type"] == ["string", "null"] and add["tags"]["anyOf"][0]["type"] == "array"
    worker = _body(document, "post", "/api/v1/worker/run")["properties"]
    assert worker["limit"] == {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 20}
    feedback = _body(document, "post", "/api/v1/feedback")["properties"]
    assert {"id", "memoryId", "episodeId"} <= set(feedback)
    events = document["paths"]["/api/v1/sources/scan/{job_id}/events"]["get"]["responses"]["200"]["content"]
    data = events["text/event-stream"]["schema"]["properties"]["data"]
    assert data["contentMediaType"] == "application/json" and "jobId" in data["contentSchema"]["properties"]
    assert "503" in json.dumps(document["components"]["responses"])
