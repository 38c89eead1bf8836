"""Issue 14 through the real daemon, offline, in English and Chinese: one episode per task, failures paired only
with their own fix, derived memory kept in its project, feedback notes with both halves, a loop that finishes
offline, and an injection the agent can trust (no labels, no cut items, no repeats, a budget, silence off-topic).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Daemon
from tests.test_evolution_scenario import drain, write_config


@dataclass(frozen=True)
class Lang:
    """One language's version of the week."""

    name: str
    tests_task: str
    tests_retry: str
    tests_repeat: str
    plan_task: str
    scale_task: str
    next_cue: str
    note: str
    prefer: str
    avoid: str
    off_topic: str


ENGLISH = Lang(
    name="english",
    tests_task="Run the checkout unit tests",
    tests_retry="It still fails: Cannot find module '@shop/payments'",
    tests_repeat="Can you run the checkout unit tests again?",
    plan_task="Run terraform plan for staging",
    scale_task="Scale the api deployment to 4 replicas",
    next_cue="Next, ",
    note="use pnpm, never npm",
    prefer="pnpm",
    avoid="npm",
    off_topic="What is a good hydration for sourdough bread?",
)
CHINESE = Lang(
    name="chinese",
    tests_task="跑一下 checkout 模块的单元测试",
    tests_retry="还是报错：Cannot find module '@shop/payments'",
    tests_repeat="再跑一次 checkout 模块的单元测试",
    plan_task="给 staging 环境跑一下 terraform plan",
    scale_task="把 api 的 deployment 扩到 4 个副本",
    next_cue="接下来，",
    note="用 pnpm，不要用 npm",
    prefer="pnpm",
    avoid="npm",
    off_topic="周末去杭州玩两天，帮我排个行程",
)


def call(command: str, output: str, ok: bool = True) -> dict[str, Any]:
    """One bash tool call."""
    found: dict[str, Any] = {"name": "bash", "input": {"command": command}, "output": output, "success": ok}
    if not ok:
        found["error"] = "exit code 1"
    return found


