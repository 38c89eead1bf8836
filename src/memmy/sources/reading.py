"""Everything an import does to a conversation before it touches the store, and a process that does it alongside.

For each conversation an adapter yields: lone surrogates scrubbed, the checkpoint (last message, time, content hash)
computed, secrets redacted message by message, the messages grouped into turns and, in the reader process, each
complete turn's trace built (``TurnSink.preparer``). None of it reads or writes the store, so a large history is read
and prepared by a child process (``python -m memmy.sources.reader_process``) while the importer writes the previous
conversations: the two halves of an import on two cores instead of taking turns on the GIL (reading and preparing
are about half of an import's CPU time). The child streams each prepared
conversation back as a pickle over its stdout, in the adapter's order; the importer consumes exactly what it would
have prepared itself. The child never opens the store, so killing either process mid-import loses nothing.

A small history is prepared in-process (starting an interpreter costs ~0.1 s), and lazily: a conversation the
importer skips (unchanged since its checkpoint, older than the watermark) is never redacted or grouped. So is any
adapter or redactor the child cannot be given (one that does not pickle): the fallback is the in-process path.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Literal

from memmy.domain import sha256_hex
from memmy.redact import RedactionReport, Redactor, replace_surrogates
from memmy.sources.imported_turns import ImportedTurn, group_turns
from memmy.sources.model import Conversation, ScanStats, SourceAdapter, SourceMessage
from memmy.store.imports import Checkpoint
from memmy.transcripts.model import with_fields

ReaderMode = Literal["auto", "process", "inline"]
#: A history of at least this many bytes under the adapter's roots is prepared by a child process in ``auto`` mode.
PROCESS_MIN_BYTES = 4 * 1024 * 1024


class ReaderProcessError(RuntimeError):
    """The reader process ended without finishing (killed, out of memory, or it could not start its work)."""


# -- one conversation ---------------------------------------------------------------------------------------------
def conversation_hash(conversation: Conversation) -> str:
    """Content hash of a conversation (message ids and text), for unchanged-conversation detection."""
    return sha256_hex(
        "\x00".join(
            f"{m.message_id}\x01{m.role}\x01{m.content}\x01{m.tool_output or ''}" for m in conversation.messages
        )
    )


_TEXT_FIELDS = (
    "message_id",
    "conversation_id",
    "content",
    "workspace_path",
    "git_root",
    "tool_name",
    "tool_call_id",
    "tool_input",
    "tool_output",
    "tool_error",
)


def _scrubbed(message: SourceMessage) -> SourceMessage:
    values = message.__dict__
    texts = [value for name in _TEXT_FIELDS if isinstance(value := values[name], str)]
    joined = "\x00".join(texts)
    if joined.isascii():
        return message
    try:
        joined.encode("utf-8")  # no lone surrogate anywhere: nothing to replace
        return message
    except UnicodeEncodeError:
        pass
    fields = {}
    for name in _TEXT_FIELDS:
        value = values[name]
        if isinstance(value, str) and (clean := replace_surrogates(value)) is not value:
            fields[name] = clean
    return with_fields(message, **fields) if fields else message


def scrub_conversation(conversation: Conversation) -> Conversation:
    """A copy with every lone UTF-16 surrogate replaced by U+FFFD (a cut emoji must not cost the conversation)."""
    return Conversation(
        conversation.source,
        replace_surrogates(conversation.conversation_id),
        [_scrubbed(message) for message in conversation.messages],
        conversation.origin,
        replace_surrogates(conversation.workspace_path) if conversation.workspace_path else None,
    )


_REDACTED_FIELDS = ("content", "tool_input", "tool_output", "tool_error")


def redact_message(message: SourceMessage, report: RedactionReport, redactor: Redactor) -> SourceMessage:
    """``message`` with secrets removed from every text field (the message itself when it holds none).

    One keyword scan over the fields joined clears most messages; the others are redacted field by field.
    """
    values = message.__dict__
    texts = [value for name in _REDACTED_FIELDS if (value := values[name])]
    if not redactor.could_redact("\n".join(texts)):
        return message
    fields = {}
    for name in _REDACTED_FIELDS:
        value = values[name]
        if value and (clean := redactor.redact(value, report)) != value:
            fields[name] = clean
    return with_fields(message, **fields) if fields else message


@dataclass
class Grouped:
    """A conversation's redacted turns, the messages before its first user message, and what was redacted."""

    turns: list[ImportedTurn]
    orphans: int
    redacted: Counter[str]


def group_redacted(conversation: Conversation, redactor: Redactor) -> Grouped:
    """Redact every message of ``conversation`` and group the result into turns."""
    report = RedactionReport()
    redacted = Conversation(
        conversation.source,
        conversation.conversation_id,
        [redact_message(m, report, redactor) for m in conversation.messages],
        conversation.origin,
        conversation.workspace_path,
    )
    turns, orphans = group_turns(redacted)
    return Grouped(turns, orphans, Counter(report.counts))


