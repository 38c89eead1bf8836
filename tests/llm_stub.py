"""A small real OpenAI-compatible chat-completions server for tests (stdlib ``http.server`` in a thread).

``answer(system, user) -> str | None`` produces the assistant message content; None answers HTTP 500.
``delay_s`` makes every answer slow (timeout tests). Every request is recorded. Optional: ``usage`` is sent as
the answer's ``usage`` field, and ``reply(request) -> (status, body) | None`` answers a request verbatim
before ``answer`` is consulted (status sequences, 400s, echoed headers).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
