"""L2 policy (experience): when it applies, what to do, and the Prefer / Avoid lines learned from failures and
feedback (``properties["policy"]``).

The Prefer / Avoid lines are stored with their label (``"Avoid: running `pytest` before installing"``); the
typed payload holds them without it, and the label is written back only here. The agent reads a failure
avoidance as one line, "Avoid: … Instead: …", written from the unlabelled lines.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memmy.domain import Memory
from memmy.kinds.stored import Stored, count, number, section_of, strings, text
from memmy.kinds.text import ITEM_CHARS, norm_line

KEY = "policy"
#: Stored names SQL reads by JSON path (``$.policy.status``, ``$.policy.gain``).
STATUS = "status"
GAIN = "gain"
PREFER = "Prefer"
AVOID = "Avoid"
#: A label as older rows and models wrote it (English or Chinese, either colon).
_LABEL = re.compile(r"^(?:prefer|avoid|偏好|避免)\s*[:：]\s*", re.IGNORECASE)
#: Types whose Avoid line and its fix are what the agent reads first.
GUARDRAIL_TYPES = ("failure_avoidance", "repair_instruction")
USE_HINTS = {
    "failure_avoidance": "Use as a guardrail before planning.",
    "repair": "Use as repair guidance when the current attempt is failing.",
    "repair_instruction": "Use as repair guidance when the current attempt is failing.",
    "verification": "Use as a verification checklist.",
    "preference": "Use as a user preference.",
}
PAIR_LINES = 2  # Avoid lines and fixes an item shows
GUIDANCE_CAP = 6  # Prefer / Avoid lines a policy keeps


def path(name: str) -> str:
    """The JSON path of a policy field (``$.policy.<name>``)."""
    return f"$.{KEY}.{name}"


def unlabel(line: str) -> str:
    """A guidance line without its Prefer / Avoid label."""
    return _LABEL.sub("", line.strip())


def labelled(label: str, line: str) -> str:
    """A guidance line as stored: ``<label>: <line>`` (an existing label replaced)."""
    return f"{label}: {unlabel(line)}"


def stored_line(experience_type: str, label: str, line: str) -> str:
    """A Prefer / Avoid line as a policy of ``experience_type`` stores it: labelled, except the steps that worked of
    a success pattern, stored as they are."""
    return line if experience_type == "success_pattern" else labelled(label, line)


def unlabelled_lines(value: Any) -> tuple[str, ...]:
    """Stored Prefer / Avoid lines without their labels (empty ones dropped)."""
    return tuple(u for u in (unlabel(v) for v in strings(value)) if u)


@dataclasses.dataclass(frozen=True)
class Policy(Stored):
    """The stored payload of one L2 policy."""

    KEY: ClassVar[str] = KEY
    NAMES: ClassVar[dict[str, str]] = {
        "title": "title",
        "trigger": "trigger",
        "procedure": "procedure",
        "verification": "verification",
        "boundary": "boundary",
        "experience_type": "type",
        "signature": "signature",
        "status": STATUS,
        "source": "source",
        "support": "support",
        "gain": GAIN,
        "raw_gain": "rawGain",
        "confidence": "confidence",
        "salience": "salience",
        "preference": "preference",
        "anti_pattern": "anti_pattern",
        "source_episode_ids": "sourceEpisodeIds",
        "source_trace_ids": "sourceTraceIds",
        "seen_in": "seenIn",
        "stats_runs": "statsRuns",
    }

    title: str = ""
    trigger: str = ""
    procedure: str = ""
    verification: str = ""
    boundary: str = ""
    experience_type: str = "success_pattern"  # success_pattern | failure_avoidance | preference | repair_instruction
    signature: str = ""
    status: str = "candidate"  # candidate | active | archived
    source: str = ""  # "feedback" for a policy written from the user's note
    support: int = 0
    gain: float = 0.0
    raw_gain: float = 0.0
    confidence: float = 0.5
    salience: float = 0.0
    preference: tuple[str, ...] = ()  # what to do, without the "Prefer:" label
    anti_pattern: tuple[str, ...] = ()  # what not to do, without the "Avoid:" label
    source_episode_ids: tuple[str, ...] = ()
    source_trace_ids: tuple[str, ...] = ()
    seen_in: tuple[str, ...] = ()  # the tasks it was used for
    stats_runs: int = 0

    @classmethod
    def read(cls, section: Mapping[str, Any]) -> Policy:
        """The policy of a stored section (labels taken off its Prefer / Avoid lines)."""
        return cls(
            stored=dict(section),
            title=text(section.get("title")),
            trigger=text(section.get("trigger")),
            procedure=text(section.get("procedure")),
            verification=text(section.get("verification")),
            boundary=text(section.get("boundary")),
            experience_type=text(section.get("type"), "success_pattern"),
            signature=text(section.get("signature")),
            status=text(section.get(STATUS), "candidate"),
            source=text(section.get("source")),
            support=count(section.get("support")),
            gain=number(section.get(GAIN)),
            raw_gain=number(section.get("rawGain")),
            confidence=number(section.get("confidence"), 0.5),
            salience=number(section.get("salience")),
            preference=unlabelled_lines(section.get("preference")),
            anti_pattern=unlabelled_lines(section.get("anti_pattern")),
            source_episode_ids=strings(section.get("sourceEpisodeIds")),
            source_trace_ids=strings(section.get("sourceTraceIds")),
            seen_in=strings(section.get("seenIn")),
            stats_runs=count(section.get("statsRuns")),
        )

    def section(self) -> dict[str, Any]:
        """The section to store; changed Prefer / Avoid lines get their label back."""
        out = super().section()
        for name, label in (("preference", PREFER), ("anti_pattern", AVOID)):
            if name in out and getattr(self, name) != getattr(type(self).read(self.stored), name):
                out[name] = [labelled(label, line) for line in getattr(self, name)]
        return out

    @property
    def is_guardrail(self) -> bool:
        """A failure avoidance or repair: its Avoid line and fix come first."""
        return self.experience_type in GUARDRAIL_TYPES

    @property
    def has_pair(self) -> bool:
        """An Avoid line with what to do instead."""
        return bool(self.preference and self.anti_pattern)


def of(memory: Memory) -> Policy:
    """The policy of an L2 memory (defaults when it has none)."""
    return Policy.of(memory.properties)


def stored_lines(properties: Mapping[str, Any], key: str) -> list[str]:
    """The Prefer (``preference``) or Avoid (``anti_pattern``) lines of a policy or skill, labelled as stored."""
    for section in (section_of(properties, KEY), section_of(properties, "skill")):
        if section:
            return [str(v) for v in strings(section.get(key))]
    return []


def distinct(values: Iterable[str], limit: int) -> list[str]:
    """Up to ``limit`` lines saying different things, each on one line without a closing period."""
    out: list[str] = []
    for value in values:
        one = " ".join(value.split()).rstrip("。.")
        if one and norm_line(one) not in {norm_line(o) for o in out}:
            out.append(one)
    return out[:limit]


def _evidence_words(line: str) -> set[str]:
    """Words of three or more letters or digits (commands, files, error text) of a guidance line."""
    return set(re.findall(r"[a-z0-9]{3,}", line.lower()))


def pair_line(avoid_lines: Iterable[str], prefer_lines: Iterable[str], prefer_limit: int) -> str:
    """ "Avoid: … Instead: …" (then "Also avoid: …", "Or: …"): the first Avoid line and the fix that names the same
    command, file or error. "" when there is neither."""
    avoid, prefer = distinct(avoid_lines, PAIR_LINES), distinct(prefer_lines, prefer_limit)
    if avoid:
        anchor = _evidence_words(avoid[0])
        prefer.sort(key=lambda one: -len(_evidence_words(one) & anchor))
    prefer = prefer[:PAIR_LINES]
    if not avoid and not prefer:
        return ""
    first = avoid[0] if avoid else ""
    if prefer and len(first) + len(prefer[0]) > ITEM_CHARS - 30:  # keep the pair: drop the error's detail
        first = re.sub(r"\s*[(（][^()（）]*[)）]?\s*$", "", first) or first  # closed, or cut off
    parts = [f"{AVOID}: {first}." if first else "", f"Instead: {prefer[0]}." if prefer else ""]
    parts += [f"Also avoid: {one}." for one in avoid[1:]] + [f"Or: {one}." for one in prefer[1:]]
    return " ".join(p for p in parts if p)


def line(memory: Memory, prefer_limit: int = 6) -> str:
    """What the agent reads of a policy: a guardrail's "Avoid: … Instead: …", else "<trigger>: <procedure>"."""
    policy = of(memory)
    if policy.is_guardrail:
        pair = pair_line(policy.anti_pattern, policy.preference, prefer_limit)
        if pair:
            return pair
    trigger = policy.trigger or memory.title
    procedure = policy.procedure or memory.content
    return f"{trigger.rstrip('.')}: {procedure}" + (f" Check: {policy.verification}" if policy.verification else "")


