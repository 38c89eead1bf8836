"""The evolution scenario with an LLM configured: a real OpenAI-compatible server on loopback, started by the test.

The daemon's production client talks to it. The server answers each documented JSON contract (trace summary,
batch reflection, R_human, L2 induction, failure sink, decision repair, L3, skill); the assertions check that
the model's answers are what ended up in the store and in the next turn's injected context. Malformed
output, timeouts and an exhausted daily budget must fall back to the heuristics without losing any work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memmy.evolve.failure import FAILURE_SINK_PROMPT
from memmy.evolve.policy import L2_INDUCTION_PROMPT
from memmy.evolve.reflection import BATCH_REFLECTION_PROMPT
from memmy.evolve.repair import DECISION_REPAIR_PROMPT
from memmy.evolve.reward import REWARD_R_HUMAN_PROMPT
from memmy.evolve.skill import SKILL_CRYSTALLIZE_PROMPT
from memmy.evolve.world import L3_ABSTRACTION_PROMPT
from memmy.jobs.evolution import SUMMARY_PROMPT
from tests.conftest import Daemon
from tests.llm_stub import run_chat_stub
from tests.test_evolution_scenario import ENGLISH, drain, policies, run_episode

LLM_AVOID = "Running pytest in a fresh environment before installing the project's dependencies"
LLM_POLICY_TITLE = "Install missing Python packages before re-running pytest"


def _steps(user: str) -> list[int]:
    try:
        payload = json.loads(user)
        return [int(step["idx"]) for step in payload["steps"]]
    except (ValueError, KeyError, TypeError):
        return [int(i) for i in re.findall(r'"idx":\s*(\d+)', user)]


def contract_answer(system: str, user: str) -> str | None:
    """Answer each evolution prompt with a well-formed reply of its documented contract."""

    def starts(prompt: str) -> bool:
        return system[:60] == prompt[:60]

    if starts(SUMMARY_PROMPT):
        return json.dumps({"summary": "LLM summary: pytest needs the missing package installed first"})
    if starts(BATCH_REFLECTION_PROMPT):
        scores = [{"idx": i, "relevance": "RELATED", "reason": "on path"} for i in _steps(user)]
        if scores:
            scores[-1]["relevance"] = "PIVOTAL"
        return json.dumps({"scores": scores})
    if starts(REWARD_R_HUMAN_PROMPT):
        return json.dumps(
            {
                "goal_achievement": 0.9,
                "process_quality": 0.6,
                "user_satisfaction": 0.5,
                "label": "success",
                "reason": "the tests pass after installing the package",
            }
        )
    if starts(L2_INDUCTION_PROMPT):
        return json.dumps(
            {
                "title": LLM_POLICY_TITLE,
                "trigger": "pytest fails with ModuleNotFoundError for a third-party package",
                "action": "1. Read the missing module name. 2. pip install it. 3. Re-run pytest.",
                "rationale": "the environment lacks a dependency",
                "caveats": ["prefer the project's requirements file when there is one"],
                "confidence": 0.8,
                "support_trace_ids": [],
            }
        )
    if starts(FAILURE_SINK_PROMPT):
        return json.dumps(
            {
                "title": "Avoid running pytest before installing dependencies",
                "trigger": "a test run in a fresh environment",
                "procedure": "Install the project's dependencies, then run pytest.",
                "verification": "pytest collects without ImportError",
                "boundary": "Python projects",
                "experience_type": "failure_avoidance",
                "decision_guidance": {"prefer": ["Install the dependencies first"], "avoid": [LLM_AVOID]},
                "support_trace_ids": [],
            }
        )
    if starts(DECISION_REPAIR_PROMPT):
        return json.dumps(
            {
                "preference": "Install dependencies first",
                "anti_pattern": LLM_AVOID,
                "severity": "warn",
                "confidence": 0.7,
            }
        )
    if starts(L3_ABSTRACTION_PROMPT):
        return json.dumps(
            {
                "title": "Python test environments",
                "domain_tags": ["python"],
                "environment": [
                    {"label": "dependencies", "description": "packages must be installed", "evidenceIds": []}
                ],
                "inference": [],
                "constraints": [],
                "body": "Test runs in this environment depend on third-party packages being installed.",
                "confidence": 0.7,
                "supersedes_world_ids": [],
            }
        )
    if starts(SKILL_CRYSTALLIZE_PROMPT):
        return json.dumps(
            {
                "name": "python_tests_install_missing_dependency",
                "retrieval_blurb": "Fix pytest ModuleNotFoundError by installing the missing package.",
                "trigger_context": "pytest reports ModuleNotFoundError",
                "summary": "Install the missing package, then re-run the tests.",
                "parameters": [],
                "preconditions": ["a Python project with pytest"],
                "steps": [
                    {"title": "Find the module", "body": "Read the module name from the error."},
                    {"title": "Install and re-run", "body": "pip install it, then run pytest again."},
                ],
                "examples": [],
                "tools": ["bash"],
                "decision_guidance": {"preference": ["Install first"], "anti_pattern": [LLM_AVOID]},
                "tags": ["python"],
            }
        )
    return json.dumps({})  # recall's optional steps: an empty answer makes them fall back


def write_llm_config(home: Path, url: str, extra: str = "", timeout_ms: int = 10_000) -> Path:
    """summary + evolution pointing at the stub; zero feedback window."""
    path = home / "memmy-config.yaml"
    slot = f"    provider: openai_compatible\n    endpoint: {url}\n    model: stub-model\n    timeoutMs: {timeout_ms}\n"
    path.write_text(
        "memmyMemory:\n"
        f"  summary:\n{slot}  evolution:\n{slot}"
        "  algorithm:\n    reward:\n      feedbackWindowSec: 0\n" + extra,
        encoding="utf-8",
    )
    return path


def by_type(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Active policies of one experience type."""
    return [
        p
        for p in found
        if p["properties"]["policy"]["type"] == kind and p["properties"]["policy"]["status"] == "active"
    ]


