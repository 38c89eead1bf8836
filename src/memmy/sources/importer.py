"""The import engine: adapters -> redaction -> turns -> idempotent writes, with checkpoints and watermarks.

One complete turn becomes one L1 memory, written through a :class:`TurnSink` (the service) in batches of
``BATCH_TURNS``. The run is safe to kill at any point: each batch is one transaction and every turn has a stable
key, checkpoints move after a conversation is done (a conversation ending unanswered is marked waiting and read
again next time), and the per-source watermark only advances after a clean run.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from memmy.redact import DEFAULT_REDACTOR, Redactor
from memmy.sources.imported_turns import ImportedTurn
from memmy.sources.model import Conversation, ScanStats, SourceAdapter
from memmy.sources.reading import ReadConversation, ReaderMode, SkipRule, read_conversations
from memmy.store.db import utc_now
from memmy.store.imports import Checkpoint, ImportStateRepository

MAX_TURN_BYTES = 2 * 1024 * 1024
BATCH_TURNS = 200  # turns per transaction and per batched write: few commits, yet the store is held ~0.1 s at most
Mode = Literal["incremental", "full"]
TurnState = Literal["new", "exists", "tombstoned"]
#: A conversation of a first sync, kept until the newest turns of the whole source are known.
Pending = tuple[Conversation, list[ImportedTurn], Checkpoint]


class TurnSink(Protocol):
    """Where turns go (implemented by the service)."""

    def turn_states(self, source: str, turn_ids: Sequence[str]) -> list[TurnState]:
        """For each turn: new, imported before (or captured live), or forgotten by the user (tombstoned)."""
        ...

    def write_turns(self, turns: Sequence[ImportedTurn]) -> list[str | None]:
        """Store complete, redacted turns as L1 memories; each one's id, or None when its value is tombstoned."""
        ...

    def batch(self) -> AbstractContextManager[Any]:
        """One transaction around a batch of writes (a failed batch is undone whole)."""
        ...

    def preparer(self) -> Callable[[ImportedTurn], object] | None:
        """A picklable function that builds, from a complete turn, what :meth:`write_turns` would build from it
        (the history reader process runs it and leaves the result in ``ImportedTurn.prepared``); None: nothing."""
        ...


@dataclass
class ImportOptions:
    """What to import."""

    sources: list[str] | None = None
    mode: Mode = "incremental"
    since: str | None = None
    dry_run: bool = False
    initial_limit: int = 1000


@dataclass
class SourceProgress:
    """Counters for one source."""

    source: str
    state: str = "pending"
    conversations: int = 0
    messages_scanned: int = 0
    turns_added: int = 0
    turns_existing: int = 0
    turns_waiting: int = 0
    failed: int = 0  # turns, conversations and files that could not be imported (each has an entry in errors)
    skipped: Counter[str] = field(default_factory=Counter)
    redacted: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    watermark_advanced: bool = False
    #: Conversations older than the watermark read for the first time (history that appeared after the last sync).
    late_conversations: int = 0

    def to_json(self) -> dict[str, Any]:
        """API shape."""
        return {
            "source": self.source,
            "state": self.state,
            "conversations": self.conversations,
            "messagesScanned": self.messages_scanned,
            "turnsAdded": self.turns_added,
            "turnsExisting": self.turns_existing,
            "turnsWaiting": self.turns_waiting,
            "failed": self.failed,
            "skipped": dict(self.skipped),
            "redacted": dict(self.redacted),
            "errors": self.errors[:20],
            "watermarkAdvanced": self.watermark_advanced,
            "lateConversations": self.late_conversations,
        }


