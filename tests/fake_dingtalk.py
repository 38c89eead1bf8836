"""A small DingTalk Stream-mode server on loopback for the channel tests, speaking the documented wire format
(open.dingtalk.com, "Stream mode"): ``POST /v1.0/gateway/connections/open`` with ``clientId``/``clientSecret``
answers ``{endpoint, ticket}``; the WebSocket at ``endpoint?ticket=…`` pushes ``CALLBACK`` frames on the robot
topic ``/v1.0/im/bot/messages/get`` (the message JSON as a string in ``data``) and takes the client's acks;
each message carries a ``sessionWebhook`` on this server, where the robot's answers are posted.

Tests push messages with :meth:`FakeDingTalk.say`, read answers in :attr:`FakeDingTalk.replies` and close the
WebSocket with :meth:`FakeDingTalk.drop` to stand for a dropped connection."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.conftest import free_port

TOPIC = "/v1.0/im/bot/messages/get"


@dataclass
class DingReply:
    """One answer the robot posted to a session webhook."""

    conversation: str
    msgtype: str
    text: str
    at: float = field(default_factory=time.monotonic)


class FakeDingTalk:
    """The fake's state; thread-safe helpers for the test, asyncio inside the server."""

    def __init__(self, client_id: str = "ding-app-id", client_secret: str = "ding-app-secret") -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.url = ""
        self.replies: list[DingReply] = []
        self.acks: list[dict[str, Any]] = []
        self.connections = 0
        self.pending: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wake: asyncio.Event | None = None
        self.drops = 0

    def say(self, conversation: str, staff_id: str, text: str) -> None:
        """Queue a message from user ``staff_id`` in ``conversation``."""
        number = next(self._ids)
        data = {
            "conversationId": conversation,
            "chatbotCorpId": "corp1",
            "chatbotUserId": "bot1",
            "msgId": f"msg{number}",
            "senderNick": f"user {staff_id}",
            "isAdmin": False,
            "senderStaffId": staff_id,
            "sessionWebhookExpiredTime": int(time.time() * 1000) + 3_600_000,
            "createAt": int(time.time() * 1000),
            "senderCorpId": "corp1",
            "conversationType": "1",
            "senderId": f"$:LWCP_v1:${staff_id}",
            "sessionWebhook": f"{self.url}/robot/sendBySession/{conversation}",
            "text": {"content": text},
            "robotCode": self.client_id,
            "msgtype": "text",
        }
        frame = {
            "specVersion": "1.0",
            "type": "CALLBACK",
            "headers": {
                "appId": "app1",
                "connectionId": "conn1",
                "contentType": "application/json",
                "messageId": f"frame{number}",
                "time": str(int(time.time() * 1000)),
                "topic": TOPIC,
            },
            "data": json.dumps(data, ensure_ascii=False),
        }
        with self._lock:
            self.pending.append(frame)
        self._notify()

    def drop(self) -> None:
        """Close the open WebSocket (the client must reconnect)."""
        self.drops += 1
        self._notify()

    def _notify(self) -> None:
        if self.loop is not None and self.wake is not None:
            self.loop.call_soon_threadsafe(self.wake.set)

    def texts(self, conversation: str) -> list[str]:
        """The answers posted to one conversation, in order."""
        return [r.text for r in self.replies if r.conversation == conversation]

    def wait_for(self, predicate: Any, timeout_s: float = 60.0) -> None:
        """Wait until ``predicate()`` holds."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out; replies so far: {[(r.conversation, r.text[:80]) for r in self.replies]}"
                )
            time.sleep(0.02)

    async def open_connection(self, request: Request) -> JSONResponse:
        body = await request.json()
        if body.get("clientId") != self.client_id or body.get("clientSecret") != self.client_secret:
            return JSONResponse({"code": "InvalidAuthentication", "message": "clientId or clientSecret is wrong"}, 401)
        topics = [s.get("topic") for s in body.get("subscriptions") or []]
        if TOPIC not in topics:
            return JSONResponse({"code": "InvalidParameter", "message": "no subscription"}, 400)
        host = self.url.replace("http://", "ws://")
        return JSONResponse({"endpoint": f"{host}/gateway", "ticket": f"ticket-{self.connections + 1}"})

    async def gateway(self, socket: WebSocket) -> None:
        if not socket.query_params.get("ticket", "").startswith("ticket-"):
            await socket.close(code=4001)
            return
        await socket.accept()
        self.connections += 1
        drops = self.drops
        assert self.wake is not None

        async def read_acks() -> None:
            try:
                while True:
                    self.acks.append(json.loads(await socket.receive_text()))
            except WebSocketDisconnect:
                return

        reader = asyncio.create_task(read_acks())
        try:
            while not reader.done():
                if self.drops != drops:
                    await socket.close(code=1011)
                    return
                with self._lock:
                    frames, self.pending = self.pending, []
                for frame in frames:
                    await socket.send_text(json.dumps(frame, ensure_ascii=False))
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=0.2)
                except TimeoutError:
                    pass
        finally:
            reader.cancel()

    async def session_webhook(self, request: Request) -> JSONResponse:
        body = await request.json()
        kind = body.get("msgtype")
        text = body["markdown"]["text"] if kind == "markdown" else body.get("text", {}).get("content", "")
        if not text or len(text) > 5000:
            return JSONResponse({"errcode": 400, "errmsg": "content too long or empty"}, 400)
        self.replies.append(DingReply(request.path_params["conversation"], str(kind), text))
        return JSONResponse({"errcode": 0, "errmsg": "ok"})

    def app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.loop = asyncio.get_running_loop()
            self.wake = asyncio.Event()
            yield

        return Starlette(
            routes=[
                Route("/v1.0/gateway/connections/open", self.open_connection, methods=["POST"]),
                WebSocketRoute("/gateway", self.gateway),
                Route("/robot/sendBySession/{conversation}", self.session_webhook, methods=["POST"]),
            ],
            lifespan=lifespan,
        )


@contextmanager
def fake_dingtalk() -> Iterator[FakeDingTalk]:
    """Run a fake DingTalk Stream server on a free loopback port for the ``with`` block (``.url``: its apiBase)."""
    fake = FakeDingTalk()
    port = free_port()
    fake.url = f"http://127.0.0.1:{port}"
    server = uvicorn.Server(uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the fake DingTalk server did not start")
        time.sleep(0.02)
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(10)
