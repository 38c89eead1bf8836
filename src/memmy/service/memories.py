"""Memory operations of the facade: add, get, delete, archive, search, list, processing."""

from __future__ import annotations

import time
from typing import Any, cast

from memmy.capture.sanitize import sanitize_text
from memmy.commands.answers import (
    CanaryPurged,
    Items,
    MemoryAdded,
    MemoryArchived,
    MemoryDeleted,
    MemoryDetail,
    MemoryRestored,
    ProcessingRetried,
)
from memmy.commands.memory import AddMemory, DeleteMemory, ProcessingStatus, PurgeCanary, RestoreMemory
from memmy.config import Configured, Settings
from memmy.domain import ID_PREFIX_BY_LAYER, KIND_BY_LAYER, Memory, content_hash, new_id, sha256_hex, summarise
from memmy.errors import Conflict, Forbidden, InvalidArgument, NotFound
from memmy.indexing import Indexer, embedding_text
from memmy.kinds import memory as stored
from memmy.kinds import trace
from memmy.namespace import Namespace
from memmy.recall.freshness import validity_payload
from memmy.store.db import utc_now
from memmy.store.sessions import raw_turn_dict
from memmy.store.text import FTS_DELETE
from memmy.store.tombstones import value_hash
from memmy.store.unit import Store

MAX_CONTENT_CHARS = 200_000


