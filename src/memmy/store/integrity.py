"""Is the store file sound? Cheap file checks, a time-bounded ``PRAGMA quick_check``, the FTS5 index check,
and the full-text index rebuild; the findings name the file and the command that fixes each problem.

The daemon runs :func:`preflight` and :func:`startup_check` every time it opens the store (a damaged file is
refused with one line, a damaged full-text index is rebuilt with a log line); ``memmy-memory doctor`` runs
:func:`check_store` and, with ``--repair``, :func:`repair_store` on the file while no daemon serves it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from memmy.errors import StoreError
from memmy.store.schema import FTS_ROWID_VERSION, MEMORIES_FTS_DDL, current_version, refill_fts

log = logging.getLogger("memmy.store")

SQLITE_HEADER = b"SQLite format 3\x00"
FTS_TABLE = "memories_fts"
FTS_SHADOW_SUFFIXES = ("data", "idx", "content", "docsize", "config")
#: How long the daemon's start may spend on ``quick_check`` (and, separately, on the FTS check).
STARTUP_CHECK_S = 10.0
LOW_DISK_BYTES = 16 * 1024 * 1024
_PROGRESS_STEPS = 2000

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One problem with the store: what it is, which file, and the command that fixes it."""

    code: str
    severity: Severity
    message: str
    fix: str
    repairable: bool = False

    def line(self) -> str:
        """The finding as one line: ``message; fix: command``."""
        return f"{self.message}; fix: {self.fix}" if self.fix else self.message

    def to_json(self) -> dict[str, Any]:
        """API/CLI shape."""
        return asdict(self)


class CheckTimeout(Exception):
    """A bounded check ran out of time (the store is not known to be damaged)."""


def backups_of(path: Path) -> list[Path]:
    """Backups memmy wrote next to the store (schema and repair backups), newest first."""
    found = [p for p in path.parent.glob(f"{path.name}.*.bak") if p.is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _restore_hint(path: Path) -> str:
    backups = backups_of(path)
    restore = f"restore a backup (newest: {backups[0]})" if backups else "restore a backup"
    return f"{restore} or move it aside (`mv {path} {path}.broken`; the next start creates a new store)"


def _file_finding(path: Path) -> Finding | None:
    """The cheap checks on the file itself: present, not empty, a SQLite header, not shorter than it says."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    wal = path.with_name(path.name + "-wal")
    # Pages not yet checkpointed live in the write-ahead log; a crash during a checkpoint can leave the file
    # shorter than its header says until SQLite replays the log. Then SQLite and quick_check judge, not size.
    pending_wal = wal.exists() and wal.stat().st_size > 0
    if size == 0:
        if pending_wal:
            return None  # a brand-new store whose first pages are still in the write-ahead log
        return Finding(
            "empty_file",
            "error",
            f"{path} is empty (0 bytes), not a memmy store",
            _restore_hint(path),
        )
    with path.open("rb") as handle:
        header = handle.read(100)
    if not header.startswith(SQLITE_HEADER):
        return Finding(
            "not_sqlite",
            "error",
            f"{path} is not a SQLite database (its first bytes are not the SQLite header)",
            _restore_hint(path),
        )
    if len(header) < 100:
        return Finding("truncated", "error", f"{path} is truncated ({size} bytes)", _restore_hint(path))
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    change_counter, valid_for = header[24:28], header[92:96]
    if page_size and pages and change_counter == valid_for and size < pages * page_size and not pending_wal:
        return Finding(
            "truncated",
            "error",
            f"{path} is truncated ({size} bytes, its header says {pages * page_size})",
            _restore_hint(path),
        )
    return None


def preflight(path: Path) -> None:
    """Refuse a 0-byte, non-SQLite or truncated file with one line (a missing file is fine: it is created)."""
    finding = _file_finding(path)
    if finding is not None:
        raise StoreError(f"{finding.message}: {finding.fix}; `memmy-memory doctor` explains")


@contextmanager
def deadline(conn: sqlite3.Connection, seconds: float | None) -> Iterator[None]:
    """Abort the statements run inside after ``seconds`` (raises :class:`CheckTimeout`); None: no limit."""
    if seconds is None:
        yield
        return
    end = time.monotonic() + seconds
    conn.set_progress_handler(lambda: int(time.monotonic() > end), _PROGRESS_STEPS)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if time.monotonic() > end and "interrupt" in str(exc).lower():
            raise CheckTimeout(f"did not finish within {seconds:g}s") from None
        raise
    finally:
        conn.set_progress_handler(None, 0)


def _is_fts(name: str) -> bool:
    return name == FTS_TABLE or name in {f"{FTS_TABLE}_{suffix}" for suffix in FTS_SHADOW_SUFFIXES}


def quick_check(conn: sqlite3.Connection, seconds: float | None) -> list[str]:
    """``PRAGMA quick_check``'s problems (empty when sound); a check that cannot even run is one problem."""
    try:
        with deadline(conn, seconds):
            rows = conn.execute("PRAGMA quick_check(20)").fetchall()
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "interrupt" not in str(exc).lower():
            raise
        return [str(exc)]
    problems = [str(row[0]) for row in rows]
    return [] if problems == ["ok"] else problems


def damaged_tables(conn: sqlite3.Connection, seconds: float | None) -> list[str]:
    """The ordinary tables (not the full-text index) whose b-trees fail ``quick_check``."""
    damaged: list[str] = []
    with deadline(conn, seconds):
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'")
        names = [str(r[0]) for r in rows]
        for name in names:
            if _is_fts(name) or name.startswith("sqlite_"):
                continue
            try:
                result = conn.execute(f'PRAGMA quick_check("{name}")').fetchall()
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError) and "interrupt" in str(exc).lower():
                    raise
                damaged.append(name)
                continue
            if [str(r[0]) for r in result] != ["ok"]:
                damaged.append(name)
    return damaged


