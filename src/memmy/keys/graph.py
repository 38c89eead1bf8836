"""The associative key graph (keymem's MCP tools over memmy's store): recall by key clusters, browse,
read_key, read_memory (Hebbian), related, list, stats, plus the writes of :mod:`memmy.keys.write`.

``POST /api/v1/keys/<op>`` calls :meth:`KeyOps.call` with the tool's arguments; the result is the tool's
result object. Key-graph memories are ordinary L1 memories, so they also appear in normal recall.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from memmy.commands.answers import (
    KeyAnswer,
    KeyBrowse,
    KeyMemoryList,
    KeyMemoryRead,
    KeyRead,
    KeyRecall,
    KeyRelated,
    KeyStats,
)
from memmy.errors import NotFound
from memmy.keys.args import (
    BrowseKeysArgs,
    KeyArgs,
    ListMemoriesArgs,
    MemoryStatsArgs,
    ReadKeyArgs,
    ReadMemoryArgs,
    RecallArgs,
    RelatedArgs,
    norm_key,
    number_variants,
)
from memmy.keys.core import HEBBIAN_STEP, MAX_WEIGHT, memory_view, specificity
from memmy.keys.write import KeyWriter
from memmy.namespace import Namespace
from memmy.recall.freshness import validity_payload
from memmy.store.db import utc_now

OPS = (
    "recall",
    "browse_keys",
    "read_key",
    "read_memory",
    "remember",
    "remember_batch",
    "correct",
    "confirm_memory",
    "dismiss",
    "related",
    "forget",
    "list_memories",
    "cleanup_expired",
    "memory_stats",
)
ALIAS_LEARNING_WINDOW_S = 15 * 60
LEARNABLE_QUERY_CHARS = 40


def _since(seconds: float) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class KeyOps(KeyWriter):
    """Every key-graph tool."""

    def call(self, args: KeyArgs, ns: Namespace) -> KeyAnswer:
        """Run one tool with its typed arguments (:func:`memmy.keys.args.key_args` reads them)."""
        op = args.op
        handlers: dict[str, Callable[[Any, Namespace], Any]] = {
            "recall": self.recall,
            "browse_keys": self.browse_keys,
            "read_key": self.read_key,
            "read_memory": self.read_memory,
            "remember": self.remember,
            "remember_batch": self.remember_batch,
            "correct": self.correct,
            "confirm_memory": self.confirm,
            "dismiss": self.dismiss,
            "related": self.related,
            "forget": self.forget,
            "list_memories": self.list_memories,
            "cleanup_expired": self.cleanup_expired,
            "memory_stats": self.memory_stats,
        }
        handler = handlers.get(op)
        if handler is None:
            raise NotFound(f"unknown key-graph operation {op!r}: expected one of {', '.join(OPS)}")
        return cast(KeyAnswer, handler(args, ns))

    # -- recall -----------------------------------------------------------------------------------
    def _match_keys(self, query: str, user_id: str, counts: dict[str, int]) -> tuple[dict[str, Any], list[Any]]:
        """key id -> (score, match type, surface) for exact, alias, variant, partial and semantic matches."""
        thresholds = self.thresholds
        norm = norm_key(query)
        words = norm.split()
        grams = (
            [" ".join(words[i : i + n]) for n in (1, 2) for i in range(len(words) - n + 1)] if len(words) > 1 else []
        )
        variants = number_variants(norm)
        hits = self.keys.find_surfaces(user_id, [norm, *variants, *grams])
        matches: dict[str, tuple[float, str, str]] = {}

        def offer(key_id: str, score: float, kind: str, surface: str) -> None:
            if key_id in counts and score > matches.get(key_id, (-1.0, "", ""))[0]:
                matches[key_id] = (score, kind, surface)

        for surface, (key_id, origin) in hits.items():
            if surface == norm:
                offer(key_id, 1.0, "exact" if origin == "canonical" else "alias", surface)
            elif surface in variants:
                offer(key_id, 0.97, "variant", surface)
            else:
                offer(key_id, 0.9, "partial", surface)
        nearest: list[Any] = []
        query_vector = self.embed_query(query) if counts else None  # an empty graph needs no embedding
        if query_vector is not None and self.indexer.key_index is not None:
            found = self.indexer.key_index.search(query_vector, user_id, 64, usable=thresholds.vector_usable)
            nearest = [f for f in found if f[0] in counts]
            for key_id, surface, score in nearest:
                if score >= thresholds.key_recall:
                    offer(key_id, score, "semantic", surface)
        return {"matches": matches, "vector": query_vector}, nearest

    def recall(self, args: RecallArgs, ns: Namespace) -> KeyRecall:
        """Ranked key clusters plus ONE passive Top-1 memory (no graph state changes)."""
        query, top_k, namespace, context = args.query, args.top_k, args.namespace, args.context
        explain, max_chars = args.explain, args.max_chars
        counts = self.keys.memory_counts(ns.key_owner, namespace)
        found, nearest = self._match_keys(query, ns.key_owner, counts)
        matches: dict[str, tuple[float, str, str]] = found["matches"]
        rows = self.keys.keys(list(matches))
        scored = []
        for key_id, (score, kind, _surface) in matches.items():
            row = rows.get(key_id)
            if row is None:
                continue
            if row.key_type != "concept" and counts.get(key_id, 0) >= 3 and kind == "partial":
                score *= 0.5  # a name that became a hub must not pollute unrelated searches
            scored.append((score, counts.get(key_id, 0), row, kind))
        scored.sort(key=lambda s: (-s[0], -s[1], s[2].canonical))
        scored = scored[:top_k]
        keys = self.key_views([s[2] for s in scored], counts)
        for view, (score, _n, _row, kind) in zip(keys, scored, strict=True):
            view["score"] = round(score, 4)
            view["score_kind"] = "key_relevance"
            view["match_type"] = kind
        memories: list[dict[str, Any]] = []
        if scored:
            top = scored[0][2]
            cue = context or query
            cue_vector = self.embed_query(cue) if context else found["vector"]
            ranked = self.rank_memories(top.id, ns.key_owner, namespace, cue, cue_vector)
            if ranked:
                best = ranked[0]
                hit = memory_view(best.memory, best.state, time.time())
                content = best.memory.content
                hit.update(
                    {
                        "content": content[:max_chars],
                        "truncated": len(content) > max_chars,
                        "passive": True,
                        "matched_key": {"key_id": top.id, "concept": top.canonical},
                        "content_relevance": round(best.content_relevance, 4)
                        if best.content_relevance is not None
                        else None,
                        "relevance_score": round(best.score, 4),
                        "score_kind": "relevance_score",
                        "connected_keys": self.connected_keys(best.memory.id, found["vector"], ns.key_owner),
                    }
                )
                memories.append(hit)
        result: dict[str, Any] = {"status": "found" if keys else "no_match", "query": query, "namespace": namespace}
        if explain:
            total = self._namespace_total(ns.key_owner, namespace)
            result["namespace_memory_count"] = total
            if total == 0:
                result["status"] = "empty_namespace"
        result["keys"] = keys
        result["memories"] = memories
        if not keys:
            near_rows = self.keys.keys([k for k, _s, _v in nearest[:5]])
            result["nearest_keys"] = [
                {"key_id": k, "concept": near_rows[k].canonical, "score": round(v, 4), "memory_count": counts.get(k, 0)}
                for k, _s, v in nearest[:5]
                if k in near_rows
            ]
            result["note"] = (
                "No key cleared the recall gate. If a nearest_keys concept matches the topic, retry recall with it "
                "(or read_key it directly); otherwise browse_keys(namespace) to see the vocabulary."
            )
        return cast(KeyRecall, result)

    def _namespace_total(self, user_id: str, namespace: str | None) -> int:
        counts = self.keys.namespace_counts(user_id)
        return counts.get(namespace, 0) if namespace else sum(counts.values())

    # -- navigation -------------------------------------------------------------------------------
    def browse_keys(self, args: BrowseKeysArgs, ns: Namespace) -> KeyBrowse:
        """A namespace's key vocabulary: hubs first, then by linked-memory count."""
        namespace, hubs_only, limit, offset = args.namespace, args.hubs_only, args.limit, args.offset
        counts = self.keys.memory_counts(ns.key_owner, namespace)
        rows = self.keys.keys(list(counts))
        views = self.key_views(list(rows.values()), counts)
        if hubs_only:
            views = [v for v in views if v["is_hub"]]
        views.sort(key=lambda v: (not v["is_hub"], -v["memory_count"], v["concept"].casefold()))
        page = views[offset : offset + limit]
        return {
            "namespace": namespace,
            "memory_count": self._namespace_total(ns.key_owner, namespace),
            "total": len(views),
            "offset": offset,
            "limit": limit,
            "has_more": offset + limit < len(views),
            "keys": page,
        }

    def read_key(self, args: ReadKeyArgs, ns: Namespace) -> KeyRead:
        """Ranked memory handles under one key (metadata and validity, never content); pages with limit/offset."""
        key = self.require_key(args.key_id, ns.key_owner)
        query, namespace, limit, offset = args.query, args.namespace, args.limit, args.offset
        ranked = self.rank_memories(key.id, ns.key_owner, namespace, query, self.embed_query(query) if query else None)
        if query:
            norm = norm_key(query)
            if norm and len(norm) <= LEARNABLE_QUERY_CHARS and len(norm.split()) <= 3:
                if self.keys.find_surface(ns.key_owner, norm) is None:
                    self.keys.note_query(key.id, norm, query.strip())
        counts = self.keys.memory_counts(ns.key_owner, namespace, [key.id])
        key_counts = self.keys.links_of_memories([r.memory.id for r in ranked[offset : offset + limit]])
        now = time.time()
        handles = []
        for rank, item in enumerate(ranked[offset : offset + limit], start=offset + 1):
            view = memory_view(item.memory, item.state, now)
            view.update(
                {
                    "rank": rank,
                    "score": round(item.score, 4),
                    "score_kind": "rank_score",
                    "content_relevance": round(item.content_relevance, 4)
                    if item.content_relevance is not None
                    else None,
                    "link_weight": round(item.weight, 4),
                    "key_count": len(key_counts.get(item.memory.id, [])),
                }
            )
            handles.append(view)
        return {
            "key": self.key_views([key], counts)[0],
            "query": query,
            "namespace": namespace,
            "total": len(ranked),
            "offset": offset,
            "limit": limit,
            "has_more": offset + limit < len(ranked),
            "memories": handles,
        }

    def read_memory(self, args: ReadMemoryArgs, ns: Namespace) -> KeyMemoryRead:
        """Full content, connected keys and validity; reinforces ONLY the traversed edge (never confirms)."""
        memory = self.require_memory(args.memory_id, ns=ns)
        via = args.via_key_id
        key = self.require_key(via, ns.key_owner, "via_key_id") if via is not None else None
        reinforced = None
        learned = None
        with self.store.transaction():
            if key is not None:
                before = self.keys.weight(key.id, memory.id)
                if before is not None:
                    after = min(MAX_WEIGHT, before + HEBBIAN_STEP)
                    self.keys.set_weight(key.id, memory.id, after)
                    reinforced = {"key_id": key.id, "weight_before": round(before, 4), "weight": round(after, 4)}
                    learned = self.learn_alias(key.id, ns.key_owner, _since(ALIAS_LEARNING_WINDOW_S))
            self.keys.record_access(memory.id)
        state = self.keys.state(memory.id)
        view = memory_view(memory, state, time.time())
        view.update(
            {
                "content": memory.content,
                "current": self.is_current(memory),
                "source": state.source if state else {"host_agent": memory.source_agent},
                "connected_keys": self.connected_keys(memory.id, None, ns.key_owner),
                "related": self._related_links(memory.id, ns),
                "reinforced": reinforced,
            }
        )
        if learned is not None:
            view["alias_learning"] = learned
        return cast(KeyMemoryRead, view)

    def _related_links(self, memory_id: str, ns: Namespace) -> list[dict[str, str]]:
        """The explicit related_to links of a memory, to memories the caller may read."""
        links = self.keys.related_ids(memory_id)
        readable = self.memories.get_many([other for other, _ in links], self.scoped(ns))
        return [{"memory_id": other, "relation": rel} for other, rel in links if other in readable]

    def related(self, args: RelatedArgs, ns: Namespace) -> KeyRelated:
        """Memories sharing keys with this one or linked to it explicitly (related_to), best first."""
        memory = self.require_memory(args.memory_id, ns=ns)
        limit = args.limit
        found: dict[str, dict[str, Any]] = {}
        key_rows = self.keys.keys([k for k, _ in self.keys.links_of_memory(memory.id)])
        counts = self.keys.memory_counts(ns.key_owner, None, list(key_rows))
        for key_id, row in key_rows.items():
            for other, weight, _state in self.keys.memories_of_key(key_id, ns.key_owner, None):
                if other == memory.id:
                    continue
                entry = found.setdefault(other, {"via": set(), "shared_keys": [], "score": 0.0})
                entry["via"].add("shared_key")
                entry["shared_keys"].append({"key_id": key_id, "concept": row.canonical})
                entry["score"] += weight * specificity(counts.get(key_id, 1))
        for other, _relation in self.keys.related_ids(memory.id):
            entry = found.setdefault(other, {"via": set(), "shared_keys": [], "score": 0.0})
            entry["via"].add("related_to")
            entry["score"] += 1.0
        loaded = self.memories.get_many(list(found), self.scoped(ns))
        now = time.time()
        items = []
        for other, entry in sorted(found.items(), key=lambda kv: -float(kv[1]["score"])):
            other_memory = loaded.get(other)
            if other_memory is None:
                continue
            items.append(
                {
                    "id": other,
                    "memory_id": other,
                    "content": other_memory.content[:300],
                    "via": sorted(entry["via"]),
                    "shared_keys": entry["shared_keys"],
                    "score": round(float(entry["score"]), 4),
                    "validity": validity_payload(other_memory, now),
                }
            )
        return {"memory_id": memory.id, "count": len(items[:limit]), "related": items[:limit]}

    def list_memories(self, args: ListMemoriesArgs, ns: Namespace) -> KeyMemoryList:
        """Active key-graph memories (expired and superseded ones excluded), newest first."""
        namespace, limit, offset = args.namespace, args.limit, args.offset
        ids = self.keys.visible_memory_ids(ns.key_owner, namespace)
        page = ids[offset : offset + limit]
        loaded = self.memories.get_many(page, self.scoped(ns))
        states = self.keys.states(page)
        links = self.keys.links_of_memories(page)
        rows = self.keys.keys([k for ks in links.values() for k in ks])
        now = time.time()
        items = []
        for memory_id in page:
            memory = loaded.get(memory_id)
            if memory is None:
                continue
            view = memory_view(memory, states.get(memory_id), now)
            view["content"] = memory.content
            view["keys"] = [rows[k].canonical for k in links.get(memory_id, []) if k in rows]
            items.append(view)
        return {"namespace": namespace, "total": len(ids), "count": len(items), "memories": items}

    def memory_stats(self, args: MemoryStatsArgs, ns: Namespace) -> KeyStats:
        """Counts of keys, memories and links (plus aliases, related_to links, tombstones, namespaces)."""
        namespaces = self.keys.namespace_counts(ns.key_owner)
        return {
            "keys": self.keys.key_count(ns.key_owner),
            "memories": sum(namespaces.values()),
            "links": self.keys.link_count(ns.key_owner),
            "aliases": self.keys.alias_count(ns.key_owner),
            "related_links": self.keys.relation_count(),
            "tombstones": self.tombstones.count(),
            "namespaces": namespaces,
            "thresholds": {
                "profile": self.thresholds.profile,
                "key_recall": self.thresholds.key_recall,
                "key_merge": self.thresholds.key_merge,
                "multilingual": self.thresholds.multilingual,
            },
            "serverTime": utc_now(),
        }
