"""What the last session learned reaches the next one (issue 28, items 1 and 6).

A question answered in one session ("Where do we deploy the invoicing service, and which make target do I
run?" → "blue cluster, `make deploy-blue`") is asked again in a later session: the injected text must carry the
answer, through the real daemon's turn routes and through the ``memmy`` agent (local stub model). An episode
rollup that stands in for the traces it covers carries what they concluded; a search on a small store puts the
answer first; a redaction marker's words are not matching terms.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from memmy.agent.config import load_agent_config
from memmy.agent.runtime import open_runtime
from memmy.domain import Memory
from memmy.kinds.episode import line as episode_text
from memmy.kinds.episode import parse_step, step_line, trace_outcome
from memmy.kinds.text import whole_sentences
from memmy.kinds.trace import Trace
from memmy.recall.candidate import Candidate
from memmy.recall.query import prepare_query
from memmy.service.recall import recall_reason
from tests.agent_stubs import Reply, last_user_text, run_model_stub, write_agent_config
from tests.conftest import Daemon
from tests.test_evolution_scenario import drain

ASKED = "Where do we deploy the invoicing service, and which make target do I run?"
ANSWER = "We deploy the invoicing service to the blue cluster: run `make deploy-blue`."
FOLLOW_UP = "Thanks. Also, how do I run its tests?"
FOLLOW_UP_ANSWER = "Run `make test` in the invoicing directory."
LATER = "Which make target deploys the invoicing service?"
WORKSPACE = "/work/invoicing"
FIX = "NODE_OPTIONS=--max-old-space-size=4096 pnpm build"


def exchange(client: httpx.Client, session_id: str, asked: str, answer: str) -> dict[str, Any]:
    """One turn: start (what was injected) and complete with the agent's answer."""
    started: dict[str, Any] = client.post("/api/v1/turns/start", json={"sessionId": session_id, "query": asked}).json()
    body = {"sessionId": session_id, "query": asked, "answer": answer}
    client.post(f"/api/v1/turns/{started['turnId']}/complete", json=body).raise_for_status()
    return started


def test_the_answer_reaches_the_next_session_through_the_turn_routes(fresh_daemon: Daemon) -> None:
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        first = client.post("/api/v1/sessions/open", json={"workspacePath": WORKSPACE}).json()["sessionId"]
        exchange(client, first, ASKED, ANSWER)
        exchange(client, first, FOLLOW_UP, FOLLOW_UP_ANSWER)
        client.post(f"/api/v1/sessions/{first}/close", json={}).raise_for_status()
        drain(client)

        second = client.post("/api/v1/sessions/open", json={"workspacePath": WORKSPACE}).json()["sessionId"]
        started = client.post("/api/v1/turns/start", json={"sessionId": second, "query": LATER}).json()
        markdown = started["injectedContext"]["markdown"]
        assert "make deploy-blue" in markdown, markdown
        # the first item is the answer, not the question restated
        first_item = markdown.split("\n1. ", 1)[1].split("\n2. ", 1)[0]
        assert "make deploy-blue" in first_item, markdown

        found = client.post("/api/v1/memory/search", json={"query": LATER, "verbose": True}).json()
        assert "make deploy-blue" in found["injectedContext"]
        assert "make deploy-blue" in found["hits"][0]["snippet"], found["hits"]
        rollups = [h for h in found["debug"]["channels"] if h["source"] == "episode"]
        assert all(r["fused"] > 0 for r in rollups), rollups  # a rollup ranks on its best member's evidence


