"""The evolution job queue and worker: dedupe, priorities, back-off, leases, two-phase handlers, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from memmy.jobs.worker import Apply, EvolutionWorker
from memmy.store.db import Database
from memmy.store.jobs import JobRecord, JobRepository, backoff_seconds, to_store_time, utc_after
from memmy.store.queue import LEASE_MS, backoff_ms
from memmy.store.unit import Store

SIDE_TABLE = "CREATE TABLE IF NOT EXISTS side_effects (job_id TEXT NOT NULL, note TEXT)"


@pytest.fixture
def db(database: Database) -> Iterator[Database]:
    with database.transaction() as conn:
        conn.execute(SIDE_TABLE)
    yield database


@pytest.fixture
def jobs(db: Database) -> JobRepository:
    return JobRepository(db)


def writer(db: Database, note: str = "") -> Callable[[JobRecord], Apply]:
    """A handler whose apply writes one side-effect row for the job."""

    def handler(job: JobRecord) -> Apply:
        def apply() -> None:
            db.conn.execute("INSERT INTO side_effects(job_id, note) VALUES (?, ?)", (job.id, note))

        return apply

    return handler


def side_effects(db: Database) -> list[str]:
    return [row[0] for row in db.query("SELECT job_id FROM side_effects ORDER BY rowid")]


def seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def test_dedupe_returns_the_active_job_and_allows_a_new_one_after_success(jobs: JobRepository) -> None:
    first, created = jobs.enqueue("reward", dedupe_key="reward:ep_1", payload={"n": 1}, episode_id="ep_1")
    again, created_again = jobs.enqueue("reward", dedupe_key="reward:ep_1", payload={"n": 2})
    assert created and not created_again
    assert again.id == first.id and again.payload == {"n": 1}
    assert first.id.startswith("job_") and len(first.id) == 24
    assert first.priority == 30 and first.status == "queued" and first.episode_id == "ep_1"
    assert jobs.counts()["queued"] == 1

    [leased] = jobs.lease(5)
    assert jobs.enqueue("reward", dedupe_key="reward:ep_1")[0].id == first.id  # leased still dedupes
    assert jobs.complete(leased.id) is True
    assert jobs.complete(leased.id) is False  # only a leased job completes
    # ... but a request that arrived while it ran may concern state it had already read: it runs once more
    rerun, created_rerun = jobs.enqueue("reward", dedupe_key="reward:ep_1", payload={"n": 3})
    assert not created_rerun and rerun.id != first.id and rerun.status == "queued"
    assert rerun.payload == {} and rerun.episode_id == "ep_1" and rerun.priority == first.priority
    assert jobs.counts() == {"queued": 1, "leased": 0, "succeeded": 1, "failed": 0, "dead_letter": 0}

    [leased_again] = jobs.lease(5)
    assert jobs.complete(leased_again.id) is True  # nothing arrived meanwhile: no further run
    assert jobs.counts() == {"queued": 0, "leased": 0, "succeeded": 2, "failed": 0, "dead_letter": 0}
    fresh, created_fresh = jobs.enqueue("reward", dedupe_key="reward:ep_1")
    assert created_fresh and fresh.id not in (first.id, rerun.id)


def test_a_request_during_a_lease_reruns_with_the_latest_payload_and_due_time(jobs: JobRepository) -> None:
    jobs.enqueue("skill_crystallization", dedupe_key="skill:p1", payload={"fresh": True}, target_memory_id="p1")
    [leased] = jobs.lease(5)
    later = utc_after(3600)
    jobs.enqueue("skill_crystallization", dedupe_key="skill:p1", payload={"fresh": False}, run_after=later)
    jobs.enqueue("skill_crystallization", dedupe_key="skill:p1", payload={"fresh": False, "n": 2}, run_after=later)
    assert jobs.lease(5) == []  # still one active job per key while it runs
    jobs.complete(leased.id)
    [rerun] = jobs.list_jobs(status="queued")
    assert rerun.payload == {"fresh": False, "n": 2} and rerun.target_memory_id == "p1"
    assert rerun.run_after == to_store_time(later)
    assert jobs.lease(5) == []  # due in an hour, not now


def test_dedupe_never_postpones_a_queued_job_but_brings_it_forward(jobs: JobRepository) -> None:
    soon = utc_after(60)
    job, _ = jobs.enqueue("episode_idle_close", dedupe_key="close:ep", run_after=soon)
    later, created = jobs.enqueue("episode_idle_close", dedupe_key="close:ep", run_after=utc_after(3600))
    assert not created and later.run_after == soon
    earlier, _ = jobs.enqueue("episode_idle_close", dedupe_key="close:ep", run_after=utc_after(5))
    assert earlier.id == job.id and earlier.run_after is not None and earlier.run_after < soon
    # Any ISO offset is normalised to the store's UTC form.
    assert to_store_time("2030-01-01T02:00:00+02:00") == "2030-01-01T00:00:00.000Z"


def test_priority_order_and_run_after(jobs: JobRepository) -> None:
    jobs.enqueue("dream")
    jobs.enqueue("something_new")
    jobs.enqueue("reward")
    jobs.enqueue("manual_retry")
    jobs.enqueue("trace_summary", priority=-5)  # an explicit priority wins over the table
    delayed, _ = jobs.enqueue("manual_retry", run_after=utc_after(120))
    leased = jobs.lease(10)
    order = [job.job_type for job in leased]
    assert order == ["trace_summary", "manual_retry", "reward", "dream", "something_new"]
    assert jobs.get(delayed.id) is not None and jobs.get(delayed.id).status == "queued"  # type: ignore[union-attr]
    assert jobs.lease(10) == []
    assert all(jobs.complete(job.id) for job in leased)
    [late] = jobs.lease(10, now=utc_after(121))
    assert late.id == delayed.id and late.attempts == 1


def test_lease_filters_by_type_and_target(jobs: JobRepository) -> None:
    a, _ = jobs.enqueue("trace_summary", target_memory_id="mem_a")
    jobs.enqueue("trace_summary", target_memory_id="mem_b")
    jobs.enqueue("reward", target_memory_id="mem_a")
    assert [j.id for j in jobs.lease(10, job_types=["trace_summary"], target_memory_ids=["mem_a"])] == [a.id]
    assert jobs.lease(10, target_memory_ids=[]) == []
    assert {j.job_type for j in jobs.lease(10)} == {"trace_summary", "reward"}


def test_failures_back_off_then_dead_letter(jobs: JobRepository) -> None:
    job, _ = jobs.enqueue("reflection", max_attempts=3)
    [first] = jobs.lease(1)
    assert jobs.fail(first.id, "boom " + "x" * 5000) == "failed"
    failed = jobs.get(job.id)
    assert failed is not None and failed.status == "failed" and failed.attempts == 1
    assert failed.last_error is not None and len(failed.last_error) == 2000
    assert failed.run_after is not None and 29 <= seconds_between(failed.updated_at, failed.run_after) <= 31
    assert jobs.lease(1, now=utc_after(3600)) == []  # failed jobs wait for requeue_failed
    assert jobs.next_due_at() == failed.run_after
    assert jobs.requeue_failed() == 1
    assert jobs.lease(1) == []  # back-off still applies after the requeue
    [second] = jobs.lease(1, now=utc_after(31))
    assert second.attempts == 2
    assert jobs.fail(second.id, "boom") == "failed"
    backed_off = jobs.get(job.id)
    assert backed_off is not None and backed_off.run_after is not None
    assert 59 <= seconds_between(backed_off.updated_at, backed_off.run_after) <= 61
    jobs.requeue_failed()
    [third] = jobs.lease(1, now=utc_after(61))
    assert third.attempts == 3
    assert jobs.fail(third.id, "boom") == "dead_letter"
    assert jobs.requeue_failed() == 0 and jobs.lease(1, now=utc_after(99999)) == []
    assert jobs.next_due_at() is None
    assert [backoff_seconds(n) for n in (1, 2, 3, 8, 20)] == [30, 60, 120, 3600, 3600]
    # An explicit retry delay overrides the back-off.
    other, _ = jobs.enqueue("reward")
    jobs.lease(1)
    assert jobs.fail(other.id, "rate limited", retry_in_s=5) == "failed"
    limited = jobs.get(other.id)
    assert limited is not None and limited.run_after is not None
    assert 4 <= seconds_between(limited.updated_at, limited.run_after) <= 6


def test_expired_lease_is_leasable_again(jobs: JobRepository) -> None:
    job, _ = jobs.enqueue("l2_induction", max_attempts=2)
    [held] = jobs.lease(1, lease_seconds=60)
    assert held.leased_until is not None and jobs.lease(1, now=utc_after(30)) == []
    [again] = jobs.lease(1, now=utc_after(61))
    assert again.id == job.id and again.attempts == 2
    assert jobs.holds_lease(again) and not jobs.holds_lease(held)  # the first lease is superseded
    # Expired on its final attempt: dead-lettered rather than run a third time.
    assert jobs.lease(1, now=utc_after(200)) == []
    final = jobs.get(job.id)
    assert final is not None and final.status == "dead_letter" and "final attempt" in (final.last_error or "")


def test_release_all_leases_requeues_with_attempts_kept(jobs: JobRepository) -> None:
    a, _ = jobs.enqueue("reward")
    b, _ = jobs.enqueue("dream", max_attempts=1)
    jobs.enqueue("reflection", run_after=utc_after(300))
    assert len(jobs.lease(5)) == 2
    assert jobs.release_all_leases() == 1
    released = jobs.get(a.id)
    assert released is not None and released.status == "queued" and released.attempts == 1
    assert released.leased_until is None
    spent = jobs.get(b.id)
    assert spent is not None and spent.status == "dead_letter"  # leased on its last attempt
    assert [j.id for j in jobs.lease(5)] == [a.id]


def test_list_get_and_prune(jobs: JobRepository) -> None:
    ids = [jobs.enqueue("reward", episode_id="ep_x" if i % 2 else None)[0].id for i in range(6)]
    for job in jobs.lease(4):
        jobs.complete(job.id)
    assert [j.id for j in jobs.list_jobs(status="queued")] == ids[5:3:-1]
    assert len(jobs.list_jobs(episode_id="ep_x")) == 3 and len(jobs.list_jobs(limit=2)) == 2
    assert jobs.prune_finished(keep=1) == 3
    assert jobs.counts()["succeeded"] == 1 and jobs.get(ids[4]) is not None
    assert jobs.get("job_missing") is None


def test_drain_runs_two_phases_and_enqueues_follow_ups(db: Database, jobs: JobRepository) -> None:
    seen_in_transaction: list[bool] = []

    def reward(job: JobRecord) -> Apply:
        seen_in_transaction.append(db.conn.in_transaction)  # phase 1 must run outside any transaction

        def apply() -> None:
            seen_in_transaction.append(db.conn.in_transaction)
            db.conn.execute("INSERT INTO side_effects(job_id) VALUES (?)", (job.id,))
            jobs.enqueue("l2_association", dedupe_key=f"assoc:{job.id}")

        return apply

    worker = EvolutionWorker(Store(db), {"reward": reward, "l2_association": lambda job: None})
    job, _ = jobs.enqueue("reward", target_memory_id="mem_1")
    report = worker.drain()
    assert (report.leased, report.succeeded, report.failed) == (2, 2, 0)
    assert report.jobs[0] == {
        "jobId": job.id,
        "jobType": "reward",
        "status": "succeeded",
        "targetMemoryId": "mem_1",
        "error": None,
    }
    assert [j["jobType"] for j in report.jobs] == ["reward", "l2_association"]
    assert seen_in_transaction == [False, True]
    assert side_effects(db) == [job.id]
    assert worker.drain().leased == 0


def test_handler_exception_is_scrubbed_and_rolled_back(db: Database, jobs: JobRepository) -> None:
    def leaky(job: JobRecord) -> Apply:
        def apply() -> None:
            db.conn.execute("INSERT INTO side_effects(job_id) VALUES (?)", (job.id,))
            raise RuntimeError("upstream said 401 for Authorization: Bearer sk-abcdefgh12345")

        return apply

    def phase_one_fails(job: JobRecord) -> Apply | None:
        raise ValueError("model answered garbage, key sk-abcdefgh12345")

    worker = EvolutionWorker(Store(db), {"reward": leaky, "reflection": phase_one_fails})
    job, _ = jobs.enqueue("reward")
    other, _ = jobs.enqueue("reflection")
    report = worker.drain()
    assert (report.succeeded, report.failed) == (0, 2)
    assert side_effects(db) == []  # apply's write was rolled back with the failure
    for job_id in (job.id, other.id):
        failed = jobs.get(job_id)
        assert failed is not None and failed.status == "failed" and failed.last_error
        assert "sk-abcdefgh12345" not in failed.last_error and "abcdefgh12345" not in failed.last_error
    assert "RuntimeError" in (jobs.get(job.id).last_error or "")  # type: ignore[union-attr]
    assert worker.last_error is not None and "abcdefgh12345" not in worker.last_error
    assert all("abcdefgh12345" not in (entry["error"] or "") for entry in report.jobs)


def test_unknown_job_type_is_dead_lettered_at_once(db: Database, jobs: JobRepository) -> None:
    worker = EvolutionWorker(Store(db), {})
    job, _ = jobs.enqueue("mystery_job", max_attempts=5)
    report = worker.drain()
    assert report.failed == 1 and report.jobs[0]["status"] == "dead_letter"
    dead = jobs.get(job.id)
    assert dead is not None and dead.status == "dead_letter" and dead.attempts == 1
    assert "no handler registered" in (dead.last_error or "") and "mystery_job" in (dead.last_error or "")
    worker.register("mystery_job", writer(db))  # a handler registered later serves new jobs
    later, _ = jobs.enqueue("mystery_job")
    assert worker.drain().succeeded == 1 and side_effects(db) == [later.id]


def test_drain_limit_and_lost_lease(db: Database, jobs: JobRepository) -> None:
    worker = EvolutionWorker(Store(db), {"reward": writer(db)})
    for _ in range(5):
        jobs.enqueue("reward")
    assert worker.drain(limit=3).succeeded == 3
    assert jobs.counts()["queued"] == 2

    def slow(job: JobRecord) -> Apply:
        # Simulate the lease expiring mid-run and another worker taking the job over.
        db.conn.execute("UPDATE evolution_jobs SET attempts = attempts + 1 WHERE id = ?", (job.id,))
        return writer(db, "stale")(job)

    worker.register("reward", slow)
    report = worker.drain(limit=1)
    assert report.jobs[0]["status"] == "lease_lost" and report.succeeded == 0 and report.failed == 0
    assert db.query("SELECT COUNT(*) FROM side_effects WHERE note = 'stale'")[0][0] == 0


def test_concurrent_drains_run_each_job_exactly_once(db: Database, jobs: JobRepository) -> None:
    def handler(job: JobRecord) -> Apply:
        time.sleep(0.002)  # let the other thread lease in between
        return writer(db)(job)

    workers = [EvolutionWorker(Store(db), {"reward": handler}) for _ in range(2)]
    shared = EvolutionWorker(Store(db), {"reward": handler})
    for _ in range(60):
        jobs.enqueue("reward")
    totals: list[int] = []
    lock = threading.Lock()

    def run(worker: EvolutionWorker) -> None:
        report = worker.drain(limit=100)
        with lock:
            totals.append(report.succeeded)

    # Two separate workers (no shared drain lock) plus two threads on one worker.
    threads = [threading.Thread(target=run, args=(w,)) for w in (*workers, shared, shared)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    effects = side_effects(db)
    assert len(effects) == 60 and len(set(effects)) == 60
    assert sum(totals) == 60
    assert jobs.counts()["succeeded"] == 60


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_background_thread_start_wake_stop(db: Database, jobs: JobRepository) -> None:
    done = threading.Event()
    cycles: list[int] = []

    def handler(job: JobRecord) -> Apply:
        def apply() -> None:
            db.conn.execute("INSERT INTO side_effects(job_id) VALUES (?)", (job.id,))
            done.set()

        return apply

    def on_cycle() -> None:
        cycles.append(1)
        raise RuntimeError("periodic hook bug")  # must be logged, not kill the thread

    worker = EvolutionWorker(Store(db), {"reward": handler}, startup_delay_s=30, on_cycle=on_cycle)
    jobs.enqueue("reward")
    worker.start()
    try:
        assert not done.wait(0.3)  # still inside the start-up delay
        worker.wake()
        assert done.wait(15.0)  # long before the 30 s start-up delay: wake() ended it
        assert cycles and worker.running and "periodic hook bug" in (worker.last_error or "")
        # Idle (nothing due: sleeping up to max_sleep_s); a new job is picked up right after wake().
        done.clear()
        assert wait_for(lambda: not worker.busy, 15.0)
        time.sleep(0.1)
        job, _ = jobs.enqueue("reward")
        worker.wake()
        assert done.wait(15.0)
        # done is set inside the job's transaction: its row is read here once that has committed
        assert wait_for(lambda: job.id in side_effects(db), 15.0)
        assert side_effects(db)[-1] == job.id
        # A delayed job runs when due without another wake().
        done.clear()
        delayed, _ = jobs.enqueue("reward", run_after=utc_after(0.6))
        worker.wake()
        assert not done.wait(0.3)
        assert done.wait(15.0)
        assert wait_for(lambda: (jobs.get(delayed.id) or delayed).status == "succeeded", 15.0)
    finally:
        started = time.monotonic()
        worker.stop(timeout=5)
    assert not worker.running and time.monotonic() - started < 2.0


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from memmy.jobs.worker import EvolutionWorker
    from memmy.store.db import Database
    from memmy.store.unit import Store

    db = Database(Path(sys.argv[1]))
    flag = Path(sys.argv[2])

    def handler(job):
        def apply():
            db.conn.execute("INSERT INTO side_effects(job_id, note) VALUES (?, 'killed')", (job.id,))
            flag.write_text(job.id)
            time.sleep(120)
        return apply

    EvolutionWorker(Store(db), {"reward": handler}).drain(1)
    """
)