@dataclass
class ImportProgress:
    """The whole run, as reported over the API and SSE."""

    state: str = "queued"
    mode: str = "incremental"
    dry_run: bool = False
    sources: dict[str, SourceProgress] = field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """API shape, with totals."""
        parts = list(self.sources.values())
        skipped: Counter[str] = Counter()
        for part in parts:
            skipped.update(part.skipped)
        return {
            "state": self.state,
            "mode": self.mode,
            "dryRun": self.dry_run,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "error": self.error,
            "totals": {
                "messagesScanned": sum(p.messages_scanned for p in parts),
                "turnsAdded": sum(p.turns_added for p in parts),
                "turnsExisting": sum(p.turns_existing for p in parts),
                "turnsWaiting": sum(p.turns_waiting for p in parts),
                "failed": sum(p.failed for p in parts),
                "lateConversations": sum(p.late_conversations for p in parts),
                "skipped": dict(skipped),
            },
            "sources": [p.to_json() for p in parts],
        }


class JobControl:
    """Pause / resume / stop signals, checked between turns."""

    def __init__(self) -> None:
        self._running = threading.Event()
        self._running.set()
        self.stopped = False

    def pause(self) -> None:
        """Hold the run at the next turn boundary."""
        self._running.clear()

    def resume(self) -> None:
        """Continue a paused run."""
        self._running.set()

    def stop(self) -> None:
        """End the run at the next turn boundary (what is written stays written)."""
        self.stopped = True
        self._running.set()

    @property
    def paused(self) -> bool:
        """True while paused."""
        return not self._running.is_set()

    def checkpoint(self) -> bool:
        """Block while paused; return False when the run must stop."""
        self._running.wait()
        return not self.stopped


