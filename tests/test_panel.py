"""The Memory panel's HTML through the real app: sign-in, every page, forms with CSRF, refusals, languages."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from io import BytesIO
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from memmy.commands.evolution import RunWorker
from memmy.commands.governance import ListLogs
from memmy.commands.memory import AddMemory, DeleteMemory, SearchMemory
from memmy.commands.turn_requests import OpenSession
from memmy.jobs.writer import LayerWrite, LayerWriter
from memmy.namespace import Namespace
from memmy.panel import routes as panel_routes
from memmy.server.app import create_app
from memmy.service import MemoryService
from tests.answers import must
from tests.conftest import Daemon, free_port, only_sqlite

BASE = "http://127.0.0.1:18960"
PAGES = (
    "/panel",
    "/panel/memories",
    "/panel/tasks",
    "/panel/experiences",
    "/panel/world-models",
    "/panel/skills",
    "/panel/review",
    "/panel/recalls",
    "/panel/analytics",
    "/panel/logs",
    "/panel/logs?kind=api",
    "/panel/logs?kind=changes",
    "/panel/logs?kind=dreams",
    "/panel/agents",
    "/panel/settings",
)


@pytest.fixture
def client(service: MemoryService) -> Iterator[TestClient]:
    with TestClient(create_app(service), base_url=BASE, follow_redirects=False) as test_client:
        yield test_client


def sign_in(client: TestClient) -> str:
    """Follow a one-time link; return the page's CSRF token."""
    link = client.post("/api/v1/panel/sign-in").json()["url"]
    assert link.startswith(f"{BASE}/panel/login?code=")
    answer = client.get(link.removeprefix(BASE))
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/panel" in cookie
    page = client.get("/panel")
    assert page.status_code == 200
    return csrf_of(page.text)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def test_signed_out_pages_explain_how_to_sign_in(client: TestClient) -> None:
    answer = client.get("/panel/memories")
    assert answer.status_code == 401
    assert "memmy-memory panel" in answer.text
    assert client.post("/panel/memories/x/delete", data={"csrf": "x"}).status_code == 401


def test_one_time_link_works_once(client: TestClient) -> None:
    link = client.post("/api/v1/panel/sign-in").json()["url"].removeprefix(BASE)
    assert client.get(link).status_code == 303
    fresh = TestClient(client.app, base_url=BASE, follow_redirects=False)
    reused = fresh.get(link)
    assert reused.status_code == 401 and "expired" in reused.text
    assert fresh.get("/panel").status_code == 401


def test_every_page_renders_in_english_and_chinese(client: TestClient, service: MemoryService) -> None:
    service.add_memory(
        AddMemory.from_json({"content": "Use pnpm, not npm, in the web repo."}), Namespace(source="codex")
    )
    sign_in(client)
    for path in PAGES:
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text[:500])
        assert "<nav" in answer.text and 'name="csrf"' in answer.text
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        chinese = client.get(path, headers={"accept-language": "zh-CN,zh;q=0.9,en;q=0.5"})
        assert chinese.status_code == 200 and 'lang="zh-CN"' in chinese.text and "记忆" in chinese.text
    assert "pnpm" in client.get("/panel/memories").text
    assert client.get("/panel/static/panel.css").status_code == 200
    assert "EventSource" in client.get("/panel/static/panel.js").text


