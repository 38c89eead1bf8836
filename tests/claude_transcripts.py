"""Write Claude Code transcripts in their real on-disk format (``~/.claude/projects/<enc-cwd>/<id>.jsonl``).

Used by the import tests to build homes of any size: the format follows agent-formats.md §1.4 line by line.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BASE = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _ts(minutes: float) -> str:
    return (BASE + timedelta(minutes=minutes)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Transcript:
    """One Claude Code session being written line by line."""

    home: Path
    cwd: str
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    lines: list[dict[str, Any]] = field(default_factory=list)
    clock: float = 0.0
    parent: str | None = None

    @property
    def path(self) -> Path:
        return self.home / ".claude" / "projects" / self.cwd.replace("/", "-") / f"{self.session_id}.jsonl"

    def _line(self, kind: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        self.clock += 0.5
        line_id = str(uuid.uuid4())
        line = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": "2.1.63",
            "gitBranch": "main",
            "type": kind,
            "message": message,
            "uuid": line_id,
            "timestamp": _ts(self.clock),
            **extra,
        }
        self.parent = line_id
        self.lines.append(line)
        return line

    def jump_to_now(self) -> None:
        """Continue the conversation at the current wall-clock time (a later, real append)."""
        self.clock = max(self.clock, (datetime.now(UTC) - BASE).total_seconds() / 60 + 0.1)

    def user(self, text: str) -> None:
        self._line("user", {"role": "user", "content": text})

    def tool(self, name: str, command: dict[str, Any], output: str, is_error: bool = False) -> None:
        tool_id = f"toolu_{uuid.uuid4().hex[:12]}"
        self._line(
            "assistant",
            {
                "id": f"msg_{uuid.uuid4().hex[:8]}",
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-4-6",
                "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": command}],
            },
        )
        self._line(
            "user",
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": output, "is_error": is_error}],
            },
        )

    def assistant(self, text: str) -> None:
        self._line(
            "assistant",
            {
                "id": f"msg_{uuid.uuid4().hex[:8]}",
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-4-6",
                "content": [{"type": "text", "text": text}],
            },
        )

    def write(self, truncate_last: bool = False) -> Path:
        """Write (or rewrite) the whole file; optionally cut the last line in half, as a crash would."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in self.lines)
        if truncate_last:
            last = json.dumps(self.lines[-1], ensure_ascii=False)
            text = text[: len(text) - len(last) - 1] + last[: len(last) // 2]
        self.path.write_text(text, encoding="utf-8")
        return self.path
