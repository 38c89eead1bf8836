"""MemoryService: the one facade the HTTP API, CLI, MCP server, hooks and importers call."""

from __future__ import annotations

import time
from typing import TypeVar

from memmy import __version__
from memmy.commands.admin import ReloadConfig
from memmy.commands.answers import (
    CanaryPurged,
    ConfigReloaded,
    DreamLogPage,
    DreamPass,
    DreamRecord,
    DreamRestored,
    FeedbackRecorded,
    Health,
    Items,
    JobList,
    KeyAnswer,
    MemoryAdded,
    MemoryArchived,
    MemoryDeleted,
    MemoryDetail,
    MemoryHistory,
    MemoryRestored,
    ProcessingRetried,
    SearchAnswer,
    SessionClosed,
    SessionOpened,
    TombstoneList,
    TombstoneRestored,
    TurnCompleted,
    TurnStarted,
    WorkerRun,
)
from memmy.commands.base import Command
from memmy.commands.dream import DreamGet, DreamLog, DreamRestore, DreamRun
from memmy.commands.evolution import Feedback, ListEpisodes, ListJobs, RunWorker
from memmy.commands.governance import ListTombstones, RestoreTombstone
from memmy.commands.memory import (
    AddMemory,
    ArchiveMemory,
    DeleteMemory,
    ProcessingStatus,
    PurgeCanary,
    RestoreMemory,
    SearchMemory,
)
from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn
from memmy.config import Configured, MemmyConfig, load_config, reload_requires_restart
from memmy.embed import Embedder
from memmy.errors import ConfigError, InvalidArgument
from memmy.keys.args import KeyArgs
from memmy.namespace import Namespace
from memmy.service.bootstrap import Components, bootstrap, build_redactor, embedder_factory
from memmy.service.governance import brief
from memmy.service.models import build_model_clients
from memmy.service.team import TeamOps
from memmy.store.db import Database, utc_now
from memmy.store.episodes import EpisodeRepository, FeedbackRepository
from memmy.store.evolution import EvolutionRepository
from memmy.store.jobs import JobRepository
from memmy.store.logs import LogRepository
from memmy.store.memories import MemoryRepository
from memmy.store.queue import EmbeddingQueue
from memmy.store.schema import SCHEMA_VERSION
from memmy.store.sessions import SessionRepository
from memmy.store.vectors import VectorRepository

C = TypeVar("C", bound=Command)

ROUTE_NAMES = (
    "GET /api/v1/health",
    "POST /api/v1/sessions/open",
    "POST /api/v1/sessions/:sessionId/close",
    "POST /api/v1/turns/start",
    "POST /api/v1/turns/:turnId/complete",
    "POST /api/v1/memory/search",
    "POST /api/v1/memory/add",
    "GET /api/v1/memory/:id",
    "DELETE /api/v1/memory/:id",
    "POST /api/v1/memory/:id/archive",
    "GET /api/v1/memory/logs",
    "POST /api/v1/memory/processing/status",
    "POST /api/v1/memory/:id/processing/retry",
    "GET /api/v1/panel/overview",
    "GET /api/v1/panel/analysis",
    "GET /api/v1/panel/items",
    "GET /api/v1/panel/tasks",
    "POST /api/v1/admin/reload-config",
    "POST /api/v1/admin/shutdown",
    "POST /api/v1/worker/run",
    "GET /api/v1/sources",
    "POST /api/v1/sources/scan",
    "GET /api/v1/sources/scan/:jobId",
    "POST /api/v1/sources/scan/:jobId/pause",
    "POST /api/v1/sources/scan/:jobId/resume",
    "POST /api/v1/sources/scan/:jobId/stop",
    "GET /api/v1/sources/scan/:jobId/events",
    "POST /api/v1/keys/:op",
    "GET /api/v1/memory/:id/history",
    "GET /api/v1/tombstones",
    "POST /api/v1/feedback",
    "GET /api/v1/episodes",
    "GET /api/v1/evolution/jobs",
    "POST /api/v1/tombstones/:id/restore",
    "POST /api/v1/dream/run",
    "GET /api/v1/dream/log",
    "GET /api/v1/dream/:id",
    "POST /api/v1/dream/:id/restore",
    "GET /api/v1/logs",
    "GET /api/v1/review",
    "POST /api/v1/review/:id",
    "POST /api/v1/admin/export",
    "POST /api/v1/admin/import",
    "POST /api/v1/admin/wipe",
    "POST /api/v1/panel/sign-in",
)
#: Key-graph operations that change what agents are told: each writes an audit row.
AUDITED_KEY_OPS = ("correct", "forget", "dismiss", "confirm_memory")
CLI_NS = Namespace(source="cli")


