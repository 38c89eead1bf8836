"""DingTalk through its maintained Stream-mode SDK (``dingtalk-stream``): the SDK opens the connection
(``POST {apiBase}/v1.0/gateway/connections/open`` with the app's ``clientId``/``clientSecret``), routes each frame
of the WebSocket to its robot handler and acknowledges it; robot messages arrive on the
``/v1.0/im/bot/messages/get`` topic and answers go back as Markdown through the message's own session webhook.
The connection loop is memmy's, not the SDK's ``start()``: that one retries forever inside and swallows
cancellation, so the supervisor could neither stop it nor show that it dropped. ``channels.dingtalk.apiBase`` (default
``https://api.dingtalk.com``) lets a test stand in for DingTalk. DingTalk shows no typing indicator for robots.
Files the agent wrote are uploaded (``POST {oapiBase}/media/upload``, ``channels.dingtalk.oapiBase`` default
``https://oapi.dingtalk.com``: the SDK's own upload has that host written in) and sent as the robot's file message
(``/v1.0/robot/oToMessages/batchSend`` in a 1:1 chat, ``/v1.0/robot/groupMessages/send`` in a group) with the
SDK's access token."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import httpx

from memmy.agent.channels.base import Inbound, InboundHandler
from memmy.agent.channels.settings import ChannelSettings

log = logging.getLogger("memmy.channels.dingtalk")
DEFAULT_OAPI_BASE = "https://oapi.dingtalk.com"  # the older API host, where media uploads go


async def check(settings: ChannelSettings) -> str:
    """Ask DingTalk to open a Stream connection with these credentials (nothing is connected)."""
    channel = DingTalkChannel(settings, Path("."))
    if not await asyncio.to_thread(channel.client.open_connection):
        raise ConnectionError("DingTalk did not open a connection (check clientId and clientSecret)")
    return f"app {settings.options.get('clientId', '')}"


class DingTalkChannel:
    """One DingTalk app robot over Stream mode."""

    name = "dingtalk"

    def __init__(self, settings: ChannelSettings, home: Path) -> None:
        import dingtalk_stream

        self.settings = settings
        self.text_limit = settings.text_limit
        # The SDK reads its endpoints from a class attribute and a module constant: one DingTalk app per process, as
        # config allows.
        dingtalk_stream.DingTalkStreamClient.OPEN_CONNECTION_API = f"{settings.api_base}/v1.0/gateway/connections/open"
        dingtalk_stream.stream.DINGTALK_OPENAPI_ENDPOINT = settings.api_base  # the access token's endpoint
        self.oapi_base = (settings.options.get("oapiBase") or DEFAULT_OAPI_BASE).rstrip("/")
        credential = dingtalk_stream.Credential(
            settings.options.get("clientId", ""), settings.options.get("clientSecret", "")
        )
        self.client = dingtalk_stream.DingTalkStreamClient(credential, logger=logging.getLogger("dingtalk_stream"))
        self.sdk = dingtalk_stream
        self.deliver: InboundHandler | None = None
        self.incoming: dict[str, Any] = {}  # conversation id -> its latest ChatbotMessage (the session webhook)
        channel = self

        class Handler(dingtalk_stream.ChatbotHandler):  # type: ignore[misc]
            async def process(self, callback: Any) -> tuple[int, str]:
                message = dingtalk_stream.ChatbotMessage.from_dict(callback.data)
                await channel._received(message)
                return dingtalk_stream.AckMessage.STATUS_OK, "OK"

        self.handler = Handler()
        self.client.register_callback_handler(dingtalk_stream.ChatbotMessage.TOPIC, self.handler)

    async def _received(self, message: Any) -> None:
        conversation = str(message.conversation_id or "")
        self.incoming[conversation] = message
        text = message.text.content if getattr(message, "text", None) is not None else ""
        if self.deliver is not None:
            await self.deliver(
                Inbound(
                    channel=self.name,
                    chat_id=conversation,
                    user_id=str(message.sender_staff_id or message.sender_id or ""),
                    user_name=str(message.sender_nick or ""),
                    text=(text or "").strip(),
                    message_id=str(message.message_id or ""),
                )
            )

    async def run(self, deliver: InboundHandler) -> None:
        """Open a connection and route its frames until it ends (the supervisor reconnects with backoff)."""
        import websockets

        self.deliver = deliver
        self.client.pre_start()
        connection = await asyncio.to_thread(self.client.open_connection)
        if not connection:  # the SDK logged DingTalk's answer
            raise ConnectionError("DingTalk did not open a connection (check clientId and clientSecret)")
        uri = f"{connection['endpoint']}?ticket={quote_plus(connection['ticket'])}"
        async with websockets.connect(uri) as socket:
            self.client.websocket = socket
            async for raw in socket:
                routed = await self.client.route_message(json.loads(raw))
                if routed == self.sdk.DingTalkStreamClient.TAG_DISCONNECT:
                    return

    async def send_text(self, chat_id: str, text: str) -> None:
        """Answer in the conversation through its session webhook, as Markdown."""
        incoming = self.incoming.get(chat_id)
        if incoming is None:
            raise RuntimeError(f"no DingTalk session webhook for conversation {chat_id}")
        title = text.strip().splitlines()[0][:40] if text.strip() else "memmy"
        answered = await asyncio.to_thread(self.handler.reply_markdown, title, text, incoming)
        if answered is None:  # the SDK logs the failure and returns None
            raise RuntimeError("DingTalk refused the reply")

    async def send_file(self, chat_id: str, path: Path) -> None:
        """Upload a file the agent wrote (``{oapiBase}/media/upload``) and send it as the robot's ``sampleFile``
        message: to the person in a 1:1 chat (``oToMessages/batchSend``), to the group otherwise."""
        incoming = self.incoming.get(chat_id)
        if incoming is None:
            raise RuntimeError(f"no DingTalk conversation {chat_id} to send a file to")
        token = await asyncio.to_thread(self.client.get_access_token)  # the SDK's, cached until it nearly expires
        if not token:
            raise RuntimeError("DingTalk gave no access token (the SDK logged why)")
        async with httpx.AsyncClient(timeout=60) as http:
            uploaded = await http.post(
                f"{self.oapi_base}/media/upload",
                params={"access_token": token},
                data={"type": "file"},
                files={"media": (path.name, path.read_bytes())},
            )
            media = uploaded.json()
            if media.get("errcode", 0) != 0 or "media_id" not in media:
                raise RuntimeError(f"DingTalk refused the upload: {media.get('errcode')} {media.get('errmsg')}")
            param = {"mediaId": media["media_id"], "fileName": path.name, "fileType": path.suffix.lstrip(".") or "file"}
            body: dict[str, Any] = {
                "robotCode": self.settings.options.get("clientId", ""),
                "msgKey": "sampleFile",
                "msgParam": json.dumps(param, ensure_ascii=False),
            }
            if str(incoming.conversation_type) == "2":
                route, body["openConversationId"] = "/v1.0/robot/groupMessages/send", chat_id
            else:
                route, body["userIds"] = "/v1.0/robot/oToMessages/batchSend", [incoming.sender_staff_id]
            sent = await http.post(
                f"{self.settings.api_base}{route}", json=body, headers={"x-acs-dingtalk-access-token": token}
            )
            if sent.status_code != 200:
                raise RuntimeError(f"DingTalk refused the file message: {sent.status_code} {sent.text[:200]}")

    async def typing(self, chat_id: str) -> None:
        """DingTalk shows no typing indicator for robots."""
