"""The associative key graph: keys (with aliases and stamped vectors), weighted key<->memory links,
explicit related_to links between memories, and the per-memory key state (namespace, TTL, depth, access).

Every read joins ``memories`` with the normal visibility rule, so deleted, archived, superseded and expired
memories never show through a key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memmy.domain import TEAM_KEYS_PREFIX, new_id
from memmy.store.db import Database, utc_now
from memmy.store.memories import VISIBLE

KEY_TYPES = ("concept", "name", "proper_noun")


@dataclass(frozen=True)
class KeyRow:
    """One key cluster: its canonical surface, type and every alias (canonical first)."""

    id: str
    user_id: str
    canonical: str
    key_type: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeyState:
    """Key-graph bookkeeping of one memory."""

    memory_id: str
    namespace: str
    ttl_seconds: float | None
    expires_at: str | None
    depth: float
    access_count: int
    last_accessed_at: str | None
    source: dict[str, Any]
    created_at: str


def _state(row: Any) -> KeyState:
    return KeyState(
        memory_id=row["memory_id"],
        namespace=row["namespace"],
        ttl_seconds=row["ttl_seconds"],
        expires_at=row["expires_at"],
        depth=float(row["depth"]),
        access_count=int(row["access_count"]),
        last_accessed_at=row["last_accessed_at"],
        source=json.loads(row["source_json"] or "{}"),
        created_at=row["created_at"],
    )


def _owned(user_id: str) -> tuple[str, str]:
    """The memories of a key-graph owner (on alias ``m``) and its one parameter: a person's or the owner's own
    memories, or for a team project's graph (``team:<project>``) the team memories of that project."""
    if user_id.startswith(TEAM_KEYS_PREFIX):
        return "m.visibility = 'team' AND m.project_id = ?", user_id[len(TEAM_KEYS_PREFIX) :]
    return "m.user_id = ?", user_id


def _in(values: Sequence[str]) -> str:
    return ",".join("?" * len(values))


