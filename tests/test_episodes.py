"""Episodes in the service: routing of turns, closing, implicit/explicit feedback, skip rules, the LLM re-check.

In-process service over a real SQLite file with the real MiniLM; the CLI part runs against the real daemon.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.commands.evolution import Feedback, RunWorker
from memmy.commands.panel import PanelTasks
from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn
from memmy.config import load_config
from memmy.embed import Embedder
from memmy.namespace import Namespace
from memmy.service import MemoryService
from tests.conftest import Daemon
from tests.llm_stub import run_chat_stub

NS = Namespace(source="codex")


def make_service(home: Path, embedder: Embedder, extra: str = "") -> MemoryService:
    """A service whose config has no feedback window (and ``extra`` YAML under memmyMemory)."""
    config = home / "cfg.yaml"
    config.write_text("memmyMemory:\n  algorithm:\n    reward:\n      feedbackWindowSec: 0\n" + extra, encoding="utf-8")
    svc = MemoryService.open(load_config(config), embedder=embedder)
    svc.indexer.load_index()
    return svc


@pytest.fixture
def svc(isolated_home: Path, embedder: Embedder, backend: str) -> Iterator[MemoryService]:
    service = make_service(isolated_home, embedder)
    yield service
    service.close()


def turn(svc: MemoryService, session_id: str, query: str, answer: str, **extra: Any) -> dict[str, Any]:
    """turn start + turn complete; returns the start response with the completion under ``complete``."""
    started = svc.start_turn(StartTurn.from_json({"sessionId": session_id, "query": query}), NS)
    done = svc.complete_turn(
        CompleteTurn.from_json({"sessionId": session_id, "query": query, "answer": answer, **extra}, started["turnId"]),
        NS,
    )
    return {**started, "complete": done}


def drain(svc: MemoryService) -> None:
    """Run the worker until nothing is due."""
    for _ in range(50):
        if svc.run_worker(RunWorker.from_json({"limit": 100}))["leased"] == 0:
            return
    raise AssertionError("worker did not settle")


def test_follow_ups_share_an_episode_and_a_new_topic_closes_it(svc: MemoryService) -> None:
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    first = turn(svc, sid, "Set up an nginx reverse proxy for the app", "Added a server block proxying to :8000.")
    second = turn(svc, sid, "then add gzip compression too", "Enabled gzip for text and JSON responses.")
    assert second["episodeId"] == first["episodeId"] == first["complete"]["episodeId"]
    third = turn(svc, sid, "换个话题，帮我写一个统计订单数量的 SQL 查询", "SELECT COUNT(*) FROM orders;")
    assert third["episodeId"] != first["episodeId"] and third["episodeRelation"] == "new_task"
    old = svc.episodes.get(first["episodeId"])
    assert old is not None and old.status == "closed" and old.meta["closeReason"] == "topic_boundary"
    assert old.turn_count == 2 and len(old.l1_memory_ids) == 2
    queued = {j.job_type for j in svc.jobs.list_jobs(episode_id=old.id)}
    assert "reflection" in queued
    new = svc.episodes.get(third["episodeId"])
    assert new is not None and new.meta["previousEpisodeId"] == old.id
    trace = svc.memories.get(third["complete"]["l1MemoryId"])
    assert trace is not None and trace.properties["trace"]["episode_id"] == new.id

    # the panel's task list carries each turn's episode
    tasks = svc.panel.tasks(PanelTasks.from_json({}))["tasks"]
    assert [t["id"] for t in tasks] == [new.id, old.id, old.id]
    assert [t["episode"]["status"] for t in tasks] == ["open", "closed", "closed"]
    assert tasks[1]["episode"]["episodeId"] == old.id and tasks[1]["turns"][0]["episodeId"] == old.id


def test_a_revision_stays_in_the_episode_and_counts_as_negative_feedback(svc: MemoryService) -> None:
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    first = turn(svc, sid, "Write a function that parses ISO dates in Python", "def parse(s): return s.split('-')")
    revision = svc.start_turn(StartTurn.from_json({"sessionId": sid, "query": "不对，重新写，要处理时区"}), NS)
    assert revision["episodeId"] == first["episodeId"] and revision["episodeRelation"] == "revision"
    feedback = svc.feedback.for_episode(first["episodeId"])
    assert [(f.channel, f.polarity, f.magnitude) for f in feedback] == [("implicit", "negative", 1.0)]
    assert feedback[0].l1_memory_id == first["complete"]["l1MemoryId"]
    repairs = svc.jobs.list_jobs(job_type="decision_repair")
    assert repairs and repairs[0].payload["trigger"] == "feedback"


def test_implicit_praise_is_recorded_and_lifts_the_reward(svc: MemoryService) -> None:
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    first = turn(
        svc, sid, "Rename the config loader module and update the imports", "Renamed it and updated 14 imports."
    )
    turn(svc, sid, "perfect, thanks", "You're welcome.")
    feedback = svc.feedback.for_episode(first["episodeId"])
    assert [(f.channel, f.polarity) for f in feedback] == [("implicit", "positive")]
    svc.close_session(CloseSession(sid))
    drain(svc)
    episode = svc.episodes.get(first["episodeId"])
    assert episode is not None and episode.r_task is not None and episode.r_task > 0
    assert episode.reward_detail is not None and episode.reward_detail["source"] == "implicit_feedback"


def test_trivial_episodes_are_not_rewarded(svc: MemoryService) -> None:
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    first = turn(svc, sid, "hello", "hi")
    svc.close_session(CloseSession(sid))
    drain(svc)
    episode = svc.episodes.get(first["episodeId"])
    assert episode is not None and episode.reward_detail is not None and episode.reward_detail["skipped"] is True
    assert episode.meta["closeReason"] == "abandoned" and episode.r_task == 0.0
    assert svc.evolution.pending() == [], "a skipped episode pools nothing for L2"


def test_idle_episodes_are_closed_and_finalised(svc: MemoryService) -> None:
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    first = turn(svc, sid, "Profile the slow report endpoint", "The N+1 query in reports.py is the cause.")
    with svc.db.transaction() as conn:
        conn.execute("UPDATE episodes SET updated_at = '2020-01-01T00:00:00.000Z' WHERE id = ?", (first["episodeId"],))
    assert svc.episode_ops.close_idle() == [first["episodeId"]]
    episode = svc.episodes.get(first["episodeId"])
    assert episode is not None and episode.meta["closeReason"] == "idle_timeout"
    assert {j.job_type for j in svc.jobs.list_jobs(episode_id=episode.id)} >= {"reflection"}


def test_explicit_feedback_validates_and_rerewards_a_closed_episode(svc: MemoryService) -> None:
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    first = turn(svc, sid, "Bump the API client to v2 and fix the call sites", "Updated 6 call sites; tests pass.")
    svc.close_session(CloseSession(sid))
    drain(svc)
    before = svc.episodes.get(first["episodeId"])
    assert before is not None and before.r_task is not None
    result = svc.give_feedback(
        Feedback.from_json({"id": first["episodeId"], "polarity": "negative", "note": "use httpx instead of requests"}),
        NS,
    )
    assert set(result["scheduled"]) >= {"reward", "decision_repair"}
    drain(svc)
    after = svc.episodes.get(first["episodeId"])
    assert after is not None and after.r_task is not None and after.r_task < 0
    assert after.reward_detail is not None and after.reward_detail["source"] == "explicit_feedback"
    with pytest.raises(Exception, match="polarity"):
        svc.give_feedback(Feedback.from_json({"id": first["episodeId"], "polarity": "meh"}), NS)
    with pytest.raises(Exception, match="not found"):
        svc.give_feedback(Feedback.from_json({"id": "episode_nope", "polarity": "positive"}), NS)


def test_the_llm_relation_check_splits_an_episode_off_the_hook_path(isolated_home: Path, embedder: Embedder) -> None:
    def answer(system: str, user: str) -> str:
        if "relates to the conversation" in system:
            return json.dumps({"relation": "new_task", "confidence": 0.95, "reason": "unrelated request"})
        return json.dumps({})

    with run_chat_stub(answer) as stub:
        slot = f"    provider: openai_compatible\n    endpoint: {stub.url}\n    model: m\n"
        service = make_service(isolated_home, embedder, f"  evolution:\n{slot}")
        try:
            sid = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
            first = turn(service, sid, "Set up an nginx reverse proxy for the app", "Added a server block.")
            # "also ..." keeps the turn in the task on the hook path; the model, later, says it is another task
            second = turn(service, sid, "Also write a haiku about autumn leaves", "Leaves drift on cold wind...")
            assert second["episodeId"] == first["episodeId"], "the heuristics appended the turn"
            assert not any("relates to the conversation" in r["body"]["messages"][0]["content"] for r in stub.requests)
            drain(service)
            trace = service.memories.get(second["complete"]["l1MemoryId"])
            assert trace is not None
            moved_to = trace.properties["trace"]["episode_id"]
            assert moved_to != first["episodeId"]
            old, new = service.episodes.get(first["episodeId"]), service.episodes.get(moved_to)
            assert old is not None and new is not None
            assert old.status == "closed" and old.turn_count == 1 and old.meta["llmRelation"]["relation"] == "new_task"
            assert new.raw_turn_ids == [second["complete"]["rawTurnId"]]
        finally:
            service.close()


def test_feedback_episodes_and_jobs_from_the_cli(daemon: Daemon) -> None:
    base = ["--url", daemon.url, "--token", daemon.token or ""]
    with daemon.client() as client:
        sid = client.post("/api/v1/sessions/open", json={}).json()["sessionId"]
        started = client.post("/api/v1/turns/start", json={"sessionId": sid, "query": "Add retries to the S3 upload"})
        turn_id = started.json()["turnId"]
        body = {"sessionId": sid, "query": "Add retries to the S3 upload", "answer": "Wrapped upload in 3 retries."}
        client.post(f"/api/v1/turns/{turn_id}/complete", json=body).raise_for_status()
        episode_id = started.json()["episodeId"]
    runner = CliRunner()
    result = runner.invoke(cli, [*base, "feedback", episode_id, "--negative", "--note", "use exponential backoff"])
    assert result.exit_code == 0, result.output
    assert "Recorded negative feedback" in result.output and "decision_repair" in result.output
    listed = runner.invoke(cli, [*base, "episodes"])
    assert episode_id in listed.output
    jobs = runner.invoke(cli, [*base, "--json", "jobs"])
    assert json.loads(jobs.output)["counts"]["queued"] + json.loads(jobs.output)["counts"]["succeeded"] >= 1
    missing = runner.invoke(cli, [*base, "feedback", "trace_missing", "--positive"])
    assert missing.exit_code == 1 and "not found" in missing.output
    no_polarity = runner.invoke(cli, [*base, "feedback", episode_id])
    assert no_polarity.exit_code == 2


def test_feedback_on_a_policy_moves_its_gain_and_attaches_the_note_to_it(svc: MemoryService) -> None:
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    turn(
        svc,
        sid,
        "Install the project's dependencies and run the linter on the payments service",
        "Installed with pip and ran ruff; the linter passes with no findings now.",
        toolCalls=[
            {"name": "bash", "input": {"command": "pip install -e ."}, "output": "Successfully installed payments"},
            {"name": "bash", "input": {"command": "ruff check ."}, "output": "All checks passed!", "success": True},
        ],
    )
    svc.close_session(CloseSession(sid))
    drain(svc)
    policies = [m for m in svc.memories.by_layer("L2") if m.properties["policy"]["type"] == "success_pattern"]
    assert len(policies) == 1
    policy = policies[0]
    gain_before = policy.properties["policy"]["gain"]
    result = svc.give_feedback(
        Feedback.from_json({"id": policy.id, "polarity": "negative", "note": "use uv instead of pip"}), NS
    )
    assert set(result["scheduled"]) == {"decision_repair", "policy_feedback"}
    drain(svc)
    after = svc.memories.get(policy.id)
    assert after is not None
    assert after.properties["policy"]["gain"] < gain_before
    assert any("uv" in line for line in after.properties["policy"]["preference"]), after.properties["policy"]
    standalone = [m for m in svc.memories.by_layer("L2") if m.properties["policy"]["type"] == "repair_instruction"]
    assert standalone == [], "feedback on a policy goes to that policy, not to a new one"


def test_a_tool_failure_burst_queues_one_repair_naming_the_error(svc: MemoryService) -> None:
    """Three failed runs of one tool in a task, none that worked: the third completion queues a decision repair
    (once), with the error the tool reported; a failing turn before the burst queues none."""
    sid = svc.open_session(OpenSession.from_json({}), NS)["sessionId"]
    error = "Error: Cannot find module 'left-pad'"
    failed = {"name": "bash", "input": {"command": "npm test"}, "success": False, "error": error}
    jobs = [
        turn(svc, sid, f"Run the npm tests of the webshop, try {n}", "It failed again.", toolCalls=[failed])["complete"]
        for n in range(4)
    ]
    queued = [[j["jobType"] for j in done["jobs"]] for done in jobs]
    assert ["decision_repair" in kinds for kinds in queued] == [False, False, True, True], queued
    repairs = svc.jobs.list_jobs(job_type="decision_repair")
    assert len(repairs) == 1 and repairs[0].payload["trigger"] == "tool_failure_burst"
    assert repairs[0].payload["tool"] == "bash" and repairs[0].payload["reason"] == error
