"""Each caller lands where it belongs: the stdio MCP server answers every request it read before stdin closed,
MCP ``remember`` writes into the caller's namespace, turn-start idempotency is atomic with the turn, a stale
server lock whose pid now belongs to another process is taken over, and an interrupted import frees its slot."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from mcp import Client

from memmy.commands.turn_requests import OpenSession, StartTurn
from memmy.config import load_config
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.db import lock_holder_alive
from tests.claude_transcripts import Transcript
from tests.conftest import SUITE_BACKEND, Daemon, free_port, home_dsn, only_sqlite, store_query
from tests.test_mcp import data, mcp_argv, stdio, stdio_env, with_client


def jsonrpc(request_id: int | None, method: str, params: dict[str, Any] | None = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return json.dumps(message)


def test_stdio_answers_every_request_read_before_stdin_closes(daemon: Daemon, tmp_path: Path) -> None:
    lines = [
        jsonrpc(
            0,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}},
        ),
        jsonrpc(None, "notifications/initialized"),
    ]
    ids = list(range(1, 31))
    for request_id in ids:
        if request_id % 3 == 0:
            lines.append(jsonrpc(request_id, "tools/list"))
        else:
            lines.append(
                jsonrpc(
                    request_id,
                    "tools/call",
                    {"name": "memmy_memory_search", "arguments": {"query": f"deploy notes {request_id}", "limit": 3}},
                )
            )
    result = subprocess.run(
        [sys.executable, *mcp_argv(), "--no-start"],
        input="\n".join(lines) + "\n",
        env=stdio_env(daemon.home, daemon.url, daemon.token),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    answers = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    answered = {a["id"] for a in answers if "id" in a}
    assert answered == {0, *ids}, f"missing replies: {sorted({0, *ids} - answered)}; stderr: {result.stderr[-2000:]}"
    for answer in answers:
        assert "error" not in answer, answer
        if answer["id"] and answer["id"] % 3:
            assert answer["result"]["isError"] is False, answer


# -- stale server lock --------------------------------------------------------------------------------------------
@only_sqlite  # the server lock is per SQLite file: daemons share a PostgreSQL database
def test_stale_lock_whose_pid_is_now_an_unrelated_process_is_taken_over(fresh_daemon: Daemon, backend: str) -> None:
    db = Path(load_config(env=fresh_daemon.env()).storage.sqlite_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    lock = db.with_name(db.name + ".server.lock")
    unrelated = subprocess.Popen(["sleep", "120"])  # the pid the crashed daemon had now belongs to this process
    try:
        written = (datetime.now(UTC) - timedelta(hours=3)).isoformat().replace("+00:00", "Z")
        lock.write_text(
            json.dumps(
                {"pid": unrelated.pid, "host": "127.0.0.1", "port": 1, "sqlitePath": str(db), "startedAt": written}
            )
        )
        assert psutil.pid_exists(unrelated.pid)
        fresh_daemon.start()
        holder = json.loads(lock.read_text())
        assert holder["pid"] == fresh_daemon.process.pid  # type: ignore[union-attr]
        assert holder["processStartedAt"] == pytest.approx(psutil.Process(holder["pid"]).create_time(), abs=1)
        assert unrelated.poll() is None  # nobody was killed
    finally:
        unrelated.kill()
        unrelated.wait()


def test_lock_identity_uses_the_recorded_start_time() -> None:
    me = psutil.Process(os.getpid())
    started = me.create_time()
    now = datetime.now(UTC).isoformat()
    assert lock_holder_alive({"pid": os.getpid(), "processStartedAt": started, "startedAt": now})
    assert not lock_holder_alive({"pid": os.getpid(), "processStartedAt": started + 3600, "startedAt": now})
    long_ago = datetime.fromtimestamp(started - 3600, UTC).isoformat()
    assert not lock_holder_alive({"pid": os.getpid(), "startedAt": long_ago})  # older lock, newer process
    assert lock_holder_alive({"pid": os.getpid(), "startedAt": now})
    assert not lock_holder_alive({"pid": 0})


@only_sqlite  # the server lock is per SQLite file: daemons share a PostgreSQL database
def test_a_live_daemon_lock_is_still_refused(fresh_daemon: Daemon, backend: str) -> None:
    fresh_daemon.start()
    second = subprocess.run(
        [sys.executable, "-m", "memmy", "serve", "--port", str(free_port())],
        env=fresh_daemon.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode != 0 and f"already served by pid {fresh_daemon.process.pid}" in second.stderr  # type: ignore[union-attr]


# -- interrupted import ---------------------------------------------------------------------------------------------
def memory_count(home: Path) -> int:
    return int(store_query(home, "SELECT COUNT(*) FROM memories")[0][0])


def test_an_interrupted_import_frees_its_slot(fresh_daemon: Daemon, tmp_path: Path) -> None:
    total = 0
    for n in range(12):
        transcript = Transcript(fresh_daemon.home, str(tmp_path / f"proj{n % 3}"))
        for i in range(500):
            transcript.user(f"conversation {n} request {i}: rename variable v{i} in module m{n}")
            transcript.assistant(f"Renamed v{i} in m{n}.")
            total += 1
        transcript.write()
    fresh_daemon.start()
    db = fresh_daemon.home
    argv = [sys.executable, "-m", "memmy", "--url", fresh_daemon.url, "import", "--deep", "--yes"]
    env = fresh_daemon.env()
    interrupted: list[tuple[str, int, int]] = []
    for how in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):  # Ctrl-C, kill, a client that just disappears
        before = memory_count(db)
        cli = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while memory_count(db) < before + 50 and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cli.poll() is None, f"the import ended before it could be interrupted: {cli.communicate()}"
        cli.send_signal(how)
        out, err = cli.communicate(timeout=60)
        assert "already running" not in out + err, (how, out, err)
        interrupted.append((how.name, cli.returncode, memory_count(db)))
        assert memory_count(db) < total, "the import finished before it could be interrupted"
        rerun = subprocess.run([*argv, "--dry-run"], env=env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0 and "already running" not in rerun.stdout + rerun.stderr, (how, rerun)
    assert [code for _name, code, _count in interrupted] == [130, 143, -signal.SIGKILL]
    final = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)  # right after the kill
    assert final.returncode == 0, final.stdout + final.stderr
    assert "already running" not in final.stdout + final.stderr
    [(count, distinct)] = store_query(db, "SELECT COUNT(*), COUNT(DISTINCT memory_key) FROM memories")
    assert count == distinct == total


# -- turn-start idempotency ------------------------------------------------------------------------------------------
#: Which idempotency-key writes fail in the test below (as a full disk or a crash would make them fail).
FAILING_KEYS = "NEW.key LIKE 'turn.start:%' OR NEW.key LIKE 'memory.add:%'"


def fail_key_writes(home: Path, fail: bool) -> None:
    """Make the writes of turn and note keys to the store of ``home`` fail (``fail``), or work again."""
    if SUITE_BACKEND == "postgres":
        with psycopg.connect(home_dsn(home), autocommit=True) as conn:
            if fail:
                conn.execute(
                    "CREATE FUNCTION fail_turn_key() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    f"IF {FAILING_KEYS} THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$"
                )
                conn.execute(
                    "CREATE TRIGGER fail_turn_key BEFORE INSERT ON idempotency_keys "
                    "FOR EACH ROW EXECUTE FUNCTION fail_turn_key()"
                )
            else:
                conn.execute("DROP TRIGGER fail_turn_key ON idempotency_keys")
        return
    with closing(sqlite3.connect(home / ".memmy" / "memory-service" / "memory.sqlite")) as lite, lite:
        if fail:
            lite.execute(
                f"CREATE TRIGGER fail_turn_key BEFORE INSERT ON idempotency_keys WHEN {FAILING_KEYS} "
                "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            )
        else:
            lite.execute("DROP TRIGGER fail_turn_key")


def test_turn_start_idempotency_commits_with_the_turn(fresh_daemon: Daemon) -> None:
    fresh_daemon.start()
    home = fresh_daemon.home
    body = {"turnId": "turn-1", "query": "how do we deploy the zeppelin service", "adapterId": "t", "requestId": "r1"}
    with fresh_daemon.client() as client:
        session = client.post("/api/v1/sessions/open", json={"source": "claude_code"}).json()["sessionId"]
        body["sessionId"] = session
        fail_key_writes(home, True)
        failed = client.post("/api/v1/turns/start", json=body)
        assert failed.status_code >= 500
        note = {"content": "the orchid shelf faces north", "adapterId": "t", "requestId": "n1"}
        assert client.post("/api/v1/memory/add", json=note).status_code >= 500
        turns = store_query(home, "SELECT COUNT(*) FROM raw_turns WHERE turn_id = 'turn-1'")[0][0]
        assert turns == 0  # no turn recorded without its idempotency key
        notes = store_query(home, "SELECT COUNT(*) FROM memories WHERE memory_value LIKE '%orchid shelf%'")[0][0]
        assert notes == 0  # an answer that is an error means nothing was committed
        fail_key_writes(home, False)
        first = client.post("/api/v1/turns/start", json=body)
        assert first.status_code == 200, first.text
        retry = client.post("/api/v1/turns/start", json=body)
        assert retry.status_code == 200 and retry.json().get("duplicate") is True
        assert retry.json()["contextPacketId"] == first.json()["contextPacketId"]
        reused = client.post("/api/v1/turns/start", json={**body, "query": "something else entirely"})
        assert reused.status_code == 409
    assert store_query(home, "SELECT COUNT(*) FROM raw_turns WHERE turn_id = 'turn-1'")[0][0] == 1
    keys = store_query(home, "SELECT key FROM idempotency_keys WHERE key LIKE 'turn.start:%'")
    assert keys == [("turn.start:t:r1",)]


def test_turn_start_records_its_key_in_the_service(service: MemoryService) -> None:
    ns = Namespace.from_headers({}, service.config.user_id)
    session = service.open_session(OpenSession.from_json({"source": "codex"}), ns)["sessionId"]
    body = {"sessionId": session, "turnId": "t9", "query": "fix the flaky test", "adapterId": "a", "requestId": "q"}
    answer = service.start_turn(StartTurn.from_json(body), ns)
    stored = service.logs.idempotent_response("turn.start:a:q")
    assert stored is not None and stored[1]["contextPacketId"] == answer["contextPacketId"]
    assert service.turn_ops.sessions.get_raw_turn(session, "t9") is not None


# -- MCP remember lands in the caller's namespace -------------------------------------------------------------------
def test_mcp_remember_of_content_in_another_namespace_lands_in_the_callers(daemon: Daemon, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    first, second = f"alpha-{suffix}", f"beta-{suffix}"
    content = f"The staging cluster {suffix} is rebuilt every Monday at 06:00."

    async def session(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["a"] = data(
            await client.call_tool("remember", {"content": content, "keys": ["staging"], "namespace": first})
        )
        out["b"] = data(
            await client.call_tool("remember", {"content": content, "keys": ["rebuild"], "namespace": second})
        )
        out["again"] = data(
            await client.call_tool("remember", {"content": content, "keys": ["monday"], "namespace": second})
        )
        out["list_a"] = data(await client.call_tool("list_memories", {"namespace": first}))
        out["list_b"] = data(await client.call_tool("list_memories", {"namespace": second}))
        out["recall_b"] = data(await client.call_tool("recall", {"query": "rebuild", "namespace": second}))
        return out

    out = with_client(stdio(stdio_env(tmp_path, daemon.url, daemon.token), cwd=tmp_path), session)
    assert out["b"]["saved"] != out["a"]["saved"] and not out["b"].get("deduplicated")  # a new memory, in beta
    assert out["again"]["saved"] == out["b"]["saved"] and out["again"]["deduplicated"] is True  # same namespace
    assert [m["memory_id"] for m in out["list_a"]["memories"]] == [out["a"]["saved"]]
    assert [m["memory_id"] for m in out["list_b"]["memories"]] == [out["b"]["saved"]]
    assert out["recall_b"]["status"] == "found"
