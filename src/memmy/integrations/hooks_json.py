"""Merging memmy's hook entries into an agent's JSON hook config (Claude Code, Codex, Cursor shapes).

memmy's entries are recognised by their command (the ``memmy-hook`` launcher, or ``-m memmy.hook`` in entries
written by older versions), so removal deletes exactly them, installing twice changes nothing and re-running
``init`` replaces an old entry. Every other key and hook is kept as it was.
"""

from __future__ import annotations

import copy
from typing import Any

from memmy.integrations.base import HOOK_MODULE
from memmy.integrations.launcher import HOOK_SHIM

MARK = f"-m {HOOK_MODULE} "
SHIM_MARK = f"/{HOOK_SHIM}"


def is_memmy_command(command: Any) -> bool:
    """True for a hook command that runs memmy's hook runtime (through the launcher or an interpreter)."""
    if not isinstance(command, str):
        return False
    if MARK in command:
        return True
    head = command.split(" ", 1)[0].strip("'\"")
    return head.endswith(SHIM_MARK)


def _strip_grouped(entries: list[Any]) -> list[Any]:
    """Remove memmy handlers from ``[{matcher, hooks:[...]}]`` groups; drop groups memmy emptied."""
    kept = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
            kept.append(entry)
            continue
        handlers = entry["hooks"]
        remaining = [h for h in handlers if not (isinstance(h, dict) and is_memmy_command(h.get("command")))]
        if len(remaining) == len(handlers):
            kept.append(entry)
        elif remaining:
            kept.append({**entry, "hooks": remaining})
    return kept


def _strip_flat(entries: list[Any]) -> list[Any]:
    """Remove memmy entries from Cursor's flat ``[{command, timeout}]`` lists."""
    return [e for e in entries if not (isinstance(e, dict) and is_memmy_command(e.get("command")))]


def without_memmy(data: dict[str, Any], flat: bool = False) -> dict[str, Any]:
    """A copy of the config with every memmy hook removed (and containers memmy emptied dropped)."""
    result = copy.deepcopy(data)
    hooks = result.get("hooks")
    if not isinstance(hooks, dict):
        return result
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        stripped = _strip_flat(entries) if flat else _strip_grouped(entries)
        if stripped or not entries:
            hooks[event] = stripped
        else:
            del hooks[event]
    if not hooks:
        del result["hooks"]
    return result


def with_memmy(data: dict[str, Any], entries: dict[str, dict[str, Any]], flat: bool = False) -> dict[str, Any]:
    """The config with exactly one memmy entry per event appended (earlier memmy entries replaced).

    ``entries`` maps an event to the complete entry in the host's shape (a ``{matcher?, hooks: [...]}`` group,
    or a flat ``{command, timeout}`` handler for Cursor).
    """
    result = without_memmy(data, flat)
    hooks = result.setdefault("hooks", {})
    for event, entry in entries.items():
        hooks.setdefault(event, []).append(entry)
    return result
