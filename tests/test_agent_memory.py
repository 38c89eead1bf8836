"""The agent's memory client on the turn path: one kept-alive connection for turn start (reused, and sent again
when the daemon closed it while idle), the memory session opened before the first turn, and captures posted by
the capture thread: flushed when the agent closes and at interpreter exit, spooled when the daemon cannot take
them and sent again once it can. Against a real token-protected daemon."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memmy.agent.daemon_link import DaemonLink, DaemonTimeout, DaemonUnreachable
from memmy.agent.memory import MemoryBridge
from memmy.cli.client import ClientSettings
from tests.conftest import Daemon, HangingServer, refused_endpoint


def bridge(url: str, token: str | None, spool: Path | None = None, timeout_s: float = 60.0) -> MemoryBridge:
    settings = ClientSettings(url=url, token=token, user_id=None, source="memmy", workspace_path=None)
    return MemoryBridge(settings, spool=spool, timeout_s=timeout_s)


async def stored(future: Future[bool] | None) -> bool:
    """Whether the capture thread got the daemon to store the capture."""
    assert future is not None
    return await asyncio.wrap_future(future)


def search(daemon: Daemon, query: str) -> str:
    with daemon.client() as http:
        daemon.drain()
        answer = http.post("/api/v1/memory/search", json={"query": query, "scope": "pooled", "limit": 5})
        answer.raise_for_status()
        return json.dumps(answer.json())


def test_turn_path_uses_one_kept_alive_connection(daemon: Daemon) -> None:
    async def main() -> tuple[int, int, bool]:
        memory = bridge(daemon.url, daemon.token)
        connects = 0
        original = memory._link._connect

        async def counting() -> Any:
            nonlocal connects
            connects += 1
            return await original()

        memory._link._connect = counting  # type: ignore[method-assign]
        try:
            assert await memory.open_session("cli:keepalive", None)  # before the first turn, as the runtime does
            opened = len(memory._opened)
            for n in range(3):
                recall = await memory.start_turn("cli:keepalive", f"keep-alive question number {n} about kafka")
                assert recall is not None, memory.error
                assert await stored(memory.capture_turn(recall, "kafka answer", "succeeded", []))
            return connects, opened, await memory.flush()
        finally:
            await memory.aclose()

    connects, opened, flushed = asyncio.run(main())
    assert connects == 1 and opened == 1 and flushed  # session open + 3 turn starts: one connection


class ClosingHandler(BaseHTTPRequestHandler):
    """Answers, then drops the connection without saying so (as a daemon closing an idle keep-alive one)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        data = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True


@pytest.fixture
def closing_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ClosingHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_connection_closed_while_idle_is_replaced(closing_server: str) -> None:
    async def main() -> list[Any]:
        link = DaemonLink(closing_server, {})
        try:
            answers = []
            for _ in range(3):
                answers.append(await link.request("GET", "/x"))
                await asyncio.sleep(0.05)  # the server has closed the connection the link kept
            return answers
        finally:
            await link.aclose()

    assert asyncio.run(main()) == [(200, {"ok": True})] * 3


def test_down_and_hanging_daemons_raise_clear_errors() -> None:
    async def main(url: str, timeout_s: float) -> Exception:
        link = DaemonLink(url, {}, timeout_s=timeout_s)
        try:
            await link.request("POST", "/api/v1/turns/start", {"query": "q"})
        except Exception as exc:
            return exc
        finally:
            await link.aclose()
        raise AssertionError("no error")

    down = asyncio.run(main(refused_endpoint(), 2))
    assert isinstance(down, DaemonUnreachable) and "cannot connect" in str(down)
    hanging = HangingServer()
    try:
        slow = asyncio.run(main(hanging.url, 0.5))
    finally:
        hanging.close()
    assert isinstance(slow, DaemonTimeout) and "did not answer" in str(slow)


def test_capture_spooled_while_the_daemon_is_down_and_sent_when_it_is_back(daemon: Daemon, tmp_path: Path) -> None:
    spool = tmp_path / "agent" / "pending-captures.jsonl"

    async def main() -> None:
        up = bridge(daemon.url, daemon.token)
        recall = await up.start_turn("cli:spool", "what port does the heron cache listen on?")
        await up.aclose()
        assert recall is not None, up.error
        down = bridge(refused_endpoint(), daemon.token, spool=spool)  # the daemon went away after turn start
        delivered = await stored(down.capture_turn(recall, "the heron cache listens on port 7411", "succeeded", []))
        assert delivered is False and down.state == "down" and "kept" in str(down.error)
        await down.aclose()
        assert spool.exists() and "7411" in spool.read_text(encoding="utf-8")
        back = bridge(daemon.url, daemon.token, spool=spool)  # the next agent process: sends it at start
        await asyncio.sleep(0)
        assert await back.flush()
        await back.aclose()

    asyncio.run(main())
    assert not spool.exists()
    assert "7411" in search(daemon, "heron cache port")