def turn(client: httpx.Client, sid: str, query: str, answer: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Start and complete one turn; returns the start response."""
    started = client.post("/api/v1/turns/start", json={"sessionId": sid, "query": query}).json()
    body = {"sessionId": sid, "query": query, "answer": answer, "toolCalls": calls}
    client.post(f"/api/v1/turns/{started['turnId']}/complete", json=body).raise_for_status()
    return dict(started)


def repo(root: Path, name: str) -> str:
    """A git project folder."""
    path = root / name
    (path / ".git").mkdir(parents=True)
    return str(path)


def open_session(client: httpx.Client, workspace: str) -> str:
    """A session in a project."""
    return str(client.post("/api/v1/sessions/open", json={"workspacePath": workspace}).json()["sessionId"])


def webshop_session(client: httpx.Client, lang: Lang, workspace: str) -> tuple[list[str], str]:
    """Tests fail, the retry fixes them; then, in the same session, an unrelated task that succeeds."""
    sid = open_session(client, workspace)
    first = turn(
        client,
        sid,
        lang.tests_task,
        "Running `pnpm test src/checkout` failed.",
        [
            call(
                "pnpm test src/checkout",
                "Error: Cannot find module '@shop/payments' from 'src/checkout/cart.ts'",
                False,
            )
        ],
    )
    retry = turn(
        client,
        sid,
        lang.tests_retry,
        "Installed the workspace package; 42 tests passed.",
        [call("pnpm install --filter @shop/payments", "ok"), call("pnpm test src/checkout", "Tests: 42 passed")],
    )
    other = turn(
        client,
        sid,
        lang.next_cue + "add a discount code field to the cart page",
        "Added DiscountField to the cart page.",
        [call("apply_patch src/cart/DiscountField.tsx", "Created src/cart/DiscountField.tsx")],
    )
    client.post(f"/api/v1/sessions/{sid}/close", json={}).raise_for_status()
    return [first["episodeId"], retry["episodeId"], other["episodeId"]], sid


def infra_session(client: httpx.Client, lang: Lang, workspace: str) -> list[str]:
    """The state lock fails and is fixed by force-unlock; then scaling succeeds (another task, no cue)."""
    sid = open_session(client, workspace)
    lock = "Error: Error acquiring the state lock: ConditionalCheckFailedException"
    first = turn(client, sid, lang.plan_task, "terraform plan failed.", [call("terraform plan", lock, False)])
    fixed = turn(
        client,
        sid,
        f"{re.split('[:：]', lang.tests_retry)[0]}: {lock}",
        "No CI run held the lock; force-unlocked it and the plan ran.",
        [
            call("terraform force-unlock 6f1c2d9e", "Terraform state has been successfully unlocked!"),
            call("terraform plan", "Plan: 3 to add, 1 to change, 0 to destroy."),
        ],
    )
    scale = turn(
        client,
        sid,
        lang.scale_task,
        "Scaled deployment/api to 4 replicas.",
        [call("kubectl scale deployment api --replicas=4 -n prod", "deployment.apps/api scaled")],
    )
    client.post(f"/api/v1/sessions/{sid}/close", json={}).raise_for_status()
    return [first["episodeId"], fixed["episodeId"], scale["episodeId"]]


def memories(client: httpx.Client, layer: str) -> list[dict[str, Any]]:
    """Every memory of a layer with its properties."""
    items = client.get("/api/v1/panel/items", params={"layer": layer, "page": 1}).json()["items"]
    return [client.get(f"/api/v1/memory/{item['id']}").json() for item in items]


def inject(client: httpx.Client, workspace: str, query: str) -> dict[str, Any]:
    """What a fresh session in ``workspace`` is told for ``query``."""
    sid = open_session(client, workspace)
    return dict(client.post("/api/v1/turns/start", json={"sessionId": sid, "query": query}).json())


@pytest.mark.parametrize("lang", [ENGLISH, CHINESE], ids=lambda lang: lang.name)
def test_a_week_in_two_projects_teaches_only_what_is_true(fresh_daemon: Daemon, lang: Lang) -> None:
    fresh_daemon.extra_env["MEMMY_CONFIG"] = str(write_config(fresh_daemon.home))
    fresh_daemon.start()
    root = fresh_daemon.home / "src"
    webshop, infra = repo(root, "webshop"), repo(root, "infra")
    with fresh_daemon.client() as client:
        web_episodes: list[list[str]] = []
        for _ in range(2):  # the same tasks twice: repeated support
            episodes, _sid = webshop_session(client, lang, webshop)
            web_episodes.append(episodes)
            infra_episodes = infra_session(client, lang, infra)
            # 1. segmentation: the retry stays in its task; the next task (cue or not) is an episode of its own
            assert episodes[0] == episodes[1] != episodes[2], episodes
            assert infra_episodes[0] == infra_episodes[1] != infra_episodes[2], infra_episodes
        feedback = client.post(
            "/api/v1/feedback", json={"id": web_episodes[0][0], "polarity": "negative", "note": lang.note}
        ).json()
        assert feedback["ok"]
        drain(client)

        policies = memories(client, "L2")
        guarding = ("failure_avoidance", "repair_instruction")  # a repair keyed like the failure may take it over
        avoidance = [p for p in policies if p["properties"]["policy"]["type"] in guarding]
        assert avoidance, [(p["properties"]["policy"]["type"], p["title"], p["status"]) for p in policies]
        for policy in avoidance:
            body = policy["properties"]["policy"]
            text = " ".join(body.get("preference") or []) + body.get("procedure", "")
            # 2. pairing by evidence: the lock failure never gets the scaling (or the discount field) as its fix
            assert "kubectl scale" not in text and "DiscountField" not in text, body
            if "state lock" in " ".join(body.get("anti_pattern") or []):
                assert "force-unlock" in text, body
            # 3. scope: every derived memory carries its project
            assert policy["projectId"] in (webshop, infra), policy
        lines = [line for p in policies for line in p["properties"]["policy"].get("preference") or []]
        avoid_lines = [line for p in policies for line in p["properties"]["policy"].get("anti_pattern") or []]
        # 4. feedback notes keep both halves
        assert any(re.search(rf"\b{lang.prefer}\b", line) for line in lines), lines
        assert any(re.search(rf"(?<!p)\b{lang.avoid}\b", line) for line in avoid_lines), avoid_lines
        # 5. the loop finishes offline: a success policy is active, and a skill crystallised from it
        success = [p for p in policies if p["properties"]["policy"]["type"] == "success_pattern"]
        assert any(p["properties"]["policy"]["status"] == "active" for p in success), [
            p["properties"]["policy"] for p in success
        ]
        for layer in ("L3", "Skill"):
            for memory in memories(client, layer):
                assert memory["projectId"] in (webshop, infra) or memory["properties"]["scope"]["global"], memory
        dream = client.post("/api/v1/dream/run", json={}).json()
        archived = [
            c for c in dream.get("changes", []) if str(c.get("memoryId", c.get("id", ""))).startswith("policy_")
        ]
        assert not archived, archived  # young policies are in their grace period

        # 6. what the agent reads
        repeat = inject(client, webshop, lang.tests_repeat)
        markdown = repeat["injectedContext"]["markdown"]
        assert "pnpm install --filter" in markdown, markdown  # the known fix
        assert "force-unlock" not in markdown and "terraform" not in markdown.lower(), markdown  # infra stays there
        for label in ("IRRELEVANT", "RELATED_DEFAULT", "PIVOTAL", "step 1 /", "[truncated]"):
            assert label not in markdown, markdown
        items = [line for line in markdown.splitlines() if re.match(r"^\d+\. ", line)]
        assert len(items) == len(set(items)), markdown
        assert all("why:" in line for line in markdown.splitlines() if line.strip().startswith("(")), markdown
        assert repeat["injectedContext"]["tokenEstimate"] <= 400
        # another project's error pasted into this project, and an unrelated prompt, inject nothing
        foreign = inject(client, webshop, f"{lang.plan_task}: Error acquiring the state lock")
        assert foreign["injectedContext"]["markdown"] == "", foreign["injectedContext"]["markdown"]
        off_topic = inject(client, webshop, lang.off_topic)
        assert off_topic["injectedContext"]["markdown"] == "", off_topic["injectedContext"]["markdown"]
        in_infra = inject(client, infra, f"{lang.plan_task}: Error acquiring the state lock")
        assert "force-unlock" in in_infra["injectedContext"]["markdown"], in_infra["injectedContext"]["markdown"]


def test_a_repository_created_after_the_daemon_started_gets_its_project(fresh_daemon: Daemon) -> None:
    fresh_daemon.start()
    folder = fresh_daemon.home / "later"
    (folder / "src").mkdir(parents=True)
    workspace = str(folder / "src")
    with fresh_daemon.client() as client:
        before = client.post("/api/v1/memory/add", json={"content": "note before git init", "workspacePath": workspace})
        assert before.json()["projectId"] == workspace  # no repository yet: the folder itself
        (folder / ".git").mkdir()
        deadline = time.monotonic() + 15
        project = None
        n = 0
        while time.monotonic() < deadline and project != str(folder):
            n += 1
            body = {"content": f"note {n} after git init", "workspacePath": workspace}
            project = client.post("/api/v1/memory/add", json=body).json()["projectId"]
            time.sleep(0.5)
        assert project == str(folder)  # noticed without a restart
