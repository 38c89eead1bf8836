"""Small real model servers for the agent tests (stdlib ``http.server`` in a thread): an OpenAI-compatible
``/v1/chat/completions`` and an Anthropic-shaped ``/v1/messages``, streaming (SSE) and not, with tool calls; and
OpenAI's ``/v1/embeddings``, ``/v1/audio/transcriptions`` (multipart; it "hears" the text after ``SAY:`` in the
uploaded file, "" otherwise) and ``/v1/images/generations`` (a 1x1 PNG as ``b64_json``).

A ``brain(body) -> Reply`` decides each answer from the request body; ``Reply(status=...)`` answers an HTTP error
(429, 500 ...) instead, and ``delay_s`` makes the answer slow. Every request body is recorded.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: text and/or tool calls ``(name, arguments-json-text)``, or an HTTP error status."""

    text: str = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    status: int = 200
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0  # a pause before each streamed chunk (50 tokens/s: 0.02)
    cost: float | None = None  # sent as usage.cost, as OpenRouter does


Brain = Callable[[dict[str, Any]], Reply]


@dataclass
class ModelStub:
    """The running stub: base URLs and what it received."""

    openai_url: str = ""  # http://127.0.0.1:<port>/v1  (OpenAI SDK base_url)
    anthropic_url: str = ""  # http://127.0.0.1:<port>    (Anthropic SDK base_url)
    requests: list[dict[str, Any]] = field(default_factory=list)
    sent: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (wall time, chunk) of paced replies


def tiny_png() -> bytes:
    """A valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\xff\x80\x00"))
        + chunk(b"IEND", b"")
    )


def multipart_fields(content_type: str, raw: bytes) -> dict[str, Any]:
    """A multipart/form-data body: field name -> text, or (filename, content type, bytes) for a file."""
    message = BytesParser(policy=HTTP).parsebytes(f"content-type: {content_type}\r\n\r\n".encode() + raw)
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True)
        assert isinstance(data, bytes)
        filename = part.get_filename()
        fields[str(name)] = (filename, part.get_content_type(), data) if filename else data.decode()
    return fields


def _heard(audio: bytes) -> str:
    return audio.split(b"SAY:", 1)[1].decode(errors="replace").strip() if b"SAY:" in audio else ""


def last_user_text(body: dict[str, Any]) -> str:
    """The newest user text in an OpenAI or Anthropic request (tool results excluded)."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return ""


def tool_results(body: dict[str, Any]) -> list[str]:
    """Tool results the request carries after the last assistant message (either wire shape)."""
    found: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") == "assistant":
            found = []
        if message.get("role") == "tool":
            found.append(str(message.get("content")))
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            found += [str(b.get("content")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return found


def echo_brain(body: dict[str, Any]) -> Reply:
    """Answers ``echo: <last user text>``."""
    return Reply(text="echo: " + last_user_text(body)[-200:])


def _openai_chunks(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": model}
    yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    words = reply.text.split(" ")
    for i, word in enumerate(words):
        piece = word if i == len(words) - 1 else word + " "
        if piece:
            yield {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
    for index, (name, args) in enumerate(reply.tool_calls):
        head = {"index": index, "id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": ""}}
        yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}, "finish_reason": None}]}
        half = len(args) // 2
        for part in (args[:half], args[half:]):
            frag = {"index": index, "function": {"arguments": part}}
            yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [frag]}, "finish_reason": None}]}
    finish = "tool_calls" if reply.tool_calls else "stop"
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    usage: dict[str, Any] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    if reply.cost is not None:
        usage["cost"] = reply.cost
    yield {**base, "choices": [], "usage": usage}


def _openai_whole(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(reply.tool_calls)
        ]
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def _anthropic_events(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    yield {
        "type": "message_start",
        "message": {
            "id": "msg_stub",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 0},
        },
    }
    index = 0
    if reply.text:
        yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        yield {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": reply.text}}
        yield {"type": "content_block_stop", "index": 0}
        index = 1
    for i, (name, args) in enumerate(reply.tool_calls, start=index):
        block = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}}
        yield {"type": "content_block_start", "index": i, "content_block": block}
        yield {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": args}}
        yield {"type": "content_block_stop", "index": i}
    stop = "tool_use" if reply.tool_calls else "end_turn"
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": 7},
    }
    yield {"type": "message_stop"}


class JsonHandler(BaseHTTPRequestHandler):
    """What every fake provider's handler shares: no request log, and a JSON answer with its length (a 429 says
    ``retry-after: 0`` where :attr:`retry_after_429` is set, so an SDK that honours it retries at once)."""

    retry_after_429 = False

    def log_message(self, *args: Any) -> None:
        return

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if status == 429 and self.retry_after_429:
            self.send_header("retry-after", "0")
        self.end_headers()
        self.wfile.write(data)


