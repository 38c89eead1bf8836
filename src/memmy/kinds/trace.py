"""L1 trace: one captured turn (``properties["trace"]``), the exchange an agent reads back.

Stored by ``capture/trace.py`` through ``traces/writer.py``; evolution adds its episode, reflection, value and
summary. The turn-level fields are also mirrored at the top of ``properties`` (``value``, ``alpha``,
``priority``, ``reflection``) for the SQL that ranks traces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from memmy.domain import Memory
from memmy.kinds.stored import Stored, records, section_of, strings, text
from memmy.kinds.stored import number as num
from memmy.kinds.text import whole_sentences

KEY = "trace"
#: Stored names SQL reads by JSON path (``json_extract(properties_json, '$.trace.episode_id')``).
EPISODE_ID = "episode_id"
RAW_TURN_ID = "raw_turn_id"
SIGNATURE = "signature"
VALUE = "value"
PRIORITY = "priority"
#: Fields mirrored at the top level of ``properties`` when evolution patches them.
MIRRORED = ("value", "alpha", "priority", "reflection")


def path(name: str) -> str:
    """The JSON path of a trace field (``$.trace.<name>``)."""
    return f"$.{KEY}.{name}"


@dataclasses.dataclass(frozen=True)
class Trace(Stored):
    """The stored payload of one L1 trace."""

    KEY: ClassVar[str] = KEY
    NAMES: ClassVar[dict[str, str]] = {
        "user_text": "userText",
        "agent_text": "agentText",
        "summary": "summary",
        "tags": "tags",
        "signature": SIGNATURE,
        "error_signatures": "error_signatures",
        "tool_calls": "tool_calls",
        "status": "status",
        "reflection": "reflection",
        "alpha": "alpha",
        "value": VALUE,
        "priority": PRIORITY,
        "episode_id": EPISODE_ID,
        "raw_turn_id": RAW_TURN_ID,
    }

    user_text: str = ""
    agent_text: str = ""
    summary: str = ""
    tags: tuple[str, ...] = ()
    signature: str = ""  # "primaryTag|secondaryTag|tool|errCode", "_" for a missing part
    error_signatures: tuple[str, ...] = ()
    tool_calls: tuple[Mapping[str, Any], ...] = ()  # normalised: name, input, output, error, success, errorCode
    status: str = ""  # succeeded | failed | cancelled ("" when not recorded)
    reflection: str | None = None  # IRRELEVANT | RELATED | PIVOTAL | RELATED_DEFAULT | free text
    alpha: float = 0.0
    value: float = 0.0
    priority: float = 0.5
    episode_id: str | None = None
    raw_turn_id: str | None = None

    @classmethod
    def read(cls, section: Mapping[str, Any]) -> Trace:
        """The trace of a stored section."""
        reflection = section.get("reflection")
        return cls(
            stored=dict(section),
            user_text=text(section.get("userText")),
            agent_text=text(section.get("agentText")),
            summary=text(section.get("summary")),
            tags=strings(section.get("tags")),
            signature=text(section.get(SIGNATURE)),
            error_signatures=strings(section.get("error_signatures")),
            tool_calls=records(section.get("tool_calls")),
            status=text(section.get("status")),
            reflection=str(reflection) if reflection else None,
            alpha=num(section.get("alpha")),
            value=num(section.get(VALUE)),
            priority=num(section.get(PRIORITY), 0.5),
            episode_id=text(section.get(EPISODE_ID)) or None,
            raw_turn_id=text(section.get(RAW_TURN_ID)) or None,
        )

    @property
    def has_exchange(self) -> bool:
        """Whether the turn's own texts were stored (imported notes carry only the memory's content)."""
        return "userText" in self.stored or "agentText" in self.stored

    def exchange(self, fallback: str = "") -> str:
        """The asked and answered texts, one per line (``fallback`` for a trace without its texts)."""
        return f"{self.user_text or fallback}\n{self.agent_text}"


def of(memory: Memory) -> Trace:
    """The trace of an L1 memory (defaults when it has none)."""
    return Trace.of(memory.properties)


def episode_of(memory: Memory) -> str | None:
    """The episode a trace was routed to (None before routing)."""
    return of(memory).episode_id


def with_fields(properties: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """``properties`` with the trace's stored fields ``changes`` (stored names) set."""
    return {**properties, KEY: {**section_of(properties, KEY), **changes}}


def body(memory: Memory) -> str:
    """The reference layout of ``memory/search``: id, time, then the exchange (or the note's title and text)."""
    trace = of(memory)
    lines = [f"id: {memory.id}", f"timestamp: {memory.created_at}", ""]
    if trace.has_exchange:
        lines += [
            "Historical user statement:",
            trace.user_text,
            "",
            "Historical assistant response:",
            trace.agent_text,
        ]
    else:
        if memory.title:
            lines.append(f"Title: {memory.title}")
        lines.append(memory.content)
    return "\n".join(lines)


def line(memory: Memory) -> str:
    """What the agent reads of a past exchange: the question's first sentences, then the answer."""
    trace = of(memory)
    asked, answer = trace.user_text, trace.agent_text
    if asked or answer:
        return f'Past exchange: asked "{whole_sentences(asked, 160) or asked[:0]}"; answer: {answer}'
    return memory.content
