"""Evolution and injection quality on a realistic multi-project week, against its ground truth.

    python bench/evolution_quality.py                     # seed 1, built-in generator, no LLM: both weeks
    python bench/evolution_quality.py --week zh           # only the Chinese week (--week mixed: the other)
    python bench/evolution_quality.py --seed 2 --seed 3   # several seeds, one table per seed plus the mean
    python bench/evolution_quality.py --dump week.json    # write the generated scenario and exit
    python bench/evolution_quality.py --data week.json    # run a scenario file (same JSON shape)
    python bench/evolution_quality.py --llm-stub          # offline, then the same with a local deterministic model
    python bench/evolution_quality.py --llm-base-url https://api.example.com/v1 --llm-model m   # a real provider
                                                          # (its API key from $MEMMY_BENCH_LLM_API_KEY)
    python bench/evolution_quality.py --llm-base-url http://127.0.0.1:8765/v1 --llm-model local --llm-local \
        --offline-too     # a small local model (../shared/tools/local-llm/serve.sh); --llm-rewrite: also at turn start

The generator builds a week of coding-agent work: at least three git projects (webshop / dataetl / infra),
English and Chinese requests, several agents, sessions of two to four tasks one after the other (with and
without explicit cues such as "next," or "接下来"), failures whose fix comes one or two turns later (sometimes
after a diagnostic step), successful tasks, the same tasks repeated in later sessions, implicit feedback
("thanks, works") and explicit feedback notes ("use pnpm, never npm"). Every turn carries its task label and
every failed task its error marker and fix marker, which is the ground truth. The Chinese week (``--week zh``)
has two projects (webshop, infra), every turn in Chinese, fixes often asked for in the user's own words ("调大内存后
重新构建") instead of by quoting the error, a production build that runs out of memory (内存不足) beside the other
failing build, and repeat probes that report the failure ("生产构建又内存不足了"). By default both weeks run.

It drives the real service in-process (fresh store in a temporary HOME, local MiniLM, no LLM unless
``--llm-stub`` / ``--llm-base-url``), closes the sessions, runs the worker until every job is done, then sends
probe prompts from new sessions: a repeat of each failed task in its own project, another project's task asked
in the wrong project, and unrelated prompts (cooking, travel, EN and ZH). Printed:

- segmentation precision / recall / F1 of task boundaries inside sessions (a boundary = the episode changes
  between two consecutive turns; truth = the task label changes);
- pairing precision / recall: every (Avoid → Instead/Prefer) pair of a failure_avoidance policy, judged by
  which task's error marker its Avoid side names and which task's fix marker its Prefer side names; recall =
  failed tasks whose failure is paired with its own fix;
- cross-project leakage per 100 prompts: injected memories whose evidence (L1: its project; L2: the projects of
  its source episodes; L3/Skill: of their source policies) does not include the prompt's project;
- fix recall: share of repeat prompts whose injection contains the task's fix marker;
- silence: share of unrelated / wrong-project prompts that inject nothing;
- mean injected tokens (over prompts that inject something) and the share of prompts over 400 tokens;
- what was learned: policies by type and status, world models, skills.

Scenario JSON (``--data``/``--dump``)::

    {"projects": ["webshop", ...],
     "tasks": {"<task id>": {"project": "webshop", "errorMarker": "...", "fixMarker": "..."}},
     "sessions": [{"project": "webshop", "agent": "codex", "turns": [
         {"task": "<task id>", "query": "...", "answer": "...", "toolCalls": [...]}, ...],
         "feedback": [{"task": "<task id>", "polarity": "negative", "note": "use pnpm, never npm"}]}],
     "probes": [{"project": "webshop", "query": "...", "kind": "repeat|foreign|unrelated", "task": "<id>"}]}

Markers are matched case-insensitively as substrings. Tasks without a failure have empty markers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memmy.commands.evolution import Feedback, RunWorker
from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn

# --------------------------------------------------------------------------- the task bank


@dataclass(frozen=True)
class TaskSpec:
    """One kind of task in one project, in two languages, with its failure and its fix (if it fails)."""

    id: str
    project: str
    requests_en: tuple[str, ...]
    requests_zh: tuple[str, ...]
    cmd: str
    output: str  # the first attempt's output (the error when ``fails``)
    fails: bool
    fix_cmds: tuple[str, ...] = ()
    fix_output: str = ""
    error_marker: str = ""
    fix_marker: str = ""
    diagnose: tuple[str, str] | None = None  # (command, output) of an optional diagnostic step
    answer_en: str = ""
    answer_zh: str = ""


TASKS: tuple[TaskSpec, ...] = (
    # ---------------------------------------------------------------- webshop (TypeScript, pnpm)
    TaskSpec(
        "web-tests",
        "webshop",
        ("Run the checkout unit tests", "Can you run the unit tests for the checkout module?"),
        ("跑一下 checkout 模块的单元测试", "运行结算模块的单元测试"),
        "pnpm test src/checkout",
        "Error: Cannot find module '@shop/payments' from 'src/checkout/cart.ts'",
        True,
        ("pnpm install --filter @shop/payments", "pnpm test src/checkout"),
        "Tests: 42 passed, 42 total",
        "Cannot find module '@shop/payments'",
        "pnpm install --filter",
        None,
        "Installed the missing workspace package; the checkout tests pass (42 passed).",
        "安装了缺失的 workspace 包，checkout 测试全部通过（42 passed）。",
    ),
    TaskSpec(
        "web-build",
        "webshop",
        ("Build the storefront for production", "Make a production build of the storefront"),
        ("给 storefront 做一次生产构建", "构建前端商城的生产版本"),
        "pnpm build --filter storefront",
        "src/storefront/price.tsx(18,7): error TS2322: Type 'string' is not assignable to type 'number'.",
        True,
        (
            "sed -i 's/price: raw/price: Number.parseFloat(raw)/' src/storefront/price.tsx",
            "pnpm build --filter storefront",
        ),
        "storefront: build completed in 41s",
        "TS2322",
        "Number.parseFloat",
        ("cat src/storefront/price.tsx", "const price: number = raw // raw comes from the query string"),
        "Converted the price string with Number.parseFloat; the production build completes.",
        "用 Number.parseFloat 转换价格字符串，生产构建已成功。",
    ),
    TaskSpec(
        "web-dev",
        "webshop",
        ("Start the dev server for the shop", "Bring up the webshop dev server on port 3000"),
        ("启动商城的开发服务器", "把 webshop 的 dev server 跑起来"),
        "pnpm dev",
        "Error: listen EADDRINUSE: address already in use :::3000",
        True,
        ("lsof -ti tcp:3000 | xargs kill", "pnpm dev"),
        "ready - started server on 0.0.0.0:3000",
        "EADDRINUSE",
        "lsof -ti tcp:3000",
        None,
        "Killed the stale process holding port 3000; the dev server is up.",
        "结束了占用 3000 端口的旧进程，开发服务器已启动。",
    ),
    TaskSpec(
        "web-discount",
        "webshop",
        ("Add a discount code field to the cart page", "Put a coupon code input on the cart page"),
        ("在购物车页面加一个优惠码输入框", "购物车页面需要支持输入折扣码"),
        "apply_patch src/cart/DiscountField.tsx",
        "Created src/cart/DiscountField.tsx and wired it into CartPage",
        False,
        answer_en="Added DiscountField to the cart page; it validates the code against /api/coupons.",
        answer_zh="在购物车页面加了 DiscountField，会调用 /api/coupons 校验优惠码。",
    ),
    TaskSpec(
        "web-lint",
        "webshop",
        ("Fix the eslint errors in the catalog list", "Clean up the lint failures in src/catalog"),
        ("修复商品列表页的 eslint 报错", "把 catalog 目录的 lint 错误修掉"),
        "pnpm lint src/catalog",
        "src/catalog/List.tsx 12:10 error 'useEffect' is defined but never used no-unused-vars",
        True,
        ("pnpm lint src/catalog --fix",),
        "0 problems",
        "no-unused-vars",
        "lint src/catalog --fix",
        None,
        "Ran eslint with --fix; the catalog has no lint problems left.",
        "用 eslint --fix 修好了，catalog 目录没有 lint 问题了。",
    ),
    # ---------------------------------------------------------------- dataetl (Python, airflow)
    TaskSpec(
        "etl-dagtests",
        "dataetl",
        ("Run the airflow DAG tests", "Please run the DAG test suite"),
        ("跑一下 airflow 的 DAG 测试", "运行 DAG 测试套件"),
        "pytest tests/dags -q",
        "ModuleNotFoundError: No module named 'airflow.providers.postgres'",
        True,
        ("uv pip install apache-airflow-providers-postgres", "pytest tests/dags -q"),
        "18 passed in 6.21s",
        "airflow.providers.postgres",
        "apache-airflow-providers-postgres",
        None,
        "Installed the postgres provider with uv; the DAG tests pass (18 passed).",
        "用 uv 安装了 postgres provider，DAG 测试通过（18 passed）。",
    ),
    TaskSpec(
        "etl-load",
        "dataetl",
        ("Load yesterday's orders into the warehouse", "Backfill the orders table for 2026-12-01"),
        ("把昨天的订单导入数仓", "补一下 2026-12-01 的订单数据"),
        "python -m etl.load_orders --date 2026-12-01",
        'psycopg2.errors.UniqueViolation: duplicate key value violates unique constraint "orders_pkey"',
        True,
        ("python -m etl.load_orders --date 2026-12-01 --upsert",),
        "loaded 12408 rows (upsert)",
        "UniqueViolation",
        "--upsert",
        ("psql -c 'select count(*) from orders where day = 2026-12-01'", "count: 9120"),
        "The day was partly loaded already; re-ran the loader with --upsert and 12408 rows are in.",
        "这一天已部分导入；用 --upsert 重新运行，12408 行已入库。",
    ),
    TaskSpec(
        "etl-clean",
        "dataetl",
        ("The cleaning step crashes on the new customer export", "Fix the clean step for the customers feed"),
        ("清洗步骤在新的客户导出文件上崩溃了", "修一下客户数据的清洗步骤"),
        "python -m etl.clean customers_2026_12.csv",
        "KeyError: 'customer_id'  (etl/clean.py line 88)",
        True,
        (
            "apply_patch etl/schema.py: df.rename(columns={'CustomerID': 'customer_id'})",
            "python -m etl.clean customers_2026_12.csv",
        ),
        "cleaned 48211 rows -> data/clean/customers.parquet",
        "KeyError: 'customer_id'",
        "CustomerID",
        ("head -1 customers_2026_12.csv", "CustomerID,Name,Country,SignupDate"),
        "The export renamed the column to CustomerID; mapped it in etl/schema.py and the step runs.",
        "导出文件把列名改成了 CustomerID；在 etl/schema.py 里做了映射，清洗步骤正常运行。",
    ),
    TaskSpec(
        "etl-partition",
        "dataetl",
        ("Partition the parquet export by day", "Write the parquet export partitioned by date"),
        ("把 parquet 导出改成按天分区", "parquet 导出需要按日期分区"),
        "apply_patch etl/export.py",
        "export now writes data/export/day=YYYY-MM-DD/part-0.parquet",
        False,
        answer_en="The export writes one partition per day with pyarrow's partition_cols.",
        answer_zh="导出改用 pyarrow 的 partition_cols，每天一个分区。",
    ),
    TaskSpec(
        "etl-quality",
        "dataetl",
        ("Run the data quality checkpoint on orders", "Run the great_expectations checks for orders"),
        ("运行订单的数据质量检查", "跑一下 orders 的 great_expectations 检查"),
        "great_expectations checkpoint run orders",
        "MemoryError: Unable to allocate 3.2 GiB for an array with shape (410000000,)",
        True,
        ("great_expectations checkpoint run orders --batch-size 50000",),
        "Validation succeeded: 37 of 37 expectations met",
        "Unable to allocate",
        "--batch-size 50000",
        None,
        "Ran the checkpoint in batches of 50000 rows; all 37 expectations pass.",
        "按 50000 行分批运行检查，37 条期望全部通过。",
    ),
    # ---------------------------------------------------------------- infra (terraform, kubernetes, helm)
    TaskSpec(
        "infra-plan",
        "infra",
        ("Run terraform plan for staging", "Show me the terraform plan for the staging environment"),
        ("给 staging 环境跑一下 terraform plan", "看看 staging 的 terraform plan"),
        "terraform plan -var-file=staging.tfvars",
        "Error: Error acquiring the state lock: ConditionalCheckFailedException: The conditional request failed",
        True,
        (
            "gh run list --workflow terraform --status in_progress",
            "terraform force-unlock 6f1c2d9e",
            "terraform plan -var-file=staging.tfvars",
        ),
        "Plan: 3 to add, 1 to change, 0 to destroy.",
        "Error acquiring the state lock",
        "terraform force-unlock",
        ("gh run list --workflow terraform --status in_progress", "no runs in progress"),
        "No CI run held the lock, so it was stale; force-unlocked it and the plan ran: 3 to add, 1 to change.",
        "CI 中没有运行持有这把锁，是残留锁；force-unlock 之后 plan 成功：3 个新增，1 个变更。",
    ),
    TaskSpec(
        "infra-scale",
        "infra",
        ("Scale the api deployment to 4 replicas", "Bump the api deployment to four replicas in prod"),
        ("把 api 的 deployment 扩到 4 个副本", "生产环境 api 扩容到 4 个实例"),
        "kubectl scale deployment api --replicas=4 -n prod",
        "deployment.apps/api scaled",
        False,
        answer_en="Scaled deployment/api in prod to 4 replicas; all 4 pods are Ready.",
        answer_zh="已将 prod 的 api 扩到 4 个副本，4 个 pod 都已 Ready。",
    ),
    TaskSpec(
        "infra-secret",
        "infra",
        ("Create the cloudflare api token secret for cert-manager", "Add the Cloudflare token secret in cert-manager"),
        ("给 cert-manager 创建 cloudflare api token 的 secret", "在 cert-manager 命名空间加 Cloudflare 的 token"),
        "kubectl create secret generic cloudflare-api-token -n cert-manager --from-literal=api-token=***",
        "secret/cloudflare-api-token created",
        False,
        answer_en="Created secret cloudflare-api-token in the cert-manager namespace.",
        answer_zh="已在 cert-manager 命名空间创建 cloudflare-api-token secret。",
    ),
    TaskSpec(
        "infra-helm",
        "infra",
        ("Deploy the worker chart with helm", "Upgrade the worker release in the jobs namespace"),
        ("用 helm 部署 worker chart", "升级 jobs 命名空间里的 worker release"),
        "helm upgrade --install worker charts/worker -n jobs",
        "Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress",
        True,
        (
            "helm history worker -n jobs",
            "helm rollback worker 7 -n jobs",
            "helm upgrade --install worker charts/worker -n jobs",
        ),
        'Release "worker" has been upgraded. Happy Helming!',
        "another operation (install/upgrade/rollback) is in progress",
        "helm rollback worker",
        None,
        "The last upgrade was stuck in pending-upgrade; rolled back to revision 7 and upgraded again.",
        "上一次升级卡在 pending-upgrade；回滚到第 7 版后重新升级成功。",
    ),
    TaskSpec(
        "infra-oom",
        "infra",
        ("The api pods keep restarting, find out why", "Investigate the api pod restarts in prod"),
        ("排查 api pod 反复重启的问题", "生产环境的 api pod 一直重启，查一下原因"),
        "kubectl rollout status deployment/api -n prod --timeout=120s",
        'error: deployment "api" exceeded its progress deadline',
        True,
        (
            "kubectl set resources deployment api -n prod --limits=memory=1Gi",
            "kubectl rollout status deployment/api -n prod",
        ),
        'deployment "api" successfully rolled out',
        "exceeded its progress deadline",
        "--limits=memory=1Gi",
        ("kubectl describe pod -l app=api -n prod", "Last State: Terminated  Reason: OOMKilled"),
        "The pods were OOMKilled at the 512Mi limit; raised it to 1Gi and the rollout completed.",
        "pod 在 512Mi 限制下被 OOMKilled；调到 1Gi 后发布完成。",
    ),
)
#: The Chinese week (issue 28): two projects, every turn in Chinese, fixes often asked for in the user's own words
#: ("调大内存后重新构建") instead of by quoting the error, and a build that runs out of memory (内存不足) besides the
#: webshop's other pnpm build failure. The mixed week above does not use any of this.
HEAP_TASK = TaskSpec(
    "web-heap",
    "webshop",
    ("Build the admin dashboard for production", "Make a production build of the admin dashboard"),
    ("打包管理后台的生产版本", "给管理后台做一次生产构建"),
    "pnpm build --filter admin",
    "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory 内存不足",
    True,
    ("NODE_OPTIONS=--max-old-space-size=4096 pnpm build --filter admin",),
    "admin: build completed in 96s",
    "heap out of memory",
    "max-old-space-size=4096",
    None,
    "Raised Node's heap to 4 GB with NODE_OPTIONS; the admin build completes.",
    "用 NODE_OPTIONS 把 Node 的内存调到 4GB，管理后台构建成功。",
)
ZH_PROJECTS = ("infra", "webshop")
FIX_REQUESTS_ZH = {  # the fix, asked for in the user's words (no error quoted)
    "web-tests": "先把缺的 payments 包装上再跑测试",
    "web-build": "把价格字符串转成数字再构建",
    "web-dev": "把占用端口的旧进程杀掉再启动",
    "web-lint": "用自动修复把 lint 问题修掉",
    "web-heap": "调大内存后重新构建",
    "infra-plan": "确认没有 CI 在跑之后解锁再 plan",
    "infra-helm": "先回滚卡住的 release 再升级",
    "infra-oom": "把内存限制调大再发布",
}
SYMPTOMS_ZH = {  # a later prompt that reports the failure rather than repeating the request
    "web-heap": "生产构建又内存不足了",
    "infra-oom": "api 的 pod 又一直重启了",
}
BY_ID = {t.id: t for t in (*TASKS, HEAP_TASK)}
AGENTS = ("claude_code", "codex", "cursor")
CUES_EN = ("Next, ", "Now let's ", "Another thing: ", "OK, moving on. ")
CUES_ZH = ("接下来，", "另外，", "下一个：")
RETRY_EN = (
    "It still fails: {err}",
    "That didn't work, same error: {err}",
    "Still broken. {err}",
)
RETRY_ZH = ("还是报错：{err}", "不行，还是同样的错误：{err}", "还是失败了：{err}")
DIAG_EN = ("Look into why first before changing anything.", "Can you check what is going on?")
DIAG_ZH = ("先查一下原因再改。", "先看看是怎么回事。")
THANKS_EN = ("thanks, works now", "great, that fixed it")
THANKS_ZH = ("好的，可以了，谢谢", "搞定了，谢谢")
UNRELATED = (
    "What is a good hydration for sourdough bread?",
    "Suggest a three day itinerary for Lisbon in spring",
    "How long should I boil an egg for a soft yolk?",
    "Recommend a few science fiction novels like Dune",
    "周末去杭州玩两天，帮我排个行程",
    "红烧肉怎么做才不腻？",
    "推荐几本适合入门的历史书",
    "跑步膝盖疼应该注意什么？",
)
FEEDBACK_NOTES = {  # a note the user gives on the task it is about
    "web-tests": ("use pnpm, never npm", "用 pnpm，不要用 npm"),
    "etl-dagtests": ("use uv, not pip", "用 uv，别用 pip"),
    "infra": (
        "check CI runs before force-unlock, never delete the lock table",
        "先检查 CI 再 force-unlock，不要删锁表",
    ),
}


def _call(command: str, output: str, ok: bool) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "bash", "input": {"command": command}, "output": output, "success": ok}
    if not ok:
        call["error"] = "exit code 1"
    return call


def _task_turns(
    spec: TaskSpec, rng: random.Random, zh: bool, opener: str, fix_requests: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The turns of one task: first attempt, then (when it fails) an optional diagnosis, then the fix (asked for
    by quoting the error, or, with ``fix_requests``, often in the user's own words)."""
    request = rng.choice(spec.requests_zh if zh else spec.requests_en)
    fail_answer = f"运行 `{spec.cmd}` 失败了。" if zh else f"Running `{spec.cmd}` failed; see the error."
    first_answer = fail_answer if spec.fails else (spec.answer_zh if zh else spec.answer_en)
    turns = [
        {
            "task": spec.id,
            "query": opener + request,
            "answer": first_answer,
            "toolCalls": [_call(spec.cmd, spec.output, not spec.fails)],
        }
    ]
    if not spec.fails:
        return turns
    if spec.diagnose is not None and rng.random() < 0.7:
        command, output = spec.diagnose
        turns.append(
            {
                "task": spec.id,
                "query": rng.choice(DIAG_ZH if zh else DIAG_EN),
                "answer": ("检查结果：" if zh else "Checked: ") + output,
                "toolCalls": [_call(command, output, True)],
            }
        )
    err = spec.output.split("\n")[0][:90]
    calls = [_call(c, "ok", True) for c in spec.fix_cmds[:-1]]
    calls.append(_call(spec.fix_cmds[-1], spec.fix_output, True))
    turns.append(
        {
            "task": spec.id,
            "query": fix_requests[spec.id]
            if fix_requests and spec.id in fix_requests and rng.random() < 0.6
            else rng.choice(RETRY_ZH if zh else RETRY_EN).format(err=err),
            "answer": spec.answer_zh if zh else spec.answer_en,
            "toolCalls": calls,
        }
    )
    return turns


