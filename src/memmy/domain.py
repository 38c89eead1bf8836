"""Plain data types and pure helpers shared by every layer (no I/O)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

Layer = Literal["L1", "L2", "L3", "Skill"]
LAYERS: tuple[Layer, ...] = ("L1", "L2", "L3", "Skill")
KIND_BY_LAYER: dict[str, str] = {"L1": "trace", "L2": "policy", "L3": "world_model", "Skill": "skill"}
ID_PREFIX_BY_LAYER: dict[str, str] = {"L1": "trace", "L2": "policy", "L3": "world", "Skill": "skill"}
#: Every ``doctor --canary`` marker starts with this; only turns carrying their marker can be purged.
CANARY_PREFIX = "memmy-canary-"
STATUSES = ("activated", "resolving", "archived", "deleted")
DEFAULT_USER_ID = "local-user"
DEFAULT_SOURCE = "unknown"


def new_id(prefix: str) -> str:
    """``<prefix>_<20 hex>`` from 10 random bytes, the upstream id shape."""
    return f"{prefix}_{secrets.token_hex(10)}"


def sha256_hex(text: str) -> str:
    """Hex sha256 of UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stable_json(value: Any) -> str:
    """Key-sorted compact JSON, the canonical form used for hashes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def stable_hash(value: Any) -> str:
    """sha256 of :func:`stable_json`."""
    return sha256_hex(stable_json(value))


def normalise_content(text: str) -> str:
    """Whitespace-collapsed, case-folded text used for content-hash dedup."""
    return " ".join(text.split()).casefold()


def content_hash(text: str) -> str:
    """Hash that two memories share when their content differs only in case or spacing."""
    return sha256_hex(normalise_content(text))


def normalise_layer(value: str | None) -> Layer:
    """Accept ``l1``/``L1``/``skill``/``Skill`` and friends; raise ValueError otherwise."""
    if value is None or value == "":
        return "L1"
    upper = value.strip().upper()
    if upper in ("L1", "L2", "L3"):
        return upper  # type: ignore[return-value]
    if upper in ("SKILL", "SKILLS"):
        return "Skill"
    raise ValueError(f"unknown layer {value!r}: expected one of L1, L2, L3, Skill")


@dataclass
class Memory:
    """One memory row as the service sees it."""

    id: str
    layer: Layer
    content: str
    title: str = ""
    tags: list[str] = field(default_factory=list)
    status: str = "activated"
    user_id: str = DEFAULT_USER_ID
    project_id: str | None = None
    source_agent: str = DEFAULT_SOURCE
    session_id: str | None = None
    turn_id: str | None = None
    conversation_id: str | None = None
    memory_key: str | None = None
    content_hash: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    version: int = 1
    created_at: str = ""
    updated_at: str = ""
    deleted_at: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    superseded_by: str | None = None
    visibility: str = "private"

    @property
    def kind(self) -> str:
        """trace | policy | world_model | skill."""
        return KIND_BY_LAYER[self.layer]

    @property
    def summary(self) -> str:
        """A one-line summary: the stored one, else the start of the content."""
        stored = self.properties.get("summary")
        if isinstance(stored, str) and stored:
            return stored
        return summarise(self.content)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for the change log (before/after)."""
        return {
            "id": self.id,
            "layer": self.layer,
            "title": self.title,
            "content": self.content,
            "tags": self.tags,
            "status": self.status,
            "userId": self.user_id,
            "projectId": self.project_id,
            "sourceAgent": self.source_agent,
            "sessionId": self.session_id,
            "version": self.version,
            "validFrom": self.valid_from,
            "validTo": self.valid_to,
            "updatedAt": self.updated_at,
        }


def summarise(text: str, limit: int = 140) -> str:
    """Collapse whitespace and cut to ``limit`` characters with a ``...`` suffix."""
    collapsed = " ".join(text.split())
    if len(collapsed) <= limit:
        return collapsed
    return collapsed[: limit - 3].rstrip() + "..."


def normalise_tags(tags: Any) -> list[str]:
    """Accept a list or a comma-separated string; trim, drop empties, de-duplicate keeping order."""
    if tags is None:
        return []
    if isinstance(tags, str):
        items = tags.split(",")
    elif isinstance(tags, list | tuple):
        items = [str(t) for t in tags]
    else:
        raise ValueError("tags must be a list of strings or a comma-separated string")
    seen: dict[str, None] = {}
    for item in items:
        tag = item.strip()
        if tag:
            seen.setdefault(tag[:64], None)
    return list(seen)


_BEFORE = r"(?:^|(?<=\s))"
#: memmy's own bookkeeping inside stored text: a trace's ``RawTurn: raw_…`` / ``TraceStep: 0`` lines (and the
#: numeric ``Alpha:`` / ``Value:`` / ``Priority:`` lines of older rows), a trace's ``Summary:`` label, an episode
#: roll-up's ``step N / … / RELATED_DEFAULT`` and its reflection labels.
_ENVELOPE = re.compile(_BEFORE + r"(?:(?:RawTurn|TraceStep): \S+|(?:Alpha|Value|Priority): -?[\d.]+)[ \t]*\n?")
_SUMMARY_LABEL = re.compile(_BEFORE + r"Summary: ")
_STEP = re.compile(_BEFORE + r"step (\d+) / ")
_LABELS = r"(?:IRRELEVANT|RELATED_DEFAULT|RELATED|PIVOTAL)"
_REFLECTION_LABEL = re.compile(r" / " + _LABELS + r"(?=\s|$)")
_STEP_LINE = re.compile(r"^([ \t]*)step (\d+) / (.*?)(?: / " + _LABELS + r")?[ \t]*$", re.MULTILINE)


def readable_text(text: str) -> str:
    """``text`` as a person should see it in the panel or the CLI: without memmy's internal labels
    (``Summary:``, ``RawTurn: raw_…``, ``TraceStep: 0``, ``step 1 / … / RELATED_DEFAULT`` becomes ``1. …``)."""
    if not text:
        return text
    text = _ENVELOPE.sub("", text)
    text = _SUMMARY_LABEL.sub("", text)
    if text.startswith("step 1 / ") and "\n" not in text:  # a roll-up folded onto one line (a hit's snippet)
        return _REFLECTION_LABEL.sub("", _STEP.sub(r"\1. ", text))
    return _STEP_LINE.sub(r"\1\2. \3", text)  # a roll-up's lines, also inside a rendered context block


#: The prefix of a team project's key-graph owner (a team server's person names cannot hold ``:``).
TEAM_KEYS_PREFIX = "team:"


def team_keys(project: str) -> str:
    """The key-graph owner of a team project: its keys point at the project's team memories, whoever wrote them."""
    return TEAM_KEYS_PREFIX + project
