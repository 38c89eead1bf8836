"""What a turn becomes before the store is asked anything: the captured turn of an imported one, and its L1 trace step.

Pure functions of the turn and the capture caps. :class:`~memmy.traces.writer.TraceWriter` runs them in-process; the
history reader process runs them beside the importer (:class:`ImportPreparer`, see ``memmy.sources.reading``), so
this module stays light to import: no store, no index, no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memmy.capture.trace import TraceStep, build_trace_step, normalize_tool_calls
from memmy.domain import Memory
from memmy.namespace import normalise_source
from memmy.store.tombstones import Tombstone
from memmy.traces.turn import CapturedTurn, HostTurn, session_of_conversation


@dataclass
class PreparedTrace:
    """A redacted turn with its trace step, and what the store already says about it."""

    turn: CapturedTurn
    tool_calls: list[dict[str, Any]]
    step: TraceStep
    tombstone: Tombstone | None = None
    #: Another memory already holding this very turn (the other capture path stored it first).
    duplicate: Memory | None = None


def build_trace(turn: CapturedTurn, max_text_chars: int, max_tool_output_chars: int) -> PreparedTrace:
    """Normalise a redacted turn's tool calls and build its trace step (no store access)."""
    tool_calls = normalize_tool_calls(turn.tool_calls, turn.tool_results)
    step = build_trace_step(
        user_text=turn.user_text,
        assistant_text=turn.assistant_text,
        tool_calls=tool_calls,
        raw_turn_id=turn.raw_turn_id,
        reasoning=turn.reasoning,
        request_tags=turn.tags,
        max_text_chars=max_text_chars,
        max_tool_output_chars=max_tool_output_chars,
    )
    return PreparedTrace(turn, tool_calls, step)


class _Message(Protocol):
    @property
    def message_id(self) -> str: ...  # noqa: D102


class ImportedTurnLike(Protocol):
    """What an imported transcript turn offers (``memmy.sources.imported_turns.ImportedTurn``)."""

    source: str
    conversation_id: str

    @property
    def messages(self) -> Sequence[_Message]: ...  # noqa: D102

    @property
    def turn_id(self) -> str: ...  # noqa: D102

    @property
    def first_user(self) -> _Message: ...  # noqa: D102

    @property
    def created_at(self) -> str: ...  # noqa: D102

    @property
    def user_text(self) -> str: ...  # noqa: D102

    @property
    def assistant_text(self) -> str: ...  # noqa: D102

    @property
    def workspace_path(self) -> str | None: ...  # noqa: D102

    @property
    def git_root(self) -> str | None: ...  # noqa: D102

    def tool_calls(self) -> list[dict[str, object]]: ...  # noqa: D102


def captured_import(turn: ImportedTurnLike, user_id: str) -> CapturedTurn:
    """The typed turn an imported (already redacted) transcript turn becomes."""
    return CapturedTurn(
        session_id=session_of_conversation(turn.source, turn.conversation_id),
        turn_id=turn.turn_id,
        user_id=user_id,
        project_id=turn.git_root or turn.workspace_path,
        source=normalise_source(turn.source),
        user_text=turn.user_text,
        assistant_text=turn.assistant_text,
        tool_calls=list(turn.tool_calls()),
        tags=[turn.source.replace("_", "")],
        host=HostTurn(turn.source, turn.conversation_id, turn.first_user.message_id),
        conversation_id=turn.conversation_id,
        workspace_path=turn.workspace_path,
        created_at=turn.created_at,
        source_message_ids=[m.message_id for m in turn.messages],
        imported=True,
        redacted=True,
    )


@dataclass(frozen=True)
class ImportPreparer:
    """Builds an imported turn's trace: picklable, so the history reader process builds it beside the importer."""

    user_id: str
    max_text_chars: int
    max_tool_output_chars: int

    def __call__(self, turn: ImportedTurnLike) -> PreparedTrace:
        """The turn's :class:`PreparedTrace`, exactly as the writer would build it."""
        return build_trace(captured_import(turn, self.user_id), self.max_text_chars, self.max_tool_output_chars)
