"""Evolution bookkeeping: the L2 candidate pool, trace→policy links, decision repairs and skill trials."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memmy.domain import new_id
from memmy.kinds import trace
from memmy.store.db import Database, utc_now


def _djb2_base36(text: str) -> str:
    value = 5381
    for ch in text:
        value = ((value * 33) ^ ord(ch)) & 0xFFFFFFFF
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
        if value == 0:
            return out


def candidate_id(signature: str, trace_id: str) -> str:
    """``cand_<djb2(signature) base36>_<trace id sanitised, 24 chars>`` (stable: one row per trace+signature)."""
    return f"cand_{_djb2_base36(signature)}_{re.sub(r'[^A-Za-z0-9_]', '_', trace_id)[:24]}"


@dataclass(frozen=True)
class Candidate:
    """One pooled trace waiting to be induced into (or associated with) a policy."""

    id: str
    trace_id: str
    signature: str
    summary: str
    score: float
    status: str
    episode_id: str | None
    expires_at: str | None


def _candidate(row: sqlite3.Row) -> Candidate:
    evidence = json.loads(row["evidence_json"] or "{}")
    return Candidate(
        id=row["id"],
        trace_id=row["source_memory_id"],
        signature=row["candidate_key"],
        summary=row["candidate_value"] or "",
        score=float(row["score"] or 0.0),
        status=row["status"],
        episode_id=evidence.get("episodeId"),
        expires_at=row["expires_at"],
    )


class EvolutionRepository:
    """Rows that link traces to policies and record what evolution decided."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- candidate pool ---------------------------------------------------------------------------
    def add_candidate(
        self,
        trace_id: str,
        signature: str,
        summary: str,
        score: float,
        *,
        user_id: str | None,
        session_id: str | None,
        episode_id: str | None,
        ttl_days: float,
    ) -> str:
        """Pool a trace (idempotent: a rejected or promoted row keeps its status, so it is never re-promoted)."""
        cid = candidate_id(signature, trace_id)
        now = datetime.now(UTC)
        expires = (now + timedelta(days=ttl_days)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        stamp = utc_now()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO l2_candidate_pool(id, user_id, session_id, source_memory_id, candidate_key, "
                "candidate_value, score, status, evidence_json, created_at, updated_at, expires_at) "
                "VALUES (?,?,?,?,?,?,?,'pending',?,?,?,?) ON CONFLICT(id) DO UPDATE SET score = excluded.score, "
                "candidate_value = excluded.candidate_value, updated_at = excluded.updated_at, "
                "expires_at = CASE WHEN status = 'pending' THEN excluded.expires_at ELSE expires_at END",
                (
                    cid,
                    user_id,
                    session_id,
                    trace_id,
                    signature,
                    summary[:500],
                    score,
                    json.dumps({"episodeId": episode_id}),
                    stamp,
                    stamp,
                    expires,
                ),
            )
        return cid

    def pending(self, signature: str | None = None, limit: int = 2000) -> list[Candidate]:
        """Pending, unexpired candidates (optionally of one signature)."""
        now = utc_now()
        if signature is None:
            rows = self.db.query(
                "SELECT * FROM l2_candidate_pool WHERE status = 'pending' AND (expires_at IS NULL OR expires_at > ?) "
                "ORDER BY updated_at DESC LIMIT ?",
                (now, limit),
            )
        else:
            rows = self.db.query(
                "SELECT * FROM l2_candidate_pool WHERE status = 'pending' AND candidate_key = ? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY updated_at DESC LIMIT ?",
                (signature, now, limit),
            )
        return [_candidate(r) for r in rows]

    def mark(self, candidate_ids: list[str], status: str) -> None:
        """Set candidates to promoted or rejected (never back to pending)."""
        if not candidate_ids:
            return
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE l2_candidate_pool SET status = ?, updated_at = ? WHERE id = ? AND status != 'rejected'",
                [(status, utc_now(), cid) for cid in candidate_ids],
            )

    def reject_signature(self, signature: str) -> int:
        """Reject every pending candidate of a signature whose policy was archived."""
        with self.db.transaction() as conn:
            return conn.execute(
                "UPDATE l2_candidate_pool SET status = 'rejected', updated_at = ? WHERE candidate_key = ? "
                "AND status = 'pending'",
                (utc_now(), signature),
            ).rowcount

    def is_rejected(self, signature: str) -> bool:
        """True when a signature's candidates were rejected (its policy was archived)."""
        row = self.db.query_one(
            "SELECT 1 FROM l2_candidate_pool WHERE candidate_key = ? AND status = 'rejected' LIMIT 1", (signature,)
        )
        return row is not None

    def prune_expired(self) -> int:
        """Drop expired pending candidates (rejected rows stay: they are the memory of a rejection)."""
        with self.db.transaction() as conn:
            return conn.execute(
                "DELETE FROM l2_candidate_pool WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?",
                (utc_now(),),
            ).rowcount

    def pool_mean(self) -> float:
        """Mean score of the recent pool (the baseline for policy gain)."""
        row = self.db.query_one(
            "SELECT AVG(score) FROM (SELECT score FROM l2_candidate_pool ORDER BY updated_at DESC LIMIT 500)"
        )
        return float(row[0]) if row is not None and row[0] is not None else 0.0

    # -- trace -> policy links --------------------------------------------------------------------
    def link(self, trace_id: str, policy_id: str, relation: str, strength: float, user_id: str | None) -> None:
        """Record that a trace supports a policy (idempotent per relation)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO trace_policy_links(id, user_id, l1_memory_id, l2_memory_id, relation, strength, "
                "created_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT(l1_memory_id, l2_memory_id, relation) DO UPDATE SET "
                "strength = MAX(strength, excluded.strength)",
                (new_id("link"), user_id, trace_id, policy_id, relation, strength, utc_now()),
            )

    def traces_of(self, policy_id: str, limit: int = 200) -> list[str]:
        """Trace ids linked to a policy, the newest ``limit`` links (statistics follow recent evidence)."""
        rows = self.db.query(
            "SELECT l1_memory_id FROM trace_policy_links WHERE l2_memory_id = ? "
            "GROUP BY l1_memory_id ORDER BY MAX(created_at) DESC LIMIT ?",
            (policy_id, limit),
        )
        return [r[0] for r in rows]

    def trace_values(self, trace_ids: list[str]) -> dict[str, tuple[float, str | None]]:
        """Value and episode of live traces, in the order of ``trace_ids``, read straight from their JSON
        (statistics need nothing else)."""
        out: dict[str, tuple[float, str | None]] = {}
        for start in range(0, len(trace_ids), 500):
            chunk = trace_ids[start : start + 500]
            rows = self.db.query(
                f"SELECT id, json_extract(properties_json, '{trace.path(trace.VALUE)}'), "
                f"json_extract(properties_json, '{trace.path(trace.EPISODE_ID)}') FROM memories "
                f"WHERE id IN ({','.join('?' * len(chunk))}) AND status != 'deleted'",
                chunk,
            )
            out.update({r[0]: (float(r[1] or 0.0), r[2]) for r in rows})
        return {trace_id: out[trace_id] for trace_id in trace_ids if trace_id in out}

    def episode_trace_ids(self, episode_ids: list[str]) -> list[str]:
        """The trace ids of several episodes."""
        if not episode_ids:
            return []
        rows = self.db.query(
            f"SELECT l1_memory_ids_json FROM episodes WHERE id IN ({','.join('?' * len(episode_ids))})", episode_ids
        )
        return [trace_id for r in rows for trace_id in json.loads(r[0])]

    def support_of(self, policy_id: str) -> int:
        """Distinct episodes among all live traces linked to a policy (support is not capped)."""
        row = self.db.query_one(
            f"SELECT COUNT(DISTINCT json_extract(m.properties_json, '{trace.path(trace.EPISODE_ID)}')) "
            "FROM trace_policy_links l "
            "JOIN memories m ON m.id = l.l1_memory_id WHERE l.l2_memory_id = ? AND m.status != 'deleted'",
            (policy_id,),
        )
        return int(row[0]) if row is not None and row[0] is not None else 0

    def policies_of(self, trace_id: str) -> list[str]:
        """Policy ids a trace is linked to."""
        rows = self.db.query("SELECT DISTINCT l2_memory_id FROM trace_policy_links WHERE l1_memory_id = ?", (trace_id,))
        return [r[0] for r in rows]

    # -- decision repairs -------------------------------------------------------------------------
    def add_repair(self, fields: dict[str, Any]) -> str:
        """Insert a decision repair; ``fields`` uses column names (JSON columns as Python lists/dicts)."""
        repair_id = new_id("repair")
        row = dict(fields)
        for key in (
            "high_value_memory_ids_json",
            "low_value_memory_ids_json",
            "attached_policy_memory_ids_json",
            "source_json",
            "meta_json",
        ):
            if key in row and not isinstance(row[key], str):
                row[key] = json.dumps(row[key], ensure_ascii=False)
        row["id"], row["created_at"] = repair_id, utc_now()
        columns = list(row)
        with self.db.transaction() as conn:
            conn.execute(
                f"INSERT INTO decision_repairs({','.join(columns)}) VALUES ({','.join('?' * len(columns))})",
                [row[c] for c in columns],
            )
        return repair_id

    def last_repair_at(self, context_hash: str) -> str | None:
        """When the newest repair for a context was made (for the cooldown)."""
        row = self.db.query_one("SELECT MAX(created_at) FROM decision_repairs WHERE context_hash = ?", (context_hash,))
        return str(row[0]) if row is not None and row[0] is not None else None

    def repairs(self, episode_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Decision repairs, newest first."""
        if episode_id:
            rows = self.db.query(
                "SELECT * FROM decision_repairs WHERE episode_id = ? ORDER BY created_at DESC LIMIT ?",
                (episode_id, limit),
            )
        else:
            rows = self.db.query("SELECT * FROM decision_repairs ORDER BY created_at DESC LIMIT ?", (limit,))
        return [dict(r) for r in rows]

    # -- skill trials -----------------------------------------------------------------------------
    def add_trial(self, skill_id: str, episode_id: str, *, session_id: str | None, user_id: str | None) -> str:
        """A pending trial: the skill was injected into an episode whose outcome is not known yet."""
        existing = self.db.query_one(
            "SELECT id FROM skill_trials WHERE skill_memory_id = ? AND episode_id = ?", (skill_id, episode_id)
        )
        if existing is not None:
            return str(existing[0])
        trial_id = new_id("trial")
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO skill_trials(id, user_id, skill_memory_id, session_id, episode_id, status, outcome, "
                "created_at) VALUES (?,?,?,?,?,'pending','unknown',?)",
                (trial_id, user_id, skill_id, session_id, episode_id, utc_now()),
            )
        return trial_id

    def pending_trials(self, episode_id: str) -> list[tuple[str, str]]:
        """(trial id, skill id) of the episode's unresolved trials."""
        rows = self.db.query(
            "SELECT id, skill_memory_id FROM skill_trials WHERE episode_id = ? AND status = 'pending'", (episode_id,)
        )
        return [(r[0], r[1]) for r in rows]

    def resolve_trial(self, trial_id: str, status: str, outcome: str) -> None:
        """Close a trial as pass / fail / unknown."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE skill_trials SET status = ?, outcome = ?, resolved_at = ? WHERE id = ?",
                (status, outcome, utc_now(), trial_id),
            )

    def trial_counts(self, skill_id: str) -> tuple[int, int]:
        """(passes, resolved attempts) of a skill."""
        row = self.db.query_one(
            # COUNT(*) FILTER, not SUM(a comparison): PostgreSQL has no SUM over booleans
            "SELECT COUNT(*) FILTER (WHERE status = 'pass'), COUNT(*) FILTER (WHERE status IN ('pass','fail')) "
            "FROM skill_trials WHERE skill_memory_id = ?",
            (skill_id,),
        )
        if row is None:
            return 0, 0
        return int(row[0] or 0), int(row[1] or 0)
