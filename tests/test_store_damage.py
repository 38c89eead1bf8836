"""A damaged or full store is named, not hidden: the real daemon refuses a 0-byte, garbage or truncated file with
one line, rebuilds a damaged full-text index at start, ``doctor`` reports and repairs offline, and a full disk is a
``storage_full`` error (never a committed write answered as failed, nor a failed one as saved)."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memmy.commands.memory import AddMemory
from memmy.config import load_config
from memmy.domain import Memory
from memmy.embed import Embedder
from memmy.errors import StorageFullError
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.db import Database, create_store_file
from memmy.store.integrity import check_store
from memmy.store.memories import MemoryFilter, MemoryRepository
from tests.conftest import Daemon, free_port, only_sqlite, small_tmpfs

MARKER = "zanzibarquokka"

#: Every test here damages, fills or repairs the SQLite file itself (its pages, its FTS5 index, the disk under it):
#: SQLite only, and each id says so (``[sqlite]``). PostgreSQL keeps and checks its own files.
pytestmark = only_sqlite


@pytest.fixture(autouse=True)
def sqlite_file(backend: str) -> str:
    """The store of every test here is a SQLite file."""
    return backend


def env_for(home: Path, db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMY_", "MEMORY_SERVICE_"))}
    env.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "MEMMY_MEMORY_DB": str(db)})
    return env


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    """A real store with 300 memories (enough for many full-text pages), closed and checkpointed."""
    home = tmp_path_factory.mktemp("sample-home")
    db = home / "sample.sqlite"
    config = load_config(env=env_for(home, db))
    service = MemoryService.open(config, embedder=embedder)
    ns = Namespace.from_headers({}, config.user_id)
    words = ["deploy", "rollback", "pytest", "fixture", "sqlite", "vector", "release", "branch", "review"]
    rng = random.Random(7)
    for i in range(300):
        text = " ".join(rng.choice(words) for _ in range(60))
        service.add_memory(
            AddMemory.from_json({"content": (f"{MARKER} " if i == 17 else "") + f"note {i}: {text}"}), ns
        )
    service.close()
    return db


def copy_store(src: Path, dest_dir: Path) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / "memory.sqlite"
    shutil.copy(src, dest)
    return dest


def garble_pages(db: Path, table: str, count: int = 12) -> list[int]:
    """Overwrite ``count`` leaf pages of ``table`` with random bytes (what a bad disk or a stray write does)."""
    with sqlite3.connect(db) as conn:
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,))]
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    assert pages, f"no leaf pages for {table}"
    rng = random.Random(3)
    chosen = pages[:count]
    with db.open("r+b") as handle:
        for page in chosen:
            handle.seek((page - 1) * page_size)
            handle.write(bytes(rng.randrange(256) for _ in range(page_size)))
    return chosen


def run_serve(home: Path, db: Path, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    """``memmy-memory serve`` on a free port; a daemon that starts instead of refusing is stopped and fails."""
    process = subprocess.Popen(
        [sys.executable, "-m", "memmy", "serve", "--port", str(free_port())],
        env=env_for(home, db),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the daemon started on a broken store instead of refusing it:\n{err[-2000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def doctor(home: Path, db: Path, *args: str, json_output: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memmy", *(["--json"] if json_output else []), "doctor", *args],
        env=env_for(home, db),
        capture_output=True,
        text=True,
        timeout=120,
    )


def breakers() -> dict[str, object]:
    def empty(db: Path) -> None:
        db.write_bytes(b"")

    def garbage_header(db: Path) -> None:
        with db.open("r+b") as handle:
            handle.write(b"this is not a database header, just junk bytes" * 2)

    def truncated(db: Path) -> None:
        size = db.stat().st_size
        with db.open("r+b") as handle:
            handle.truncate(size // 3)

    return {"empty": empty, "garbage_header": garbage_header, "truncated": truncated}


@pytest.mark.parametrize("damage", ["empty", "garbage_header", "truncated"])
def test_daemon_refuses_a_broken_file_with_one_line(sample_store: Path, tmp_path: Path, damage: str) -> None:
    db = copy_store(sample_store, tmp_path / "store")
    breakers()[damage](db)  # type: ignore[operator]
    before = db.read_bytes()
    result = run_serve(tmp_path, db)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert "Traceback" not in result.stderr
    assert str(db) in line and "restore a backup or move it aside" in line and "memmy-memory doctor" in line
    assert {"empty": "empty (0 bytes)", "garbage_header": "not a SQLite database", "truncated": "truncated"}[
        damage
    ] in line
    assert db.read_bytes() == before  # untouched: a 0-byte file did not become a new empty store
    assert not db.with_name(db.name + ".server.lock").exists()
    report = doctor(tmp_path, db)
    assert report.returncode == 1
    assert "error" in report.stdout and "fix: restore a backup" in report.stdout


def test_daemon_refuses_damaged_table_pages(sample_store: Path, tmp_path: Path) -> None:
    db = copy_store(sample_store, tmp_path / "store")
    garble_pages(db, "memories", count=4)
    result = run_serve(tmp_path, db)
    assert result.returncode != 0
    # (a fresh home's first start logs the token it created before the store is opened and checked)
    token_note = " INFO memmy.server: created a service token"
    lines = [line for line in result.stderr.strip().splitlines() if token_note not in line]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{db} is damaged" in lines[0] and "restore a backup or move it aside" in lines[0]
    findings = check_store(db)
    assert [f.code for f in findings] == ["damaged"] and "memories" in findings[0].message


def daemon_on(db: Path, tmp_path: Path) -> Daemon:
    """A started daemon serving ``db``, with a home of its own under ``tmp_path``."""
    home = tmp_path / "daemon-home"
    home.mkdir()
    daemon = Daemon(home=home, port=free_port(), extra_env={"MEMMY_MEMORY_DB": str(db)})
    daemon.start()
    return daemon


def assert_marker_found(client: httpx.Client) -> None:
    """Full-text search finds the sample store's marker memory."""
    hits = client.post("/api/v1/memory/search", json={"query": MARKER, "limit": 5, "scope": "pooled"})
    assert hits.status_code == 200, hits.text
    assert any(MARKER in (h.get("snippet") or "") for h in hits.json()["hits"]), hits.text


