"""Issue 14, second pass: guidance recalled by the evidence it carries (reworded repeats, EN and ZH), a task split
at turn.complete when the step's files, commands and errors change, readable offline titles, and the LLM stub
of the benchmark. Pure rules first, then the same through the real daemon, offline, in English and Chinese."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from bench.llm_stub import contract_answer

from memmy.domain import Memory
from memmy.evolve.boundaries import EpisodeContext, evidence_shift
from memmy.evolve.failure import FAILURE_SINK_PROMPT
from memmy.evolve.policy import induce_heuristic
from memmy.evolve.rules_text import task_text
from memmy.evolve.topics import Topic, content_keywords, evidence_covers, topical
from memmy.recall.render import item_text
from tests.conftest import Daemon
from tests.test_evolution_quality import call, inject, memories, open_session, repo, turn
from tests.test_evolution_scenario import drain, write_config
from tests.test_evolve_scope_render import trace

LOAD_POLICY = (
    "Avoid: repeating `python -m etl.load_orders --date 2026-12-01` unchanged after it fails "
    '(psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint "orders_pkey")\n'
    "Seen in:\n- Load yesterday's orders into the warehouse\n- 把昨天的订单导入数仓"
)


def test_numeric_identifiers_and_chinese_function_characters_shape_the_keywords() -> None:
    assert {"2026-12-01", "3000", "order"} <= content_keywords("load_orders --date 2026-12-01 on tcp:3000")
    assert "2026" not in content_keywords("2026-12-01") and "12" not in content_keywords("line 12")
    # bigrams never span a function character or a filler: 的订 / 补一 are no words
    assert content_keywords("补一下 2026-12-01 的订单数据") == {"2026-12-01", "订单", "单数", "数据"}


def test_evidence_covers_a_reworded_repeat_but_not_a_foreign_or_unrelated_prompt() -> None:
    assert evidence_covers("Backfill the orders table for 2026-12-01", LOAD_POLICY)
    assert evidence_covers("补一下 2026-12-01 的订单数据", LOAD_POLICY)
    assert not evidence_covers("What is a good hydration for sourdough bread?", LOAD_POLICY)
    # two generic shared words out of many are not the same task
    foreign = "pnpm test src/checkout fails: Cannot find module '@shop/payments' for orders on 2026-12-01 cart"
    assert not evidence_covers(foreign, LOAD_POLICY)


def test_a_chinese_bigram_the_store_never_saw_does_not_count_against_every_memory() -> None:
    memory = "给 storefront 做一次生产构建；用 Number.parseFloat 转换价格"
    prompt = "构建前端商城的生产版本"
    assert not topical(prompt, memory)  # 2 of 8 bigrams: 建前, 端商, 产版 ... count against it
    assert topical(prompt, memory, vocabulary=memory.lower() + " 前端")  # only the known bigrams count
    # an English word the store does not know still counts: it says the prompt is about something else
    assert not topical("deploy the lisbon itinerary spring holiday", "deploy the api", vocabulary="deploy api")


def _context(first: str, evidence: str) -> EpisodeContext:
    return EpisodeContext(first, first, "", [], datetime.now(UTC), evidence_text=evidence)


def test_evidence_shift_splits_a_step_on_other_files_commands_and_errors() -> None:
    task = _context("Run the checkout unit tests", "pnpm test src/checkout\nCannot find module '@shop/payments'")
    other = [call("helm upgrade --install worker charts/worker -n jobs", "another operation is in progress", False)]
    shift = evidence_shift("Do the other thing now", other, task)
    assert shift is not None and shift.relation == "new_task" and shift.rule == "r10_evidence_shift"
    same = [call("pnpm install --filter @shop/payments", "ok"), call("pnpm test src/checkout", "42 passed")]
    assert evidence_shift("Do the other thing now", same, task) is None  # the same files and package
    assert evidence_shift("不对，重新来", other, task) is None  # a revision stays
    assert evidence_shift("Do the other thing now", [call("ls", "a")], task) is None  # too little evidence
    zh = _context("跑一下 checkout 模块的单元测试", "pnpm test src/checkout\nCannot find module '@shop/payments'")
    assert evidence_shift("弄一下另一个", other, zh) is not None


def test_offline_titles_are_the_task_not_the_retry_glued_to_it() -> None:
    assert task_text("OK, moving on. The cleaning step crashes on the new customer export") == (
        "The cleaning step crashes on the new customer export"
    )
    assert task_text("接下来，把昨天的订单导入数仓") == "把昨天的订单导入数仓"
    fixed = trace(
        "t2",
        "Another thing: Make a production build of the storefront\nIt still fails: error TS2322",
        "Converted the price; the build completes.",
        [call("pnpm build --filter storefront", "build completed in 41s")],
        "2026-12-01T10:00:01Z",
    )
    draft = induce_heuristic("node|pnpm|bash|_", [fixed])
    assert draft is not None
    assert draft.title == "Make a production build of the storefront", draft.title
    assert "It still fails" not in draft.trigger and "Another thing" not in draft.trigger


def test_instead_is_the_line_about_the_failed_command() -> None:
    policy = {
        "type": "failure_avoidance",
        "anti_pattern": ["Avoid: repeating `pnpm build --filter storefront` unchanged (src/storefront/price.tsx)"],
        "preference": [
            "Prefer: Checked: the value comes from the query string",
            "Prefer: `sed -i 's/raw/Number(raw)/' src/storefront/price.tsx` → `pnpm build --filter storefront`",
        ],
    }
    memory = Memory(id="policy_1", layer="L2", content="", title="t", properties={"policy": policy})
    text = item_text(memory, "search")
    assert text.split("Instead: ", 1)[1].startswith("`sed -i"), text


def test_the_bench_stub_answers_the_failure_contract_from_its_input() -> None:
    user = (
        "FAILED:\n[trace a] episode=e tags=x\nuser: Run terraform plan\nagent: failed\n"
        "tools: bash(terraform plan) -> Error acquiring the state lock\n\n"
        "SUCCEEDED:\n[trace b] episode=e tags=x\nuser: still fails\nagent: ok\n"
        "tools: bash(terraform force-unlock 6f1c) -> ok; bash(terraform plan) -> Plan: 3 to add"
    )
    answer = json.loads(contract_answer(FAILURE_SINK_PROMPT, user) or "{}")
    assert answer["decision_guidance"]["avoid"] == ["repeating `terraform plan` unchanged after it fails"]
    assert "terraform force-unlock 6f1c" in answer["decision_guidance"]["prefer"][0]
    assert json.loads(contract_answer("some other prompt", "x") or "null") == {}


# --------------------------------------------------------------------------- through the real daemon


@dataclass(frozen=True)
class Week:
    """One language's reworded repeat and vague next-task message."""

    name: str
    task: str
    retry: str
    reworded: str
    vague: str