def body(memory: Memory) -> str:
    """The reference layout of ``memory/search``: id, how to use it, its trigger, guidance, scope and check."""
    policy = of(memory)
    hint = USE_HINTS.get(policy.experience_type, "Use as prior successful guidance when the current task matches.")
    lines = [f"id: {memory.id}", f"Use: {hint}"]
    fields = (
        ("Trigger", "trigger"),
        ("Guidance", "procedure"),
        ("Avoid", "avoid"),  # Prefer/Avoid lists (preference, anti_pattern) go to the Decision guidance block
        ("Scope", "boundary"),
        ("Check", "verification"),
    )
    structured = False
    for label, key in fields:
        value = policy.stored.get(key)
        if value:
            structured = True
            lines.append(f"{label}: {value if isinstance(value, str) else '; '.join(map(str, value))}")
    if not structured:
        if memory.title:
            lines.append(f"Trigger: {memory.title}")
        lines.append(f"Guidance: {memory.content}")
    return "\n".join(lines)


@dataclass
class PolicyDraft:
    """A policy to create or merge: what induction (heuristic or LLM) produced."""

    title: str
    trigger: str
    procedure: str
    verification: str
    boundary: str
    experience_type: str
    evidence_polarity: str  # positive | negative | mixed
    signature: str
    confidence: float
    support_trace_ids: list[str]
    caveats: list[str] = field(default_factory=list)
    preference: list[str] = field(default_factory=list)  # without the "Prefer:" label (stored with it)
    anti_pattern: list[str] = field(default_factory=list)  # without the "Avoid:" label (stored with it)
    tags: list[str] = field(default_factory=list)
    origin: str = "heuristic"  # heuristic | llm


