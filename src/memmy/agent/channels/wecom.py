"""WeCom (企业微信, WeChat Work) app bot: the documented substitute for WeChat, whose personal accounts have no
lawful bot API. WeCom has no maintained Python SDK, so this speaks its documented HTTP API with httpx:

- in: "receive messages" callback mode. WeCom POSTs each message, AES-encrypted in XML, to the app's callback URL
  with ``msg_signature``/``timestamp``/``nonce`` (and checks the URL once with a GET carrying ``echostr``). The
  adapter listens on ``channels.wecom.listen`` (default ``127.0.0.1:18991``) at ``/wecom/callback``; a reverse
  proxy or tunnel makes it reachable from WeCom. It checks the signature (SHA1 over the sorted token, timestamp,
  nonce and ciphertext), decrypts (AES-256-CBC, the key from ``encodingAESKey``, IV its first 16 bytes, PKCS#7
  to 32 bytes; the plaintext is 16 random bytes, a 4-byte length, the XML, the corp id), answers at once with an
  empty body (WeCom retries after 5 s otherwise) and drops retries by ``MsgId``.
- out: ``GET {apiBase}/cgi-bin/gettoken`` (the token kept until it nearly expires, fetched again when WeCom says it
  expired), ``POST /cgi-bin/message/send`` (``markdown``, at most 2,048 bytes a message) and ``POST
  /cgi-bin/media/upload`` + a ``file`` message for the files the agent wrote.

Why callback mode and not the newer "intelligent robot" long connection: the callback API and its encryption are
documented with official sample code in every language and have been stable for years, and an app (unlike a group
robot) can send files and message a person first. ``channels.wecom.apiBase`` (default ``https://qyapi.weixin.qq.com``)
lets a test stand in for WeCom. WeCom shows no typing indicator for apps."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import os
import re
import socket
import struct
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx

from memmy.agent.channels.base import Attachment, Inbound, InboundHandler
from memmy.agent.channels.settings import ChannelSettings
from memmy.agent.channels.text import split_utf8

log = logging.getLogger("memmy.channels.wecom")

DEFAULT_LISTEN = "127.0.0.1:18991"
CALLBACK_PATH = "/wecom/callback"
MAX_BYTES = 2048  # message/send: text and markdown content
TOKEN_EXPIRED = (40014, 42001)  # invalid / expired access_token: fetch a new one and send again
SEEN_KEEP = 2048
MAX_DOWNLOAD_BYTES = 10 * 1024 * 1024


class WeComError(RuntimeError):
    """WeCom answered an API call with an error code (its ``errcode`` and ``errmsg``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"WeCom refused the call: {code} {message}")
        self.code = code


class SignatureError(ValueError):
    """A callback whose signature or encryption does not check out (not from WeCom)."""


class WeComCrypt:
    """WeCom's message encryption (the documented ``WXBizMsgCrypt``): signature, decrypt, encrypt."""

    def __init__(self, token: str, encoding_aes_key: str, receive_id: str) -> None:
        try:
            self.key = base64.b64decode(encoding_aes_key + "=")
        except ValueError:
            self.key = b""
        if len(self.key) != 32:
            raise ValueError("channels.wecom.encodingAESKey must be the 43 characters WeCom shows")
        self.token, self.receive_id = token, receive_id

    def signature(self, timestamp: str, nonce: str, encrypted: str) -> str:
        """SHA1 of the sorted token, timestamp, nonce and ciphertext."""
        return hashlib.sha1("".join(sorted([self.token, timestamp, nonce, encrypted])).encode()).hexdigest()

    def decrypt(self, signature: str, timestamp: str, nonce: str, encrypted: str) -> str:
        """The plaintext of a signed ciphertext (``SignatureError`` when the signature or the corp id is wrong)."""
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        if not hmac.compare_digest(self.signature(timestamp, nonce, encrypted), signature):
            raise SignatureError("wrong msg_signature")
        try:
            decryptor = Cipher(algorithms.AES(self.key), modes.CBC(self.key[:16])).decryptor()
            padded = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
            plain = padded[: -padded[-1]] if 1 <= padded[-1] <= 32 else padded
            (length,) = struct.unpack(">I", plain[16:20])
            message, receiver = plain[20 : 20 + length], plain[20 + length :]
        except (ValueError, struct.error, IndexError) as exc:
            raise SignatureError(f"cannot decrypt: {exc}") from None
        if receiver.decode(errors="replace") != self.receive_id:
            raise SignatureError("the message is for another corp id")
        return message.decode()

    def encrypt(self, message: str, nonce: str, timestamp: str) -> tuple[str, str]:
        """``message`` encrypted for WeCom, and its signature (what a fake WeCom sends; a passive reply too)."""
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        body = os.urandom(16) + struct.pack(">I", len(message.encode())) + message.encode() + self.receive_id.encode()
        pad = 32 - len(body) % 32
        encryptor = Cipher(algorithms.AES(self.key), modes.CBC(self.key[:16])).encryptor()
        encrypted = base64.b64encode(encryptor.update(body + bytes([pad]) * pad) + encryptor.finalize()).decode()
        return encrypted, self.signature(timestamp, nonce, encrypted)


