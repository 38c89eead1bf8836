"""The real daemon over HTTP: auth matrix, bad input, idempotency, search in two languages, turns."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import Daemon

PROTECTED = [
    ("GET", "/api/v1/panel/overview", None),
    ("GET", "/api/v1/panel/analysis", None),
    ("GET", "/api/v1/panel/items", None),
    ("GET", "/api/v1/panel/tasks", None),
    ("GET", "/api/v1/memory/logs", None),
    ("POST", "/api/v1/memory/search", {"query": "x"}),
    ("POST", "/api/v1/memory/add", {"content": "x"}),
    ("GET", "/api/v1/memory/trace_x", None),
    ("DELETE", "/api/v1/memory/trace_x", None),
    ("POST", "/api/v1/sessions/open", {}),
    ("POST", "/api/v1/turns/start", {"sessionId": "s", "query": "q"}),
    ("POST", "/api/v1/admin/reload-config", {}),
    ("POST", "/api/v1/worker/run", {}),
    ("GET", "/api/v1/openapi.json", None),
]


def test_health_is_anonymous_but_minimal(daemon: Daemon) -> None:
    with daemon.client(token=None) as client:
        anonymous = client.get("/api/v1/health")
    assert anonymous.status_code == 200
    assert set(anonymous.json()) == {"ok", "version"} and anonymous.json()["ok"] is True
    with daemon.client() as client:
        response = client.get("/api/v1/health")
    body = response.json()
    assert body["ok"] is True and body["status"] == "ok" and body["storage"]["backend"] == "sqlite"
    assert body["models"]["embedding"]["fingerprint"] == {"provider": "local", "model": "all-MiniLM-L6-v2", "dim": 384}
    assert "test-token-123" not in response.text


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
def test_every_other_route_needs_the_token(daemon: Daemon, method: str, path: str, body: object) -> None:
    with daemon.client(token=None) as client:
        missing = client.request(method, path, json=body)
    with daemon.client(token="wrong") as client:
        wrong = client.request(method, path, json=body)
    for response in (missing, wrong):
        assert response.status_code == 401
        error = response.json()["error"]
        assert error["code"] == "unauthorized" and error["message"] == "invalid memory service token"
        assert error["requestId"]


@pytest.mark.parametrize("style", ["bearer", "x-api-key", "query"])
def test_token_accepted_in_each_documented_place(daemon: Daemon, style: str) -> None:
    headers = {"authorization": f"Bearer {daemon.token}"} if style == "bearer" else {}
    if style == "x-api-key":
        headers["x-api-key"] = str(daemon.token)
    params = {"token": daemon.token} if style == "query" else {}
    response = httpx.get(f"{daemon.url}/api/v1/panel/overview", headers=headers, params=params)
    assert response.status_code == 200


def test_bad_input_gets_clear_errors(daemon: Daemon) -> None:
    with daemon.client(**{"x-request-id": "req-42"}) as client:
        bad_json = client.post(
            "/api/v1/memory/add", content=b'{"content": ', headers={"content-type": "application/json"}
        )
        assert bad_json.status_code == 400
        assert bad_json.json()["error"]["code"] == "invalid_json"
        assert "not valid JSON" in bad_json.json()["error"]["message"]
        assert bad_json.json()["error"]["requestId"] == "req-42"

        huge = client.post("/api/v1/memory/add", content=json.dumps({"content": "x" * (3 * 1024 * 1024)}))
        assert huge.status_code == 413
        assert "too large" in huge.json()["error"]["message"]

        wrong_type = client.post("/api/v1/memory/add", json={"content": 42})
        assert wrong_type.status_code == 400
        assert "content: expected a non-empty string" in wrong_type.json()["error"]["message"]

        bad_layer = client.post("/api/v1/memory/add", json={"content": "ok", "layer": "L9"})
        assert bad_layer.status_code == 400 and "layer" in bad_layer.json()["error"]["message"]

        bad_limit = client.post("/api/v1/memory/search", json={"query": "x", "limit": "ten"})
        assert bad_limit.status_code == 400 and "limit" in bad_limit.json()["error"]["message"]

        not_object = client.post("/api/v1/memory/search", json=["query"])
        assert not_object.status_code == 400 and "JSON object" in not_object.json()["error"]["message"]

        unknown = client.get("/api/v1/memory/trace_does_not_exist")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"

        unknown_delete = client.delete("/api/v1/memory/trace_does_not_exist")
        assert unknown_delete.status_code == 404

        raw_id = client.get("/api/v1/memory/raw_0123")
        assert raw_id.status_code == 400 and "internal" in raw_id.json()["error"]["message"]

        route = client.get("/api/v1/nope")
        assert route.status_code == 404 and route.json()["error"]["message"] == "GET /api/v1/nope is not registered"

        closed_turn = client.post("/api/v1/turns/start", json={"sessionId": "session_missing", "query": "hi"})
        assert closed_turn.status_code == 404

    # A daemon that refused all of that still works.
    with daemon.client() as client:
        assert client.post("/api/v1/memory/add", json={"content": "still alive after bad input"}).status_code == 200


def test_cross_site_browser_requests_are_refused(daemon: Daemon) -> None:
    with daemon.client(origin="https://evil.example") as client:
        assert client.post("/api/v1/memory/add", json={"content": "csrf"}).status_code == 403
    with daemon.client(origin="http://localhost:5173") as client:  # another loopback port: not on the allowlist
        assert client.get("/api/v1/panel/overview").status_code == 403
    with daemon.client(origin=f"http://localhost:{daemon.port}") as client:  # the daemon's own origin
        assert client.get("/api/v1/panel/overview").status_code == 200


def test_add_search_get_delete_round_trip(daemon: Daemon) -> None:
    with daemon.client(**{"x-memmy-source": "codex"}) as client:
        english = client.post(
            "/api/v1/memory/add",
            json={
                "content": "The staging deploy needs the VPN on; run make deploy-staging from the repo root.",
                "title": "staging deploy",
                "tags": ["deploy", "vpn"],
            },
        ).json()
        chinese = client.post(
            "/api/v1/memory/add",
            json={"content": "这个项目的单元测试要用 pytest -n 4 并行运行，否则超时。", "tags": "测试,pytest"},
        ).json()
        assert english["memoryLayer"] == "L1" and english["kind"] == "trace" and english["sourceAgent"] == "codex"
        assert chinese["tags"] == ["测试", "pytest"]

        found = client.post("/api/v1/memory/search", json={"query": "how do I deploy to staging?"}).json()
        assert found["sourceMemoryIds"][0] == english["id"]
        assert "## L1 Trace Memories" in found["injectedContext"] and english["id"] in found["injectedContext"]

        found_zh = client.post("/api/v1/memory/search", json={"query": "单元测试超时"}).json()
        assert found_zh["sourceMemoryIds"][0] == chinese["id"]

        daemon.drain()
        semantic = client.post("/api/v1/memory/search", json={"query": "VPN", "verbose": True}).json()
        debug = semantic["debug"]
        assert english["id"] in debug["candidateMemoryIds"]
        channels = {c["id"]: c["channels"] for c in debug["channels"]}
        assert "fts" in channels[english["id"]]

        detail = client.get(f"/api/v1/memory/{english['id']}").json()
        assert detail["content"].startswith("The staging deploy") and detail["etag"]
        assert detail["processing"]["state"] == "ready"

        deleted = client.request("DELETE", f"/api/v1/memory/{english['id']}", json={"reason": "test"}).json()
        assert deleted["status"] == "deleted" and deleted["auditId"].startswith("audit_")
        assert client.get(f"/api/v1/memory/{english['id']}").status_code == 404
        after = client.post("/api/v1/memory/search", json={"query": "deploy staging VPN"}).json()
        assert english["id"] not in after["sourceMemoryIds"]


def test_vector_channel_finds_paraphrases(daemon: Daemon) -> None:
    with daemon.client() as client:
        added = client.post(
            "/api/v1/memory/add",
            json={"content": "Always pin numpy below 2 in the legacy analytics service because pandas 1.3 breaks."},
        ).json()
        daemon.drain()
        result = client.post(
            "/api/v1/memory/search",
            json={"query": "upgrading dataframes library fails on legacy code", "verbose": True},
        ).json()
    channels = {c["id"]: c["channels"] for c in result["debug"]["channels"]}
    assert added["id"] in channels and "vec" in channels[added["id"]]


def test_idempotent_replay_and_conflict(daemon: Daemon) -> None:
    body = {"content": "idempotent memory body", "adapterId": "hook", "requestId": "r-1"}
    with daemon.client() as client:
        first = client.post("/api/v1/memory/add", json=body).json()
        replay = client.post("/api/v1/memory/add", json=body).json()
        assert replay["id"] == first["id"] and replay["duplicate"] is True and "duplicate" not in first
        conflict = client.post("/api/v1/memory/add", json={**body, "content": "something else"})
        assert conflict.status_code == 409
        assert conflict.json()["error"]["message"] == "idempotency key reused with different request body"
        # The same adapter request id on two different memories deletes both (the key includes the path id).
        one = client.post("/api/v1/memory/add", json={"content": "idempotent delete one"}).json()["id"]
        two = client.post("/api/v1/memory/add", json={"content": "idempotent delete two"}).json()["id"]
        for memory_id in (one, two):
            deleted = client.request(
                "DELETE", f"/api/v1/memory/{memory_id}", json={"adapterId": "hook", "requestId": "del-1"}
            )
            assert deleted.json()["id"] == memory_id and "duplicate" not in deleted.json()
        other_op = client.post(
            "/api/v1/memory/search", json={"query": "idempotent", "adapterId": "hook", "requestId": "r-1"}
        )
        assert other_op.status_code == 200


def test_session_and_turn_lifecycle(daemon: Daemon) -> None:
    with daemon.client(**{"x-memmy-source": "claude_code"}) as client:
        opened = client.post("/api/v1/sessions/open", json={"workspacePath": "/tmp/project-x"}).json()
        session_id = opened["sessionId"]
        assert opened["status"] == "open" and opened["resumed"] is False
        assert client.post("/api/v1/sessions/open", json={"sessionId": session_id}).json()["resumed"] is True

        start = client.post(
            "/api/v1/turns/start",
            json={
                "sessionId": session_id,
                "query": "<memmy_memory_context>old stuff</memmy_memory_context>"
                "<current_user_request>Why does the build fail with ENOSPC?</current_user_request>",
            },
        ).json()
        assert start["turnId"].startswith("turn_") and start["contextPacketId"].startswith("ctx_")
        assert set(start["injectedContext"]) == {"markdown", "sections", "tokenEstimate"}

        done = client.post(
            f"/api/v1/turns/{start['turnId']}/complete",
            json={
                "sessionId": session_id,
                "query": "Why does the build fail with ENOSPC?",
                "answer": "The disk is full; I cleared the docker build cache and the build passed.",
                "status": "ok",
                "toolCalls": [
                    {"function": {"name": "Bash", "arguments": '{"cmd": "docker builder prune"}'}, "call_id": "c1"},
                    {"name": "memmy_memory_search", "input": {"query": "ENOSPC"}, "output": "secret recall"},
                ],
                "toolResults": [{"content": "Total reclaimed space: 12GB"}],
            },
        ).json()
        assert done["l1MemoryId"].startswith("trace_") and done["rawTurnId"].startswith("raw_")
        assert done["status"] == "succeeded"
        detail = client.get(f"/api/v1/memory/{done['l1MemoryId']}").json()
        raw = detail["refs"]["rawTurn"]
        assert raw["userText"] == "Why does the build fail with ENOSPC?" and raw["status"] == "succeeded"
        calls = raw["toolCalls"]
        assert calls[0]["name"] == "Bash" and calls[0]["id"] == "c1"
        assert calls[0]["output"] == "Total reclaimed space: 12GB"
        assert calls[1]["output"].startswith("[memmy memory result omitted")
        assert "docker" in detail["tags"]
        assert "old stuff" not in detail["content"]
        assert detail["projectId"] == "/tmp/project-x" and detail["sourceAgent"] == "claude_code"

        closed = client.post(f"/api/v1/sessions/{session_id}/close", json={}).json()
        assert closed["status"] == "closed"
        reopen = client.post("/api/v1/sessions/open", json={"sessionId": session_id})
        assert reopen.status_code == 409


def test_panel_logs_and_openapi(daemon: Daemon) -> None:
    with daemon.client() as client:
        client.post("/api/v1/memory/add", json={"content": "panel check memory", "layer": "L2"})
        overview = client.get("/api/v1/panel/overview").json()
        assert overview["counts"]["experiences"] >= 1 and len(overview["dailyActivity"]) == 371
        items = client.get("/api/v1/panel/items", params={"layer": "L2"}).json()
        assert items["total"] >= 1 and all(i["memoryLayer"] == "L2" for i in items["items"])
        logs = client.get("/api/v1/memory/logs", params={"tools": "memory_add", "limit": 2}).json()
        assert logs["logs"] and all(entry["toolName"] == "memory_add" for entry in logs["logs"])
        analysis = client.get("/api/v1/panel/analysis").json()
        assert "p95ToolLatencyMs" in analysis["metrics"]
        spec = client.get("/api/v1/openapi.json").json()
        assert spec["openapi"].startswith("3.") and "/api/v1/memory/add" in spec["paths"]
