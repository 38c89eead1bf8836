"""The people of a team server: a name and the SHA-256 of the token that person presents.

The token itself is shown once, by ``memmy-memory users add``, and never stored. A revoked person keeps the row
(``revoked_at`` set), so the audit log and the memories they wrote still name them; their token no longer matches.
Every lookup reads the table, so a revocation holds for the very next request, on every daemon of the database.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass

from memmy.errors import Conflict, NotFound
from memmy.store.db import Database, utc_now


def token_hash(token: str) -> str:
    """The stored form of a person's token (hex SHA-256; tokens are random, so no salt is needed)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Member:
    """One person of the team."""

    name: str
    created_at: str
    revoked_at: str | None


def _member(row: sqlite3.Row) -> Member:
    return Member(row["name"], row["created_at"], row["revoked_at"])


class TeamMembers:
    """Add, list, revoke and look up the team's people."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, name: str, token: str) -> Member:
        """Record ``name`` with the hash of ``token``; a name already taken (even revoked) is a conflict."""
        now = utc_now()
        with self.db.transaction() as conn:
            if conn.execute("SELECT 1 FROM team_members WHERE name = ?", (name,)).fetchone():
                raise Conflict(f"a person named {name!r} exists already (names stay taken after a revoke)")
            conn.execute(
                "INSERT INTO team_members(name, token_hash, created_at, revoked_at) VALUES (?, ?, ?, NULL)",
                (name, token_hash(token), now),
            )
        return Member(name, now, None)

    def members(self) -> list[Member]:
        """Everyone, revoked people included, by name."""
        rows = self.db.query("SELECT name, created_at, revoked_at FROM team_members ORDER BY name")
        return [_member(r) for r in rows]

    def revoke(self, name: str) -> Member:
        """Refuse ``name``'s token from now on (idempotent: revoking twice keeps the first time)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE team_members SET revoked_at = COALESCE(revoked_at, ?) WHERE name = ?", (utc_now(), name)
            )
            row = conn.execute("SELECT name, created_at, revoked_at FROM team_members WHERE name = ?", (name,))
            found = row.fetchone()
        if found is None:
            raise NotFound(f"no person named {name!r} (see memmy-memory users list)")
        return _member(found)

    def person_for(self, token: str) -> str | None:
        """The name of the person whose live token this is, else None."""
        row = self.db.query_one(
            "SELECT name FROM team_members WHERE token_hash = ? AND revoked_at IS NULL", (token_hash(token),)
        )
        return str(row["name"]) if row is not None else None

    def any(self) -> bool:
        """True when at least one person was ever added (the store serves a team)."""
        return self.db.query_one("SELECT 1 FROM team_members LIMIT 1") is not None
