"""Evolution in Chinese as in English (issue 28, item 3): a fix asked for in the user's own words stays in the
failed task, is paired with the failure, and the repeat gets the fix; an Avoid line without a fix that only
restates the failure the prompt reports is not injected. Pure rules first, then the Chinese two-project week of
``bench/evolution_quality.py`` through the real service (no LLM, the default MiniLM model)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench.evolution_quality import Runner, generate

from memmy.evolve.boundaries import EpisodeContext, classify_relation
from memmy.evolve.failure import avoidance_draft, best_success
from memmy.evolve.topics import content_keywords, overlap
from memmy.service.recall import restates_failure
from tests.test_evolve_scope_render import call, trace

HEAP_ERROR = "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory 内存不足"
HEAP_FIX = "NODE_OPTIONS=--max-old-space-size=4096 pnpm build --filter admin"
DAY_1 = "2026-12-01T00:00:00Z"


def build_task(open_failure: bool) -> EpisodeContext:
    """An open task whose production build ran out of memory (its request and its failed step)."""
    return EpisodeContext(
        first_user_text="给管理后台做一次生产构建",
        latest_user_text="给管理后台做一次生产构建",
        last_assistant_text="运行 `pnpm build --filter admin` 失败了：内存不足。",
        tags=["javascript"],
        last_activity_at=datetime.now(UTC),
        evidence_text=f"pnpm build --filter admin\n{HEAP_ERROR}",
        open_failure=open_failure,
    )


def test_chinese_overlap_counts_characters_not_bigrams_across_words() -> None:
    task = content_keywords(f"给管理后台做一次生产构建 运行 `pnpm build` 失败了：内存不足。{HEAP_ERROR}")
    chinese = overlap(content_keywords("调大内存后重新构建"), task)
    english = overlap(
        content_keywords("Raise the memory limit and build again"), content_keywords(HEAP_ERROR + " build")
    )
    assert chinese >= 0.4 and english >= 0.4  # 内存 and 构建 of 调大内存后重新构建; memory and build
    assert overlap(content_keywords("在购物车页面加一个优惠码输入框"), task) == 0.0


def test_a_fix_in_the_users_words_stays_in_the_failed_task() -> None:
    now = datetime.now(UTC)
    assert classify_relation("调大内存后重新构建", build_task(open_failure=True), now).relation == "follow_up"
    assert classify_relation("把限制调大再发一次", build_task(open_failure=True), now).relation == "follow_up"
    # a cue still starts a new task, and without an open failure words that share nothing do
    assert classify_relation("接下来，在购物车页面加一个优惠码输入框", build_task(True), now).relation == "new_task"
    assert classify_relation("在购物车页面加一个优惠码输入框", build_task(False), now).relation == "new_task"


def test_the_fix_is_the_step_that_reruns_the_failed_command() -> None:
    failed = trace(
        "t1",
        "给管理后台做一次生产构建",
        "失败了：内存不足。",
        [call("pnpm build --filter admin", HEAP_ERROR, False)],
        DAY_1,
    )
    fixed = trace("t2", "调大内存后重新构建", "构建成功。", [call(HEAP_FIX, "admin: build completed")], DAY_1)
    other = trace(
        "t3",
        "把价格字符串转成数字再构建",
        "构建成功。",
        [call("sed -i s/raw/Number(raw)/ price.tsx", "ok"), call("pnpm build --filter storefront", "ok")],
        "2026-12-02T00:00:00Z",
    )
    assert best_success([fixed, other], [failed]).id == "t2"  # the same command under NODE_OPTIONS, not a later build
    draft = avoidance_draft([failed], [fixed, other])
    assert HEAP_FIX in draft.preference[0] and all("sed" not in line for line in draft.anti_pattern), draft


def test_an_avoid_line_without_a_fix_is_dropped_only_when_it_restates_the_prompt() -> None:
    policy = {
        "policy": {
            "type": "failure_avoidance",
            "anti_pattern": [f"Avoid: 在 `pnpm build --filter admin` 失败后原样重复执行（{HEAP_ERROR}）"],
            "preference": [],
        }
    }
    assert restates_failure(policy, "生产构建又内存不足了")
    assert restates_failure(policy, "The admin build ran out of memory again")
    assert not restates_failure(policy, "给管理后台做一次生产构建")  # it warns of a failure the prompt does not name
    fixed = {"policy": {**policy["policy"], "preference": [f"Prefer: `{HEAP_FIX}`"]}}
    note = {"policy": {"type": "failure_avoidance", "anti_pattern": ["Avoid: 删除锁表"], "preference": []}}
    assert not restates_failure(fixed, "生产构建又内存不足了") and not restates_failure(note, "删除锁表")


@pytest.mark.parametrize("chinese", [True, False], ids=["chinese-week", "mixed-week"])
def test_the_bench_week_pairs_and_recalls_fixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chinese: bool) -> None:
    for name in ("HOME", "MEMMY_HOME", "MEMMY_CONFIG"):  # the runner points these at its home: restored after
        monkeypatch.setenv(name, str(tmp_path))
    runner = Runner(generate(1, 4, zh_only=chinese), tmp_path, None, "")
    try:
        runner.week()
        pairing = runner.pairing()
        probes = runner.probes()
    finally:
        runner.service.close()
    assert pairing["pair_precision"] >= 0.95 and pairing["pair_recall"] >= 0.9, runner.wrong_pairs
    assert probes["fix_recall"] >= 0.9, [(p["query"], m) for p, m in runner.misses if p["kind"] == "repeat"]
    assert probes["silence"] >= 0.95 and probes["leak_per_100"] == 0
