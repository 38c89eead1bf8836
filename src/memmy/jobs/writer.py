"""Shared plumbing of the evolution handlers: memories read as the rules take them, and layer writes by key."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from memmy.domain import Layer, Memory, content_hash, new_id
from memmy.evolve.model import IndexedPolicy, IndexedTrace, Vector
from memmy.evolve.scope import DerivedScope, derived_scope
from memmy.indexing import Indexer
from memmy.kinds import memory as stored
from memmy.kinds import policy, skill, trace, world
from memmy.kinds.stored import section_of
from memmy.store.db import utc_now
from memmy.store.memories import MemoryFilter
from memmy.store.unit import Store

EVOLUTION_SOURCE = "memmy-evolution"
#: The author of a derived memory shared with a team project (a team server's person names cannot hold ``:``).
DERIVED_AUTHOR = "memmy:derived"
#: ``properties.provenance.people``: whose traces fed a team-visible derived memory.
PROVENANCE = "provenance"
PREFIX_BY_LAYER = {"L2": "policy", "L3": "world", "Skill": "skill"}


def parse_iso(value: str | None) -> datetime | None:
    """Parse memmy's ISO timestamps (``...Z``) into aware UTC datetimes."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def iso(moment: datetime) -> str:
    """Format an aware datetime the way the store does."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def indexed_trace(memory: Memory, indexer: Indexer | None = None) -> IndexedTrace:
    """The trace of an L1 memory as the rules read it (its vector from the in-memory index when there is one): the
    memory's summary and tags stand in for the trace's own when it has none."""
    found = IndexedTrace.of(memory.properties)
    return replace(
        found,
        id=memory.id,
        session_id=memory.session_id,
        created_at=memory.created_at,
        summary=found.summary or memory.summary,
        tags=found.tags or tuple(memory.tags),
        signature=found.signature or "_|_|_|_",
        status=found.status or "succeeded",
        vector=_vector(memory, indexer),
    )


def indexed_policy(memory: Memory, indexer: Indexer | None = None) -> IndexedPolicy:
    """The policy of an L2 memory as the rules read it: the memory's title and content stand in for the policy's
    own title and procedure when it has none."""
    found = IndexedPolicy.of(memory.properties)
    return replace(
        found,
        id=memory.id,
        title=found.title or memory.title,
        procedure=found.procedure or memory.content,
        tags=tuple(memory.tags),
        updated_at=memory.updated_at,
        vector=_vector(memory, indexer),
    )


def _vector(memory: Memory, indexer: Indexer | None) -> Vector | None:
    """The memory's vector in the in-memory index (None without one)."""
    return indexer.index.vector(memory.id) if indexer is not None and indexer.index is not None else None


REVIEWED_LAYERS = ("L2", "L3", "Skill")


@dataclass
class LayerWrite:
    """A memory to create or update by (layer, key) when a handler's apply phase runs."""

    layer: Layer
    key: str
    title: str
    content: str
    tags: list[str]
    properties: dict[str, Any]
    status: str = "activated"
    user_id: str = "local-user"
    project_id: str | None = None
    embedding_text: str = ""


