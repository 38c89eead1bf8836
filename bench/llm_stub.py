"""A small real OpenAI-compatible chat-completions server (stdlib ``http.server`` in a thread), for the tests and
for ``bench/evolution_quality.py --llm-stub``.

``answer(system, user) -> str | None`` produces the assistant message content; None answers HTTP 500.
``delay_s`` makes every answer slow (timeout tests). Every request is recorded. Optional: ``usage`` is sent as
the answer's ``usage`` field, and ``reply(request) -> (status, body) | None`` answers a request verbatim
before ``answer`` is consulted (status sequences, 400s, echoed headers).

:func:`contract_answer` is a deterministic stand-in for a model: it answers each documented JSON contract of
memmy's prompts with a well-formed reply built from the prompt's own input (no randomness, no network), so the
LLM paths of the evolution pipeline run end to end. It is no judge of quality: it abstains where a real model
would have to understand the text (relation checks answer a low-confidence follow_up; world models and skills
an empty object, which takes their offline path).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memmy.evolve.boundaries import RELATION_ARBITRATION_PROMPT, RELATION_PROMPT
from memmy.evolve.failure import FAILURE_SINK_PROMPT
from memmy.evolve.policy import L2_INDUCTION_PROMPT
from memmy.evolve.reflection import BATCH_REFLECTION_PROMPT
from memmy.evolve.repair import DECISION_REPAIR_PROMPT
from memmy.evolve.reward import REWARD_R_HUMAN_PROMPT
from memmy.jobs.evolution import SUMMARY_PROMPT

Answer = Callable[[str, str], str | None]
Reply = Callable[[dict[str, Any]], tuple[int, str] | None]


@dataclass
class ChatStub:
    """The running stub: its base URL and what it received."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def run_chat_stub(
    answer: Answer, delay_s: float = 0.0, *, usage: dict[str, int] | None = None, reply: Reply | None = None
) -> Iterator[ChatStub]:
    """Serve ``POST /v1/chat/completions`` on a free loopback port for the ``with`` block."""
    stub = ChatStub(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server API
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            request = {"path": self.path, "body": body, "auth": self.headers.get("authorization")}
            stub.requests.append(request)
            if delay_s:
                time.sleep(delay_s)
            verbatim = reply(request) if reply is not None else None
            if verbatim is not None:
                self.send_response(verbatim[0])
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(verbatim[1].encode())
                return
            messages = body.get("messages", [])
            system = next((m["content"] for m in messages if m.get("role") == "system"), "")
            user = next((m["content"] for m in messages if m.get("role") == "user"), "")
            content = answer(system, user) if self.path.endswith("/chat/completions") else None
            if content is None:
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b'{"error": "stub failure"}')
                return
            answer_body: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": content}}]}
            if usage is not None:
                answer_body["usage"] = usage
            payload = json.dumps(answer_body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test): fine
                return

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- a deterministic model

_TOOLS = re.compile(r"^tools: (.*)$", re.MULTILINE)
_CALL = re.compile(r"\w+\((.*?)\) -> ")
_USER = re.compile(r"^(?:user: |User:\n)(.*)$", re.MULTILINE)


def _commands(block: str) -> list[str]:
    """The tool inputs of ``tools:`` lines of trace blocks (``bash(pnpm test) -> ...``)."""
    return [cmd for line in _TOOLS.findall(block) for cmd in _CALL.findall(line) if cmd]


def _first_user(text: str) -> str:
    found = _USER.search(text)
    return " ".join((found.group(1) if found else text).split())[:160]


def _section(user: str, name: str, following: tuple[str, ...]) -> str:
    start = user.find(name)
    if start < 0:
        return ""
    ends = [user.find(other, start + len(name)) for other in following]
    end = min((e for e in ends if e > 0), default=len(user))
    return user[start + len(name) : end]


def _steps(user: str) -> list[int]:
    try:
        return [int(step["idx"]) for step in json.loads(user)["steps"]]
    except (ValueError, KeyError, TypeError):
        return [int(i) for i in re.findall(r'"idx":\s*(\d+)', user)]


def contract_answer(system: str, user: str) -> str | None:
    """A well-formed answer of the contract ``system`` asks for, built deterministically from ``user``."""

    def asks(prompt: str) -> bool:
        return system[:60] == prompt[:60]

    if asks(RELATION_PROMPT) or asks(RELATION_ARBITRATION_PROMPT):
        return json.dumps({"relation": "follow_up", "confidence": 0.5, "reason": "stub abstains"})
    if asks(SUMMARY_PROMPT):
        return json.dumps({"summary": _first_user(user)})
    if asks(BATCH_REFLECTION_PROMPT):
        scores = [{"idx": i, "relevance": "RELATED", "reason": "on the task's path"} for i in _steps(user)]
        if scores:
            scores[-1]["relevance"] = "PIVOTAL"
        return json.dumps({"scores": scores})
    if asks(REWARD_R_HUMAN_PROMPT):
        failed = '"last_tool_result": "error"' in user
        score = 0.2 if failed else 0.8
        label = "failure" if failed else "success"
        return json.dumps(
            {
                "goal_achievement": score,
                "process_quality": score,
                "user_satisfaction": score,
                "label": label,
                "reason": f"the last tool call {'failed' if failed else 'succeeded'}",
            }
        )
    if asks(L2_INDUCTION_PROMPT):
        commands = _commands(user)
        task = _first_user(user)
        return json.dumps(
            {
                "title": task[:80],
                "trigger": f"When the request is about: {task}",
                "action": " → ".join(f"`{c}`" for c in commands) or task,
                "rationale": "it worked before",
                "caveats": [],
                "confidence": 0.7,
                "support_trace_ids": [],
            }
        )
    if asks(FAILURE_SINK_PROMPT):
        failed_text = _section(user, "FAILED:", ("SUCCEEDED:", "USER_FEEDBACK:"))
        succeeded = _section(user, "SUCCEEDED:", ("USER_FEEDBACK:",))
        bad = _commands(failed_text)[:1]
        blocks = [b for b in succeeded.split("\n\n") if _commands(b)]
        good = _commands(blocks[-1])[-3:] if blocks else []  # the latest success: the step that got it through
        return json.dumps(
            {
                "title": f"Avoid repeating `{bad[0]}` unchanged" if bad else "Avoid repeating the failed_text step",
                "trigger": f"When the request is about: {_first_user(failed_text)}",
                "procedure": ("Instead: " + " → ".join(f"`{c}`" for c in good)) if good else "Find the cause first.",
                "verification": "the same request no longer fails",
                "boundary": "the same project",
                "experience_type": "failure_avoidance",
                "decision_guidance": {
                    "prefer": [" → ".join(f"`{c}`" for c in good)] if good else [],
                    "avoid": [f"repeating `{bad[0]}` unchanged after it fails"] if bad else [],
                },
                "support_trace_ids": [],
            }
        )
    if asks(DECISION_REPAIR_PROMPT):
        good = _commands(_section(user, "SIMILAR_SUCCESS:", ()))
        bad = [c for c in _commands(_section(user, "FAILURE_HISTORY:", ("SIMILAR_SUCCESS:",))) if c not in good]
        if not good and not bad:
            return json.dumps({})
        return json.dumps(
            {
                "preference": f"`{good[-1]}`" if good else "",
                "anti_pattern": f"repeating `{bad[0]}` unchanged" if bad else "",
                "severity": "warn",
                "confidence": 0.6,
            }
        )
    return json.dumps({})  # L3, skills, recall steps: an empty object takes their offline path
