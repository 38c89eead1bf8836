"""A small WeCom (企业微信) server on loopback for the channel tests, speaking the documented wire format
(developer.work.weixin.qq.com): ``GET /cgi-bin/gettoken?corpid&corpsecret`` answers an ``access_token``;
``POST /cgi-bin/message/send?access_token`` takes ``markdown``/``text``/``file`` messages (content over 2,048 bytes
refused with errcode 45002, as WeCom does); ``POST /cgi-bin/media/upload?access_token&type=file`` takes a
multipart ``media`` and answers a ``media_id``. Messages in go the way WeCom sends them: AES-encrypted XML POSTed
to the app's callback URL with ``msg_signature``/``timestamp``/``nonce`` (encrypted with memmy's
:class:`~memmy.agent.channels.wecom.WeComCrypt`, itself checked against WeCom's published example).

Tests send with :meth:`FakeWeCom.say` (and ``again=`` to repeat a ``MsgId`` as WeCom does after a slow answer),
read answers in :attr:`FakeWeCom.messages`, expire the access token with :meth:`expire_token`."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from memmy.agent.channels.wecom import WeComCrypt
from tests.fake_platform import PlatformFake, serving

ENCODING_AES_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"  # the example key of WeCom's documentation


@dataclass
class WeComMessage:
    """One message the app sent."""

    touser: str
    msgtype: str
    text: str
    at: float = field(default_factory=time.monotonic)


class FakeWeCom(PlatformFake):
    """The fake's state; helpers for the test's thread, asyncio inside the server."""

    def __init__(self) -> None:
        super().__init__()
        self.corp_id = "ww_fake_corp"
        self.agent_id = "1000002"
        self.secret = "fake-wecom-app-secret"
        self.token = "fakeCallbackToken"
        self.aes_key = ENCODING_AES_KEY
        self.callback = ""  # the app's callback URL (set by the test: where memmy listens)
        self.messages: list[WeComMessage] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # media_id -> (filename, bytes)
        self.tokens_issued = 0
        self.connections = 0
        self._ids = itertools.count(1)
        self._access = ""
        self.last_msg_id = ""

    @property
    def crypt(self) -> WeComCrypt:
        return WeComCrypt(self.token, self.aes_key, self.corp_id)

    def say(self, user: str, text: str, again: str | None = None, forged: bool = False) -> httpx.Response:
        """POST a text message from ``user`` to the callback, as WeCom does; ``again``: resend that MsgId."""
        msg_id = self.last_msg_id = again or f"7{next(self._ids):018d}"
        xml = (
            f"<xml><ToUserName><![CDATA[{self.corp_id}]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName>"
            f"<CreateTime>{int(time.time())}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
            f"<Content><![CDATA[{text}]]></Content><MsgId>{msg_id}</MsgId><AgentID>{self.agent_id}</AgentID></xml>"
        )
        timestamp, nonce = str(int(time.time())), f"n{msg_id[-6:]}"
        encrypted, signature = self.crypt.encrypt(xml, nonce, timestamp)
        if forged:
            signature = "0" * 40
        body = (
            f"<xml><ToUserName><![CDATA[{self.corp_id}]]></ToUserName><Encrypt><![CDATA[{encrypted}]]></Encrypt>"
            f"<AgentID><![CDATA[{self.agent_id}]]></AgentID></xml>"
        )
        params = {"msg_signature": signature, "timestamp": timestamp, "nonce": nonce}
        return httpx.post(self.callback, params=params, content=body.encode(), timeout=10)

    def verify_url(self, echo: str) -> httpx.Response:
        """The GET WeCom sends when the callback URL is saved in the admin console."""
        timestamp, nonce = str(int(time.time())), "verify1"
        encrypted, signature = self.crypt.encrypt(echo, nonce, timestamp)
        params = {"msg_signature": signature, "timestamp": timestamp, "nonce": nonce, "echostr": encrypted}
        return httpx.get(self.callback, params=params, timeout=10)

    def expire_token(self) -> None:
        """Make the current access token expired (errcode 42001 on its next use)."""
        self._access = ""

    def texts(self, user: str) -> list[str]:
        """What the app sent to one person, in order."""
        return [m.text for m in self.messages if m.touser == user]

    def outbox(self) -> list[Any]:
        return [(m.touser, m.msgtype, m.text[:80]) for m in self.messages]

    async def gettoken(self, request: Request) -> JSONResponse:
        query = request.query_params
        if query.get("corpid") != self.corp_id:
            return JSONResponse({"errcode": 40013, "errmsg": "invalid corpid"})
        if query.get("corpsecret") != self.secret:
            return JSONResponse({"errcode": 40001, "errmsg": "invalid credential, hint: [corpsecret]"})
        self.tokens_issued += 1
        self.connections += 1
        self._access = f"access-{self.tokens_issued}"
        return JSONResponse({"errcode": 0, "errmsg": "ok", "access_token": self._access, "expires_in": 7200})

    def _token_error(self, request: Request) -> JSONResponse | None:
        token = request.query_params.get("access_token", "")
        if not token:
            return JSONResponse({"errcode": 41001, "errmsg": "access_token missing"})
        if token != self._access:
            return JSONResponse({"errcode": 42001, "errmsg": "access_token expired"})
        return None

    async def send(self, request: Request) -> JSONResponse:
        refused = self._token_error(request)
        if refused is not None:
            return refused
        body = await request.json()
        kind = body.get("msgtype")
        if str(body.get("agentid")) != self.agent_id or not body.get("touser"):
            return JSONResponse({"errcode": 40056, "errmsg": "invalid agentid"})
        if kind == "file":
            media = str(body["file"]["media_id"])
            if media not in self.files:
                return JSONResponse({"errcode": 40007, "errmsg": "invalid media_id"})
            text = self.files[media][0]
        elif kind in ("markdown", "text"):
            text = str(body[kind]["content"])
            if not text or len(text.encode()) > 2048:
                return JSONResponse({"errcode": 45002, "errmsg": "content size out of limit"})
        else:
            return JSONResponse({"errcode": 40008, "errmsg": "invalid message type"})
        self.messages.append(WeComMessage(str(body["touser"]), str(kind), text))
        return JSONResponse({"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": f"m{len(self.messages)}"})

    async def upload(self, request: Request) -> JSONResponse:
        refused = self._token_error(request)
        if refused is not None:
            return refused
        form = await request.form()
        media = form.get("media")
        if request.query_params.get("type") != "file" or media is None or isinstance(media, str):
            return JSONResponse({"errcode": 40004, "errmsg": "invalid media type"})
        media_id = f"media{len(self.files) + 1}"
        self.files[media_id] = (str(media.filename), await media.read())
        return JSONResponse({"errcode": 0, "errmsg": "ok", "type": "file", "media_id": media_id, "created_at": "1"})

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/cgi-bin/gettoken", self.gettoken, methods=["GET"]),
            Route("/cgi-bin/message/send", self.send, methods=["POST"]),
            Route("/cgi-bin/media/upload", self.upload, methods=["POST"]),
        ]


@contextmanager
def fake_wecom() -> Iterator[FakeWeCom]:
    """Run a fake WeCom API on a free loopback port for the ``with`` block (``.url``: its apiBase)."""
    fake = FakeWeCom()
    with serving(fake):
        yield fake