def draft_section(draft: PolicyDraft, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stored section of a policy written from ``draft`` over its ``previous`` section (new: status candidate,
    no support, no gain)."""
    payload = dict(previous or {})
    kind = draft.experience_type
    payload.update(
        {
            "title": draft.title,
            "trigger": draft.trigger,
            "procedure": draft.procedure,
            "verification": draft.verification,
            "boundary": draft.boundary,
            "type": draft.experience_type,
            "evidencePolarity": draft.evidence_polarity,
            "signature": draft.signature,
            "confidence": round(draft.confidence, 4),
            "preference": [stored_line(kind, PREFER, line) for line in draft.preference[:GUIDANCE_CAP]],
            "anti_pattern": [stored_line(kind, AVOID, line) for line in draft.anti_pattern[:GUIDANCE_CAP]],
            "caveats": draft.caveats,
            "origin": draft.origin,
            "skillEligible": draft.experience_type == "success_pattern",
        }
    )
    payload.setdefault("status", "candidate")
    payload.setdefault("support", 0)
    payload.setdefault("gain", 0.0)
    return payload


def draft_embedding_text(draft: PolicyDraft, seen_in: list[str] | None = None) -> str:
    """The text a policy written from ``draft`` is embedded by (and the tasks it was seen in)."""
    parts = [draft.title, draft.trigger, draft.procedure, draft.verification, draft.boundary, *(seen_in or [])]
    return "\n".join(x for x in parts if x)