def generate(seed: int, sessions_per_project: int = 4, zh_only: bool = False) -> dict[str, Any]:
    """A week of sessions in three projects with ground truth, and the probes to send afterwards; with
    ``zh_only`` the Chinese week (two projects, every turn in Chinese, see ``FIX_REQUESTS_ZH``)."""
    rng = random.Random(seed)
    bank = (*(t for t in TASKS if t.project in ZH_PROJECTS), HEAP_TASK) if zh_only else TASKS
    projects = sorted({t.project for t in bank})
    sessions: list[dict[str, Any]] = []
    used: dict[str, int] = {}
    languages: dict[str, set[bool]] = {}
    for _round in range(sessions_per_project):
        for project in projects:
            pool = [t for t in bank if t.project == project]
            count = rng.randint(2, 4)
            # every failing task appears at least once over the week; some tasks repeat in later sessions
            chosen = sorted(pool, key=lambda t: (used.get(t.id, 0), rng.random()))[:count]
            rng.shuffle(chosen)
            zh_session = rng.random() < 0.4 or zh_only
            turns: list[dict[str, Any]] = []
            for position, spec in enumerate(chosen):
                used[spec.id] = used.get(spec.id, 0) + 1
                zh = zh_session if rng.random() < 0.85 or zh_only else not zh_session
                languages.setdefault(spec.id, set()).add(zh)
                opener = ""
                if position and rng.random() < 0.4:
                    opener = rng.choice(CUES_ZH if zh else CUES_EN)
                task_turns = _task_turns(spec, rng, zh, opener, FIX_REQUESTS_ZH if zh_only else None)
                if spec.fails and rng.random() < 0.5:
                    task_turns.append(
                        {
                            "task": spec.id,
                            "query": rng.choice(THANKS_ZH if zh else THANKS_EN),
                            "answer": "不客气。" if zh else "You're welcome.",
                            "toolCalls": [],
                        }
                    )
                turns.extend(task_turns)
            session: dict[str, Any] = {"project": project, "agent": rng.choice(AGENTS), "turns": turns}
            noted = [t for t in chosen if t.id in FEEDBACK_NOTES]
            if noted and rng.random() < 0.6:
                fb_task = rng.choice(noted)
                note = FEEDBACK_NOTES[fb_task.id][int(zh_session)]
                session["feedback"] = [{"task": fb_task.id, "polarity": "negative", "note": note}]
            sessions.append(session)
    tasks = {t.id: {"project": t.project, "errorMarker": t.error_marker, "fixMarker": t.fix_marker} for t in bank}
    probes: list[dict[str, Any]] = []
    for spec in bank:
        # a repeat of each failed task, in each language the task was done in (a user asks again as before)
        for zh in sorted(languages.get(spec.id, set())):
            if spec.fails:
                requests = spec.requests_zh if zh else spec.requests_en
                probes.append({"project": spec.project, "query": requests[-1], "kind": "repeat", "task": spec.id})
        if zh_only and spec.id in SYMPTOMS_ZH and spec.id in languages:
            probes.append({"project": spec.project, "query": SYMPTOMS_ZH[spec.id], "kind": "repeat", "task": spec.id})
        others = [p for p in projects if p != spec.project]
        probes.append(
            {
                "project": rng.choice(others),
                "query": rng.choice(spec.requests_zh if zh_only else spec.requests_en + spec.requests_zh),
                "kind": "foreign",
                "task": spec.id,
            }
        )
        if spec.fails:  # the example: another project's error pasted into this project
            probes.append(
                {
                    "project": rng.choice(others),
                    "query": f"{spec.cmd} fails with {spec.output[:80]}",
                    "kind": "foreign",
                    "task": spec.id,
                }
            )
    for text in (t for t in UNRELATED if not zh_only or CJK_TEXT.search(t)):
        probes.append({"project": rng.choice(projects), "query": text, "kind": "unrelated", "task": ""})
    return {"seed": seed, "projects": projects, "tasks": tasks, "sessions": sessions, "probes": probes}


