"""The bytes a user's config files had before memmy edited them, so ``remove`` can give them back exactly.

``init`` records, per file it merged into, the original text and the text it wrote
(``$MEMMY_HOME/integrations/originals.json``). ``remove`` restores the original bytes when the file still holds
exactly what memmy wrote (nothing else changed it since); otherwise it falls back to removing memmy's entries
structurally, keeping everyone else's changes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from memmy.integrations.plan import FileChange, Plan, atomic_write, read_text

STORE = Path("integrations") / "originals.json"


def store_path(memmy_home: Path) -> Path:
    """``$MEMMY_HOME/integrations/originals.json``."""
    return memmy_home / STORE


def _load(memmy_home: Path) -> dict[str, dict[str, Any]]:
    text = read_text(store_path(memmy_home))
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _save(memmy_home: Path, records: dict[str, dict[str, Any]]) -> None:
    path = store_path(memmy_home)
    if not records:
        path.unlink(missing_ok=True)
        return
    atomic_write(path, json.dumps(records, indent=2, ensure_ascii=False) + "\n", 0o600)


def record_install(memmy_home: Path, plans: list[Plan]) -> None:
    """After an install was applied: remember each changed file's pre-memmy text and what memmy wrote."""
    records = _load(memmy_home)
    for plan in plans:
        for change in plan.effective:
            if change.path.is_relative_to(memmy_home):
                continue  # memmy's own files (launchers, hook.json) have no user original
            key = str(change.path)
            known = records.get(key)
            if change.after is None:
                records.pop(key, None)
            elif known is not None and known.get("written") == change.before:
                known["written"] = change.after  # memmy edited its own edit: the original still holds
            elif known is None:
                records[key] = {"original": change.before, "written": change.after}
            else:  # someone else changed the file since memmy wrote it: the recorded original is stale
                records.pop(key, None)
    _save(memmy_home, records)


def restore_originals(memmy_home: Path, plan: Plan) -> Plan:
    """A removal plan in which every file memmy alone changed goes back to its original bytes."""
    records = _load(memmy_home)
    changes: list[FileChange] = []
    for change in plan.changes:
        known = records.get(str(change.path))
        if known is not None and change.before is not None and known.get("written") == change.before:
            change = replace(change, after=known.get("original"))
        changes.append(change)
    return replace(plan, changes=changes)


def forget_removed(memmy_home: Path, plans: list[Plan]) -> None:
    """After a removal was applied: drop the records of the files it touched."""
    records = _load(memmy_home)
    for plan in plans:
        for change in plan.effective:
            records.pop(str(change.path), None)
    _save(memmy_home, records)