def test_damaged_fts_pages_are_rebuilt_at_start(sample_store: Path, tmp_path: Path) -> None:
    db = copy_store(sample_store, tmp_path / "store")
    garble_pages(db, "memories_fts_data")
    assert [f.code for f in check_store(db)] == ["fts_damaged"]
    daemon = daemon_on(db, tmp_path)
    try:
        with daemon.client() as client:
            added = client.post("/api/v1/memory/add", json={"content": "a fresh note after the repair, kumquat"})
            assert added.status_code == 200, added.text
            assert_marker_found(client)
    finally:
        assert daemon.stop() == 0
    log = (daemon.log_path or Path()).read_text()
    assert "the full-text index is damaged" in log and "full-text index rebuilt (300 memories indexed)" in log
    assert list(db.parent.glob("memory.sqlite.damaged-*.bak"))  # the damaged file is kept
    assert check_store(db) == []


def test_doctor_reports_and_repairs_fts_offline(sample_store: Path, tmp_path: Path) -> None:
    db = copy_store(sample_store, tmp_path / "store")
    garble_pages(db, "memories_fts_data")
    report = doctor(tmp_path, db)
    assert report.returncode == 1
    assert "fts_damaged" in report.stdout and "fix: memmy-memory doctor --repair" in report.stdout
    repaired = doctor(tmp_path, db, "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "rebuilt the full-text index" in repaired.stdout and "300 memories indexed" in repaired.stdout
    again = doctor(tmp_path, db, "--offline", json_output=True)  # the store's checks only (no daemon here)
    assert again.returncode == 0
    assert json.loads(again.stdout)["findings"] == []
    store = Database(db)
    row = store.query_one("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", (MARKER,))
    store.close()
    assert row is not None and row[0] == 1


def test_doctor_refuses_to_repair_a_served_store(sample_store: Path, tmp_path: Path) -> None:
    db = copy_store(sample_store, tmp_path / "store")
    garble_pages(db, "memories_fts_data")
    lock = db.with_name(db.name + ".server.lock")
    lock.write_text(json.dumps({"pid": os.getpid(), "host": "127.0.0.1", "port": 1, "startedAt": "2999-01-01T00:00Z"}))
    result = doctor(tmp_path, db, "--repair")
    assert result.returncode == 1 and f"pid {os.getpid()}" in result.stderr and "stop it first" in result.stderr
    assert [f.code for f in check_store(db)] == ["fts_damaged"]  # untouched


def damage_fts_under_a_running_daemon(db: Path) -> None:
    """Garble the full-text pages of a store a daemon serves: the WAL is copied back first (no newer copy of those
    pages may hide the damage), then another connection commits, so the daemon's page cache is dropped."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    garble_pages(db, "memories_fts_data")
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT OR REPLACE INTO runtime_kv(key, value_json, updated_at) VALUES ('test.touch', '1', 'now')"
        )


def test_fts_damaged_while_the_daemon_runs_is_rebuilt(sample_store: Path, tmp_path: Path) -> None:
    """Damage met at run time is repaired as at start (backup + log lines), the caller is told to retry instead of
    a bare 500, and add, search and health work again (on main: every add and search answered 500 `internal`)."""
    db = copy_store(sample_store, tmp_path / "store")
    daemon = daemon_on(db, tmp_path)
    try:
        with daemon.client() as client:
            assert client.get("/api/v1/health").json()["status"] == "ok"
            damage_fts_under_a_running_daemon(db)
            first = client.post("/api/v1/memory/search", json={"query": MARKER, "scope": "pooled"})
            assert first.status_code == 503, first.text
            error = first.json()["error"]
            assert error["code"] == "store_damaged"
            assert "has been rebuilt (300 memories indexed" in error["message"] and "retry" in error["message"]
            added = client.post("/api/v1/memory/add", json={"content": "after the run-time repair, persimmon"})
            assert added.status_code == 200, added.text
            assert_marker_found(client)
            health = client.get("/api/v1/health").json()
            assert health["ok"] is True and health["status"] == "ok", health
    finally:
        daemon.stop()
    log = (daemon.log_path or Path()).read_text()
    assert "the full-text index is damaged" in log and "full-text index rebuilt (300 memories indexed)" in log
    assert list(db.parent.glob("memory.sqlite.damaged-*.bak"))  # the damaged file is kept
    assert check_store(db) == []


# -- disk full ------------------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs (skipped, with the reason, where this test may not mount one)."""
    with small_tmpfs(tmp_path, 6) as mount:
        yield mount


def fill(disk: Path, leave_bytes: int, name: str = "filler.bin") -> Path:
    """Fill the disk until only about ``leave_bytes`` are free (with a file of its own per ``name``)."""
    filler = disk / name
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    with filler.open("wb") as handle:
        handle.write(b"\0" * max(0, free - leave_bytes))
    return filler


def test_disk_full_is_a_storage_full_error_and_nothing_half_saved(small_disk: Path) -> None:
    db = small_disk / "memory.sqlite"
    store = Database(db)
    assert store.write_probe() is None
    filler = fill(small_disk, 0)
    saved = failed = 0
    with pytest.raises(StorageFullError, match="is full") as raised:
        for i in range(2000):
            with store.transaction() as conn:
                conn.execute(
                    "INSERT INTO runtime_kv(key, value_json, updated_at) VALUES (?,?,?)",
                    (f"k{i}", json.dumps("x" * 4000), "now"),
                )
            saved += 1
    failed = 1
    assert raised.value.code == "storage_full" and str(db) in raised.value.message
    assert saved + failed > 0
    count = store.query_one("SELECT count(*) FROM runtime_kv WHERE key LIKE 'k%'")
    assert count is not None and count[0] == saved  # every acknowledged write is there, the failed one is not
    reason = store.write_probe(max_age_s=0)
    assert reason is not None and "full" in reason
    filler.unlink()
    with store.transaction() as conn:
        conn.execute("INSERT INTO runtime_kv(key, value_json, updated_at) VALUES ('after', '1', 'now')")
    assert store.write_probe(max_age_s=0) is None
    store.close()


def test_a_store_that_refuses_writes_is_degraded_until_a_probe_write_succeeds(tmp_path: Path) -> None:
    """The third way a write fails: SQLite refusing it as read-only ("attempt to write a readonly database", what a
    file or folder without write permission gives; as root here, the connection is made read-only instead)."""
    store = Database(tmp_path / "memory.sqlite")
    assert store.write_probe(max_age_s=0) is None
    store.conn.execute("PRAGMA query_only=ON")
    with pytest.raises(sqlite3.OperationalError, match="readonly"), store.transaction() as conn:
        conn.execute("INSERT INTO runtime_kv(key, value_json, updated_at) VALUES ('refused', '1', 'now')")
    reason = store.write_probe(max_age_s=0)
    assert reason is not None and "cannot write" in reason and str(store.path) in reason
    assert store.write_probe(max_age_s=0) == reason  # its probe write is refused too: still degraded
    store.conn.execute("PRAGMA query_only=OFF")
    assert store.write_probe(max_age_s=0) is None  # a probe write succeeded: the failure is cleared
    store.close()


def test_disk_full_on_the_real_daemon(small_disk: Path, tmp_path: Path) -> None:
    db = small_disk / "memory.sqlite"
    daemon = daemon_on(db, tmp_path)
    try:
        fill(small_disk, 256 * 1024)
        acknowledged: list[str] = []
        refused: dict[str, object] | None = None
        with daemon.client() as client:
            for i in range(200):
                body = {"content": f"note {i} " + "lorem ipsum dolor " * 2000, "title": f"n{i}"}
                response = client.post("/api/v1/memory/add", json=body)
                if response.status_code == 200:
                    acknowledged.append(response.json()["id"])
                    continue
                refused = {"status": response.status_code, **response.json()}
                break
            assert refused is not None, "the disk never filled"
            assert refused["status"] in (500, 507)  # 507 once the HTTP edge maps storage_full
            error = refused.get("error") or refused
            assert "storage_full" in json.dumps(error) and "is full" in json.dumps(error), refused
            fill(small_disk, 0, "filler-rest.bin")  # 0 bytes free
            degraded = client.get("/api/v1/health").json()
            assert degraded["ok"] is False and degraded["status"] == "degraded", degraded
            assert "is full" in degraded["reason"]
            assert httpx.get(f"{daemon.url}/api/v1/health").json()["ok"] is False  # without the token too
            found = client.post("/api/v1/memory/search", json={"query": "lorem", "scope": "pooled"})
            assert found.status_code == 200, found.text  # reads keep working, and say memory is unavailable
            assert found.json()["unavailable"].startswith("memmy: memory unavailable (the disk holding")
            assert found.json()["injectedContext"].startswith("memmy: memory unavailable")
            hook = run_prompt_hook(daemon, "why does the deploy fail with lorem ipsum errors?")
            context = json.loads(hook)["hookSpecificOutput"]["additionalContext"]
            assert "memmy: memory unavailable (" in context and "full" in context, hook
            for leftover in small_disk.glob("filler*.bin"):
                leftover.unlink()
            assert client.get("/api/v1/health").json()["status"] == "ok"  # space again: nothing needs a restart
            for memory_id in acknowledged:  # every acknowledged write was committed
                assert client.get(f"/api/v1/memory/{memory_id}").status_code == 200
            after = client.post("/api/v1/memory/add", json={"content": "space again"})
            assert after.status_code == 200, after.text
    finally:
        daemon.stop()
    with sqlite3.connect(db) as conn:
        titles = {r[0] for r in conn.execute("SELECT title FROM memories")}
    assert {f"n{i}" for i in range(len(acknowledged))} <= titles
    assert f"n{len(acknowledged)}" not in titles  # the refused write was not saved


def run_prompt_hook(daemon: Daemon, prompt: str) -> str:
    """Claude Code's prompt hook, run as the agent runs it, against ``daemon``: what it prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMY_", "MEMORY_SERVICE_"))}
    env.update(
        {
            "HOME": str(daemon.home),
            "MEMMY_HOME": str(daemon.home / ".memmy"),
            "MEMMY_MEMORY_URL": daemon.url,
            "MEMMY_MEMORY_TOKEN": str(daemon.token),
            "MEMMY_HOOK_TIMEOUT_MS": "60000",
        }
    )
    payload = {"session_id": "disk-full", "hook_event_name": "UserPromptSubmit", "prompt": prompt, "cwd": "/"}
    done = subprocess.run(
        [sys.executable, "-m", "memmy.hook", "claude_code", "UserPromptSubmit"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_leaked_pages_are_a_warning_not_a_rebuild(sample_store: Path, tmp_path: Path) -> None:
    db = copy_store(sample_store, tmp_path / "store")
    with sqlite3.connect(db) as conn:  # unlink an index from the schema: its pages stay, used by nothing
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("DELETE FROM sqlite_master WHERE name = 'idx_memories_source'")
    findings = check_store(db)
    assert [(f.code, f.severity) for f in findings] == [("unused_pages", "warning")]
    assert "never used" in findings[0].message and "VACUUM" in findings[0].fix
    Database(db).close()  # opens (no refusal, no full-text rebuild)
    assert not list(db.parent.glob("memory.sqlite.damaged-*.bak"))
    assert doctor(tmp_path, db).returncode == 0


def test_a_new_store_is_never_visible_as_an_empty_file(tmp_path: Path) -> None:
    """Another process opening the path mid-creation must never find the 0-byte file the preflight refuses."""
    for attempt in range(10):
        path = tmp_path / f"home{attempt}" / "memory.sqlite"
        stop = threading.Event()
        sizes: list[int] = []

        def watch(path: Path = path, stop: threading.Event = stop, sizes: list[int] = sizes) -> None:
            while not stop.is_set():
                try:
                    sizes.append(path.stat().st_size)
                except FileNotFoundError:
                    continue

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            Database(path).conn.close()
        finally:
            stop.set()
            watcher.join()
        assert sizes and 0 not in sizes
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert [p.name for p in path.parent.iterdir() if p.name.endswith(".new")] == []


def test_creating_a_store_leaves_an_existing_one_alone(tmp_path: Path) -> None:
    """The creator links into place; a store that appeared meanwhile is kept, not overwritten."""
    path = tmp_path / "memory.sqlite"
    assert create_store_file(path) is True
    sqlite3.connect(path).execute("CREATE TABLE mine (x)").connection.commit()
    assert create_store_file(path) is False
    tables = {row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert "mine" in tables


def test_index_rows_off_their_memories_rowids_are_found_by_doctor_and_reindexed_at_open(tmp_path: Path) -> None:
    """A copy that renumbers ``memories`` (its key is text, so a row-by-row copy may) leaves every full-text row
    under another memory's rowid: doctor reports it as repairable and the daemon re-indexes when it opens."""
    path = tmp_path / "memory.sqlite"
    db = Database(path)
    repo = MemoryRepository(db)
    for number in range(12):
        content = f"subject{number} flaky pytest"
        repo.insert(Memory(id=f"m_{number:02d}", layer="L1", content=content, content_hash=f"h{number}"), source="test")
    db.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE memories SET rowid = rowid + 100")
    findings = check_store(path)
    assert [f.code for f in findings] == ["fts_misaligned"] and findings[0].repairable
    assert "not under the rowid of its memory" in findings[0].message

    reopened = Database(path)
    repo = MemoryRepository(reopened)
    assert [m for m, _ in repo.fts_search("subject5", 5, MemoryFilter())] == ["m_05"]
    reopened.close()
    assert check_store(path) == []
