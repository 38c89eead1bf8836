"""Custom agents ("Add another agent"): a saved recipe says where the history is and how to read it.

A recipe is JSON in ``$MEMMY_HOME/sources/<name>.json``::

    {"version": 1, "name": "kimi", "format": "jsonl", "path": "/home/u/.kimi/sessions",
     "fields": {"role": "role", "content": "message.content", "createdAt": "ts", "conversationId": "session",
                "messageId": "id", "workspacePath": "cwd"},
     "roleMap": {"human": "user", "ai": "assistant"}, "timestampFormat": "auto"}

``format`` is ``jsonl`` (files under ``path``), ``json`` (a file or files with an array, optionally under
``recordsPath``) or ``sqlite`` (a read-only ``query``, a single SELECT). Field values are dot paths.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.sources.model import (
    Conversation,
    Role,
    ScanStats,
    SourceMessage,
    extract_text,
    git_root_of,
    iter_jsonl,
    open_sqlite_readonly,
    to_iso,
)

FORMATS = ("jsonl", "json", "sqlite")
ROLES: dict[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "tool": "tool",
    "function": "tool",
    "system": "system",
    "developer": "system",
}
MAX_FILES = 10_000
MAX_RECORDS = 200_000
_SELECT = re.compile(r"^\s*select\b[^;]*;?\s*$", re.I | re.S)


def normalise_name(name: str) -> str:
    """Case, spaces, hyphens and underscores are ignored when matching agent names (nothing else)."""
    return re.sub(r"[\s_\-]+", "", name).lower()


def discover_installation(name: str, env: Mapping[str, str]) -> str | None:
    """An installed executable, macOS app or Python package whose name matches ``name``; None if none does."""
    wanted = normalise_name(name)
    for directory in (env.get("PATH") or "").split(":"):
        path = Path(directory)
        if not path.is_dir():
            continue
        try:
            for entry in path.iterdir():
                if normalise_name(entry.name) == wanted and shutil.which(entry.name, path=directory):
                    return str(entry)
        except OSError:
            continue
    for apps in (Path("/Applications"), Path(env.get("HOME") or "~") / "Applications"):
        if apps.is_dir():
            for app in apps.glob("*.app"):
                if normalise_name(app.stem) == wanted:
                    return str(app)
    return None


def get_path(record: Any, path: str | None) -> Any:
    """Follow a dot path (``message.content``, ``parts.0.text``) through dicts and lists."""
    if not path:
        return None
    value = record
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


@dataclass
class Recipe:
    """How to read one custom agent's history."""

    name: str
    format: str
    path: str
    fields: dict[str, str]
    role_map: dict[str, str] = field(default_factory=dict)
    records_path: str | None = None
    query: str | None = None
    timestamp_format: str = "auto"
    file_suffix: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recipe:
        """Validate and load a recipe; ValueError names the problem."""
        fmt = data.get("format")
        if fmt not in FORMATS:
            raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
        fields = data.get("fields") or {}
        if not isinstance(fields, dict) or not fields.get("role") or not fields.get("content"):
            raise ValueError("fields: a recipe needs at least 'role' and 'content' paths")
        query = data.get("query")
        if fmt == "sqlite" and (not isinstance(query, str) or not _SELECT.match(query)):
            raise ValueError("query: a sqlite recipe needs one SELECT statement")
        return cls(
            name=str(data["name"]),
            format=fmt,
            path=str(data["path"]),
            fields=dict(fields),
            role_map=dict(data.get("roleMap") or {}),
            records_path=data.get("recordsPath"),
            query=query,
            timestamp_format=str(data.get("timestampFormat") or "auto"),
            file_suffix=data.get("fileSuffix"),
        )

    def to_json(self) -> dict[str, Any]:
        """The saved form."""
        return {
            "version": 1,
            "name": self.name,
            "format": self.format,
            "path": self.path,
            "fields": self.fields,
            "roleMap": self.role_map,
            "recordsPath": self.records_path,
            "query": self.query,
            "timestampFormat": self.timestamp_format,
            "fileSuffix": self.file_suffix,
        }