@dataclass
class ReadConversation:
    """One conversation as read: scrubbed, with its checkpoint; grouped already when a reader process did it."""

    conversation: Conversation
    checkpoint: Checkpoint
    message_count: int
    last_created_at: str
    grouped: Grouped | None = None
    #: Why scrubbing, hashing, redacting or grouping it failed (``Type: message``); the importer records it.
    error: str | None = None
    #: Sent without its messages: the reader process knew the importer skips it (see :class:`SkipRule`).
    light: bool = False

    def turns(self, redactor: Redactor) -> Grouped:
        """The redacted turns (grouped now when the reader process did not); raises what grouping raises."""
        if self.error is not None:
            raise PreparationError(self.error)
        if self.light:
            raise PreparationError("the reader process sent this conversation without its messages (read it again)")
        if self.grouped is None:
            self.grouped = group_redacted(self.conversation, redactor)
        return self.grouped


@dataclass(frozen=True)
class SkipRule:
    """Which conversations the importer will skip: unchanged since their checkpoint, or older than the watermark.

    The reader process sends those without their messages; the importer decides again on what it receives.
    """

    checkpoints: Mapping[str, Checkpoint]
    since: str | None = None
    waiting: frozenset[str] = frozenset()
    #: ``since`` is the source's watermark (not a ``--since`` the user gave): an older conversation that was never
    #: read (no checkpoint) is history restored or added after the last sync, and is imported, not skipped.
    late_history: bool = False

    def before_watermark(self, read: ReadConversation) -> bool:
        """True when ``read`` is older than the watermark, not waiting for an answer and not :meth:`late` (a failed
        read never is)."""
        if not self._older(read):
            return False
        return read.conversation.conversation_id not in self.waiting and not self.late(read)

    def late(self, read: ReadConversation) -> bool:
        """True when ``read`` is older than the watermark yet was never read before: it appeared after the last sync
        (a restored history folder, an agent installed later) and is imported now."""
        return self.late_history and self._older(read) and read.conversation.conversation_id not in self.checkpoints

    def _older(self, read: ReadConversation) -> bool:
        return bool(self.since) and read.error is None and read.last_created_at < str(self.since)

    def skips(self, read: ReadConversation) -> bool:
        """True when ``read`` will not be imported."""
        return self.before_watermark(read) or self.checkpoints.get(read.conversation.conversation_id) == read.checkpoint


class PreparationError(RuntimeError):
    """Reading or grouping one conversation failed earlier, maybe in the reader process (its message says how)."""


def read_one(conversation: Conversation) -> ReadConversation:
    """Scrub ``conversation`` and compute its checkpoint; a conversation that fails to is returned with its
    ``error`` (no time, no checkpoint), which the importer records as that conversation's failure."""
    try:
        scrubbed = scrub_conversation(conversation)
        last_message = scrubbed.messages[-1] if scrubbed.messages else None
        last_created_at = scrubbed.last_created_at
        checkpoint = Checkpoint(
            last_message.message_id if last_message else None, last_created_at, conversation_hash(scrubbed)
        )
    except Exception as exc:  # noqa: BLE001 - one broken conversation must not cost the others
        error = f"{type(exc).__name__}: {exc}"
        return ReadConversation(conversation, Checkpoint(None, None, None), len(conversation.messages), "", error=error)
    return ReadConversation(scrubbed, checkpoint, len(scrubbed.messages), last_created_at)


#: Builds what the sink writes from a complete turn (``TurnSink.preparer``); it must pickle.
Preparer = Callable[[ImportedTurn], object]


def prepare_one(
    conversation: Conversation, redactor: Redactor, preparer: Preparer | None = None, skip: SkipRule | None = None
) -> ReadConversation:
    """:func:`read_one` and the grouping, eagerly (what the reader process sends), and each complete turn prepared
    by ``preparer``; a conversation ``skip`` skips comes back light (without its messages). A grouping error is kept
    for the importer; a turn that fails to prepare is left to the importer, which prepares it again and fails it the
    way it fails any turn."""
    read = read_one(conversation)
    if read.error is not None:
        return read
    if skip is not None and skip.skips(read):
        read.conversation = replace(read.conversation, messages=[])
        read.light = True
        return read
    try:
        read.grouped = group_redacted(read.conversation, redactor)
    except Exception as exc:  # noqa: BLE001 - one broken conversation must not cost the others
        read.error = f"{type(exc).__name__}: {exc}"
        return read
    if preparer is not None:
        for turn in read.grouped.turns:
            try:
                if turn.complete:
                    turn.prepared = preparer(turn)
            except Exception:  # noqa: BLE001, S112 - see the docstring
                continue
    return read