WEEKS = [
    Week(
        "english",
        "Load yesterday's orders into the warehouse",
        "It still fails: duplicate key value violates unique constraint",
        "Backfill the orders table for 2026-12-01",
        "Do the other one now",
    ),
    Week(
        "chinese",
        "把昨天的订单导入数仓",
        "还是报错：duplicate key value violates unique constraint",
        "补一下 2026-12-01 的订单数据",
        "弄一下另一个",
    ),
]


@pytest.mark.parametrize("week", WEEKS, ids=lambda w: w.name)
def test_a_reworded_repeat_gets_the_fix_and_a_step_elsewhere_is_its_own_task(fresh_daemon: Daemon, week: Week) -> None:
    fresh_daemon.extra_env["MEMMY_CONFIG"] = str(write_config(fresh_daemon.home))
    fresh_daemon.start()
    root = fresh_daemon.home / "src"
    dataetl, webshop = repo(root, "dataetl"), repo(root, "webshop")
    load = "python -m etl.load_orders --date 2026-12-01"
    dup = 'psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint "orders_pkey"'
    with fresh_daemon.client() as client:
        episodes: list[Any] = []
        for _ in range(2):
            sid = open_session(client, dataetl)
            first = turn(client, sid, week.task, f"`{load}` failed.", [call(load, dup, False)])
            fixed = turn(client, sid, week.retry, "Re-ran with --upsert: 12408 rows.", [call(f"{load} --upsert", "ok")])
            # a vague message routed into the task, whose step touches other files and commands entirely
            vague = turn(
                client,
                sid,
                week.vague,
                "Partitioned the export by day.",
                [call("apply_patch pipelines/export.py partition_cols", "export writes data/export/day=YYYY-MM-DD")],
            )
            completed = client.get(f"/api/v1/memory/{vague['episodeId']}").json()
            episodes.append((first["episodeId"], fixed["episodeId"], vague["episodeId"], completed))
            client.post(f"/api/v1/sessions/{sid}/close", json={}).raise_for_status()
        drain(client)
        for first_id, fixed_id, _vague_id, _detail in episodes:
            assert first_id == fixed_id  # the retry stays in its task
        listing = client.get("/api/v1/episodes").json()["items"]
        texts = [
            [t["userText"] for t in client.get(f"/api/v1/memory/{e['id']}").json()["refs"]["rawTurns"]] for e in listing
        ]
        assert [week.vague] in texts, texts  # split at turn.complete: the step is an episode of its own
        assert not any(week.vague in t and week.task in t for t in texts), texts

        # offline wording: titles are the task as stated, never the retry glued to it
        retry_head = week.retry.split(":")[0].split("：")[0]
        for layer in ("L2", "L3", "Skill"):
            for memory in memories(client, layer):
                assert retry_head not in memory["title"], memory["title"]
                assert retry_head not in json.dumps(memory["properties"].get("skill") or {}, ensure_ascii=False)
        repeat = inject(client, dataetl, week.reworded)["injectedContext"]["markdown"]
        assert "--upsert" in repeat, repeat  # the known fix, found by the task's evidence
        assert inject(client, webshop, week.reworded)["injectedContext"]["markdown"] == ""  # not in another project
        assert inject(client, dataetl, "红烧肉怎么做才不腻？")["injectedContext"]["markdown"] == ""


