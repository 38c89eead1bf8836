"""Dream: a reversible consolidation pass over recent L1/L2 memories.

Upstream's Dream rewrites markdown memory files and relies on git for rollback (reference §5.8); ours works on
the SQLite store. One pass merges duplicates (same normalised content, or cosine >= ``duplicateSimilarity`` in
the same layer and scope), archives stale traces and policies, and archives memories whose validity ended or
that were superseded. Everything is computed first and then written in one transaction, and every changed
memory is recorded as its full row before and after, so ``restore`` can put the store back byte for byte.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from memmy.commands.answers import DreamLogPage, DreamPass, DreamRestored
from memmy.commands.answers import DreamRecord as DreamRecordAnswer
from memmy.commands.dream import DreamGet, DreamLog, DreamRestore, DreamRun
from memmy.config import DreamSettings, Settings
from memmy.domain import new_id
from memmy.dream.plan import DreamPlanner, Planned, change_json, count_actions, iso
from memmy.errors import Conflict, Forbidden, InvalidArgument, MemmyError, NotFound
from memmy.indexing import Indexer
from memmy.store.db import utc_now
from memmy.store.dreams import DreamChange, DreamRecord, Row
from memmy.store.logs import append_change
from memmy.store.unit import Store

log = logging.getLogger("memmy.dream")


class DreamOps:
    """``dream run | log | show | restore`` and the scheduled run."""

    def __init__(self, settings: Settings, store: Store, indexer: Indexer) -> None:
        self._config = settings
        self.store = store
        self.memories = store.memories
        self.indexer = indexer
        self.repo = store.dreams
        self.planner = DreamPlanner(settings, store, indexer)
        self._running = threading.Lock()

    @property
    def settings(self) -> DreamSettings:
        """The current settings (read on every call: config reloads apply at once)."""
        return self._config().dream

    def _check_writable(self) -> None:
        if not self._config().flags.enable_memory_add:
            raise Forbidden("memory writes are disabled (algorithm.enableMemoryAdd: false)")

    # -- run ----------------------------------------------------------------------------------------
    def run(self, cmd: DreamRun, *, trigger: str = "manual", now: datetime | None = None) -> DreamPass:
        """One pass. ``{"dryRun": true}`` reports what would change and writes nothing."""
        dry_run = cmd.dry_run
        if not dry_run:
            self._check_writable()
        moment = now or datetime.now(UTC)
        if not self._running.acquire(blocking=False):
            raise Conflict("a dream is already running; wait for it to finish")
        try:
            if dry_run:
                plan, stats = self.planner.plan(moment)
                return self._result(None, "dry_run", trigger, iso(moment), None, stats, plan, dry_run=True)
            return self._run_and_record(trigger, moment)
        finally:
            self._running.release()

    def _run_and_record(self, trigger: str, moment: datetime) -> DreamPass:
        self.repo.fail_interrupted(utc_now())
        dream_id = new_id("dream")
        started = utc_now()
        self.repo.start(dream_id, trigger, started)
        try:
            plan, stats = self.planner.plan(moment)
            applied, archived = self._apply(dream_id, plan, stats)
        except Exception as exc:
            message = exc.message if isinstance(exc, MemmyError) else f"{type(exc).__name__}: {exc}"
            with self.store.transaction() as conn:
                self.repo.finish(conn, dream_id, "failed", {}, utc_now(), message)
            log.exception("dream %s failed", dream_id)
            raise
        for memory_id in archived:  # only after the commit: a rolled-back pass must not leave holes in the index
            self.indexer.unindex(memory_id)
        record = self.repo.get(dream_id)
        finished = record.finished_at if record else utc_now()
        changes = [change_json(c.seq, c.memory_id, c.action, c.reason, c.before, c.after, False) for c in applied]
        result = self._result(dream_id, "succeeded", trigger, started, finished, stats, [], dry_run=False)
        result["changes"] = changes
        return result

    def _result(
        self,
        dream_id: str | None,
        status: str,
        trigger: str,
        started: str,
        finished: str | None,
        stats: dict[str, Any],
        plan: list[Planned],
        *,
        dry_run: bool,
    ) -> DreamPass:
        changes = [
            change_json(seq, p.memory_id, p.action, p.reason, p.before, p.after_preview(), False)
            for seq, p in enumerate(plan, start=1)
        ]
        return {
            "id": dream_id,
            "dryRun": dry_run,
            "status": status,
            "trigger": trigger,
            "startedAt": started,
            "finishedAt": finished,
            "stats": stats,
            "changes": changes,
            "serverTime": utc_now(),
        }

    def run_if_due(self, now: datetime | None = None) -> str | None:
        """Run a scheduled pass when ``dream.enabled`` and the last pass began ``intervalHours`` ago or more;
        returns the new dream id, or None when nothing was due (the evolution worker calls this)."""
        settings = self.settings
        if not settings.enabled or not self._config().flags.enable_memory_add:
            return None
        moment = now or datetime.now(UTC)
        last = self.repo.last_started_at()
        if last is not None and last > iso(moment - timedelta(hours=settings.interval_hours)):
            return None
        try:
            result = self.run(DreamRun(), trigger="scheduled", now=moment)
        except Conflict:
            return None  # a manual pass is running right now
        dream_id: str | None = result["id"]
        return dream_id

    # -- writing ------------------------------------------------------------------------------------
    def _apply(self, dream_id: str, plan: list[Planned], stats: dict[str, Any]) -> tuple[list[DreamChange], list[str]]:
        """Write a plan in one transaction; a change whose rows moved since planning is skipped (with its
        whole duplicate cluster). Returns the recorded changes and the ids that were archived."""
        source = f"dream:{dream_id}"
        applied: list[DreamChange] = []
        archived: list[str] = []
        with self.store.transaction() as conn:
            expected: dict[str, Row] = {}
            for planned in plan:
                expected[planned.memory_id] = planned.before
                if planned.cluster is not None and planned.keeper_row is not None:
                    expected.setdefault(planned.cluster, planned.keeper_row)
            current = self.repo.memory_rows(sorted(expected))
            moved = {memory_id for memory_id, row in expected.items() if current.get(memory_id) != row}
            broken = {p.cluster for p in plan if p.cluster and (p.memory_id in moved or p.cluster in moved)}
            stamp = utc_now()
            for planned in plan:
                memory = self.memories.get(planned.memory_id)
                if planned.memory_id in moved or planned.cluster in broken or memory is None:
                    continue
                before = memory.snapshot()
                if planned.archive:
                    memory.status = "archived"
                if planned.superseded_by is not None:
                    memory.superseded_by = planned.superseded_by
                if planned.tags is not None:
                    memory.tags = planned.tags
                memory.version += 1
                memory.updated_at = stamp
                self.memories.update(memory, before, "archive" if planned.archive else "merge", source)
                after = self.repo.memory_row(planned.memory_id) or {}
                change = DreamChange(
                    dream_id,
                    len(applied) + 1,
                    planned.memory_id,
                    planned.action,
                    current[planned.memory_id],
                    after,
                    planned.reason,
                )
                self.repo.add_change(conn, change)
                applied.append(change)
                if planned.archive:
                    archived.append(planned.memory_id)
            stats.update(count_actions([c.action for c in applied]))
            stats["changes"] = len(applied)
            stats["skipped"] = len(plan) - len(applied)
            self.repo.finish(conn, dream_id, "succeeded", stats, utc_now())
        return applied, archived

    # -- reading ------------------------------------------------------------------------------------
    def _require(self, dream_id: str) -> DreamRecord:
        if not isinstance(dream_id, str) or not dream_id.strip():
            raise InvalidArgument("id: expected a dream id")
        record = self.repo.get(dream_id.strip())
        if record is None:
            raise NotFound(f"dream {dream_id} not found")
        return record

    def log(self, cmd: DreamLog) -> DreamLogPage:
        """Dreams newest first with their counts per action (``limit``, ``offset``), and the schedule."""
        limit, offset = cmd.limit, cmd.offset
        records, total = self.repo.page(limit, offset)
        settings = self.settings
        last = self.repo.last_started_at()
        next_due: str | None = None
        if settings.enabled:
            next_due = (
                iso(datetime.fromisoformat(last) + timedelta(hours=settings.interval_hours)) if last else utc_now()
            )
        return {
            "dreams": [r.to_json() for r in records],
            "total": total,
            "schedule": {
                "enabled": settings.enabled,
                "intervalHours": settings.interval_hours,
                "lastRunAt": last,
                "nextDueAt": next_due,
            },
            "serverTime": utc_now(),
        }

    def get(self, dream_id: str, cmd: DreamGet) -> DreamRecordAnswer:
        """One dream and its changes (before/after summaries; the full rows with ``verbose``)."""
        verbose = cmd.verbose
        record = self._require(dream_id)
        changes = [
            change_json(c.seq, c.memory_id, c.action, c.reason, c.before, c.after, verbose)
            for c in self.repo.changes(record.id)
        ]
        return cast(DreamRecordAnswer, {**record.to_json(), "changes": changes, "serverTime": utc_now()})

    # -- restore ------------------------------------------------------------------------------------
    def restore(self, dream_id: str, cmd: DreamRestore) -> DreamRestored:
        """Undo a dream: every changed row goes back to its "before" state verbatim (all columns), in one
        transaction. Refused when a changed memory was modified since, unless ``{"force": true}``."""
        force = cmd.force
        self._check_writable()
        if not self._running.acquire(blocking=False):
            raise Conflict("a dream is running; restore after it finishes")
        try:
            return self._restore(dream_id, force)
        finally:
            self._running.release()

    def _restore(self, dream_id: str, force: bool) -> DreamRestored:
        record = self._require(dream_id)
        if record.status == "restored":
            raise Conflict(f"dream {record.id} was already restored at {record.restored_at}")
        if record.status != "succeeded":
            raise Conflict(f"dream {record.id} is {record.status}; only a succeeded dream can be restored")
        changes = self.repo.changes(record.id)
        source = f"dream-restore:{record.id}"
        with self.store.transaction() as conn:
            final = {c.memory_id: c.after for c in changes}  # the row each memory was left in
            current = self.repo.memory_rows(sorted(final))
            modified: list[str] = []
            skipped: list[dict[str, str]] = []
            for memory_id, after in final.items():
                row = current.get(memory_id)
                if row is None:
                    skipped.append({"memoryId": memory_id, "reason": "no longer exists"})
                elif row["status"] == "deleted" and after.get("status") != "deleted":
                    skipped.append({"memoryId": memory_id, "reason": "deleted after the dream; not brought back"})
                elif {name: row.get(name) for name in after} != after:  # columns added later are ignored
                    modified.append(memory_id)
            if (modified or skipped) and not force:
                names = [*modified, *(s["memoryId"] for s in skipped)]
                shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
                raise Conflict(
                    f"dream {record.id} cannot be restored: {len(names)} memories changed after it ({shown}); "
                    'restore with force (--force / {"force": true}) to overwrite those changes'
                )
            columns = self.repo.memory_columns()
            skip = {s["memoryId"] for s in skipped}
            for change in reversed(changes):
                if change.memory_id in skip:
                    continue
                now_memory = self.memories.get(change.memory_id, include_deleted=True)
                self.repo.write_memory_row(conn, change.before, columns)
                restored = self.memories.get(change.memory_id, include_deleted=True)
                if now_memory is not None and restored is not None:
                    append_change(conn, restored, "restore", now_memory.snapshot(), restored.snapshot(), source)
            restored_at = utc_now()
            put_back = sorted(set(final) - skip)
            summary: dict[str, object] = {
                "memories": len(put_back),
                "overwritten": modified,
                "skipped": skipped,
                "force": force,
            }
            self.repo.mark_restored(conn, record.id, restored_at, {**record.stats, "restore": summary})
        self._reindex(put_back)
        return {
            "id": record.id,
            "status": "restored",
            "restoredAt": restored_at,
            "memories": len(put_back),
            "overwritten": modified,
            "skipped": skipped,
            "force": force,
            "changes": len(changes),
            "serverTime": utc_now(),
        }

    def _reindex(self, memory_ids: list[str]) -> None:
        """Bring the in-memory vector index in line with restored rows (the vectors never left SQLite)."""
        rows = self.repo.memory_rows(memory_ids)
        stamp = utc_now()
        live = [
            memory_id
            for memory_id, row in rows.items()
            if row["status"] == "activated" and (row["valid_to"] is None or row["valid_to"] > stamp)
        ]
        for memory_id in set(memory_ids) - set(live):
            self.indexer.unindex(memory_id)
        index = self.indexer.index
        if index is None or not live:
            return  # the next load_index() picks them up from SQLite
        try:
            fingerprint = self.indexer.embedder.fingerprint
        except MemmyError:
            return
        if fingerprint.dim != index.dim:
            return
        for memory_id, vector_field, vector, meta in self.repo.vectors_for(
            live, fingerprint.provider, fingerprint.model, fingerprint.dim
        ):
            index.upsert(memory_id, vector_field, vector, meta)
