"""History import operations of the facade: detected sources, import jobs (pause/resume/stop), the turn sink."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from memmy.capture.trace import build_trace_step, normalize_tool_calls
from memmy.commands.validate import opt_bool, opt_int, opt_iso_time, opt_list, opt_str, require_object
from memmy.config import MemmyConfig
from memmy.domain import Memory, content_hash, new_id, sha256_hex
from memmy.errors import Conflict, Forbidden, InvalidArgument, NotFound
from memmy.indexing import Indexer
from memmy.namespace import normalise_source
from memmy.redact import DEFAULT_REDACTOR, Redactor
from memmy.sources.adapters import ADAPTERS
from memmy.sources.importer import Importer, ImportOptions, ImportProgress, JobControl, TurnState
from memmy.sources.model import SourceAdapter
from memmy.sources.recipe import load_recipes
from memmy.sources.turns import ImportedTurn
from memmy.store.db import Database, utc_now
from memmy.store.imports import ImportStateRepository
from memmy.store.memories import MemoryRepository
from memmy.store.sessions import SessionRepository
from memmy.store.tombstones import TombstoneRepository, value_hash

#: A job started with ``stopOnDisconnect`` and followed by nobody for this long is abandoned (its client died).
FOLLOW_GRACE_S = 10.0
#: How long a new import waits for a stopped (or abandoned) one to reach its next turn boundary and end.
STOP_WAIT_S = 30.0
FINAL_STATES = ("done", "stopped", "failed")


def import_key(source: str, turn_id: str) -> str:
    """The memory key of an imported turn (stable across syncs)."""
    return f"memory.add:agent-source:{source}:turn:{turn_id}"


class ServiceTurnSink:
    """Writes imported turns as L1 memories (with their raw turn), each in one transaction."""

    def __init__(
        self,
        config: MemmyConfig,
        db: Database,
        memories: MemoryRepository,
        sessions: SessionRepository,
        indexer: Indexer,
    ) -> None:
        self.config = config
        self.db = db
        self.memories = memories
        self.sessions = sessions
        self.indexer = indexer
        self.tombstones = TombstoneRepository(db)
        self._sessions: set[str] = set()

    def batch(self) -> AbstractContextManager[Any]:
        """One transaction around many turns (far fewer commits); each turn still has its own savepoint."""
        return self.db.transaction()

    def turn_state(self, source: str, turn_id: str) -> TurnState:
        """new | exists | tombstoned (forgotten by the user). A turn deleted and then restored (tombstone
        removed) is new again."""
        key = import_key(source, turn_id)
        if self.tombstones.match(self.config.user_id, None, key) is not None:
            return "tombstoned"
        row = self.db.query_one("SELECT status FROM memories WHERE memory_key = ?", (key,))
        return "exists" if row is not None and row["status"] != "deleted" else "new"

    def write_turn(self, turn: ImportedTurn) -> str | None:
        """Store one turn (recallable once its vector is ready); None when its value was forgotten."""
        capture = self.config.algorithm["capture"]
        session_id = "import_" + sha256_hex(f"{turn.source}:{turn.conversation_id}")[:20]
        raw_turn_id = "raw_" + sha256_hex(f"{session_id}:{turn.turn_id}")[:20]
        tool_calls = normalize_tool_calls(turn.tool_calls(), [])
        step = build_trace_step(
            user_text=turn.user_text,
            assistant_text=turn.assistant_text,
            tool_calls=tool_calls,
            raw_turn_id=raw_turn_id,
            reasoning=None,
            request_tags=[turn.source.replace("_", "")],
            max_text_chars=int(capture["maxTextChars"]),
            max_tool_output_chars=int(capture["maxToolOutputChars"]),
        )
        project = turn.git_root or turn.workspace_path
        memory_id = "trace_" + sha256_hex(f"L1:{session_id}:{turn.turn_id}:0")[:20]
        digest = content_hash(step.content)
        value = value_hash(step.content)
        if self.tombstones.match(self.config.user_id, value, import_key(turn.source, turn.turn_id)) is not None:
            return None
        now = utc_now()
        memory = Memory(
            id=memory_id,
            layer="L1",
            content=step.content,
            title=step.summary,
            tags=step.tags,
            user_id=self.config.user_id,
            project_id=project,
            source_agent=normalise_source(turn.source),
            session_id=session_id,
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            memory_key=import_key(turn.source, turn.turn_id),
            content_hash=digest,
            info={"importPending": 1, "importSource": turn.source, "conversationId": turn.conversation_id},
            properties={
                "summary": step.summary,
                "embeddingText": step.embedding_text,
                "trace": {
                    "key": f"trace:{session_id}:{turn.turn_id}:0",
                    "turn_id": turn.turn_id,
                    "raw_turn_id": raw_turn_id,
                    "step_index": 0,
                    "userText": step.user_text,
                    "agentText": step.agent_text,
                    "tool_calls": step.tool_calls,
                    "summary": step.summary,
                    "tags": step.tags,
                    "signature": step.signature,
                    "error_signatures": step.error_signatures,
                    "status": "succeeded",
                },
                "value": 0,
                "alpha": 0,
                "priority": 0.5,
                "sourceMessageIds": [m.message_id for m in turn.messages],
            },
            created_at=turn.created_at,
            updated_at=now,
            valid_from=turn.created_at,
        )
        with self.db.savepoint("import_turn"):  # inside the importer's batch: a failing turn undoes only itself
            if session_id not in self._sessions and self.sessions.get(session_id) is None:
                self.sessions.create(
                    session_id,
                    user_id=self.config.user_id,
                    project_id=project,
                    source=memory.source_agent,
                    profile_id="import",
                    workspace_path=turn.workspace_path,
                    host_session_key=None,
                    meta={"conversationId": turn.conversation_id, "imported": True},
                )
                self.sessions.close(session_id)
            self.sessions.upsert_raw_turn(
                raw_turn_id,
                session_id,
                turn.turn_id,
                {
                    "user_id": self.config.user_id,
                    "conversation_id": turn.conversation_id,
                    "user_text": step.user_text,
                    "assistant_text": step.agent_text,
                    "tool_calls_json": json.dumps(tool_calls, ensure_ascii=False, default=str),
                    "status": "succeeded",
                },
            )
            previous = self.memories.get(memory_id, include_deleted=True)
            if previous is None:
                self.memories.insert(memory, source=f"import:{turn.source}")
            else:  # deleted earlier and its tombstone restored since: the same turn comes back
                memory.version = previous.version + 1
                memory.created_at = previous.created_at
                self.memories.update(memory, previous.snapshot(), "restore", f"import:{turn.source}")
            self.indexer.enqueue(memory_id, "L1", step.embedding_text)
        self._sessions.add(session_id)  # only once the savepoint holding the session row was released
        return memory_id


class ClientBoundControl(JobControl):
    """Job control of a job that dies with its client: at each turn boundary, stop when it was abandoned."""

    def __init__(self, abandoned: Callable[[], bool]) -> None:
        super().__init__()
        self._abandoned = abandoned

    def checkpoint(self) -> bool:
        """Stop once nobody has followed the job for the grace period; else as usual."""
        if not self.stopped and self._abandoned():
            self.stop()
        return super().checkpoint()


@dataclass
class ImportJob:
    """One running or finished import."""

    id: str
    options: ImportOptions
    progress: ImportProgress = field(default_factory=ImportProgress)
    control: JobControl = field(default_factory=JobControl)
    thread: threading.Thread | None = None
    version: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)
    #: Stop when the last client following the events goes away (the CLI sets it: its import dies with it).
    stop_when_unfollowed: bool = False
    followers: int = 0
    last_followed: float = field(default_factory=time.monotonic)

    @property
    def active(self) -> bool:
        """Queued or running (paused included)."""
        return self.progress.state not in FINAL_STATES

    def abandoned(self) -> bool:
        """Told to stop, or its client went away: a new import may take its place once it has ended."""
        if self.control.stopped:
            return True
        return (
            self.stop_when_unfollowed
            and self.followers == 0
            and time.monotonic() - self.last_followed > FOLLOW_GRACE_S
        )

    def notify(self) -> None:
        """Wake the event streams."""
        with self.changed:
            self.version += 1
            self.changed.notify_all()

    def to_json(self) -> dict[str, Any]:
        """API shape."""
        state = self.progress.state
        if state == "running" and self.control.paused:
            state = "paused"
        return {"jobId": self.id, **self.progress.to_json(), "state": state}


class ImportOps:
    """Sources listing and import jobs."""

    def __init__(
        self,
        config: MemmyConfig,
        db: Database,
        memories: MemoryRepository,
        sessions: SessionRepository,
        indexer: Indexer,
        redactor: Redactor = DEFAULT_REDACTOR,
        adapters: Mapping[str, SourceAdapter] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.redactor = redactor
        self.builtin = dict(adapters or ADAPTERS)
        self.adapters: dict[str, SourceAdapter] = dict(self.builtin)
        self.env = dict(os.environ if env is None else env)
        self.state = ImportStateRepository(db)
        self.sink = ServiceTurnSink(config, db, memories, sessions, indexer)
        self.jobs: dict[str, ImportJob] = {}
        self._lock = threading.Lock()
        self._follow_lock = threading.Lock()

    def refresh(self) -> list[str]:
        """Re-read saved custom-agent recipes (``memmy-memory sources add``); return recipe errors."""
        errors: list[str] = []
        self.adapters = {**self.builtin, **load_recipes(self.config.home, errors)}
        return errors

    def sources(self) -> dict[str, Any]:
        """Detected agents (only those present), their paths, last sync and counts."""
        recipe_errors = self.refresh()
        counts = self.state.imported_counts()
        found = []
        for name, adapter in self.adapters.items():
            roots = [r for r in adapter.roots(self.env) if r.exists()]
            if not roots:
                continue
            watermark = self.state.watermark(name)
            found.append(
                {
                    "source": name,
                    "paths": [str(r) for r in roots],
                    "lastSyncAt": watermark.last_sync_at if watermark else None,
                    "cursor": watermark.cursor if watermark else None,
                    "importedTurns": counts.get(name, 0),
                    "lastStats": watermark.last_stats if watermark else None,
                }
            )
        return {
            "sources": found,
            "known": sorted(self.adapters),
            "recipeErrors": recipe_errors,
            "serverTime": utc_now(),
        }

    def _options(self, body: dict[str, Any]) -> ImportOptions:
        self.refresh()
        names = [normalise_source(str(s)) for s in opt_list(body, "sources")]
        unknown = [n for n in names if n not in self.adapters]
        if unknown:
            raise InvalidArgument(f"sources: unknown {unknown}; known: {', '.join(sorted(self.adapters))}")
        mode = opt_str(body, "mode") or "incremental"
        if mode not in ("incremental", "full"):
            raise InvalidArgument("mode: expected 'incremental' or 'full' (deep scan)")
        if mode == "full" and not opt_bool(body, "confirm"):
            raise InvalidArgument("mode 'full' re-reads all history: confirm it with \"confirm\": true")
        if not names:
            names = [n for n, a in self.adapters.items() if any(r.exists() for r in a.roots(self.env))]
        return ImportOptions(
            sources=names,
            mode=mode,  # type: ignore[arg-type]
            since=opt_iso_time(body, "since"),
            dry_run=opt_bool(body, "dryRun"),
            initial_limit=opt_int(body, "initialLimit", 1000, minimum=1),
        )

    def _take_over(self) -> None:
        """Make room for a new job: wait for stopped or abandoned ones to end; refuse while one really runs."""
        for other in [j for j in self.jobs.values() if j.active]:
            while other.stop_when_unfollowed and other.followers == 0 and other.active and not other.abandoned():
                time.sleep(0.05)  # its client has not attached (yet, or ever: it died right after starting it)
            if not other.abandoned():
                raise Conflict("an import is already running; stop it or wait for it to finish")
            other.control.stop()
            other.notify()
            if other.thread is not None:
                other.thread.join(timeout=STOP_WAIT_S)
                if other.thread.is_alive():
                    raise Conflict(f"the previous import ({other.id}) is still stopping; try again in a moment")
            if other.active:  # never started, or ended without saying so
                other.progress.state = "stopped"

    def start(self, body: Any) -> dict[str, Any]:
        """Start an import job in the background (one at a time; a stopped or abandoned one gives way)."""
        body = require_object(body)
        options = self._options(body)
        if not options.dry_run and not self.config.algorithm["enableMemoryAdd"]:
            raise Forbidden("memory writes are disabled (algorithm.enableMemoryAdd: false); only --dry-run works")
        with self._lock:
            self._take_over()
            job = ImportJob(new_id("import"), options, stop_when_unfollowed=opt_bool(body, "stopOnDisconnect"))
            if job.stop_when_unfollowed:
                job.control = ClientBoundControl(job.abandoned)
            self.jobs[job.id] = job
        importer = Importer(self.adapters, self.sink, self.state, self.env, self.redactor)

        def publish(progress: ImportProgress) -> None:
            with job.changed:
                job.version += 1
                job.changed.notify_all()

        def run() -> None:
            try:
                importer.run(options, job.progress, job.control, publish)
            except Exception as exc:  # noqa: BLE001 - reported on the job, never kills the daemon
                job.progress.state = "failed"
                job.progress.error = f"{type(exc).__name__}: {exc}"
                publish(job.progress)

        job.thread = threading.Thread(target=run, name=f"memmy-{job.id}", daemon=True)
        job.thread.start()
        return job.to_json()

    def run_sync(self, body: Any) -> dict[str, Any]:
        """Run an import to completion in the calling thread (tests, benches, in-process use)."""
        options = self._options(require_object(body))
        job = ImportJob(new_id("import"), options)
        Importer(self.adapters, self.sink, self.state, self.env, self.redactor).run(options, job.progress, job.control)
        return job.to_json()

    def job(self, job_id: str) -> ImportJob:
        """A job by id."""
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"import job {job_id} not found")
        return job

    def status(self, job_id: str) -> dict[str, Any]:
        """Progress of one job."""
        return self.job(job_id).to_json()

    def control(self, job_id: str, action: str) -> dict[str, Any]:
        """pause | resume | stop."""
        job = self.job(job_id)
        if action == "pause":
            job.control.pause()
        elif action == "resume":
            job.control.resume()
        elif action == "stop":
            job.control.stop()
        else:
            raise InvalidArgument(f"unknown action {action!r}: expected pause, resume or stop")
        with job.changed:
            job.version += 1
            job.changed.notify_all()
        return job.to_json()

    def follow(self, job_id: str) -> None:
        """A client started following the job's events."""
        job = self.job(job_id)
        with self._follow_lock:
            job.followers += 1
            job.last_followed = time.monotonic()

    def unfollow(self, job_id: str) -> None:
        """A client stopped following; a ``stopOnDisconnect`` job nobody follows any more is stopped."""
        job = self.job(job_id)
        with self._follow_lock:
            job.followers = max(0, job.followers - 1)
            job.last_followed = time.monotonic()
            if job.stop_when_unfollowed and job.followers == 0 and job.active:
                job.control.stop()
        job.notify()

    def wait_for_change(self, job_id: str, seen_version: int, timeout_s: float = 1.0) -> tuple[int, dict[str, Any]]:
        """Block until the job changes (or ``timeout_s``); return (version, status) for SSE streaming."""
        job = self.job(job_id)
        with job.changed:
            if job.version == seen_version:
                job.changed.wait(timeout_s)
            return job.version, job.to_json()