def test_with_an_llm_the_models_answers_become_the_guidance(fresh_daemon: Daemon) -> None:
    with run_chat_stub(contract_answer) as stub:
        fresh_daemon.extra_env["MEMMY_CONFIG"] = str(write_llm_config(fresh_daemon.home, stub.url))
        fresh_daemon.start()
        with fresh_daemon.client() as client:
            for package in ENGLISH.packages:
                run_episode(client, ENGLISH, package)
                drain(client)
            found = policies(client)
            success, avoid = by_type(found, "success_pattern"), by_type(found, "failure_avoidance")
            assert [p["properties"]["policy"]["origin"] for p in success] == ["llm"], found
            assert success[0]["title"] == LLM_POLICY_TITLE
            assert len(avoid) == 1 and any(
                LLM_AVOID in line for line in avoid[0]["properties"]["policy"]["anti_pattern"]
            )
            episodes = client.get("/api/v1/episodes").json()["items"]
            assert {e["rewardDetail"]["source"] for e in episodes} == {"llm"}
            trace = client.get(f"/api/v1/memory/{episodes[0]['traceMemoryIds'][0]}").json()
            assert trace["properties"]["summary"].startswith("LLM summary:")
            assert trace["properties"]["trace"]["reflection"] in ("RELATED", "PIVOTAL")
            usage = client.get("/api/v1/health").json()["evolution"]["llmUsage"]
            assert usage["calls"] >= 10 and usage["slots"]["summary"]["calls"] > 0

            session_id = client.post("/api/v1/sessions/open", json={}).json()["sessionId"]
            started = client.post("/api/v1/turns/start", json={"sessionId": session_id, "query": ENGLISH.task}).json()
            assert avoid[0]["id"] in started["sourceMemoryIds"]
            assert LLM_AVOID in started["injectedContext"]["markdown"]
        prompts = {r["body"]["messages"][0]["content"][:60] for r in stub.requests}
        for prompt in (SUMMARY_PROMPT, BATCH_REFLECTION_PROMPT, REWARD_R_HUMAN_PROMPT, L2_INDUCTION_PROMPT):
            assert prompt[:60] in prompts


def _malformed(system: str, user: str) -> str | None:
    return "this is not JSON {"


def _server_error(system: str, user: str) -> str | None:
    return None


FAILURE_MODES: dict[str, tuple[Callable[[str, str], str | None], float, str, int]] = {
    # answer, server delay (s), extra config, client timeout (ms)
    "malformed": (_malformed, 0.0, "", 10_000),
    "timeout": (contract_answer, 1.5, "", 300),
    "http_500": (_server_error, 0.0, "", 10_000),
    "budget": (contract_answer, 0.0, "  llmBudget:\n    dailyCalls: 2\n", 10_000),
}


@pytest.mark.parametrize("mode", list(FAILURE_MODES))
def test_a_failing_or_exhausted_llm_falls_back_to_heuristics_without_losing_work(
    fresh_daemon: Daemon, mode: str
) -> None:
    answer, delay, extra, timeout_ms = FAILURE_MODES[mode]
    with run_chat_stub(answer, delay_s=delay) as stub:
        config = write_llm_config(fresh_daemon.home, stub.url, extra, timeout_ms)
        fresh_daemon.extra_env["MEMMY_CONFIG"] = str(config)
        fresh_daemon.start()
        with fresh_daemon.client() as client:
            run_episode(client, ENGLISH, "requests")
            drain(client, timeout_s=180)
            jobs = client.get("/api/v1/evolution/jobs", params={"limit": 1000}).json()
            assert jobs["counts"]["dead_letter"] == 0 and jobs["counts"]["failed"] == 0, jobs
            found = policies(client)
            success, avoid = by_type(found, "success_pattern"), by_type(found, "failure_avoidance")
            assert success and avoid, f"{mode}: heuristics must still learn: {found}"
            if mode != "budget":
                assert {p["properties"]["policy"]["origin"] for p in success + avoid} == {"heuristic"}
            episode = client.get("/api/v1/episodes").json()["items"][0]
            assert episode["rTask"] is not None and episode["rTask"] > 0
            assert episode["rewardDetail"]["source"] != "llm" or mode == "budget"
            for trace_id in episode["traceMemoryIds"]:
                detail = client.get(f"/api/v1/memory/{trace_id}").json()
                assert detail["processing"]["state"] == "ready", detail["processing"]
            if mode == "budget":
                usage = client.get("/api/v1/health").json()["evolution"]["llmUsage"]
                assert usage["exhausted"] and usage["calls"] == 2 and usage["refused"] > 0, usage
                assert len(stub.requests) == 2, "no request may reach the model past the daily cap"
