"""While the store cannot write, every agent-facing path says "memory unavailable" instead of going silent: health
is degraded with the reason, the MCP search tool and the `memmy` agent get the line, and it all clears once a
probe write succeeds. (On main, health said ok and a recall answer said nothing.)

The store is made to refuse writes for real: SQLite answers "attempt to write a readonly database" (what a file
without write permission gives; the tests run as root, so the connection is made read-only instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from memmy.agent.memory import MemoryBridge
from memmy.cli.client import ClientSettings
from memmy.server.app import create_app
from memmy.service import MemoryService
from tests.conftest import only_sqlite
from tests.test_mcp import ServerThread, data, http_transport, with_client
from tests.test_mcp import token_service as token_service  # the fixture: a service whose token is http-token-7

TOKEN = "http-token-7"
NOTE = "The nightly backup job writes to the cold-storage bucket osprey-archive."


@pytest.fixture
def server(token_service: MemoryService) -> Iterator[ServerThread]:
    """The daemon's app (its /mcp endpoint included) on a free port, with one memory stored."""
    with ServerThread(create_app(token_service)) as running:
        with httpx.Client(base_url=running.url, headers={"authorization": f"Bearer {TOKEN}"}) as api:
            assert api.post("/api/v1/memory/add", json={"content": NOTE}).status_code == 200
        yield running


@only_sqlite  # the refusal is injected with SQLite's PRAGMA query_only
def test_every_agent_path_says_memory_is_unavailable_when_the_sqlite_file_refuses_writes(
    server: ServerThread, token_service: MemoryService, backend: str
) -> None:
    api = httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
    token_service.db.conn.execute("PRAGMA query_only=ON")  # the store refuses every write from now on
    try:
        refused = api.post("/api/v1/memory/add", json={"content": "a note that cannot be saved"})
        assert refused.status_code == 507 and refused.json()["error"]["code"] == "storage_full", refused.text
        assert "readonly database" in refused.json()["error"]["message"]
        health = api.get("/api/v1/health").json()
        assert health["ok"] is False and health["status"] == "degraded" and "cannot write" in health["reason"]
        assert httpx.get(f"{server.url}/api/v1/health").json()["ok"] is False

        async def search(client: Client) -> Any:
            return data(await client.call_tool("memmy_memory_search", {"query": "nightly backup bucket"}))

        found = with_client(http_transport(f"{server.url}/mcp", TOKEN), search)
        assert found["unavailable"].startswith("memmy: memory unavailable (the store ")
        assert found["injectedContext"].startswith("memmy: memory unavailable")
        assert "osprey-archive" in found["injectedContext"]  # what could be read is still there

        async def agent_turn() -> tuple[Any, str | None]:
            settings = ClientSettings(url=server.url, token=TOKEN, user_id=None, source="memmy", workspace_path=None)
            memory = MemoryBridge(settings, timeout_s=60)
            try:
                recall = await memory.start_turn("cli:degraded", "where does the nightly backup go?")
                return recall, memory.take_warning()
            finally:
                await memory.aclose()

        recall, warning = anyio.run(agent_turn)
        assert recall is None  # a turn start records the turn: it cannot, so the agent says why
        assert warning is not None and warning.startswith("memory unavailable (") and "507" in warning
    finally:
        token_service.db.conn.execute("PRAGMA query_only=OFF")
    healed = api.get("/api/v1/health").json()
    assert healed["ok"] is True and healed["status"] == "ok"  # a probe write succeeded
    clean = api.post("/api/v1/memory/search", json={"query": "nightly backup bucket", "scope": "pooled"}).json()
    assert "unavailable" not in clean and not clean["injectedContext"].startswith("memmy: memory unavailable")
    api.close()
