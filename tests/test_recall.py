"""The recall pipeline through MemoryService: must-not-retrieve cases, CJK, modes, gates, LLM steps, diagnostics."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from memmy.capture.sanitize import wrap_for_agent
from memmy.commands.answers import SearchAnswer
from memmy.commands.memory import AddMemory, ArchiveMemory, DeleteMemory, SearchMemory
from memmy.commands.turn_requests import CompleteTurn, OpenSession, StartTurn
from memmy.namespace import Namespace
from memmy.recall.query import structural_fragments
from memmy.service import MemoryService
from tests.answers import must
from tests.llm_stub import run_chat_stub

NS = Namespace(source="claude_code")


def add(service: MemoryService, content: str, ns: Namespace = NS, **body: object) -> str:
    return must(service.add_memory(AddMemory.from_json({"content": content, **body}), ns)["id"])


def search(service: MemoryService, query: str, ns: Namespace = NS, **body: object) -> SearchAnswer:
    service.indexer.drain()
    return service.search(SearchMemory.from_json({"query": query, "verbose": True, **body}), ns)


def ids(result: SearchAnswer) -> list[str]:
    return list(result["sourceMemoryIds"])


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def test_must_not_retrieve(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    repo_a, repo_b = git_repo(tmp_path / "alpha"), git_repo(tmp_path / "beta")
    ns_a = Namespace(source="codex", workspace_path=str(repo_a), project_id=str(repo_a))
    ns_b = Namespace(source="codex", workspace_path=str(repo_b), project_id=str(repo_b))
    mine = add(service, "The gateway retries webhooks three times with exponential backoff", ns_a)
    theirs = add(service, "The gateway retries webhooks five times, then drops them", ns_b)
    shared = add(service, "Gateway webhooks are signed with HMAC-SHA256", ns_b, visibility="global")
    deleted = add(service, "Gateway webhook retries are configured in gateway.toml", ns_a)
    archived = add(service, "Gateway webhook retry counts were once hard-coded", ns_a)
    old = add(service, "Gateway webhook retries use a fixed delay of 2 seconds", ns_a)
    pending = add(service, "Gateway webhook retries imported from an old chat", ns_a)
    service.delete_memory(deleted, DeleteMemory.from_json({}), ns_a)
    service.archive_memory(archived, ArchiveMemory.from_json({}), ns_a)
    service.db.conn.execute("UPDATE memories SET valid_to = '2001-01-01T00:00:00Z' WHERE id = ?", (old,))
    service.indexer.drain()  # everything indexed; then the import flag marks one memory as still processing
    service.db.conn.execute(
        "UPDATE memories SET info_json = json_set(info_json, '$.importPending', 1) WHERE id = ?", (pending,)
    )

    project = search(service, "how many times does the gateway retry webhooks?", ns_a, scope="project")
    assert mine in ids(project) and shared in ids(project)
    assert theirs not in ids(project)
    for hidden in (deleted, archived, old, pending):
        assert hidden not in ids(project) and hidden not in project["debug"]["candidateMemoryIds"]
    auto = search(service, "how many times does the gateway retry webhooks?", ns_a)  # auto: in a repository
    assert "scope:project" in auto["status"] and theirs not in ids(auto)
    pooled = search(service, "how many times does the gateway retry webhooks?", ns_a, scope="pooled")
    assert theirs in ids(pooled)
    for hidden in (deleted, archived, old, pending):
        assert hidden not in ids(pooled)
    agent = search(service, "gateway webhooks", Namespace(source="cursor"), scope="agent")
    assert ids(agent) == []


def test_turn_start_excludes_the_sessions_own_recent_turns(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    start = service.start_turn(
        StartTurn.from_json({"sessionId": session, "query": "fix the flaky redis lock test"}), NS
    )
    done = service.complete_turn(
        CompleteTurn.from_json(
            {
                "sessionId": session,
                "query": "fix the flaky redis lock test",
                "answer": "The redis lock test was flaky because of a 1s TTL; raised it to 5s.",
            },
            start["turnId"],
        ),
        NS,
    )
    service.indexer.drain()
    again = service.start_turn(
        StartTurn.from_json({"sessionId": session, "query": "the redis lock test is flaky again"}), NS
    )
    assert done["l1MemoryId"] not in again["sourceMemoryIds"]
    other = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    elsewhere = service.start_turn(
        StartTurn.from_json({"sessionId": other, "query": "the redis lock test is flaky again"}), NS
    )
    assert done["l1MemoryId"] in elsewhere["sourceMemoryIds"]


def test_injected_wrapper_echoed_back_is_never_searched_or_stored(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    secret = add(service, "Quarterly roadmap: migrate billing to Stripe in Q3")
    echoed = wrap_for_agent(
        "## L1 Trace Memories\n1. Trace\n   Quarterly roadmap: migrate billing to Stripe", "what is 2 + 2?"
    )
    result = search(service, echoed)
    assert secret not in ids(result)
    assert not {"stripe", "roadmap", "quarterly"} & set(result["debug"]["query"]["keywords"])
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    done = service.complete_turn(
        CompleteTurn.from_json({"sessionId": session, "query": echoed, "answer": "4"}, "t1"), NS
    )
    stored = service.get_memory(done["l1MemoryId"])
    assert "Stripe" not in stored["content"] and "memmy_memory_context" not in stored["content"]


def test_chinese_and_mixed_queries(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    deploy = add(service, "部署到生产环境之前必须先跑数据库迁移脚本")
    style = add(service, "用户偏好：代码评审意见要简短，直接指出问题")
    mixed = add(service, "在 CI 上 pytest 很慢，因为每个 fixture 都会重建数据库")
    add(service, "The frontend uses React with Vite and vitest")
    zh = search(service, "部署生产环境要注意什么？")
    assert ids(zh)[0] == deploy
    channels = zh["debug"]["channels"][0]["channels"]
    assert {"fts", "pattern"} & set(channels)
    assert ids(search(service, "评审"))[0] == style  # two characters
    assert ids(search(service, "CI 上 pytest 为什么慢"))[0] == mixed


def test_modes_layers_and_research_profile(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    per_layer = {
        layer: add(service, f"Release checklist item for {layer}: tag, build, publish", layer=layer)
        for layer in ("L1", "L2", "L3", "Skill")
    }

    def layers_of(result: SearchAnswer) -> set[str]:
        return {h["memoryLayer"] for h in result["hits"]}

    assert layers_of(search(service, "release checklist")) == {"L1", "L2", "L3", "Skill"}
    assert layers_of(search(service, "release checklist", mode="world_model")) == {"L3"}
    assert layers_of(search(service, "release checklist", mode="tool_driven")) == {"L1", "L2", "L3"}
    assert layers_of(search(service, "release checklist", mode="skill_invoke")) == {"Skill", "L2", "L1"}
    assert layers_of(search(service, "release checklist", layers=["L2", "L3"])) == {"L2", "L3"}
    rendered = search(service, "release checklist")["injectedContext"]
    order = [
        rendered.index(h)
        for h in (
            "## L1 Trace Memories",
            "## L2 Experience Memories",
            "## L3 Environment Knowledge",
            "## Skill Memories",
            "## Follow-up memory tools",
        )
    ]
    assert order == sorted(order)
    research = make_service(
        {"domain": "research", "algorithm": {"retrieval": {"readOnlyInjectionProfile": "skill_experience"}}}
    )
    for layer in ("L1", "L2", "L3", "Skill"):
        add(research, f"Release checklist item for {layer}: tag, build, publish", layer=layer)
    assert layers_of(search(research, "release checklist")) == {"Skill", "L2"}
    assert per_layer


def test_intent_gate_on_the_first_turn_only(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    add(service, "hello world program prints hello")
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    first = service.start_turn(StartTurn.from_json({"sessionId": session, "query": "hello!"}), NS)
    assert "intent:chitchat:retrieval_skipped" in first["status"] and first["sourceMemoryIds"] == []
    service.complete_turn(
        CompleteTurn.from_json({"sessionId": session, "query": "hello!", "answer": "Hi!"}, first["turnId"]), NS
    )
    second = service.start_turn(StartTurn.from_json({"sessionId": session, "query": "hello"}), NS)
    assert not any(s.startswith("intent:") for s in second["status"])
    meta = service.start_turn(
        StartTurn.from_json(
            {"sessionId": service.open_session(OpenSession.from_json({}), NS)["sessionId"], "query": "你是谁？"}
        ),
        NS,
    )
    assert "intent:meta:retrieval_skipped" in meta["status"]
    task = service.start_turn(
        StartTurn.from_json(
            {
                "sessionId": service.open_session(OpenSession.from_json({}), NS)["sessionId"],
                "query": "do you remember the hello world program?",
            }
        ),
        NS,
    )
    assert not any(s.startswith("intent:") for s in task["status"]) and task["sourceMemoryIds"]


def test_identifier_queries_need_keyword_confirmation(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    exact = add(service, "Build failed with ERR_PNPM_OUTDATED_LOCKFILE after bumping vite")
    add(service, "Outdated lockfiles break installs when package.json changes")
    result = search(service, "ERR_PNPM_OUTDATED_LOCKFILE again")
    assert ids(result) == [exact]
    assert any(d["reason"] == "keyword_unconfirmed" for d in result["debug"]["dropped"])


def test_render_caps_skills_and_guidance(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service({"algorithm": {"retrieval": {"skillInjectionMode": "summary", "skillSummaryChars": 40}}})
    long_id = add(service, "Docker cleanup policy: prune dangling images weekly.", layer="L2")
    add(service, "Docker disk cleanup log: " + "pruned dangling images again. " * 60)
    skill = add(
        service,
        "# Docker cleanup\nRun docker system prune -af when disk is low.\n\nDetails follow.",
        layer="Skill",
        title="docker-cleanup",
    )
    service.memories.db.conn.execute(
        "UPDATE memories SET properties_json = json_set(properties_json, '$.policy', json(?)) WHERE id = ?",
        (
            json.dumps(
                {
                    "trigger": "disk full during docker build",
                    "procedure": "prune images",
                    "preference": ["Prune with --filter until=24h"],
                    "anti_pattern": ["Never delete volumes"],
                }
            ),
            long_id,
        ),
    )
    text = search(service, "docker disk cleanup prune")["injectedContext"]
    assert "\n   ...[truncated]" in text
    assert "Description: Docker cleanup Run docker system prune…" in text
    assert "**Prefer**\n1. Prune with --filter until=24h" in text and "**Avoid**\n1. Never delete volumes" in text
    assert "Trigger: disk full during docker build" in text and skill in text
    only_traces = make_service()
    add(only_traces, "docker prune freed 12GB")
    assert "Follow-up memory tools" not in search(only_traces, "docker prune")["injectedContext"]


def test_llm_filter_statuses_and_fallbacks(make_service) -> None:  # type: ignore[no-untyped-def]
    def answer(system: str, user: str) -> str | None:
        if "QUERY" not in user:
            return None
        # Keep only the candidate about rebalancing, by its number in the list the client sent.
        numbers = re.findall(r"^(\d+)\. \[TRACE\][^\n]*\n\s+(.*)$", user, flags=re.M)
        keep = [int(n) for n, body in numbers if "rebalances" in body]
        return json.dumps({"ranked": keep, "sufficient": True})

    with run_chat_stub(answer) as stub:
        llm = {"summary": {"provider": "openai_compatible", "model": "judge", "endpoint": stub.url}}
        service = make_service(llm)
        first = add(service, "Kafka consumer lag alert fires at 10k messages")
        second = add(service, "Kafka consumer group rebalances on every deploy")
        result = search(service, "kafka consumer rebalancing")
        assert "llm_filter:llm_filtered" in result["status"]
        assert ids(result) == [second] and first not in ids(result)
        assert stub.requests and "CANDIDATES:" in stub.requests[0]["body"]["messages"][1]["content"]
        # turn_start is the hook path: no LLM call unless llmInHookPath is on; the no-LLM cap applies.
        calls = len(stub.requests)
        session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
        start = service.start_turn(
            StartTurn.from_json({"sessionId": session, "query": "kafka consumer rebalancing"}), NS
        )
        assert "llm_filter:no_llm" in start["status"] and len(stub.requests) == calls

    with run_chat_stub(lambda s, u: "not json at all") as stub:
        service = make_service({"summary": {"provider": "openai_compatible", "model": "m", "endpoint": stub.url}})
        for i in range(8):
            add(service, f"Kafka topic number {i} keeps seven days of retention")
        result = search(service, "kafka topic retention")
        assert "llm_filter:llm_failed_fallback_cap" in result["status"] and len(ids(result)) == 6

    with run_chat_stub(lambda s, u: "{}", delay_s=1.5) as stub:
        service = make_service(
            {
                "summary": {"provider": "openai_compatible", "model": "m", "endpoint": stub.url},
                "algorithm": {"retrieval": {"llmTimeoutMs": 200}},
            }
        )
        add(service, "Kafka brokers run on three nodes")
        add(service, "Kafka brokers need 64GB of RAM")
        result = search(service, "kafka brokers")
        assert "llm_filter:llm_failed_fallback_cap" in result["status"] and len(ids(result)) == 2

    offline = make_service()
    add(offline, "Kafka UI runs on port 8080")
    assert "llm_filter:no_llm" in search(offline, "kafka ui port")["status"]
    disabled = make_service({"algorithm": {"retrieval": {"llmFilterEnabled": False}}})
    add(disabled, "Kafka UI runs on port 8080")
    assert "llm_filter:disabled" in search(disabled, "kafka ui port")["status"]


def test_llm_query_extract_and_rewrite(make_service) -> None:  # type: ignore[no-untyped-def]
    def answer(system: str, user: str) -> str | None:
        if "memory search" in system:
            return json.dumps({"queryVecText": "postgres connection pool size", "keywords": ["pgbouncer"]})
        if "three different search queries" in system:
            return json.dumps({"queries": ["pgbouncer pool", "postgres max connections", "connection limits"]})
        return json.dumps({"ranked": [1, 2, 3]})

    with run_chat_stub(answer) as stub:
        service = make_service(
            {
                "evolution": {"provider": "openai_compatible", "model": "m", "endpoint": stub.url},
                "algorithm": {"enableQueryRewrite": True, "retrieval": {"llmQueryExtract": True}},
            }
        )
        target = add(service, "pgbouncer runs in transaction mode with a pool of 20")
        add(service, "Unrelated: the office plant needs water")
        result = search(service, "why do we run out of db connections?")
        assert "query_extract:llm" in result["status"] and "query_rewrite:3" in result["status"]
        assert "pgbouncer" in result["debug"]["query"]["keywords"]
        assert ids(result)[0] == target


def test_diagnostics_and_logs(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    target = add(service, "Use make lint before pushing")
    result = search(service, "lint before push")
    debug = result["debug"]
    assert target in debug["candidateMemoryIds"] and debug["sourceMemoryIds"] == [target]
    assert {"embed", "vector", "keyword", "keyword_wait", "channels", "load", "fuse", "select", "total"} <= set(
        debug["timingsMs"]
    )
    assert result["hits"][0]["channels"] and debug["channels"][0]["relevance"] > 0
    assert service.logs.recall_stats()[0] >= 1
    logs, _ = service.logs.api_logs(["memory_search"], None, [], 10, 0)
    assert logs and logs[0]["output"]["filtered"] == [target]
    with pytest.raises(Exception, match="channels: unknown"):
        service.search(SearchMemory.from_json({"query": "x", "channels": ["telepathy"]}), NS)
    only_fts = search(service, "lint before push", channels=["fts"])
    assert set(only_fts["debug"]["channels"][0]["channels"]) == {"fts"}


def test_turn_start_stays_silent_on_word_overlap_alone(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    plan = add(service, "The release plan for billing-api: tag, build, canary, then full rollout")
    for text in (
        "Run the billing-api database migrations with make migrate before deploying",
        "Cache invalidation for the pricing service happens on every deploy",
    ):
        add(service, text)
    service.indexer.drain()
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    off_topic = service.start_turn(
        StartTurn.from_json({"sessionId": session, "query": "help me plan a vacation to the lakes"}), NS
    )
    assert off_topic["sourceMemoryIds"] == []
    assert any(s.startswith("semantic_gate:dropped:") for s in off_topic["status"])
    search = service.search(
        SearchMemory.from_json({"query": "help me plan a vacation to the lakes"}), NS
    )  # explicit search still shows it
    assert search["sourceMemoryIds"]
    relevant = service.start_turn(
        StartTurn.from_json({"sessionId": session, "query": "what is our release plan for billing-api?"}), NS
    )
    assert relevant["sourceMemoryIds"][0] == plan


def test_turn_start_silence_for_chinese_prompts(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    deploy = add(service, "部署到生产环境之前必须先跑数据库迁移脚本")
    add(service, "用户偏好：代码评审意见要简短，直接指出问题")
    service.indexer.drain()
    session = service.open_session(OpenSession.from_json({}), NS)["sessionId"]
    off_topic = service.start_turn(StartTurn.from_json({"sessionId": session, "query": "帮我推荐一部周末看的电影"}), NS)
    assert off_topic["sourceMemoryIds"] == []
    on_topic = service.start_turn(
        StartTurn.from_json({"sessionId": session, "query": "部署生产环境之前要做什么？"}), NS
    )
    assert on_topic["sourceMemoryIds"] == [deploy]


def test_a_turn_hit_brings_its_neighbours_as_one_result(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service({"algorithm": {"retrieval": {"contextWindowTokens": 0}}})  # exactly one turn each side
    turns = [
        "Let's plan the release of the billing service this week.",
        "I bought a new espresso grinder for the office kitchen.",
        "The grinder makes the espresso taste much better in the morning.",
        "Anyway, the billing release needs a database migration first.",
        "We should also update the changelog before tagging.",
    ]
    made = [
        add(service, text, sessionId="chat-1", createdAt=f"2026-01-05T10:00:0{i}Z", turnId=f"t{i}")
        for i, text in enumerate(turns)
    ]
    other = add(service, "Espresso machines need descaling every month.", sessionId="chat-2")
    result = search(service, "espresso grinder in the office kitchen", limit=3)
    first = result["hits"][0]
    assert first["id"] == made[1]
    assert first["window"] == made[0:3]  # the hit with one turn before and after, in order, as ONE result
    listed = [h["id"] for h in result["hits"]]
    assert made[2] not in listed  # it matched too, but it is already inside the first window
    assert any(d["id"] == made[2] and d["reason"] == "in_window" for d in result["debug"]["dropped"])
    assert other in listed

    alone = make_service({"algorithm": {"retrieval": {"contextWindow": 0}}})
    for i, text in enumerate(turns):
        add(alone, text, sessionId="chat-1", createdAt=f"2026-01-05T10:00:0{i}Z")
    assert all("window" not in h for h in search(alone, "espresso grinder in the office kitchen")["hits"])


def test_structural_phrases_are_what_a_trace_can_contain_word_for_word() -> None:
    prompt = (
        "I'm in the gateway repo right now. TypeError: 'NoneType' object is not subscriptable? "
        "I already restarted it; git push origin/main fails with ECONNREFUSED and src/api/handlers.py is open"
    )
    fragments = structural_fragments(prompt)
    # The error is cut at the end of its sentence: the question around it is not part of any output.
    assert "TypeError: 'NoneType' object is not subscriptable?" in fragments
    assert not any("restarted" in f or "gateway" in f for f in fragments if "TypeError" in f)
    assert "ECONNREFUSED" in fragments  # an error code is one word and still a phrase of its own
    assert "/api/handlers.py" in fragments
    # "/main" of origin/main is one word as a phrase: the keyword channels rank it, not the structural one.
    assert "/main" not in fragments
    assert "/mobile-app" in structural_fragments("kubectl rollout restart deployment/mobile-app fails")
    # A sentence that asks about an error: the error starts at its head, the question before it is not output.
    assert structural_fragments("how do I fix Permission denied (publickey)") == ["Permission denied (publickey)"]
    assert structural_fragments("fix Cannot find module '@/webhooks'") == ["Cannot find module '@/webhooks'"]
    assert structural_fragments("how do I fix module 'parser' not found") == []  # "not found" alone says nothing
    assert structural_fragments("bash: deploy.sh: command not found")[0] == "bash: deploy.sh: command not found"


def test_a_question_about_an_error_finds_the_trace_that_printed_it(make_service) -> None:  # type: ignore[no-untyped-def]
    service = make_service()
    printed = add(
        service,
        "Ran `git push origin main` in billing-api: git@github.com: Permission denied (publickey). "
        "Fixed by adding the deploy key with ssh-add ~/.ssh/deploy_ed25519.",
        layer="L1",
    )
    add(service, "Permission reviews for the billing dashboard are denied until the audit is done.", layer="L1")
    result = search(service, "how do I fix Permission denied (publickey)?", mode="turn_start")
    assert result["debug"]["query"]["structural"] == ["Permission denied (publickey)?"]
    structural = [c["id"] for c in result["debug"]["channels"] if "structural" in c["channels"]]
    assert structural == [printed]
    assert ids(result)[0] == printed