def _crypt(settings: ChannelSettings) -> WeComCrypt:
    options = settings.options
    return WeComCrypt(options.get("token", ""), options.get("encodingAESKey", ""), options.get("corpId", ""))


async def check(settings: ChannelSettings) -> str:
    """Fetch an access token with these credentials (WeCom's own message when it refuses) and check the AES key."""
    _crypt(settings)
    channel = WeComChannel(settings, Path("."))
    try:
        await channel.access_token()
    finally:
        await channel.http.aclose()
    return f"app {settings.options.get('agentId', '')} of corp {settings.options.get('corpId', '')}"


_CODE_FENCE = re.compile(r"^\s*```")


def markdown_to_wecom(text: str) -> str:
    """Markdown as WeCom's app ``markdown`` renders it: headings, bold, links, inline code and quotes stay; code
    blocks (which it does not render) become quoted lines, one per line of code."""
    out: list[str] = []
    in_code = False
    for line in text.split("\n"):
        if _CODE_FENCE.match(line):
            in_code = not in_code
            continue
        out.append(f"> {line}" if in_code and line.strip() else line)
    return "\n".join(out).strip()


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` (``channels.wecom.listen``) as a pair."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"channels.wecom.listen: expected host:port, got {value!r}")
    return host, int(port)


class WeComChannel:
    """One WeCom app: a callback listener for messages in, the HTTP API for answers out."""

    name = "wecom"

    def __init__(self, settings: ChannelSettings, home: Path) -> None:
        self.settings = settings
        self.text_limit = settings.text_limit
        self.crypt = _crypt(settings) if settings.options.get("encodingAESKey") else None
        self.http = httpx.AsyncClient(base_url=settings.api_base, timeout=30)
        self.token = ""
        self.token_expires = 0.0
        self.token_lock = asyncio.Lock()
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.deliver: InboundHandler | None = None
        self.handling: set[asyncio.Task[None]] = set()
        self.listen = parse_listen(settings.options.get("listen") or DEFAULT_LISTEN)

    async def access_token(self, renew: bool = False) -> str:
        """The app's access token, fetched when there is none, it nearly expired or ``renew`` asks."""
        async with self.token_lock:
            if renew or not self.token or time.monotonic() > self.token_expires:
                options = self.settings.options
                response = await self.http.get(
                    "/cgi-bin/gettoken",
                    params={"corpid": options.get("corpId", ""), "corpsecret": options.get("secret", "")},
                )
                data = response.json()
                if data.get("errcode", 0) != 0:
                    raise WeComError(int(data["errcode"]), str(data.get("errmsg", "")))
                self.token = str(data["access_token"])
                self.token_expires = time.monotonic() + float(data.get("expires_in", 7200)) - 300
            return self.token

    async def _api(self, method: str, path: str, extra: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
        """Call the API with the access token (fetched again once when WeCom says it expired)."""
        extra = extra or {}
        for attempt in (0, 1):
            token = await self.access_token(renew=attempt == 1)
            params = {"access_token": token, **extra}
            response = await self.http.request(method, path, params=params, **kwargs)
            data: dict[str, Any] = response.json()
            code = int(data.get("errcode", 0))
            if code in TOKEN_EXPIRED and attempt == 0:
                continue
            if code != 0:
                raise WeComError(code, str(data.get("errmsg", "")))
            return data
        raise AssertionError("unreachable")

    def _inbound(self, xml: str) -> Inbound | None:
        root = ElementTree.fromstring(xml)
        kind = root.findtext("MsgType") or ""
        user = root.findtext("FromUserName") or ""
        if kind not in ("text", "image", "file", "voice") or not user:
            return None  # events (enter_agent, subscribe …), locations, links
        msg_id = root.findtext("MsgId") or f"{user}:{root.findtext('CreateTime')}"
        if msg_id in self.seen:
            return None  # WeCom sent it again (a slow answer to its callback)
        self.seen[msg_id] = None
        while len(self.seen) > SEEN_KEEP:
            self.seen.popitem(last=False)
        attachments: tuple[Attachment, ...] = ()
        if kind != "text":
            media = root.findtext("MediaId") or ""
            name = {"image": "image.jpg", "voice": "voice.amr"}.get(kind, root.findtext("FileName") or "file")
            mime = {"image": "image/jpeg", "voice": "audio/amr"}.get(kind, "application/octet-stream")
            attachments = (Attachment(name, mime, media.encode()),)  # fetched by _fetch_media before delivery
        return Inbound(self.name, user, user, (root.findtext("Content") or "").strip(), user, msg_id, attachments)

    async def _fetch_media(self, message: Inbound) -> Inbound:
        fetched = []
        for item in message.attachments:
            data = b""
            with contextlib.suppress(httpx.HTTPError, WeComError, ValueError):
                token = await self.access_token()
                response = await self.http.get(
                    "/cgi-bin/media/get", params={"access_token": token, "media_id": item.data.decode()}
                )
                if response.headers.get("content-type", "").startswith("application/json"):
                    raise WeComError(int(response.json().get("errcode", -1)), "media/get")
                data = response.content if len(response.content) <= MAX_DOWNLOAD_BYTES else b""
            fetched.append(Attachment(item.name, item.mime, data))
        return Inbound(
            message.channel, message.chat_id, message.user_id, message.text, message.user_name,
            message.message_id, tuple(fetched),
        )  # fmt: skip

    async def _handle(self, message: Inbound) -> None:
        if message.attachments:
            message = await self._fetch_media(message)
        if self.deliver is not None:
            await self.deliver(message)

    def app(self) -> Any:
        """The callback endpoint: the URL check (GET) and encrypted messages (POST)."""
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import PlainTextResponse
        from starlette.routing import Route

        crypt = self.crypt
        if crypt is None:
            raise ValueError("channels.wecom.encodingAESKey is needed to read WeCom's callbacks")

        async def callback(request: Request) -> PlainTextResponse:
            query = request.query_params
            signature, timestamp, nonce = (query.get(k, "") for k in ("msg_signature", "timestamp", "nonce"))
            try:
                if request.method == "GET":
                    return PlainTextResponse(crypt.decrypt(signature, timestamp, nonce, query.get("echostr", "")))
                body = ElementTree.fromstring(await request.body())
                xml = crypt.decrypt(signature, timestamp, nonce, body.findtext("Encrypt") or "")
                message = self._inbound(xml)
            except (SignatureError, ElementTree.ParseError) as exc:
                log.warning("wecom: refused a callback: %s", exc)
                return PlainTextResponse("bad signature", status_code=403)
            if message is not None:
                task = asyncio.get_running_loop().create_task(self._handle(message))
                self.handling.add(task)
                task.add_done_callback(self.handling.discard)
            return PlainTextResponse("")  # answered at once; the reply goes through message/send

        return Starlette(routes=[Route(CALLBACK_PATH, callback, methods=["GET", "POST"])])

    async def run(self, deliver: InboundHandler) -> None:
        """Listen for callbacks until cancelled (a port in use raises: the supervisor retries with backoff)."""
        import uvicorn

        self.deliver = deliver
        await self.access_token()  # wrong credentials fail here, with WeCom's message
        host, port = self.listen
        server = _quiet_server(uvicorn.Config(self.app(), host=host, port=port, log_level="warning", lifespan="off"))
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))  # raises at once when the port is taken (uvicorn would exit the process)
            await server.serve(sockets=[sock])
        except asyncio.CancelledError:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.shutdown(sockets=[sock]), 5)
            raise
        finally:
            sock.close()
        raise ConnectionError("the callback listener stopped")

    async def send_text(self, chat_id: str, text: str) -> None:
        """Send one answer to the person as WeCom markdown, in parts of at most 2,048 bytes."""
        agent_id = self.settings.options.get("agentId", "")
        for part in split_utf8(markdown_to_wecom(text), MAX_BYTES):
            body = {"touser": chat_id, "msgtype": "markdown", "agentid": agent_id, "markdown": {"content": part}}
            await self._api("POST", "/cgi-bin/message/send", json=body)

    async def send_file(self, chat_id: str, path: Path) -> None:
        """Upload a file the agent wrote (``media/upload``) and send it as a ``file`` message."""
        uploaded = await self._api(
            "POST", "/cgi-bin/media/upload", {"type": "file"}, files={"media": (path.name, path.read_bytes())}
        )
        body = {
            "touser": chat_id,
            "msgtype": "file",
            "agentid": self.settings.options.get("agentId", ""),
            "file": {"media_id": uploaded["media_id"]},
        }
        await self._api("POST", "/cgi-bin/message/send", json=body)

    async def typing(self, chat_id: str) -> None:
        """WeCom shows no typing indicator for apps."""


def _quiet_server(config: Any) -> Any:
    """uvicorn's server without its signal handlers (``memmy serve`` owns SIGINT/SIGTERM in this process)."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    return QuietServer(config)
