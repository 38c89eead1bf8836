"""The evolution job queue: durable, deduplicated, prioritised background work (summaries, rewards, induction ...).

A job moves ``queued -> leased -> succeeded``; a failure makes it ``failed`` with an exponential back-off
(``requeue_failed`` puts it back at the start of each drain) and ``dead_letter`` once ``max_attempts`` leases
have been spent. Leasing is one IMMEDIATE transaction, so two drains can never take the same job; an expired
lease (a worker that died or hung) makes the job due again. All times are ISO-8601 UTC strings in the store's
format (``utc_now``), so they compare correctly as text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memmy.domain import new_id
from memmy.errors import InvalidArgument
from memmy.store.db import Database, utc_now

JOB_PRIORITY: dict[str, int] = {
    "manual_retry": 0,
    "episode_idle_close": 1,
    "episode_relation": 2,
    "trace_summary": 5,
    "import_summary": 6,
    "embedding": 10,
    "reflection": 20,
    "reward": 30,
    "l2_association": 40,
    "l2_induction": 50,
    "failure_experience": 52,
    "decision_repair": 55,
    "policy_feedback": 56,
    "policy_stats": 57,
    "l3_abstraction": 60,
    "skill_crystallization": 70,
    "skill_trial_resolve": 80,
    "dream": 90,
}
UNKNOWN_PRIORITY = 100
JOB_STATUSES = ("queued", "leased", "succeeded", "failed", "dead_letter")
RERUN_KEY = "_rerun"  # payload key: a request that arrived while the job was leased (see JobRepository.enqueue)
RERUN_PATH = "$." + RERUN_KEY
ACTIVE_STATUSES = ("queued", "leased", "failed")  # the statuses the unique dedupe index covers
BASE_BACKOFF_S = 30.0
MAX_BACKOFF_S = 3600.0
MAX_ERROR_CHARS = 2000

_COLUMNS = (
    "id, job_type, status, dedupe_key, user_id, session_id, episode_id, target_memory_id, payload_json, "
    "priority, attempts, max_attempts, run_after, leased_until, last_error, created_at, updated_at"
)


def to_store_time(value: str | datetime) -> str:
    """Normalise an ISO-8601 time (any offset, or naive = UTC) to the store's ``...sssZ`` UTC form."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidArgument(f"not an ISO-8601 time: {value!r}") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_after(seconds: float, *, now: str | None = None) -> str:
    """The store time ``seconds`` after ``now`` (default: the current time)."""
    start = datetime.fromisoformat(to_store_time(now or utc_now()))
    return to_store_time(start + timedelta(seconds=seconds))


def backoff_seconds(attempts: int) -> float:
    """Delay before a failed job runs again after ``attempts`` leases: 30 s * 2^(n-1), capped at one hour."""
    return float(min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** max(0, min(attempts - 1, 16))))


