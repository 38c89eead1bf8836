"""The daemon's trust boundary, over real HTTP: token by default, browser and DNS-rebinding guard, bad input at the
edge, a full disk, and ``init --url``."""

from __future__ import annotations

import itertools
import json
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.server.routes import ROUTES
from tests.conftest import Daemon, free_port, only_sqlite, small_tmpfs

#: Values for the path parameters of the route table (ids that do not exist: the answer is 404, never 5xx).
PATH_VALUES = {
    "session_id": "session_edge",
    "turn_id": "turn_edge",
    "memory_id": "trace_missing",
    "op": "memory_stats",
    "tombstone_id": "tomb_missing",
    "dream_id": "dream_missing",
    "job_id": "job_missing",
}


def concrete(path: str) -> str:
    """A route path with its parameters filled in."""
    for name, value in PATH_VALUES.items():
        path = path.replace("{" + name + "}", value)
    return path


PROTECTED = [(row.method, concrete(row.path)) for row in ROUTES if row.path != "/api/v1/health"]
#: Routes that read a JSON body (the shutdown route reads none and would stop the daemon).
JSON_ROUTES = [
    (row.method, concrete(row.path))
    for row in ROUTES
    if row.method != "GET" and row.request is not None and not getattr(row.request, "in_query", False)
]


@pytest.fixture(scope="module")
def open_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon started with ``server.auth: none``."""
    home = tmp_path_factory.mktemp("open-home")
    proc = Daemon(home=home, port=free_port(), extra_env={"MEMMY_MEMORY_AUTH": "none"})
    proc.start()
    yield proc
    if proc.process and proc.process.poll() is None:
        proc.stop()


# -- authenticated by default -----------------------------------------------------------------------------------


def test_first_serve_creates_a_private_token(fresh_daemon: Daemon) -> None:
    hook_json = fresh_daemon.home / ".memmy" / "hook.json"  # as an older init wrote it: no token
    hook_json.parent.mkdir(parents=True)
    hook_json.write_text(json.dumps({"endpoint": fresh_daemon.url, "token": None, "timeoutMs": 1500}))
    fresh_daemon.start()
    config_file = fresh_daemon.home / ".memmy" / "config.yaml"
    token = fresh_daemon.token
    assert token and len(token) >= 43  # 32 random bytes, URL-safe
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert json.loads(hook_json.read_text())["token"] == token  # installed hooks keep working
    assert stat.S_IMODE(hook_json.stat().st_mode) == 0o600
    anonymous = httpx.get(f"{fresh_daemon.url}/api/v1/health")
    assert anonymous.status_code == 200 and set(anonymous.json()) == {"ok", "version"}
    assert httpx.get(f"{fresh_daemon.url}/api/v1/panel/overview").status_code == 401
    with fresh_daemon.client() as client:
        detail = client.get("/api/v1/health").json()
        assert detail["storage"]["path"] and detail["storeId"]
        assert client.get("/api/v1/panel/overview").status_code == 200
    fresh_daemon.stop()
    fresh_daemon.start()  # a restart keeps the token
    assert fresh_daemon.config_token() == token


@pytest.fixture(scope="module")
def default_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon started on a fresh home with the default config: no token given anywhere."""
    home = tmp_path_factory.mktemp("default-home")
    proc = Daemon(home=home, port=free_port())
    proc.start()  # reads back the token serve created
    yield proc
    if proc.process and proc.process.poll() is None:
        proc.stop()


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_auth_matrix_from_the_route_table(default_daemon: Daemon, method: str, path: str) -> None:
    body: dict[str, Any] | None = {} if method in ("POST", "DELETE") else None
    url = default_daemon.url + path
    for headers in ({}, {"authorization": "Bearer wrong"}, {"x-api-key": "wrong"}, {"authorization": "Basic x"}):
        response = httpx.request(method, url, json=body, headers=headers, timeout=30)
        assert response.status_code == 401, (method, path, headers, response.text)
        assert response.json()["error"]["code"] == "unauthorized"
    if path != "/api/v1/admin/shutdown":  # with the token the route runs (whatever it then answers)
        good = {"authorization": f"Bearer {default_daemon.token}"}
        assert httpx.request(method, url, json=body, headers=good, timeout=60).status_code != 401


def test_health_with_a_wrong_token_is_refused(daemon: Daemon) -> None:
    assert httpx.get(f"{daemon.url}/api/v1/health", headers={"authorization": "Bearer nope"}).status_code == 401


def test_auth_none_is_explicit_and_logged(open_daemon: Daemon) -> None:
    assert open_daemon.token is None
    assert httpx.get(f"{open_daemon.url}/api/v1/panel/overview").status_code == 200
    assert open_daemon.log_path is not None
    assert "server.auth is 'none'" in open_daemon.log_path.read_text()


# -- browser-proof ------------------------------------------------------------------------------------------------

