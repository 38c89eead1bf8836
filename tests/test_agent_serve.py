"""``memmy serve`` used through the official ``openai`` SDK with ``base_url`` set: models, chat completions
streaming and not, tools passed through, bearer token, provider errors, and memory recalled and captured
through a real daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionUserMessageParam,
)

from memmy.agent.config import load_agent_config
from memmy.agent.serve import create_app
from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, write_agent_config
from tests.conftest import Daemon, free_port

TOKEN = "serve-test-token"
WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def brain(body: dict[str, Any]) -> Reply:
    text = last_user_text(body)
    if body.get("tools") and "weather" in text:
        return Reply(tool_calls=[("get_weather", json.dumps({"city": "Oslo"}))])
    if "busy" in text:
        return Reply(status=429)
    return Reply(text="echo: " + text[-200:])


@contextmanager
def serving(
    home: Path, stub: ModelStub, extra: str = "", memory: bool = False, reuse_config: bool = False
) -> Iterator[str]:
    if not reuse_config:
        write_agent_config(home, stub, extra=extra, memory=memory)
    config = replace(load_agent_config(), serve_token=TOKEN)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def sdk(base: str, key: str = TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


def test_models_health_and_token(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, serving(isolated_home, stub) as base:
        health = httpx.get(base + "/health").json()
        assert health["status"] == "ok" and health["memory"] == "off"
        assert [m.id for m in sdk(base).models.list()] == ["stub-model", "fast"]
        with pytest.raises(openai.AuthenticationError):
            sdk(base, "wrong").models.list()
        with pytest.raises(openai.AuthenticationError):
            sdk(base, "wrong").chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        bad = httpx.post(base + "/v1/chat/completions", headers={"authorization": f"Bearer {TOKEN}"}, json={})
        assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
        auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        deep = httpx.post(base + "/v1/chat/completions", headers=auth, content=b"[" * 100_000)
        assert deep.status_code == 400 and "not valid JSON" in deep.json()["error"]["message"]


def test_chat_completions_streaming_and_not(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, serving(isolated_home, stub) as base:
        client = sdk(base)
        whole = client.chat.completions.create(
            model="stub-model", messages=[{"role": "user", "content": "say hello to the team"}]
        )
        assert whole.choices[0].message.content == "echo: say hello to the team"
        assert whole.choices[0].finish_reason == "stop" and whole.usage and whole.usage.total_tokens == 18
        stream = client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "stream these words now"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "echo: stream these words now" and len([c for c in chunks if c.choices]) > 3
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
        assert stub.requests[-1]["body"]["model"] == "stub-fast"  # the preset named by `model`


def test_tools_are_passed_through(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, serving(isolated_home, stub) as base:
        client = sdk(base)
        messages: list[Any] = [{"role": "user", "content": "what is the weather in Oslo?"}]
        whole = client.chat.completions.create(model="stub-model", messages=messages, tools=[WEATHER_TOOL])
        call = whole.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        assert whole.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Oslo"}
        assert stub.requests[-1]["body"]["tools"][0]["function"]["name"] == "get_weather"
        stream = client.chat.completions.create(
            model="stub-model", messages=messages, tools=[WEATHER_TOOL], stream=True
        )
        calls = [tc for c in stream if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        assert calls and calls[0].function and calls[0].function.name == "get_weather"


def test_provider_errors_reach_the_client(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, serving(isolated_home, stub) as base:
        with pytest.raises(openai.RateLimitError, match="rate limiting"):
            sdk(base).chat.completions.create(model="stub-model", messages=[{"role": "user", "content": "busy?"}])
        with pytest.raises(openai.RateLimitError):
            sdk(base).chat.completions.create(
                model="stub-model", messages=[{"role": "user", "content": "busy?"}], stream=True
            )


def test_memory_recalled_and_captured_per_user(isolated_home: Path, daemon: Daemon) -> None:
    extra = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n"
    with run_model_stub(brain) as stub, serving(isolated_home, stub, extra, memory=True) as base:
        client = sdk(base)
        client.chat.completions.create(
            model="stub-model",
            messages=[{"role": "user", "content": "The falcon service keeps its sessions in redis on port 6380"}],
            user="alice",
        )
        with daemon.client() as http:  # the capture runs after the answer: wait until it is stored
            deadline = time.monotonic() + 30
            while not http.get("/api/v1/panel/tasks", params={"q": "falcon service keeps"}).json()["tasks"]:
                assert time.monotonic() < deadline, "the first exchange was never captured"
                time.sleep(0.05)
        daemon.drain()
        raw = client.chat.completions.with_raw_response.create(
            model="stub-model",
            messages=[{"role": "user", "content": "where does the falcon service keep sessions?"}],
            user="alice",
            stream=False,
        )
        assert raw.headers["x-memmy-memory"] == "on" and raw.headers["x-memmy-memory-ids"]
        sent = stub.requests[-1]["body"]["messages"][-1]["content"]
        assert "<memmy_memory_context" in sent and "redis on port 6380" in sent
    with daemon.client() as http:
        tasks = http.get("/api/v1/panel/tasks", params={"q": "falcon service"}).json()["tasks"]
    turns = [t for task in tasks for t in task["turns"]]
    assert any("where does the falcon service" in json.dumps(t) for t in turns)


def test_a_slow_first_provider_build_does_not_cost_the_turn_its_memory(
    isolated_home: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first request builds its provider while recall is on the wire. Building it imports the provider's SDK,
    which takes a second or more on a busy machine: done on the event loop, that stalled the recall request past its
    1 s connect timeout, so the first turn had no memory and was never captured. 2 s of blocking work stand in
    for the import."""
    from memmy.agent.providers import build_provider

    def slow_build(choice: Any) -> Any:
        time.sleep(2.0)  # blocking, as an import is
        return build_provider(choice)

    monkeypatch.setattr("memmy.agent.providers.build_provider", slow_build)  # what ProviderCache builds with
    extra = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n"
    with run_model_stub(brain) as stub, serving(isolated_home, stub, extra, memory=True) as base:
        raw = sdk(base).chat.completions.with_raw_response.create(
            model="stub-model",
            messages=[{"role": "user", "content": "The heron deploy job runs from the blue cluster at 04:10"}],
        )
        assert raw.headers["x-memmy-memory"] == "on"
        with daemon.client() as http:  # the capture runs after the answer: wait until it is stored
            deadline = time.monotonic() + 30
            while not http.get("/api/v1/panel/tasks", params={"q": "heron deploy job"}).json()["tasks"]:
                assert time.monotonic() < deadline, "the first turn was never captured"
                time.sleep(0.05)


