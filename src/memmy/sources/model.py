"""The shared message model every history adapter produces, plus small readers they all need.

An adapter turns one agent's files into :class:`Conversation` objects whose messages are in order. It never
redacts, groups turns or writes: the importer does that, the same way for every agent.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

Role = Literal["user", "assistant", "tool", "system"]
EPOCH = "1970-01-01T00:00:00.000Z"


@dataclass(frozen=True)
class SourceMessage:
    """One message of an agent's history, in the shape every adapter yields."""

    message_id: str
    conversation_id: str
    role: Role
    content: str
    created_at: str  # ISO-8601 UTC ("...Z"); EPOCH when the source has no usable time
    source: str
    workspace_path: str | None = None
    git_root: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_input: str | None = None
    tool_output: str | None = None
    tool_error: str | None = None


@dataclass
class Conversation:
    """All messages of one conversation (a transcript file, or the rows of one session in a database)."""

    source: str
    conversation_id: str
    messages: list[SourceMessage]
    origin: str  # file path (or "db-path#session") for messages and debugging
    workspace_path: str | None = None

    @property
    def last_created_at(self) -> str:
        """Timestamp of the newest message."""
        return max((m.created_at for m in self.messages), default=EPOCH)


@dataclass
class ScanStats:
    """What an adapter saw: counts plus skipped records by reason (never fatal)."""

    files: int = 0
    records: int = 0
    messages: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    def skip(self, reason: str, count: int = 1) -> None:
        """Count a skipped record under ``reason``."""
        self.skipped[reason] += count


class SourceAdapter(Protocol):
    """One agent's history reader. Implementations live in ``memmy.sources.adapters``."""

    name: str  # source id: claude_code, codex, cursor, opencode, openclaw, hermes, workbuddy, pi, qwenwork

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """Where this agent keeps history, honouring its env overrides (paths may not exist)."""
        ...

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """Yield every conversation found under the roots; bad records are counted in ``stats``, never raised."""
        ...


def home_of(env: Mapping[str, str]) -> Path:
    """The user's home directory as the environment says (tests point HOME at a temporary directory)."""
    return Path(env.get("HOME") or os.path.expanduser("~"))


def to_iso(value: Any) -> str:
    """Normalise a timestamp (ISO string, epoch seconds or epoch milliseconds) to ISO UTC; EPOCH if unusable.

    Numbers above 1e10 are milliseconds (memmy's heuristic, valid until the year 2286).
    """
    if value is None or value == "" or isinstance(value, bool):
        return EPOCH
    if isinstance(value, str):
        text = value.strip()
        if text.replace(".", "", 1).isdigit():
            return to_iso(float(text))
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return EPOCH
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, int | float):
        seconds = value / 1000.0 if value > 1e10 else float(value)
        try:
            return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            return EPOCH
    return EPOCH


def extract_text(value: Any, depth: int = 0) -> str:
    """Usable text from a string, ``{text|content|...}`` object or list of parts (depth <= 5)."""
    if depth > 5 or value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [extract_text(item, depth + 1) for item in value]
        return "\n".join(p for p in parts if p)
    if isinstance(value, dict):
        if value.get("type") in ("image", "image_url", "input_image"):
            return ""
        for key in ("text", "content", "message", "output", "result", "value"):
            if key in value:
                text = extract_text(value[key], depth + 1)
                if text:
                    return text
    return ""


def iter_jsonl(path: Path, stats: ScanStats) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(line_number, object)`` from a JSONL file; bad, non-object and truncated lines are counted."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        stats.errors.append(f"{path}: {exc.strerror or exc}")
        return
    with handle:
        for number, raw in enumerate(handle, start=1):
            stats.records += 1
            line = raw.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                stats.skip("truncated_line" if not raw.endswith(b"\n") else "malformed_line")
                continue
            if not isinstance(obj, dict):
                stats.skip("non_object_line")
                continue
            yield number, obj


class _CopiedConnection(sqlite3.Connection):
    """A read-only connection to a temporary copy; closing it deletes the copy."""

    copy_dir: Path | None = None

    def close(self) -> None:
        super().close()
        if self.copy_dir is not None:
            shutil.rmtree(self.copy_dir, ignore_errors=True)
            self.copy_dir = None

    def __del__(self) -> None:
        if self.copy_dir is not None:
            shutil.rmtree(self.copy_dir, ignore_errors=True)


def open_sqlite_readonly(path: Path) -> sqlite3.Connection:
    """Open an agent's SQLite database read-only; copy it to a temporary file first if it is locked."""
    uri = f"file:{path}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=1.0)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        conn.row_factory = sqlite3.Row
        return conn
    except sqlite3.OperationalError:
        tmp_dir = Path(tempfile.mkdtemp(prefix="memmy-import-"))
        copy = tmp_dir / path.name
        shutil.copy2(path, copy)
        for suffix in ("-wal", "-shm"):
            sidecar = path.with_name(path.name + suffix)
            if sidecar.exists():
                shutil.copy2(sidecar, tmp_dir / sidecar.name)
        copied = sqlite3.connect(f"file:{copy}?mode=ro", uri=True, factory=_CopiedConnection)
        copied.copy_dir = tmp_dir
        copied.row_factory = sqlite3.Row
        return copied


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """Column names of a table (empty when the table does not exist)."""
    try:
        return {row[1] for row in conn.execute(f"PRAGMA table_info('{table}')")}
    except sqlite3.DatabaseError:
        return set()


def git_root_of(path: str | None) -> str | None:
    """The directory containing ``.git`` above ``path`` (only when it exists on this machine)."""
    if not path:
        return None
    current = Path(path).expanduser()
    if not current.is_absolute():
        return None  # a relative or foreign (c:/...) path must not resolve against our own cwd
    for candidate in (current, *current.parents):
        try:
            if (candidate / ".git").exists():
                return str(candidate)
        except OSError:
            return None
    return None