ORIGINS = [None, "null", "https://evil.example", "http://localhost:5173", "SELF"]
CONTENT_TYPES = ["application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
HOSTS = ["127.0.0.1:PORT", "localhost:PORT", "evil.example:PORT", "127.0.0.1:1"]


def _expected(origin: str | None, content_type: str, host: str, token_sent: bool, auth_on: bool) -> int:
    if host.startswith("evil") or host.endswith(":1"):
        return 421
    if origin not in (None, "SELF"):
        return 403
    if not token_sent and auth_on:
        return 401
    if content_type != "application/json":
        return 415
    return 200


@pytest.mark.parametrize("which", ["token", "auth-none"])
def test_browser_matrix(daemon: Daemon, open_daemon: Daemon, which: str) -> None:
    target = daemon if which == "token" else open_daemon
    auth_on = which == "token"
    marker = f"browser-{uuid.uuid4().hex}"
    accepted = 0
    cases = list(itertools.product(ORIGINS, CONTENT_TYPES, HOSTS, (True, False)))
    for number, (origin, content_type, host, send_token) in enumerate(cases):
        headers = {"content-type": content_type, "host": host.replace("PORT", str(target.port))}
        if origin is not None:
            headers["origin"] = f"http://127.0.0.1:{target.port}" if origin == "SELF" else origin
        if send_token and target.token:
            headers["authorization"] = f"Bearer {target.token}"
        token_sent = send_token or not auth_on
        content = json.dumps({"content": f"{marker} case {number}"})
        write = httpx.post(f"{target.url}/api/v1/memory/add", content=content, headers=headers, timeout=30)
        want = _expected(origin, content_type, host, token_sent, auth_on)
        assert write.status_code == want, (origin, content_type, host, send_token, write.text)
        assert "error" in write.json() if want != 200 else "id" in write.json()
        accepted += want == 200
        read_headers = {k: v for k, v in headers.items() if k != "content-type"}
        read = httpx.get(f"{target.url}/api/v1/panel/items", headers=read_headers, timeout=30)
        assert read.status_code == _expected(origin, "application/json", host, token_sent, auth_on)
    with target.client() as client:
        items = client.get("/api/v1/panel/items", params={"q": marker, "pageSize": 100}).json()
    stored = [i for i in items.get("items", []) if marker in json.dumps(i)]
    assert len(stored) == accepted  # nothing refused was written


def test_a_simple_cross_site_shutdown_is_refused(open_daemon: Daemon) -> None:
    for headers in ({"content-type": "text/plain"}, {"origin": "null"}, {"origin": "https://evil.example"}):
        response = httpx.post(f"{open_daemon.url}/api/v1/admin/shutdown", content=b"x", headers=headers)
        assert response.status_code in (403, 415)
    assert httpx.get(f"{open_daemon.url}/api/v1/health").status_code == 200  # still up


def test_allowed_origins_come_from_config(fresh_daemon: Daemon) -> None:
    config = fresh_daemon.home / ".memmy" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({"memmyMemory": {"server": {"allowedOrigins": ["http://localhost:5173"]}}}))
    fresh_daemon.start()
    with fresh_daemon.client(origin="http://localhost:5173") as client:
        assert client.get("/api/v1/panel/overview").status_code == 200
    with fresh_daemon.client(origin="http://localhost:5174") as client:
        assert client.get("/api/v1/panel/overview").status_code == 403


# -- bad input at the edge ----------------------------------------------------------------------------------------

SURROGATE_BODY = (
    b'{"sessionId": "s-\\ud800", "query": "emoji cut \\ud83d here", "answer": "a \\udfff b",'
    b' "content": "lone \\ud800 surrogate and \\xff", "id": "trace_missing", "polarity": "neutral",'
    b' "memoryIds": ["m\\ud800"], "tags": ["t\\udc00"], "\\ud800key": 1}'
)


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_surrogates_and_deep_json_on_every_json_route(daemon: Daemon, method: str, path: str) -> None:
    headers = {"authorization": f"Bearer {daemon.token}", "content-type": "application/json"}
    for body in (SURROGATE_BODY, SURROGATE_BODY.replace(b"\\xff", b"\xff\xfe")):
        response = httpx.request(method, daemon.url + path, content=body, headers=headers, timeout=60)
        assert response.status_code < 500, (path, response.text)
        assert response.json()
    deep = httpx.request(method, daemon.url + path, content=b"[" * 3000, headers=headers, timeout=60)
    assert deep.status_code == 400, (path, deep.text)
    assert deep.json()["error"]["code"] == "invalid_json"