def has_fts(conn: sqlite3.Connection) -> bool:
    """True when the store has its full-text table (every migrated store does)."""
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (FTS_TABLE,)).fetchone()
    return row is not None


def fts_problem(conn: sqlite3.Connection, seconds: float | None) -> str | None:
    """FTS5's own ``integrity-check`` of the full-text index: the problem, or None when it is sound."""
    if not has_fts(conn):
        return None
    try:
        with deadline(conn, seconds):
            conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES('integrity-check', 1)")
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "interrupt" in str(exc).lower():
            raise
        return str(exc)
    return None


def fts_misaligned(conn: sqlite3.Connection, seconds: float | None) -> str | None:
    """A full-text row that is not under its memory's rowid, described; None when every row is (or the store's
    schema predates that rule).

    From schema 9 on, each memory's index row has the memory's own rowid, and search relies on it. SQLite keeps
    rowids through VACUUM, but a tool that copies rows one by one may renumber ``memories`` (its key is text), and
    search would then quietly return the wrong memories.
    """
    if not has_fts(conn):
        return None
    try:
        if current_version(conn) < FTS_ROWID_VERSION:
            return None
    except StoreError:  # tables without a migration record: not a file memmy migrated, nothing to compare
        return None
    with deadline(conn, seconds):
        row = conn.execute(
            f"SELECT f.rowid, f.id FROM {FTS_TABLE} f LEFT JOIN memories m ON m.rowid = f.rowid "
            "WHERE m.id IS NOT f.id LIMIT 1"
        ).fetchone()
    return None if row is None else f"full-text row {row[0]} is not under the rowid of its memory {row[1]}"


def realign_fts(conn: sqlite3.Connection, path: Path, seconds: float | None = STARTUP_CHECK_S) -> None:
    """What the daemon does after migrating: re-index when the full-text rows are not under their memories'
    rowids (with log lines; the file is sound, so nothing is backed up). A check that runs out of time is skipped."""
    try:
        problem = fts_misaligned(conn, seconds)
    except CheckTimeout:
        log.warning("%s: full-text rowid check skipped after %gs; `memmy-memory doctor` checks it fully", path, seconds)
        return
    if problem is None:
        return
    log.warning("%s: %s; re-indexing every memory", path, problem)
    rows = rebuild_fts(conn)
    log.warning("%s: full-text index rebuilt (%d memories indexed)", path, rows)


def _drop_fts(conn: sqlite3.Connection) -> None:
    """Drop the full-text table; when its pages are too damaged for SQLite to drop it, unlink it from the schema
    and VACUUM (which copies every other table into sound pages and leaves the damaged ones behind)."""
    try:
        conn.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
        return
    except sqlite3.DatabaseError as exc:
        log.warning("cannot drop the damaged full-text table normally (%s); removing it from the schema", exc)
    shadow = [FTS_TABLE, *(f"{FTS_TABLE}_{suffix}" for suffix in FTS_SHADOW_SUFFIXES)]
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute("PRAGMA writable_schema=ON")
    try:
        conn.execute(
            f"DELETE FROM sqlite_master WHERE name IN ({','.join('?' * len(shadow))})",
            shadow,
        )
        conn.execute(f"PRAGMA schema_version={version + 1}")
    finally:
        conn.execute("PRAGMA writable_schema=OFF")
    conn.execute("VACUUM")


