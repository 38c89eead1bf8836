"""Open the SQLite store: file checks, pragmas, versioned migrations with a backup, the single-server lock file,
and disk-full errors named as such."""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import psutil

from memmy.errors import StorageFullError, StoreError
from memmy.store.checkpoints import CHECKPOINT_INTERVAL_S, SAFETY_NET_PAGES, BackgroundCheckpoints
from memmy.store.integrity import STARTUP_CHECK_S, preflight, realign_fts, repair_fts_at_run_time, startup_check
from memmy.store.schema import FTS_ROWID_VERSION, MIGRATIONS, SCHEMA_VERSION, current_version

log = logging.getLogger("memmy.store")
T = TypeVar("T")
BUSY_TIMEOUT_MS = 5000
#: SQLite's automatic checkpoint threshold (WAL pages), and the one a bulk run (a history import) uses: ~40 MiB.
DEFAULT_CHECKPOINT_PAGES = 1000
BULK_CHECKPOINT_PAGES = 10_000
MIN_SQLITE = (3, 35, 0)
SQLITE_BUSY = 5
SQLITE_PERM = 3
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
#: Primary result codes of a write the store itself could not make (not a constraint, not the caller's SQL): they
#: mark the store degraded until a probe write succeeds.
STORE_FAILURES = (SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN)
#: Below this much free space the store is reported as unable to write (a page or two would not fit).
MIN_FREE_BYTES = 64 * 1024
PROBE_MAX_AGE_S = 5.0


def is_disk_full(exc: BaseException) -> bool:
    """True for SQLite's SQLITE_FULL ("database or disk is full") and the OS's "no space left"."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF == SQLITE_FULL:
            return True
        return "database or disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno == 28  # ENOSPC


def is_busy(exc: BaseException) -> bool:
    """True for SQLITE_BUSY ("database is locked"): another connection holds the lock this one needs."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and (
        (code is not None and code & 0xFF == SQLITE_BUSY) or "database is locked" in str(exc)
    )


