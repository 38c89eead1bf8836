"""The kinds of memory read their stored form and write it back unchanged; a changed field is stored as before."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memmy.domain import Memory
from memmy.kinds import episode, policy, skill, trace, world
from memmy.kinds.catalog import KINDS, kind_of
from memmy.kinds.stored import Stored

#: Memories as the evolution benchmark's week stored them (English and Chinese; every layer and policy type).
EXAMPLES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "kinds_stored.json").read_text(encoding="utf-8")
)
PAYLOADS: tuple[type[Stored], ...] = (trace.Trace, policy.Policy, world.WorldModel, skill.Skill)


def memory_of(example: dict[str, Any]) -> Memory:
    return Memory(
        id=example["id"],
        layer=example["layer"],
        title=example["title"],
        content=example["content"],
        properties=example["properties"],
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["example"] for e in EXAMPLES])
@pytest.mark.parametrize("payload", PAYLOADS, ids=[p.__name__ for p in PAYLOADS])
def test_a_stored_payload_is_written_back_as_it_was(example: dict[str, Any], payload: type[Stored]) -> None:
    properties = example["properties"]
    read = payload.of(properties)
    written = read.to_properties(properties)
    assert json.dumps(written, sort_keys=True) == json.dumps(properties, sort_keys=True)


def test_every_example_layer_is_read_with_its_fields() -> None:
    layers = {e["layer"] for e in EXAMPLES}
    assert layers == {"L1", "L2", "L3", "Skill"}
    traces = [trace.of(memory_of(e)) for e in EXAMPLES if e["layer"] == "L1"]
    assert all(t.user_text and t.episode_id and t.has_exchange for t in traces)
    assert any(t.tool_calls for t in traces) and any(t.reflection for t in traces)
    skills = [skill.of(memory_of(e)) for e in EXAMPLES if e["layer"] == "Skill"]
    assert all(s.name and s.eta is not None and s.source_policy_ids for s in skills)
    notes = [world.of(memory_of(e)) for e in EXAMPLES if e["layer"] == "L3"]
    assert all(n.title and n.domain_key and n.policy_ids for n in notes)


def test_policy_lines_are_unlabelled_in_the_payload_and_labelled_when_stored() -> None:
    stored = {"policy": {"type": "failure_avoidance", "anti_pattern": ["Avoid: rm -rf", "避免：删表"], "gain": 0.2}}
    found = policy.Policy.of(stored)
    assert found.anti_pattern == ("rm -rf", "删表") and found.preference == ()
    assert found.section() == stored["policy"]  # unchanged: written back as it was read
    changed = found.changed(preference=("pnpm install",), gain=0.5)
    assert changed.section() == {**stored["policy"], "preference": ["Prefer: pnpm install"], "gain": 0.5}


def test_a_failure_avoidance_reads_as_one_avoid_and_instead_line() -> None:
    for example in EXAMPLES:
        memory = memory_of(example)
        found = policy.of(memory)
        if memory.layer != "L2" or not found.is_guardrail or not found.anti_pattern:
            continue
        line = kind_of(memory).line(memory)
        assert line.startswith(f"Avoid: {found.anti_pattern[0][:20]}"), line
        assert "Avoid: Avoid" not in line and "Instead: Prefer" not in line
        assert ("Instead: " in line) == bool(found.preference), line


def test_each_recalled_item_is_shown_by_its_kind() -> None:
    assert [k.name for k in KINDS] == ["trace", "episode", "policy", "world", "skill"]
    for example in EXAMPLES:
        memory = memory_of(example)
        kind = kind_of(memory)
        assert kind.line(memory) and kind.body(memory, "summary", 200).startswith(f"id: {memory.id}")
    rollup = Memory(id="episode_1", layer="L1", content="step 1 / Fix the build → Raised the heap.", title="x")
    assert kind_of(rollup, "episode") is not kind_of(rollup) and kind_of(rollup, "episode").line(rollup)


def test_a_rollup_step_is_read_back() -> None:
    step = episode.step_line(
        2, trace.Trace.read({"summary": "Fix the build", "agentText": "Raised the heap. Done."}), "fallback"
    )
    assert episode.parse_step(step) == ("Fix the build", "Raised the heap. Done.")
    assert trace.path(trace.EPISODE_ID) == "$.trace.episode_id" and policy.path(policy.GAIN) == "$.policy.gain"


def test_a_draft_is_stored_with_the_labels_the_kind_writes() -> None:
    draft = policy.PolicyDraft(
        title="Avoid: pip",
        trigger="installing",
        procedure="use uv",
        verification="",
        boundary="",
        experience_type="failure_avoidance",
        evidence_polarity="negative",
        signature="s",
        confidence=0.8,
        support_trace_ids=["t1"],
        preference=["uv"],
        anti_pattern=["pip (use uv instead)"],
    )
    section = policy.draft_section(draft)
    assert section["preference"] == ["Prefer: uv"] and section["anti_pattern"] == ["Avoid: pip (use uv instead)"]
    stored = policy.Policy.read(section)
    assert stored.preference == ("uv",) and stored.anti_pattern == ("pip (use uv instead)",)
    steps = policy.draft_section(replace(draft, experience_type="success_pattern", anti_pattern=[]))
    assert steps["preference"] == ["uv"]  # a success pattern's steps that worked are stored as they are
    memory = Memory(id="policy_1", layer="L2", title=draft.title, content="", properties={"policy": section})
    assert kind_of(memory).line(memory) == "Avoid: pip (use uv instead). Instead: uv."
