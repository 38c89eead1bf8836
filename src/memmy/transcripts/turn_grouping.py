"""Turn grouping: a user message opens a turn; tool, system and assistant messages join it. Standard library only.

The importer and the hooks group with this one function, each passing its own ``clean`` (the importer strips
memmy's injected context with ``memmy.capture``; the hook with its own lighter copy): a user message that is only
a recalled-memory wrapper opens no turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from memmy.transcripts.model import SourceMessage, with_fields


def host_turn_id(source: str, conversation_id: str, first_message_id: str) -> str:
    """A turn's stable id from its host: ``<source>:`` + sha256(source::conversation::first user message id)[:24].

    The importer and the hooks name a turn by the same reader's ids, so both give it this one id.
    """
    digest = hashlib.sha256(f"{source}::{conversation_id}::{first_message_id}".encode()).hexdigest()[:24]
    return f"{source}:{digest}"


def group_messages(
    messages: Sequence[SourceMessage], clean: Callable[[str], str]
) -> tuple[list[list[SourceMessage]], int]:
    """Split messages into turns; returns (turns, messages before the first user message).

    A user message's content is replaced by its cleaned text; one that cleans to nothing is dropped.
    """
    turns: list[list[SourceMessage]] = []
    orphans = 0
    current: list[SourceMessage] | None = None
    for message in messages:
        if message.role == "user":
            text = clean(message.content)
            if not text:
                continue
            if text != message.content:
                message = with_fields(message, content=text)
            current = [message]
            turns.append(current)
        elif current is None:
            orphans += 1
        else:
            current.append(message)
    return turns, orphans