def retry_while_busy(step: Callable[[], T], seconds: float = BUSY_TIMEOUT_MS / 1000) -> T:
    """Run ``step`` again, for up to ``seconds``, while SQLite answers "database is locked" at once.

    SQLite skips the busy handler when waiting could deadlock: two connections that both hold a read lock and
    both want to write (processes opening one store at once, each switching it to WAL) get SQLITE_BUSY straight
    away, and the way out is to run the statement again once the other has finished.
    """
    end = time.monotonic() + seconds
    pause = 0.005
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= end:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_corrupt(exc: BaseException) -> bool:
    """True for SQLITE_CORRUPT (any extended code: the file or the full-text index is damaged)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF == SQLITE_CORRUPT


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string with milliseconds (the store's time format)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_sqlite_features(conn: sqlite3.Connection) -> None:
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(
            f"SQLite {sqlite3.sqlite_version} is too old; memmy needs {'.'.join(map(str, MIN_SQLITE))}+ "
            "(upgrade Python or install a newer libsqlite3)"
        )
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.fts5_probe")
    except sqlite3.OperationalError as exc:
        raise StoreError(f"this Python's SQLite has no FTS5 support ({exc}); use a Python built with FTS5") from exc


def create_store_file(path: Path) -> bool:
    """Create an empty WAL-mode SQLite file at ``path``, owner-only; False when another process created it first.

    The file is built beside ``path`` and linked into place, so no process ever sees a half-created (0-byte)
    store, which the preflight would rightly refuse as damaged.
    """
    staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        os.close(os.open(staging, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(str(staging))
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # writes the header: the file is a database from now on
        finally:
            conn.close()
        try:
            os.link(staging, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: rename, unless someone got there first
            if path.exists():
                return False
            os.replace(staging, path)
        return True
    except sqlite3.Error as exc:
        raise StoreError(f"cannot create database {path}: {exc}") from exc
    finally:
        for leftover in (staging, staging.with_name(staging.name + "-wal"), staging.with_name(staging.name + "-shm")):
            leftover.unlink(missing_ok=True)


class Database:
    """One SQLite connection shared by the process, serialised by a re-entrant lock.

    SQLite allows one writer at a time anyway; a single connection keeps transactions simple and lets
    WAL readers in other processes (the CLI, backups) proceed while the daemon writes.
    :class:`memmy.store.pg.PgDatabase` gives the same interface over PostgreSQL.
    """

    #: Which engine holds the store ("sqlite" or "postgres").
    backend = "sqlite"
    #: What a SELECT that leases rows appends (PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite's one writer needs none).
    skip_locked = ""

    def __init__(self, path: Path, check_s: float | None = STARTUP_CHECK_S) -> None:
        """Open (or create) the store; a damaged file is refused with a one-line :class:`StoreError`.

        An existing file is checked first (``quick_check`` bounded by ``check_s`` seconds); a damaged full-text
        index is rebuilt, with a log line.
        """
        self.path = path
        self.lock = threading.RLock()
        self.last_write_error: str | None = None
        self._probe: tuple[float, str | None] | None = None
        self._bulk_depth = 0
        #: Transactions committed on this connection (what the background checkpoints go by).
        self.commits = 0
        self._checkpoints: BackgroundCheckpoints | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        if not existed:
            existed = not create_store_file(path)
        preflight(path)  # 0-byte, not SQLite, truncated: refused before SQLite touches it
        try:
            self.conn = sqlite3.connect(
                str(path), check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {path}: {exc}") from exc
        self.conn.row_factory = sqlite3.Row
        try:
            _check_sqlite_features(self.conn)
            self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            if existed:
                startup_check(self.conn, path, check_s)
            retry_while_busy(lambda: self.conn.execute("PRAGMA journal_mode=WAL").fetchall())
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.migration = retry_while_busy(lambda: migrate(self.conn, path))
            if existed and self.migration.from_version >= FTS_ROWID_VERSION:  # (migrating re-indexes anyway)
                realign_fts(self.conn, path, check_s)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            if is_disk_full(exc):
                raise StorageFullError(f"the disk holding {path} is full ({exc}): free some space") from None
            raise StoreError(
                f"{path} cannot be used ({exc}): restore a backup or move it aside; `memmy-memory doctor` explains"
            ) from None
        except BaseException:
            self.conn.close()
            raise

    def in_transaction(self) -> bool:
        """Whether the connection is inside a transaction."""
        return self.conn.in_transaction

    def _full(self, exc: BaseException) -> StorageFullError:
        message = f"the disk holding {self.path} is full: the write was not saved (free some space, then retry)"
        self.mark_failed(message)
        return StorageFullError(message)

    def mark_failed(self, reason: str) -> None:
        """A write failed for a reason of the store's own (disk, permissions, damage): :meth:`write_probe` reports
        ``reason`` until a write succeeds."""
        self.last_write_error = reason
        self._probe = None

    def recover(self, exc: BaseException) -> str | None:
        """After ``exc`` reached a caller: None unless it is SQLITE_CORRUPT. When the full-text index is what is
        damaged, it is backed up and rebuilt as at start (log lines) and the line saying so is returned (ending in
        "has been rebuilt …"); a store damaged elsewhere stays marked failed and the line naming ``doctor`` is
        returned."""
        if not is_corrupt(exc):
            return None
        with self.lock:
            if self.conn.in_transaction:  # (a read inside a caller's transaction: nothing of it may stand)
                self._rollback()
            try:
                repaired = repair_fts_at_run_time(self.conn, self.path)
            except sqlite3.Error as failed:
                log.error("%s: rebuilding the full-text index failed: %s", self.path, failed)
                repaired = None
            if repaired is not None:
                return f"{repaired}; nothing of this request was saved: retry it"
            damaged = f"the store {self.path} is damaged ({exc}): run `memmy-memory doctor`"
            self.mark_failed(damaged)
            return damaged

    def _rollback(self, name: str | None = None) -> None:
        if not self.conn.in_transaction:
            return  # SQLite already rolled back (it does so by itself after some I/O and disk-full errors)
        try:
            if name is None:
                self.conn.execute("ROLLBACK")
            else:
                self.conn.execute(f"ROLLBACK TO {name}")
                self.conn.execute(f"RELEASE {name}")
        except sqlite3.Error:
            if name is None:
                raise

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run a block in one IMMEDIATE transaction (nested calls join the outer one)."""
        with self.lock:
            if self.conn.in_transaction:
                yield self.conn
                return
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self.conn
                except BaseException:
                    self._rollback()
                    raise
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.Error:
                    self._rollback()
                    raise
                self.commits += 1
            except sqlite3.Error as exc:
                if is_disk_full(exc):
                    raise self._full(exc) from exc
                if is_corrupt(exc):  # health says so until a write succeeds (`memmy-memory doctor` names it)
                    self.mark_failed(f"the store {self.path} is damaged ({exc}): run `memmy-memory doctor`")
                elif _primary_code(exc) in STORE_FAILURES:  # read-only file or folder, I/O error
                    self.mark_failed(f"the store {self.path} cannot write ({exc})")
                raise
            if self.last_write_error is not None:
                self.last_write_error = None
                self._probe = None

    def write_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run writes whose results nobody reads (log rows, a session's last-seen time) in one transaction, in
        order (inside the caller's transaction when there is one). PostgreSQL sends them in one round trip; inside
        the caller's transaction, in the round trip of its next statement or its COMMIT, where a failure of
        theirs surfaces (and fails the transaction, as it would have here)."""
        with self.transaction() as conn:
            for sql, params in statements:
                conn.execute(sql, params)

    @contextmanager
    def savepoint(self, name: str = "sp") -> Iterator[sqlite3.Connection]:
        """A nested unit inside the current transaction: on error only this part is rolled back."""
        with self.transaction() as conn:
            conn.execute(f"SAVEPOINT {name}")
            try:
                yield conn
            except BaseException:
                self._rollback(name)
                raise
            conn.execute(f"RELEASE {name}")

    @contextmanager
    def bulk_writes(self, checkpoint_pages: int = BULK_CHECKPOINT_PAGES) -> Iterator[None]:
        """Let the WAL grow to ``checkpoint_pages`` before SQLite checkpoints it, for a run of many commits (a
        history import); nested runs share one setting, and the last to end restores the connection's own and
        checkpoints (or leaves that to the background checkpoints, which stand aside during the run).

        Each batch of an import rewrites many of the same index pages: with the default (1,000 pages) nearly every
        commit also copied them back into the database file; with a larger WAL they are copied back once.
        """
        with self.lock:
            self._bulk_depth += 1
            if self._bulk_depth == 1:
                self.conn.execute(f"PRAGMA wal_autocheckpoint={int(checkpoint_pages)}")
        try:
            yield
        finally:
            with self.lock:
                self._bulk_depth -= 1
                if self._bulk_depth == 0:
                    try:
                        self.conn.execute(f"PRAGMA wal_autocheckpoint={self._auto_pages()}")
                        if self._checkpoints is None:  # else the background thread copies the log back
                            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    except sqlite3.Error:
                        pass  # closed meanwhile, or a busy checkpoint: the next commit's automatic one retries

    def checkpoint_in_background(self, interval_s: float = CHECKPOINT_INTERVAL_S) -> BackgroundCheckpoints:
        """Copy the WAL back into the database file on a thread of its own from now on (looking every
        ``interval_s`` seconds), not inside whichever commit crosses SQLite's threshold (see
        :mod:`memmy.store.checkpoints`); the daemon calls this. The connection's own automatic checkpoint stays
        as a safety net at :data:`SAFETY_NET_PAGES` pages. Returns the running checkpoints (the same on a
        second call)."""
        with self.lock:
            if self._checkpoints is not None:
                return self._checkpoints
            checkpoints = BackgroundCheckpoints(
                self.path, lambda: self.commits, lambda: self._bulk_depth > 0, interval_s
            )
            checkpoints.start()
            self._checkpoints = checkpoints
            if self._bulk_depth == 0:
                self.conn.execute(f"PRAGMA wal_autocheckpoint={self._auto_pages()}")
            return checkpoints

    def _auto_pages(self) -> int:
        """The connection's automatic checkpoint outside a bulk run: SQLite's default, or the safety net while
        :meth:`checkpoint_in_background` runs."""
        return DEFAULT_CHECKPOINT_PAGES if self._checkpoints is None else SAFETY_NET_PAGES

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[sqlite3.Row]:
        """Run a read and return all rows."""
        with self.lock:
            return self.conn.execute(sql, params).fetchall()

    def query_one(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> sqlite3.Row | None:
        """Run a read and return the first row (or None)."""
        with self.lock:
            row: sqlite3.Row | None = self.conn.execute(sql, params).fetchone()
            return row

    def stream(self, sql: str, batch: int = 2000) -> Iterator[tuple[Any, ...]]:
        """The rows of a read (no parameters), fetched ``batch`` at a time: a whole table without holding it
        in memory (a store copy, a content hash)."""
        with self.lock:  # each step under the connection's lock (another thread may use it between batches)
            cursor = self.conn.execute(sql)
        while True:
            with self.lock:
                rows = cursor.fetchmany(batch)
            if not rows:
                return
            yield from rows

    def write_probe(self, max_age_s: float = PROBE_MAX_AGE_S) -> str | None:
        """Why the store cannot write right now (disk full, read-only, damaged), or None when it can.

        Under :data:`MIN_FREE_BYTES` free on the store's disk is a full disk. After a failed write (see
        :meth:`mark_failed`) a tiny committed write to ``runtime_kv`` decides: its success clears the failure, its
        failure keeps the first reason. A sound answer is cached for ``max_age_s`` seconds (a new failure drops
        it); a degraded one is not, so the first call after space comes back says so.
        """
        now = time.monotonic()
        with self.lock:
            if self._probe is not None and self._probe[1] is None and now - self._probe[0] < max_age_s:
                return None
            reason = self._low_disk()
            if reason is None and self.last_write_error is not None:
                reason = self._probe_write()
            self._probe = (now, reason)
            return reason

    def _low_disk(self) -> str | None:
        try:
            stats = os.statvfs(self.path.parent)
            free = stats.f_bavail * stats.f_frsize
        except OSError:
            return None
        if free < MIN_FREE_BYTES:
            return f"the disk holding {self.path} is full ({free // 1024} KiB free): writes fail until space is freed"
        return None

    def _probe_write(self) -> str | None:
        first = self.last_write_error
        try:
            with self.transaction() as conn:
                conn.execute(
                    "INSERT INTO runtime_kv(key, value_json, updated_at) VALUES ('write_probe', ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value_json = excluded.value_json, updated_at = excluded.updated_at",
                    (json.dumps(utc_now()), utc_now()),
                )
        except (StorageFullError, sqlite3.Error) as exc:
            self.last_write_error = first or str(exc)  # the write that failed first says best what is wrong
            return self.last_write_error
        return None

    def close(self) -> None:
        """Stop the background checkpoints, checkpoint the WAL and close the connection."""
        if self._checkpoints is not None:
            self._checkpoints.stop()
        with self.lock:
            try:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass
            self.conn.close()


@dataclass(frozen=True)
class MigrationResult:
    """What opening the store did to the schema."""

    from_version: int
    to_version: int
    applied: tuple[str, ...]
    backup_path: Path | None

    @property
    def last_migration_id(self) -> str:
        """Id of the newest migration in the file."""
        return MIGRATIONS[self.to_version - 1].id


def migrate(conn: sqlite3.Connection, path: Path | None, target: int = SCHEMA_VERSION) -> MigrationResult:
    """Bring the schema to ``target``; back up an older non-empty file first (``<db>.pre-v<N>.bak``)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(id TEXT PRIMARY KEY, version INTEGER NOT NULL, applied_at TEXT NOT NULL, checksum TEXT NOT NULL)"
    )
    version = current_version(conn)
    if version > target:
        raise StoreError(
            f"{path}: schema version {version} is newer than this memmy supports ({target}); upgrade memmy"
        )
    backup: Path | None = None
    if 0 < version < target and path is not None:
        backup = path.with_name(f"{path.name}.pre-v{target}.bak")
        if not backup.exists():
            conn.execute("PRAGMA wal_checkpoint(FULL)")
            conn.execute("VACUUM INTO ?", (str(backup),))
            os.chmod(backup, 0o600)  # as private as the database it copies
    applied: list[str] = []
    for migration in MIGRATIONS:
        if migration.version <= version or migration.version > target:
            continue
        conn.execute("BEGIN IMMEDIATE")
        if current_version(conn) >= migration.version:  # another process (serve and init at once) applied it
            conn.execute("COMMIT")
            continue
        try:
            for statement in _split_sql(migration.sql):
                conn.execute(statement)
            if migration.after is not None:
                migration.after(conn)
            conn.execute(
                "INSERT INTO schema_migrations(id, version, applied_at, checksum) VALUES (?,?,?,?)",
                (migration.id, migration.version, utc_now(), str(len(migration.sql))),
            )
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"{path}: migration {migration.id} failed: {exc}") from exc
        conn.execute("COMMIT")
        applied.append(migration.id)
    return MigrationResult(version, target, tuple(applied), backup)