class MemoryService(Configured):
    """The object the edges (server, CLI, MCP, panel) hold: the parts :func:`bootstrap` built, and the use cases."""

    def __init__(self, parts: Components) -> None:
        """Hold what :func:`~memmy.service.bootstrap.bootstrap` built (``MemoryService.open`` does both)."""
        self.settings = parts.settings
        self.store = parts.store
        self.redactor = parts.redactor
        self.indexer = parts.indexer
        self.models = parts.models
        self.model_slots = parts.model_slots
        self.memory_ops = parts.memory_ops
        self.recall_ops = parts.recall_ops
        self.episode_ops = parts.episode_ops
        self.worker = parts.worker
        self.evolution_groups = parts.evolution_groups
        self.trace_writer = parts.trace_writer
        self.turn_ops = parts.turn_ops
        self.panel = parts.panel
        self.imports = parts.imports
        self.keys = parts.keys
        self.validity = parts.validity
        self.dreams = parts.dreams
        self.governance = parts.governance
        self.data = parts.data
        self.ownership = parts.ownership
        self.team = TeamOps(parts.store.team, parts.governance, parts.settings.current.user_id)
        self.started = time.monotonic()

    @classmethod
    def open(cls, config: MemmyConfig, embedder: Embedder | None = None) -> MemoryService:
        """Open the configured store (migrating it if needed) and build the service."""
        return cls(bootstrap(config, embedder))

    # Repositories, for tests and tools that read the store directly (all owned by ``self.store``).
    @property
    def db(self) -> Database:
        """The SQLite connection under the store."""
        return self.store.db

    @property
    def memories(self) -> MemoryRepository:
        """``store.memories``."""
        return self.store.memories

    @property
    def logs(self) -> LogRepository:
        """``store.logs``."""
        return self.store.logs

    @property
    def sessions(self) -> SessionRepository:
        """``store.sessions``."""
        return self.store.sessions

    @property
    def queue(self) -> EmbeddingQueue:
        """``store.queue``."""
        return self.store.queue

    @property
    def vectors(self) -> VectorRepository:
        """``store.vectors``."""
        return self.store.vectors

    @property
    def episodes(self) -> EpisodeRepository:
        """``store.episodes``."""
        return self.store.episodes

    @property
    def feedback(self) -> FeedbackRepository:
        """``store.feedback``."""
        return self.store.feedback

    @property
    def evolution(self) -> EvolutionRepository:
        """``store.evolution``."""
        return self.store.evolution

    @property
    def jobs(self) -> JobRepository:
        """``store.jobs``."""
        return self.store.jobs

    def start_background(self) -> None:
        """Load the vector index, start the embedding and evolution workers and the WAL checkpoints (the daemon
        calls this under its lock)."""
        self.queue.release_leases()
        self.jobs.release_all_leases()
        self.indexer.load_index()
        self.db.checkpoint_in_background()
        self.indexer.start()
        self.worker.start()

    def close(self) -> None:
        """Stop background work and close the store."""
        for job in list(self.imports.jobs.values()):
            job.control.stop()
            if job.thread is not None:
                job.thread.join(timeout=30)
        self.worker.stop()
        self.indexer.stop()
        self.recall_ops.engine.close()  # its read-only connection first, so the checkpoint can truncate the WAL
        self.store.close()

    def redacted(self, command: C) -> C:
        """A typed request with every secret in its text replaced, before any write, log or job sees it."""
        return command.redacted(self.redactor)

    # -- memory -----------------------------------------------------------------------------------
    def add_memory(self, cmd: AddMemory, ns: Namespace) -> MemoryAdded:
        """Write one memory."""
        return self.memory_ops.add(self.redacted(cmd), ns)

    def get_memory(
        self, memory_id: str, *, include_deleted: bool = False, ns: Namespace | None = None
    ) -> MemoryDetail:
        """Read one memory with its refs and history (an ``episode_…`` id returns the episode); ``ns``: only one
        the caller may read."""
        if isinstance(memory_id, str) and memory_id.startswith("episode_"):
            return self.episode_ops.episode_detail(memory_id)
        return self.memory_ops.get(memory_id, include_deleted=include_deleted, ns=ns)

    # -- evolution --------------------------------------------------------------------------------
    def give_feedback(self, cmd: Feedback, ns: Namespace) -> FeedbackRecorded:
        """Explicit feedback on a memory or an episode; the reward and guidance follow asynchronously."""
        cmd = self.redacted(cmd)
        result = self.episode_ops.give_feedback(cmd, ns.user_id)
        self.governance.record("feedback", "feedback", cmd.id, ns, after=cmd.audit_json())
        self.worker.wake()
        return result

    def list_episodes(self, cmd: ListEpisodes) -> Items:
        """Recent episodes (``?status=open|closed&limit=``)."""
        items = [e.to_json() for e in self.episodes.list_recent(cmd.limit, cmd.status)]
        return {"items": items, "serverTime": utc_now()}

    def list_jobs(self, cmd: ListJobs) -> JobList:
        """Evolution jobs (``?status=&type=&episodeId=&limit=``) and per-status counts."""
        jobs = self.jobs.list_jobs(status=cmd.status, job_type=cmd.job_type, episode_id=cmd.episode_id, limit=cmd.limit)
        return {"items": [j.as_dict() for j in jobs], "counts": self.jobs.counts(), "serverTime": utc_now()}

    def delete_memory(self, memory_id: str, cmd: DeleteMemory, ns: Namespace) -> MemoryDeleted:
        """Delete (hide) one memory; :meth:`restore_memory` undoes it."""
        return self.memory_ops.delete(memory_id, self.redacted(cmd), ns)

    def purge_canary(self, cmd: PurgeCanary) -> CanaryPurged:
        """Remove what a ``doctor --canary`` run wrote (only turns holding its marker)."""
        return self.memory_ops.purge_canary(cmd)

    def restore_memory(self, memory_id: str, cmd: RestoreMemory, ns: Namespace) -> MemoryRestored:
        """Bring a deleted memory back."""
        return self.memory_ops.restore(memory_id, self.redacted(cmd), ns)

    def archive_memory(self, memory_id: str, cmd: ArchiveMemory, ns: Namespace) -> MemoryArchived:
        """Archive one memory."""
        return self.memory_ops.archive(memory_id, ns, self.redacted(cmd).reason)

    def search(self, cmd: SearchMemory, ns: Namespace) -> SearchAnswer:
        """Search memories and render injectable context."""
        return self.recall_ops.search(self.redacted(cmd), ns)

    def processing_status(self, cmd: ProcessingStatus) -> Items:
        """Processing records for memories."""
        return self.memory_ops.processing_status(cmd)

    def retry_processing(self, memory_id: str) -> ProcessingRetried:
        """Retry a failed embedding."""
        return self.memory_ops.retry_processing(memory_id)

    def memory_history(self, memory_id: str) -> MemoryHistory:
        """The version chain of a memory (oldest -> newest)."""
        return self.validity.history(memory_id)

    # -- key graph and tombstones -----------------------------------------------------------------
    def keys_call(self, args: KeyArgs, ns: Namespace) -> KeyAnswer:
        """One key-graph tool (``POST /api/v1/keys/<op>``) with its typed arguments; keymem's result."""
        args = self.redacted(args)
        result = self.keys.call(args, ns)
        if args.op in AUDITED_KEY_OPS:
            self.governance.record(
                f"memory.{args.op}", "memory", args.memory_target, ns, after=result, meta={"args": args.to_json()}
            )
        return result

    def list_tombstones(self, cmd: ListTombstones) -> TombstoneList:
        """Forgotten values."""
        return self.validity.list_tombstones(cmd)

    def restore_tombstone(self, tombstone_id: str, cmd: RestoreTombstone, ns: Namespace) -> TombstoneRestored:
        """Allow a forgotten value again (audited inside)."""
        return self.validity.restore(tombstone_id, self.redacted(cmd), ns)

    # -- sessions and turns -----------------------------------------------------------------------
    def open_session(self, command: OpenSession, ns: Namespace) -> SessionOpened:
        """Open or resume a session."""
        return self.turn_ops.open_session(command.redacted(self.redactor), ns)

    def close_session(self, command: CloseSession) -> SessionClosed:
        """Close a session."""
        return self.turn_ops.close_session(command)

    def start_turn(self, command: StartTurn, ns: Namespace) -> TurnStarted:
        """Turn start: recall context."""
        return self.turn_ops.start_turn(command.redacted(self.redactor), ns)

    def complete_turn(self, command: CompleteTurn, ns: Namespace) -> TurnCompleted:
        """Turn complete: capture (the trace writer redacts the turn)."""
        return self.turn_ops.complete_turn(command, ns)

    # -- admin ------------------------------------------------------------------------------------
    def health(self) -> Health:
        """Liveness plus storage, model and queue facts (no secrets)."""
        fingerprint = None
        embedder_error = self.indexer.last_error
        try:
            fp = self.indexer.embedder.fingerprint
            fingerprint = {"provider": fp.provider, "model": fp.model, "dim": fp.dim}
        except Exception as exc:  # noqa: BLE001 - health must always answer
            embedder_error = str(exc)
        queue = self.queue.counts()
        index = self.indexer.index
        reembed = self.indexer.reembed
        return {
            "ok": True,
            "version": __version__,
            "uptimeMs": int((time.monotonic() - self.started) * 1000),
            "mode": "local",
            "activeProfile": self.config.active_profile,
            "storage": {
                "backend": "sqlite",
                "backendId": "sqlite-local",
                "path": str(self.config.storage.sqlite_path),
                "schemaVersion": str(SCHEMA_VERSION),
                "ready": True,
                "lastMigrationId": self.db.migration.last_migration_id,
                "fullText": "fts5",
                "vector": "in-memory-exact",
                "vectorCount": len(index) if index is not None else 0,
                "changeLog": True,
                "idempotency": True,
                "jobs": True,
            },
            "models": {
                "summary": {
                    "provider": self.config.summary.provider,
                    "model": self.config.summary.model,
                    "configured": self.config.summary.configured,
                },
                "evolution": {
                    "provider": self.config.evolution.provider,
                    "model": self.config.evolution.model,
                    "configured": self.config.evolution.configured,
                },
                "embedding": {
                    "provider": self.config.embedding.provider,
                    "model": self.config.embedding.model,
                    "configured": True,
                    "remote": self.config.embedding.provider != "local",
                    "fingerprint": fingerprint,
                    "lastOkAt": self.indexer.last_ok_at_iso,
                    "lastError": embedder_error,
                },
            },
            "evolution": {
                "jobs": self.jobs.counts(),
                "workerRunning": self.worker.running,
                "workerLastError": self.worker.last_error,
                "llmUsage": self.models.usage_report(),
            },
            "embeddingQueue": {
                "pending": queue.get("pending", 0) + queue.get("in_progress", 0),
                "failed": queue.get("failed", 0),
                "reembedTotal": reembed.total,
            },
            "capabilities": {
                "routes": list(ROUTE_NAMES),
                "tools": [
                    "session.open",
                    "session.close",
                    "turn.start",
                    "turn.complete",
                    "memory.search",
                    "memory.add",
                    "memory.get",
                    "memory.delete",
                    "panel.overview",
                    "panel.analysis",
                    "panel.items",
                ],
                "memoryLayers": ["L1", "L2", "L3", "Skill"],
                "supportsCli": True,
            },
            "serverTime": utc_now(),
        }

    def reload_config(self, cmd: ReloadConfig | None = None, ns: Namespace = CLI_NS) -> ConfigReloaded:
        """Re-read config.yaml; apply retrieval/evolution/model settings now, report storage changes."""
        result = self._reload_config(self.redacted(cmd or ReloadConfig()))
        self.governance.record("config.reload", "config", str(self.config.path), ns, meta=result)
        return result

    def _reload_config(self, cmd: ReloadConfig) -> ConfigReloaded:
        old = self.config
        try:
            new = load_config(old.path, db_override=old.db_override)
        except ConfigError as exc:
            raise InvalidArgument(f"config not reloaded: {exc.message}") from exc
        requires_restart = reload_requires_restart(old, new)
        try:
            redactor = build_redactor(new)
        except ConfigError as exc:
            raise InvalidArgument(f"config not reloaded: {exc.message}") from exc
        changed = [key for key in new.tree if new.tree.get(key) != old.tree.get(key)]
        embedding_changed = new.tree["embedding"] != old.tree["embedding"]
        # Storage cannot change under a running daemon: keep the old storage view until restart.
        effective_tree = dict(new.tree)
        effective_tree["storage"] = old.tree["storage"]
        effective_tree["server"] = old.tree["server"]
        self.settings.current = MemmyConfig(  # every ops group holds ``settings``: this one swap reaches all of them
            path=new.path,
            home=new.home,
            exists=new.exists,
            tree=effective_tree,
            storage=old.storage,
            server=old.server,
            summary=new.summary,
            evolution=new.evolution,
            embedding=new.embedding,
            warnings=new.warnings,
            db_override=old.db_override,
        )
        self.redactor = self.imports.redactor = self.trace_writer.redactor = redactor
        self.indexer.batch_size = new.embedding.batch_size
        self.models.replace_with(build_model_clients(self.config, self.store))
        self.model_slots.summary, self.model_slots.evolution = self.models.summary, self.models.evolution
        if embedding_changed:
            self.indexer.replace_embedder(embedder_factory(self.config))
        retried = self.queue.retry_failed() if cmd.restart_failed_processing else 0
        return {
            "activeProfile": self.config.active_profile,
            "changed": changed,
            "requiresRestart": requires_restart,
            "restartedFailedProcessing": retried,
            "models": self.health()["models"],
            "warnings": list(new.warnings),
            "reason": cmd.reason,
            "reloadedAt": utc_now(),
        }

    def run_worker(self, cmd: RunWorker | None = None) -> WorkerRun:
        """Run due work now: embeddings first (L2 association needs vectors), then evolution jobs, until idle.

        ``limit`` caps the evolution jobs run (default 20); ``targetMemoryIds`` restricts them.
        """
        cmd = cmd or RunWorker()
        limit = cmd.limit
        targets = list(cmd.target_memory_ids) or None
        embedded = embed_failed = 0
        reports = []
        ran = 0
        while True:
            while True:
                ok, bad = self.indexer.run_once(self.indexer.batch_size)
                embedded, embed_failed = embedded + ok, embed_failed + bad
                if ok == 0 and bad == 0:
                    break
            if ran >= limit:
                break
            report = self.worker.drain(min(limit - ran, 50), target_memory_ids=targets)
            reports.append(report)
            ran += report.leased
            if report.leased == 0:
                break
        seq = self.logs.latest_change_seq()
        return {
            "leased": sum(r.leased for r in reports),
            "succeeded": sum(r.succeeded for r in reports),
            "failed": sum(r.failed for r in reports),
            "jobs": [job for r in reports for job in r.jobs],
            "embeddingRetries": {"leased": embedded + embed_failed, "succeeded": embedded, "failed": embed_failed},
            "changeSeq": seq,
            "syncCursor": f"seq:{seq}",
            "serverTime": utc_now(),
        }

    # -- dream ------------------------------------------------------------------------------------
    def dream_run(self, cmd: DreamRun | None = None, ns: Namespace = CLI_NS) -> DreamPass:
        """One Dream pass now (``{"dryRun": true}`` only reports what it would change)."""
        cmd = cmd or DreamRun()
        result = self.dreams.run(cmd)
        if not cmd.dry_run:
            self.governance.record("dream.run", "dream", str(result.get("id") or ""), ns, meta=brief(result))
        return result

    def dream_log(self, cmd: DreamLog | None = None) -> DreamLogPage:
        """Past Dream passes, newest first, with counts per action."""
        return self.dreams.log(cmd or DreamLog())

    def dream_get(self, dream_id: str, cmd: DreamGet | None = None) -> DreamRecord:
        """One Dream pass and its changes (full rows with ``verbose``)."""
        return self.dreams.get(dream_id, cmd or DreamGet())

    def dream_restore(self, dream_id: str, cmd: DreamRestore | None = None, ns: Namespace = CLI_NS) -> DreamRestored:
        """Undo a Dream pass byte for byte (``{"force": true}`` overwrites later edits)."""
        result = self.dreams.restore(dream_id, cmd or DreamRestore())
        self.governance.record("dream.restore", "dream", dream_id, ns, meta=brief(result))
        return result