# --------------------------------------------------------------------------- running a scenario


CJK_TEXT = re.compile(r"[\u4e00-\u9fff]")


def _f1(precision: float, recall: float) -> float:
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def _has(text: str, marker: str) -> bool:
    return bool(marker) and marker.lower() in text.lower()


#: Extra config lines for both model slots (``--llm-local``) and for ``algorithm`` (``--llm-rewrite``).
SLOT_EXTRA = ""
ALGORITHM_EXTRA = ""
LOCAL_SLOT = (
    "    jsonMode: false\n    repeatPenalty: 1.3\n    maxTokens: 256\n    maxRetries: 0\n    timeoutMs: 300000\n"
)
REWRITE = "    enableQueryRewrite: true\n    retrieval:\n      llmInHookPath: true\n      llmTimeoutMs: 60000\n"


class Runner:
    """One scenario through one fresh in-process service."""

    def __init__(self, scenario: dict[str, Any], home: Path, llm_url: str | None, llm_model: str) -> None:
        self.scenario = scenario
        self.home = home
        config = home / "config.yaml"
        text = "memmyMemory:\n  algorithm:\n    reward:\n      feedbackWindowSec: 0\n"
        if llm_url:
            text += ALGORITHM_EXTRA
            slot = f"    provider: openai_compatible\n    endpoint: {llm_url}\n    model: {llm_model}\n" + SLOT_EXTRA
            if os.environ.get("MEMMY_BENCH_LLM_API_KEY"):  # a real provider: the key stays in the environment
                slot += "    apiKey: ${MEMMY_BENCH_LLM_API_KEY}\n"
            text += f"  summary:\n{slot}  evolution:\n{slot}"
        config.write_text(text, encoding="utf-8")
        os.environ.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "MEMMY_CONFIG": str(config)})
        from memmy.config import load_config
        from memmy.service import MemoryService

        self.service = MemoryService.open(load_config())
        self.service.indexer.load_index()
        self.paths: dict[str, str] = {}
        self.missegmented: list[str] = []
        self.wrong_pairs: list[str] = []
        for project in scenario["projects"]:
            path = home / "src" / project
            (path / ".git").mkdir(parents=True, exist_ok=True)
            self.paths[project] = str(path)

    def ns(self, project: str, agent: str) -> Any:
        """The caller of a project's session."""
        from memmy.namespace import Namespace, project_root

        return Namespace(source=agent, workspace_path=self.paths[project], project_id=project_root(self.paths[project]))

    def drain(self) -> None:
        """Run the worker until nothing is due."""
        while True:
            report = self.service.run_worker(RunWorker.from_json({"limit": 1000}))
            if report["leased"] == 0 and report["embeddingRetries"]["leased"] == 0:
                return

    def week(self) -> dict[str, float]:
        """Send every session; return the segmentation figures."""
        tp = fp = fn = 0
        for session in self.scenario["sessions"]:
            ns = self.ns(session["project"], session.get("agent", "claude_code"))
            sid = self.service.open_session(
                OpenSession.from_json({"workspacePath": self.paths[session["project"]]}), ns
            )["sessionId"]
            previous_task, previous_episode, previous_query = None, None, ""
            episode_of: dict[str, str] = {}
            for turn in session["turns"]:
                started = self.service.start_turn(StartTurn.from_json({"sessionId": sid, "query": turn["query"]}), ns)
                body = {
                    "sessionId": sid,
                    "query": turn["query"],
                    "answer": turn["answer"],
                    "toolCalls": turn.get("toolCalls", []),
                }
                done = self.service.complete_turn(CompleteTurn.from_json(body, started["turnId"]), ns)
                episode = done.get("episodeId") or started.get("episodeId")
                if previous_task is not None:
                    truth = turn["task"] != previous_task
                    predicted = episode != previous_episode
                    tp += truth and predicted
                    fp += predicted and not truth
                    fn += truth and not predicted
                    if truth != predicted:
                        self.missegmented.append(
                            f"{'missed' if truth else 'extra'} boundary ({started.get('episodeRelation')}): "
                            f"{previous_query[:60]!r} -> {turn['query'][:60]!r}"
                        )
                previous_query = turn["query"]
                previous_task, previous_episode = turn["task"], episode
                episode_of[turn["task"]] = str(episode)
            self.service.close_session(CloseSession.from_json({}, sid))
            for item in session.get("feedback", []):
                target = episode_of.get(item["task"])
                if target:
                    self.service.give_feedback(
                        Feedback.from_json({"id": target, "polarity": item["polarity"], "note": item.get("note", "")}),
                        ns,
                    )
        self.drain()
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        return {"seg_precision": precision, "seg_recall": recall, "seg_f1": _f1(precision, recall)}

    # -- what was learned -------------------------------------------------------------------------
    def _episode_projects(self, episode_ids: list[str]) -> set[str]:
        projects: set[str] = set()
        for episode_id in episode_ids:
            episode = self.service.episodes.get(str(episode_id))
            if episode is not None and episode.project_id:
                projects.add(episode.project_id)
        return projects

    def origin_projects(self, memory_id: str, depth: int = 0) -> set[str]:
        """The projects of a memory's evidence."""
        memory = self.service.memories.get(memory_id)
        if memory is None:
            episode = self.service.episodes.get(memory_id)
            return {episode.project_id} if episode is not None and episode.project_id else set()
        props = memory.properties
        if memory.layer == "L1":
            return {memory.project_id} if memory.project_id else set()
        if memory.layer == "L2":
            found = self._episode_projects(list((props.get("policy") or {}).get("sourceEpisodeIds") or []))
            return found or ({memory.project_id} if memory.project_id else set())
        payload = props.get("world_model") or props.get("skill") or {}
        policy_ids = list(payload.get("sourcePolicyIds") or payload.get("policyIds") or [])
        found = set()
        if depth < 2:
            for policy_id in policy_ids:
                found |= self.origin_projects(str(policy_id), depth + 1)
        return found or ({memory.project_id} if memory.project_id else set())

    def pairing(self) -> dict[str, float]:
        """Pairing precision / recall of failure_avoidance policies against the task markers."""
        tasks = self.scenario["tasks"]
        failing = {tid: t for tid, t in tasks.items() if t.get("errorMarker")}
        seen_failing = {t["task"] for s in self.scenario["sessions"] for t in s["turns"] if t["task"] in failing}
        pairs_total = pairs_right = 0
        paired: set[str] = set()
        for memory in self.service.memories.by_layer("L2", ("activated", "resolving"), limit=100_000):
            policy = memory.properties.get("policy") or {}
            avoid_text = " ".join(map(str, policy.get("anti_pattern") or [])) + " " + str(policy.get("trigger") or "")
            prefer_text = " ".join(map(str, policy.get("preference") or []))
            procedure = str(policy.get("procedure") or "")
            if "Instead:" in procedure or "改为：" in procedure:
                prefer_text += " " + procedure.split("Instead:")[-1].split("改为：")[-1]
            failures = [tid for tid, t in failing.items() if _has(avoid_text, t["errorMarker"])]
            fixes = [tid for tid, t in failing.items() if _has(prefer_text, t["fixMarker"])]
            for failure in failures:
                for fix in fixes:
                    pairs_total += 1
                    if fix == failure:
                        pairs_right += 1
                        paired.add(failure)
                    else:
                        self.wrong_pairs.append(f"{failure} paired with the fix of {fix}: {memory.id} {policy}")
        precision = pairs_right / pairs_total if pairs_total else 1.0
        recall = len(paired & seen_failing) / len(seen_failing) if seen_failing else 1.0
        return {"pair_precision": precision, "pair_recall": recall, "pairs": float(pairs_total)}

    def probes(self) -> dict[str, float]:
        """Send every probe from a fresh session; fix recall, silence, leakage and tokens."""
        tasks = self.scenario["tasks"]
        leaks = 0
        repeats = fixed = 0
        quiet_total = quiet = 0
        tokens: list[int] = []
        over = 0
        self.samples: list[tuple[dict[str, Any], str]] = []
        self.misses: list[tuple[dict[str, Any], str]] = []
        for probe in self.scenario["probes"]:
            ns = self.ns(probe["project"], "claude_code")
            sid = self.service.open_session(OpenSession.from_json({"workspacePath": self.paths[probe["project"]]}), ns)[
                "sessionId"
            ]
            started = self.service.start_turn(StartTurn.from_json({"sessionId": sid, "query": probe["query"]}), ns)
            markdown = started["injectedContext"]["markdown"]
            self.samples.append((probe, markdown))
            ids = list(started.get("sourceMemoryIds") or [])
            project_id = ns.project_id
            for memory_id in ids:
                origin = self.origin_projects(memory_id)
                if origin and project_id not in origin:
                    leaks += 1
            if markdown:
                tokens.append(int(started["injectedContext"]["tokenEstimate"]))
                over += tokens[-1] > 400
            if probe["kind"] == "repeat":
                repeats += 1
                hit = _has(markdown, tasks[probe["task"]]["fixMarker"])
                fixed += hit
                if not hit:
                    self.misses.append((probe, markdown))
            else:
                quiet_total += 1
                quiet += not markdown.strip()
                if markdown.strip():
                    self.misses.append((probe, markdown))
            self.service.close_session(CloseSession.from_json({}, sid))
        n = len(self.scenario["probes"])
        return {
            "leak_per_100": 100.0 * leaks / n if n else 0.0,
            "fix_recall": fixed / repeats if repeats else 1.0,
            "silence": quiet / quiet_total if quiet_total else 1.0,
            "mean_tokens": statistics.mean(tokens) if tokens else 0.0,
            "over_400": float(over),
            "probes": float(n),
        }

    def learned(self) -> str:
        """Policies by type/status, world models, skills."""
        counts: dict[str, int] = {}
        for memory in self.service.memories.by_layer("L2", ("activated", "resolving", "archived"), limit=100_000):
            policy = memory.properties.get("policy") or {}
            key = f"{policy.get('type')}/{policy.get('status')}"
            counts[key] = counts.get(key, 0) + 1
        layers = {
            layer: len(self.service.memories.by_layer(layer, ("activated", "resolving"), limit=100_000))
            for layer in ("L3", "Skill")
        }
        return f"{dict(sorted(counts.items()))}, L3 {layers['L3']}, Skills {layers['Skill']}"