def memory_item(memory: Memory, processing: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``MemoryListItem`` shape."""
    item: dict[str, Any] = {
        "id": memory.id,
        "kind": memory.kind,
        "memoryLayer": memory.layer,
        "status": memory.status,
        "title": memory.title or memory.summary,
        "summary": memory.summary,
        "tags": memory.tags,
        "sourceAgent": memory.source_agent,
        "author": memory.user_id,  # who wrote it: a team server's person, else the local owner
        "visibility": memory.visibility,
        "projectId": memory.project_id,
        "sessionId": memory.session_id,
        "metrics": stored.metrics(memory),
        "createdAt": memory.created_at,
        "updatedAt": memory.updated_at,
        "validFrom": memory.valid_from,
        "validTo": memory.valid_to,
        "supersededBy": memory.superseded_by,
        "version": memory.version,
        "validity": validity_payload(memory),
    }
    if processing is not None:
        item["processing"] = processing
    return item



def visible_to(memory: Memory, ns: Namespace, *, write: bool = False) -> bool:
    """Whether the caller may read (``write``: change) ``memory``: everyone on a store without people; a team
    server's person their own memories, and reads of the team-scope memories of their team project."""
    return ns.may_read(memory.user_id, memory.visibility, memory.project_id, write=write)

class MemoryOps(Configured):
    """Add, read, delete and search memories."""

    def __init__(self, settings: Settings, store: Store, indexer: Indexer) -> None:
        self.settings = settings
        self.store = store
        self.memories = store.memories
        self.logs = store.logs
        self.queue = store.queue
        self.sessions = store.sessions
        self.indexer = indexer
        self.tombstones = store.tombstones

    # -- writes -----------------------------------------------------------------------------------
    def add(self, cmd: AddMemory, ns: Namespace) -> MemoryAdded:
        """Write one memory (L1 by default); identical content in the same layer is merged, not duplicated."""
        started = time.perf_counter()
        self._check_writable()
        content = sanitize_text(cmd.content, unwrap_request=False)
        if not content:
            raise InvalidArgument("content: nothing left after removing injected memmy context")
        layer = cmd.layer
        title = cmd.title.strip()[:300]
        tags = list(cmd.tags)
        ns = ns.with_body(cmd.source, cmd.workspace_path)
        created_at = cmd.created_at or utc_now()
        visibility = ns.visibility if cmd.visibility == "private" else cmd.visibility  # team project: shared
        defer = cmd.defer_processing
        digest = content_hash(content)
        adapter, request = cmd.adapter_id, cmd.request_id
        key = (
            f"memory.add:{adapter}:{request}"
            if adapter and request
            else f"manual:{sha256_hex(f'{layer}:{title}:{content}')[:20]}"
        )
        tombstone = self.tombstones.match(ns.user_id, value_hash(content), key)
        if tombstone is not None:
            return self._tombstoned_response(layer, tombstone.id)
        existing = self.memories.find_duplicate(ns.user_id, layer, digest)
        if existing is not None:
            return self._merge_duplicate(existing, title, tags, ns, started)
        deleted = self.memories.find_duplicate(ns.user_id, layer, digest, deleted=True)
        if deleted is not None:  # deleted, not forgotten: adding it again brings the same memory back
            self._revive(deleted, "added again", ns)
            return {**self._merge_duplicate(deleted, title, tags, ns, started), "restored": True}
        now = utc_now()
        memory = Memory(
            id=new_id(ID_PREFIX_BY_LAYER[layer]),
            layer=layer,
            content=content,
            title=title,
            tags=tags,
            user_id=ns.user_id,
            project_id=cmd.project_id or ns.project_id,
            source_agent=ns.source,
            session_id=cmd.session_id,
            turn_id=cmd.turn_id,
            memory_key=key,
            content_hash=digest,
            visibility=visibility,
            properties={"summary": summarise(title or content)},
            created_at=created_at,
            updated_at=now,
            valid_from=created_at,
        )
        with self.store.transaction():
            self.memories.insert(memory, source=ns.source)
            if defer:
                self.queue.set_state(memory.id, "ready_text_only")
            else:
                self.indexer.enqueue(memory.id, layer, embedding_text(layer, title, content, memory.properties))
        result = self._add_response(memory, deduplicated=False)
        self.logs.api_call(
            "memory_add",
            ns.source,
            {"layer": layer, "title": title, "chars": len(content)},
            {"id": memory.id},
            (time.perf_counter() - started) * 1000,
            True,
            ns.user_id,
        )
        return result

    def _merge_duplicate(
        self, existing: Memory, title: str, tags: list[str], ns: Namespace, started: float
    ) -> MemoryAdded:
        before = existing.snapshot()
        merged_tags = list(dict.fromkeys([*existing.tags, *tags]))
        changed = merged_tags != existing.tags or (title and not existing.title)
        if existing.status != "activated":
            existing.status = "activated"
            existing.deleted_at = None
            changed = True
        if changed:
            existing.tags = merged_tags
            existing.title = existing.title or title
            existing.version += 1
            existing.updated_at = utc_now()
            self.memories.update(existing, before, "merge", ns.source)
        self.logs.api_call(
            "memory_add",
            ns.source,
            {"layer": existing.layer, "duplicateOf": existing.id},
            {"id": existing.id, "deduplicated": True},
            (time.perf_counter() - started) * 1000,
            True,
            ns.user_id,
        )
        return self._add_response(existing, deduplicated=True)

    @staticmethod
    def _tombstoned_response(layer: str, tombstone_id: str) -> MemoryAdded:
        """memory/add of a forgotten value: nothing is written."""
        return {
            "id": None,
            "kind": KIND_BY_LAYER.get(layer, "trace"),
            "memoryLayer": layer,
            "status": "tombstoned",
            "title": "",
            "summary": f"not stored: this content was forgotten (tombstone {tombstone_id}); "
            f"`memmy-memory tombstones restore {tombstone_id}` allows it again",
            "tags": [],
            "deduplicated": False,
            "tombstoned": True,
            "tombstoneId": tombstone_id,
            "serverTime": utc_now(),
        }

    def _add_response(self, memory: Memory, *, deduplicated: bool) -> MemoryAdded:
        return {
            "id": memory.id,
            "kind": memory.kind,
            "memoryLayer": memory.layer,
            "status": memory.status,
            "title": memory.title,
            "summary": memory.summary,
            "tags": memory.tags,
            "projectId": memory.project_id,
            "sourceAgent": memory.source_agent,
            "deduplicated": deduplicated,
            "createdAt": memory.created_at,
            "serverTime": utc_now(),
        }

    def delete(self, memory_id: str, cmd: DeleteMemory, ns: Namespace) -> MemoryDeleted:
        """Delete (hide) a memory: status ``deleted``, out of FTS and vectors, audited, never recalled; undone by
        :meth:`restore`, and adding the same content again brings it back. No tombstone: that is :meth:`forget`."""
        self._check_writable()
        memory = self._require(memory_id, ns=ns, write=True)
        reason = cmd.reason or "user request"
        audit_id = self._hide(memory, reason, ns, tombstone_id=None)
        return self._deleted_answer(memory, audit_id, None)

    def forget(self, memory_id: str, reason: str, ns: Namespace) -> MemoryDeleted:
        """Forget a memory for good: hide it (if it is not already deleted) and write a tombstone (content hash +
        memory key), so no add, capture or re-import stores that value again until the tombstone is restored."""
        self._check_writable()
        memory = self._require(memory_id, include_deleted=True, ns=ns, write=True)
        with self.store.transaction():
            known = self.tombstones.match(memory.user_id, value_hash(memory.content), memory.memory_key)
            if known is not None:  # forgotten already: the same tombstone
                return self._deleted_answer(memory, self._hide(memory, reason, ns, tombstone_id=known.id), known.id)
            tombstone_id = self.tombstones.add(
                user_id=memory.user_id,
                content_hash=value_hash(memory.content),
                memory_key=memory.memory_key,
                memory_id=memory_id,
                layer=memory.layer,
                reason=reason,
                preview=summarise(memory.content, 140),
            )
            audit_id = self._hide(memory, reason, ns, tombstone_id=tombstone_id)
        return self._deleted_answer(memory, audit_id, tombstone_id)

    def restore(self, memory_id: str, cmd: RestoreMemory, ns: Namespace) -> MemoryRestored:
        """Undo a delete: the memory is active again, re-indexed and recalled; audited. A forgotten value (its
        tombstone still there) is refused: restore the tombstone first."""
        self._check_writable()
        memory = self._require(memory_id, include_deleted=True, ns=ns, write=True)
        if memory.status != "deleted":
            raise Conflict(f"memory {memory_id} is {memory.status}, not deleted: nothing to restore")
        tombstone = self.tombstones.match(memory.user_id, value_hash(memory.content), memory.memory_key)
        if tombstone is not None:
            raise Conflict(
                f"memory {memory_id} was forgotten (tombstone {tombstone.id}); "
                f"`memmy-memory tombstones restore {tombstone.id}` allows it again"
            )
        audit_id = self._revive(memory, cmd.reason or "user request", ns)
        return {
            "ok": True,
            "id": memory_id,
            "kind": memory.kind,
            "status": memory.status,
            "auditId": audit_id,
            "serverTime": utc_now(),
        }

    def purge_canary(self, cmd: PurgeCanary) -> CanaryPurged:
        """Remove, row by row, what a ``doctor --canary`` run wrote through an agent's hooks: its sessions (their
        episodes and raw turns go with them), the traces of those sessions with their full-text rows, vectors,
        queue and change log, their evolution jobs, recall events, API log and idempotency rows. Refused unless
        every turn and memory of those sessions holds the marker, so nothing else can be purged this way."""
        marks = ",".join("?" * len(cmd.session_ids))
        sessions = list(cmd.session_ids)
        turns = self.store.query(
            f"SELECT turn_id, user_text, assistant_text FROM raw_turns WHERE session_id IN ({marks})", sessions
        )
        memories = self.store.query(f"SELECT id, memory_value FROM memories WHERE session_id IN ({marks})", sessions)
        foreign = [t["turn_id"] for t in turns if cmd.marker not in f"{t['user_text']}\n{t['assistant_text']}"]
        foreign += [m["id"] for m in memories if cmd.marker not in (m["memory_value"] or "")]
        if foreign:
            raise Conflict(f"not a canary: {', '.join(foreign[:5])} in these sessions does not hold {cmd.marker}")
        memory_ids = [m["id"] for m in memories]
        turn_ids = [t["turn_id"] for t in turns]
        like = f"%{cmd.marker}%"
        with self.store.transaction() as conn:
            for memory_id in memory_ids:
                conn.execute(FTS_DELETE, (memory_id,))
                self.indexer.forget(memory_id)
                conn.execute("DELETE FROM memory_change_log WHERE memory_id = ?", (memory_id,))
                conn.execute("DELETE FROM evolution_jobs WHERE target_memory_id = ?", (memory_id,))
                conn.execute("DELETE FROM trace_policy_links WHERE l1_memory_id = ?", (memory_id,))
                conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            conn.execute(
                f"DELETE FROM evolution_jobs WHERE session_id IN ({marks}) OR episode_id IN "
                f"(SELECT id FROM episodes WHERE session_id IN ({marks}))",
                [*sessions, *sessions],
            )
            conn.execute(f"DELETE FROM recall_events WHERE session_id IN ({marks}) OR query LIKE ?", [*sessions, like])
            for table in ("l2_candidate_pool", "skill_trials"):
                conn.execute(f"DELETE FROM {table} WHERE session_id IN ({marks})", sessions)
            conn.execute("DELETE FROM api_logs WHERE input_json LIKE ? OR output_json LIKE ?", (like, like))
            for turn_id in turn_ids:
                conn.execute("DELETE FROM idempotency_keys WHERE key LIKE ?", (f"%{turn_id}%",))
            conn.execute(f"DELETE FROM sessions WHERE id IN ({marks})", sessions)
        return {"purged": True, "memories": len(memory_ids), "turns": len(turn_ids), "serverTime": utc_now()}

    def _check_writable(self) -> None:
        if not self.config.flags.enable_memory_add:
            raise Forbidden("memory writes are disabled (algorithm.enableMemoryAdd: false)")

    def _hide(self, memory: Memory, reason: str, ns: Namespace, *, tombstone_id: str | None) -> str | None:
        """Mark a memory deleted and drop it from every index; audited as ``memory.delete`` (None: it already was)."""
        if memory.status == "deleted":
            return None
        return self._set_status(memory, "deleted", ns, {"reason": reason, "tombstoneId": tombstone_id})

    def _revive(self, memory: Memory, reason: str, ns: Namespace) -> str:
        """A deleted memory active again: back in FTS (``update``) and queued for its vector; audited."""
        return self._set_status(memory, "activated", ns, {"reason": reason})

    def _set_status(self, memory: Memory, status: str, ns: Namespace, meta: dict[str, Any]) -> str:
        """Delete or bring back ``memory`` in one transaction: the row, its indexes and the audit row."""
        deleting = status == "deleted"
        before = memory.snapshot()
        now = utc_now()
        memory.status, memory.deleted_at, memory.updated_at = status, now if deleting else None, now
        memory.version += 1
        with self.store.transaction():
            self.memories.update(memory, before, "delete" if deleting else "restore", ns.source)
            if deleting:
                self.indexer.forget(memory.id)
            else:
                text = embedding_text(memory.layer, memory.title, memory.content, memory.properties)
                self.indexer.enqueue(memory.id, memory.layer, text)
            return self.logs.audit(
                "memory.delete" if deleting else "memory.restore",
                memory.kind,
                memory.id,
                user_id=ns.user_id,
                actor={"source": ns.source, "userId": ns.user_id},
                before=before,
                after=memory.snapshot(),
                meta=meta,
            )

    def _deleted_answer(self, memory: Memory, audit_id: str | None, tombstone_id: str | None) -> MemoryDeleted:
        seq = self.logs.latest_change_seq()
        answer: MemoryDeleted = {
            "ok": True,
            "id": memory.id,
            "kind": memory.kind,
            "status": "deleted",
            "restorable": tombstone_id is None,
            "changeSeq": seq,
            "syncCursor": f"seq:{seq}",
            "auditId": audit_id,
            "serverTime": utc_now(),
        }
        if tombstone_id is not None:
            answer["tombstoneId"] = tombstone_id
        return answer

    def archive(self, memory_id: str, ns: Namespace, reason: str | None = None) -> MemoryArchived:
        """Archive a memory: kept, but no longer recalled; audited."""
        self._check_writable()
        memory = self._require(memory_id, ns=ns, write=True)
        before = memory.snapshot()
        memory.status = "archived"
        memory.updated_at = utc_now()
        memory.version += 1
        with self.store.transaction():
            self.memories.update(memory, before, "archive", ns.source)
            self.indexer.unindex(memory_id)
            audit_id = self.logs.audit(
                "memory.archive",
                memory.kind,
                memory_id,
                user_id=ns.user_id,
                actor={"source": ns.source, "userId": ns.user_id},
                before=before,
                after=memory.snapshot(),
                meta={"reason": reason},
            )
        return {"ok": True, "id": memory_id, "status": "archived", "auditId": audit_id, "serverTime": utc_now()}

    # -- reads ------------------------------------------------------------------------------------
    def _require(
        self, memory_id: str, *, include_deleted: bool = False, ns: Namespace | None = None, write: bool = False
    ) -> Memory:
        """The memory, else NotFound; with a team server's person in ``ns``, only one they may read (``write``:
        one they wrote)."""
        if not isinstance(memory_id, str) or not memory_id.strip():
            raise InvalidArgument("id: expected a memory id")
        if memory_id.startswith("raw_"):
            raise InvalidArgument("raw turn ids are internal; use the trace memory id instead")
        memory = self.memories.get(memory_id, include_deleted=include_deleted)
        if memory is None or (ns is not None and not visible_to(memory, ns, write=write)):
            raise NotFound(f"memory {memory_id} not found")
        return memory

    def get(self, memory_id: str, *, include_deleted: bool = False, ns: Namespace | None = None) -> MemoryDetail:
        """Full detail of one memory, with its raw turn for traces (a deleted one only when asked: the panel)."""
        memory = self._require(memory_id, include_deleted=include_deleted, ns=ns)
        processing = self.queue.states([memory_id]).get(memory_id)
        detail = memory_item(memory, processing)
        detail.update(
            {
                "content": memory.content,
                "memoryKey": memory.memory_key,
                "turnId": memory.turn_id,
                "properties": memory.properties,
                "etag": f'W/"{memory.id}:{memory.version}"',
            }
        )
        refs: dict[str, Any] = {}
        raw_turn_id = trace.of(memory).raw_turn_id
        if raw_turn_id:
            row = self.sessions.get_raw_turn_by_id(raw_turn_id)
            if row is not None:
                refs["rawTurn"] = raw_turn_dict(row)
        detail["item"] = memory_item(memory, processing)
        detail["refs"] = refs
        detail["metadata"] = {"refs": refs}
        detail["history"] = self.logs.changes_for(memory_id)
        return cast(MemoryDetail, detail)

    def processing_status(self, cmd: ProcessingStatus) -> Items:
        """Processing records for up to 10,000 memory ids."""
        ids = list(cmd.memory_ids)
        states = self.queue.states(ids)
        return {"items": [states[i] for i in ids if i in states], "serverTime": utc_now()}

    def retry_processing(self, memory_id: str) -> ProcessingRetried:
        """Re-queue a memory whose embedding failed."""
        self._require(memory_id)
        state = self.queue.states([memory_id]).get(memory_id)
        if state is None or state["state"] != "failed":
            raise Conflict(f"memory {memory_id} is not in a failed processing state")
        self.queue.retry_failed(memory_id)
        return {"accepted": True, "processing": self.queue.states([memory_id]).get(memory_id), "serverTime": utc_now()}
