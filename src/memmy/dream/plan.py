"""Dream's planning: which memories a pass would merge, supersede or archive, computed without writing.

Rules, in this order (each memory gets at most one change):

1. contradicted: live L1/L2 memories whose ``valid_to`` has passed or that another memory superseded;
2. duplicates among memories updated within ``lookbackDays`` (plus their older twins): the same normalised
   content, or cosine >= ``duplicateSimilarity`` in the same layer, user and project (only when the texts
   negate the same things and cite the same numbers). The best twin is kept and takes the others' tags;
3. stale: L1 traces with priority <= 0.05, untouched for ``staleDays`` and never recalled; L2 policies that
   evolution archived or whose gain fell below ``algorithm.l2Induction.archiveGain``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from memmy.config import MemmyConfig
from memmy.domain import content_hash, summarise
from memmy.indexing import Indexer
from memmy.store.dreams import ACTIONS, LIVE_STATUSES, Row
from memmy.store.unit import Store

LAYERS = ("L1", "L2")
STALE_PRIORITY = 0.05
SCOPE_LIMIT = 2000  # recent memories examined for duplicates in one pass (newest first; one vector search each)
NEIGHBOURS = 8
_NEGATION = re.compile(
    r"\b(?:not|never|no|don't|dont|doesn't|isn't|aren't|won't|can't|cannot|shouldn't|avoid|without)\b"
    r"|不|别|勿|没|無|无|禁止|避免",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def iso(moment: datetime) -> str:
    """The store's timestamp format for a datetime."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _num(*values: Any) -> float:
    for value in values:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return 0.0


def _tags(row: Row) -> list[str]:
    try:
        tags = json.loads(row.get("tags_json") or "[]")
    except ValueError:
        return []
    return [str(t) for t in tags] if isinstance(tags, list) else []


def compatible(a: str, b: str) -> bool:
    """Two near-identical texts may be merged only if they negate the same things and cite the same numbers
    ("always X" / "never X" embed almost alike; so do "port 8080" / "port 8081")."""
    marks_a = sorted(m.lower() for m in _NEGATION.findall(a))
    marks_b = sorted(m.lower() for m in _NEGATION.findall(b))
    return marks_a == marks_b and sorted(_NUMBER.findall(a)) == sorted(_NUMBER.findall(b))


def rank(row: Row) -> tuple[Any, ...]:
    """Which twin to keep: live over resolving, then higher value, priority, support and gain, then newest."""
    try:
        props = json.loads(row.get("properties_json") or "{}")
    except ValueError:
        props = {}
    trace = props.get("trace") if isinstance(props.get("trace"), dict) else {}
    policy = props.get("policy") if isinstance(props.get("policy"), dict) else {}
    return (
        row["status"] == "activated",
        _num(props.get("value"), trace.get("value")),
        _num(props.get("priority"), trace.get("priority")),
        _num(policy.get("support")),
        _num(policy.get("gain")),
        row["created_at"],
        row["updated_at"],
        row["id"],
    )


POLICY_GRACE_DAYS = 7  # Dream never archives a policy younger than this, nor one never injected


@dataclass
class Planned:
    """One change a pass intends to make to one memory."""

    memory_id: str
    action: str
    reason: str
    before: Row
    archive: bool = False
    superseded_by: str | None = None
    tags: list[str] | None = None
    cluster: str | None = None  # the keeper of a duplicate cluster: its changes apply together or not at all
    keeper_row: Row | None = None

    def after_preview(self) -> Row:
        """The row this change would leave (for dry runs; version and timestamps are not predicted)."""
        row = dict(self.before)
        if self.archive:
            row["status"] = "archived"
        if self.superseded_by is not None:
            row["superseded_by"] = self.superseded_by
        if self.tags is not None:
            row["tags_json"] = json.dumps(self.tags, ensure_ascii=False)
        return row


def row_summary(row: Row) -> dict[str, Any]:
    """The few columns a person reads in a dream log."""
    return {
        "status": row.get("status"),
        "version": row.get("version"),
        "tags": _tags(row),
        "supersededBy": row.get("superseded_by"),
        "validTo": row.get("valid_to"),
        "updatedAt": row.get("updated_at"),
    }