def test_search_open_delete_with_csrf(client: TestClient, service: MemoryService) -> None:
    made = service.add_memory(
        AddMemory.from_json({"content": "The staging database listens on port 6543."}), Namespace()
    )
    service.run_worker(RunWorker.from_json({}))
    csrf = sign_in(client)
    shell = client.get("/panel/memories", params={"q": "staging database port", "evidence": "1"})
    assert shell.status_code == 200 and must(made["id"]) not in shell.text  # the page answers before the search runs
    src = re.search(r'id="search-results" data-src="([^"]+)"', shell.text)
    assert src and "evidence=1" in src.group(1)
    results = client.get(src.group(1).replace("&amp;", "&"), headers={"x-panel-fragment": "1"})
    assert must(made["id"]) in results.text and "rrf=" in results.text  # the verbose evidence
    assert "<nav" not in results.text  # only the fragment
    plain = client.get("/panel/memories/results", params={"q": "staging database port"})
    assert (
        must(made["id"]) in plain.text and "rrf=" not in plain.text and "<nav" in plain.text
    )  # no script: a full page
    page = client.get(f"/panel/memories/{made['id']}")
    assert "port 6543" in page.text and "Provenance" in page.text

    refused = client.post(f"/panel/memories/{made['id']}/delete", data={"csrf": "wrong"})
    assert refused.status_code == 403
    assert service.memories.get(must(made["id"])) is not None

    done = client.post(f"/panel/memories/{made['id']}/delete", data={"csrf": csrf, "next": "/panel/memories"})
    assert done.status_code == 303 and done.headers["location"].startswith("/panel/memories?msg=")
    assert service.memories.get(must(made["id"])) is None
    assert must(made["id"]) not in client.get("/panel/memories/results", params={"q": "staging database port"}).text
    audit = client.get("/panel/logs").text
    assert "memory.delete" in audit and "panel" in audit


def test_edit_makes_a_new_version(client: TestClient, service: MemoryService) -> None:
    made = service.add_memory(AddMemory.from_json({"content": "Releases happen on Fridays."}), Namespace())
    csrf = sign_in(client)
    answer = client.post(
        f"/panel/memories/{made['id']}/edit", data={"csrf": csrf, "content": "Releases happen on Thursdays."}
    )
    assert answer.status_code == 303 and "err=" not in answer.headers["location"]
    old = service.memories.get(must(made["id"]))
    assert old is not None and old.superseded_by
    assert "Thursdays" in client.get(f"/panel/memories/{old.superseded_by}").text


def test_foreign_host_and_origin_are_refused(client: TestClient, service: MemoryService) -> None:
    csrf = sign_in(client)
    assert client.get("/panel", headers={"host": "evil.example:18960"}).status_code == 421  # the guard: DNS rebinding
    made = service.add_memory(AddMemory.from_json({"content": "Keep me."}), Namespace())
    answer = client.post(
        f"/panel/memories/{made['id']}/delete", data={"csrf": csrf}, headers={"origin": "https://evil.example"}
    )
    assert answer.status_code == 403
    assert service.memories.get(must(made["id"])) is not None


def test_review_queue_approve_from_the_panel(client: TestClient, service: MemoryService) -> None:
    config = service.config  # the shared settings: one swap reaches every ops group, as a reload does
    service.settings.current = replace(config, evolution=replace(config.evolution, review="required"))
    writer = next(g.writer for g in service.evolution_groups if isinstance(getattr(g, "writer", None), LayerWriter))
    pending = writer.upsert(
        LayerWrite(
            layer="L2",
            key="policy:lint-first",
            title="Lint before committing",
            content="Before committing Python changes, run ruff check.",
            tags=[],
            properties={},
        )
    )
    csrf = sign_in(client)
    queue = client.get("/panel/review")
    assert pending.id in queue.text
    answer = client.post(
        f"/panel/review/{pending.id}",
        data={"csrf": csrf, "decision": "approve", "content": "Before committing Python changes, run ruff check ."},
    )
    assert answer.status_code == 303 and "err=" not in answer.headers["location"]
    approved = service.memories.get(pending.id)
    assert approved is not None and approved.status == "activated"
    assert pending.id not in client.get("/panel/review").text