@dataclass(frozen=True)
class JobRecord:
    """One row of ``evolution_jobs`` with the payload parsed."""

    id: str
    job_type: str
    status: str
    dedupe_key: str | None
    user_id: str | None
    session_id: str | None
    episode_id: str | None
    target_memory_id: str | None
    payload: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    run_after: str | None
    leased_until: str | None
    last_error: str | None
    created_at: str
    updated_at: str

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> JobRecord:
        """Build a record from a row selected with the full column list."""
        try:
            payload = json.loads(row["payload_json"] or "{}")
        except ValueError:
            payload = {}
        return cls(
            id=row["id"],
            job_type=row["job_type"],
            status=row["status"],
            dedupe_key=row["dedupe_key"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            episode_id=row["episode_id"],
            target_memory_id=row["target_memory_id"],
            payload=payload if isinstance(payload, dict) else {"value": payload},
            priority=int(row["priority"]),
            attempts=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            run_after=row["run_after"],
            leased_until=row["leased_until"],
            last_error=row["last_error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def as_dict(self) -> dict[str, Any]:
        """The camelCase JSON shape used by the HTTP API."""
        return {
            "id": self.id,
            "jobType": self.job_type,
            "status": self.status,
            "dedupeKey": self.dedupe_key,
            "userId": self.user_id,
            "sessionId": self.session_id,
            "episodeId": self.episode_id,
            "targetMemoryId": self.target_memory_id,
            "payload": self.payload,
            "priority": self.priority,
            "attempts": self.attempts,
            "maxAttempts": self.max_attempts,
            "runAfter": self.run_after,
            "leasedUntil": self.leased_until,
            "lastError": self.last_error,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


def _in_clause(column: str, values: Sequence[str] | None, params: list[Any]) -> str:
    if values is None:
        return ""
    if not values:
        return " AND 1 = 0"  # (a boolean on both backends)
    params.extend(values)
    return f" AND {column} IN ({','.join('?' * len(values))})"


class JobRepository:
    """Durable queue of evolution jobs in ``evolution_jobs``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def enqueue(
        self,
        job_type: str,
        *,
        dedupe_key: str | None = None,
        payload: dict[str, Any] | None = None,
        run_after: str | None = None,
        max_attempts: int = 3,
        user_id: str | None = None,
        session_id: str | None = None,
        episode_id: str | None = None,
        target_memory_id: str | None = None,
        priority: int | None = None,
    ) -> tuple[JobRecord, bool]:
        """Queue a job; returns ``(job, created)``.

        When a queued, leased or failed job already has ``dedupe_key`` that job is returned (``created`` False)
        and nothing else changes, except that a *queued* job whose ``run_after`` is later than the new one is
        brought forward (a later ``run_after`` never postpones it, and a failed job keeps its back-off), and a
        *leased* job is asked to run once more: it may already have read the state this request is about, so
        :meth:`complete` queues a fresh job with this payload when it finishes (no update is lost).
        Once the earlier job has succeeded or been dead-lettered, the same key queues a new job.
        Safe inside a caller's transaction (it joins it).
        """
        if not job_type:
            raise InvalidArgument("job_type is required")
        if max_attempts < 1:
            raise InvalidArgument("max_attempts must be at least 1")
        due = to_store_time(run_after) if run_after else None
        now = utc_now()
        with self.db.transaction() as conn:
            if dedupe_key is not None:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM evolution_jobs WHERE dedupe_key = ? AND status IN (?,?,?)",
                    (dedupe_key, *ACTIVE_STATUSES),
                ).fetchone()
                if row is not None:
                    existing = JobRecord.from_row(row)
                    if existing.status == "queued" and existing.run_after and (due is None or due < existing.run_after):
                        conn.execute(
                            "UPDATE evolution_jobs SET run_after = ?, updated_at = ? WHERE id = ?",
                            (due, now, existing.id),
                        )
                        existing = self._get(conn, existing.id) or existing
                    elif existing.status == "leased":
                        rerun = {"payload": payload or {}, "runAfter": due}
                        conn.execute(
                            "UPDATE evolution_jobs SET payload_json = json_set(payload_json, ?, json(?)) WHERE id = ?",
                            (RERUN_PATH, json.dumps(rerun, ensure_ascii=False), existing.id),
                        )
                    return existing, False
            job_id = new_id("job")
            conn.execute(
                f"INSERT INTO evolution_jobs({_COLUMNS}) VALUES (?,?,'queued',?,?,?,?,?,?,?,0,?,?,NULL,NULL,?,?)",
                (
                    job_id,
                    job_type,
                    dedupe_key,
                    user_id,
                    session_id,
                    episode_id,
                    target_memory_id,
                    json.dumps(payload or {}, ensure_ascii=False),
                    JOB_PRIORITY.get(job_type, UNKNOWN_PRIORITY) if priority is None else priority,
                    max_attempts,
                    due,
                    now,
                    now,
                ),
            )
            job = self._get(conn, job_id)
        assert job is not None
        return job, True

    def lease(
        self,
        limit: int,
        *,
        now: str | None = None,
        lease_seconds: float = 60.0,
        job_types: Sequence[str] | None = None,
        target_memory_ids: Sequence[str] | None = None,
    ) -> list[JobRecord]:
        """Atomically take up to ``limit`` due jobs (most urgent first): attempts+1, status leased.

        Due means queued, or leased with an expired lease, with attempts left and ``run_after`` unset or past.
        A job whose lease expired on its last attempt is dead-lettered here instead of running again.
        """
        if limit <= 0:
            return []
        at = to_store_time(now) if now else utc_now()
        until = utc_after(lease_seconds, now=at)
        params: list[Any] = [at]
        filters = _in_clause("job_type", job_types, params) + _in_clause("target_memory_id", target_memory_ids, params)
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE evolution_jobs SET status = 'dead_letter', leased_until = NULL, updated_at = ?, "
                "last_error = COALESCE(last_error || '; ', '') || 'lease expired on the final attempt' "
                "WHERE status = 'leased' AND leased_until < ? AND attempts >= max_attempts",
                (at, at),
            )
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM evolution_jobs WHERE (status = 'queued' OR "
                "(status = 'leased' AND leased_until < ?)) AND attempts < max_attempts "
                f"AND (run_after IS NULL OR run_after <= ?){filters} ORDER BY priority, created_at, rowid LIMIT ?"
                + self.db.skip_locked,
                [at, *params, limit],
            ).fetchall()
            ids = [row["id"] for row in rows]
            for job_id in ids:
                conn.execute(  # a new run reads the current state: an earlier rerun request is satisfied by it
                    "UPDATE evolution_jobs SET status = 'leased', attempts = attempts + 1, leased_until = ?, "
                    "updated_at = ?, payload_json = json_remove(payload_json, ?) WHERE id = ?",
                    (until, at, RERUN_PATH, job_id),
                )
            leased = [self._get(conn, job_id) for job_id in ids]
        return [job for job in leased if job is not None]

    def holds_lease(self, job: JobRecord) -> bool:
        """True while ``job`` is still leased under the lease it was handed (no later lease took it over)."""
        row = self.db.query_one(
            "SELECT 1 FROM evolution_jobs WHERE id = ? AND status = 'leased' AND attempts = ?", (job.id, job.attempts)
        )
        return row is not None

    def complete(self, job_id: str) -> bool:
        """Mark a leased job succeeded; False when it is not currently leased.

        A job that was asked to run again while it ran (see :meth:`enqueue`) is followed by a fresh queued job
        of the same type and key, in the same transaction."""
        now = utc_now()
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE evolution_jobs SET status = 'succeeded', leased_until = NULL, last_error = NULL, "
                "updated_at = ? WHERE id = ? AND status = 'leased'",
                (now, job_id),
            )
            if cursor.rowcount != 1:
                return False
            done = self._get(conn, job_id)
            rerun = done.payload.get(RERUN_KEY) if done is not None else None
            if done is not None and isinstance(rerun, dict):
                self.enqueue(
                    done.job_type,
                    dedupe_key=done.dedupe_key,
                    payload=dict(rerun.get("payload") or {}),
                    run_after=rerun.get("runAfter"),
                    max_attempts=done.max_attempts,
                    user_id=done.user_id,
                    session_id=done.session_id,
                    episode_id=done.episode_id,
                    target_memory_id=done.target_memory_id,
                    priority=done.priority,
                )
            return True

    def fail(self, job_id: str, error: str, *, retry_in_s: float | None = None, permanent: bool = False) -> str:
        """Record a failure of a leased (or queued) job and return its new status.

        ``failed`` with ``run_after`` = now + ``retry_in_s`` (default 30 s * 2^(attempts-1), capped at 1 h), or
        ``dead_letter`` when the attempts are spent or ``permanent`` is set. A job in another status (already
        succeeded, say) is left alone and its current status returned; an unknown id returns ``"missing"``.
        """
        now = utc_now()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT status, attempts, max_attempts FROM evolution_jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                return "missing"
            if row["status"] not in ("leased", "queued"):
                return str(row["status"])
            attempts = int(row["attempts"])
            final = permanent or attempts >= int(row["max_attempts"])
            status = "dead_letter" if final else "failed"
            delay = backoff_seconds(attempts) if retry_in_s is None else max(0.0, retry_in_s)
            conn.execute(
                "UPDATE evolution_jobs SET status = ?, run_after = ?, leased_until = NULL, last_error = ?, "
                "updated_at = ? WHERE id = ?",
                (status, None if final else utc_after(delay, now=now), error[:MAX_ERROR_CHARS], now, job_id),
            )
            return status

    def requeue_failed(self) -> int:
        """Put failed jobs back in the queue (their back-off ``run_after`` still applies); returns how many."""
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE evolution_jobs SET status = 'queued', updated_at = ? WHERE status = 'failed'", (utc_now(),)
            )
            return int(cursor.rowcount)

    def release_all_leases(self) -> int:
        """At daemon start-up (under the server lock): make every leased job queued again; returns how many.

        Attempts are kept, so a job that keeps killing the process still reaches its limit: a job that was
        leased on its last attempt is dead-lettered instead of requeued.
        """
        now = utc_now()
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE evolution_jobs SET status = 'dead_letter', leased_until = NULL, updated_at = ?, "
                "last_error = COALESCE(last_error || '; ', '') || 'interrupted on the final attempt' "
                "WHERE status = 'leased' AND attempts >= max_attempts",
                (now,),
            )
            cursor = conn.execute(
                "UPDATE evolution_jobs SET status = 'queued', leased_until = NULL, updated_at = ? "
                "WHERE status = 'leased'",
                (now,),
            )
            return int(cursor.rowcount)

    def next_due_at(self) -> str | None:
        """When the next job becomes leasable (a past time when one is due now); None when nothing is pending."""
        row = self.db.query_one(
            "SELECT MIN(t) FROM (SELECT COALESCE(run_after, created_at) AS t FROM evolution_jobs "
            "WHERE status IN ('queued','failed') AND attempts < max_attempts "
            "UNION ALL SELECT leased_until FROM evolution_jobs WHERE status = 'leased')"
        )
        return None if row is None or row[0] is None else str(row[0])

    def counts(self) -> dict[str, int]:
        """Jobs per status (every status present, zero when empty)."""
        out = dict.fromkeys(JOB_STATUSES, 0)
        for row in self.db.query("SELECT status, COUNT(*) FROM evolution_jobs GROUP BY status"):
            out[str(row[0])] = int(row[1])
        return out

    def get(self, job_id: str) -> JobRecord | None:
        """One job by id."""
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM evolution_jobs WHERE id = ?", (job_id,))
        return None if row is None else JobRecord.from_row(row)

    def list_jobs(
        self,
        status: str | None = None,
        job_type: str | None = None,
        episode_id: str | None = None,
        limit: int = 100,
    ) -> list[JobRecord]:
        """Jobs matching the given filters, newest first."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("status", status), ("job_type", job_type), ("episode_id", episode_id)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM evolution_jobs{where} ORDER BY created_at DESC, rowid DESC LIMIT ?",
            [*params, max(0, limit)],
        )
        return [JobRecord.from_row(row) for row in rows]

    def prune_finished(self, keep: int = 10_000) -> int:
        """Delete all but the ``keep`` newest succeeded jobs and the ``keep`` newest dead letters."""
        deleted = 0
        with self.db.transaction() as conn:
            for status in ("succeeded", "dead_letter"):
                cursor = conn.execute(
                    "DELETE FROM evolution_jobs WHERE status = ? AND id NOT IN (SELECT id FROM evolution_jobs "
                    "WHERE status = ? ORDER BY updated_at DESC, rowid DESC LIMIT ?)",
                    (status, status, max(0, keep)),
                )
                deleted += int(cursor.rowcount)
        return deleted

    @staticmethod
    def _get(conn: sqlite3.Connection, job_id: str) -> JobRecord | None:
        row = conn.execute(f"SELECT {_COLUMNS} FROM evolution_jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else JobRecord.from_row(row)