def change_json(
    seq: int, memory_id: str, action: str, reason: str, before: Row, after: Row, verbose: bool
) -> dict[str, Any]:
    """The API shape of one change."""
    item: dict[str, Any] = {
        "seq": seq,
        "memoryId": memory_id,
        "action": action,
        "reason": reason,
        "layer": before.get("memory_layer"),
        "title": summarise(str(before.get("title") or before.get("memory_value") or ""), 100),
        "before": dict(before) if verbose else row_summary(before),
        "after": dict(after) if verbose else row_summary(after),
    }
    return item


def count_actions(actions: list[str]) -> dict[str, int]:
    """How many changes of each action."""
    return {name: actions.count(name) for name in ACTIONS}


class DreamPlanner:
    """Computes a pass from the store and the in-memory vector index."""

    def __init__(self, config: Callable[[], MemmyConfig], store: Store, indexer: Indexer) -> None:
        self._config = config
        self.store = store
        self.repo = store.dreams
        self.indexer = indexer

    def _injected(self, ids: list[str]) -> set[str]:
        """Which of ``ids`` were ever injected into an agent's prompt (had a chance to be used)."""
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        rows = self.store.query(
            "SELECT DISTINCT j.value FROM recall_events r, json_each(r.injected_memory_ids_json) j "
            f"WHERE j.value IN ({marks})",
            ids,
        )
        return {str(r[0]) for r in rows}

    def plan(self, moment: datetime) -> tuple[list[Planned], dict[str, Any]]:
        """Compute a pass without writing: contradicted first, then duplicates, then stale items."""
        settings = self._config().dream
        limit = settings.max_changes
        plan: list[Planned] = []
        taken: set[str] = set()
        capped = False
        now = iso(moment)
        for row in self.repo.contradicted(LAYERS, now, limit + 1):
            if len(plan) >= limit:
                capped = True
                break
            reason = (
                f"superseded by {row['superseded_by']}"
                if row.get("superseded_by")
                else f"valid until {row['valid_to']}, which has passed"
            )
            plan.append(Planned(row["id"], "archive_contradicted", reason, row, archive=True))
            taken.add(row["id"])
        since = iso(moment - timedelta(days=settings.lookback_days))
        recent = [r for r in self.repo.recent(LAYERS, since, SCOPE_LIMIT) if r["id"] not in taken]
        clusters, twins, vector_used = self._duplicates(recent, taken, settings.duplicate_similarity)
        for cluster in clusters:
            if len(plan) + len(cluster) > limit:
                capped = True
                continue
            plan.extend(cluster)
            taken.update(p.memory_id for p in cluster)
            taken.add(cluster[0].cluster or "")
        stale_cutoff = iso(moment - timedelta(days=settings.stale_days))
        stale = self.repo.stale_traces(stale_cutoff, STALE_PRIORITY, limit + 1)
        recalled = self.repo.recalled([r["id"] for r in stale])
        archive_gain = self._config().l2_induction.archive_gain
        for row in stale:
            if row["id"] in taken or row["id"] in recalled:
                continue
            if len(plan) >= limit:
                capped = True
                break
            reason = f"priority <= {STALE_PRIORITY}, untouched since {row['updated_at']}, never recalled"
            plan.append(Planned(row["id"], "archive_stale", reason, row, archive=True))
            taken.add(row["id"])
        policies = self.repo.stale_policies(archive_gain, limit + 1)
        grace_cutoff = iso(moment - timedelta(days=POLICY_GRACE_DAYS))
        used = self._injected([r["id"] for r in policies])
        for row in policies:
            if row["id"] in taken:
                continue
            if row["created_at"] > grace_cutoff or row["id"] not in used:
                continue  # grace period: a young policy, or one never injected yet, has not had its chance
            if len(plan) >= limit:
                capped = True
                break
            policy = json.loads(row["properties_json"] or "{}").get("policy") or {}
            reason = (
                "policy archived by evolution"
                if policy.get("status") == "archived"
                else f"policy gain {policy.get('gain')} < archiveGain {archive_gain}"
            )
            plan.append(Planned(row["id"], "archive_stale", reason, row, archive=True))
            taken.add(row["id"])
        stats: dict[str, Any] = {
            "scanned": {"recent": len(recent), "olderTwins": twins},
            "vectorDuplicates": vector_used,
            **count_actions([p.action for p in plan]),
            "changes": len(plan),
            "capped": capped,
            "maxChanges": limit,
        }
        return plan, stats

    def _duplicates(
        self, recent: list[Row], taken: set[str], threshold: float
    ) -> tuple[list[list[Planned]], int, bool]:
        """Clusters of twins among recent memories (and their older twins), each as [merge?, supersede...]."""
        pool: dict[str, Row] = {r["id"]: r for r in recent}
        hashes = {content_hash(r["memory_value"]) for r in recent} | {
            r["content_hash"] for r in recent if r["content_hash"]
        }
        older = 0
        for row in self.repo.live_by_hash(LAYERS, sorted(hashes)):
            if row["id"] not in pool and row["id"] not in taken:
                pool[row["id"]] = row
                older += 1
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def scope(row: Row) -> tuple[Any, ...]:
            return (row["user_id"], row["memory_layer"], row["project_id"])

        by_hash: dict[tuple[Any, ...], str] = {}
        for row in pool.values():
            key = (*scope(row), content_hash(row["memory_value"]))
            if key in by_hash:
                parent[find(row["id"])] = find(by_hash[key])
            else:
                by_hash[key] = row["id"]
        index = self.indexer.index
        to_reference = self.indexer.cosine_scale("texts").to_reference  # the threshold is a MiniLM cosine
        if index is not None:
            pairs: list[tuple[str, str]] = []
            for row in recent:
                vector = index.vector(row["id"])
                if vector is None:
                    continue
                for hit, score in index.search(vector, NEIGHBOURS + 1, layers=[row["memory_layer"]]):
                    if hit != row["id"] and to_reference(score) >= threshold and hit not in taken:
                        pairs.append((row["id"], hit))
            missing = sorted({b for _a, b in pairs if b not in pool})
            for hit_id, hit_row in self.repo.memory_rows(missing).items():
                if hit_row["status"] in LIVE_STATUSES:
                    pool[hit_id] = hit_row
                    older += 1
            for a, b in pairs:
                if b in pool and scope(pool[a]) == scope(pool[b]):
                    if compatible(pool[a]["memory_value"], pool[b]["memory_value"]):
                        parent[find(a)] = find(b)
        groups: dict[str, list[Row]] = {}
        for memory_id, row in pool.items():
            groups.setdefault(find(memory_id), []).append(row)
        clusters = [self._cluster(rows, threshold, to_reference) for rows in groups.values() if len(rows) > 1]
        clusters = [c for c in clusters if c]
        clusters.sort(key=lambda c: c[-1].memory_id)
        return clusters, older, index is not None

    def _cluster(self, rows: list[Row], threshold: float, to_reference: Callable[[float], float]) -> list[Planned]:
        """Keep the best row; supersede those that are its twins directly (same content, or cosine to it, read on
        MiniLM's scale through ``to_reference``)."""
        rows.sort(key=rank, reverse=True)
        keeper, others = rows[0], rows[1:]
        keeper_hash = content_hash(keeper["memory_value"])
        index = self.indexer.index
        keeper_vector = index.vector(keeper["id"]) if index is not None else None
        changes: list[Planned] = []
        tags = _tags(keeper)
        for row in others:
            if content_hash(row["memory_value"]) == keeper_hash:
                reason = f"duplicate of {keeper['id']} (same content)"
            else:
                vector = index.vector(row["id"]) if index is not None else None
                if keeper_vector is None or vector is None:
                    continue
                score = float(np.dot(keeper_vector, vector))
                if to_reference(score) < threshold or not compatible(keeper["memory_value"], row["memory_value"]):
                    continue
                reason = f"near-duplicate of {keeper['id']} (cosine {score:.3f})"
            changes.append(Planned(row["id"], "supersede", reason, row, archive=True, superseded_by=keeper["id"]))
            tags = list(dict.fromkeys([*tags, *_tags(row)]))
        if not changes:
            return []
        if tags != _tags(keeper):
            merged = ", ".join(p.memory_id for p in changes)
            changes.insert(0, Planned(keeper["id"], "merge", f"kept; took the tags of {merged}", keeper, tags=tags))
        for planned in changes:
            planned.cluster, planned.keeper_row = keeper["id"], keeper
        return changes