def test_settings_export_import_and_wipe(
    client: TestClient, service: MemoryService, tmp_path: Path
) -> None:
    made = service.add_memory(AddMemory.from_json({"content": "Our CI runs on self-hosted runners."}), Namespace())
    csrf = sign_in(client)
    exported = client.post("/panel/settings/export", data={"csrf": csrf})
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(BytesIO(exported.content)) as archive:
        assert "manifest.json" in archive.namelist()
    archive_path = tmp_path / "download.zip"
    archive_path.write_bytes(exported.content)

    unconfirmed = client.post("/panel/settings/wipe", data={"csrf": csrf})
    assert "err=" in unconfirmed.headers["location"] and service.memories.get(must(made["id"])) is not None
    wiped = client.post("/panel/settings/wipe", data={"csrf": csrf, "confirm": "1"})
    assert "msg=" in wiped.headers["location"] and service.memories.get(must(made["id"])) is None

    dry = client.post(
        "/panel/settings/import",
        data={"csrf": csrf, "dryRun": "1"},
        files={"archive": ("download.zip", archive_path.read_bytes(), "application/zip")},
    )
    assert "msg=" in dry.headers["location"] and "would%20add" in dry.headers["location"]
    assert service.memories.get(must(made["id"])) is None
    imported = client.post(
        "/panel/settings/import",
        data={"csrf": csrf, "onConflict": "skip"},
        files={"archive": ("download.zip", archive_path.read_bytes(), "application/zip")},
    )
    assert "msg=" in imported.headers["location"], imported.headers["location"]
    assert service.memories.get(must(made["id"])) is not None
    audit = service.governance.logs_page(ListLogs.from_json({"kind": "audit", "action": "store.import"}))["items"]
    assert audit[0]["targetId"] == "upload:download.zip"
    settings = client.get("/panel/settings").text
    assert str(service.config.storage.sqlite_path) in settings


def test_secrets_are_masked_on_the_settings_page(client: TestClient, service: MemoryService) -> None:
    service.config.tree["evolution"]["apiKey"] = "sk-very-secret-value"
    sign_in(client)
    page = client.get("/panel/settings").text
    assert "sk-very-secret-value" not in page and "••••" in page


def test_recall_mark_wrong_gives_negative_feedback(client: TestClient, service: MemoryService) -> None:
    made = service.add_memory(
        AddMemory.from_json({"content": "Deploy with make release from the main branch."}), Namespace()
    )
    service.run_worker(RunWorker.from_json({}))
    service.search(SearchMemory.from_json({"query": "how do I deploy with make release"}), Namespace(source="codex"))
    csrf = sign_in(client)
    page = client.get("/panel/recalls").text
    assert must(made["id"]) in page and "Deploy with make release" in page
    event_id = re.search(r'name="event" value="([^"]+)"', page)
    assert event_id
    answer = client.post("/panel/recalls/wrong", data={"csrf": csrf, "memory": made["id"], "event": event_id.group(1)})
    assert answer.status_code == 303 and "err=" not in answer.headers["location"]
    rows = service.db.query("SELECT polarity FROM feedback")
    assert [r["polarity"] for r in rows] == ["negative"]


def test_memories_filter_by_layer_status_agent_and_project(client: TestClient, service: MemoryService) -> None:
    web = service.add_memory(
        AddMemory.from_json({"content": "The web app uses pnpm.", "workspacePath": "/tmp"}), Namespace(source="codex")
    )
    other = service.add_memory(
        AddMemory.from_json({"content": "The API uses uv."}), Namespace(source="cursor", project_id="/srv/api")
    )
    gone = service.add_memory(AddMemory.from_json({"content": "An outdated fact."}), Namespace(source="codex"))
    service.delete_memory(must(gone["id"]), DeleteMemory.from_json({}), Namespace())
    sign_in(client)
    by_agent = client.get("/panel/memories", params={"sourceAgent": "cursor"}).text
    assert must(other["id"]) in by_agent and must(web["id"]) not in by_agent
    by_project = client.get("/panel/memories", params={"projectId": "/srv/api"}).text
    assert must(other["id"]) in by_project and must(web["id"]) not in by_project and "1 total" in by_project
    deleted = client.get("/panel/memories", params={"status": "deleted"}).text
    assert must(gone["id"]) in deleted and must(web["id"]) not in deleted
    assert must(web["id"]) not in client.get("/panel/memories", params={"layer": "L2"}).text