class StubServer(ThreadingHTTPServer):
    """The fake provider's HTTP server. Its listen backlog is a real server's, not socketserver's 5: each streamed
    answer closes its connection, so 20 chats asking at once open 20 connections at once, and with a backlog of 5
    the kernel drops the SYNs beyond it — the client retries a second later, or (``maxRetries: 0``) the turn fails
    with "cannot reach openai" (bench/channels.py's "lost answer", about 1 run in 30)."""

    daemon_threads = True
    request_queue_size = 1024


@contextmanager
def run_model_stub(brain: Brain = echo_brain, delay_s: float = 0.0, keep_alive: bool = False) -> Iterator[ModelStub]:
    """Serve both wire protocols on one free loopback port for the ``with`` block (``keep_alive``: HTTP/1.1, a
    streamed answer sent chunked and its connection kept for the next request, as a provider's API does; by
    default each streamed answer closes its connection)."""
    stub = ModelStub()

    class Handler(JsonHandler):
        retry_after_429 = True
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
        # TCP_NODELAY, as a provider's server sets it: on a kept connection Nagle's algorithm held each small SSE
        # chunk until the client's delayed ACK (~40 ms a streamed answer)
        disable_nagle_algorithm = keep_alive

        def _event(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if keep_alive else data)

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.rstrip("/").endswith("/models"):
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": "stub-model",
                                "object": "model",
                                "created": 0,
                                "owned_by": "stub",
                                "type": "model",
                                "display_name": "stub",
                                "created_at": "2026-01-01T00:00:00Z",
                            }
                        ],
                        "has_more": False,
                        "first_id": "stub-model",
                        "last_id": "stub-model",
                    },
                )
                return
            self._json(404, {"error": {"message": "no route", "type": "not_found"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            if self.path.endswith("/audio/transcriptions"):
                fields = multipart_fields(self.headers.get("content-type", ""), raw)
                stub.requests.append({"path": self.path, "body": fields, "headers": dict(self.headers.items())})
                self._json(200, {"text": _heard(fields["file"][2])})
                return
            body = json.loads(raw or b"{}")
            stub.requests.append({"path": self.path, "body": body, "headers": dict(self.headers.items())})
            if self.path.endswith("/embeddings"):
                count = len(body["input"]) if isinstance(body["input"], list) else 1
                data = [{"object": "embedding", "index": i, "embedding": [0.5] * 8} for i in range(count)]
                usage = {"prompt_tokens": 2, "total_tokens": 2}
                self._json(200, {"object": "list", "data": data, "model": body["model"], "usage": usage})
                return
            if self.path.endswith("/images/generations"):
                image = base64.b64encode(tiny_png()).decode()
                usage = {"input_tokens": 7, "output_tokens": 100, "total_tokens": 107}
                self._json(200, {"created": int(time.time()), "data": [{"b64_json": image}], "usage": usage})
                return
            reply = brain(body)
            if delay_s or reply.delay_s:
                time.sleep(delay_s or reply.delay_s)
            anthropic = self.path.rstrip("/").endswith("/messages")
            if reply.status != 200:
                error = {"type": "rate_limit_error" if reply.status == 429 else "api_error", "message": "stub says no"}
                self._json(reply.status, {"type": "error", "error": error} if anthropic else {"error": error})
                return
            model = str(body.get("model", "stub-model"))
            if not body.get("stream"):
                self._json(200, _openai_whole(reply, model))
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding" if keep_alive else "connection", "chunked" if keep_alive else "close")
            self.end_headers()
            try:
                if anthropic:
                    for event in _anthropic_events(reply, model):
                        self._event(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                else:
                    for chunk in _openai_chunks(reply, model):
                        if reply.chunk_delay_s:
                            time.sleep(reply.chunk_delay_s)
                        self._event(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        if reply.chunk_delay_s:
                            stub.sent.append((time.time(), chunk))
                    self._event(b"data: [DONE]\n\n")
                if keep_alive:
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return

    server = StubServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    stub.openai_url = f"http://127.0.0.1:{port}/v1"
    stub.anthropic_url = f"http://127.0.0.1:{port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()


def write_agent_config(
    home: Any, stub: ModelStub, kind: str = "openai", extra: str = "", approval: str = "allow", memory: bool = True
) -> Any:
    """Write ``$MEMMY_HOME/config.yaml`` pointing the agent at ``stub`` (``home`` is the test HOME)."""
    from pathlib import Path

    url = stub.anthropic_url if kind == "anthropic" else stub.openai_url
    memmy_home = Path(home) / ".memmy"
    memmy_home.mkdir(parents=True, exist_ok=True)
    path = memmy_home / "config.yaml"
    path.write_text(
        f"agents:\n  defaults: {{provider: {kind}, model: stub-model, maxRetries: 0, timeoutS: 20, "
        f"memory: {str(memory).lower()}}}\n"
        f"  presets:\n    fast: {{provider: {kind}, model: stub-fast}}\n"
        f"providers:\n  {kind}: {{apiBase: '{url}', apiKey: sk-test-key}}\n"
        f"tools:\n  exec: {{approval: {approval}, timeout: 5}}\n{extra}",
        encoding="utf-8",
    )
    return path