class LayerWriter:
    """Create or update evolution memories by key, keep the vector index in step, log every change."""

    def __init__(self, store: Store, indexer: Indexer) -> None:
        self.store = store
        self.memories = store.memories
        self.indexer = indexer
        #: ``evolution.review: required``: the facade sets this; new L2/L3/Skills then wait for approval.
        self.review_required: Callable[[], bool] = lambda: False

    def _reviewed(self, layer: str, status: str, current: dict[str, Any] | None, props: dict[str, Any]) -> str:
        """The review queue's gate: pending items stay unrecalled, rejected ones stay archived (not re-proposed)."""
        state = (current or {}).get("state") if layer in REVIEWED_LAYERS else "off"
        if state is None and current is None and layer in REVIEWED_LAYERS and self.review_required():
            state = "pending"
        if state == "rejected":
            return "archived"
        if state == "pending":
            props["review"] = {**(current or {}), "state": "pending", "proposedStatus": status}
            return "resolving" if status == "activated" else status
        return status

    def evidence_projects(self, properties: dict[str, Any], depth: int = 0) -> set[str | None]:
        """The projects of a derived memory's evidence: source episodes and traces (L2), source policies (L3,
        Skills). An empty set when the evidence is unknown."""
        episode_ids, memory_ids = stored.evidence_ids(properties)
        found: set[str | None] = set()
        if episode_ids:
            marks = ",".join("?" * len(episode_ids))
            rows = self.store.query(f"SELECT project_id FROM episodes WHERE id IN ({marks})", episode_ids)
            found |= {row[0] for row in rows}
        for memory in self.memories.get_many(memory_ids).values():
            scope = stored.scope(memory.properties)
            if memory.layer != "L1" and scope is not None and scope.get("projects"):
                found |= set(scope["projects"])
            elif memory.layer != "L1" and depth < 2 and scope is None:
                found |= self.evidence_projects(memory.properties, depth + 1) or {memory.project_id}
            else:
                found.add(memory.project_id)
        return found

    def team_evidence(self, properties: dict[str, Any], project_id: str | None) -> list[str] | None:
        """The people whose traces fed a derived memory when every piece of its evidence (the traces of its
        episodes, its traces, the policies under an L3 or Skill) is team-visible in ``project_id``; else None: a
        private trace never feeds a team-visible derivation."""
        if project_id is None:
            return None
        episode_ids, memory_ids = stored.evidence_ids(properties)
        ids = list(memory_ids)
        if episode_ids:
            marks = ",".join("?" * len(episode_ids))
            rows = self.store.query(f"SELECT l1_memory_ids_json FROM episodes WHERE id IN ({marks})", episode_ids)
            ids += [str(i) for row in rows for i in json.loads(row[0] or "[]")]
        found = self.memories.get_many(list(dict.fromkeys(ids)), MemoryFilter(include_pending_imports=True))
        if not found or any(m.visibility != "team" or m.project_id != project_id for m in found.values()):
            return None
        people = set()
        for memory in found.values():
            fed = section_of(memory.properties, PROVENANCE).get("people")
            people |= set(fed) if memory.layer != "L1" and isinstance(fed, list) else {memory.user_id}
        return sorted(people)

    def _share(self, memory: Memory, props: dict[str, Any], project_id: str | None) -> bool:
        """Make ``memory`` team-visible when its evidence is all its team project's (author: the derivation,
        provenance: the people), private again when it is not; True when the visibility changed."""
        people = self.team_evidence(props, project_id)
        if people is not None:
            props[PROVENANCE] = {"people": people}
        else:
            props.pop(PROVENANCE, None)
        visibility = "team" if people is not None else ("private" if memory.visibility == "team" else memory.visibility)
        changed = visibility != memory.visibility
        memory.visibility = visibility
        if people is not None and memory.user_id != DERIVED_AUTHOR:
            memory.user_id = DERIVED_AUTHOR
            with self.store.transaction() as conn:  # the repository's update does not touch ``user_id``
                conn.execute("UPDATE memories SET user_id = ? WHERE id = ?", (DERIVED_AUTHOR, memory.id))
        return changed

    def scope_of(self, layer: str, title: str, content: str, properties: dict[str, Any]) -> DerivedScope | None:
        """The scope of a derived memory (None for layers that are not derived or without known evidence)."""
        if layer not in ("L2", "L3", "Skill"):
            return None
        projects = self.evidence_projects(properties)
        if not projects:
            return None
        return derived_scope(projects, f"{title}\n{content}")

    def upsert(self, write: LayerWrite) -> Memory:
        """Insert a new memory for ``write.key`` or update the existing one (version bump, change log).

        Derived memories carry the project(s) of their evidence (``properties.scope``; ``project_id`` when
        that is one project), see :mod:`memmy.evolve.scope`.
        """
        now = utc_now()
        existing = self.memories.find_by_key(write.layer, write.key)
        props = dict(write.properties)
        scope = self.scope_of(write.layer, write.title, write.content, props)
        if scope is not None:
            props[stored.SCOPE] = scope.to_json()
            write.project_id = scope.project_id
        if write.embedding_text:
            props[stored.EMBEDDING_TEXT] = write.embedding_text
        status = self._reviewed(
            write.layer, write.status, stored.review(existing.properties) if existing is not None else None, props
        )
        people = self.team_evidence(props, write.project_id) if scope is not None else None
        if people is not None:  # a team project's traces: a memory of the team, not of one person
            props[PROVENANCE] = {"people": people}
        if existing is None:
            memory = Memory(
                id=f"{PREFIX_BY_LAYER[write.layer]}_{new_id('x')[2:]}",
                layer=write.layer,
                content=write.content,
                title=write.title[:200],
                tags=write.tags,
                status=status,
                user_id=write.user_id if people is None else DERIVED_AUTHOR,
                project_id=write.project_id,
                visibility="private" if people is None else "team",
                source_agent=EVOLUTION_SOURCE,
                memory_key=write.key,
                content_hash=content_hash(write.content),
                properties=props,
                created_at=now,
                updated_at=now,
                valid_from=now,
            )
            self.memories.insert(memory, source=EVOLUTION_SOURCE)
        else:
            memory = existing
            before = memory.snapshot()
            memory.content, memory.title = write.content, write.title[:200]
            memory.tags = sorted(set(memory.tags) | set(write.tags))
            memory.properties = {**memory.properties, **props}
            memory.status = status
            memory.content_hash = content_hash(write.content)
            memory.version += 1
            memory.updated_at = now
            if scope is not None:
                self._share(memory, memory.properties, scope.project_id)
            self.memories.update(memory, before, "evolve", EVOLUTION_SOURCE)
            if scope is not None:
                self._set_project(memory, scope.project_id)
        self.sync_index(memory)
        return memory

    def sync_index(self, memory: Memory) -> None:
        """Recallable memories are (re-)embedded; archived ones leave the in-memory index."""
        if memory.status == "activated":
            text = stored.embedding_text(memory.properties) or f"{memory.title}\n{memory.content}"
            self.indexer.enqueue(memory.id, memory.layer, text[:3000])
        else:
            self.indexer.unindex(memory.id)

    def supersede(self, old_id: str, new_id: str) -> bool:
        """Archive an activated memory of the same layer as ``new_id`` and point it at its replacement."""
        old, new = self.memories.get(old_id), self.memories.get(new_id)
        if old is None or new is None or old.id == new.id or old.layer != new.layer or old.status != "activated":
            return False
        before = old.snapshot()
        old.status, old.superseded_by = "archived", new.id
        old.version += 1
        old.updated_at = utc_now()
        self.memories.update(old, before, "archive", EVOLUTION_SOURCE)
        self.sync_index(old)
        return True

    def patch_properties(self, memory: Memory, key: str, patch: dict[str, Any], status: str | None = None) -> Memory:
        """Shallow-merge ``patch`` into ``properties[key]`` (and mirror top-level value/alpha/priority for L1)."""
        before = memory.snapshot()
        memory.properties = {**memory.properties, key: {**section_of(memory.properties, key), **patch}}
        if key == trace.KEY:
            mirrored = {name: patch[name] for name in trace.MIRRORED if name in patch}
            memory.properties = stored.with_values(memory.properties, **mirrored)
        scope = None
        if key in (policy.KEY, world.KEY, skill.KEY):
            scope = self.scope_of(memory.layer, memory.title, memory.content, memory.properties)
            if scope is not None:
                memory.properties = stored.with_values(memory.properties, **{stored.SCOPE: scope.to_json()})
        if status is not None:
            review: dict[str, Any] = {}
            status = self._reviewed(memory.layer, status, stored.review(memory.properties), review)
            memory.properties.update(review)
        changed_status = status is not None and status != memory.status
        if status is not None:
            memory.status = status
        shared = scope is not None and self._share(memory, memory.properties, scope.project_id)
        memory.version += 1
        memory.updated_at = utc_now()
        self.memories.update(memory, before, "evolve", EVOLUTION_SOURCE)
        moved = scope is not None and self._set_project(memory, scope.project_id)
        if changed_status or moved or shared:
            self.sync_index(memory)
        return memory

    def _set_project(self, memory: Memory, project_id: str | None) -> bool:
        """Store a derived memory's project (the repository's update does not touch ``project_id``)."""
        if memory.project_id == project_id:
            return False
        memory.project_id = project_id
        with self.store.transaction() as conn:
            conn.execute("UPDATE memories SET project_id = ? WHERE id = ?", (project_id, memory.id))
        return True