def turn_size(turn: ImportedTurn) -> int:
    """UTF-8 size of the write request the turn would become."""
    payload = {"user": turn.user_text, "assistant": turn.assistant_text, "tools": turn.tool_calls()}
    return len(json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8"))


#: JSON and UTF-8 make a character at most 6 bytes (``\u001f``); each message adds at most this much framing.
_MAX_BYTES_PER_CHAR = 6
_MESSAGE_FRAMING = 512


def turn_over_limit(turn: ImportedTurn, limit: int = MAX_TURN_BYTES) -> bool:
    """``turn_size(turn) > limit``, measured only for a turn whose text could come near the limit."""
    chars = 0
    for message in turn.messages:
        chars += len(message.content) + len(message.tool_name or "") + len(message.tool_call_id or "")
        chars += len(message.tool_input or "") + len(message.tool_output or "") + len(message.tool_error or "")
        chars += len(message.created_at)
    if chars * _MAX_BYTES_PER_CHAR + len(turn.messages) * _MESSAGE_FRAMING <= limit:
        return False
    return turn_size(turn) > limit


class Importer:
    """Runs imports for a set of adapters into one sink."""

    def __init__(
        self,
        adapters: Mapping[str, SourceAdapter],
        sink: TurnSink,
        state: ImportStateRepository,
        env: Mapping[str, str],
        redactor: Redactor = DEFAULT_REDACTOR,
        reader: ReaderMode = "auto",
    ) -> None:
        self.adapters = adapters
        self.reader = reader
        self.redactor = redactor
        self.sink = sink
        self.state = state
        self.env = env

    def run(
        self,
        options: ImportOptions,
        progress: ImportProgress,
        control: JobControl,
        on_progress: Callable[[ImportProgress], None] | None = None,
    ) -> ImportProgress:
        """Import every selected source; never raises for bad input (errors are counted per source)."""
        notify = ProgressThrottle(on_progress)
        progress.state = "running"
        progress.mode = options.mode
        progress.dry_run = options.dry_run
        progress.started_at = utc_now()
        names = options.sources or list(self.adapters)
        for name in names:
            progress.sources.setdefault(name, SourceProgress(name))
        for name in names:
            if control.stopped:
                break
            part = progress.sources[name]
            part.state = "scanning"
            try:
                self._run_source(self.adapters[name], options, part, control, lambda: notify(progress))
                part.state = "stopped" if control.stopped else "done"
            except Exception as exc:  # noqa: BLE001 - one broken source must not end the others
                part.state = "error"
                part.failed += 1
                part.errors.append(f"{type(exc).__name__}: {exc}")
            notify(progress, force=True)
        progress.state = "stopped" if control.stopped else "done"
        progress.finished_at = utc_now()
        notify(progress, force=True)
        return progress

    def _run_source(
        self,
        adapter: SourceAdapter,
        options: ImportOptions,
        part: SourceProgress,
        control: JobControl,
        notify: Callable[[], None],
    ) -> None:
        baseline = utc_now()
        watermark = self.state.watermark(adapter.name)
        full = options.mode == "full"
        cursor = None if full or watermark is None else watermark.cursor
        since = options.since or cursor
        initial = cursor is None and not full and options.since is None
        stats = ScanStats()
        waiting = self.state.waiting(adapter.name)  # read again whatever the cursor: their answer may come late
        newest_seen: str | None = None
        pending: list[Pending] = []
        checkpoints = {} if full else self.state.checkpoints(adapter.name)
        skip = SkipRule(checkpoints, since, frozenset(waiting), late_history=options.since is None)
        conversations = read_conversations(
            adapter, self.env, stats, self.redactor, self.reader, self.sink.preparer(), skip
        )
        try:
            for read in conversations:
                conversation = read.conversation
                if not control.checkpoint():
                    break
                part.conversations += 1
                part.messages_scanned += read.message_count
                last = read.last_created_at
                newest_seen = max(filter(None, [newest_seen, last]))
                if skip.before_watermark(read):
                    part.skipped["before_watermark"] += 1
                    continue
                if skip.late(read):
                    part.late_conversations += 1
                try:
                    prepared = self._prepare(adapter.name, read, options, part, control, initial)
                except Exception as exc:  # noqa: BLE001 - one broken conversation must not cost the others
                    part.failed += 1
                    part.errors.append(self.redactor.redact(f"{conversation.origin}: {type(exc).__name__}: {exc}"))
                    continue
                if prepared is not None:
                    pending.append(prepared)
                notify()
        finally:
            conversations.close()  # a reader process stops now, not when the generator is collected
        if initial and pending:
            self._import_initial_subset(adapter.name, pending, options, part, control, notify)
        part.skipped.update(stats.skipped)
        part.errors.extend(stats.errors)
        part.failed += len(stats.errors)  # an unreadable file is a conversation not imported
        summary = part.to_json()
        # A conversation that ends unanswered does not hold the cursor back (it is remembered as waiting instead).
        clean = not (stats.errors or part.failed or control.stopped or options.dry_run)
        if clean:
            self.state.advance_watermark(adapter.name, options.mode, baseline, newest_seen, summary)
            part.watermark_advanced = True
        elif not options.dry_run:
            self.state.record_attempt(adapter.name, summary)

    def _prepare(
        self,
        source: str,
        read: ReadConversation,
        options: ImportOptions,
        part: SourceProgress,
        control: JobControl,
        initial: bool,
    ) -> Pending | None:
        """Skip an unchanged conversation; redact and group any other; import it now, or return it for the initial
        subset."""
        conversation, checkpoint = read.conversation, read.checkpoint
        stored = self.state.checkpoint(source, conversation.conversation_id)
        if options.mode != "full" and stored == checkpoint:
            part.skipped["unchanged_conversation"] += 1
            return None
        grouped = read.turns(self.redactor)
        part.redacted.update(grouped.redacted)
        if grouped.orphans:
            part.skipped["message_before_first_user"] += grouped.orphans
        if initial:
            return conversation, grouped.turns, checkpoint
        self._import_conversation(source, conversation, grouped.turns, checkpoint, options, part, control)
        return None

    def _import_initial_subset(
        self,
        source: str,
        pending: list[Pending],
        options: ImportOptions,
        part: SourceProgress,
        control: JobControl,
        notify: Callable[[], None],
    ) -> None:
        """First sync of a source: only the newest ``initial_limit`` complete turns (deep scan gets the rest)."""
        complete = sorted((turn.created_at for _, turns, _ in pending for turn in turns if turn.complete), reverse=True)
        limit = int(getattr(self.adapters[source], "initial_limit", options.initial_limit))
        cutoff = complete[min(len(complete), limit) - 1] if complete else ""
        for conversation, turns, checkpoint in pending:
            kept = [t for t in turns if not t.complete or t.created_at >= cutoff]
            older = len(turns) - len(kept)
            if older:
                part.skipped["older_than_initial_subset"] += older
            self._import_conversation(
                source,
                conversation,
                kept,
                checkpoint,
                options,
                part,
                control,
                trailing_turn=turns[-1] if turns else None,
            )
            notify()

    def _import_conversation(
        self,
        source: str,
        conversation: Conversation,
        turns: list[ImportedTurn],
        checkpoint: Checkpoint,
        options: ImportOptions,
        part: SourceProgress,
        control: JobControl,
        trailing_turn: ImportedTurn | None = None,
    ) -> None:
        last_turn = trailing_turn if trailing_turn is not None else (turns[-1] if turns else None)
        failed_before = part.failed
        waiting = False
        for start in range(0, len(turns), BATCH_TURNS):
            if not control.checkpoint() or control.stopped:  # pause waits here, outside any transaction
                return
            batch = turns[start : start + BATCH_TURNS]
            waiting = self._import_batch(source, conversation, batch, last_turn, options, part) or waiting
        if not options.dry_run and part.failed == failed_before:
            if waiting:
                self.state.mark_waiting(source, conversation.conversation_id, conversation.origin)
            else:
                self.state.save_checkpoint(source, conversation.conversation_id, checkpoint, conversation.origin)

    def _import_batch(
        self,
        source: str,
        conversation: Conversation,
        turns: list[ImportedTurn],
        last_turn: ImportedTurn | None,
        options: ImportOptions,
        part: SourceProgress,
    ) -> bool:
        """Import a batch of turns in one transaction; return True when the conversation's last turn is waiting."""
        waiting = False
        ready: list[ImportedTurn] = []
        for turn in turns:
            if not turn.complete:
                if turn is last_turn:
                    part.turns_waiting += 1
                    waiting = True
                else:
                    part.skipped["turn_without_final_answer"] += 1
            elif turn_over_limit(turn):
                part.skipped["turn_over_2mib"] += 1
            else:
                ready.append(turn)
        new: list[ImportedTurn] = []
        for turn, state in zip(ready, self.sink.turn_states(source, [t.turn_id for t in ready]), strict=True):
            if state == "exists":
                part.turns_existing += 1
            elif state == "tombstoned":
                part.skipped["tombstoned"] += 1
            else:
                new.append(turn)
        if options.dry_run:
            part.turns_added += len(new)
        elif new:
            self._write(conversation, new, part)
        return waiting

    def _write(self, conversation: Conversation, turns: list[ImportedTurn], part: SourceProgress) -> None:
        """Write turns as one batch; when the batch fails, turn by turn, so only a failing turn is lost."""
        try:
            with self.sink.batch():
                results = self.sink.write_turns(turns)
        except Exception as exc:  # noqa: BLE001 - retried turn by turn; the next sync retries a failed turn
            if len(turns) > 1:
                for turn in turns:
                    self._write(conversation, [turn], part)
                return
            part.failed += 1
            part.errors.append(self.redactor.redact(f"{conversation.origin}: {type(exc).__name__}: {exc}"))
            return
        added = sum(1 for r in results if r is not None)
        part.turns_added += added
        if added < len(results):
            part.skipped["tombstoned"] += len(results) - added


class ProgressThrottle:
    """Calls back at most every ``interval`` seconds (always when forced)."""

    def __init__(self, callback: Callable[[ImportProgress], None] | None, interval: float = 0.25) -> None:
        self.callback = callback
        self.interval = interval
        self.last = 0.0

    def __call__(self, progress: ImportProgress, force: bool = False) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        if force or now - self.last >= self.interval:
            self.last = now
            self.callback(progress)
