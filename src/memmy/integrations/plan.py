"""Install plans: the exact file changes an installer wants, shown as a diff, applied atomically.

Installers never write directly. They compute a :class:`Plan` (before/after text of every file), so that
``--dry-run`` prints the diff, installing twice yields an empty plan, and ``apply`` writes each file with
temp + rename (the user's file is never half written).
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_MARKER = "<!-- memmy:start v=1 -->"
END_MARKER = "<!-- memmy:end v=1 -->"
LEGACY_BLOCKS = (
    ("<!-- memmy-memory cli : start -->", "<!-- memmy-memory cli : end -->"),
    ("<!-- memmy-memory:start v=1 -->", "<!-- memmy-memory:end v=1 -->"),
)


@dataclass(frozen=True)
class FileChange:
    """One file's content before and after (None = the file does not exist)."""

    path: Path
    before: str | None
    after: str | None
    mode: int | None = None

    @property
    def changed(self) -> bool:
        """True when applying would change the disk."""
        return self.before != self.after


@dataclass
class Plan:
    """Everything one install or removal would do."""

    agent: str
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def effective(self) -> list[FileChange]:
        """Only the changes that modify something."""
        return [c for c in self.changes if c.changed]

    def diff(self) -> str:
        """A unified diff of every effective change."""
        chunks = []
        for change in self.effective:
            before = (change.before or "").splitlines(keepends=True)
            after = (change.after or "").splitlines(keepends=True)
            name = str(change.path)
            chunks.append(
                "".join(
                    difflib.unified_diff(
                        before,
                        after,
                        fromfile="/dev/null" if change.before is None else name,
                        tofile="/dev/null" if change.after is None else name,
                    )
                )
            )
        return "\n".join(c for c in chunks if c)

    def apply(self) -> list[Path]:
        """Write or delete every changed file atomically; return the paths touched."""
        touched = []
        for change in self.effective:
            if change.after is None:
                change.path.unlink(missing_ok=True)
                _remove_empty_parents(change.path.parent)
            else:
                atomic_write(change.path, change.after, change.mode)
            touched.append(change.path)
        return touched


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    existing_mode = path.stat().st_mode & 0o777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".memmy-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode if mode is not None else (existing_mode if existing_mode is not None else 0o644))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove_empty_parents(directory: Path, levels: int = 2) -> None:
    for _ in range(levels):
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent


def read_text(path: Path) -> str | None:
    """File content, or None when absent."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def load_json_object(path: Path, text: str | None) -> dict[str, Any]:
    """Parse a JSON config (``{}`` when absent); a broken file is an error naming the file, never overwritten."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); fix it first, memmy will not overwrite it"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    return data


def dump_json(data: Mapping[str, Any]) -> str:
    """JSON as agents write it: 2-space indent, UTF-8, trailing newline."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def upsert_block(text: str | None, body: str) -> str:
    """Insert or replace memmy's marker block in an instruction file (legacy blocks are replaced in place)."""
    current = remove_block(text or "")
    block = f"{START_MARKER}\n{body.strip()}\n{END_MARKER}\n"
    if not current.strip():
        return block
    return current.rstrip("\n") + "\n\n" + block


def remove_block(text: str) -> str:
    """Remove memmy's marker block (and legacy ones) and the blank line it added."""
    for start, end in ((START_MARKER, END_MARKER), *LEGACY_BLOCKS):
        while start in text and end in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            text = head.rstrip("\n") + ("\n" if head.strip() else "") + tail.lstrip("\n")
            if text.strip() and not text.endswith("\n"):
                text += "\n"
    return text


def change(path: Path, after: str | None, mode: int | None = None) -> FileChange:
    """A change from the file's current content to ``after``."""
    return FileChange(path, read_text(path), after, mode)
