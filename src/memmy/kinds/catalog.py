"""Each kind as recall shows it: its section of the reference layout, how useful an item of it is, its body,
the one line an agent reads, and the Prefer / Avoid lines it offers to the decision guidance.

``recall/render.py`` lays items out and asks :func:`kind_of` for everything an item says; no layer switch there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memmy.domain import Memory
from memmy.kinds import episode, policy, skill, trace, world


@dataclass(frozen=True)
class Guidance:
    """The Prefer and Avoid lines a memory offers (unlabelled) and how many episodes back them."""

    prefer: tuple[str, ...]
    avoid: tuple[str, ...]
    weight: int


@dataclass(frozen=True)
class Kind:
    """How recall shows one kind of memory."""

    name: str
    heading: str  # the section of the reference layout
    label: str  # each item's label in it
    body: Callable[[Memory, str, int], str]  # (memory, skill mode, summary chars) -> reference body
    line: Callable[[Memory], str]  # what the agent reads
    weight: Callable[[Memory], float]  # how useful an item of this kind is, times its relevance
    guidance: Callable[[Memory], Guidance | None] = lambda _memory: None


def _policy_weight(memory: Memory) -> float:
    return 1.3 if policy.of(memory).has_pair else 1.0  # an Avoid line with what to do instead comes first


def _guidance(memory: Memory) -> Guidance:
    found = policy.of(memory) if memory.layer == "L2" else skill.of(memory)
    return Guidance(found.preference, found.anti_pattern, max(1, len(found.source_episode_ids)))


TRACE = Kind(
    "trace", "## L1 Trace Memories", "Trace", lambda m, _mode, _chars: trace.body(m), trace.line, lambda _m: 0.7
)
EPISODE = Kind(
    "episode",
    "## Similar Past Episodes",
    "Episode",
    lambda m, _mode, _chars: episode.body(m),
    episode.line,
    lambda _m: 0.6,
)
POLICY = Kind(
    "policy",
    "## L2 Experience Memories",
    "Experience",
    lambda m, _mode, _chars: policy.body(m),
    policy.line,
    _policy_weight,
    _guidance,
)
WORLD = Kind(
    "world",
    "## L3 Environment Knowledge",
    "Environment Knowledge",
    lambda m, _mode, _chars: world.body(m),
    world.line,
    lambda _m: 0.6,
)
SKILL = Kind("skill", "## Skill Memories", "Skill", skill.body, skill.line, lambda _m: 1.0, _guidance)


def own_words(memory: Memory) -> str:
    """What a policy or skill says of itself (title, name, trigger, procedure, summary), to pair guidance with it."""
    found = policy.of(memory) if memory.layer == "L2" else skill.of(memory)
    return " ".join(str(found.stored.get(k) or "") for k in ("title", "name", "trigger", "procedure", "summary"))


#: In the order of the reference layout's sections.
KINDS = (TRACE, EPISODE, POLICY, WORLD, SKILL)
_BY_LAYER = {"L1": TRACE, "L2": POLICY, "L3": WORLD, "Skill": SKILL}
#: The source of an episode rollup among recalled items.
EPISODE_SOURCE = "episode"


def kind_of(memory: Memory, source: str = "") -> Kind:
    """The kind a recalled item is shown as: an episode rollup by its source, any other memory by its layer."""
    return EPISODE if source == EPISODE_SOURCE else _BY_LAYER.get(memory.layer, WORLD)
