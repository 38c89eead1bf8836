"""History import operations of the facade: detected sources, import jobs (pause/resume/stop), the turn sink."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, cast

from memmy.commands.answers import ImportJob as ImportJobAnswer
from memmy.commands.answers import JSONObject, Sources
from memmy.commands.imports import StartScan
from memmy.config import Configured, Settings
from memmy.domain import new_id
from memmy.errors import Conflict, Forbidden, InvalidArgument, NotFound
from memmy.namespace import normalise_source
from memmy.redact import DEFAULT_REDACTOR, Redactor
from memmy.sources.adapters import ADAPTERS
from memmy.sources.imported_turns import ImportedTurn
from memmy.sources.importer import Importer, ImportOptions, ImportProgress, JobControl, TurnState
from memmy.sources.model import SourceAdapter
from memmy.sources.reading import ReaderMode
from memmy.sources.recipe import load_recipes
from memmy.store.db import utc_now
from memmy.store.unit import Store
from memmy.traces.prepare import ImportPreparer, PreparedTrace, captured_import
from memmy.traces.turn import host_turn_key
from memmy.traces.writer import TraceWriter

#: A job started with ``stopOnDisconnect`` and followed by nobody for this long is abandoned (its client died).
FOLLOW_GRACE_S = 10.0
#: How long a new import waits for a running one's client to be seen gone before it is refused (a client killed
#: a moment ago still follows its job until the server notices its closed stream, about a second).
DISCONNECT_WAIT_S = 5.0
#: How long a new import waits for a stopped (or abandoned) one to reach its next turn boundary and end.
STOP_WAIT_S = 30.0
FINAL_STATES = ("done", "stopped", "failed")


def import_key(source: str, turn_id: str) -> str:
    """The memory key of an imported turn (stable across syncs, and the key a hook gives the same turn)."""
    return host_turn_key(source, turn_id)


class ServiceTurnSink(Configured):
    """Writes imported turns through the trace writer, many to a transaction."""

    def __init__(self, settings: Settings, writer: TraceWriter) -> None:
        self.settings = settings
        self.writer = writer

    def batch(self) -> AbstractContextManager[Any]:
        """One transaction around many turns (far fewer commits); each turn still has its own savepoint."""
        return self.writer.db.transaction()

    def turn_states(self, source: str, turn_ids: Sequence[str]) -> list[TurnState]:
        """new | exists | tombstoned (forgotten by the user) for each turn, in two queries. A turn deleted and then
        restored (tombstone removed) is new again; a turn a hook captured live is the same turn (it exists)."""
        keys = [import_key(source, turn_id) for turn_id in turn_ids]
        _hashes, forgotten = self.writer.tombstones.matched(self.config.user_id, [], keys)
        stored = self.writer.memories.live_keys(keys)
        return ["tombstoned" if k in forgotten else "exists" if k in stored else "new" for k in keys]

    def preparer(self) -> ImportPreparer:
        """Builds a turn's trace in the history reader process (what :meth:`write_turns` would build here)."""
        return self.writer.import_preparer()

    def write_turns(self, turns: Sequence[ImportedTurn]) -> list[str | None]:
        """Store new turns (recallable once their vectors are ready); None for a turn whose value was forgotten."""
        user_id = self.config.user_id
        return self.writer.write_imported(
            [
                turn.prepared if isinstance(turn.prepared, PreparedTrace) else captured_import(turn, user_id)
                for turn in turns
            ]
        )


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
            self.stop_when_unfollowed and self.followers == 0 and time.monotonic() - self.last_followed > FOLLOW_GRACE_S
        )

    def notify(self) -> None:
        """Wake the event streams."""
        with self.changed:
            self.version += 1
            self.changed.notify_all()

    def to_json(self) -> ImportJobAnswer:
        """API shape."""
        state = self.progress.state
        if state == "running" and self.control.paused:
            state = "paused"
        return cast(ImportJobAnswer, {"jobId": self.id, **self.progress.to_json(), "state": state})


