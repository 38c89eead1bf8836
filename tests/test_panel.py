"""The Memory panel's HTML through the real app: sign-in, every page, forms with CSRF, refusals, languages."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from memmy.commands.evolution import RunWorker
from memmy.commands.governance import ListLogs
from memmy.commands.memory import AddMemory, DeleteMemory, SearchMemory
from memmy.jobs.writer import LayerWrite, LayerWriter
from memmy.namespace import Namespace
from memmy.server.app import create_app
from memmy.service import MemoryService

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
    results = client.get("/panel/memories", params={"q": "staging database port"})
    assert made["id"] in results.text and "rrf=" in results.text  # the verbose evidence
    page = client.get(f"/panel/memories/{made['id']}")
    assert "port 6543" in page.text and "Provenance" in page.text

    refused = client.post(f"/panel/memories/{made['id']}/delete", data={"csrf": "wrong"})
    assert refused.status_code == 403
    assert service.memories.get(made["id"]) is not None

    done = client.post(f"/panel/memories/{made['id']}/delete", data={"csrf": csrf, "next": "/panel/memories"})
    assert done.status_code == 303 and done.headers["location"].startswith("/panel/memories?msg=")
    assert service.memories.get(made["id"]) is None
    assert made["id"] not in client.get("/panel/memories", params={"q": "staging database port"}).text
    audit = client.get("/panel/logs").text
    assert "memory.delete" in audit and "panel" in audit


def test_edit_makes_a_new_version(client: TestClient, service: MemoryService) -> None:
    made = service.add_memory(AddMemory.from_json({"content": "Releases happen on Fridays."}), Namespace())
    csrf = sign_in(client)
    answer = client.post(
        f"/panel/memories/{made['id']}/edit", data={"csrf": csrf, "content": "Releases happen on Thursdays."}
    )
    assert answer.status_code == 303 and "err=" not in answer.headers["location"]
    old = service.memories.get(made["id"])
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
    assert service.memories.get(made["id"]) is not None


def test_review_queue_approve_from_the_panel(client: TestClient, service: MemoryService) -> None:
    service.config.tree["evolution"]["review"] = "required"
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


def test_settings_export_import_and_wipe(client: TestClient, service: MemoryService, tmp_path: Path) -> None:
    made = service.add_memory(AddMemory.from_json({"content": "Our CI runs on self-hosted runners."}), Namespace())
    csrf = sign_in(client)
    exported = client.post("/panel/settings/export", data={"csrf": csrf})
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(BytesIO(exported.content)) as archive:
        assert "manifest.json" in archive.namelist()
    archive_path = tmp_path / "download.zip"
    archive_path.write_bytes(exported.content)

    unconfirmed = client.post("/panel/settings/wipe", data={"csrf": csrf})
    assert "err=" in unconfirmed.headers["location"] and service.memories.get(made["id"]) is not None
    wiped = client.post("/panel/settings/wipe", data={"csrf": csrf, "confirm": "1"})
    assert "msg=" in wiped.headers["location"] and service.memories.get(made["id"]) is None

    imported = client.post("/panel/settings/import", data={"csrf": csrf, "path": str(archive_path)})
    assert "msg=" in imported.headers["location"]
    assert service.memories.get(made["id"]) is not None
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
    assert made["id"] in page and "Deploy with make release" in page
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
    service.delete_memory(gone["id"], DeleteMemory.from_json({}), Namespace())
    sign_in(client)
    by_agent = client.get("/panel/memories", params={"sourceAgent": "cursor"}).text
    assert other["id"] in by_agent and web["id"] not in by_agent
    by_project = client.get("/panel/memories", params={"projectId": "/srv/api"}).text
    assert other["id"] in by_project and web["id"] not in by_project and "1 total" in by_project
    deleted = client.get("/panel/memories", params={"status": "deleted"}).text
    assert gone["id"] in deleted and web["id"] not in deleted
    assert web["id"] not in client.get("/panel/memories", params={"layer": "L2"}).text


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
