"""A small Feishu open platform on loopback for the channel tests, speaking the documented wire format
(open.feishu.cn, "long connection" event subscription and the IM v1 API): ``POST /callback/ws/endpoint`` with
``AppID``/``AppSecret`` answers the WebSocket URL; the WebSocket carries protobuf ``pbbp2.Frame``s (encoded with
the SDK's own generated ``pbbp2_pb2``): data frames with an ``im.message.receive_v1`` event as JSON payload, which
the client acknowledges, and ping/pong control frames; the bot's tenant token comes from
``POST /open-apis/auth/v3/tenant_access_token/internal`` and its answers go to ``POST /open-apis/im/v1/messages``
(files uploaded first to the multipart ``POST /open-apis/im/v1/files``, then sent as ``file`` messages with their
``file_key``).

Tests push messages with :meth:`FakeFeishu.say`, read answers in :attr:`FakeFeishu.messages`, close the WebSocket
with :meth:`drop`, and make the message API refuse for a missing permission scope with ``missing_scope``."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.fake_platform import PlatformFake, serving

FILE_TYPES = ("opus", "mp4", "pdf", "doc", "xls", "ppt", "stream")
SCOPE_ERROR = (
    "Access denied. One of the following scopes is required: [im:message, im:message:send_as_bot]. "
    "应用尚未开通所需的应用身份权限"
)


@dataclass
class FeishuMessage:
    """One message the bot sent."""

    chat_id: str
    text: str
    at: float = field(default_factory=time.monotonic)


class FakeFeishu(PlatformFake):
    """The fake's state; helpers for the test, asyncio inside the server."""

    def __init__(self, app_id: str = "cli_fake_app", app_secret: str = "fake-app-secret") -> None:
        super().__init__()
        self.app_id = app_id
        self.app_secret = app_secret
        self.messages: list[FeishuMessage] = []
        self.acks: list[dict[str, Any]] = []
        self.pings = 0
        self.connections = 0
        self.missing_scope = False
        self.uploads: dict[str, tuple[str, bytes]] = {}  # file_key -> (name, bytes)
        self.files: list[tuple[str, str, bytes]] = []  # (chat, name, bytes) sent as file messages
        self._ids = itertools.count(1)

    def say(self, chat_id: str, open_id: str, text: str) -> None:
        """Queue a text message from user ``open_id`` in chat ``chat_id``."""
        number = next(self._ids)
        event = {
            "schema": "2.0",
            "header": {
                "event_id": f"ev{number}",
                "event_type": "im.message.receive_v1",
                "create_time": str(int(time.time() * 1000)),
                "token": "",
                "app_id": self.app_id,
                "tenant_key": "tenant1",
            },
            "event": {
                "sender": {
                    "sender_id": {"union_id": f"on_{open_id}", "user_id": f"u_{open_id}", "open_id": open_id},
                    "sender_type": "user",
                    "tenant_key": "tenant1",
                },
                "message": {
                    "message_id": f"om_{number}",
                    "create_time": str(int(time.time() * 1000)),
                    "chat_id": chat_id,
                    "chat_type": "p2p",
                    "message_type": "text",
                    "content": json.dumps({"text": text}, ensure_ascii=False),
                },
            },
        }
        self.push(event)

    def texts(self, chat_id: str) -> list[str]:
        """What the bot sent to one chat, in order."""
        return [m.text for m in self.messages if m.chat_id == chat_id]

    def outbox(self) -> list[Any]:
        return [(m.chat_id, m.text[:80]) for m in self.messages]

    async def endpoint(self, request: Request) -> JSONResponse:
        body = await request.json()
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return JSONResponse({"code": 514, "msg": "auth failed: app_id or app_secret is wrong"})
        url = self.url.replace("http://", "ws://") + f"/ws?device_id=dev{self.connections + 1}&service_id=7"
        config = {"ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30, "PingInterval": 120}
        return JSONResponse({"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": config}})

    async def tenant_token(self, request: Request) -> JSONResponse:
        body = await request.json()
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return JSONResponse({"code": 10014, "msg": "app secret invalid"})
        return JSONResponse({"code": 0, "msg": "ok", "tenant_access_token": "t-fake-tenant", "expire": 7200})

    async def create_message(self, request: Request) -> JSONResponse:
        if request.headers.get("authorization") != "Bearer t-fake-tenant":
            return JSONResponse({"code": 99991663, "msg": "Invalid access token for authorization."}, 400)
        if self.missing_scope:
            return JSONResponse({"code": 99991672, "msg": SCOPE_ERROR}, 400)
        if request.query_params.get("receive_id_type") != "chat_id":
            return JSONResponse({"code": 99992402, "msg": "field validation failed: receive_id_type"}, 400)
        body = await request.json()
        content = json.loads(body["content"])
        if body.get("msg_type") == "file":
            if content.get("file_key") not in self.uploads:
                return JSONResponse({"code": 234003, "msg": "File not found: file_key is invalid"}, 400)
            name, blob = self.uploads[content["file_key"]]
            self.files.append((str(body["receive_id"]), name, blob))
            return JSONResponse({"code": 0, "msg": "success", "data": {"message_id": f"om_file{len(self.files)}"}})
        text = str(content.get("text") or "")
        if not text or len(text) > 30000:
            return JSONResponse({"code": 230025, "msg": "The message content is empty or too long."}, 400)
        self.messages.append(FeishuMessage(str(body["receive_id"]), text))
        data = {"message_id": f"om_out{len(self.messages)}", "chat_id": body["receive_id"], "msg_type": "text"}
        return JSONResponse({"code": 0, "msg": "success", "data": data})

    async def upload_file(self, request: Request) -> JSONResponse:
        if request.headers.get("authorization") != "Bearer t-fake-tenant":
            return JSONResponse({"code": 99991663, "msg": "Invalid access token for authorization."}, 400)
        form = await request.form()
        upload = form.get("file")
        if form.get("file_type") not in FILE_TYPES or not form.get("file_name") or isinstance(upload, str | None):
            return JSONResponse({"code": 234001, "msg": "Invalid request param: file_type, file_name, file"}, 400)
        key = f"file_v3_{len(self.uploads) + 1}"
        self.uploads[key] = (str(form["file_name"]), await upload.read())
        return JSONResponse({"code": 0, "msg": "success", "data": {"file_key": key}})

    async def socket(self, socket: WebSocket) -> None:
        await socket.accept()
        self.connections += 1
        sequence = itertools.count(1)

        async def read() -> None:
            try:
                while True:
                    frame = Frame()
                    frame.ParseFromString(await socket.receive_bytes())
                    kind = next((h.value for h in frame.headers if h.key == "type"), "")
                    if frame.method == 0 and kind == "ping":
                        self.pings += 1
                        pong = Frame(SeqID=0, LogID=0, service=frame.service, method=0)
                        pong.headers.add(key="type", value="pong")
                        await socket.send_bytes(pong.SerializeToString())
                    elif frame.method == 1:
                        self.acks.append(json.loads(frame.payload or b"{}"))
            except WebSocketDisconnect:
                return

        async def send(event: dict[str, Any]) -> None:
            number = next(sequence)
            frame = Frame(SeqID=number, LogID=number, service=7, method=1)
            for key, value in (("type", "event"), ("message_id", f"m{number}"), ("trace_id", f"t{number}")):
                frame.headers.add(key=key, value=value)
            frame.headers.add(key="sum", value="1")
            frame.headers.add(key="seq", value="0")
            frame.payload = json.dumps(event, ensure_ascii=False).encode()
            await socket.send_bytes(frame.SerializeToString())

        await self.pump(socket, asyncio.create_task(read()), send, drop_code=1011)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/callback/ws/endpoint", self.endpoint, methods=["POST"]),
            Route("/open-apis/auth/v3/tenant_access_token/internal", self.tenant_token, methods=["POST"]),
            Route("/open-apis/im/v1/messages", self.create_message, methods=["POST"]),
            Route("/open-apis/im/v1/files", self.upload_file, methods=["POST"]),
            WebSocketRoute("/ws", self.socket),
        ]


@contextmanager
def fake_feishu() -> Iterator[FakeFeishu]:
    """Run a fake Feishu open platform on a free loopback port for the ``with`` block (``.url``: its apiBase)."""
    fake = FakeFeishu()
    with serving(fake):
        yield fake