def test_a_topic_read_once_judges_every_memory_as_topical_does() -> None:
    cases = [
        ("构建前端商城的生产版本", "给 storefront 做一次生产构建；用 Number.parseFloat 转换价格 前端", 0.9),
        ("构建前端商城的生产版本", "给 storefront 做一次生产构建", 0.9),
        ("why does the checkout service time out on postgres", "checkout service: raise the postgres timeout", 0.2),
        ("why does the checkout service time out on postgres", "the checkout page renders slowly", 0.5),
        ("why does the checkout service time out on postgres", "the checkout page renders slowly", 0.3),
        ("why does the checkout service time out on postgres", "sourdough hydration notes", 0.9),
        ("deploy it", "deploy the api", 0.0),
        ("thanks, ok", "deploy the api", 0.9),
    ]
    vocabulary = " ".join(text for _, text, _ in cases).lower()
    # verdicts of topical() as it was before Topic existed (one call per memory, the prompt read each time)
    expected = {
        None: [True, False, True, True, False, False, True, False],
        vocabulary: [True, True, True, True, False, False, True, False],  # 前端 known: 2 of 6 bigrams suffice
    }
    for vocab, verdicts in expected.items():
        topics = {prompt: Topic.of(prompt, vocab) for prompt, _, _ in cases}  # one per prompt, reused
        assert [topics[p].covers(text, sim) for p, text, sim in cases] == verdicts
        assert [topical(p, text, sim, vocab) for p, text, sim in cases] == verdicts
    # one shared word and a strong meaning match count, except for a prompt with Chinese text
    english = Topic.of("why does the checkout service time out on postgres")
    assert english.needed == 2 and english.by_meaning
    assert english.covers("the checkout page renders slowly", 0.5)
    assert not english.covers("the checkout page renders slowly", 0.3)
    assert not Topic.of("构建前端商城的生产版本").by_meaning
    assert not Topic.of("thanks, ok").covers("thanks ok", 1.0)  # no content words: no topic
