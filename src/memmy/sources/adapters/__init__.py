"""One module per agent; :data:`ADAPTERS` maps source ids to adapter instances."""

from __future__ import annotations

import importlib

from memmy.sources.model import SourceAdapter

SOURCE_IDS = ("claude_code", "codex", "cursor", "opencode", "openclaw", "hermes", "workbuddy", "pi", "qwenwork")


def _load() -> dict[str, SourceAdapter]:
    found: dict[str, SourceAdapter] = {}
    for name in SOURCE_IDS:
        try:
            module = importlib.import_module(f"memmy.sources.adapters.{name}")
        except ModuleNotFoundError:  # DEV ONLY: replaced by static imports once every adapter exists
            continue
        found[name] = module.ADAPTER
    return found


ADAPTERS: dict[str, SourceAdapter] = _load()
