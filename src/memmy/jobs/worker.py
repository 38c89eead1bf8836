"""The evolution worker: leases jobs and runs their two-phase handlers, synchronously or on a daemon thread.

A handler has two phases so that no model call ever runs while the process's single SQLite connection is
locked, and so that a crash can neither lose nor duplicate a job's effects:

1. ``handler(job)`` runs outside any transaction. It reads and computes (it may call an LLM for seconds) and
   returns an ``apply`` callable, or None when there is nothing to write.
2. ``apply()`` and the job's completion commit in one transaction. ``apply`` may enqueue follow-up jobs
   through :class:`JobRepository`, which joins that transaction.

A crash before the commit rolls back ``apply``'s writes and leaves the job leased; ``release_all_leases`` at
the next start-up (or the lease expiring) makes it due again, and it then runs in full exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memmy.llm.client import scrub
from memmy.store.db import Database
from memmy.store.jobs import JobRecord, JobRepository

log = logging.getLogger("memmy.worker")

Apply = Callable[[], None]
Handler = Callable[[JobRecord], Apply | None]

LEASE_LOST = "lease_lost"
STALL_SLEEP_S = 1.0  # the sleep when work looks due but none could be leased, so a bad row cannot spin the CPU


class _LeaseLost(Exception):
    """The job was taken over by a later lease while phase 1 ran; its result must not be written."""


@dataclass
class DrainReport:
    """What one drain did: counts plus one entry per job run (``jobs`` is camelCase for the HTTP API)."""

    leased: int = 0
    succeeded: int = 0
    failed: int = 0
    jobs: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``POST /api/v1/worker/run``."""
        return {"leased": self.leased, "succeeded": self.succeeded, "failed": self.failed, "jobs": self.jobs}


def _error_text(exc: BaseException) -> str:
    return scrub(f"{type(exc).__name__}: {exc}")


def _seconds_until(iso: str | None) -> float | None:
    if iso is None:
        return None
    due = datetime.fromisoformat(iso)
    if due.tzinfo is None:
        due = due.replace(tzinfo=UTC)
    return max(0.0, (due - datetime.now(UTC)).total_seconds())


