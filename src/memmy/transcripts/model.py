"""The message model every transcript reader produces, and the small readers they share. Standard library only.

The history importer (``memmy.sources``) and the hooks (``memmy.hook``) read agents' transcripts with the same
readers, so a turn has the same message ids (and so the same identity) on both paths.
"""

from __future__ import annotations

import json
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

Role = Literal["user", "assistant", "tool", "system"]
EPOCH = "1970-01-01T00:00:00.000Z"
#: A timestamp already in the store's own form (what Claude Code and Codex write): only its date needs checking.
_CANONICAL_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")


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

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as a tuple of its values in field order (the history reader process sends every message; about
        a fifth less time to load than the default form)."""
        return (_message_from_values, _message_values(self.__dict__))


def _message_from_values(*values: Any) -> SourceMessage:
    message = object.__new__(SourceMessage)
    message.__dict__.update(zip(_MESSAGE_FIELDS, values, strict=True))
    return message


def with_fields(message: SourceMessage, **changes: Any) -> SourceMessage:
    """A copy of ``message`` with some fields changed (``dataclasses.replace`` without re-running the frozen
    ``__init__`` field by field: the history import copies every message)."""
    copy = object.__new__(SourceMessage)
    copy.__dict__.update(message.__dict__)
    copy.__dict__.update(changes)
    return copy


_MESSAGE_FIELDS = tuple(SourceMessage.__dataclass_fields__)
_message_values = operator.itemgetter(*_MESSAGE_FIELDS)


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


def to_iso(value: Any) -> str:
    """Normalise a timestamp (ISO string, epoch seconds or epoch milliseconds) to ISO UTC; EPOCH if unusable.

    Numbers above 1e10 are milliseconds (memmy's heuristic, valid until the year 2286).
    """
    if value is None or value == "" or isinstance(value, bool):
        return EPOCH
    if isinstance(value, str):
        if _CANONICAL_TIME.fullmatch(value):
            try:
                datetime.fromisoformat(value[:-1])  # the form is right; the date must exist as well
            except ValueError:
                return EPOCH
            return value
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


Loads = Callable[[bytes], Any]


def parse_jsonl_line(
    raw: bytes, stats: ScanStats, *, complete: bool, loads: Loads = json.loads
) -> dict[str, Any] | None:
    """One JSONL line as an object; None for a blank, bad (``complete``: malformed, else truncated) or non-object
    line, each counted in ``stats``. ``loads`` must raise what ``json.loads`` raises for a bad line."""
    line = raw.strip()
    if not line:
        return None
    try:
        obj = loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        stats.skip("malformed_line" if complete else "truncated_line")
        return None
    if not isinstance(obj, dict):
        stats.skip("non_object_line")
        return None
    return obj


def iter_jsonl(path: Path, stats: ScanStats, loads: Loads = json.loads) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(line_number, object)`` from a JSONL file; bad, non-object and truncated lines are counted."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        stats.errors.append(f"{path}: {exc.strerror or exc}")
        return
    with handle:
        for number, raw in enumerate(handle, start=1):
            stats.records += 1
            obj = parse_jsonl_line(raw, stats, complete=raw.endswith(b"\n"), loads=loads)
            if obj is not None:
                yield number, obj


def tool_content(
    name: str,
    call_id: str | None,
    tool_input: str | None = None,
    output: str | None = None,
    error: str | None = None,
    status: str | None = None,
) -> str:
    """Render a tool call or result as memmy's ``Tool:/Call ID:/Status:/Input:/Output:/Error:`` text.

    The Codex and Cursor adapters share it, so every agent's tool trace reads the same.
    """
    parts = [f"Tool: {name}"]
    if call_id:
        parts.append(f"Call ID: {call_id}")
    if status:
        parts.append(f"Status: {status}")
    if tool_input is not None:
        parts.append(f"Input:\n{tool_input}")
    if output is not None:
        parts.append(f"Output:\n{output}")
    if error is not None:
        parts.append(f"Error:\n{error}")
    return "\n\n".join(parts)
