"""Key-graph writes: remember (with key merging), correct (bitemporal versions), confirm, dismiss, forget,
cleanup of expired memories."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from memmy.capture.sanitize import sanitize_text
from memmy.commands.answers import (
    AliasLearning,
    KeyConfirmed,
    KeyCorrected,
    KeyDismissed,
    KeyForgotten,
    KeyRemembered,
    KeysCleaned,
)
from memmy.domain import ID_PREFIX_BY_LAYER, Memory, content_hash, new_id, summarise
from memmy.errors import Conflict, Forbidden, InvalidArgument
from memmy.indexing import KeySurface, embedding_text
from memmy.keys.args import (
    CleanupExpiredArgs,
    ConfirmArgs,
    CorrectArgs,
    DismissArgs,
    ForgetArgs,
    RememberArgs,
    RememberBatchArgs,
    norm_key,
    number_variants,
    script_of,
)
from memmy.keys.core import MAX_WEIGHT, MIN_WEIGHT, KeyCore
from memmy.keys.revise import revise
from memmy.kinds import memory as stored
from memmy.namespace import Namespace
from memmy.recall.freshness import DEFAULT_PROFILE, explicit_profile, validity_payload
from memmy.store.db import utc_now
from memmy.store.tombstones import value_hash
from memmy.store.vectors import Vector

DISMISS_FACTOR = 0.5
CONFIRM_DEPTH_STEP = 0.05


@dataclass
class WriteItem:
    """One validated remember (or correct) request."""

    content: str
    groups: list[list[str]]
    key_types: dict[str, str]
    namespace: str
    ttl_seconds: float | None
    decay_profile: str
    related_to: list[str]
    source: dict[str, Any]


@dataclass
class Resolution:
    """What key resolution did: the key ids to link and the hints for the caller."""

    key_ids: list[str] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    near: list[dict[str, Any]] = field(default_factory=list)
    surfaces: list[KeySurface] = field(default_factory=list)


def _later(seconds: float) -> str:
    moment = datetime.now(UTC) + timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class KeyWriter(KeyCore):
    """The writing half of the key graph."""

    # -- validation -------------------------------------------------------------------------------
    def parse_item(
        self, args: RememberArgs, ns: Namespace, where: str = "", default_namespace: str | None = None
    ) -> WriteItem:
        """Check one remember item against the store (nothing is written here)."""
        content = sanitize_text(args.content, unwrap_request=False).strip()
        if not content:
            raise InvalidArgument(f"{where}content: nothing left after removing injected memmy context")
        for other in args.related_to:
            self.require_memory(other, f"{where}related_to", ns=ns)
        return WriteItem(
            content=content,
            groups=[list(group) for group in args.groups],
            key_types=dict(args.key_types),
            namespace=args.namespace or default_namespace or "default",
            ttl_seconds=args.ttl_seconds,
            decay_profile=args.decay_profile or DEFAULT_PROFILE,
            related_to=list(args.related_to),
            source=dict(args.source),
        )

    def _check_writable(self) -> None:
        if not self.config.flags.enable_memory_add:
            raise Forbidden("memory writes are disabled (algorithm.enableMemoryAdd: false)")

    # -- key resolution ---------------------------------------------------------------------------
    def _pre_embed(self, groups: list[list[str]], user_id: str) -> dict[str, Vector]:
        """Vectors of the surfaces that do not exist yet (one embedding call, outside any transaction)."""
        thresholds = self.thresholds
        surfaces = {norm_key(s): s for group in groups for s in group}
        existing = self.keys.find_surfaces(user_id, list(surfaces))
        todo = [(n, s) for n, s in surfaces.items() if n not in existing and thresholds.vector_usable(s)]
        if not todo:
            return {}
        vectors = self.indexer.embed_texts([s for _, s in todo])
        if vectors is None:
            return {}
        return {n: vectors[i] for i, (n, _) in enumerate(todo)}

    def _resolve(
        self, groups: list[list[str]], key_types: dict[str, str], user_id: str, vectors: dict[str, Vector]
    ) -> Resolution:
        """Map each key group to a key cluster: an existing surface, a number variant, a semantic merge
        (concept keys, same vector space only), else a new key; every other surface becomes an alias."""
        thresholds = self.thresholds
        result = Resolution()
        for group in groups:
            norms = [norm_key(s) for s in group]
            kind = next((key_types[n] for n in norms if n in key_types), "concept")
            hits = self.keys.find_surfaces(user_id, norms)
            key_id = next((hits[n][0] for n in norms if n in hits), None)
            merged_norm: str | None = None
            similarity: float | None = None
            if key_id is None and kind == "concept":
                variants = [v for n in norms for v in number_variants(n)]
                found = self.keys.find_surfaces(user_id, variants)
                if found:
                    key_id, merged_norm, similarity = next(iter(found.values()))[0], norms[0], 1.0
                elif norms[0] in vectors and self.indexer.key_index is not None:
                    best = self.indexer.key_index.search(vectors[norms[0]], user_id, 1, usable=thresholds.vector_usable)
                    if best and self.keys.key(best[0][0]) is not None:
                        other_id, other_norm, score = best[0]
                        if score >= thresholds.key_merge:
                            key_id, merged_norm, similarity = other_id, norms[0], score
                        elif score >= thresholds.near_key:
                            row = self.keys.key(other_id)
                            result.near.append(
                                {
                                    "key": group[0],
                                    "near": row.canonical if row else other_norm,
                                    "key_id": other_id,
                                    "similarity": round(score, 4),
                                }
                            )
            if key_id is None:
                key_id = self.keys.create_key(user_id, group[0], norms[0], kind)
                result.surfaces.append(KeySurface(key_id, norms[0], group[0], user_id, kind))
            for surface, norm in zip(group, norms, strict=True):
                if norm in hits:
                    continue
                origin = "merge" if norm == merged_norm else "explicit"
                if self.keys.add_alias(
                    key_id, user_id, surface, norm, origin, similarity if origin == "merge" else None
                ):
                    result.surfaces.append(KeySurface(key_id, norm, surface, user_id, kind))
                    if origin == "merge":
                        row = self.keys.key(key_id)
                        result.merged.append(
                            {
                                "key": surface,
                                "into": row.canonical if row else key_id,
                                "key_id": key_id,
                                "similarity": round(similarity or 0.0, 4),
                            }
                        )
            if key_id not in result.key_ids:
                result.key_ids.append(key_id)
        return result

    def _store_vectors(self, surfaces: list[KeySurface], vectors: dict[str, Vector]) -> None:
        """Index the new surfaces (pre-computed vectors first; the rest now, or by the worker later)."""
        later = []
        for surface in surfaces:
            vector = vectors.get(surface.norm)
            if vector is not None:
                self.indexer.put_key_vector(surface, vector)
            else:
                later.append(surface)
        if later:
            self.indexer.embed_key_surfaces(later)

    @staticmethod
    def _hints(item: WriteItem, resolution: Resolution) -> dict[str, Any] | None:
        hints: dict[str, Any] = {}
        if resolution.near:
            hints["near_keys"] = resolution.near
        if resolution.merged:
            hints["merged_keys"] = resolution.merged
        phrases = [g[0] for g in item.groups if len(g[0].split()) >= 3]
        if phrases:
            hints["phrase_keys"] = phrases
        scripts = {script_of(s) for g in item.groups for s in g} - {"none"}
        content_script = script_of(item.content)
        if content_script not in ("latin", "none") and scripts <= {"latin"}:
            hints["language_note"] = f"content is {content_script}: add {content_script} forms of the keys too"
        elif scripts and "latin" not in scripts:
            hints["language_note"] = "add the English forms of the keys too (e.g. 'apple|사과')"
        return hints or None

    # -- remember ---------------------------------------------------------------------------------
    def remember(self, args: RememberArgs, ns: Namespace) -> KeyRemembered:
        """Save one memory under its keys (dedupes like memory/add; refuses tombstoned content)."""
        self._check_writable()
        item = self.parse_item(args, ns)
        return self._write(item, ns, tool="remember")

    def remember_batch(self, args: RememberBatchArgs, ns: Namespace) -> list[KeyRemembered]:
        """Save several memories; every item is validated before anything is written."""
        self._check_writable()
        items = [self.parse_item(item, ns, f"items[{i}].") for i, item in enumerate(args.items)]
        with self.store.transaction():
            results = [self._write(item, ns, tool="remember_batch") for item in items]
        kept = ("saved", "deduplicated", "tombstoned", "tombstone_id")
        return [cast(KeyRemembered, {k: v for k, v in r.items() if k in kept}) for r in results]

    def _write(self, item: WriteItem, ns: Namespace, *, tool: str, supersedes: Memory | None = None) -> KeyRemembered:
        digest = content_hash(item.content)
        memory_key = f"keymem:{item.namespace}:{digest[:24]}"
        tombstone = self.tombstones.match(ns.user_id, value_hash(item.content), memory_key)
        if tombstone is not None:
            return {
                "saved": None,
                "tombstoned": True,
                "tombstone_id": tombstone.id,
                "note": "this content was forgotten; restore the tombstone to allow it again",
            }
        vectors = self._pre_embed(item.groups, ns.key_owner)
        now = utc_now()
        source = {"tool": tool, "saved_at": now, "host_agent": ns.source, **item.source}
        if ns.session_key:
            source.setdefault("host_session", ns.session_key)
        with self.store.transaction():
            duplicate = None if supersedes else self._duplicate(ns.key_owner, digest, item.namespace)
            resolution = self._resolve(item.groups, item.key_types, ns.key_owner, vectors)
            if duplicate is not None:
                memory = duplicate
                self.keys.put_state(memory.id, item.namespace, item.ttl_seconds, None, source)
            else:
                memory = self._new_memory(item, ns, digest, memory_key, now, supersedes)
                expires = _later(item.ttl_seconds) if item.ttl_seconds else None
                self.keys.put_state(memory.id, item.namespace, item.ttl_seconds, expires, source)
            for key_id in resolution.key_ids:
                self.keys.link(key_id, memory.id)
            for other in item.related_to:
                self.keys.relate(memory.id, other)
            self._store_vectors(resolution.surfaces, vectors)
        result: dict[str, Any] = {"saved": memory.id}
        if duplicate is not None:
            result["deduplicated"] = True
            result["note"] = f"identical content existed (id: {memory.id}); its keys were merged instead"
        hints = self._hints(item, resolution)
        if hints:
            result["hints"] = hints
        self.logs.api_call(
            "memory_add",
            ns.source,
            {"tool": tool, "keys": len(item.groups), "chars": len(item.content)},
            {"id": memory.id, "deduplicated": duplicate is not None},
            0.0,
            True,
            ns.user_id,
        )
        return cast(KeyRemembered, result)

    def _duplicate(self, user_id: str, digest: str, namespace: str) -> Memory | None:
        """The current memory with this content in the caller's namespace (or in none yet), if any.

        The same text remembered in another namespace is a separate memory: merging it into the first namespace
        would leave the caller unable to find it where it asked.
        """
        for memory_id in self.keys.duplicates_in_namespace(user_id, "L1", digest, namespace):
            memory = self.memories.get(memory_id)
            if memory is not None and self.is_current(memory):
                return memory
        return None

    def _new_memory(
        self, item: WriteItem, ns: Namespace, digest: str, memory_key: str, now: str, supersedes: Memory | None
    ) -> Memory:
        properties: dict[str, Any] = {
            "summary": summarise(item.content),
            "validity": {"decayProfile": item.decay_profile, "lastConfirmedAt": now, "confirmationCount": 0},
            "keyGraph": {"namespace": item.namespace},
        }
        if supersedes is not None:
            properties = stored.with_values(properties, **{stored.SUPERSEDES: supersedes.id})
        tags = list(dict.fromkeys(s[:64] for g in item.groups for s in g))[:16]
        memory = Memory(
            id=new_id(ID_PREFIX_BY_LAYER["L1"]),
            layer="L1",
            content=item.content,
            tags=tags,
            user_id=ns.user_id,
            project_id=supersedes.project_id if supersedes else ns.project_id,
            visibility=supersedes.visibility if supersedes else ns.visibility,  # a team project's: the team's
            source_agent=ns.source,
            memory_key=memory_key,
            content_hash=digest,
            properties=properties,
            created_at=now,
            updated_at=now,
            valid_from=now,
            valid_to=_later(item.ttl_seconds) if item.ttl_seconds else None,
        )
        self.memories.insert(memory, source=ns.source)
        self.indexer.enqueue(memory.id, "L1", embedding_text("L1", "", item.content, properties))
        return memory

    # -- correct ----------------------------------------------------------------------------------
    def correct(self, args: CorrectArgs, ns: Namespace) -> KeyCorrected:
        """A new version; the old one's validity ends now and it links forward (the chain is kept whole)."""
        self._check_writable()
        old = self.require_memory(args.memory_id, ns=ns, write=True)
        if old.superseded_by:
            raise Conflict(f"memory {old.id} was already corrected by {old.superseded_by}; correct the current version")
        if not self.is_current(old):
            raise Conflict(f"memory {old.id} is no longer valid (expired); remember the fact again instead")
        state = self.keys.state(old.id)
        explicit_keys = [list(group) for group in args.groups] if args.groups is not None else None
        if explicit_keys is None:
            rows = self.keys.keys([k for k, _ in self.keys.links_of_memory(old.id)])
            explicit_keys = [[row.canonical] for row in rows.values()]
            if not explicit_keys:  # a memory made by add, import or evolution: a plain versioned correction
                return cast(KeyCorrected, revise(self.store, self.indexer, old, args.content, ns.source))
        merged = RememberArgs(
            content=args.content,
            groups=tuple(tuple(group) for group in explicit_keys),
            key_types=args.key_types,
            namespace=state.namespace if state else "default",
            ttl_seconds=args.ttl_seconds if args.ttl_seconds is not None else (state.ttl_seconds if state else None),
            decay_profile=args.decay_profile or explicit_profile(old),
            related_to=args.related_to,
            source=args.source,
        )
        item = self.parse_item(merged, ns)
        item.groups = explicit_keys
        with self.store.transaction():
            result = self._write(item, ns, tool="correct", supersedes=old)
            new_id_ = result.get("saved")
            if new_id_ is None:
                return {"new_id": None, "superseded": None, **result}
            before = old.snapshot()
            old.valid_to = utc_now()
            old.superseded_by = new_id_
            old.updated_at = old.valid_to
            old.version += 1
            self.memories.update(old, before, "supersede", ns.source)
        self.indexer.unindex(old.id)  # a superseded version must not take vector slots from live memories
        response: KeyCorrected = {"new_id": new_id_, "superseded": old.id}
        if "hints" in result:
            response["hints"] = result["hints"]
        return response

    # -- confirmation and feedback ----------------------------------------------------------------
    def confirm(self, args: ConfirmArgs, ns: Namespace) -> KeyConfirmed:
        """Evidence-backed confirmation: refresh freshness and deepen the memory (+0.05)."""
        self._check_writable()
        memory = self.require_memory(args.memory_id, ns=ns, write=True)
        evidence, source = args.evidence, dict(args.source)
        if memory.superseded_by:
            raise Conflict(f"memory {memory.id} was superseded by {memory.superseded_by}; confirm the current version")
        now = utc_now()
        before = memory.snapshot()
        validity = stored.validity(memory.properties) or {"decayProfile": DEFAULT_PROFILE}
        validity["lastConfirmedAt"] = now
        validity["confirmationCount"] = int(validity.get("confirmationCount") or 0) + 1
        history = list(validity.get("confirmations") or [])[-9:]
        history.append({"at": now, "evidence": evidence[:500], "source": {"host_agent": ns.source, **source}})
        validity["confirmations"] = history
        memory.properties = stored.with_values(memory.properties, **{stored.VALIDITY: validity})
        memory.updated_at = now
        memory.version += 1
        state = self.keys.state(memory.id)
        depth = min(1.0, (state.depth if state else 0.0) + CONFIRM_DEPTH_STEP)
        with self.store.transaction():
            self.memories.update(memory, before, "confirm", ns.source)
            if state is not None:
                self.keys.set_depth(memory.id, depth)
        return {
            "memory_id": memory.id,
            "confirmed": True,
            "evidence": evidence,
            "depth": round(depth, 4) if state else None,
            "confirmation_count": int(validity["confirmationCount"]),
            "validity": validity_payload(memory),
        }

    def dismiss(self, args: DismissArgs, ns: Namespace) -> KeyDismissed:
        """Negative feedback on one key->memory edge: halve its weight (floored, never severed)."""
        self._check_writable()
        memory = self.require_memory(args.memory_id, ns=ns, write=True)
        key = self.require_key(args.key_id, ns.key_owner)
        before = self.keys.weight(key.id, memory.id)
        if before is None:
            raise InvalidArgument(f"key_id: key {key.id} ({key.canonical}) is not linked to memory {memory.id}")
        after = max(MIN_WEIGHT, min(MAX_WEIGHT, before * DISMISS_FACTOR))
        with self.store.transaction():
            self.keys.set_weight(key.id, memory.id, after)
            cancelled = self.keys.drop_candidates(key.id)
        return {
            "memory_id": memory.id,
            "key_id": key.id,
            "dismissed": True,
            "weight_before": round(before, 4),
            "weight": round(after, 4),
            "floored": after <= MIN_WEIGHT,
            "cancelled_alias_candidates": cancelled,
        }

    # -- deletion ---------------------------------------------------------------------------------
    def forget(self, args: ForgetArgs, ns: Namespace) -> KeyForgotten:
        """Delete a memory for good: a tombstone (content hash + memory key) stops it from coming back. A memory
        deleted earlier (hidden, restorable) can be forgotten too."""
        memory_id = args.memory_id.strip()
        result = self.forget_memory(memory_id, args.reason or "forget", ns)
        return {"deleted": True, "memory_id": memory_id, "tombstone_id": result.get("tombstoneId")}

    def cleanup_expired(self, args: CleanupExpiredArgs, ns: Namespace) -> KeysCleaned:
        """Delete the key-graph memories whose TTL has passed (no tombstone: expiry is not a judgement)."""
        self._check_writable()
        ids = [
            memory_id
            for memory_id in self.keys.expired_ids(ns.key_owner, utc_now())
            if (found := self.memories.get(memory_id)) is not None
            and ns.may_read(found.user_id, found.visibility, found.project_id, write=True)  # a person: their own
        ]
        started = time.perf_counter()
        with self.store.transaction():
            for memory_id in ids:
                memory = self.memories.get(memory_id)
                if memory is None:
                    continue
                before = memory.snapshot()
                now = utc_now()
                memory.status, memory.deleted_at, memory.updated_at = "deleted", now, now
                memory.version += 1
                self.memories.update(memory, before, "expire", ns.source)
                self.indexer.forget(memory_id)
        return {"deleted": len(ids), "ids": ids, "durationMs": round((time.perf_counter() - started) * 1000, 2)}

    def learn_alias(self, key_id: str, user_id: str, since: str) -> AliasLearning | None:
        """A full read through a key confirms the route of its latest ``read_key`` query; the third
        confirmation folds that query into the key as a learned alias (how '사과' can find 'apple')."""
        confirmed = self.keys.confirm_route(key_id, since)
        if confirmed is None:
            return None
        norm, query, hits = confirmed
        if hits < 3:
            return {"query": query, "confirmations": hits, "learned": False}
        row = self.keys.key(key_id)
        if row is None or not self.keys.add_alias(key_id, user_id, query, norm, "learned"):
            self.keys.drop_candidates(key_id, norm)
            return None
        self.keys.drop_candidates(key_id, norm)
        self.indexer.embed_key_surfaces([KeySurface(key_id, norm, query, user_id, row.key_type)])
        return {"query": query, "confirmations": hits, "learned": True}
