"""Scheduled tasks: a one-off (``--at``) or cron-like (``--cron``) prompt the long-lived ``memmy serve`` runs as an
agent turn in a session of its own.

The schedules live in one SQLite file, ``$MEMMY_HOME/agent/schedules.db``, written by ``memmy schedule`` and read by
the server. A firing is *claimed* in one transaction before its turn starts: the one-off is marked fired, the cron
schedule's next time moves past now. A process killed after the claim never runs the firing a second time, and a
firing missed while no server ran is claimed once at the next start (a cron schedule that missed several runs once).
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from memmy.agent.smallfile import connect
from memmy.errors import ConfigError

SCHEMA = """
CREATE TABLE IF NOT EXISTS schedules (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    at REAL,
    cron TEXT,
    next_at REAL,
    created REAL NOT NULL,
    fired_at REAL,
    fired_count INTEGER NOT NULL DEFAULT 0,
    last_session TEXT NOT NULL DEFAULT ''
);
"""


@dataclass(frozen=True)
class Schedule:
    """One schedule: ``at`` (a one-off, epoch seconds) or ``cron`` (five fields); ``next_at`` is None once done."""

    id: str
    task: str
    at: float | None
    cron: str | None
    next_at: float | None
    created: float
    fired_at: float | None
    fired_count: int
    last_session: str

    @property
    def kind(self) -> str:
        """``once`` or ``cron``."""
        return "cron" if self.cron else "once"

    def to_json(self) -> dict[str, object]:
        """The schedule as the CLI's ``--json`` and the workbench show it."""
        return {
            "id": self.id,
            "task": self.task,
            "kind": self.kind,
            "at": self.at,
            "cron": self.cron,
            "next": self.next_at,
            "firedAt": self.fired_at,
            "fired": self.fired_count,
            "session": self.last_session,
        }


def next_cron(expression: str, after: float) -> float:
    """The first time after ``after`` (epoch seconds) that the cron ``expression`` names, in local time."""
    from croniter import croniter  # only where cron schedules are used

    start = datetime.fromtimestamp(after).astimezone()
    return float(croniter(expression, start).get_next(float))


def check_cron(expression: str) -> str:
    """The expression, normalised, or :class:`ConfigError` saying why it is not a cron expression."""
    from croniter import croniter

    expression = " ".join(expression.split())
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise ConfigError(f"--cron: {expression!r} is not a five-field cron expression such as '0 9 * * 1-5'")
    return expression


def parse_at(text: str, now: float | None = None) -> float:
    """``--at``: an ISO time (``2026-12-05T09:30``, local unless it names a zone), ``HH:MM`` (today, else
    tomorrow), or ``+N[smhd]`` from now."""
    now = time.time() if now is None else now
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text.startswith("+") and text[-1:] in units and text[1:-1].isdigit():
        return now + int(text[1:-1]) * units[text[-1]]
    try:
        if len(text) == 5 and text[2] == ":":
            hour, minute = int(text[:2]), int(text[3:])
            local = datetime.fromtimestamp(now).astimezone()
            when = local.replace(hour=hour, minute=minute, second=0, microsecond=0).timestamp()
            return when if when > now else when + 86400
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"--at: {text!r}: expected an ISO time, HH:MM or +N[smhd] ({exc})") from exc
    return (parsed if parsed.tzinfo else parsed.astimezone()).timestamp()


class ScheduleStore:
    """The schedules file; every method is one short transaction, safe for the CLI and the server at once."""

    def __init__(self, home: Path) -> None:
        self.path = home / "agent" / "schedules.db"

    def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return connect(self.path, SCHEMA)

    def add(self, task: str, at: float | None = None, cron: str | None = None) -> Schedule:
        """A new schedule (exactly one of ``at`` and ``cron``)."""
        if not task.strip():
            raise ConfigError("the task is empty")
        if (at is None) == (cron is None):
            raise ConfigError("give exactly one of --at and --cron")
        now = time.time()
        cron = check_cron(cron) if cron is not None else None
        next_at = at if at is not None else next_cron(cron or "", now)
        sid = secrets.token_hex(3)
        with self._db() as db:
            db.execute(
                "INSERT INTO schedules (id, task, at, cron, next_at, created) VALUES (?, ?, ?, ?, ?, ?)",
                (sid, task.strip(), at, cron, next_at, now),
            )
        found = self.get(sid)
        assert found is not None
        return found

    def get(self, sid: str) -> Schedule | None:
        """One schedule by id."""
        with self._db() as db:
            row = db.execute("SELECT * FROM schedules WHERE id = ?", (sid,)).fetchone()
        return Schedule(*row) if row else None

    def all(self) -> list[Schedule]:
        """Every schedule, the next to fire first, then the finished ones."""
        with self._db() as db:
            rows = db.execute("SELECT * FROM schedules ORDER BY next_at IS NULL, next_at, created").fetchall()
        return [Schedule(*row) for row in rows]

    def remove(self, sid: str) -> bool:
        """Delete a schedule; whether it existed."""
        with self._db() as db:
            return db.execute("DELETE FROM schedules WHERE id = ?", (sid,)).rowcount > 0

    def claim_due(self, now: float | None = None) -> list[Schedule]:
        """Claim every schedule due by ``now``: record the firing (a one-off is done, a cron one moves to its next
        time after now) in one transaction, and return the claimed schedules as they were before the claim."""
        now = time.time() if now is None else now
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                rows = db.execute(
                    "SELECT * FROM schedules WHERE next_at IS NOT NULL AND next_at <= ? ORDER BY next_at", (now,)
                ).fetchall()
                due = [Schedule(*row) for row in rows]
                for item in due:
                    following = next_cron(item.cron, now) if item.cron else None
                    db.execute(
                        "UPDATE schedules SET next_at = ?, fired_at = ?, fired_count = fired_count + 1 WHERE id = ?",
                        (following, now, item.id),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return due

    def ran_in(self, sid: str, session: str) -> None:
        """Record the session a firing runs in."""
        with self._db() as db:
            db.execute("UPDATE schedules SET last_session = ? WHERE id = ?", (session, sid))

    def next_due(self) -> float | None:
        """When the next schedule fires (None: nothing is scheduled)."""
        with self._db() as db:
            row = db.execute("SELECT MIN(next_at) FROM schedules").fetchone()
        return float(row[0]) if row and row[0] is not None else None
