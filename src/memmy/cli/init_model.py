"""``init``'s choice of the local embedding model from the languages of the agents' history on this machine.

The user's own messages are sampled from every history adapter (Claude Code, Codex, Cursor, ...), a bounded
number of conversations each, and :func:`memmy.embed.choice.choose_model` decides. A model the config file
already names is never changed: the choice is made once, written to the config, and a store that holds vectors of
the other model is re-embedded in the background by the daemon.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from memmy.embed.choice import ModelChoice, choose_model
from memmy.sources.adapters import ADAPTERS
from memmy.sources.model import ScanStats

#: Conversations read per agent and user messages read in all: enough to tell a language, cheap to read.
CONVERSATIONS_PER_AGENT = 20
MAX_MESSAGES = 400


def user_messages(env: Mapping[str, str], limit: int = MAX_MESSAGES) -> list[str]:
    """Up to ``limit`` of the person's own messages from the agents' history (an unreadable history is skipped)."""

    def texts() -> Iterator[str]:
        for adapter in ADAPTERS.values():
            try:
                for conversation in islice(adapter.conversations(env, ScanStats()), CONVERSATIONS_PER_AGENT):
                    yield from (m.content for m in conversation.messages if m.role == "user" and m.content)
            except (OSError, ValueError, sqlite3.Error):  # an unreadable history tells no language
                continue

    return list(islice(texts(), limit))


def embedding_choice(env: Mapping[str, str], file_config: Mapping[str, Any]) -> ModelChoice | None:
    """The model to write for a config file whose ``embedding`` section is ``file_config`` (None: leave it as it
    is: the file names a model or a provider other than the local one already, or no history was found, so that
    a later ``init`` may still choose from one)."""
    if file_config.get("model") or str(file_config.get("provider") or "local").strip().lower() != "local":
        return None
    choice = choose_model(user_messages(env))
    return choice if choice.messages else None