def test_surrogates_never_cost_a_turn(daemon: Daemon) -> None:
    with daemon.client(**{"content-type": "application/json"}) as client:
        post = client.post
        add = post("/api/v1/memory/add", content=b'{"content": "broken emoji \\ud83d in a note"}')
        assert add.status_code == 200, add.text
        stored = client.get(f"/api/v1/memory/{add.json()['id']}").json()
        assert "broken emoji \ufffd in a note" in json.dumps(stored, ensure_ascii=False)
        search = post("/api/v1/memory/search", content=b'{"query": "broken emoji \\ud83d"}')
        assert search.status_code == 200, search.text
        opened = post("/api/v1/sessions/open", content=b'{"sessionId": "sess-sur", "workspacePath": "/tmp/\\ud800"}')
        assert opened.status_code == 200, opened.text
        start = post("/api/v1/turns/start", content=b'{"sessionId": "sess-sur", "query": "why \\udc00 this"}')
        assert start.status_code == 200, start.text
        turn_id = start.json()["turnId"]
        done = post(
            f"/api/v1/turns/{turn_id}/complete",
            content=b'{"sessionId": "sess-sur", "query": "why \\udc00 this", "answer": "because \\ud800 \xff"}',
        )
        assert done.status_code == 200 and done.json()["captured"] is True, done.text
        l1 = client.get(f"/api/v1/memory/{done.json()['l1MemoryId']}")
        assert l1.status_code == 200 and "because \ufffd \ufffd" in l1.text
        query = client.get("/api/v1/panel/items", params={"q": "broken \udc00".encode("utf-8", "surrogatepass")})
        assert query.status_code == 200


# -- a full disk ----------------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs (root only); skipped where it cannot be mounted."""
    with small_tmpfs(tmp_path, 24) as mount:
        yield mount


def _fill(disk: Path) -> Path:
    """Write zeros to ``disk`` until it is full. Unbuffered: a buffered writer keeps the part of its last write that
    did not fit and raises ENOSPC again when the file is closed (how often depends on the exact free space)."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


@only_sqlite  # the disk that fills is the one under the SQLite file
def test_a_full_disk_under_the_sqlite_file_answers_507_and_health_says_degraded(
    fresh_daemon: Daemon, small_disk: Path, backend: str
) -> None:
    fresh_daemon.extra_env["MEMMY_MEMORY_DB"] = str(small_disk / "memory.sqlite")
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        assert client.post("/api/v1/memory/add", json={"content": "written before the disk filled"}).status_code == 200
        filler = _fill(small_disk)
        for _attempt in range(40):  # until the WAL has to grow (its old pages may still take a write or two)
            big = " ".join(uuid.uuid4().hex for _ in range(5_000))  # ~165 kB of distinct words
            refused = client.post("/api/v1/memory/add", json={"content": big, "title": "never saved"})
            if refused.status_code != 200:
                break
            client.delete(f"/api/v1/memory/{refused.json()['id']}")
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"]["code"] == "storage_full"
        message = refused.json()["error"]["message"]
        assert "full" in message and ("free disk space" in message or "free some space" in message)
        search = client.post("/api/v1/memory/search", json={"query": "written before the disk filled"})
        assert search.status_code == 200  # reads keep working; the recall log is best effort
        health = client.get("/api/v1/health").json()
        assert "ok" in health, health
        assert health["ok"] is False and health["status"] == "degraded" and "disk" in health["reason"]
        assert httpx.get(f"{fresh_daemon.url}/api/v1/health").json() == {"ok": False, "version": health["version"]}
        filler.unlink()
        healed = client.get("/api/v1/health").json()
        assert healed["ok"] is True and healed["status"] == "ok"
        again = client.post("/api/v1/memory/add", json={"content": "written after space came back"})
        assert again.status_code == 200, again.text
        items = client.get("/api/v1/panel/items", params={"q": "never saved"}).json()
        assert not [i for i in items.get("items", []) if i.get("title") == "never saved"]


# -- init --url ----------------------------------------------------------------------------------------------------


def test_init_url_writes_the_port_everywhere(isolated_home: Path) -> None:
    memmy_home = isolated_home / ".memmy"
    memmy_home.mkdir()
    (memmy_home / "hook.json").write_text(json.dumps({"endpoint": "http://127.0.0.1:18960", "token": None}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    result = CliRunner().invoke(cli, ["--url", url, "init", "--no-agents"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    config = yaml.safe_load((memmy_home / "config.yaml").read_text())["memmyMemory"]
    assert config["storage"]["endpoint"] == url and config["server"]["port"] == port
    token = config["storage"]["token"]
    assert token and len(token) >= 43
    assert stat.S_IMODE((memmy_home / "config.yaml").stat().st_mode) == 0o600
    hook = json.loads((memmy_home / "hook.json").read_text())
    assert hook["endpoint"] == url and hook["token"] == token
    assert stat.S_IMODE((memmy_home / "hook.json").stat().st_mode) == 0o600
    other = f"http://127.0.0.1:{free_port()}"
    rerun = CliRunner().invoke(cli, ["init", "--no-agents", "--endpoint", other], catch_exceptions=False)
    assert rerun.exit_code == 0
    assert json.loads((memmy_home / "hook.json").read_text()) == {**hook, "endpoint": other}
    kept = yaml.safe_load((memmy_home / "config.yaml").read_text())["memmyMemory"]["storage"]["token"]
    assert kept == token  # re-running init keeps the token