def test_host_origin_and_token_guard(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, serving(isolated_home, stub) as base:
        port = base.rsplit(":", 1)[1]
        chat = {"model": "stub-model", "messages": [{"role": "user", "content": "hi"}]}
        auth = {"authorization": f"Bearer {TOKEN}"}
        # DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own Host.
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{int(port) + 1}"):
            rebound = httpx.post(base + "/v1/chat/completions", headers={**auth, "host": host}, json=chat)
            assert rebound.status_code == 421, host
            assert "DNS rebinding" in rebound.json()["error"]["message"]
        assert httpx.get(base + "/health", headers={"host": "evil.example"}).status_code == 421
        # A browser page elsewhere (or a sandboxed/file:// one) may neither read nor write.
        for origin in ("https://evil.example", "null", f"http://localhost:{int(port) + 1}"):
            foreign = httpx.post(base + "/v1/chat/completions", headers={**auth, "origin": origin}, json=chat)
            assert foreign.status_code == 403, origin
            assert httpx.get(base + "/v1/models", headers={**auth, "origin": origin}).status_code == 403
        own = httpx.get(base + "/v1/models", headers={**auth, "origin": f"http://localhost:{port}"})
        assert own.status_code == 200
        assert httpx.get(base + "/v1/models", headers={**auth, "host": f"localhost:{port}"}).status_code == 200
        # No token, a wrong token, a token in the wrong scheme: 401 on every guarded route.
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
            assert httpx.post(base + "/v1/chat/completions", headers=headers, json=chat).status_code == 401
            assert httpx.get(base + "/v1/models", headers=headers).status_code == 401
        assert len(stub.requests) == 0  # nothing refused reached the provider


def test_allowed_origins_from_config(isolated_home: Path) -> None:
    extra = "serve:\n  allowedOrigins: ['http://localhost:3000']\n"
    with run_model_stub(brain) as stub, serving(isolated_home, stub, extra) as base:
        auth = {"authorization": f"Bearer {TOKEN}"}
        assert httpx.get(base + "/v1/models", headers={**auth, "origin": "http://localhost:3000"}).status_code == 200
        assert httpx.get(base + "/v1/models", headers={**auth, "origin": "http://localhost:3001"}).status_code == 403


def test_sampling_fields_and_tool_choice_reach_the_provider(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, serving(isolated_home, stub) as base:
        client = sdk(base)
        sampling: dict[str, Any] = {
            "temperature": 0.2,
            "top_p": 0.9,
            "max_tokens": 77,
            "stop": ["\n\nUser:"],
            "seed": 42,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.25,
            "response_format": {"type": "json_object"},
            "parallel_tool_calls": False,
        }
        choice = {"type": "function", "function": {"name": "get_weather"}}
        for stream in (False, True):
            response = client.chat.completions.create(  # type: ignore[call-overload]
                model="stub-model",
                messages=[{"role": "user", "content": "what is the weather in Oslo?"}],
                tools=[WEATHER_TOOL],
                tool_choice=choice,
                stream=stream,
                extra_body={"top_k": 20},  # a field only some servers know (vLLM) travels as it came
                **sampling,
            )
            if stream:
                list(response)
            sent = stub.requests[-1]["body"]
            assert {k: sent.get(k) for k in sampling} == sampling
            assert sent["tool_choice"] == choice and sent["top_k"] == 20
            assert sent["tools"][0]["function"]["name"] == "get_weather"
            assert "max_completion_tokens" not in sent  # the client's max_tokens replaces the configured limit
        plain = client.chat.completions.create(model="stub-model", messages=[{"role": "user", "content": "hello"}])
        assert plain.choices[0].message.content == "echo: hello"
        assert stub.requests[-1]["body"]["max_completion_tokens"] == 4096  # no client limit: agents.defaults'
        with pytest.raises(openai.BadRequestError, match="n=1"):
            client.chat.completions.create(model="stub-model", messages=[{"role": "user", "content": "hi"}], n=2)


def test_sampling_fields_translated_for_an_anthropic_provider(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub:
        write_agent_config(isolated_home, stub, kind="anthropic", memory=False)
        with serving(isolated_home, stub, reuse_config=True) as base:
            response = sdk(base).chat.completions.create(
                model="stub-model",
                messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hi"}],
                tools=[WEATHER_TOOL],
                tool_choice="required",
                temperature=0.3,
                top_p=0.8,
                max_tokens=55,
                stop="END",
                seed=7,
            )
            assert response.choices[0].message.content == "echo: say hi"
            sent = stub.requests[-1]["body"]
            assert stub.requests[-1]["path"].endswith("/messages")
            assert sent["tool_choice"] == {"type": "any"} and sent["temperature"] == 0.3 and sent["top_p"] == 0.8
            assert sent["max_tokens"] == 55 and sent["stop_sequences"] == ["END"] and sent["system"] == "be brief"
            assert "seed" not in sent  # the Messages API has no seed: left out rather than refused upstream


@contextmanager
def gated_captures(daemon_url: str) -> Iterator[tuple[str, threading.Event]]:
    """A forwarding proxy in front of the real daemon that holds turn captures (``.../complete``) until the
    event is set. The agent's capture thread sends one capture at a time, so while the first is held the others
    are still queued inside ``memmy serve``."""
    gate = threading.Event()

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path.endswith("/complete"):
                gate.wait(60)
            skip = {"host", "content-length", "connection"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            answer = httpx.request(self.command, daemon_url + self.path, content=body, headers=headers, timeout=60)
            self.send_response(answer.status_code)
            self.send_header("content-type", answer.headers.get("content-type", "application/json"))
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _forward  # noqa: N815 - http.server's naming

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}", gate
    finally:
        gate.set()
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_stopping_serve_right_after_the_answers_keeps_every_capture(
    isolated_home: Path, daemon: Daemon, stop: signal.Signals
) -> None:
    """``memmy serve`` as its own process, stopped right after the last answer while its captures are still
    queued: they are all delivered before it exits (uvicorn re-raises SIGTERM after shutdown, so an ``atexit``
    flush would never run)."""
    marks = [f"{stop.name.lower()}-zebra{n}" for n in range(4)]
    with run_model_stub(brain) as stub, gated_captures(daemon.url) as (memory_url, gate):
        extra = f"memmyMemory:\n  storage: {{endpoint: '{memory_url}', token: '{daemon.token}'}}\n"
        write_agent_config(isolated_home, stub, extra=extra + f"serve: {{token: {TOKEN}}}\n", memory=True)
        port = free_port()
        command = [sys.executable, "-c", "from memmy.agent.cli import main; main()", "serve", "--port", str(port)]
        server = subprocess.Popen(command, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 180
            while True:
                assert server.poll() is None and time.monotonic() < deadline, "memmy serve did not start"
                try:
                    if httpx.get(base + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            client = sdk(base)
            for number, mark in enumerate(marks):  # answered one after another; captures queue up behind them
                content = f"note {mark}: the billing job runs at 0{number}:15 UTC"
                request: ChatCompletionUserMessageParam = {"role": "user", "content": content}
                if number % 2:
                    chunks = client.chat.completions.create(model="stub-model", messages=[request], stream=True)
                    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                else:
                    whole = client.chat.completions.create(model="stub-model", messages=[request])
                    text = whole.choices[0].message.content or ""
                assert content in text  # the echo (after the recalled memory, once there is some)
            server.send_signal(stop)  # with the first capture held and the others queued behind it
            time.sleep(0.2)
            gate.set()
            output = server.communicate(timeout=60)[0].decode()
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    assert server.returncode in (0, -stop, 128 + stop), output
    with daemon.client() as http:
        tasks = http.get("/api/v1/panel/tasks", params={"q": "billing job runs"}).json()["tasks"]
    answers = " ".join(t["assistantText"] or "" for task in tasks for t in task["turns"] if t["status"] != "started")
    assert [mark for mark in marks if mark not in answers] == [], output  # every turn completed, with its answer
