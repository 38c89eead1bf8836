"""Episodes (one task inside a session) and the feedback recorded against them."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from memmy.domain import new_id
from memmy.store.db import Database, utc_now

#: ID-array columns of ``episodes`` that :meth:`EpisodeRepository.add_ids` may extend.
ID_COLUMNS = frozenset(
    {
        "l1_memory_ids_json",
        "raw_turn_ids_json",
        "feedback_ids_json",
        "decision_repair_ids_json",
        "l2_policy_ids_json",
        "l3_world_model_ids_json",
        "skill_memory_ids_json",
    }
)


@dataclass(frozen=True)
class EpisodeRecord:
    """One episodes row with its JSON columns parsed."""

    id: str
    session_id: str
    user_id: str | None
    project_id: str | None
    status: str
    title: str | None
    l1_memory_ids: list[str]
    raw_turn_ids: list[str]
    feedback_ids: list[str]
    decision_repair_ids: list[str]
    l2_policy_ids: list[str]
    l3_world_model_ids: list[str]
    skill_memory_ids: list[str]
    turn_count: int
    r_task: float | None
    reward_detail: dict[str, Any] | None
    pipeline_status: str
    meta: dict[str, Any]
    opened_at: str
    closed_at: str | None
    updated_at: str

    def to_json(self) -> dict[str, Any]:
        """Public shape (camelCase) for the API."""
        return {
            "id": self.id,
            "episodeId": self.id,
            "sessionId": self.session_id,
            "status": self.status,
            "title": self.title,
            "turnCount": self.turn_count,
            "rTask": self.r_task,
            "rewardDetail": self.reward_detail,
            "pipelineStatus": self.pipeline_status,
            "closeReason": self.meta.get("closeReason"),
            "traceMemoryIds": self.l1_memory_ids,
            "rawTurnIds": self.raw_turn_ids,
            "feedbackIds": self.feedback_ids,
            "decisionRepairIds": self.decision_repair_ids,
            "policyMemoryIds": self.l2_policy_ids,
            "worldModelMemoryIds": self.l3_world_model_ids,
            "skillMemoryIds": self.skill_memory_ids,
            "meta": self.meta,
            "openedAt": self.opened_at,
            "closedAt": self.closed_at,
            "updatedAt": self.updated_at,
        }


def _episode(row: sqlite3.Row) -> EpisodeRecord:
    return EpisodeRecord(
        id=row["id"],
        session_id=row["session_id"],
        user_id=row["user_id"],
        project_id=row["project_id"],
        status=row["status"],
        title=row["title"],
        l1_memory_ids=json.loads(row["l1_memory_ids_json"]),
        raw_turn_ids=json.loads(row["raw_turn_ids_json"]),
        feedback_ids=json.loads(row["feedback_ids_json"]),
        decision_repair_ids=json.loads(row["decision_repair_ids_json"]),
        l2_policy_ids=json.loads(row["l2_policy_ids_json"]),
        l3_world_model_ids=json.loads(row["l3_world_model_ids_json"]),
        skill_memory_ids=json.loads(row["skill_memory_ids_json"]),
        turn_count=int(row["turn_count"]),
        r_task=row["r_task"],
        reward_detail=json.loads(row["reward_detail_json"]) if row["reward_detail_json"] else None,
        pipeline_status=row["pipeline_status"],
        meta=json.loads(row["meta_json"] or "{}"),
        opened_at=row["opened_at"],
        closed_at=row["closed_at"],
        updated_at=row["updated_at"],
    )


#: The texts :meth:`EpisodeRepository.context_texts` reads: (column, order of the raw turns), the first match each.
TEXT_LOOKUPS = (("user_text", ""), ("user_text", " DESC"), ("assistant_text", " DESC"))


class EpisodeRepository:
    """CRUD for episodes; every method is one short statement or transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self, session_id: str, *, user_id: str | None, project_id: str | None, title: str, meta: dict[str, Any]
    ) -> str:
        """Open a new episode in a session and return its id (the row written as :meth:`Database.write_all`
        writes: on PostgreSQL, inside the caller's transaction, with its next statement)."""
        episode_id = new_id("episode")
        now = utc_now()
        meta_json = json.dumps(meta, ensure_ascii=False)
        insert = (
            "INSERT INTO episodes(id, session_id, user_id, project_id, status, title, meta_json, opened_at, "
            "updated_at) VALUES (?,?,?,?,'open',?,?,?,?)"
        )
        self.db.write_all([(insert, (episode_id, session_id, user_id, project_id, title[:200], meta_json, now, now))])
        return episode_id

    def get(self, episode_id: str) -> EpisodeRecord | None:
        """One episode."""
        row = self.db.query_one("SELECT * FROM episodes WHERE id = ?", (episode_id,))
        return _episode(row) if row is not None else None

    def latest_for_session(self, session_id: str) -> EpisodeRecord | None:
        """The session's current episode: the one opened last (worker writes to older episodes do not count)."""
        row = self.db.query_one(
            "SELECT * FROM episodes WHERE session_id = ? ORDER BY opened_at DESC, rowid DESC LIMIT 1", (session_id,)
        )
        return _episode(row) if row is not None else None

    def open_for_session(self, session_id: str) -> list[EpisodeRecord]:
        """Every non-closed episode of a session."""
        rows = self.db.query(
            "SELECT * FROM episodes WHERE session_id = ? AND status != 'closed' ORDER BY opened_at", (session_id,)
        )
        return [_episode(r) for r in rows]

    def idle_since(self, before: str, exclude: str | None = None, limit: int = 200) -> list[EpisodeRecord]:
        """Non-closed episodes whose last activity is older than ``before`` (idle close)."""
        rows = self.db.query(
            "SELECT * FROM episodes WHERE status != 'closed' AND updated_at < ? AND id != ? "
            "ORDER BY updated_at LIMIT ?",
            (before, exclude or "", limit),
        )
        return [_episode(r) for r in rows]

    def add_ids(self, episode_id: str, column: str, ids: list[str]) -> None:
        """Append ids (once each) to one of the ID-array columns."""
        if column not in ID_COLUMNS:
            raise ValueError(f"not an id column: {column}")
        with self.db.transaction() as conn:
            row = conn.execute(f"SELECT {column} FROM episodes WHERE id = ?", (episode_id,)).fetchone()
            if row is None:
                return
            current: list[str] = json.loads(row[0])
            added = [i for i in ids if i not in current]
            if not added:
                return
            # only turns are activity: the worker adding policy/skill/feedback ids must not reset the idle clock
            activity = column in ("raw_turn_ids_json", "l1_memory_ids_json")
            extra = ", turn_count = turn_count + ?" if column == "raw_turn_ids_json" else ""
            stamp = ", updated_at = ?" if activity else ""
            params: list[Any] = [json.dumps(current + added)]
            if activity:
                params.append(utc_now())
            if extra:
                params.append(len(added))
            # nothing read back: on PostgreSQL it goes with the transaction's next statement or its COMMIT
            self.db.write_all([(f"UPDATE episodes SET {column} = ?{stamp}{extra} WHERE id = ?", [*params, episode_id])])

    def touch(self, episode_id: str) -> None:
        """Mark activity on an episode."""
        self.db.write_all([("UPDATE episodes SET updated_at = ? WHERE id = ?", (utc_now(), episode_id))])

    def update_meta(self, episode_id: str, patch: dict[str, Any]) -> None:
        """Shallow-merge ``patch`` into the episode's meta."""
        with self.db.transaction() as conn:
            row = conn.execute("SELECT meta_json FROM episodes WHERE id = ?", (episode_id,)).fetchone()
            if row is None:
                return
            meta = json.loads(row[0] or "{}")
            meta.update(patch)
            update = "UPDATE episodes SET meta_json = ? WHERE id = ?"
            self.db.write_all([(update, (json.dumps(meta, ensure_ascii=False), episode_id))])

    def close(self, episode_id: str, reason: str) -> bool:
        """Close an open episode; False when it was already closed."""
        with self.db.transaction() as conn:
            changed = conn.execute(
                "UPDATE episodes SET status = 'closed', closed_at = ? WHERE id = ? AND status != 'closed'",
                (utc_now(), episode_id),
            ).rowcount
        if changed:
            self.update_meta(episode_id, {"closeReason": reason})
        return bool(changed)

    def reopen(self, episode_id: str) -> None:
        """Reopen a closed episode (a revision or a follow-up inside the merge window); its reward is redone."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE episodes SET status = 'open', closed_at = NULL, updated_at = ? WHERE id = ?",
                (utc_now(), episode_id),
            )
        self.update_meta(episode_id, {"rewardDirty": True, "closeReason": None})

    def set_reward(self, episode_id: str, r_task: float, detail: dict[str, Any]) -> None:
        """Store the task reward and how it was computed."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE episodes SET r_task = ?, reward_detail_json = ?, pipeline_status = 'succeeded' WHERE id = ?",
                (r_task, json.dumps(detail, ensure_ascii=False), episode_id),
            )
        self.update_meta(episode_id, {"rewardDirty": False})

    def set_pipeline(self, episode_id: str, status: str, error: str | None = None) -> None:
        """Record the evolution pipeline state of an episode."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE episodes SET pipeline_status = ?, pipeline_error = ? WHERE id = ?", (status, error, episode_id)
            )

    def raw_turns(self, episode_id: str) -> list[sqlite3.Row]:
        """The episode's raw turns, oldest first."""
        return self.db.query(
            "SELECT * FROM raw_turns WHERE episode_id = ? AND deleted_at IS NULL ORDER BY created_at, rowid",
            (episode_id,),
        )

    def context_texts(self, episode_id: str) -> tuple[str, str, str, str | None]:
        """(first user text, latest user text, latest answer, when its newest raw turn was written) of an episode:
        four indexed lookups, one statement."""
        base = (
            "(SELECT {col} FROM raw_turns WHERE episode_id = ? AND deleted_at IS NULL "
            "AND {col} IS NOT NULL AND {col} != '' ORDER BY created_at{order}, rowid{order} LIMIT 1)"
        )
        lookups = [base.format(col=col, order=order) for col, order in TEXT_LOOKUPS]
        lookups.append("(SELECT MAX(created_at) FROM raw_turns WHERE episode_id = ?)")
        row = self.db.query_one("SELECT " + ", ".join(lookups), (episode_id,) * len(lookups))
        if row is None:
            return "", "", "", None
        return row[0] or "", row[1] or "", row[2] or "", str(row[3]) if row[3] is not None else None

    def texts_before(self, episode_id: str, raw_turn_id: str) -> tuple[str, str, str]:
        """Like :meth:`context_texts`, but only from the turns before ``raw_turn_id`` (a re-check of a routing)."""
        rows = [r for r in self.raw_turns(episode_id)]
        cut = next((i for i, r in enumerate(rows) if r["id"] == raw_turn_id), len(rows))
        earlier = rows[:cut]
        first = next((r["user_text"] for r in earlier if r["user_text"]), "") or ""
        latest = next((r["user_text"] for r in reversed(earlier) if r["user_text"]), "") or ""
        answer = next((r["assistant_text"] for r in reversed(earlier) if r["assistant_text"]), "") or ""
        return first, latest, answer

    def move_turns(self, source: str, target: str, raw_turn_ids: list[str], l1_ids: list[str]) -> None:
        """Move raw turns and their traces from one episode to another (the id lists and the raw turn rows)."""
        with self.db.transaction() as conn:
            for column, ids in (("raw_turn_ids_json", raw_turn_ids), ("l1_memory_ids_json", l1_ids)):
                row = conn.execute(f"SELECT {column} FROM episodes WHERE id = ?", (source,)).fetchone()
                kept = [i for i in json.loads(row[0]) if i not in ids] if row is not None else []
                conn.execute(f"UPDATE episodes SET {column} = ? WHERE id = ?", (json.dumps(kept), source))
            conn.execute(
                "UPDATE episodes SET turn_count = MAX(0, turn_count - ?) WHERE id = ?", (len(raw_turn_ids), source)
            )
            conn.executemany("UPDATE raw_turns SET episode_id = ? WHERE id = ?", [(target, r) for r in raw_turn_ids])
        self.add_ids(target, "raw_turn_ids_json", raw_turn_ids)
        self.add_ids(target, "l1_memory_ids_json", l1_ids)

    def list_recent(self, limit: int = 50, status: str | None = None) -> list[EpisodeRecord]:
        """Newest episodes first."""
        if status:
            rows = self.db.query(
                "SELECT * FROM episodes WHERE status = ? ORDER BY updated_at DESC LIMIT ?", (status, limit)
            )
        else:
            rows = self.db.query("SELECT * FROM episodes ORDER BY updated_at DESC LIMIT ?", (limit,))
        return [_episode(r) for r in rows]

    def delete(self, episode_id: str) -> None:
        """Remove an episode row (its raw turns keep existing, detached)."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM episodes WHERE id = ?", (episode_id,))


@dataclass(frozen=True)
class FeedbackRecord:
    """One feedback row."""

    id: str
    episode_id: str | None
    l1_memory_id: str | None
    channel: str
    polarity: str
    magnitude: float
    rationale: str
    created_at: str

    def to_json(self) -> dict[str, Any]:
        """Public shape."""
        return {
            "id": self.id,
            "episodeId": self.episode_id,
            "memoryId": self.l1_memory_id,
            "channel": self.channel,
            "polarity": self.polarity,
            "magnitude": self.magnitude,
            "note": self.rationale,
            "createdAt": self.created_at,
        }


def _feedback(row: sqlite3.Row) -> FeedbackRecord:
    return FeedbackRecord(
        id=row["id"],
        episode_id=row["episode_id"],
        l1_memory_id=row["l1_memory_id"],
        channel=row["channel"],
        polarity=row["polarity"],
        magnitude=float(row["magnitude"]),
        rationale=row["rationale"] or "",
        created_at=row["created_at"],
    )


class FeedbackRepository:
    """Explicit (user said so) and implicit (inferred from the next message) feedback."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self,
        *,
        channel: str,
        polarity: str,
        magnitude: float,
        rationale: str,
        user_id: str | None,
        project_id: str | None = None,
        session_id: str | None = None,
        episode_id: str | None = None,
        l1_memory_id: str | None = None,
        raw_turn_id: str | None = None,
        context_hash: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> FeedbackRecord:
        """Insert one feedback row."""
        feedback_id = new_id("feedback")
        now = utc_now()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO feedback(id, user_id, project_id, session_id, episode_id, l1_memory_id, raw_turn_id, "
                "channel, polarity, magnitude, rationale, raw_payload_json, context_hash, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    feedback_id,
                    user_id,
                    project_id,
                    session_id,
                    episode_id,
                    l1_memory_id,
                    raw_turn_id,
                    channel,
                    polarity,
                    abs(magnitude),
                    rationale[:2000],
                    json.dumps(payload or {}, ensure_ascii=False, default=str),
                    context_hash,
                    now,
                ),
            )
        return FeedbackRecord(feedback_id, episode_id, l1_memory_id, channel, polarity, abs(magnitude), rationale, now)

    def for_episode(self, episode_id: str) -> list[FeedbackRecord]:
        """Feedback recorded against an episode, oldest first."""
        rows = self.db.query("SELECT * FROM feedback WHERE episode_id = ? ORDER BY created_at", (episode_id,))
        return [_feedback(r) for r in rows]

    def for_memory(self, memory_id: str) -> list[FeedbackRecord]:
        """Feedback recorded against one trace or policy."""
        rows = self.db.query("SELECT * FROM feedback WHERE l1_memory_id = ? ORDER BY created_at", (memory_id,))
        return [_feedback(r) for r in rows]
