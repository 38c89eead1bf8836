"""What every fake chat platform in the tests shares: a Starlette app on a free loopback port in a thread of its
own, an event the test's thread sets to wake a waiting long poll or WebSocket, and waiting for a condition."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.websockets import WebSocket

from tests.conftest import free_port


class PlatformFake:
    """The base of a fake platform server: ``routes()`` is the platform's API, ``sent()`` what the bot sent."""

    def __init__(self) -> None:
        self.url = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wake: asyncio.Event | None = None
        self.pending: list[dict[str, Any]] = []  # events waiting to be pushed down the open WebSocket
        self.drops = 0
        self._lock = threading.Lock()

    def push(self, event: dict[str, Any]) -> None:
        """Queue an event for the open WebSocket (from the test's thread)."""
        with self._lock:
            self.pending.append(event)
        self.notify()

    def drop(self) -> None:
        """Close the open WebSocket (the client must reconnect)."""
        self.drops += 1
        self.notify()

    async def pump(
        self,
        socket: WebSocket,
        reader: asyncio.Task[None],
        send: Callable[[dict[str, Any]], Awaitable[None]],
        drop_code: int,
    ) -> None:
        """Push queued events down ``socket`` until the client goes (``reader`` ends) or :meth:`drop` is called."""
        drops = self.drops
        assert self.wake is not None
        try:
            while not reader.done():
                if self.drops != drops:
                    await socket.close(code=drop_code)
                    return
                with self._lock:
                    events, self.pending = self.pending, []
                for event in events:
                    await send(event)
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=0.2)
                except TimeoutError:
                    pass
        finally:
            reader.cancel()

    def routes(self) -> list[BaseRoute]:
        """The platform's endpoints."""
        raise NotImplementedError

    def outbox(self) -> list[Any]:
        """What the bot sent so far (shown when a wait times out)."""
        raise NotImplementedError

    def notify(self) -> None:
        """Wake the server's waiting long poll or WebSocket loop (from the test's thread)."""
        if self.loop is not None and self.wake is not None:
            self.loop.call_soon_threadsafe(self.wake.set)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Wait until ``predicate()`` holds (AssertionError with what was sent when it does not)."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; sent so far: {self.outbox()}")
            time.sleep(0.02)

    def app(self) -> Starlette:
        """The ASGI app (its lifespan hands the server's loop and wake event to the test's side)."""

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.loop = asyncio.get_running_loop()
            self.wake = asyncio.Event()
            yield

        return Starlette(routes=self.routes(), lifespan=lifespan)


@contextmanager
def serving(fake: PlatformFake) -> Iterator[None]:
    """Run ``fake`` on a free loopback port for the ``with`` block (``fake.url`` is its API base)."""
    port = free_port()
    fake.url = f"http://127.0.0.1:{port}"
    server = uvicorn.Server(uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the fake {type(fake).__name__} did not start")
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)
