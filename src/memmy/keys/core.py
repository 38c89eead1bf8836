"""Shared machinery of the key-graph operations: lookups, views, ranking of a key's memories."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from memmy.commands.answers import KeyLink, KeyView, MemoryDeleted
from memmy.config import Configured, Settings
from memmy.domain import Memory
from memmy.errors import InvalidArgument, NotFound
from memmy.indexing import Indexer
from memmy.keys.args import KeyThresholds, thresholds_for
from memmy.kinds import memory as stored
from memmy.namespace import Namespace
from memmy.recall.freshness import memory_freshness, validity_payload
from memmy.recall.query import prepare_query
from memmy.store.db import utc_now
from memmy.store.keys import KeyRepository, KeyRow, KeyState
from memmy.store.memories import MemoryFilter
from memmy.store.unit import Store
from memmy.store.vectors import Vector

HUB_MIN_LINKS = 3
MIN_WEIGHT = 0.1
MAX_WEIGHT = 3.0
HEBBIAN_STEP = 0.1
PREVIEW_CHARS = 2000


def specificity(memory_count: int) -> float:
    """1.0 for a key of one memory, falling as a key becomes a broad hub."""
    return round(1.0 / (1.0 + math.log(max(1, memory_count))), 4)


def memory_view(memory: Memory, state: KeyState | None, now: float) -> dict[str, Any]:
    """Metadata every key-graph view of a memory carries (no content)."""
    return {
        "id": memory.id,
        "memory_id": memory.id,
        "namespace": state.namespace if state else None,
        "depth": round(state.depth, 4) if state else 0.0,
        "access_count": state.access_count if state else 0,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "valid_from": memory.valid_from,
        "valid_to": memory.valid_to,
        "expires_at": state.expires_at if state else None,
        "superseded_by": memory.superseded_by,
        "supersedes": stored.supersedes(memory.properties),
        "layer": memory.layer,
        "source_agent": memory.source_agent,
        "project_id": memory.project_id,
        "validity": validity_payload(memory, now),
    }


@dataclass
class RankedMemory:
    """One memory under one key, with the parts of its rank score."""

    memory: Memory
    state: KeyState
    weight: float
    content_relevance: float | None
    score: float


#: Soft-deletes one memory for ``forget`` (``(memory_id, reason, ns) -> {"tombstoneId": ...}``); the service
#: passes its own delete so the key graph shares the audited path without importing the service layer.
ForgetMemory = Callable[[str, str, Namespace], MemoryDeleted]



class KeyCore(Configured):
    """State and helpers shared by the key-graph reads and writes."""

    def __init__(self, settings: Settings, store: Store, indexer: Indexer, forget_memory: ForgetMemory) -> None:
        self.settings = settings
        self.store = store
        self.memories = store.memories
        self.logs = store.logs
        self.indexer = indexer
        self.forget_memory = forget_memory
        self.keys: KeyRepository = indexer.keys
        self.tombstones = store.tombstones
        self._thresholds: tuple[str, KeyThresholds] | None = None

    # -- thresholds -------------------------------------------------------------------------------
    @property
    def thresholds(self) -> KeyThresholds:
        """The calibrated gates of the current embedding model (recomputed when the model changes)."""
        try:
            fingerprint = self.indexer.embedder.fingerprint
        except Exception:  # noqa: BLE001 - no backend: exact matching only, the default profile
            fingerprint = None
        tag = fingerprint.key() if fingerprint else ""
        if self._thresholds is None or self._thresholds[0] != tag:
            self._thresholds = (tag, thresholds_for(fingerprint))
        return self._thresholds[1]

    # -- lookups ----------------------------------------------------------------------------------
    def require_memory(
        self, memory_id: Any, name: str = "memory_id", *, ns: Namespace, visible: bool = True, write: bool = False
    ) -> Memory:
        """A live memory by id (400 for a malformed id, 404 when unknown, deleted or, if ``visible``, expired; on
        a team server also when the caller may not read it, or with ``write`` change it: another person's)."""
        if not isinstance(memory_id, str) or not memory_id.strip():
            raise InvalidArgument(f"{name}: expected a memory id")
        memory = self.memories.get(memory_id.strip())
        if memory is None or not ns.may_read(memory.user_id, memory.visibility, memory.project_id, write=write):
            raise NotFound(f"memory {memory_id} not found")
        if visible and memory.status != "activated":
            raise NotFound(f"memory {memory_id} is {memory.status}")
        return memory

    def require_key(self, key_id: Any, user_id: str, name: str = "key_id") -> KeyRow:
        """A key of this user by id (400 malformed, 404 unknown)."""
        if not isinstance(key_id, str) or not key_id.strip():
            raise InvalidArgument(f"{name}: expected a key id")
        row = self.keys.key(key_id.strip())
        if row is None or row.user_id != user_id:
            raise NotFound(f"key {key_id} not found")
        return row

    @staticmethod
    def scoped(ns: Namespace) -> MemoryFilter:
        """The memories a key-graph read may load for this caller (a team server's person: theirs and their team
        project's)."""
        return MemoryFilter(include_pending_imports=True, reader=ns.reader, team_project=ns.team_project)

    @staticmethod
    def is_current(memory: Memory) -> bool:
        """Live, not superseded and not expired."""
        return memory.status == "activated" and (memory.valid_to is None or memory.valid_to > utc_now())

    # -- views ------------------------------------------------------------------------------------
    def key_views(self, rows: list[KeyRow], counts: dict[str, int]) -> list[KeyView]:
        """keymem's compact key cluster shape."""
        return [
            {
                "key_id": row.id,
                "concept": row.canonical,
                "aliases": [a for a in row.aliases if a != row.canonical],
                "key_type": row.key_type,
                "memory_count": counts.get(row.id, 0),
                "is_hub": counts.get(row.id, 0) >= HUB_MIN_LINKS,
                "specificity": specificity(counts.get(row.id, 0)),
            }
            for row in rows
        ]

    def connected_keys(self, memory_id: str, query_vector: Vector | None, user_id: str) -> list[KeyLink]:
        """Every key of a memory with its link weight and, given a query, its relevance (best first)."""
        links = self.keys.links_of_memory(memory_id)
        rows = {k: row for k, row in self.keys.keys([key_id for key_id, _ in links]).items() if row.user_id == user_id}
        counts = self.keys.memory_counts(user_id, None, list(rows))
        views: list[KeyLink] = []
        for (key_id, weight), view in zip(
            [(k, w) for k, w in links if k in rows],
            self.key_views([rows[k] for k, _ in links if k in rows], counts),
            strict=True,
        ):
            relevance = None
            if query_vector is not None and self.indexer.key_index is not None:
                relevance = self.indexer.key_index.similarity(query_vector, key_id)
            rounded = round(relevance, 4) if relevance is not None else None
            views.append({**view, "weight": round(weight, 4), "relevance": rounded})
        views.sort(key=lambda v: (-(v["relevance"] if v["relevance"] is not None else -1.0), -v["weight"]))
        return views

    # -- ranking ----------------------------------------------------------------------------------
    def embed_query(self, text: str) -> Vector | None:
        """The query vector, or None when vectors cannot help (backend down, or text the model cannot read)."""
        if not text or not self.thresholds.vector_usable(text):
            return None
        return self.indexer.embed_query(text)

    def content_relevance(self, memories: list[Memory], query: str, query_vector: Vector | None) -> dict[str, float]:
        """Cosine of the query with each memory's content vector (embedded now when not indexed yet);
        a lexical overlap ratio when no vector can be had."""
        found: dict[str, float] = {}
        missing: list[Memory] = []
        index = self.indexer.index
        if query_vector is not None:
            for memory in memories:
                vector = index.vector(memory.id) if index is not None else None
                if vector is None or vector.shape != query_vector.shape:
                    missing.append(memory)
                else:
                    found[memory.id] = float(np.dot(vector, query_vector))
            if missing:
                fresh = self.indexer.embed_texts([f"{m.title}\n{m.content}".strip()[:3000] for m in missing])
                if fresh is not None and fresh.shape[1:] == query_vector.shape:
                    for memory, row in zip(missing, fresh, strict=True):
                        found[memory.id] = float(np.dot(row, query_vector))
        terms = {t.casefold() for t in prepare_query(query).fts_terms}
        for memory in memories:
            if memory.id in found:
                continue
            text = memory.content.casefold()
            found[memory.id] = sum(1 for t in terms if t in text) / len(terms) if terms else 0.0
        return found

    def rank_memories(
        self, key_id: str, user_id: str, namespace: str | None, query: str | None, query_vector: Vector | None
    ) -> list[RankedMemory]:
        """A key's visible memories ranked by content relevance x link weight x depth x freshness."""
        links = self.keys.memories_of_key(key_id, user_id, namespace)
        loaded = self.memories.get_many([m for m, _, _ in links], MemoryFilter(include_pending_imports=True))
        memories = [loaded[m] for m, _, _ in links if m in loaded]
        relevance = self.content_relevance(memories, query, query_vector) if query else {}
        now = time.time()
        ranked = []
        for memory_id, weight, state in links:
            memory = loaded.get(memory_id)
            if memory is None:
                continue
            rel = relevance.get(memory_id) if query else None
            factor = (0.9 + 0.1 * state.depth) * (0.2 + 0.8 * memory_freshness(memory, now))
            score = (max(rel, 0.01) if rel is not None else 1.0) * weight * factor
            ranked.append(RankedMemory(memory, state, weight, rel, score))
        ranked.sort(key=lambda r: (-r.score, r.memory.created_at, r.memory.id))
        return ranked