def _split_sql(script: str) -> list[str]:
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_started_at(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds), or None when there is no such process."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return None


def _iso_epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


#: Slack when comparing a process's start time with the time recorded in a lock (clock and rounding).
START_TIME_SLACK_S = 1.0


def lock_holder_alive(holder: dict[str, Any]) -> bool:
    """True when the process that wrote a lock file still runs: same pid *and* the same process.

    A pid alone is not enough: after a crash and a reboot (or a long uptime) the pid may belong to an
    unrelated process. The lock records its writer's start time (``processStartedAt``); a lock without it is
    judged by ``startedAt``: its writer was running when the lock was written, so a process that started later
    is someone else.
    """
    try:
        pid = int(holder.get("pid") or 0)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        created = process_started_at(pid)
    except psutil.Error:
        return _pid_alive(pid)
    if created is None:
        return False
    recorded = holder.get("processStartedAt")
    if isinstance(recorded, int | float) and not isinstance(recorded, bool):
        return abs(created - float(recorded)) <= START_TIME_SLACK_S
    written = _iso_epoch(holder.get("startedAt"))
    return written is None or created <= written + START_TIME_SLACK_S


class ServerLock:
    """``<db>.server.lock``: refuses a second daemon on the same file; takes over a lock whose writer is gone
    (its pid dead, or now an unrelated process)."""

    def __init__(self, db_path: Path) -> None:
        self.path = db_path.with_name(db_path.name + ".server.lock")
        self.db_path = db_path
        self.held = False

    def acquire(self, host: str, port: int) -> None:
        """Create the lock file atomically; raise StoreError naming the holder when it is taken."""
        payload = json.dumps(
            {
                "pid": os.getpid(),
                "host": host,
                "port": port,
                "sqlitePath": str(self.db_path),
                "hostname": socket.gethostname(),
                "startedAt": utc_now(),
                "processStartedAt": process_started_at(os.getpid()),
            }
        )
        for _attempt in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                holder = self.read()
                pid = int(holder.get("pid", 0)) if holder else 0
                if holder and pid != os.getpid() and lock_holder_alive(holder):
                    where = f"{holder.get('host')}:{holder.get('port')}" if holder else "?"
                    raise StoreError(
                        f"{self.db_path} is already served by pid {pid} on {where}; "
                        f"stop that daemon first (or remove {self.path} if you are sure it is gone)"
                    ) from None
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(payload)
            self.held = True
            return
        raise StoreError(f"could not acquire {self.path}")

    def read(self) -> dict[str, Any] | None:
        """The lock's JSON content, or None when absent or unreadable."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def release(self) -> None:
        """Remove the lock if this process holds it."""
        if self.held:
            holder = self.read()
            if holder and holder.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False