def test_the_answer_reaches_the_next_session_through_the_agent(isolated_home: Path, fresh_daemon: Daemon) -> None:
    daemon = fresh_daemon
    daemon.start()

    def brain(body: dict[str, Any]) -> Reply:
        text = last_user_text(body).split("<current_user_request>")[-1]
        if "Where do we deploy" in text:
            return Reply(text=ANSWER)
        if "run its tests" in text:
            return Reply(text=FOLLOW_UP_ANSWER)
        return Reply(text="I do not know.")

    def turn(text: str, session: str) -> None:
        async def main() -> None:
            runtime = await open_runtime(load_agent_config(), session, None)
            try:
                await runtime.agent.run_turn(text)
            finally:
                await runtime.close()

        asyncio.run(main())

    extra = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n"
    with run_model_stub(brain) as stub:
        write_agent_config(isolated_home, stub, extra=extra)
        turn(ASKED, "cli:invoicing-one")
        turn(FOLLOW_UP, "cli:invoicing-one")
        with daemon.client() as client:
            drain(client)
        turn(LATER, "cli:invoicing-two")
        sent = stub.requests[-1]["body"]["messages"][-1]["content"]
    assert "<memmy_memory_context" in sent and "make deploy-blue" in sent, sent


def test_a_rollup_carries_what_each_step_concluded() -> None:
    trace = {
        "summary": "The build fails",
        "agentText": "Raised the heap limit. The build passes now.",
        "tool_calls": [
            {"name": "bash", "input": {"command": "pnpm build"}, "success": False, "error": "exit code 1"},
            {"name": "bash", "input": {"command": FIX}, "success": True},
        ],
    }
    outcome = trace_outcome(Trace.read(trace))
    assert FIX in outcome and "`pnpm build`" not in outcome
    line = step_line(1, Trace.read({**trace, "reflection": "RELATED_DEFAULT"}), "")
    assert parse_step(line) == ("The build fails", outcome)
    rollup = Memory(
        id="episode_1",
        layer="L1",
        content=line + "\n" + step_line(2, Trace.read({"summary": "Run the tests", "agentText": "42 passed."}), ""),
        title="Past similar episode: The build fails",
    )
    text = whole_sentences(episode_text(rollup))
    assert "Result: Raised the heap limit. The build passes now" in text and "Run the tests → 42 passed." in text
    assert "RELATED_DEFAULT" not in text and "step 1" not in text


def test_small_store_ranks_the_answer_first_and_ignores_redaction_markers(daemon: Daemon) -> None:
    facts = [
        "The billing service runs on port 7421.",
        "CI credentials: AKIAIOSFODNN7EXAMPLE were rotated by the ops team",
        "Use pnpm, not npm, in the web frontend.",
    ]
    with daemon.client() as client:
        added = [client.post("/api/v1/memory/add", json={"content": fact}).json()["id"] for fact in facts]
        session = client.post("/api/v1/sessions/open", json={"workspacePath": "/work/ledger"}).json()["sessionId"]
        exchange(client, session, "Where does the ledger service deploy, and which make target?", "`make ship-ledger`.")
        client.post(f"/api/v1/sessions/{session}/close", json={}).raise_for_status()
        drain(client)
        stored = client.get(f"/api/v1/memory/{added[1]}").json()["content"]
        assert "[REDACTED:" in stored and "AKIA" not in stored

        found = client.post(
            "/api/v1/memory/search", json={"query": "Which make target deploys the ledger service?", "scope": "pooled"}
        ).json()
        assert "make ship-ledger" in found["hits"][0]["snippet"], found["hits"]
        # the marker's words ("redacted", "aws", "access", "key") are no evidence for a query that uses them
        marked = client.post(
            "/api/v1/memory/search",
            json={"query": "redacted aws access key", "scope": "pooled", "verbose": True, "channels": ["fts"]},
        ).json()
        assert added[1] not in {h["id"] for h in marked["hits"]}, marked["hits"]


def test_a_why_line_calls_a_meaning_similar_only_when_it_is() -> None:
    query = prepare_query("Which make target deploys the invoicing service?")
    billing = Memory(id="trace_1", layer="L1", content="The billing service runs on port 7421.")
    loose = recall_reason(Candidate(billing, channels={"vec": 0.32, "fts": 0.2}), query)
    close = recall_reason(Candidate(billing, channels={"vec": 0.62}), query)
    assert loose == 'shares "service"; loosely related meaning (0.32)'
    assert close == 'shares "service"; similar meaning (0.62)'
