"""The typed turn both capture paths build, and the identity that makes a live and an imported copy one turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from memmy.domain import sha256_hex
from memmy.transcripts.turn_grouping import host_turn_id


@lru_cache(maxsize=256)  # every turn of a conversation asks
def session_of_conversation(source: str, conversation_id: str) -> str:
    """The memmy session that holds a host conversation's imported turns."""
    return "import_" + sha256_hex(f"{source}:{conversation_id}")[:20]


def host_turn_key(source: str, turn_id: str) -> str:
    """The memory key of a turn known by its host identity (stable across syncs and capture paths)."""
    return f"memory.add:agent-source:{source}:turn:{turn_id}"


def raw_turn_id_of(session_id: str, turn_id: str) -> str:
    """The raw turn row's id."""
    return "raw_" + sha256_hex(f"{session_id}:{turn_id}")[:20]


def trace_id_of(session_id: str, turn_id: str) -> str:
    """The L1 trace memory's id (one step per turn)."""
    return "trace_" + sha256_hex(f"L1:{session_id}:{turn_id}:0")[:20]


@dataclass(frozen=True)
class HostTurn:
    """Where a turn lives in its host's own history: the importer's source name, conversation and first message."""

    source: str
    conversation_id: str
    message_id: str

    @cached_property
    def turn_id(self) -> str:
        """The host turn id (see :func:`host_turn_id`)."""
        return host_turn_id(self.source, self.conversation_id, self.message_id)

    @cached_property
    def key(self) -> str:
        """The memory key both capture paths give this turn."""
        return host_turn_key(self.source, self.turn_id)


@dataclass(frozen=True)
class CapturedTurn:
    """One completed turn on its way into memory (built from a hook's turn-complete request or an imported turn).

    ``tool_calls``/``tool_results`` are the host's raw shapes (normalised by the writer after redaction);
    ``host`` names the turn in its host's history when known, which makes a live and an imported copy one turn.
    ``imported`` turns were redacted message by message by the importer (``redacted``), start in a closed import
    session, keep their own time and only queue embedding (never a summary job).
    """

    session_id: str
    turn_id: str
    user_id: str
    project_id: str | None
    source: str
    user_text: str
    assistant_text: str
    tool_calls: list[Any] = field(default_factory=list)
    tool_results: list[Any] = field(default_factory=list)
    status: str = "succeeded"
    reasoning: str | None = None
    tags: list[str] = field(default_factory=list)
    source_memory_ids: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    host: HostTurn | None = None
    conversation_id: str | None = None
    workspace_path: str | None = None
    created_at: str | None = None
    source_message_ids: list[str] = field(default_factory=list)
    imported: bool = False
    redacted: bool = False
    #: ``team`` for a turn captured inside a team project (the team reads it), else ``private``.
    visibility: str = "private"

    @cached_property  # a frozen dataclass still has a __dict__ to cache in
    def raw_turn_id(self) -> str:
        """The raw turn row's id."""
        return raw_turn_id_of(self.session_id, self.turn_id)

    @cached_property  # a frozen dataclass still has a __dict__ to cache in
    def memory_id(self) -> str:
        """The L1 trace memory's id."""
        return trace_id_of(self.session_id, self.turn_id)

    @cached_property  # a frozen dataclass still has a __dict__ to cache in
    def memory_key(self) -> str:
        """The host identity key when the host named the turn, else the session-local trace key."""
        return self.host.key if self.host is not None else f"trace:{self.session_id}:{self.turn_id}:0"