def _time(value: Any, fmt: str) -> str:
    if fmt == "unix_seconds" and isinstance(value, int | float):
        return to_iso(float(value))
    if fmt == "unix_milliseconds" and isinstance(value, int | float):
        return to_iso(float(value) / 1000)
    return to_iso(value)


class RecipeAdapter:
    """A :class:`~memmy.sources.model.SourceAdapter` driven by a saved recipe."""

    initial_limit = 500  # the first import of a custom agent takes its latest 500 complete turns

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.name = recipe.name

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """The recipe's history path."""
        return [Path(self.recipe.path).expanduser()]

    def _records(self, stats: ScanStats) -> Iterator[tuple[str, dict[str, Any]]]:
        root = Path(self.recipe.path).expanduser()
        if self.recipe.format == "sqlite":
            try:
                conn = open_sqlite_readonly(root)
                rows = conn.execute(self.recipe.query or "").fetchmany(MAX_RECORDS)
                conn.close()
            except Exception as exc:  # noqa: BLE001 - a broken database is counted, never fatal
                stats.errors.append(f"{root}: {exc}")
                return
            for row in rows:
                stats.records += 1
                yield str(root), dict(row)
            return
        suffix = self.recipe.file_suffix or (".jsonl" if self.recipe.format == "jsonl" else ".json")
        files = [root] if root.is_file() else sorted(root.rglob(f"*{suffix}"))[:MAX_FILES]
        for file in files:
            stats.files += 1
            if self.recipe.format == "jsonl":
                for _, obj in iter_jsonl(file, stats):
                    yield str(file), obj
                continue
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                stats.errors.append(f"{file}: {exc}")
                continue
            records = get_path(data, self.recipe.records_path) if self.recipe.records_path else data
            for obj in records if isinstance(records, list) else []:
                stats.records += 1
                if isinstance(obj, dict):
                    yield str(file), obj
                else:
                    stats.skip("non_object_record")

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """Group mapped records by conversation id (or by file) in time order."""
        fields = self.recipe.fields
        grouped: dict[str, list[SourceMessage]] = {}
        for origin, record in self._records(stats):
            raw_role = str(get_path(record, fields["role"]) or "").lower()
            role = ROLES.get(self.recipe.role_map.get(raw_role, raw_role))
            content = extract_text(get_path(record, fields["content"])).strip()
            if role is None:
                stats.skip("unknown_role")
                continue
            if not content:
                stats.skip("empty_message")
                continue
            conversation = str(get_path(record, fields.get("conversationId", "")) or origin)
            index = len(grouped.setdefault(conversation, []))
            workspace = get_path(record, fields.get("workspacePath", ""))
            grouped[conversation].append(
                SourceMessage(
                    message_id=str(get_path(record, fields.get("messageId", "")) or f"{conversation}:{index}"),
                    conversation_id=conversation,
                    role=role,
                    content=content,
                    created_at=_time(get_path(record, fields.get("createdAt", "")), self.recipe.timestamp_format),
                    source=self.name,
                    workspace_path=str(workspace) if workspace else None,
                    git_root=git_root_of(str(workspace)) if workspace else None,
                )
            )
        for conversation, messages in grouped.items():
            messages.sort(key=lambda m: m.created_at)
            stats.messages += len(messages)
            yield Conversation(
                self.name,
                conversation,
                messages,
                self.recipe.path,
                next((m.workspace_path for m in messages if m.workspace_path), None),
            )


def recipes_dir(memmy_home: Path) -> Path:
    """Where recipes are saved."""
    return memmy_home / "sources"


def load_recipes(memmy_home: Path, stats_errors: list[str] | None = None) -> dict[str, RecipeAdapter]:
    """Every saved recipe as an adapter (broken recipe files are reported, not fatal)."""
    adapters: dict[str, RecipeAdapter] = {}
    for file in sorted(recipes_dir(memmy_home).glob("*.json")):
        try:
            recipe = Recipe.from_json(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError) as exc:
            if stats_errors is not None:
                stats_errors.append(f"{file}: {exc}")
            continue
        adapters[recipe.name] = RecipeAdapter(recipe)
    return adapters