class EvolutionWorker:
    """Runs evolution jobs: ``drain()`` on demand, or a background thread woken by ``wake()``."""

    def __init__(
        self,
        db: Database,
        jobs: JobRepository,
        handlers: dict[str, Handler],
        *,
        startup_delay_s: float = 5.0,
        batch: int = 20,
        max_cycles: int = 40,
        on_cycle: Callable[[], None] | None = None,
        lease_seconds: float = 60.0,
        max_sleep_s: float = 60.0,
    ) -> None:
        self.db = db
        self.jobs = jobs
        self.startup_delay_s = startup_delay_s
        self.batch = batch
        self.max_cycles = max_cycles
        self.on_cycle = on_cycle
        self.lease_seconds = lease_seconds
        self.max_sleep_s = max_sleep_s  # the longest idle sleep, so ``on_cycle`` still runs periodically
        self.busy = False
        self.last_error: str | None = None
        self.last_run_at: float | None = None
        self._handlers = dict(handlers)
        self._handlers_lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self, job_type: str, handler: Handler) -> None:
        """Add or replace the handler of one job type (takes effect for the next job leased)."""
        with self._handlers_lock:
            self._handlers[job_type] = handler

    def handler_for(self, job_type: str) -> Handler | None:
        """The handler registered for ``job_type``, if any."""
        with self._handlers_lock:
            return self._handlers.get(job_type)

    @property
    def running(self) -> bool:
        """True while the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def drain(
        self,
        limit: int = 20,
        *,
        job_types: Sequence[str] | None = None,
        target_memory_ids: Sequence[str] | None = None,
    ) -> DrainReport:
        """Run up to ``limit`` due jobs now, most urgent first, and report them.

        Requeues failed jobs first, then leases one job at a time (so a job enqueued meanwhile with a higher
        priority goes next, and no lease ages while earlier jobs of a batch run). Drains in this process are
        serialised; leasing is atomic, so a drain in another process cannot run the same job either.
        Must not be called inside a transaction.
        """
        report = DrainReport()
        with self._drain_lock:
            self.busy = True
            try:
                self.jobs.requeue_failed()
                while report.leased < limit and not self._stopping_thread():
                    leased = self.jobs.lease(
                        1,
                        lease_seconds=self.lease_seconds,
                        job_types=job_types,
                        target_memory_ids=target_memory_ids,
                    )
                    if not leased:
                        break
                    report.leased += 1
                    self._record(report, leased[0], self._run(leased[0]))
            finally:
                self.busy = False
                self.last_run_at = time.time()
        return report

    def _stopping_thread(self) -> bool:
        return self._stop.is_set() and threading.current_thread() is self._thread

    def _record(self, report: DrainReport, job: JobRecord, outcome: tuple[str, str | None]) -> None:
        status, error = outcome
        if status == "succeeded":
            report.succeeded += 1
        elif status != LEASE_LOST:
            report.failed += 1
        report.jobs.append(
            {
                "jobId": job.id,
                "jobType": job.job_type,
                "status": status,
                "targetMemoryId": job.target_memory_id,
                "error": error,
            }
        )

    def _run(self, job: JobRecord) -> tuple[str, str | None]:
        """Run one leased job through both phases; returns (final status, scrubbed error)."""
        handler = self.handler_for(job.job_type)
        if handler is None:
            error = f"no handler registered for job type {job.job_type!r}"
            return self._fail(job, error, permanent=True), error
        try:
            apply = handler(job)
            with self.db.transaction():
                if not self.jobs.holds_lease(job):
                    raise _LeaseLost
                if apply is not None:
                    apply()
                self.jobs.complete(job.id)
        except _LeaseLost:
            log.warning("job %s (%s) was re-leased while it ran; its result was dropped", job.id, job.job_type)
            return LEASE_LOST, "lease lost"
        except Exception as exc:  # noqa: BLE001 - any handler bug becomes a failed job, never a dead worker
            error = _error_text(exc)
            return self._fail(job, error), error
        return "succeeded", None

    def _fail(self, job: JobRecord, error: str, *, permanent: bool = False) -> str:
        self.last_error = error
        status = self.jobs.fail(job.id, error, permanent=permanent)
        log.warning(
            "job %s (%s) attempt %d/%d %s: %s", job.id, job.job_type, job.attempts, job.max_attempts, status, error
        )
        return status

    def wake(self) -> None:
        """Ask the background thread to look for work now; never blocks."""
        self._wake.set()

    def start(self) -> None:
        """Start the background thread (first drain after ``startup_delay_s`` or the first ``wake()``)."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="memmy-evolution", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background thread after the job it is running (leased jobs left over stay leasable)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if not thread.is_alive():
                self._thread = None

    def _loop(self) -> None:
        self._wake.wait(self.startup_delay_s)
        while not self._stop.is_set():
            self._wake.clear()  # before the work, so a wake() during it triggers another pass
            ran = self._cycle()
            if self._stop.is_set():
                break
            self._wake.wait(self._sleep_for(ran))

    def _cycle(self) -> int:
        """One pass: the periodic hook, then up to ``max_cycles`` drains; returns how many jobs ran."""
        if self.on_cycle is not None:
            try:
                self.on_cycle()
            except Exception as exc:  # noqa: BLE001 - periodic work must never kill the worker
                self.last_error = _error_text(exc)
                log.warning("worker periodic hook failed: %s", self.last_error)
        ran = 0
        try:
            for _ in range(self.max_cycles):
                report = self.drain(self.batch)
                ran += report.leased
                if report.leased < self.batch or self._stop.is_set():
                    break
        except Exception as exc:  # noqa: BLE001 - a store error is retried on the next pass
            self.last_error = _error_text(exc)
            log.warning("evolution drain failed: %s", self.last_error)
            return -1
        return ran

    def _sleep_for(self, ran: int) -> float:
        if ran < 0:
            return min(self.max_sleep_s, STALL_SLEEP_S)
        try:
            wait = _seconds_until(self.jobs.next_due_at())
        except Exception as exc:  # noqa: BLE001 - never let the scheduler die on a read error
            self.last_error = _error_text(exc)
            return min(self.max_sleep_s, STALL_SLEEP_S)
        if wait is None:
            return self.max_sleep_s
        if wait == 0.0 and ran == 0:
            return min(self.max_sleep_s, STALL_SLEEP_S)
        return min(self.max_sleep_s, wait)