class KeyRepository:
    """Keys, aliases, key vectors, links, relations and key state behind one repository."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- keys and aliases ---------------------------------------------------------------------------
    def find_surface(self, user_id: str, norm: str) -> str | None:
        """The key id that owns this normalised surface form (canonical or alias), if any."""
        row = self.db.query_one("SELECT key_id FROM memory_key_aliases WHERE user_id = ? AND norm = ?", (user_id, norm))
        return str(row["key_id"]) if row else None

    def find_surfaces(self, user_id: str, norms: Sequence[str]) -> dict[str, tuple[str, str]]:
        """norm -> (key id, origin) for every given surface that exists."""
        if not norms:
            return {}
        rows = self.db.query(
            f"SELECT norm, key_id, origin FROM memory_key_aliases WHERE user_id = ? AND norm IN ({_in(norms)})",
            [user_id, *norms],
        )
        return {r["norm"]: (r["key_id"], r["origin"]) for r in rows}

    def create_key(self, user_id: str, canonical: str, norm: str, key_type: str) -> str:
        """Create a key cluster with its canonical surface; returns the key id."""
        key_id = new_id("key")
        now = utc_now()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO memory_keys(id, user_id, canonical, key_type, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?)",
                (key_id, user_id, canonical, key_type, now, now),
            )
            conn.execute(
                "INSERT INTO memory_key_aliases(key_id, user_id, alias, norm, origin, similarity, created_at) "
                "VALUES (?,?,?,?,'canonical',NULL,?)",
                (key_id, user_id, canonical, norm, now),
            )
        return key_id

    def add_alias(
        self, key_id: str, user_id: str, alias: str, norm: str, origin: str, similarity: float | None = None
    ) -> bool:
        """Attach a surface form to a key; False when the surface already belongs to a key."""
        with self.db.transaction() as conn:
            taken = conn.execute(
                "SELECT 1 FROM memory_key_aliases WHERE user_id = ? AND norm = ?", (user_id, norm)
            ).fetchone()
            if taken:
                return False
            conn.execute(
                "INSERT INTO memory_key_aliases(key_id, user_id, alias, norm, origin, similarity, created_at) "
                "VALUES (?,?,?,?,?,?,?)",
                (key_id, user_id, alias, norm, origin, similarity, utc_now()),
            )
            conn.execute("UPDATE memory_keys SET updated_at = ? WHERE id = ?", (utc_now(), key_id))
        return True

    def keys(self, key_ids: Sequence[str]) -> dict[str, KeyRow]:
        """Key rows (with aliases, canonical first) by id."""
        if not key_ids:
            return {}
        ids = list(dict.fromkeys(key_ids))
        rows = self.db.query(f"SELECT id, user_id, canonical, key_type FROM memory_keys WHERE id IN ({_in(ids)})", ids)
        aliases: dict[str, list[str]] = {}
        for row in self.db.query(
            f"SELECT key_id, alias, origin FROM memory_key_aliases WHERE key_id IN ({_in(ids)}) "
            "ORDER BY origin != 'canonical', created_at, rowid",
            ids,
        ):
            aliases.setdefault(row["key_id"], []).append(row["alias"])
        return {
            r["id"]: KeyRow(r["id"], r["user_id"], r["canonical"], r["key_type"], tuple(aliases.get(r["id"], [])))
            for r in rows
        }

    def key(self, key_id: str) -> KeyRow | None:
        """One key row, or None."""
        return self.keys([key_id]).get(key_id)

    def key_count(self, user_id: str) -> int:
        """How many key clusters a user has."""
        row = self.db.query_one("SELECT COUNT(*) FROM memory_keys WHERE user_id = ?", (user_id,))
        return int(row[0]) if row else 0

    def alias_count(self, user_id: str) -> int:
        """Non-canonical surface forms of a user's keys."""
        row = self.db.query_one(
            "SELECT COUNT(*) FROM memory_key_aliases WHERE user_id = ? AND origin != 'canonical'", (user_id,)
        )
        return int(row[0]) if row else 0

    # -- key vectors --------------------------------------------------------------------------------
    def upsert_vector(self, key_id: str, norm: str, provider: str, model: str, vector: NDArray[np.float32]) -> None:
        """Store the vector of one surface form of a key, stamped with its fingerprint."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO memory_key_vectors(key_id, norm, embedding_provider, embedding_model, embedding_dim, "
                "embedding, updated_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT(key_id, norm) DO UPDATE SET "
                "embedding_provider=excluded.embedding_provider, embedding_model=excluded.embedding_model, "
                "embedding_dim=excluded.embedding_dim, embedding=excluded.embedding, updated_at=excluded.updated_at",
                (key_id, norm, provider, model, int(vector.shape[0]), np.asarray(vector, "<f4").tobytes(), utc_now()),
            )

    def iter_vectors(
        self, provider: str, model: str, dim: int
    ) -> Iterable[tuple[str, str, str, str, NDArray[np.float32]]]:
        """(key id, surface norm, user id, key type, vector) of every surface stamped with this fingerprint."""
        rows = self.db.query(
            "SELECT v.key_id, v.norm, k.user_id, k.key_type, v.embedding FROM memory_key_vectors v "
            "JOIN memory_keys k ON k.id = v.key_id "
            "JOIN memory_key_aliases a ON a.key_id = v.key_id AND a.norm = v.norm "
            "WHERE v.embedding_provider = ? AND v.embedding_model = ? AND v.embedding_dim = ?",
            (provider, model, dim),
        )
        for row in rows:
            vector = np.frombuffer(row["embedding"], dtype="<f4", count=dim).astype(np.float32)
            yield row["key_id"], row["norm"], row["user_id"], row["key_type"], vector

    def surfaces_to_embed(self, provider: str, model: str, dim: int, limit: int) -> list[tuple[str, str, str]]:
        """(key id, norm, surface text) of surfaces with no vector of this fingerprint (new or model changed)."""
        rows = self.db.query(
            "SELECT a.key_id, a.norm, a.alias FROM memory_key_aliases a LEFT JOIN memory_key_vectors v "
            "ON v.key_id = a.key_id AND v.norm = a.norm AND v.embedding_provider = ? AND v.embedding_model = ? "
            "AND v.embedding_dim = ? WHERE v.key_id IS NULL LIMIT ?",
            (provider, model, dim, limit),
        )
        return [(r["key_id"], r["norm"], r["alias"]) for r in rows]

    # -- links --------------------------------------------------------------------------------------
    def link(self, key_id: str, memory_id: str, weight: float = 1.0) -> bool:
        """Link a key to a memory (kept as is when the link exists); True when it is new."""
        now = utc_now()
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO memory_key_links(key_id, memory_id, weight, created_at, updated_at) "
                "VALUES (?,?,?,?,?)",
                (key_id, memory_id, weight, now, now),
            )
            return cursor.rowcount > 0

    def weight(self, key_id: str, memory_id: str) -> float | None:
        """The weight of one link, or None when the key does not point at the memory."""
        row = self.db.query_one(
            "SELECT weight FROM memory_key_links WHERE key_id = ? AND memory_id = ?", (key_id, memory_id)
        )
        return float(row["weight"]) if row else None

    def set_weight(self, key_id: str, memory_id: str, weight: float) -> None:
        """Write the weight of one existing link (only that edge changes)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE memory_key_links SET weight = ?, updated_at = ? WHERE key_id = ? AND memory_id = ?",
                (weight, utc_now(), key_id, memory_id),
            )

    def links_of_memory(self, memory_id: str) -> list[tuple[str, float]]:
        """(key id, weight) of every key linked to a memory, strongest first."""
        rows = self.db.query(
            "SELECT key_id, weight FROM memory_key_links WHERE memory_id = ? ORDER BY weight DESC, created_at",
            (memory_id,),
        )
        return [(r["key_id"], float(r["weight"])) for r in rows]

    def links_of_memories(self, memory_ids: Sequence[str]) -> dict[str, list[str]]:
        """memory id -> its key ids."""
        if not memory_ids:
            return {}
        found: dict[str, list[str]] = {}
        for row in self.db.query(
            f"SELECT memory_id, key_id FROM memory_key_links WHERE memory_id IN ({_in(memory_ids)})", list(memory_ids)
        ):
            found.setdefault(row["memory_id"], []).append(row["key_id"])
        return found

    def memories_of_key(self, key_id: str, user_id: str, namespace: str | None) -> list[tuple[str, float, KeyState]]:
        """(memory id, link weight, state) of the visible memories a key points at."""
        where, params = self._visible(user_id, namespace)
        rows = self.db.query(
            "SELECT l.memory_id AS memory_id, l.weight AS weight, s.* FROM memory_key_links l "
            "JOIN memories m ON m.id = l.memory_id JOIN memory_key_state s ON s.memory_id = l.memory_id "
            f"WHERE l.key_id = ? AND {where}",
            [key_id, *params],
        )
        return [(r["memory_id"], float(r["weight"]), _state(r)) for r in rows]

    def memory_counts(
        self, user_id: str, namespace: str | None, key_ids: Sequence[str] | None = None
    ) -> dict[str, int]:
        """key id -> number of visible memories it points at (only keys with at least one)."""
        where, params = self._visible(user_id, namespace)
        sql = (
            "SELECT l.key_id AS key_id, COUNT(*) AS n FROM memory_key_links l JOIN memories m ON m.id = l.memory_id "
            f"JOIN memory_key_state s ON s.memory_id = l.memory_id WHERE {where}"
        )
        if key_ids is not None:
            if not key_ids:
                return {}
            sql += f" AND l.key_id IN ({_in(key_ids)})"
            params.extend(key_ids)
        rows = self.db.query(sql + " GROUP BY l.key_id", params)
        return {r["key_id"]: int(r["n"]) for r in rows}

    def link_count(self, user_id: str) -> int:
        """Links that point at visible memories."""
        where, params = self._visible(user_id, None)
        row = self.db.query_one(
            f"SELECT COUNT(*) FROM memory_key_links l JOIN memories m ON m.id = l.memory_id WHERE {where}", params
        )
        return int(row[0]) if row else 0

    @staticmethod
    def _visible(user_id: str, namespace: str | None) -> tuple[str, list[Any]]:
        owned, owner = _owned(user_id)
        where = f"{VISIBLE} AND {owned}"
        params: list[Any] = [utc_now(), owner]
        if namespace is not None:
            where += " AND s.namespace = ?"
            params.append(namespace)
        return where, params

    # -- related_to ---------------------------------------------------------------------------------
    def relate(self, from_id: str, to_id: str, relation: str = "related_to") -> None:
        """An explicit link between two memories (stored once, read both ways)."""
        if from_id == to_id:
            return
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO memory_relations(from_id, to_id, relation, created_at) VALUES (?,?,?,?)",
                (from_id, to_id, relation, utc_now()),
            )

    def related_ids(self, memory_id: str) -> list[tuple[str, str]]:
        """(other memory id, relation) of every explicit link touching a memory, both directions."""
        rows = self.db.query(
            "SELECT to_id AS other, relation FROM memory_relations WHERE from_id = ? "
            "UNION SELECT from_id AS other, relation FROM memory_relations WHERE to_id = ?",
            (memory_id, memory_id),
        )
        return [(r["other"], r["relation"]) for r in rows]

    def relation_count(self) -> int:
        """Explicit related_to links."""
        row = self.db.query_one("SELECT COUNT(*) FROM memory_relations WHERE relation = 'related_to'")
        return int(row[0]) if row else 0

    # -- key state ----------------------------------------------------------------------------------
    def put_state(
        self,
        memory_id: str,
        namespace: str,
        ttl_seconds: float | None,
        expires_at: str | None,
        source: dict[str, Any],
    ) -> None:
        """Create (or keep) the key state of a memory."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO memory_key_state(memory_id, namespace, ttl_seconds, expires_at, source_json, "
                "created_at) VALUES (?,?,?,?,?,?)",
                (memory_id, namespace, ttl_seconds, expires_at, json.dumps(source, ensure_ascii=False), utc_now()),
            )

    def duplicates_in_namespace(self, user_id: str, layer: str, digest: str, namespace: str) -> list[str]:
        """Live memories with this content a write into ``namespace`` may merge into: those already in that
        namespace first, then ones in no namespace yet (plain ``memory/add``); never one of another namespace."""
        rows = self.db.query(
            "SELECT m.id FROM memories m LEFT JOIN memory_key_state s ON s.memory_id = m.id "
            f"WHERE {_owned(user_id)[0]} AND m.memory_layer = ? AND m.content_hash = ? AND m.status != 'deleted' "
            "AND (s.namespace = ? OR s.memory_id IS NULL) ORDER BY s.memory_id IS NULL, m.created_at",
            (_owned(user_id)[1], layer, digest, namespace),
        )
        return [str(r["id"]) for r in rows]

    def state(self, memory_id: str) -> KeyState | None:
        """The key state of one memory."""
        row = self.db.query_one("SELECT * FROM memory_key_state WHERE memory_id = ?", (memory_id,))
        return _state(row) if row else None

    def states(self, memory_ids: Sequence[str]) -> dict[str, KeyState]:
        """Key states by memory id."""
        if not memory_ids:
            return {}
        rows = self.db.query(f"SELECT * FROM memory_key_state WHERE memory_id IN ({_in(memory_ids)})", list(memory_ids))
        return {r["memory_id"]: _state(r) for r in rows}

    def record_access(self, memory_id: str) -> None:
        """A full read: access count + 1 (depth and confirmation are untouched)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE memory_key_state SET access_count = access_count + 1, last_accessed_at = ? WHERE memory_id = ?",
                (utc_now(), memory_id),
            )

    def set_depth(self, memory_id: str, depth: float) -> None:
        """Write the depth of a memory (confirmation only)."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE memory_key_state SET depth = ? WHERE memory_id = ?", (depth, memory_id))

    def visible_memory_ids(self, user_id: str, namespace: str | None) -> list[str]:
        """Visible key-graph memories, newest first."""
        where, params = self._visible(user_id, namespace)
        rows = self.db.query(
            "SELECT m.id FROM memories m JOIN memory_key_state s ON s.memory_id = m.id "
            f"WHERE {where} ORDER BY m.created_at DESC, m.id",
            params,
        )
        return [r["id"] for r in rows]

    def namespace_counts(self, user_id: str) -> dict[str, int]:
        """Visible key-graph memories per namespace."""
        where, params = self._visible(user_id, None)
        rows = self.db.query(
            "SELECT s.namespace AS ns, COUNT(*) AS n FROM memories m JOIN memory_key_state s ON s.memory_id = m.id "
            f"WHERE {where} GROUP BY s.namespace",
            params,
        )
        return {r["ns"]: int(r["n"]) for r in rows}

    def expired_ids(self, user_id: str, now: str) -> list[str]:
        """Live key-graph memories whose TTL has passed (superseded versions are history, not expiry)."""
        rows = self.db.query(
            f"SELECT m.id FROM memories m JOIN memory_key_state s ON s.memory_id = m.id WHERE {_owned(user_id)[0]} "
            "AND m.status != 'deleted' AND m.superseded_by IS NULL AND s.expires_at IS NOT NULL AND s.expires_at <= ?",
            (_owned(user_id)[1], now),
        )
        return [r["id"] for r in rows]

    # -- learned aliases ----------------------------------------------------------------------------
    def note_query(self, key_id: str, norm: str, query: str) -> None:
        """``read_key(key, query)``: remember the query as a pending alias candidate of the key."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO key_alias_candidates(key_id, norm, query, hits, seen_at) VALUES (?,?,?,0,?) "
                "ON CONFLICT(key_id, norm) DO UPDATE SET seen_at = excluded.seen_at",
                (key_id, norm, query, utc_now()),
            )

    def confirm_route(self, key_id: str, since: str) -> tuple[str, str, int] | None:
        """A full read through ``key_id``: count a routing confirmation for its latest pending query."""
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT norm, query, hits FROM key_alias_candidates WHERE key_id = ? AND seen_at >= ? "
                "ORDER BY seen_at DESC LIMIT 1",
                (key_id, since),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE key_alias_candidates SET hits = hits + 1 WHERE key_id = ? AND norm = ?", (key_id, row["norm"])
            )
            return row["norm"], row["query"], int(row["hits"]) + 1

    def drop_candidates(self, key_id: str, norm: str | None = None) -> int:
        """Cancel pending alias learning for a key (or one of its candidates)."""
        with self.db.transaction() as conn:
            if norm is None:
                cursor = conn.execute("DELETE FROM key_alias_candidates WHERE key_id = ?", (key_id,))
            else:
                cursor = conn.execute("DELETE FROM key_alias_candidates WHERE key_id = ? AND norm = ?", (key_id, norm))
            return int(cursor.rowcount)