class ImportOps(Configured):
    """Sources listing and import jobs."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        writer: TraceWriter,
        redactor: Redactor = DEFAULT_REDACTOR,
        adapters: Mapping[str, SourceAdapter] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.redactor = redactor
        #: Where histories are read: ``auto`` (a reader process for a large one while a core is idle), or forced.
        self.reader: ReaderMode = "auto"
        self.builtin = dict(adapters or ADAPTERS)
        self.adapters: dict[str, SourceAdapter] = dict(self.builtin)
        self.env = dict(os.environ if env is None else env)
        self.state = store.imports
        self.db = store.db
        self.sink = ServiceTurnSink(settings, writer)
        self.jobs: dict[str, ImportJob] = {}
        self._lock = threading.Lock()
        self._follow_lock = threading.Lock()

    def refresh(self) -> list[str]:
        """Re-read saved custom-agent recipes (``memmy-memory sources add``); return recipe errors."""
        errors: list[str] = []
        self.adapters = {**self.builtin, **load_recipes(self.config.home, errors)}
        return errors

    def sources(self) -> Sources:
        """Detected agents (only those present), their paths, last sync and counts."""
        recipe_errors = self.refresh()
        counts = self.state.imported_counts()
        found: list[JSONObject] = []
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

    def _options(self, scan: StartScan) -> ImportOptions:
        self.refresh()
        names = [normalise_source(s) for s in scan.sources]
        unknown = [n for n in names if n not in self.adapters]
        if unknown:
            raise NotFound(f"sources: unknown {unknown}; known: {', '.join(sorted(self.adapters))}")
        if not names:
            names = [n for n, a in self.adapters.items() if any(r.exists() for r in a.roots(self.env))]
        return ImportOptions(
            sources=names,
            mode=scan.mode,
            since=scan.since,
            dry_run=scan.dry_run,
            initial_limit=scan.initial_limit,
        )

    def _take_over(self) -> None:
        """Make room for a new job: wait for stopped or abandoned ones to end; refuse while one really runs."""
        for other in [j for j in self.jobs.values() if j.active]:
            noticed = time.monotonic() + DISCONNECT_WAIT_S
            while other.stop_when_unfollowed and other.followers and other.active and time.monotonic() < noticed:
                time.sleep(0.05)  # a client that just died (killed): its event stream ends once the server sees it
            while other.stop_when_unfollowed and other.followers == 0 and other.active and not other.abandoned():
                time.sleep(0.05)  # its client has not attached (yet, or ever: it died right after starting it)
            if not other.active:  # it ended while we waited
                continue
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

    def start(self, scan: StartScan) -> ImportJobAnswer:
        """Start an import job in the background (one at a time; a stopped or abandoned one gives way)."""
        options = self._options(scan)
        if not options.dry_run and not self.config.flags.enable_memory_add:
            raise Forbidden("memory writes are disabled (algorithm.enableMemoryAdd: false); only --dry-run works")
        with self._lock:
            self._take_over()
            first = ImportProgress(mode=options.mode, dry_run=options.dry_run)  # the first answer says dry run
            job = ImportJob(new_id("import"), options, first, stop_when_unfollowed=scan.stop_on_disconnect)
            if job.stop_when_unfollowed:
                job.control = ClientBoundControl(job.abandoned)
            self.jobs[job.id] = job
        importer = Importer(self.adapters, self.sink, self.state, self.env, self.redactor, self.reader)

        def publish(progress: ImportProgress) -> None:
            with job.changed:
                job.version += 1
                job.changed.notify_all()

        def run() -> None:
            try:
                with self.db.bulk_writes():
                    importer.run(options, job.progress, job.control, publish)
            except Exception as exc:  # noqa: BLE001 - reported on the job, never kills the daemon
                job.progress.state = "failed"
                job.progress.error = f"{type(exc).__name__}: {exc}"
                publish(job.progress)

        job.thread = threading.Thread(target=run, name=f"memmy-{job.id}", daemon=True)
        job.thread.start()
        return job.to_json()

    def run_sync(self, scan: StartScan) -> ImportJobAnswer:
        """Run an import to completion in the calling thread (tests, benches, in-process use)."""
        options = self._options(scan)
        job = ImportJob(new_id("import"), options)
        with self.db.bulk_writes():
            Importer(self.adapters, self.sink, self.state, self.env, self.redactor, self.reader).run(
                options, job.progress, job.control
            )
        return job.to_json()

    def job(self, job_id: str) -> ImportJob:
        """A job by id."""
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"import job {job_id} not found")
        return job

    def status(self, job_id: str) -> ImportJobAnswer:
        """Progress of one job."""
        return self.job(job_id).to_json()

    def control(self, job_id: str, action: str) -> ImportJobAnswer:
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

    def wait_for_change(self, job_id: str, seen_version: int, timeout_s: float = 1.0) -> tuple[int, ImportJobAnswer]:
        """Block until the job changes (or ``timeout_s``); return (version, status) for SSE streaming."""
        job = self.job(job_id)
        with job.changed:
            if job.version == seen_version:
                job.changed.wait(timeout_s)
            return job.version, job.to_json()
