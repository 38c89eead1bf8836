"""Store checks for front ends that must not import the store layer: the offline ``doctor`` checks and repair,
and whether a server lock's holder is still the daemon that wrote it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memmy.store.db import ServerLock, lock_holder_alive
from memmy.store.integrity import Finding, check_store, repair_store

__all__ = ["Finding", "check_store", "lock_holder_alive", "repair", "serving_daemon"]


def serving_daemon(db_path: Path) -> str | None:
    """``pid N on host:port`` when a live daemon holds the store's server lock, else None."""
    holder = ServerLock(db_path).read()
    if holder is None or not lock_holder_alive(holder):
        return None
    return f"the memmy daemon pid {holder.get('pid')} on {holder.get('host')}:{holder.get('port')}"


def repair(db_path: Path) -> list[str]:
    """Repair what can be repaired in place (refused while a daemon serves the file); one line per action."""
    return repair_store(db_path, lambda: serving_daemon(db_path))


def holder_if_alive(holder: dict[str, Any]) -> dict[str, Any] | None:
    """``holder`` when the process that wrote that lock is still running, else None."""
    return holder if lock_holder_alive(holder) else None
