"""Typed requests of history import (``POST /api/v1/sources/scan``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

from memmy.commands.base import Command, param
from memmy.commands.fields import iso_time_field
from memmy.commands.validate import opt_list
from memmy.errors import InvalidArgument

#: The built-in history sources (custom sources add their own names in config).
SOURCE_NAMES = ("claude_code", "codex", "cursor", "hermes", "openclaw", "opencode", "pi", "qwenwork", "workbuddy")


def _names(body: dict[str, Any], key: str) -> tuple[str, ...]:
    names = opt_list(body, key)
    if not all(isinstance(name, str) for name in names):
        raise InvalidArgument(f"{key}: expected an array of source names (strings)")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class StartScan(Command):
    """``POST /api/v1/sources/scan``: import agent history in the background (one job at a time).

    Which names exist is the service's to judge (custom sources come from config); the shape is checked here.
    """

    summary: ClassVar[str] = "Start a history import job"
    schema_extra: ClassVar[dict[str, Any]] = {  # mode=full re-reads all history, so it needs confirm=true
        "anyOf": [
            {"properties": {"mode": {"const": "incremental"}}},
            {"properties": {"confirm": {"const": True}}, "required": ["confirm"]},
        ]
    }
    sources: tuple[str, ...] = param(
        (),
        read=_names,
        schema={"type": "array", "items": {"type": "string"}},
        doc=f"built-in sources ({', '.join(SOURCE_NAMES)}) or custom ones; empty: every source found",
        redact=False,
    )
    mode: Literal["incremental", "full"] = param("incremental", doc="full re-reads all history (a deep scan)")
    confirm: bool = param(False, doc="required for mode=full")
    since: str | None = param(None, read=iso_time_field, schema={"format": "date-time"})
    dry_run: bool = False
    initial_limit: int = param(1000, schema={"minimum": 1, "maximum": 1_000_000})
    stop_on_disconnect: bool = param(False, doc="stop when the last events follower leaves")

    @classmethod
    def from_json(cls, body: object = None) -> Self:
        """Parse the body; a full re-read must be confirmed."""
        scan = super().from_json(body)
        if scan.mode == "full" and not scan.confirm:
            raise InvalidArgument("mode 'full' re-reads all history: confirm it with \"confirm\": true")
        return scan
