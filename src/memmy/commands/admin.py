"""Requests that administer the store: reload the config, export, import, wipe, a team server's people."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from memmy.commands.base import Command, param
from memmy.commands.validate import opt_str
from memmy.errors import InvalidArgument


@dataclass(frozen=True)
class ReloadConfig(Command):
    """``POST /api/v1/admin/reload-config``: re-read config.yaml."""

    summary: ClassVar[str] = "Hot-reload config.yaml"
    reason: str | None = None
    restart_failed_processing: bool = param(True, doc="re-queue failed embeddings")


@dataclass(frozen=True)
class Export(Command):
    """``POST /api/v1/admin/export``: one consistent archive of the store."""

    summary: ClassVar[str] = "Export the store to one archive (manifest + checksums)"
    out: str | None = param(None, doc="archive path on the daemon's machine (default: under the data dir)")
    raw: bool = param(True, doc="false leaves raw turns out")


def _archive(body: dict[str, Any], key: str) -> str:
    path = opt_str(body, key)
    if not path:
        raise InvalidArgument(f"{key}: expected the export archive to import")
    return path


@dataclass(frozen=True)
class ImportStore(Command):
    """``POST /api/v1/admin/import``: merge an archive made by export."""

    summary: ClassVar[str] = "Import an exported archive"
    path: str = param(read=_archive, schema={"type": "string", "minLength": 1, "description": "an export archive"})
    on_conflict: Literal["skip", "replace", "error"] = "skip"
    dry_run: bool = False
    label: str | None = param(None, doc="names the archive in the audit row when path is a temporary copy (an upload)")


def _confirmed(body: dict[str, Any], key: str) -> bool:
    if body.get(key) is not True:
        raise InvalidArgument('confirm: send {"confirm": true} to wipe the store')
    return True


@dataclass(frozen=True)
class Wipe(Command):
    """``POST /api/v1/admin/wipe``: remove every memory (config and tokens stay; a backup first)."""

    summary: ClassVar[str] = "Remove every memory (config and tokens stay; a backup first)"
    confirm: bool = param(read=_confirmed, schema={"const": True})
    backup: bool = True


@dataclass(frozen=True)
class AddPerson(Command):
    """``POST /api/v1/admin/users``: add a person to a team server (their token is in the answer, once)."""

    summary: ClassVar[str] = "Add a person to a team server (their token, shown once)"
    name: str = param(
        schema={"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"},
        doc="the person's name: what their memories and audit rows show as author",
    )
