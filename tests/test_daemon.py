"""Daemon lifecycle: durability across kill -9, graceful SIGTERM, the server lock, reload-config, bind policy."""

from __future__ import annotations

import gc
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

from memmy.server.run import settle_heap
from tests.conftest import SUITE_BACKEND, Daemon, free_port, only_sqlite

ANIMALS = (
    "kiwi",
    "otter",
    "lynx",
    "heron",
    "badger",
    "walrus",
    "gecko",
    "puffin",
    "tapir",
    "ibex",
    "koala",
    "lemur",
    "marmot",
    "narwhal",
    "ocelot",
    "pelican",
    "quokka",
    "raccoon",
    "stoat",
    "toucan",
    "urchin",
    "vulture",
    "wombat",
    "yak",
    "zebra",
)


def db_path(daemon: Daemon) -> Path:
    return daemon.home / ".memmy" / "memory-service" / "memory.sqlite"


def test_acknowledged_writes_survive_kill_9(fresh_daemon: Daemon) -> None:
    fresh_daemon.start()
    ids = []
    with fresh_daemon.client() as client:
        for animal in ANIMALS:
            response = client.post("/api/v1/memory/add", json={"content": f"durable fact about the {animal} enclosure"})
            assert response.status_code == 200
            ids.append(response.json()["id"])
    fresh_daemon.stop(signal.SIGKILL)
    lock = db_path(fresh_daemon).with_name("memory.sqlite.server.lock")
    # left behind by the killed process: the restart must clear it (the lock is per SQLite file; daemons share a
    # PostgreSQL database)
    assert lock.exists() == (SUITE_BACKEND == "sqlite")
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        for memory_id in ids:
            assert client.get(f"/api/v1/memory/{memory_id}").status_code == 200
        fresh_daemon.drain()
        for animal, memory_id in zip(ANIMALS, ids, strict=True):
            found = client.post("/api/v1/memory/search", json={"query": f"{animal} enclosure", "verbose": True}).json()
            assert found["sourceMemoryIds"][0] == memory_id
            assert set(found["debug"]["channels"][0]["channels"]) >= {"fts", "vec"}


def test_sigterm_is_graceful_and_removes_the_lock(fresh_daemon: Daemon) -> None:
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        memory_id = client.post("/api/v1/memory/add", json={"content": "graceful shutdown keeps me"}).json()["id"]
    assert fresh_daemon.stop(signal.SIGTERM) == 0
    assert not db_path(fresh_daemon).with_name("memory.sqlite.server.lock").exists()
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        assert client.get(f"/api/v1/memory/{memory_id}").json()["content"] == "graceful shutdown keeps me"


@only_sqlite
def test_second_daemon_on_the_same_file_is_refused(fresh_daemon: Daemon, backend: str) -> None:
    fresh_daemon.start()
    second = Daemon(home=fresh_daemon.home, port=free_port())
    result = subprocess.run(
        [sys.executable, "-m", "memmy", "serve", "--port", str(second.port)],
        env=second.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"already served by pid {fresh_daemon.process.pid}" in result.stderr  # type: ignore[union-attr]


def test_non_loopback_bind_needs_a_token(fresh_daemon: Daemon) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "memmy", "serve", "--host", "0.0.0.0", "--port", str(fresh_daemon.port)],
        env=fresh_daemon.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "refusing to listen on non-loopback address 0.0.0.0 without a token" in result.stderr


def test_reload_config_applies_retrieval_and_flags_storage(fresh_daemon: Daemon) -> None:
    config = fresh_daemon.home / ".memmy" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("memmyMemory:\n  algorithm:\n    enableMemorySearch: true\n")
    fresh_daemon.token = "reload-token"  # from the environment: the rewrites below keep the same storage section
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        client.post("/api/v1/memory/add", json={"content": "reloadable search target"})
        config.write_text("memmyMemory:\n  algorithm:\n    enableMemorySearch: false\n")
        reloaded = client.post("/api/v1/admin/reload-config", json={"reason": "test"}).json()
        assert reloaded["requiresRestart"] is False and "algorithm" in reloaded["changed"]
        disabled = client.post("/api/v1/memory/search", json={"query": "reloadable search target"}).json()
        assert disabled["status"] == ["memory_search:disabled"] and disabled["injectedContext"] == ""

        config.write_text("memmyMemory:\n  storage:\n    sqlitePath: /tmp/elsewhere.sqlite\n")
        moved = client.post("/api/v1/admin/reload-config", json={}).json()
        assert moved["requiresRestart"] is True
        # The running daemon keeps serving its current file until restarted.
        assert client.get("/api/v1/health").json()["storage"]["path"] == str(db_path(fresh_daemon))

        config.write_text("memmyMemory:\n  algorithm:\n    retrieval:\n      tier1TopK: many\n")
        broken = client.post("/api/v1/admin/reload-config", json={})
        assert broken.status_code == 400
        assert "tier1TopK: expected an integer" in broken.json()["error"]["message"]
        assert str(config) in broken.json()["error"]["message"]


def test_admin_shutdown(fresh_daemon: Daemon) -> None:
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        assert client.post("/api/v1/admin/shutdown").json() == {"accepted": True}
    assert fresh_daemon.process is not None
    assert fresh_daemon.process.wait(timeout=30) == 0
    lock = db_path(fresh_daemon).with_name("memory.sqlite.server.lock")
    assert not lock.exists(), json.dumps(lock.read_text() if lock.exists() else "")


def test_port_in_use_is_one_clear_error(fresh_daemon: Daemon) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", fresh_daemon.port))
        taken.listen()
        result = subprocess.run(
            [sys.executable, "-m", "memmy", "serve", "--port", str(fresh_daemon.port)],
            env=fresh_daemon.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{fresh_daemon.port}" in result.stderr
    assert not db_path(fresh_daemon).with_name("memory.sqlite.server.lock").exists()


def test_settling_the_heap_leaves_a_full_collection_nothing_of_startup_to_walk() -> None:
    gc.collect()
    try:
        settle_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # this test process's modules and objects, at least
        assert sum(gc.get_count()) < frozen  # what a collection would walk is only what came after
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
