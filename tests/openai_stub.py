"""A small real OpenAI-compatible embeddings server for tests (stdlib ``http.server`` in a thread).

Usage::

    with run_openai_stub() as base_url:          # "http://127.0.0.1:<port>/v1"
        embedder = OpenAICompatibleEmbedder(base_url, "stub-model")
        embedder.embed(["hello"])
        base_url.requests                       # every request received, in order

``base_url`` is a ``str`` (so it can be passed anywhere a URL is expected) that also carries the
recorded requests.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EmbedFn = Callable[[str], Sequence[float]]


def hash_vector(text: str, dim: int = 8) -> list[float]:
    """A deterministic, text-dependent (not normalised) vector: the default ``embed_fn``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [(digest[i % len(digest)] - 127.5) / 10.0 + i for i in range(dim)]


@dataclass
class RecordedRequest:
    """One request the stub received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class StubURL(str):
    """The stub's base URL (``http://127.0.0.1:<port>/v1``) plus what the server saw."""

    requests: list[RecordedRequest]
    port: int

    @property
    def embeddings_url(self) -> str:
        """The full URL of the embeddings route."""
        return f"{self}/embeddings"


@dataclass
class _State:
    embed_fn: EmbedFn
    fail_times: int
    status: int
    api_key: str | None
    reverse: bool
    delay_s: float
    requests: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _make_handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output clean

        def _send(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, extra: dict[str, str] | None = None) -> None:
            self._send(status, {"error": {"message": message, "type": "stub_error", "code": status}}, extra)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw or b"null")
            except ValueError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            with state.lock:
                state.requests.append(RecordedRequest("POST", self.path, headers, body))
                failing = state.fail_times > 0
                if failing:
                    state.fail_times -= 1
            if state.delay_s:
                time.sleep(state.delay_s)
            if self.path.rstrip("/") != "/v1/embeddings":
                self._error(404, f"no route {self.path}")
                return
            presented = headers.get("authorization", "")
            if state.api_key is not None and presented != f"Bearer {state.api_key}":
                # Like OpenAI, echo the key that was presented: clients must not leak it further.
                self._error(401, f"Incorrect API key provided: {presented.removeprefix('Bearer ')}")
                return
            if failing:
                extra = {"Retry-After": "0"} if state.status == 429 else None
                self._error(state.status, "transient stub failure", extra)
                return
            if not isinstance(body, dict) or "model" not in body or "input" not in body:
                self._error(400, "body must be a JSON object with 'model' and 'input'")
                return
            inputs = body["input"]
            if isinstance(inputs, str):
                inputs = [inputs]
            if not isinstance(inputs, list) or not all(isinstance(t, str) and t for t in inputs):
                self._error(400, "'input' must be a non-empty string or a list of non-empty strings")
                return
            data = [
                {"object": "embedding", "index": i, "embedding": [float(v) for v in state.embed_fn(text)]}
                for i, text in enumerate(inputs)
            ]
            if state.reverse:
                data.reverse()
            tokens = sum(len(t.split()) for t in inputs)
            self._send(
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": body["model"],
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )

        def do_GET(self) -> None:
            with state.lock:
                state.requests.append(
                    RecordedRequest("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, None)
                )
            self._error(404, f"no route {self.path}")

    return Handler


@contextmanager
def run_openai_stub(
    embed_fn: EmbedFn | None = None,
    fail_times: int = 0,
    status: int = 500,
    *,
    api_key: str | None = None,
    reverse: bool = False,
    delay_s: float = 0.0,
) -> Iterator[StubURL]:
    """Serve ``POST /v1/embeddings`` on 127.0.0.1 (free port) for the duration of the ``with`` block.

    - ``embed_fn(text) -> vector``: defaults to :func:`hash_vector` (8 dimensions, deterministic).
    - ``fail_times``: the first N embedding requests answer ``status`` (``Retry-After: 0`` for 429).
    - ``api_key``: when set, requests without ``Authorization: Bearer <api_key>`` get 401 (the
      message echoes the presented key, as OpenAI's does).
    - ``reverse``: return ``data`` in reverse order (clients must sort by ``index``).
    - ``delay_s``: sleep before answering (for timeout tests).

    Yields the base URL ``http://127.0.0.1:<port>/v1`` as a :class:`StubURL` whose ``requests`` lists
    every request received.
    """
    state = _State(
        embed_fn=embed_fn or hash_vector,
        fail_times=fail_times,
        status=status,
        api_key=api_key,
        reverse=reverse,
        delay_s=delay_s,
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
    server.daemon_threads = True
    port = int(server.server_address[1])
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="openai-stub", daemon=True
    )
    thread.start()
    url = StubURL(f"http://127.0.0.1:{port}/v1")
    url.requests = state.requests
    url.port = port
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def normalised(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to unit length (zero stays zero): what a client should return."""
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else [0.0 for _ in vector]
