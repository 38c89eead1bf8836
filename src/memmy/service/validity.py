"""Validity time and forgetting that sticks: a memory's version chain, and the tombstone list/restore."""

from __future__ import annotations

import time
from typing import Any

from memmy.commands.answers import MemoryHistory, TombstoneList, TombstoneRestored
from memmy.commands.governance import ListTombstones, RestoreTombstone
from memmy.errors import InvalidArgument, NotFound
from memmy.namespace import Namespace
from memmy.recall.freshness import validity_payload
from memmy.store.db import utc_now
from memmy.store.unit import Store

MAX_CHAIN = 1000


class ValidityOps:
    """``GET /memory/<id>/history`` and ``/tombstones``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.memories = store.memories
        self.logs = store.logs
        self.tombstones = store.tombstones

    def history(self, memory_id: str) -> MemoryHistory:
        """The whole version chain of a memory, oldest -> newest, each with its validity interval."""
        if not isinstance(memory_id, str) or not memory_id.strip():
            raise InvalidArgument("id: expected a memory id")
        start = self.memories.get(memory_id, include_deleted=True)
        if start is None:
            raise NotFound(f"memory {memory_id} not found")
        chain = [start]
        seen = {start.id}
        while len(chain) < MAX_CHAIN:  # walk back: who was superseded by the oldest one we have?
            row = self.store.query_one("SELECT id FROM memories WHERE superseded_by = ? LIMIT 1", (chain[0].id,))
            older = self.memories.get(row["id"], include_deleted=True) if row else None
            if older is None or older.id in seen:
                break
            chain.insert(0, older)
            seen.add(older.id)
        while len(chain) < MAX_CHAIN and chain[-1].superseded_by:  # and forward
            newer = self.memories.get(chain[-1].superseded_by, include_deleted=True)
            if newer is None or newer.id in seen:
                break
            chain.append(newer)
            seen.add(newer.id)
        now = time.time()
        stamp = utc_now()
        items: list[dict[str, Any]] = []
        for number, memory in enumerate(chain, start=1):
            current = memory.status == "activated" and (memory.valid_to is None or memory.valid_to > stamp)
            items.append(
                {
                    "id": memory.id,
                    "position": number,
                    "content": memory.content,
                    "status": memory.status,
                    "current": current and memory.superseded_by is None,
                    "validFrom": memory.valid_from,
                    "validTo": memory.valid_to,
                    "supersededBy": memory.superseded_by,
                    "createdAt": memory.created_at,
                    "updatedAt": memory.updated_at,
                    "version": memory.version,
                    "validity": validity_payload(memory, now),
                }
            )
        current_id = next((i["id"] for i in reversed(items) if i["current"]), None)
        return {"id": memory_id, "currentId": current_id, "length": len(items), "chain": items, "serverTime": stamp}

    def list_tombstones(self, cmd: ListTombstones) -> TombstoneList:
        """Tombstones newest first (``limit`` / ``offset`` query parameters)."""
        found, total = self.tombstones.page(limit=cmd.limit, offset=cmd.offset)
        return {"tombstones": [t.to_json() for t in found], "total": total, "serverTime": utc_now()}

    def restore(self, tombstone_id: str, cmd: RestoreTombstone, ns: Namespace) -> TombstoneRestored:
        """Remove a tombstone: the value may be written again (a re-import brings it back)."""
        removed = self.tombstones.remove(tombstone_id)
        if removed is None:
            raise NotFound(f"tombstone {tombstone_id} not found")
        audit_id = self.logs.audit(
            "tombstone.restore",
            "tombstone",
            tombstone_id,
            user_id=ns.user_id,
            actor={"source": ns.source, "userId": ns.user_id},
            before=removed.to_json(),
            meta={"reason": cmd.reason},
        )
        return {"restored": True, "tombstone": removed.to_json(), "auditId": audit_id, "serverTime": utc_now()}
