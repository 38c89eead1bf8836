"""The adapter protocol and the helpers history adapters share; the message model lives in ``memmy.transcripts``.

An adapter turns one agent's files into :class:`Conversation` objects whose messages are in order. It never
redacts, groups turns or writes: the importer does that, the same way for every agent.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from memmy.transcripts import model as transcripts
from memmy.transcripts.model import (
    EPOCH,
    Conversation,
    Role,
    ScanStats,
    SourceMessage,
    extract_text,
    to_iso,
)

__all__ = [
    "EPOCH",
    "Conversation",
    "Role",
    "ScanStats",
    "SourceAdapter",
    "SourceMessage",
    "extract_text",
    "git_root_of",
    "home_of",
    "iter_jsonl",
    "loads_json",
    "open_sqlite_readonly",
    "table_columns",
    "to_iso",
]


class SourceAdapter(Protocol):
    """One agent's history reader. Implementations live in ``memmy.sources.adapters``."""

    name: str  # source id: claude_code, codex, cursor, opencode, openclaw, hermes, workbuddy, pi, qwenwork

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """Where this agent keeps history, honouring its env overrides (paths may not exist)."""
        ...

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """Yield every conversation found under the roots; bad records are counted in ``stats``, never raised."""
        ...


#: 19 digits in a row may be an integer over 64 bits, which orjson would read as a float: json.loads reads those.
#: Found by mapping every digit to ``0`` and every other byte to a space, then one substring search (a regex
#: ``[0-9]{19}`` costs five times orjson's parse of the line: it restarts at every digit).
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19


def has_long_digit_run(raw: bytes) -> bool:
    """True when ``raw`` holds 19 or more ASCII digits in a row."""
    return _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ZERO)


def loads_json(raw: bytes) -> Any:
    """``json.loads`` at orjson's speed: orjson reads the line; what it refuses (lone surrogates from a cut emoji,
    NaN, other encodings) or may read differently (integers over 64 bits) goes to ``json.loads``, which decides as
    it always did."""
    if has_long_digit_run(raw):
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def iter_jsonl(path: Path, stats: ScanStats) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(line_number, object)`` from a JSONL file (see :func:`memmy.transcripts.model.iter_jsonl`)."""
    return transcripts.iter_jsonl(path, stats, loads_json)


def home_of(env: Mapping[str, str]) -> Path:
    """The user's home directory as the environment says (tests point HOME at a temporary directory)."""
    return Path(env.get("HOME") or os.path.expanduser("~"))


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