FIGURES = (
    ("seg_f1", "segmentation F1", ">= 0.90"),
    ("seg_precision", "segmentation precision", ""),
    ("seg_recall", "segmentation recall", ""),
    ("pair_precision", "pairing precision", ">= 0.95"),
    ("pair_recall", "pairing recall", ""),
    ("leak_per_100", "cross-project leakage / 100 prompts", "0"),
    ("fix_recall", "fix recall", ">= 0.90"),
    ("silence", "silence on unrelated prompts", ">= 0.95"),
    ("mean_tokens", "mean injected tokens", "<= 400"),
    ("over_400", "prompts over 400 tokens", ""),
)


def run_one(
    scenario: dict[str, Any], llm_url: str | None, llm_model: str, show: int, misses: bool = False
) -> dict[str, float]:
    """Run one scenario in a fresh temporary HOME and return its figures."""
    home = Path(tempfile.mkdtemp(prefix="memmy-evolq-"))
    runner = Runner(scenario, home, llm_url, llm_model)
    started = time.perf_counter()
    figures = runner.week()
    figures.update(runner.pairing())
    figures.update(runner.probes())
    figures["seconds"] = time.perf_counter() - started
    print(f"  learned: {runner.learned()}", file=sys.stderr)
    for line in runner.missegmented[: 40 if show else 0] + runner.wrong_pairs[: 20 if show else 0]:
        print(f"  {line}", file=sys.stderr)
    for probe, markdown in runner.samples[:show]:
        print(f"\n--- probe [{probe['kind']}] in {probe['project']}: {probe['query']}\n{markdown or '(nothing)'}")
    for probe, markdown in runner.misses if misses else []:
        print(
            f"\n--- MISS [{probe['kind']}] {probe.get('task')} in {probe['project']}: {probe['query']}", file=sys.stderr
        )
        print(markdown or "(nothing)", file=sys.stderr)
    runner.service.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, action="append", help="generator seed (repeatable; default 1)")
    parser.add_argument("--data", help="a scenario JSON file instead of the generator")
    parser.add_argument("--dump", help="write the generated scenario (first seed) to this JSON file and exit")
    parser.add_argument("--sessions", type=int, default=4, help="sessions per project in the generated week")
    parser.add_argument(
        "--week",
        choices=("mixed", "zh", "both"),
        default="both",
        help="the generated week: mixed (three projects, English and Chinese), zh (two projects, all Chinese), both",
    )
    parser.add_argument(
        "--llm-base-url",
        "--llm-url",
        help="an OpenAI-compatible endpoint (a real provider) for the summary and evolution models",
    )
    parser.add_argument("--llm-model", default="stub-model", help="the model name for --llm-base-url")
    parser.add_argument("--offline-too", action="store_true", help="with --llm-base-url, also run offline")
    parser.add_argument(
        "--llm-local",
        action="store_true",
        help="a small local model: no response_format, repeatPenalty 1.3, 256 tokens, 300 s per call, no retries",
    )
    parser.add_argument(
        "--llm-rewrite", action="store_true", help="with an LLM: the query rewrite at turn start (llmInHookPath)"
    )
    parser.add_argument(
        "--llm-stub",
        action="store_true",
        help="also run with a local deterministic model (bench/llm_stub.py) that answers every JSON contract",
    )
    parser.add_argument("--show", type=int, default=0, help="print the injections of the first N probes")
    parser.add_argument(
        "--misses", action="store_true", help="print (stderr) every missed repeat and every non-silent probe"
    )
    args = parser.parse_args()
    global SLOT_EXTRA, ALGORITHM_EXTRA
    SLOT_EXTRA = LOCAL_SLOT if args.llm_local else ""
    ALGORITHM_EXTRA = REWRITE if args.llm_rewrite else ""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.llm_stub
    seeds = args.seed or [1]
    if args.dump:
        week = generate(seeds[0], args.sessions, args.week == "zh")
        Path(args.dump).write_text(json.dumps(week, ensure_ascii=False, indent=1))
        return 0
    if args.data:
        scenarios = [(args.data, json.loads(Path(args.data).read_text(encoding="utf-8")))]
    else:
        weeks = [(name, zh) for name, zh in (("", False), ("zh ", True)) if args.week in ("both", ("mixed", "zh")[zh])]
        scenarios = [(f"{name}seed {seed}", generate(seed, args.sessions, zh)) for name, zh in weeks for seed in seeds]
    offline = not args.llm_base_url or args.offline_too
    modes: list[tuple[str, str | None, str]] = [("offline", None, "")] if offline else []
    stub = None
    if args.llm_stub:
        from bench.llm_stub import contract_answer, run_chat_stub

        stub = run_chat_stub(contract_answer)
        modes.append(("with LLM stub", stub.__enter__().url, "stub-model"))
    if args.llm_base_url:
        modes.append((f"with LLM {args.llm_model}", args.llm_base_url, args.llm_model))
    means: dict[str, dict[str, float]] = {}
    try:
        for mode, url, model in modes:
            results: list[dict[str, float]] = []
            for name, scenario in scenarios:
                turns = sum(len(s["turns"]) for s in scenario["sessions"])
                print(
                    f"# {name} ({mode}): {len(scenario['sessions'])} sessions, {turns} turns, "
                    f"{len(scenario['probes'])} probes",
                    file=sys.stderr,
                )
                results.append(run_one(scenario, url, model, args.show, args.misses))
            means[mode] = _print_table(mode, [name for name, _ in scenarios], results)
    finally:
        if stub is not None:
            stub.__exit__(None, None, None)
    if len(means) > 1:
        print("\n## means side by side\n")
        print("| figure | target | " + " | ".join(means) + " |")
        print("|---" * (2 + len(means)) + "|")
        for key, label, target in FIGURES:
            print(f"| {label} | {target} | " + " | ".join(f"{m[key]:.3f}" for m in means.values()) + " |")
    return 0


def _print_table(mode: str, names: list[str], results: list[dict[str, float]]) -> dict[str, float]:
    """One table (a column per scenario, plus the mean); returns the means."""
    print(f"\n## {mode} — load average: {os.getloadavg()[0]:.2f} (1 min)\n")
    print("| figure | target | " + " | ".join(names) + " | mean |")
    print("|---" * (3 + len(names)) + "|")
    means: dict[str, float] = {}
    for key, label, target in FIGURES:
        values = [r[key] for r in results]
        cells = " | ".join(f"{v:.3f}" if key != "mean_tokens" else f"{v:.0f}" for v in values)
        means[key] = statistics.mean(values)
        print(f"| {label} | {target} | {cells} | {means[key]:.3f} |")
    seconds = " | ".join(f"{r['seconds']:.0f}" for r in results)
    print(f"| seconds | | {seconds} | |")
    return means


if __name__ == "__main__":
    raise SystemExit(main())
