"""One module per agent; :data:`ADAPTERS` maps source ids to adapter instances."""

from __future__ import annotations

from memmy.sources.adapters import claude_code, codex, cursor, hermes, openclaw, opencode, pi, qwenwork, workbuddy
from memmy.sources.model import SourceAdapter

ADAPTERS: dict[str, SourceAdapter] = {
    module.ADAPTER.name: module.ADAPTER
    for module in (claude_code, codex, cursor, opencode, openclaw, hermes, workbuddy, pi, qwenwork)
}
SOURCE_IDS = tuple(ADAPTERS)
