"""L3 world model: what holds in one domain of the environment, abstracted from active policies
(``properties["world_model"]``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memmy.domain import Memory
from memmy.kinds.stored import Stored, entries, number, strings, text
from memmy.kinds.text import one_line, whole_sentences

KEY = "world_model"
POINTS = 3  # facts an item shows


@dataclasses.dataclass(frozen=True)
class WorldModel(Stored):
    """The stored payload of one L3 note."""

    KEY: ClassVar[str] = KEY
    NAMES: ClassVar[dict[str, str]] = {
        "title": "title",
        "body": "body",
        "domain_key": "domainKey",
        "policy_ids": "policyIds",
        "confidence": "confidence",
        "environment": "environment",
        "constraints": "constraints",
    }

    title: str = ""
    body: str = ""
    domain_key: str = ""  # "primary|secondary" domain tags
    policy_ids: tuple[str, ...] = ()
    confidence: float = 1.0
    environment: tuple[str | Mapping[str, Any], ...] = ()
    constraints: tuple[str | Mapping[str, Any], ...] = ()

    @classmethod
    def read(cls, section: Mapping[str, Any]) -> WorldModel:
        """The world model of a stored section."""
        return cls(
            stored=dict(section),
            title=text(section.get("title")),
            body=text(section.get("body")),
            domain_key=text(section.get("domainKey")),
            policy_ids=strings(section.get("policyIds")),
            confidence=number(section.get("confidence"), 1.0),
            environment=entries(section.get("environment")),
            constraints=entries(section.get("constraints")),
        )

    @property
    def primary_domain(self) -> str:
        """The first part of the domain key."""
        return self.domain_key.split("|")[0]


def of(memory: Memory) -> WorldModel:
    """The world model of an L3 memory (defaults when it has none)."""
    return WorldModel.of(memory.properties)


def body(memory: Memory) -> str:
    """The reference layout of ``memory/search``: id, title, content."""
    world = of(memory)
    return "\n".join(
        [
            f"id: {memory.id}",
            f"Title: {world.title or memory.title or memory.summary}",
            f"Content: {world.body or memory.content}",
        ]
    )


def line(memory: Memory) -> str:
    """What the agent reads of a world model: its title and up to three facts (bullets, else its facts)."""
    world = of(memory)
    title = (world.title or memory.title).strip()
    content = world.body or memory.content
    bullets = [one.strip()[2:] for one in content.splitlines() if one.strip().startswith("- ")]
    facts = [one_line(f) for f in [*world.environment, *world.constraints]]
    points = list(dict.fromkeys(p.rstrip(".。") + "." for p in (bullets or facts) if p.strip()))[:POINTS]
    return f"{title} — " + " ".join(points) if points else whole_sentences(content.replace(title, "", 1))


@dataclass
class WorldModelDraft:
    """An L3 world-model note over one domain bucket of active policies."""

    domain_key: str
    title: str
    body: str
    domain_tags: list[str]
    environment: list[dict[str, Any]]
    inference: list[dict[str, Any]]
    constraints: list[dict[str, Any]]
    policy_ids: list[str]
    cohesion: float
    confidence: float
    admission: str  # strict | loose
    origin: str = "heuristic"
    supersedes: list[str] = field(default_factory=list)  # ids of other world models this note replaces


def draft_section(draft: WorldModelDraft) -> dict[str, Any]:
    """The stored section of a world model written from ``draft``."""
    return {
        "title": draft.title,
        "body": draft.body,
        "domainKey": draft.domain_key,
        "domainTags": draft.domain_tags,
        "environment": draft.environment,
        "inference": draft.inference,
        "constraints": draft.constraints,
        "policyIds": draft.policy_ids,
        "cohesion": round(draft.cohesion, 4),
        "confidence": round(draft.confidence, 4),
        "admission": draft.admission,
        "origin": draft.origin,
    }
