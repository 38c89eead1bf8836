"""Feishu / Lark through the maintained ``lark-oapi`` SDK: events over its long connection (``POST
{apiBase}/callback/ws/endpoint`` with the app's ``appId``/``appSecret``, then a WebSocket of protobuf frames that
the SDK parses, dispatches to the ``im.message.receive_v1`` handler and acknowledges), answers through the IM API
(``POST /open-apis/im/v1/messages``, the SDK fetching the tenant token). ``channels.feishu.apiBase`` (default
``https://open.feishu.cn``; ``https://open.larksuite.com`` for Lark) lets a test stand in for Feishu. The
connection loop is memmy's: the SDK's ``start()`` runs its own event loop (it cannot run inside ``memmy serve``'s)
and reconnects out of the supervisor's sight. Files the agent wrote are uploaded (``POST /open-apis/im/v1/files``)
and sent as ``file`` messages. Feishu shows no typing indicator for bots."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from memmy.agent.channels.base import Inbound, InboundHandler
from memmy.agent.channels.settings import ChannelSettings

log = logging.getLogger("memmy.channels.feishu")


async def _call(deliver: InboundHandler, inbound: Inbound) -> None:
    await deliver(inbound)


class FeishuError(RuntimeError):
    """Feishu answered an API call with an error (its code and message, e.g. a missing permission scope)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"Feishu refused the call: {code} {message}")
        self.code = code


CHECK_CHAT = "oc_memmy_connection_check"
# the file_type Feishu's upload wants by extension (anything else is a "stream")
FILE_TYPES = {
    ".pdf": "pdf",
    ".doc": "doc",
    ".docx": "doc",
    ".xls": "xls",
    ".xlsx": "xls",
    ".ppt": "ppt",
    ".pptx": "ppt",
}
NOT_IN_CHAT = (230001, 230002)  # the chat does not exist / the bot is not in it: the call itself was allowed


async def check(settings: ChannelSettings) -> str:
    """Reach Feishu with these credentials and the message scope; Feishu's own message (naming the permission
    scopes the app lacks) when it refuses."""
    channel = FeishuChannel(settings, Path("."))
    try:
        await channel.send_text(CHECK_CHAT, "memmy connection check")
    except FeishuError as exc:
        if exc.code not in NOT_IN_CHAT:
            raise
    return f"app {settings.options.get('appId', '')}"


class FeishuChannel:
    """One Feishu / Lark app bot over the long connection."""

    name = "feishu"

    def __init__(self, settings: ChannelSettings, home: Path) -> None:
        import lark_oapi as lark

        self.settings = settings
        self.text_limit = settings.text_limit
        app_id, secret = settings.options.get("appId", ""), settings.options.get("appSecret", "")
        self.api = lark.Client.builder().app_id(app_id).app_secret(secret).domain(settings.api_base).build()
        self.app_id, self.secret = app_id, secret
        self.deliver: InboundHandler | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def _received(self, event: Any) -> None:
        """The SDK's handler (called synchronously inside frame handling): hand the message to the chat's queue."""
        message, sender = event.event.message, event.event.sender
        text = ""
        if message.message_type == "text":
            with contextlib.suppress(ValueError, TypeError):
                text = str(json.loads(message.content or "{}").get("text") or "")
        inbound = Inbound(
            channel=self.name,
            chat_id=str(message.chat_id),
            user_id=str(sender.sender_id.open_id if sender and sender.sender_id else ""),
            text=text.strip(),
            message_id=str(message.message_id or ""),
        )
        if self.deliver is not None and self.loop is not None:
            self.loop.create_task(_call(self.deliver, inbound))

    async def run(self, deliver: InboundHandler) -> None:
        """Open a long connection and handle its frames until it ends (the supervisor reconnects with backoff)."""
        import lark_oapi as lark
        import websockets
        from lark_oapi.ws.client import Client as WsClient

        self.deliver, self.loop = deliver, asyncio.get_running_loop()
        handler = lark.EventDispatcherHandler.builder("", "").register_p2_im_message_receive_v1(self._received).build()
        client = WsClient(self.app_id, self.secret, event_handler=handler, domain=self.settings.api_base)
        url = await asyncio.to_thread(client._get_conn_url)  # the SDK's endpoint call: errors name the cause
        query = parse_qs(urlparse(url).query)
        async with websockets.connect(url) as socket:
            client._conn, client._conn_url = socket, url
            client._conn_id, client._service_id = query["device_id"][0], query["service_id"][0]
            pinger = asyncio.create_task(client._ping_loop())
            try:
                async for raw in socket:
                    await client._handle_message(raw)  # parse, dispatch to the handler, acknowledge
            finally:
                pinger.cancel()
                client._conn = None

    async def _send(self, chat_id: str, msg_type: str, content: dict[str, str]) -> None:
        from lark_oapi.api.im.v1 import CreateMessageRequest, CreateMessageRequestBody

        request = (
            CreateMessageRequest.builder()
            .receive_id_type("chat_id")
            .request_body(
                CreateMessageRequestBody.builder()
                .receive_id(chat_id)
                .msg_type(msg_type)
                .content(json.dumps(content, ensure_ascii=False))
                .build()
            )
            .build()
        )
        response = await self.api.im.v1.message.acreate(request)
        if not response.success():
            raise FeishuError(int(response.code or 0), str(response.msg))

    async def send_text(self, chat_id: str, text: str) -> None:
        """Send one message to the chat (Feishu's ``post`` rich text would need a conversion; text keeps it all)."""
        await self._send(chat_id, "text", {"text": text})

    async def send_file(self, chat_id: str, path: Path) -> None:
        """Upload a file the agent wrote (``POST /open-apis/im/v1/files``) and send it as a ``file`` message."""
        from lark_oapi.api.im.v1 import CreateFileRequest, CreateFileRequestBody

        kind = FILE_TYPES.get(path.suffix.lower(), "stream")
        body = CreateFileRequestBody.builder().file_type(kind).file_name(path.name).file(io.BytesIO(path.read_bytes()))
        response = await self.api.im.v1.file.acreate(CreateFileRequest.builder().request_body(body.build()).build())
        if not response.success() or response.data is None:
            raise FeishuError(int(response.code or 0), str(response.msg))
        await self._send(chat_id, "file", {"file_key": str(response.data.file_key)})

    async def typing(self, chat_id: str) -> None:
        """Feishu shows no typing indicator for bots."""
