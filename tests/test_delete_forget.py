"""One meaning per word: *delete* hides a memory and can be undone (restore, or adding the same text again); *forget*
writes a tombstone; a write the daemon refuses makes the CLI exit non-zero with one line (or a JSON error object)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import cast

import pytest
from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from memmy.cli.main import cli
from memmy.commands.answers import KeyForgotten
from memmy.commands.evolution import RunWorker
from memmy.commands.governance import ListTombstones
from memmy.commands.memory import AddMemory, DeleteMemory, RestoreMemory, SearchMemory
from memmy.errors import Conflict
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.server.app import create_app
from memmy.service import MemoryService
from tests.answers import must
from tests.conftest import Daemon

NS = Namespace(source="cli")
BASE = "http://127.0.0.1:18960"
FACT = "The deploy window is Tuesday 14:00 UTC"


def found(service: MemoryService, query: str) -> list[str]:
    service.run_worker(RunWorker.from_json({}))
    return list(service.search(SearchMemory.from_json({"query": query, "scope": "pooled"}), NS)["sourceMemoryIds"])


def tombstones(service: MemoryService) -> int:
    return int(service.list_tombstones(ListTombstones.from_json({}))["total"])


def test_delete_hides_and_adding_again_brings_the_same_memory_back(service: MemoryService) -> None:
    made = service.add_memory(AddMemory.from_json({"content": FACT, "tags": ["deploy"]}), NS)
    assert made["id"] in found(service, "deploy window Tuesday")
    deleted = service.delete_memory(made["id"], DeleteMemory.from_json({"reason": "typo"}), NS)
    assert deleted["status"] == "deleted" and deleted["restorable"] is True and "tombstoneId" not in deleted
    assert made["id"] not in found(service, "deploy window Tuesday")
    assert tombstones(service) == 0  # delete writes no tombstone

    again = service.add_memory(AddMemory.from_json({"content": FACT.lower(), "tags": ["release"]}), NS)
    assert again["id"] == made["id"] and again["restored"] is True and not again.get("tombstoned")
    assert found(service, "deploy window Tuesday")[0] == made["id"]  # back in FTS and vectors
    assert service.get_memory(made["id"])["tags"] == ["deploy", "release"]


def test_restore_undoes_a_delete_but_not_a_forget(service: MemoryService) -> None:
    made = service.add_memory(AddMemory.from_json({"content": FACT}), NS)
    service.delete_memory(must(made["id"]), DeleteMemory.from_json({}), NS)
    restored = service.restore_memory(must(made["id"]), RestoreMemory.from_json({"reason": "oops"}), NS)
    assert restored["status"] == "activated" and found(service, "deploy window Tuesday")[0] == made["id"]
    with pytest.raises(Conflict, match="not deleted"):
        service.restore_memory(made["id"], RestoreMemory.from_json({}), NS)

    service.delete_memory(made["id"], DeleteMemory.from_json({}), NS)
    # a deleted memory can be forgotten
    forgot = cast(KeyForgotten, service.keys_call(key_args("forget", {"memory_id": made["id"]}), NS))
    assert must(forgot["tombstone_id"]).startswith("tomb_")
    with pytest.raises(Conflict, match=f"tombstones restore {forgot['tombstone_id']}"):
        service.restore_memory(made["id"], RestoreMemory.from_json({}), NS)
    refused = service.add_memory(AddMemory.from_json({"content": FACT}), NS)
    assert refused["tombstoned"] is True and refused["id"] is None


def run(daemon: Daemon, *args: str) -> Result:
    base = ["--url", daemon.url, "--token", str(daemon.token)]
    return CliRunner().invoke(cli, [*base, *args], catch_exceptions=False)


def test_cli_delete_restore_forget_and_a_refused_add_exits_1(daemon: Daemon) -> None:
    added = run(daemon, "add", "The build cache lives on /srv/cache-7")
    assert added.exit_code == 0, added.output
    memory_id = added.output.split()[1]
    deleted = run(daemon, "delete", memory_id)
    assert deleted.exit_code == 0 and f"memmy-memory restore {memory_id}" in deleted.output
    back = run(daemon, "add", "The build cache lives on /srv/cache-7")
    assert back.exit_code == 0 and back.output.startswith("Restored") and memory_id in back.output
    assert run(daemon, "delete", memory_id).exit_code == 0
    assert run(daemon, "restore", memory_id).output.startswith(f"Restored {memory_id}")
    assert run(daemon, "get", memory_id).exit_code == 0

    forgot = run(daemon, "forget", memory_id)
    assert forgot.exit_code == 0 and "tombstone tomb_" in forgot.output
    refused = run(daemon, "add", "The build cache lives on /srv/cache-7")
    assert refused.exit_code == 1
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: not stored: this content was forgotten")
    as_json = run(daemon, "--json", "add", "The build cache lives on /srv/cache-7")
    assert as_json.exit_code == 1
    error = json.loads(as_json.output)["error"]
    assert error["code"] == "tombstoned" and error["tombstoneId"].startswith("tomb_") and error["message"]
    not_restorable = run(daemon, "restore", memory_id)
    assert not_restorable.exit_code == 1 and "tombstones restore" in not_restorable.output


@pytest.fixture
def client(service: MemoryService) -> Iterator[TestClient]:
    with TestClient(create_app(service), base_url=BASE, follow_redirects=False) as test_client:
        yield test_client


def test_panel_delete_shows_restore_and_forget_is_a_different_button(
    client: TestClient, service: MemoryService
) -> None:
    made = service.add_memory(AddMemory.from_json({"content": FACT}), NS)
    link = client.post("/api/v1/panel/sign-in").json()["url"]
    client.get(link.removeprefix(BASE))
    page = client.get(f"/panel/memories/{made['id']}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf and "Forget for good" in page and "Restore brings it back" in page and "tombstone)" not in page
    token = csrf.group(1)
    client.post(f"/panel/memories/{made['id']}/delete", data={"csrf": token})
    hidden = client.get(f"/panel/memories/{made['id']}")
    assert hidden.status_code == 200 and f"/panel/memories/{made['id']}/restore" in hidden.text
    done = client.post(f"/panel/memories/{made['id']}/restore", data={"csrf": token})
    assert done.status_code == 303 and "msg=restored" in done.headers["location"]
    assert service.memories.get(must(made["id"])) is not None and tombstones(service) == 0
