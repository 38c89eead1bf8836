"""kill -9 of the daemon in the middle of a worker drain, then a restart: every job finishes exactly once."""

from __future__ import annotations

import signal
import time
from collections import Counter

from tests.conftest import Daemon, store_query
from tests.llm_stub import run_chat_stub
from tests.test_evolution_llm import contract_answer, write_llm_config
from tests.test_evolution_scenario import ENGLISH, run_episode

EPISODES = 4


def wait_for(predicate: object, timeout_s: float, what: str) -> None:
    """Poll ``predicate()`` until true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise TimeoutError(what)


def test_kill_9_mid_drain_then_restart_finishes_every_job_exactly_once(fresh_daemon: Daemon) -> None:
    # a slow model makes each LLM step take ~0.4 s, so the kill lands while jobs are leased
    with run_chat_stub(contract_answer, delay_s=0.4) as stub:
        fresh_daemon.extra_env["MEMMY_CONFIG"] = str(write_llm_config(fresh_daemon.home, stub.url))
        fresh_daemon.start()
        with fresh_daemon.client() as client:
            for n in range(EPISODES):
                run_episode(client, ENGLISH, f"pkg{n}")

            def mid_drain() -> bool:
                counts = client.get("/api/v1/evolution/jobs").json()["counts"]
                return bool(counts["succeeded"] >= 3 and counts["leased"] >= 1)

            wait_for(mid_drain, 120, "the background worker never had a job in flight")
        assert fresh_daemon.stop(signal.SIGKILL) == -signal.SIGKILL
        # what the kill cut off, read from the store itself: a listing over HTTP before the kill raced the worker
        # (a job it named could finish before the kill landed)
        in_flight = [
            row[0] for row in store_query(fresh_daemon.home, "SELECT id FROM evolution_jobs WHERE status = 'leased'")
        ]
        unfinished = store_query(
            fresh_daemon.home, "SELECT count(*) FROM evolution_jobs WHERE status IN ('queued', 'leased')"
        )
        assert unfinished[0][0] > 0, "the kill landed after the drain"

        fresh_daemon.start()
        with fresh_daemon.client() as client:

            def settled() -> bool:
                client.post("/api/v1/worker/run", json={"limit": 5}).raise_for_status()
                counts = client.get("/api/v1/evolution/jobs").json()["counts"]
                return bool(counts["queued"] == 0 and counts["leased"] == 0 and counts["failed"] == 0)

            wait_for(settled, 240, "jobs did not finish after the restart")
            counts = client.get("/api/v1/evolution/jobs").json()["counts"]
            assert counts["dead_letter"] == 0, counts
            episodes = client.get("/api/v1/episodes").json()["items"]
            assert len(episodes) == EPISODES and all(e["rTask"] is not None for e in episodes), episodes
            trace_ids = [t for e in episodes for t in e["traceMemoryIds"]]
            for trace_id in trace_ids:
                history = client.get(f"/api/v1/memory/{trace_id}").json()["history"]
                kinds = Counter(change["changeType"] for change in history)
                # captured once, summarised once, reflected once and rewarded once: no job ran twice
                assert kinds == Counter({"create": 1, "summarize": 1, "evolve": 2}), (trace_id, kinds)

    statuses = dict(store_query(fresh_daemon.home, "SELECT id, status FROM evolution_jobs"))
    attempts = dict(store_query(fresh_daemon.home, "SELECT id, attempts FROM evolution_jobs"))
    assert set(statuses.values()) == {"succeeded"}, Counter(statuses.values())
    # the jobs cut off by the kill were not lost: released at restart, run again from the start, done
    assert in_flight and all(statuses[j] == "succeeded" and attempts[j] == 2 for j in in_flight)