class SlowStart(BaseHTTPRequestHandler):
    """Forwards to the real daemon, but holds every turn start until ``release`` is set (a daemon busy loading
    its model when the first turn starts), then forwards it late."""

    release = threading.Event()
    target = ""

    def do_POST(self) -> None:  # noqa: N802 - the standard library's handler name
        import httpx

        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.endswith("/turns/start"):
            self.release.wait(30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        response = httpx.post(self.target + self.path, content=body, headers=headers, timeout=30)
        try:
            self.send_response(response.status_code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(response.content)))
            self.end_headers()
            self.wfile.write(response.content)
        except OSError:
            pass  # the agent stopped waiting

    def log_message(self, *args: Any) -> None:
        pass


def test_a_turn_whose_start_timed_out_is_still_captured(daemon: Daemon) -> None:
    """The turn goes on without recalled memory when its start times out, and its capture is kept; the start,
    arriving at the daemon after the completion, leaves the completed turn as it is."""
    SlowStart.target, SlowStart.release = daemon.url, threading.Event()
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), SlowStart)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()

    async def main() -> None:
        memory = bridge(f"http://127.0.0.1:{proxy.server_address[1]}", daemon.token, timeout_s=1.0)
        try:
            assert await memory.open_session("cli:slow-start", None)
            recall = await memory.start_turn("cli:slow-start", "what does the kestrel queue retry on?")
            assert recall is not None and recall.markdown == "" and recall.status == ["start_failed"]
            assert "did not answer in time" in str(memory.error)  # the agent says why it has no memory this turn
            captured = memory.capture_turn(recall, "the kestrel queue retries on HTTP 429 only", "succeeded", [])
            assert await stored(captured)
        finally:
            SlowStart.release.set()
            await memory.aclose()

    try:
        asyncio.run(main())
        assert "HTTP 429 only" in search(daemon, "kestrel queue retry")
    finally:
        proxy.shutdown()
        proxy.server_close()


class Unavailable(BaseHTTPRequestHandler):
    """A daemon that answers every request with 503 until ``ready`` is set, then forwards to the real one."""

    ready = threading.Event()
    target = ""

    def do_POST(self) -> None:  # noqa: N802 - the standard library's handler name
        import httpx

        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.ready.is_set():
            status, answer = 503, b'{"error": {"code": "starting", "message": "starting"}}'
        else:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            response = httpx.post(self.target + self.path, content=body, headers=headers, timeout=30)
            status, answer = response.status_code, response.content
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_spooled_capture_is_sent_again_without_waiting_for_the_next_turn(daemon: Daemon, tmp_path: Path) -> None:
    spool = tmp_path / "agent" / "pending-captures.jsonl"
    Unavailable.target = daemon.url
    server = ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def main() -> None:
        up = bridge(daemon.url, daemon.token)
        recall = await up.start_turn("cli:respool", "where does the kestrel backup land?")
        await up.aclose()
        assert recall is not None, up.error
        busy = bridge(f"http://127.0.0.1:{server.server_address[1]}", daemon.token, spool=spool)
        answer = "the kestrel backup lands in s3://kestrel-bk"
        delivered = await stored(busy.capture_turn(recall, answer, "succeeded", []))
        assert delivered is False and "kept" in str(busy.error)
        Unavailable.ready.set()  # the daemon is back; no other turn comes
        for _ in range(300):
            if "kestrel-bk" in search(daemon, "kestrel backup"):
                break
            await asyncio.sleep(0.1)
        await busy.aclose()

    try:
        asyncio.run(main())
    finally:
        server.shutdown()
        server.server_close()
    assert "kestrel-bk" in search(daemon, "kestrel backup")


EXITING_AGENT = """
import asyncio, sys
from memmy.agent.memory import MemoryBridge
from memmy.cli.client import ClientSettings

async def main():
    settings = ClientSettings(url=sys.argv[1], token=sys.argv[2], user_id=None, source="memmy", workspace_path=None)
    memory = MemoryBridge(settings, timeout_s=60)
    recall = await memory.start_turn("cli:exit", "which queue does the osprey worker read?")
    assert recall is not None, memory.error
    memory.capture_turn(recall, "the osprey worker reads the ospreyq-blue queue", "succeeded", [])
    # no flush, no close: the process ends right after the answer

asyncio.run(main())
"""


def test_captures_are_flushed_at_interpreter_exit(daemon: Daemon) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXITING_AGENT, daemon.url, str(daemon.token)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "ospreyq-blue" in search(daemon, "osprey worker queue")
