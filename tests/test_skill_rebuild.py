"""Skill rebuild levels, reward drift and L3 supersession, in-process over a real SQLite file and MiniLM.

An existing Skill is rebuilt only when new evidence arrives or its policy changes (the reference's
SKILL_REBUILD levels L0/L1/L2); with nothing new, only its eta drifts toward the policy's gain and no model is
called. A world model the LLM names in ``supersedes_world_ids`` is archived and points at its replacement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn
from memmy.domain import Memory
from memmy.embed import Embedder
from memmy.evolve.skill import SKILL_CRYSTALLIZE_PROMPT
from memmy.evolve.world import L3_ABSTRACTION_PROMPT
from memmy.jobs.writer import LayerWrite, LayerWriter
from memmy.namespace import Namespace
from memmy.service import MemoryService
from tests.llm_stub import run_chat_stub
from tests.test_episodes import drain, make_service
from tests.test_evolution_llm import contract_answer
from tests.test_evolution_scenario import ENGLISH, Script

NS = Namespace(source="codex")


def run_episode(svc: MemoryService, script: Script, package: str) -> None:
    """The scenario's episode (fail with ModuleNotFoundError, then fix), in-process."""
    session_id = svc.open_session(OpenSession.from_json({"workspacePath": "/work/billing"}), NS)["sessionId"]
    first = svc.start_turn(StartTurn.from_json({"sessionId": session_id, "query": script.task}), NS)
    failing_call = {
        "name": "bash",
        "input": {"command": "pytest tests/"},
        "output": f"E   ModuleNotFoundError: No module named '{package}'",
        "error": "exit code 1",
        "success": False,
    }
    svc.complete_turn(
        CompleteTurn.from_json(
            {"sessionId": session_id, "query": script.task, "answer": script.fail_answer, "toolCalls": [failing_call]},
            first["turnId"],
        ),
        NS,
    )
    second = svc.start_turn(StartTurn.from_json({"sessionId": session_id, "query": script.followup}), NS)
    fixing = [
        {"name": "bash", "input": {"command": f"pip install {package}"}, "output": f"Successfully installed {package}"},
        {"name": "bash", "input": {"command": "pytest tests/"}, "output": "12 passed in 0.52s", "success": True},
    ]
    svc.complete_turn(
        CompleteTurn.from_json(
            {"sessionId": session_id, "query": script.followup, "answer": script.success_answer, "toolCalls": fixing},
            second["turnId"],
        ),
        NS,
    )
    svc.close_session(CloseSession(session_id))


def the_skill(svc: MemoryService) -> Memory:
    skills = svc.memories.by_layer("Skill", ("activated", "archived"))
    assert len(skills) == 1, [s.title for s in skills]
    return skills[0]


def crystallize_again(svc: MemoryService, policy_id: str) -> None:
    svc.jobs.enqueue("skill_crystallization", dedupe_key=f"test:{policy_id}", target_memory_id=policy_id)
    drain(svc)


@pytest.fixture
def offline(isolated_home: Path, embedder: Embedder) -> Iterator[MemoryService]:
    service = make_service(isolated_home, embedder)
    yield service
    service.close()


def test_a_skill_is_rebuilt_only_when_something_new_arrived(offline: MemoryService) -> None:
    for package in ENGLISH.packages:
        run_episode(offline, ENGLISH, package)
        drain(offline)
    skill = the_skill(offline)
    payload = skill.properties["skill"]
    policy_id = payload["policyId"]
    assert payload["policyFingerprint"] and payload["rebuildLevel"] in ("initial", "L0", "L1", "L2")

    # nothing new since the last build: no rebuild and, within the same policy stats run, no write at all
    crystallize_again(offline, policy_id)
    again = the_skill(offline)
    assert (again.version, again.content) == (skill.version, skill.content)
    assert again.properties["skill"] == payload

    # the policy's statistics moved but nothing else: level L0, only eta drifts toward the gain
    policy = offline.memories.get(policy_id)
    assert policy is not None
    stats = policy.properties["policy"]
    LayerWriter(offline.store, offline.indexer).patch_properties(
        policy, "policy", {"statsRuns": int(stats.get("statsRuns") or 0) + 1}
    )
    crystallize_again(offline, policy_id)
    drifted = the_skill(offline)
    gain = float(stats["gain"])
    assert drifted.properties["skill"]["rebuildLevel"] == "L0" and drifted.content == skill.content
    assert float(drifted.properties["skill"]["eta"]) == pytest.approx(
        0.7 * float(payload["eta"]) + 0.3 * min(1, gain), abs=1e-4
    )

    # a fourth episode brings new evidence: a real rebuild, counted
    run_episode(offline, ENGLISH, "numpy")
    drain(offline)
    rebuilt = the_skill(offline)
    new_payload = rebuilt.properties["skill"]
    assert set(new_payload["evidenceTraceIds"]) - set(payload["evidenceTraceIds"])
    assert new_payload["rebuilds"] > payload.get("rebuilds", 0)
    assert new_payload["rebuildLevel"] in ("L1", "L2") and new_payload["policyFingerprint"]


def test_with_an_llm_an_unchanged_skill_costs_no_call_and_world_models_are_superseded(
    isolated_home: Path, embedder: Embedder
) -> None:
    def answer(system: str, user: str) -> str | None:
        if system[:60] == L3_ABSTRACTION_PROMPT[:60]:
            reply = json.loads(contract_answer(system, user) or "{}")
            reply["supersedes_world_ids"] = re.findall(r"\[world (\S+)\]", user)
            return json.dumps(reply)
        return contract_answer(system, user)

    with run_chat_stub(answer) as stub:
        slot = f"    provider: openai_compatible\n    endpoint: {stub.url}\n    model: stub-model\n"
        svc = make_service(isolated_home, embedder, f"  summary:\n{slot}  evolution:\n{slot}")
        try:
            legacy = LayerWriter(svc.store, svc.indexer).upsert(
                LayerWrite(
                    layer="L3",
                    key="world:legacy-python-notes",
                    title="Old notes on Python test environments",
                    content="Test runs here once needed a manual virtualenv.",
                    tags=["world_model"],
                    properties={"world_model": {"domainKey": "python"}},
                )
            )
            for package in ENGLISH.packages:
                run_episode(svc, ENGLISH, package)
                drain(svc)

            old = svc.memories.get(legacy.id)
            assert old is not None and old.status == "archived", old
            replacement = svc.memories.get(old.superseded_by or "")
            while replacement is not None and replacement.superseded_by:  # the stub lets every note retire the others
                assert replacement.status == "archived"
                replacement = svc.memories.get(replacement.superseded_by)
            assert replacement is not None and replacement.layer == "L3" and replacement.status == "activated"
            assert replacement.title == "Python test environments"
            active = svc.memories.by_layer("L3", ("activated",))
            assert active and all(m.properties["world_model"]["origin"] == "llm" for m in active)

            skill = the_skill(svc)
            assert skill.properties["skill"]["origin"] == "llm"

            def skill_calls() -> int:
                return sum(
                    1
                    for r in stub.requests
                    if r["body"]["messages"][0]["content"][:60] == SKILL_CRYSTALLIZE_PROMPT[:60]
                )

            before = skill_calls()
            crystallize_again(svc, skill.properties["skill"]["policyId"])
            assert skill_calls() == before, "an unchanged skill must not be sent to the model again"
            assert the_skill(svc).version == skill.version
        finally:
            svc.close()
