"""Requests about Dream passes: run, log, one pass, restore."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from memmy.commands.base import Command, param
from memmy.commands.governance import MAX_OFFSET


@dataclass(frozen=True)
class DreamRun(Command):
    """``POST /api/v1/dream/run``: one Dream pass now."""

    summary: ClassVar[str] = "Run a Dream pass (merge twins, archive stale/contradicted)"
    dry_run: bool = param(False, doc="report, write nothing")


@dataclass(frozen=True)
class DreamLog(Command):
    """``GET /api/v1/dream/log``: past passes, newest first."""

    summary: ClassVar[str] = "Past Dream passes with counts per action (limit, offset)"
    in_query: ClassVar[bool] = True
    limit: int = param(20, schema={"minimum": 1, "maximum": 1000})
    offset: int = param(0, schema={"minimum": 0, "maximum": MAX_OFFSET})


@dataclass(frozen=True)
class DreamGet(Command):
    """``GET /api/v1/dream/{id}``: one pass and its changes."""

    summary: ClassVar[str] = "One Dream pass and its changes (verbose=true: full rows)"
    in_query: ClassVar[bool] = True
    verbose: bool = param(False, doc="the full before/after rows")


@dataclass(frozen=True)
class DreamRestore(Command):
    """``POST /api/v1/dream/{id}/restore``: undo a pass byte for byte."""

    summary: ClassVar[str] = "Undo a Dream pass byte for byte"
    force: bool = param(False, doc="overwrite memories edited after the dream")