def flag_written(flag: Path) -> bool:
    """Whether the child wrote its flag's text (the file exists a moment before it)."""
    try:
        return flag.read_text() != ""
    except FileNotFoundError:
        return False


def test_crash_inside_apply_rolls_back_and_the_job_runs_once_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    db = Database(path)
    db.conn.execute(SIDE_TABLE)
    jobs = JobRepository(db)
    job, _ = jobs.enqueue("reward", dedupe_key="reward:ep_crash")
    flag = tmp_path / "inside-apply"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(flag)], env=dict(os.environ))
    try:
        # the child writes the job id into the flag: wait for the id, not the file (it exists before its text)
        assert wait_for(lambda: flag_written(flag) or child.poll() is not None, 60), "child never reached apply"
        assert child.poll() is None and flag.read_text() == job.id
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)

    assert side_effects(db) == []  # the killed apply's write never committed
    leased = jobs.get(job.id)
    assert leased is not None and leased.status == "leased" and leased.attempts == 1
    assert jobs.lease(1) == []  # its lease is still running
    assert jobs.enqueue("reward", dedupe_key="reward:ep_crash")[0].id == job.id  # no duplicate either

    # Daemon restart: leases of the dead process are released, and the job runs once.
    assert jobs.release_all_leases() == 1
    report = EvolutionWorker(Store(db), {"reward": writer(db, "restarted")}).drain()
    assert report.succeeded == 1 and report.jobs[0]["jobId"] == job.id
    assert side_effects(db) == [job.id]
    done = jobs.get(job.id)
    assert done is not None and done.status == "succeeded" and done.attempts == 2
    db.close()


def test_embedding_queue_backoff_and_lease() -> None:
    assert [backoff_ms(n) // 1000 for n in (1, 2, 3, 6, 7, 30)] == [60, 120, 240, 1920, 3600, 3600]
    assert LEASE_MS == 5 * 60 * 1000
