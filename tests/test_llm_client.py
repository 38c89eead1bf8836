"""The LLM client against a real loopback chat server: JSON mode, usage, retries, time-box, scrubbing, budget."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.config import load_config
from memmy.embed import Embedder
from memmy.llm.budget import BudgetedLLM, CircuitBreakerLLM, CircuitOpen, DailyBudget, LLMBudgetExhausted
from memmy.llm.client import (
    JSON_REMINDER,
    LLMEndpoint,
    LLMError,
    LLMUsage,
    OpenAICompatibleLLM,
    parse_json_answer,
)
from memmy.llm.guard import vet_text, why_not
from memmy.namespace import Namespace
from memmy.recall.llm_steps import rewrite_queries
from memmy.service import MemoryService
from memmy.service.models import build_model_clients, endpoint_of
from memmy.store.db import Database
from memmy.store.llm_usage import LLMUsageRepository
from memmy.store.unit import Store
from tests.llm_stub import run_chat_stub

KEY = "sk-test1234567890abcdef"


def ok(system: str, user: str) -> str:
    return json.dumps({"echo": user})


def client(url: str, *, retries: int = 0, usages: list[LLMUsage] | None = None, **extra: Any) -> OpenAICompatibleLLM:
    callback = usages.append if usages is not None else None
    return OpenAICompatibleLLM(LLMEndpoint(url, "m", max_retries=retries, **extra), on_usage=callback)


def test_json_mode_request_body_and_auth() -> None:
    with run_chat_stub(ok) as stub:
        llm = client(stub.url, api_key=KEY, temperature=0.2, max_tokens=99)
        assert llm.complete_json("sys", "hello 你好", timeout_s=5) == {"echo": "hello 你好"}
        request = stub.requests[0]
    body = request["body"]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == f"Bearer {KEY}"
    assert body["response_format"] == {"type": "json_object"}
    assert body["model"] == "m" and body["temperature"] == 0.2 and body["max_tokens"] == 99
    assert body["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello 你好"}]
    assert "thinking" not in body and "enable_thinking" not in body


def test_thinking_flag_only_when_enabled_and_dropped_when_rejected() -> None:
    def reply(request: dict[str, Any]) -> tuple[int, str] | None:
        if "enable_thinking" in request["body"]:
            return 400, '{"error": "parameter.enable_thinking must be set to false for non-streaming calls"}'
        return None

    with run_chat_stub(ok, reply=reply) as stub:
        off = client(stub.url, vendor="qwen", enable_thinking=False)
        off.complete_json("s", "a", timeout_s=5)
        on = client(stub.url, vendor="qwen", enable_thinking=True)
        assert on.complete_json("s", "b", timeout_s=5) == {"echo": "b"}
        on.complete_json("s", "c", timeout_s=5)
        bodies = [r["body"] for r in stub.requests]
    assert "enable_thinking" not in bodies[0]
    assert bodies[1]["enable_thinking"] is True and "enable_thinking" not in bodies[2]
    assert len(bodies) == 4 and "enable_thinking" not in bodies[3]  # remembered: no second 400


def test_response_format_rejected_is_retried_without_it() -> None:
    def reply(request: dict[str, Any]) -> tuple[int, str] | None:
        if "response_format" in request["body"]:
            return 400, '{"error": {"message": "Invalid value for response_format: json_object unsupported"}}'
        return None

    with run_chat_stub(ok, reply=reply) as stub:
        llm = client(stub.url)
        assert llm.complete_json("s", "x", timeout_s=5) == {"echo": "x"}
        assert llm.complete_json("s", "y", timeout_s=5) == {"echo": "y"}
        assert ["response_format" in r["body"] for r in stub.requests] == [True, False, False]


def test_usage_parsed_or_estimated() -> None:
    usages: list[LLMUsage] = []
    with run_chat_stub(ok, usage={"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}) as stub:
        client(stub.url, usages=usages).complete_json("s", "u", timeout_s=5)
    assert usages == [LLMUsage(11, 7, 18, False, 200)]
    usages.clear()
    system, user = "x" * 10, "y" * 11  # 21 chars -> 6 tokens
    answer = json.dumps({"a": "z" * 20})  # 30 chars -> 8 tokens
    with run_chat_stub(lambda s, u: answer) as stub:
        client(stub.url, usages=usages).complete_json(system, user, timeout_s=5)
    assert usages == [LLMUsage(6, 8, 14, True, 200)]


def test_malformed_then_good_answer_is_retried_and_both_are_counted() -> None:
    answers = iter(["I think the answer is yes", '```json\n{"ok": true}\n```'])
    usages: list[LLMUsage] = []
    with run_chat_stub(lambda s, u: next(answers)) as stub:
        assert client(stub.url, usages=usages).complete_json("s", "u", timeout_s=5) == {"ok": True}
        assert len(stub.requests) == 2
        asked = [r["body"]["messages"][1]["content"] for r in stub.requests]
        assert asked == ["u", "u" + JSON_REMINDER]  # the same prompt again would get the same prose back
    assert len(usages) == 2 and all(u.total_tokens > 0 for u in usages)
    with run_chat_stub(lambda s, u: "never json") as stub, pytest.raises(LLMError, match="not valid JSON"):
        client(stub.url).complete_json("s", "u", timeout_s=5)


def test_think_blocks_are_ignored() -> None:
    assert parse_json_answer('<think>maybe {"no": 1}</think>\n{"yes": 2}') == {"yes": 2}


def test_server_error_then_success_is_retried() -> None:
    statuses = [503, 500]

    def reply(request: dict[str, Any]) -> tuple[int, str] | None:
        return (statuses.pop(0), '{"error": "busy"}') if statuses else None

    with run_chat_stub(ok, reply=reply) as stub:
        started = time.monotonic()
        assert client(stub.url, retries=2).complete_json("s", "u", timeout_s=10) == {"echo": "u"}
        assert len(stub.requests) == 3 and time.monotonic() - started < 2.5  # backoff 0.5 s + 1.0 s
    with run_chat_stub(lambda s, u: None) as stub, pytest.raises(LLMError, match="HTTP 500"):
        client(stub.url, retries=0).complete_json("s", "u", timeout_s=5)
    assert len(stub.requests) == 1


def test_whole_call_is_time_boxed() -> None:
    usages: list[LLMUsage] = []
    with run_chat_stub(ok, delay_s=2.0) as stub:
        started = time.monotonic()
        with pytest.raises(LLMError, match="within 0.5 s"):
            client(stub.url, retries=3, usages=usages).complete_json("s", "u" * 39, timeout_s=0.5)
        assert time.monotonic() - started < 1.5
    assert usages == [LLMUsage(10, 0, 10, True, 0)]  # the server had the prompt: it counts
    # Retries and their backoff stop at the deadline too.
    with run_chat_stub(lambda s, u: None) as stub:
        started = time.monotonic()
        with pytest.raises(LLMError, match="no time left"):
            client(stub.url, retries=10).complete_json("s", "u", timeout_s=1.0)
        assert time.monotonic() - started < 1.5 and len(stub.requests) < 10


def test_unreachable_endpoint_is_an_llm_error() -> None:
    with pytest.raises(LLMError, match="unreachable"):
        client("http://127.0.0.1:9/v1").complete_json("s", "u", timeout_s=2)


def test_secrets_are_scrubbed_from_errors() -> None:
    def reply(request: dict[str, Any]) -> tuple[int, str] | None:
        return 401, json.dumps({"error": f"bad key, you sent {request['auth']} (api_key={KEY})"})

    with run_chat_stub(ok, reply=reply) as stub, pytest.raises(LLMError) as caught:
        client(stub.url, api_key=KEY).complete_json("s", "u", timeout_s=5)
    message = str(caught.value)
    assert "HTTP 401" in message and "[redacted]" in message
    assert KEY not in message and "1234567890" not in message
    # A key without the sk- shape is removed as well.
    plain = "plainsecretvalue42"
    with run_chat_stub(ok, reply=lambda r: (500, f"echo {plain}")) as stub, pytest.raises(LLMError) as caught:
        client(stub.url, api_key=plain).complete_json("s", "u", timeout_s=5)
    assert plain not in str(caught.value) and plain not in repr(LLMEndpoint("u", "m", plain))


class Clock:
    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


def test_budget_refuses_calls_without_a_request(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    clock = Clock(datetime(2026, 3, 1, 23, 0, tzinfo=UTC))
    usage = LLMUsageRepository(db)
    budget = DailyBudget(usage, daily_calls=2, daily_tokens=0, clock=clock)
    with run_chat_stub(ok, usage={"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}) as stub:
        summary = BudgetedLLM(client(stub.url), budget, "summary")
        evolution = BudgetedLLM(client(stub.url), budget, "evolution")
        summary.complete_json("s", "1", timeout_s=5)
        evolution.complete_json("s", "2", timeout_s=5)
        with pytest.raises(LLMBudgetExhausted, match=r"calls 2/2\); evolution falls back to heuristics"):
            summary.complete_json("s", "3", timeout_s=5)
        assert len(stub.requests) == 2
        record = usage.usage_of("2026-03-01")
        assert (record["calls"], record["tokens"], record["refused"]) == (2, 20, 1)
        assert record["slots"] == {"summary": {"calls": 1, "tokens": 10}, "evolution": {"calls": 1, "tokens": 10}}
        clock.moment = datetime(2026, 3, 2, 0, 0, 1, tzinfo=UTC)  # a new UTC day resets the budget
        assert evolution.complete_json("s", "4", timeout_s=5) == {"echo": "4"}
        assert len(stub.requests) == 3
    db.close()


def test_budget_holds_under_concurrent_callers(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    budget = DailyBudget(LLMUsageRepository(db), daily_calls=3, daily_tokens=0)
    outcomes: list[str] = []
    with run_chat_stub(ok, delay_s=0.3) as stub:
        llm = BudgetedLLM(client(stub.url), budget, "evolution")

        def call(i: int) -> None:
            try:
                llm.complete_json("s", str(i), timeout_s=5)
                outcomes.append("ok")
            except LLMBudgetExhausted:
                outcomes.append("refused")

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(stub.requests) == 3
    assert sorted(outcomes) == ["ok"] * 3 + ["refused"] * 5
    assert budget.status().calls == 3 and LLMUsageRepository(db).usage_of(budget.today())["refused"] == 5
    db.close()


def test_token_budget_and_failed_calls_count(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    usage = LLMUsageRepository(db)
    budget = DailyBudget(usage, daily_calls=0, daily_tokens=25)
    with run_chat_stub(lambda s, u: "not json", usage={"total_tokens": 15}) as stub:
        llm = BudgetedLLM(client(stub.url), budget, "evolution")
        with pytest.raises(LLMError, match="not valid JSON"):
            llm.complete_json("s", "u", timeout_s=5)  # two malformed answers: 30 tokens spent
        with pytest.raises(LLMBudgetExhausted, match=r"tokens 30/25"):
            llm.complete_json("s", "u", timeout_s=5)
        assert len(stub.requests) == 2
    status = budget.status()
    assert status.exhausted and status.remaining_tokens == 0 and status.remaining_calls is None
    db.close()


def test_usage_counters_survive_a_new_repository(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    db = Database(path)
    LLMUsageRepository(db).record("2026-03-01", "summary", 3, 120)
    LLMUsageRepository(db).record("2026-03-01", "evolution", 1, 40, refused=2)
    db.close()
    reopened = Database(path)
    repo = LLMUsageRepository(reopened)
    assert repo.used_today("2026-03-01") == (4, 160)
    report = repo.report(days=3, today="2026-03-02")
    assert [r["day"] for r in report] == ["2026-03-02", "2026-03-01", "2026-02-28"]
    assert report[0]["calls"] == 0 and report[1]["refused"] == 2
    assert report[1]["slots"]["evolution"] == {"calls": 1, "tokens": 40}
    reopened.close()


def write_config(home: Path, tree: dict[str, Any]) -> None:
    path = home / ".memmy" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"memmyMemory": tree}), encoding="utf-8")


def test_model_slots_inherit_each_other(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slot = {"provider": "openai_compatible", "vendor": "deepseek", "model": "deepseek-chat", "apiKey": KEY}
    write_config(isolated_home, {"evolution": slot})
    config = load_config()
    assert config.summary.model == "deepseek-chat" and config.summary.vendor == "deepseek"
    assert config.summary.api_key == KEY and config.summary.configured
    assert config.summary.max_tokens == 512 and config.evolution.max_tokens == 4096  # limits stay per slot
    write_config(isolated_home, {"summary": {**slot, "model": "qwen-plus", "vendor": "qwen"}})
    config = load_config()
    assert config.evolution.model == "qwen-plus" and config.evolution.vendor == "qwen"
    write_config(isolated_home, {"summary": slot, "evolution": {**slot, "model": "deepseek-reasoner"}})
    config = load_config()
    assert (config.summary.model, config.evolution.model) == ("deepseek-chat", "deepseek-reasoner")


def test_budget_config_and_env_overrides(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (load_config().llm_budget.daily_calls, load_config().llm_budget.daily_tokens) == (2000, 2_000_000)
    write_config(isolated_home, {"llmBudget": {"dailyCalls": 10}})
    assert load_config().llm_budget.daily_calls == 10
    monkeypatch.setenv("MEMMY_LLM_DAILY_CALLS", "0")
    monkeypatch.setenv("MEMMY_LLM_DAILY_TOKENS", "5000")
    budget = load_config().llm_budget
    assert (budget.daily_calls, budget.daily_tokens) == (0, 5000)


def test_build_model_clients_and_usage_report(isolated_home: Path, tmp_path: Path) -> None:
    store = Store(Database(tmp_path / "m.sqlite"))
    assert build_model_clients(load_config(), store).summary is None
    with run_chat_stub(ok, usage={"total_tokens": 100}) as stub:
        write_config(
            isolated_home,
            {
                "summary": {"provider": "openai_compatible", "model": "m", "endpoint": stub.url},
                "evolution": {"provider": "host", "endpoint": "http://127.0.0.1:1"},
                "llmBudget": {"dailyCalls": 3, "dailyTokens": 0},
            },
        )
        models = build_model_clients(load_config(), store)
        assert models.evolution is None and models.summary is not None
        assert models.summary_timeout_s == 45.0
        models.summary.complete_json("s", "u", timeout_s=5)
    report = models.usage_report()
    assert report["calls"] == 1 and report["tokens"] == 100 and report["refused"] == 0
    assert report["limits"] == {"dailyCalls": 3, "dailyTokens": 0}
    assert report["remaining"] == {"calls": 2, "tokens": None} and not report["exhausted"]
    assert report["configured"] == {"summary": True, "evolution": False}
    assert report["resetsAt"].endswith("T00:00:00Z") and report["slots"]["summary"]["calls"] == 1
    store.close()


def test_recall_llm_steps_spend_from_the_budget(isolated_home: Path, embedder: Embedder) -> None:
    ns = Namespace(source="claude_code")
    with run_chat_stub(lambda s, u: json.dumps({"ranked": [1], "sufficient": True})) as stub:
        write_config(
            isolated_home,
            {
                "summary": {"provider": "openai_compatible", "model": "m", "endpoint": stub.url},
                "llmBudget": {"dailyCalls": 1},
            },
        )
        service = MemoryService.open(load_config(), embedder=embedder)
        try:
            service.add_memory(AddMemory.from_json({"content": "Kafka consumer group rebalances on every deploy"}), ns)
            service.add_memory(AddMemory.from_json({"content": "Kafka lag alert fires at 10k messages"}), ns)
            service.indexer.drain()
            first = service.search(SearchMemory.from_json({"query": "kafka consumer rebalancing", "verbose": True}), ns)
            second = service.search(
                SearchMemory.from_json({"query": "kafka consumer rebalancing", "verbose": True}), ns
            )
            assert "llm_filter:llm_filtered" in first["status"]
            assert "llm_filter:llm_filtered" not in second["status"] and len(stub.requests) == 1
            assert service.recall_ops.models.usage_report()["refused"] == 1
        finally:
            service.close()


def test_circuit_breaker_skips_a_dead_model_then_tries_again_after_the_cool_down() -> None:
    now = [0.0]
    with run_chat_stub(lambda system, user: None) as stub:  # every answer is HTTP 500
        breaker = CircuitBreakerLLM(
            OpenAICompatibleLLM(LLMEndpoint(stub.url, "m")), threshold=2, cooldown_s=30.0, clock=lambda: now[0]
        )
        for _ in range(2):
            with pytest.raises(LLMError):
                breaker.complete_json("s", "u", timeout_s=5)
        sent = len(stub.requests)
        with pytest.raises(CircuitOpen):
            breaker.complete_json("s", "u", timeout_s=5)
        assert len(stub.requests) == sent, "an open circuit must not reach the model"
        now[0] = 31.0
        with pytest.raises(LLMError) as failure:
            breaker.complete_json("s", "u", timeout_s=5)
        assert not isinstance(failure.value, CircuitOpen) and len(stub.requests) > sent


# ---------------------------------------------------------------- a small model's answers (seen on real models)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('Sure! Here it is:\n```json\n{"queries": ["a", "b"]}\n```\nHope this helps.', {"queries": ["a", "b"]}),
        ('{"ranked": [2, 1]}\n{"ranked": [2, 1]}', {"ranked": [2, 1]}),  # the answer repeated
        ('{"queries": ["a", "b",]}', {"queries": ["a", "b"]}),  # a trailing comma
        ('{"summary": "deploys go to the blue clus', {"summary": "deploys go to the blue clus"}),  # cut off
        (
            '{"steps": [{"title": "x", "body": "y"}, {"title": "z"',
            {"steps": [{"title": "x", "body": "y"}, {"title": "z"}]},
        ),
        ("Marked: [1, 2]", [1, 2]),
    ],
)
def test_parse_json_answer_reads_what_small_models_wrap_json_in(content: str, expected: Any) -> None:
    assert parse_json_answer(content) == expected


def test_a_cut_off_object_is_not_read_as_a_list_inside_its_strings() -> None:
    cut = '{\n  "name": "raise_heap",\n  "summary": "Set [\\"NODE_OPTIONS\\"] for large builds and'
    assert parse_json_answer(cut) == {"name": "raise_heap", "summary": 'Set ["NODE_OPTIONS"] for large builds and'}
    broken = '{"name": "raise_heap", "summary": "Raising ["NODE_OPTIONS"] helps'  # a stray quote: unreadable
    with pytest.raises(LLMError):
        parse_json_answer(broken)


@pytest.mark.parametrize("content", ["", "   ", "1. [TRACE]\n2. [EXPERIENCE]", "The answer is yes."])
def test_answers_without_json_are_errors(content: str) -> None:
    with pytest.raises(LLMError):
        parse_json_answer(content)


def test_json_mode_off_and_repeat_penalty_sent_then_dropped_when_rejected() -> None:
    def reply(request: dict[str, Any]) -> tuple[int, str] | None:
        if "repeat_penalty" in request["body"]:
            return 400, '{"error": "Unrecognized request argument supplied: repeat_penalty"}'
        return None

    with run_chat_stub(ok, reply=reply) as stub:
        llm = client(stub.url, json_mode=False, repeat_penalty=1.3)
        assert llm.complete_json("s", "x", timeout_s=5) == {"echo": "x"}
        llm.complete_json("s", "y", timeout_s=5)
        bodies = [r["body"] for r in stub.requests]
    assert all("response_format" not in b for b in bodies)
    assert [b.get("repeat_penalty") for b in bodies] == [1.3, None, None]


def test_json_mode_and_repeat_penalty_come_from_the_config(isolated_home: Path) -> None:
    write_config(
        isolated_home,
        {"summary": {"provider": "openai_compatible", "model": "m", "endpoint": "http://127.0.0.1:9/v1",
                     "jsonMode": False, "repeatPenalty": 1.3}},
    )  # fmt: skip
    config = load_config()
    endpoint = endpoint_of(config.evolution)  # inherited from the summary slot with its model
    assert endpoint is not None and not endpoint.json_mode and endpoint.repeat_penalty == 1.3
    assert load_config().summary.json_mode is False


PROMPT = 'Rewrite the request into search queries. Example answer: {"queries": ["billing API port", "owner team"]}'


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("", "empty"),
        ("str", "placeholder"),
        ("<one sentence to embed>", "placeholder"),
        ("Rewrite the request into search queries.", "echoed_instructions"),
        ("billing API port", "echoed_instructions"),  # the example copied
        ("Where do we deploy the invoicing service?", "restated_question"),
        ("deploy " * 40, "repetitive"),
        ("production build memory issue", "wrong_language"),  # a Chinese request answered in English
        ("x " * 2000, "over_long"),
        ("[trace t1] episode=e1 tags=node", "echoed_input_markup"),
        ("1. Check the agent logs for any relevant error messages or warnings.", "ungrounded"),
    ],
)
def test_vet_text_refuses_what_a_small_model_gets_wrong(answer: str, reason: str) -> None:
    source = "生产构建又内存不足了" if reason == "wrong_language" else "Where do we deploy the invoicing service?"
    question = "Where do we deploy the invoicing service?"
    grounding = "user: pnpm build fails with JavaScript heap out of memory\ntools: bash(pnpm build) -> error"
    cleaned, why = why_not(
        answer, instructions=PROMPT, source=source, question=question, max_chars=200,
        grounding=grounding if reason == "ungrounded" else "",
    )  # fmt: skip
    assert (cleaned, why) == ("", reason) or (reason == "over_long" and why in ("over_long", "repetitive"))


def test_vet_text_keeps_a_good_answer_cleaned_and_logs_refusals(caplog: pytest.LogCaptureFixture) -> None:
    good = "Summary: The invoicing service deploys to the blue cluster via `make deploy-blue`. " * 2
    kept = vet_text("trace_summary", good, instructions=PROMPT, source="invoicing 发布", max_chars=400)
    assert kept == "The invoicing service deploys to the blue cluster via `make deploy-blue`."  # label, repeat gone
    command = "git rebase -i origin/main"  # copied from a Chinese request: not a switch to English
    assert vet_text("query_rewrite", command, instructions=PROMPT, source=f"运行 {command} 时报错了怎么办") == command
    zh = "调大内存后重新构建：NODE_OPTIONS=--max-old-space-size=4096"
    assert vet_text("trace_summary", zh, instructions=PROMPT, source="生产构建又内存不足了") == zh
    long = "First fact about the deploy. " + "More words here and there. " * 20
    assert len(vet_text("s", long, instructions=PROMPT, max_chars=120)) <= 120
    with caplog.at_level("WARNING", logger="memmy.llm.guard"):
        assert vet_text("trace_summary", {"summary": 1}, instructions=PROMPT) == ""
        assert (
            vet_text("trace_summary", f"sk-{'a' * 30} Rewrite the request into search queries.", instructions=PROMPT)
            == ""
        )
    assert [r.getMessage().split(" answer")[0] for r in caplog.records] == ["LLM trace_summary"] * 2
    assert "not_text" in caplog.records[0].getMessage() and "sk-aaaa" not in caplog.text
    assert "Example answer" not in caplog.text  # the prompt is never logged


@pytest.mark.parametrize(
    ("content", "queries", "status"),
    [
        (  # fenced; the request restated and the prompt's example copied are dropped
            '```json\n{"queries": ["invoicing deploy target", "Where do we deploy the invoicing service?", '
            '"billing API port"]}\n```',
            ["invoicing deploy target"],
            "query_rewrite:1",
        ),
        ('Sure: ["deploy cluster for invoicing", "make target invoicing"]', None, "query_rewrite:2"),  # a bare list
        ('{"queries": "invoicing"}', [], "query_rewrite:invalid_output"),
        ('{"queries": ["生产环境构建时内存不足的解决办法"]}', [], "query_rewrite:invalid_output"),  # another language
        ("I cannot help with that.", [], "query_rewrite:fallback"),
    ],
)
def test_the_query_rewrite_keeps_only_usable_queries(content: str, queries: list[str] | None, status: str) -> None:
    with run_chat_stub(lambda s, u: content) as stub:
        llm = OpenAICompatibleLLM(LLMEndpoint(stub.url, "m", json_mode=False), malformed_retries=0)
        got, got_status = rewrite_queries(llm, "Where do we deploy the invoicing service?", timeout_s=5)
    assert got_status == status
    assert got == (queries if queries is not None else ["deploy cluster for invoicing", "make target invoicing"])