def test_install_and_remove_an_integration_from_the_panel(
    client: TestClient, service: MemoryService, isolated_home: Path
) -> None:
    (isolated_home / ".claude").mkdir()
    csrf = sign_in(client)
    page = client.get("/panel/agents").text
    assert 'action="/panel/integrations/claude_code/install"' in page
    assert 'action="/panel/integrations/codex/install"' not in page  # not detected here
    done = client.post("/panel/integrations/claude_code/install", data={"csrf": csrf})
    assert done.status_code == 303 and "err=" not in done.headers["location"], done.headers["location"]
    skill = isolated_home / ".claude" / "skills" / "memmy-memory" / "SKILL.md"
    settings = json.loads((isolated_home / ".claude" / "settings.json").read_text())
    assert skill.is_file() and "memmy-hook" in json.dumps(settings)
    assert 'action="/panel/integrations/claude_code/remove"' in client.get("/panel/agents").text
    removed = client.post("/panel/integrations/claude_code/remove", data={"csrf": csrf})
    assert "err=" not in removed.headers["location"] and not skill.exists()
    refused = client.post("/panel/integrations/codex/install", data={"csrf": csrf})
    assert "err=" in refused.headers["location"]
    actions = [row["action"] for row in service.governance.logs_page(ListLogs.from_json({"kind": "audit"}))["items"]]
    assert actions[:2] == ["integration.remove", "integration.install"]


def test_a_session_survives_a_daemon_restart_and_sign_out_revokes_it(tmp_path: Path) -> None:
    home = tmp_path / "restart-home"
    home.mkdir()
    daemon = Daemon(home=home, port=free_port(), token="panel-restart-token")
    daemon.start()
    try:
        with daemon.client() as api:
            link = api.post("/api/v1/panel/sign-in").json()["url"]
        browser = httpx.Client(base_url=daemon.url, follow_redirects=False, timeout=30)
        assert browser.get(link.removeprefix(daemon.url)).status_code == 303
        cookie = browser.cookies["memmy_panel"]
        stored = (home / ".memmy" / "panel-sessions.json").read_text()
        assert cookie not in stored and hashlib.sha256(cookie.encode()).hexdigest() in stored
        assert (home / ".memmy" / "panel-sessions.json").stat().st_mode & 0o777 == 0o600
        csrf = csrf_of(browser.get("/panel").text)

        daemon.stop()
        daemon.start()
        again = browser.get("/panel")
        assert again.status_code == 200 and csrf_of(again.text) == csrf  # still signed in, same CSRF token
        assert browser.post("/panel/logout", data={"csrf": csrf}).status_code == 303
        browser.cookies.set("memmy_panel", cookie, path="/panel")  # a copy of the cookie kept elsewhere
        assert browser.get("/panel").status_code == 401
        assert hashlib.sha256(cookie.encode()).hexdigest() not in (home / ".memmy" / "panel-sessions.json").read_text()
        browser.close()
    finally:
        daemon.stop()


def test_import_upload_refuses_bad_files_and_changes_nothing(
    client: TestClient, service: MemoryService, tmp_path: Path
) -> None:
    made = service.add_memory(AddMemory.from_json({"content": "Keep this memory through a bad import."}), Namespace())
    csrf = sign_in(client)
    before = service.governance.reads.counts()

    def upload(name: str, data: bytes, token: str = csrf) -> str:
        answer = client.post("/panel/settings/import", data={"csrf": token}, files={"archive": (name, data, "x/y")})
        assert answer.status_code in (303, 403)
        return str(answer.headers.get("location", answer.status_code))

    assert "not%20a%20memmy%20export" in upload("notes.txt", b"plain text, not an archive")
    assert "notes.txt" in upload("notes.txt", b"plain text") and "memmy-upload-" not in upload("n.txt", b"x")
    damaged = BytesIO()
    with zipfile.ZipFile(damaged, "w") as archive:
        archive.writestr(
            "manifest.json",
            json.dumps(
                {
                    "format": "memmy-export/1",
                    "schemaVersion": 1,
                    "tables": {"memories": {"rows": 1, "sha256": "0" * 64}},
                }
            ),
        )
        archive.writestr("tables/memories.jsonl", '{"id": "mem_x"}\n')
    assert "checksum" in upload("damaged.zip", damaged.getvalue())
    assert (
        "choose%20an%20export%20archive"
        in client.post(
            "/panel/settings/import", data={"csrf": csrf}, files={"archive": ("", b"", "application/zip")}
        ).headers["location"]
    )
    assert upload("x.zip", b"x", token="wrong") == "403"
    assert service.governance.reads.counts() == before and service.memories.get(must(made["id"])) is not None
    assert not service.governance.logs_page(ListLogs.from_json({"kind": "audit", "action": "store.import"}))["items"]