def rebuild_fts(conn: sqlite3.Connection) -> int:
    """Rebuild the full-text index from the memories table (its source of truth); return the rows indexed.

    Works even when the index's pages are garbage: the table is dropped (or unlinked and VACUUMed away) and
    created again. Must run outside a transaction.
    """
    _drop_fts(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(MEMORIES_FTS_DDL)
        refill_fts(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return int(conn.execute(f"SELECT count(*) FROM {FTS_TABLE}").fetchone()[0])


def backup_damaged(path: Path) -> Path:
    """Copy the damaged file (and its WAL) to ``<db>.damaged-<time>.bak`` before repairing it in place."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.damaged-{stamp}.bak")
    shutil.copy2(path, target)
    os.chmod(target, 0o600)
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        shutil.copy2(wal, target.with_name(target.name + "-wal"))
    return target


def _damaged_message(path: Path, problems: list[str]) -> str:
    first = problems[0].splitlines()[-1] if problems else "unknown problem"
    return f"{path} is damaged (quick_check: {first})"


def startup_check(conn: sqlite3.Connection, path: Path, seconds: float | None = STARTUP_CHECK_S) -> None:
    """What the daemon does on open: refuse a damaged file, rebuild a damaged full-text index (with log lines).

    ``quick_check`` and the FTS check each get ``seconds``; a check that runs out of time is logged and skipped
    (the store is not known to be damaged, and start must not take minutes).
    """
    try:
        problems = quick_check(conn, seconds)
    except CheckTimeout:
        log.warning("%s: quick_check skipped after %gs; `memmy-memory doctor` checks it fully", path, seconds)
        problems = []
    fts_broken: str | None = None
    if problems:
        try:
            tables = damaged_tables(conn, seconds)
        except CheckTimeout:
            tables = ["(check did not finish)"]
        if tables:
            raise StoreError(
                f"{_damaged_message(path, problems)}: {_restore_hint(path)}; "
                "`memmy-memory doctor` explains, `sqlite3 FILE .recover` may save what is left"
            )
        try:
            fts_broken = fts_problem(conn, seconds)
        except CheckTimeout:
            fts_broken = problems[0].splitlines()[-1]
        if fts_broken is None:  # e.g. "Page N is never used": leaked pages, no table damaged
            log.warning("%s: quick_check: %s (no table is damaged); `memmy-memory doctor` explains", path, problems[0])
            return
    else:
        try:
            fts_broken = fts_problem(conn, seconds)
        except CheckTimeout:
            log.warning("%s: full-text index check skipped after %gs", path, seconds)
    if fts_broken is None:
        return
    rebuild_damaged_fts(conn, path, fts_broken)


def rebuild_damaged_fts(conn: sqlite3.Connection, path: Path, problem: str) -> str:
    """Back the damaged file up, rebuild the full-text index from the memories table, log both steps (at start
    and at run time alike); returns one line saying what was done."""
    backup = backup_damaged(path)
    log.warning(
        "%s: the full-text index is damaged (%s); rebuilding it from the memories table (copy of the damaged file: %s)",
        path,
        problem,
        backup,
    )
    rows = rebuild_fts(conn)
    log.warning("%s: full-text index rebuilt (%d memories indexed)", path, rows)
    return (
        f"the full-text index was damaged ({problem}) and has been rebuilt ({rows} memories indexed; "
        f"copy of the damaged file: {backup})"
    )


def repair_fts_at_run_time(conn: sqlite3.Connection, path: Path, seconds: float | None = STARTUP_CHECK_S) -> str | None:
    """What the daemon does when a request meets SQLITE_CORRUPT while it runs: when FTS5's ``integrity-check``
    finds the full-text index damaged, it is rebuilt as at start (:func:`rebuild_damaged_fts`); returns that line,
    or None when the index is sound or the check ran out of time (the damage is elsewhere: ``doctor`` names it).
    Must run outside a transaction."""
    try:
        problem = fts_problem(conn, seconds)
    except CheckTimeout:
        log.warning("%s: full-text index check skipped after %gs; `memmy-memory doctor` checks it", path, seconds)
        return None
    return None if problem is None else rebuild_damaged_fts(conn, path, problem)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def check_store(path: Path, *, seconds: float | None = None) -> list[Finding]:
    """Every store problem found on the file, offline (no daemon needed, nothing written); empty when sound."""
    if not path.exists():
        return [
            Finding(
                "missing",
                "info",
                f"{path} does not exist yet",
                "memmy-memory serve  # creates a new store on its first start",
            )
        ]
    finding = _file_finding(path)
    if finding is not None:
        return [finding]
    findings: list[Finding] = []
    conn = _connect(path)
    try:
        try:
            problems = quick_check(conn, seconds)
            tables = damaged_tables(conn, seconds) if problems else []
        except CheckTimeout as exc:
            return [Finding("check_incomplete", "warning", f"{path}: quick_check {exc}", "memmy-memory doctor")]
        if tables:
            findings.append(
                Finding(
                    "damaged",
                    "error",
                    f"{_damaged_message(path, problems)} in table(s) {', '.join(tables)}",
                    f"{_restore_hint(path)}, or salvage with `sqlite3 {path} .recover | sqlite3 {path}.recovered`",
                )
            )
        elif problems:
            try:
                problem = fts_problem(conn, seconds)
            except CheckTimeout:
                problem = problems[0].splitlines()[-1]
            if problem is not None:
                findings.append(_fts_finding(path, problem))
            else:
                findings.append(
                    Finding(
                        "unused_pages",
                        "warning",
                        f"{path}: quick_check: {problems[0].splitlines()[-1]} (no table is damaged)",
                        f"with the daemon stopped: sqlite3 {path} VACUUM",
                    )
                )
        else:
            try:
                problem = fts_problem(conn, seconds)
            except CheckTimeout as exc:
                problem = None
                findings.append(
                    Finding("check_incomplete", "warning", f"{path}: full-text check {exc}", "memmy-memory doctor")
                )
            if problem is not None:
                findings.append(_fts_finding(path, problem))
            else:
                findings.extend(_alignment_findings(conn, path, seconds))
    except sqlite3.DatabaseError as exc:
        findings.append(Finding("damaged", "error", f"{path} is damaged ({exc})", _restore_hint(path)))
    finally:
        conn.close()
    findings.extend(disk_findings(path))
    return findings


def _alignment_findings(conn: sqlite3.Connection, path: Path, seconds: float | None) -> list[Finding]:
    try:
        problem = fts_misaligned(conn, seconds)
    except CheckTimeout as exc:
        return [Finding("check_incomplete", "warning", f"{path}: full-text rowid check {exc}", "memmy-memory doctor")]
    if problem is None:
        return []
    return [
        Finding(
            "fts_misaligned",
            "error",
            f"{path}: {problem}; search returns the wrong memories until the index is rebuilt",
            "memmy-memory doctor --repair  # or restart the daemon: it re-indexes at start",
            repairable=True,
        )
    ]


def _fts_finding(path: Path, problem: str) -> Finding:
    return Finding(
        "fts_damaged",
        "error",
        f"{path}: the full-text index is damaged ({problem}); search and every write fail until it is rebuilt",
        "memmy-memory doctor --repair  # or restart the daemon: it rebuilds the index at start",
        repairable=True,
    )


def disk_findings(path: Path) -> list[Finding]:
    """Too little free space on the disk that holds the store."""
    try:
        stats = os.statvfs(path.parent)
    except OSError:
        return []
    free = stats.f_bavail * stats.f_frsize
    if free >= LOW_DISK_BYTES:
        return []
    return [
        Finding(
            "disk_low",
            "error" if free < 1024 * 1024 else "warning",
            f"only {free // 1024} KiB free on the disk holding {path}; writes fail when it is full",
            f"free some space on {path.parent} (or move the store: storage.sqlitePath in config.yaml)",
        )
    ]


def repair_store(path: Path, is_served: Callable[[], str | None]) -> list[str]:
    """Fix what can be fixed in place (the full-text index); return what was done, one line each.

    ``is_served`` says which daemon serves the file (then nothing is touched: restart that daemon instead).
    """
    findings = check_store(path)
    repairable = [f for f in findings if f.repairable]
    if not repairable:
        return []
    holder = is_served()
    if holder:
        raise StoreError(f"{path} is served by {holder}; stop it first (`memmy-memory service stop`) or restart it")
    conn = _connect(path)
    try:
        backup = backup_damaged(path)
        rows = rebuild_fts(conn)
    finally:
        conn.close()
    return [f"rebuilt the full-text index of {path} ({rows} memories indexed); the damaged file is kept at {backup}"]
