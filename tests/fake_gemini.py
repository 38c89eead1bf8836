"""A small real Gemini API server for the tests (stdlib ``http.server`` in a thread), speaking the REST wire format
``google-genai`` uses: ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` (SSE chunks, one per word),
``POST /v1beta/models/{model}:generateContent`` and ``GET /v1beta/models``. A wrong ``x-goog-api-key`` gets
Google's HTTP 400 "API key not valid". A ``brain(body) -> GeminiReply`` decides each answer from the request body;
every request is recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.agent_stubs import JsonHandler, StubServer


@dataclass
class GeminiReply:
    """One scripted answer: text and/or function calls ``(name, args)``, or an HTTP error status."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200


GeminiBrain = Callable[[dict[str, Any]], GeminiReply]


@dataclass
class FakeGemini:
    """The running fake: its base URL (the SDK's ``base_url``) and what it received."""

    url: str = ""
    key: str = "gm-test-key"
    requests: list[dict[str, Any]] = field(default_factory=list)


def last_user_text(body: dict[str, Any]) -> str:
    """The newest user text part of a ``generateContent`` body."""
    for content in reversed(body.get("contents", [])):
        texts = [p["text"] for p in content.get("parts", []) if content.get("role") == "user" and "text" in p]
        if texts:
            return "\n".join(texts)
    return ""


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``functionResponse`` parts of the last content (what the tools answered)."""
    contents = body.get("contents") or [{}]
    return [p["functionResponse"] for p in contents[-1].get("parts", []) if "functionResponse" in p]


def echo(body: dict[str, Any]) -> GeminiReply:
    """Answers ``gemini says: <last user text>``."""
    return GeminiReply(text="gemini says: " + last_user_text(body)[-200:])


def _chunks(reply: GeminiReply, model: str) -> Iterator[dict[str, Any]]:
    words = reply.text.split(" ") if reply.text else []
    for n, word in enumerate(words):
        text = word if n == len(words) - 1 else word + " "
        yield {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}]}
    parts = [{"functionCall": {"name": name, "args": args}} for name, args in reply.calls]
    final: dict[str, Any] = {"content": {"role": "model", "parts": parts or [{"text": ""}]}}
    usage = {"promptTokenCount": 13, "candidatesTokenCount": 5, "totalTokenCount": 18}
    yield {"candidates": [{**final, "finishReason": "STOP", "index": 0}], "usageMetadata": usage, "modelVersion": model}


@contextmanager
def run_fake_gemini(brain: GeminiBrain = echo) -> Iterator[FakeGemini]:
    """Serve the Gemini REST API on a free loopback port for the ``with`` block."""
    fake = FakeGemini()

    class Handler(JsonHandler):

        def _key_ok(self) -> bool:
            if self.headers.get("x-goog-api-key") == fake.key:
                return True
            message = "API key not valid. Please pass a valid API key."
            error = {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}
            self._json(400, {"error": error})
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if not self._key_ok():
                return
            if self.path.split("?")[0].rstrip("/") == "/v1beta/models":
                self._json(200, {"models": [{"name": "models/gemini-fake", "displayName": "fake"}]})
                return
            self._json(404, {"error": {"code": 404, "message": "no route", "status": "NOT_FOUND"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            fake.requests.append({"path": self.path, "body": body})
            if not self._key_ok():
                return
            route = self.path.split("?")[0]
            if not route.startswith("/v1beta/models/") or ":" not in route:
                self._json(404, {"error": {"code": 404, "message": "no route", "status": "NOT_FOUND"}})
                return
            model, method = route.removeprefix("/v1beta/models/").split(":", 1)
            reply = brain(body)
            if reply.status != 200:
                status = "RESOURCE_EXHAUSTED" if reply.status == 429 else "INTERNAL"
                self._json(reply.status, {"error": {"code": reply.status, "message": "fake says no", "status": status}})
                return
            chunks = list(_chunks(reply, model))
            if method == "generateContent":
                parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"] if p.get("text") != ""]
                whole = {**chunks[-1]["candidates"][0], "content": {"role": "model", "parts": parts}}
                self._json(200, {"candidates": [whole], "usageMetadata": chunks[-1]["usageMetadata"]})
                return
            if method != "streamGenerateContent":
                self._json(404, {"error": {"code": 404, "message": f"no method {method}", "status": "NOT_FOUND"}})
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
                self.wfile.flush()

    server = StubServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
