"""Several daemons, one PostgreSQL database: both answer every request, a job is leased by one worker only, and a
daemon killed with SIGKILL during keyed writes loses nothing acknowledged and duplicates nothing retried."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.conftest import Daemon, free_port

CLIENTS = 4
TURNS = 6
KEYED_ADDS = 30


@pytest.fixture
def two_daemons(tmp_path: Path, postgres_dsn: str) -> Iterator[list[Daemon]]:
    """Two daemons, each with a home and token of its own, on one PostgreSQL database."""
    env = {"MEMMY_MEMORY_BACKEND": "postgres", "MEMMY_POSTGRES_DSN": postgres_dsn}
    daemons = []
    for i in range(2):
        home = tmp_path / f"host-{i}"
        home.mkdir()
        daemons.append(Daemon(home=home, port=free_port(), extra_env=dict(env)))
    for daemon in daemons:
        daemon.start()
    yield daemons
    for daemon in daemons:
        if daemon.process and daemon.process.poll() is None:
            daemon.stop(signal.SIGKILL)


def _turns(client_no: int, daemons: list[Daemon]) -> list[int]:
    """One client's session: each turn starts on one daemon and completes on the other."""
    statuses: list[int] = []
    clients = [d.client(**{"x-memmy-source": "claude_code"}) for d in daemons]
    try:
        opened = clients[client_no % 2].post("/api/v1/sessions/open", json={"workspacePath": f"/work/p{client_no}"})
        statuses.append(opened.status_code)
        session_id = opened.json()["sessionId"]
        for turn in range(TURNS):
            first, second = clients[(client_no + turn) % 2], clients[(client_no + turn + 1) % 2]
            query = f"client {client_no} asks about the flaky build step number {turn}"
            start = first.post("/api/v1/turns/start", json={"sessionId": session_id, "query": query})
            statuses.append(start.status_code)
            done = second.post(
                f"/api/v1/turns/{start.json()['turnId']}/complete",
                json={"sessionId": session_id, "query": query, "answer": f"fixed step {turn} of client {client_no}"},
            )
            statuses.append(done.status_code)
    finally:
        for client in clients:
            client.close()
    return statuses


def test_two_daemons_answer_every_turn_and_each_job_runs_once(two_daemons: list[Daemon], postgres_dsn: str) -> None:
    with ThreadPoolExecutor(CLIENTS) as pool:
        statuses = [s for batch in pool.map(lambda n: _turns(n, two_daemons), range(CLIENTS)) for s in batch]
    assert len(statuses) == CLIENTS * (1 + 2 * TURNS)
    assert [s for s in statuses if not 200 <= s < 300] == []
    with ThreadPoolExecutor(2) as pool:  # both workers drain the one queue at once
        list(pool.map(lambda d: d.drain(), two_daemons))
    with psycopg.connect(postgres_dsn) as conn:
        traces = conn.execute("SELECT count(*) FROM memories WHERE memory_layer = 'L1'").fetchone()
        jobs = conn.execute("SELECT status, attempts FROM evolution_jobs").fetchall()
    assert traces is not None and traces[0] == CLIENTS * TURNS
    assert jobs, "the turns queued evolution jobs"
    assert [attempts for _status, attempts in jobs if attempts > 1] == []  # no job was leased twice


def test_a_memory_one_daemon_adds_reaches_the_others_vector_channel(two_daemons: list[Daemon]) -> None:
    writer, reader = two_daemons
    with writer.client() as client:
        added = client.post("/api/v1/memory/add", json={"content": "The zygomorphic orchid bucket is eu-west-3."})
        assert added.status_code == 200
    writer.drain()  # embedded and stored by the writer
    reader.drain()  # the reader's idle worker takes in what others stored
    with reader.client() as client:
        found = client.post(
            "/api/v1/memory/search", json={"query": "where is the orchid bucket?", "verbose": True}
        ).json()
    channels = {c["id"]: c["channels"] for c in found["debug"]["channels"]}
    assert "vec" in channels[added.json()["id"]]


def keyed_text(n: int) -> str:
    """The content of keyed add number ``n``."""
    return f"keyed fact number {n} about the deploy window"


def keyed_adds(victim: Daemon, survivor: Daemon, first: int, count: int, acknowledged: dict[int, str]) -> int:
    """Keyed adds ``first`` … ``first + count - 1`` to ``victim``, which is killed with SIGKILL once five are
    acknowledged; an add that fails under it is retried with the same idempotency key on ``survivor``. Records each
    acknowledged id; returns how many adds were retried."""
    retried = 0
    some_written = threading.Event()

    def writer() -> None:
        nonlocal retried
        with victim.client() as one, survivor.client() as other:
            for n in range(first, first + count):
                body = {"content": keyed_text(n), "adapterId": "hook", "requestId": f"add-{n}"}
                try:
                    response = one.post("/api/v1/memory/add", json=body)
                except httpx.HTTPError:  # the daemon died under the request: the same key, on the other daemon
                    retried += 1
                    response = other.post("/api/v1/memory/add", json=body)
                assert response.status_code == 200, response.text
                acknowledged[n] = response.json()["id"]
                if n == first + 4:
                    some_written.set()

    thread = threading.Thread(target=writer)
    thread.start()
    some_written.wait()
    victim.stop(signal.SIGKILL)
    thread.join()
    return retried


def test_a_daemon_killed_during_keyed_adds_loses_and_duplicates_nothing(
    two_daemons: list[Daemon], postgres_dsn: str
) -> None:
    victim, survivor = two_daemons
    acknowledged: dict[int, str] = {}
    keyed_adds(victim, survivor, 0, KEYED_ADDS, acknowledged)
    assert sorted(acknowledged) == list(range(KEYED_ADDS))
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(
            "SELECT memory_value, count(*), min(id) FROM memories WHERE memory_value LIKE 'keyed fact number %' "
            "GROUP BY memory_value"
        ).fetchall()
    per_text = {text: (count, memory_id) for text, count, memory_id in rows}
    assert len(per_text) == KEYED_ADDS  # nothing lost
    assert {count for count, _ in per_text.values()} == {1}  # nothing duplicated
    for n, memory_id in acknowledged.items():  # and each answer names the one row
        assert per_text[keyed_text(n)][1] == memory_id
    with survivor.client() as client:
        assert client.get("/api/v1/health").status_code == 200
