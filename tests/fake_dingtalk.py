"""A small DingTalk Stream-mode server on loopback for the channel tests, speaking the documented wire format
(open.dingtalk.com, "Stream mode"): ``POST /v1.0/gateway/connections/open`` with ``clientId``/``clientSecret``
answers ``{endpoint, ticket}``; the WebSocket at ``endpoint?ticket=…`` pushes ``CALLBACK`` frames on the robot
topic ``/v1.0/im/bot/messages/get`` (the message JSON as a string in ``data``) and takes the client's acks;
each message carries a ``sessionWebhook`` on this server, where the robot's answers are posted. Files: the access
token from ``POST /v1.0/oauth2/accessToken``, the multipart ``POST /media/upload?access_token`` (the oapi host),
then ``sampleFile`` robot messages to ``/v1.0/robot/oToMessages/batchSend`` or ``/v1.0/robot/groupMessages/send``.

Tests push messages with :meth:`FakeDingTalk.say`, read answers in :attr:`FakeDingTalk.replies` and close the
WebSocket with :meth:`FakeDingTalk.drop` to stand for a dropped connection."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.fake_platform import PlatformFake, serving

TOPIC = "/v1.0/im/bot/messages/get"
ACCESS_TOKEN = "ding-fake-access-token"


@dataclass
class DingReply:
    """One answer the robot posted to a session webhook."""

    conversation: str
    msgtype: str
    text: str
    at: float = field(default_factory=time.monotonic)


class FakeDingTalk(PlatformFake):
    """The fake's state; thread-safe helpers for the test, asyncio inside the server."""

    def __init__(self, client_id: str = "ding-app-id", client_secret: str = "ding-app-secret") -> None:
        super().__init__()
        self.client_id = client_id
        self.client_secret = client_secret
        self.replies: list[DingReply] = []
        self.acks: list[dict[str, Any]] = []
        self.uploads: dict[str, tuple[str, bytes]] = {}  # media_id -> (name, bytes)
        self.files: list[tuple[str, str, bytes]] = []  # (staff id or conversation, name, bytes) the robot sent
        self.connections = 0
        self._ids = itertools.count(1)

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
        self.push(frame)

    def texts(self, conversation: str) -> list[str]:
        """The answers posted to one conversation, in order."""
        return [r.text for r in self.replies if r.conversation == conversation]

    def outbox(self) -> list[Any]:
        return [(r.conversation, r.text[:80]) for r in self.replies]

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

        async def read_acks() -> None:
            try:
                while True:
                    self.acks.append(json.loads(await socket.receive_text()))
            except WebSocketDisconnect:
                return

        async def send(frame: dict[str, Any]) -> None:
            await socket.send_text(json.dumps(frame, ensure_ascii=False))

        await self.pump(socket, asyncio.create_task(read_acks()), send, drop_code=1011)

    async def session_webhook(self, request: Request) -> JSONResponse:
        body = await request.json()
        kind = body.get("msgtype")
        text = body["markdown"]["text"] if kind == "markdown" else body.get("text", {}).get("content", "")
        if not text or len(text) > 5000:
            return JSONResponse({"errcode": 400, "errmsg": "content too long or empty"}, 400)
        self.replies.append(DingReply(request.path_params["conversation"], str(kind), text))
        return JSONResponse({"errcode": 0, "errmsg": "ok"})

    async def access_token(self, request: Request) -> JSONResponse:
        body = await request.json()
        if body.get("appKey") != self.client_id or body.get("appSecret") != self.client_secret:
            return JSONResponse({"code": "InvalidAuthentication", "message": "appKey or appSecret is wrong"}, 400)
        return JSONResponse({"accessToken": ACCESS_TOKEN, "expireIn": 7200})

    async def media_upload(self, request: Request) -> JSONResponse:
        if request.query_params.get("access_token") != ACCESS_TOKEN:
            return JSONResponse({"errcode": 40014, "errmsg": "不合法的access_token"})
        form = await request.form()
        media = form.get("media")
        if form.get("type") != "file" or media is None or isinstance(media, str):
            return JSONResponse({"errcode": 40004, "errmsg": "不合法的媒体文件类型"})
        media_id = f"@lAz{len(self.uploads) + 1}"
        self.uploads[media_id] = (str(media.filename), await media.read())
        return JSONResponse({"errcode": 0, "errmsg": "ok", "media_id": media_id, "type": "file", "created_at": 1})

    async def robot_send(self, request: Request) -> JSONResponse:
        if request.headers.get("x-acs-dingtalk-access-token") != ACCESS_TOKEN:
            return JSONResponse({"code": "InvalidAuthentication", "message": "token is invalid"}, 401)
        body = await request.json()
        param = json.loads(body.get("msgParam") or "{}")
        if body.get("robotCode") != self.client_id or body.get("msgKey") != "sampleFile":
            return JSONResponse({"code": "InvalidParameter", "message": "robotCode or msgKey"}, 400)
        if param.get("mediaId") not in self.uploads:
            return JSONResponse({"code": "InvalidParameter", "message": "mediaId is invalid"}, 400)
        to = body.get("openConversationId") or ",".join(body.get("userIds") or [])
        self.files.append((str(to), str(param.get("fileName")), self.uploads[param["mediaId"]][1]))
        return JSONResponse({"processQueryKey": f"q{len(self.files)}", "invalidStaffIdList": []})

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1.0/oauth2/accessToken", self.access_token, methods=["POST"]),
            Route("/media/upload", self.media_upload, methods=["POST"]),
            Route("/v1.0/robot/oToMessages/batchSend", self.robot_send, methods=["POST"]),
            Route("/v1.0/robot/groupMessages/send", self.robot_send, methods=["POST"]),
            Route("/v1.0/gateway/connections/open", self.open_connection, methods=["POST"]),
            WebSocketRoute("/gateway", self.gateway),
            Route("/robot/sendBySession/{conversation}", self.session_webhook, methods=["POST"]),
        ]


@contextmanager
def fake_dingtalk() -> Iterator[FakeDingTalk]:
    """Run a fake DingTalk Stream server on a free loopback port for the ``with`` block (``.url``: its apiBase)."""
    fake = FakeDingTalk()
    with serving(fake):
        yield fake