def test_import_upload_over_the_size_limit_is_refused(service: MemoryService, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(panel_routes, "MAX_UPLOAD_BYTES", 4096)
    with TestClient(create_app(service), base_url=BASE, follow_redirects=False) as small:
        csrf = sign_in(small)
        fits = small.post("/panel/settings/import", data={"csrf": csrf}, files={"archive": ("a.zip", b"x" * 100)})
        assert fits.status_code == 303  # reached the panel (and was refused there: not an archive)
        big = small.post("/panel/settings/import", data={"csrf": csrf}, files={"archive": ("a.zip", b"x" * 8192)})
        assert big.status_code == 413 and "limit 4096 bytes" in big.text
        json_limit = service.config.server.max_body_bytes  # other routes keep the JSON body limit
        other = small.post(
            "/api/v1/memory/add",
            content=b"{" + b" " * (json_limit + 1) + b"}",
            headers={"content-type": "application/json"},
        )
        assert other.status_code == 413


def test_memories_filter_by_date(client: TestClient, service: MemoryService) -> None:
    old = service.add_memory(AddMemory.from_json({"content": "An old note about the billing service."}), Namespace())
    new = service.add_memory(AddMemory.from_json({"content": "A new note about the search service."}), Namespace())
    with service.db.transaction() as conn:
        conn.execute("UPDATE memories SET updated_at = ? WHERE id = ?", ("2025-01-15T10:00:00.000Z", old["id"]))
    service.governance.reads.invalidate()
    sign_in(client)
    january = client.get("/panel/memories", params={"from": "2025-01-01", "to": "2025-01-31"}).text
    assert must(old["id"]) in january and must(new["id"]) not in january and "1 total" in january
    assert 'name="from" value="2025-01-01"' in january
    since = client.get("/panel/memories", params={"from": "2025-02-01"}).text
    assert must(new["id"]) in since and must(old["id"]) not in since
    one_day = client.get("/panel/memories", params={"from": "2025-01-15", "to": "2025-01-15"}).text
    assert must(old["id"]) in one_day
    bad = client.get("/panel/memories", params={"from": "last tuesday"})
    assert bad.status_code == 400 and "expected a date" in bad.text
    service.run_worker(RunWorker.from_json({}))
    found = client.get("/panel/memories/results", params={"q": "note about the service", "to": "2025-01-31"}).text
    hits = re.findall(r'<a href="/panel/memories/([^"]+)">', found)
    assert old["id"] in hits and new["id"] not in hits  # the date filter applies to search results too


def test_overview_warns_about_broken_quiet_and_misdirected_hooks(
    client: TestClient, service: MemoryService, isolated_home: Path
) -> None:
    (isolated_home / ".claude").mkdir()
    csrf = sign_in(client)
    assert "err=" not in client.post("/panel/integrations/claude_code/install", data={"csrf": csrf}).headers["location"]

    def warnings() -> str:
        service.governance.reads.invalidate()
        html = client.get("/panel").text
        return html.split('<ul class="warn">', 1)[1].split("</ul>", 1)[0] if '<ul class="warn">' in html else ""

    assert "claude_code" not in warnings()  # just installed, pointing at this daemon: nothing to say
    settings_file = isolated_home / ".claude" / "settings.json"
    ten_days_ago = time.time() - 10 * 86400
    os.utime(settings_file, (ten_days_ago, ten_days_ago))
    quiet = warnings()
    assert "claude_code: memmy is installed but claude_code has not called the daemon since it was installed" in quiet
    assert "memmy-memory remove --agent claude_code" in quiet
    service.open_session(OpenSession.from_json({}), Namespace(source="claude_code"))
    assert "has not called" not in warnings()

    hook_json = isolated_home / ".memmy" / "hook.json"
    settings = json.loads(hook_json.read_text())
    hook_json.write_text(json.dumps({**settings, "endpoint": "http://127.0.0.1:1"}))
    assert "sends hooks to http://127.0.0.1:1" in warnings()
    assert f"fix: memmy-memory init --endpoint {BASE}" in warnings()

    command = json.dumps(json.loads(settings_file.read_text())["hooks"])
    launcher = Path(re.search(r'"command": "([^" ]+)', command).group(1))  # type: ignore[union-attr]
    launcher.unlink()
    broken = warnings()
    assert f"the memmy launcher {launcher} is missing" in broken and "fix: memmy-memory init" in broken


@only_sqlite
def test_overview_warns_when_the_sqlite_store_cannot_write(client: TestClient, service: MemoryService) -> None:
    sign_in(client)
    assert "the store is degraded" not in client.get("/panel").text
    service.db.mark_failed("database or disk is full")
    service.db.conn.execute("PRAGMA query_only=ON")  # and the probe write fails too
    try:
        assert "the store is degraded: database or disk is full" in client.get("/panel").text
    finally:
        service.db.conn.execute("PRAGMA query_only=OFF")
    assert "the store is degraded" not in client.get("/panel").text  # a probe write succeeded


def test_expensive_aggregates_refresh_behind_the_request(service: MemoryService) -> None:
    reads = service.governance.reads
    computed: list[int] = []
    release = threading.Event()

    def compute() -> int:
        if computed:
            release.wait(30)  # the refresh is slow; requests meanwhile get the previous value
        computed.append(len(computed) + 1)
        return len(computed)

    assert reads.cached("test", 0.0, compute, refresh_behind=True) == 1  # nothing cached: computed in the request
    assert reads.cached("test", 0.0, compute, refresh_behind=True) == 1  # expired: the old value, refresh started
    assert reads.cached("test", 0.0, compute, refresh_behind=True) == 1  # one refresh at a time
    release.set()
    for _ in range(3000):
        if reads.cached("test", 3600.0, compute, refresh_behind=True) == 2:
            break
        threading.Event().wait(0.01)
    assert computed == [1, 2]
    reads.invalidate()
    assert reads.cached("test", 3600.0, compute, refresh_behind=True) == 3  # after invalidate: computed again


def test_add_another_agent_from_the_panel(client: TestClient, service: MemoryService, isolated_home: Path) -> None:
    sessions = isolated_home / ".kimi" / "sessions"
    sessions.mkdir(parents=True)
    lines = [
        {"id": "m1", "session": "s1", "who": "human", "msg": {"text": "add a retry to the uploader"}, "ts": 1780305834},
        {"id": "m2", "session": "s1", "who": "ai", "msg": {"text": "Added a retry to upload()."}, "ts": 1780305840},
        {"id": "m3", "session": "s1", "who": "human", "msg": {"text": "now log the attempts"}, "ts": 1780305900},
    ]
    (sessions / "s1.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    csrf = sign_in(client)
    assert 'action="/panel/agents/add"' in client.get("/panel/agents").text
    form = {
        "csrf": csrf,
        "name": "Kimi Code",
        "history": str(sessions),
        "format": "jsonl",
        "fields": "role=who, content=msg.text, createdAt=ts, conversationId=session, messageId=id",
        "roleMap": "human=user\nai=assistant",
    }
    wrong = client.post("/panel/agents/add", data={**form, "fields": "content=nothing.here"})
    assert "no%20messages%20could%20be%20read" in wrong.headers["location"]
    assert not (isolated_home / ".memmy" / "sources" / "kimicode.json").exists()
    assert "built%20in" in client.post("/panel/agents/add", data={**form, "name": "codex"}).headers["location"]

    added = client.post("/panel/agents/add", data=form)
    assert added.status_code == 303 and added.headers["location"].startswith("/panel/agents?job=")
    job_id = added.headers["location"].split("job=", 1)[1]
    version, status = -1, service.imports.status(job_id)
    for _ in range(60):  # a minute at most
        if status["state"] in ("done", "stopped", "failed"):
            break
        version, status = service.imports.wait_for_change(job_id, version, 1.0)
    assert status["state"] == "done" and status["totals"]["turnsAdded"] == 1, status
    assert (isolated_home / ".memmy" / "sources" / "kimicode.json").is_file()
    assert "kimicode" in client.get("/panel/agents").text
    audit = service.governance.logs_page(ListLogs.from_json({"kind": "audit", "action": "source.add"}))["items"]
    assert audit[0]["targetId"] == "kimicode" and audit[0]["actor"]["source"] == "panel"


def test_analytics_top_projects_counts_live_memories_per_project(service: MemoryService) -> None:
    api = Namespace(source="cursor", project_id="/srv/api")
    service.add_memory(AddMemory.from_json({"content": "The API uses uv for dependencies."}), api)
    service.add_memory(AddMemory.from_json({"content": "The API listens on port 8080."}), api)
    gone = service.add_memory(AddMemory.from_json({"content": "The API used pip once."}), api)
    service.delete_memory(must(gone["id"]), DeleteMemory.from_json({}), Namespace())
    service.add_memory(AddMemory.from_json({"content": "Prefer short commit messages."}), Namespace(source="codex"))
    top = service.governance.analytics()["topProjects"]
    assert top[0] == {"project": "/srv/api", "count": 2}  # deleted ones not counted
    assert sum(row["count"] for row in top) == 3


@only_sqlite
def test_time_ordered_panel_reads_walk_an_index_in_the_sqlite_query_plan(service: MemoryService) -> None:
    def plan(sql: str, params: tuple[str, ...] = ()) -> str:
        return " | ".join(str(row[3]) for row in service.db.query("EXPLAIN QUERY PLAN " + sql, params))

    recalls = plan("SELECT * FROM recall_events ORDER BY created_at DESC, rowid DESC LIMIT 10 OFFSET 0")
    assert "idx_recall_events_created" in recalls and "TEMP B-TREE" not in recalls  # the Recalls page
    today = plan("SELECT COUNT(*) FROM recall_events WHERE created_at >= ?", ("2026-12-03",))
    assert "idx_recall_events_created" in today  # today's injections on the Overview
    per_day = plan(
        "SELECT substr(created_at, 1, 10) AS day, memory_layer, COUNT(*) FROM memories WHERE created_at >= ? "
        "GROUP BY day, memory_layer",
        ("2026-11-03",),
    )
    assert "COVERING INDEX idx_memories_created_layer" in per_day  # memories per day in Analytics


def test_the_language_choice_lasts_past_one_page_and_the_switch_keeps_the_query(client: TestClient) -> None:
    sign_in(client)
    english_browser = {"accept-language": "en-US,en;q=0.9"}
    chosen = client.get("/panel?lang=zh", headers=english_browser)
    assert 'lang="zh-CN"' in chosen.text and "memmy_lang=zh" in chosen.headers["set-cookie"]
    assert "Path=/panel" in chosen.headers["set-cookie"]
    for path in ("/panel/memories", "/panel/logs?kind=api", "/panel/settings"):  # nav links carry no ?lang
        later = client.get(path, headers=english_browser)
        assert 'lang="zh-CN"' in later.text and "记忆" in later.text, path
    filtered = client.get("/panel/memories?layer=L1&status=active", headers=english_browser)
    switch = re.search(r'<span class="lang">(.*?)</span>', filtered.text)
    assert switch is not None
    assert 'href="/panel/memories?layer=L1&amp;status=active&amp;lang=en"' in switch.group(1)
    back = client.get("/panel/memories?layer=L1&lang=en")
    assert 'lang="en"' in back.text and "memmy_lang=en" in back.headers["set-cookie"]
    assert 'lang="en"' in client.get("/panel", headers={"accept-language": "zh-CN"}).text


def test_the_favicon_needs_no_token_and_every_page_links_it(client: TestClient) -> None:
    icon = client.get("/favicon.ico")  # no token, no session: what a browser sends
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.content.startswith(b"<svg")
    assert client.get("/panel/static/favicon.svg").content == icon.content
    signed_out = client.get("/panel")
    assert '<link rel="icon" href="/panel/static/favicon.svg"' in signed_out.text


def test_a_token_protected_daemon_serves_the_favicon_without_the_token(daemon: Daemon) -> None:
    icon = httpx.get(f"{daemon.url}/favicon.ico")
    assert icon.status_code == 200 and icon.content.startswith(b"<svg")
    assert httpx.get(f"{daemon.url}/api/v1/memory/logs").status_code == 401  # the rest still needs it