# -- where it runs ------------------------------------------------------------------------------------------------
def history_bytes(roots: list[Path], at_least: int = PROCESS_MIN_BYTES) -> int:
    """Bytes of the files under ``roots``, counted until ``at_least`` is reached (the walk stops there)."""
    total = 0
    stack = [root for root in roots if root.exists()]
    while stack and total < at_least:
        path = stack.pop()
        try:
            if not path.is_dir():
                total += path.stat().st_size
                continue
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def idle_cores() -> float:
    """Cores not in use right now, by the 1-minute load average (0 where the system cannot say)."""
    try:
        return (os.cpu_count() or 1) - os.getloadavg()[0]
    except OSError:
        return 0.0


def choose_mode(adapter: SourceAdapter, env: Mapping[str, str], requested: ReaderMode = "auto") -> ReaderMode:
    """``process`` or ``inline``: as asked, or in ``auto`` a process for a large history when a core is idle.

    The two processes together spend up to a third more CPU than one (every prepared turn is pickled and loaded
    again): worth it only when the second core would otherwise wait, so a busy machine reads in-process.
    """
    if requested != "auto":
        return requested
    if idle_cores() < 1.0:
        return "inline"
    try:
        roots = list(adapter.roots(env))
    except Exception:  # noqa: BLE001 - an adapter that cannot say where it reads is read in-process
        return "inline"
    return "process" if history_bytes(roots) >= PROCESS_MIN_BYTES else "inline"


def read_conversations(
    adapter: SourceAdapter,
    env: Mapping[str, str],
    stats: ScanStats,
    redactor: Redactor,
    mode: ReaderMode = "auto",
    preparer: Preparer | None = None,
    skip: SkipRule | None = None,
) -> Generator[ReadConversation, None, None]:
    """Every conversation of ``adapter``, read (and, in a reader process, grouped) in the adapter's order.

    In a reader process each complete turn is also prepared by ``preparer``, and what ``skip`` skips is sent
    without its messages (in-process nothing is prepared before the importer asks). The process's counts and errors are
    added to ``stats`` when it finishes; an error the adapter raises there is raised here, as it would be
    in-process. Closing the iterator early stops the process.
    """
    request = _request(adapter, env, redactor, preparer, skip) if choose_mode(adapter, env, mode) == "process" else None
    if request is None:
        yield from _read_inline(adapter, env, stats)
        return
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "memmy.sources.reader_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    except OSError:  # no interpreter to start (an embedded Python), or no process left: read in-process
        yield from _read_inline(adapter, env, stats)
        return
    try:
        assert child.stdin is not None and child.stdout is not None  # noqa: S101 - both are pipes above
        child.stdin.write(request)
        child.stdin.close()
        yield from _receive(child, child.stdout, stats)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def _read_inline(adapter: SourceAdapter, env: Mapping[str, str], stats: ScanStats) -> Iterator[ReadConversation]:
    for conversation in adapter.conversations(env, stats):
        yield read_one(conversation)


def _request(
    adapter: SourceAdapter,
    env: Mapping[str, str],
    redactor: Redactor,
    preparer: Preparer | None,
    skip: SkipRule | None,
) -> bytes | None:
    try:
        return pickle.dumps((adapter, dict(env), redactor, preparer, skip), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an adapter defined where a child cannot import it: read in-process
        return None


def _receive(
    child: subprocess.Popen[bytes], stream: IO[bytes], stats: ScanStats
) -> Generator[ReadConversation, None, None]:
    while True:
        try:  # one pickle per message, each with its own memo (the process clears its pickler's after each)
            kind, payload = pickle.load(stream)
        except (EOFError, pickle.UnpicklingError) as exc:
            raise ReaderProcessError(
                f"the history reader process ended before finishing (exit code {child.wait()}): {exc}"
            ) from None
        if kind == "read":
            yield payload
            continue
        child_stats, error = payload
        _merge(stats, child_stats)
        if error is not None:
            raise error
        return


def _merge(stats: ScanStats, child: ScanStats) -> None:
    stats.files += child.files
    stats.records += child.records
    stats.messages += child.messages
    stats.skipped.update(child.skipped)
    stats.errors.extend(child.errors)


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """The reader process's work: read the request, then send every prepared conversation and the stats."""
    adapter, env, redactor, preparer, skip = pickle.load(stdin)
    gc.freeze()  # the modules and the request live as long as the process: full collections need not walk them
    pickler = pickle.Pickler(stdout, protocol=pickle.HIGHEST_PROTOCOL)
    stats = ScanStats()
    error: Exception | None = None
    try:
        for conversation in adapter.conversations(env, stats):
            pickler.dump(("read", prepare_one(conversation, redactor, preparer, skip)))
            pickler.clear_memo()
            stdout.flush()
    except Exception as exc:  # noqa: BLE001 - handed to the importer, which records it like an in-process error
        error = _picklable(exc)
    pickler.dump(("end", (stats, error)))
    stdout.flush()
    return 0


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception type may fail to pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
