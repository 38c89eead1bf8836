"""iMessage through BlueBubbles server, the maintained, documented bridge (bluebubbles.app, REST API v1): a Mac
signed in to Messages runs BlueBubbles server, and memmy reaches it at ``channels.imessage.apiBase`` (default
``http://127.0.0.1:1234``, the server's default port on the Mac itself; another Mac's address works from any OS)
with the server's ``password``. Why BlueBubbles and not reading ``chat.db`` + AppleScript: its API is documented and
versioned, it downloads attachments and sends files, and it needs no Full Disk Access for memmy itself.

- in: ``POST /api/v1/message/query`` polled every second for messages after the last one seen (``sort: ASC``,
  with their chat, handle and attachments), the position kept on disk so a restart neither repeats nor loses
  one; attachments from ``GET /api/v1/attachment/{guid}/download``.
- out: ``POST /api/v1/message/text`` (Messages shows plain text: Markdown is flattened) and ``POST
  /api/v1/message/attachment`` (multipart) for the files the agent wrote. Typing indicators need BlueBubbles'
  Private API helper; memmy does not ask for it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import httpx

from memmy.agent.channels.base import Attachment, Inbound, InboundHandler, keep_position, read_position
from memmy.agent.channels.settings import ChannelSettings
from memmy.agent.channels.text import markdown_to_plain

log = logging.getLogger("memmy.channels.imessage")

POLL_EVERY_S = 1.0
MAX_DOWNLOAD_BYTES = 10 * 1024 * 1024
SEEN_KEEP = 2048


class BlueBubblesError(RuntimeError):
    """The BlueBubbles server answered with an error (its status and message)."""


async def check(settings: ChannelSettings) -> str:
    """Ask the BlueBubbles server about itself (``GET /api/v1/server/info``) with this password."""
    channel = IMessageChannel(settings, Path("."))
    try:
        info = await channel.call("GET", "/api/v1/server/info")
    finally:
        await channel.http.aclose()
    data = info.get("data") or {}
    return f"BlueBubbles {data.get('server_version', '?')} on macOS {data.get('os_version', '?')}"


class IMessageChannel:
    """One Mac's Messages through its BlueBubbles server."""

    name = "imessage"

    def __init__(self, settings: ChannelSettings, home: Path, poll_every_s: float = POLL_EVERY_S) -> None:
        self.settings = settings
        self.text_limit = settings.text_limit
        self.poll_every_s = poll_every_s
        self.position_file = home / "channels" / "imessage.after"
        self.http = httpx.AsyncClient(base_url=settings.api_base, timeout=30)
        self.seen: OrderedDict[str, None] = OrderedDict()

    async def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """One API call with the server password; its JSON (``BlueBubblesError`` when the status is not 200)."""
        params = {"password": self.settings.options.get("password", ""), **kwargs.pop("params", {})}
        response = await self.http.request(method, path, params=params, **kwargs)
        try:
            data: dict[str, Any] = response.json()
        except ValueError:
            data = {"status": response.status_code, "message": response.text[:200]}
        if response.status_code != 200 or int(data.get("status", 200)) != 200:
            detail = data.get("error", {}).get("message") if isinstance(data.get("error"), dict) else None
            raise BlueBubblesError(f"BlueBubbles: {data.get('status')} {detail or data.get('message', '')}")
        return data

    async def run(self, deliver: InboundHandler) -> None:
        """Poll for new messages until cancelled; a failed call raises (the supervisor reconnects with backoff)."""
        await self.call("GET", "/api/v1/server/info")  # a wrong password or an unreachable Mac fails here
        after = read_position(self.position_file)
        if after is None:  # first start: only what arrives from now on, by the Mac's clock (its newest message)
            newest = {"limit": 1, "offset": 0, "sort": "DESC"}
            found = (await self.call("POST", "/api/v1/message/query", json=newest)).get("data") or []
            after = int(found[0].get("dateCreated") or 0) if found else 0
        keep_position(self.position_file, after)
        while True:
            body = {"limit": 100, "offset": 0, "sort": "ASC", "after": after, "with": ["chat", "handle", "attachment"]}
            found = (await self.call("POST", "/api/v1/message/query", json=body)).get("data") or []
            for message in found:
                created = int(message.get("dateCreated") or 0)
                guid = str(message.get("guid") or "")
                if created > after:
                    after = created
                    # kept before handling: a crash loses at most the turn in flight
                    keep_position(self.position_file, after)
                if guid in self.seen or message.get("isFromMe"):
                    continue
                self.seen[guid] = None
                while len(self.seen) > SEEN_KEEP:
                    self.seen.popitem(last=False)
                inbound = await self._inbound(message)
                if inbound is not None:
                    await deliver(inbound)
            await asyncio.sleep(self.poll_every_s)

    async def _inbound(self, message: dict[str, Any]) -> Inbound | None:
        chats = message.get("chats") or []
        handle = message.get("handle") or {}
        if not chats or not handle.get("address"):
            return None
        attachments = []
        for item in message.get("attachments") or []:
            name = str(item.get("transferName") or "attachment")
            mime = str(item.get("mimeType") or "application/octet-stream")
            data = b""
            if int(item.get("totalBytes") or 0) <= MAX_DOWNLOAD_BYTES:
                params = {"password": self.settings.options.get("password", "")}
                response = await self.http.get(f"/api/v1/attachment/{item.get('guid')}/download", params=params)
                data = response.content if response.status_code == 200 else b""
            attachments.append(Attachment(name, mime, data))
        address = str(handle["address"])
        return Inbound(
            channel=self.name,
            chat_id=str(chats[0].get("guid")),
            user_id=address,
            user_name=address,
            text=str(message.get("text") or "").replace("\ufffc", "").strip(),  # the attachment placeholder
            message_id=str(message.get("guid") or ""),
            attachments=tuple(attachments),
        )

    async def send_text(self, chat_id: str, text: str) -> None:
        """Send one message to the chat, Markdown flattened to plain text."""
        body = {"chatGuid": chat_id, "tempGuid": f"temp-{uuid.uuid4()}", "message": markdown_to_plain(text)}
        await self.call("POST", "/api/v1/message/text", json=body)

    async def send_file(self, chat_id: str, path: Path) -> None:
        """Send a file the agent wrote as an attachment."""
        form = {"chatGuid": chat_id, "tempGuid": f"temp-{uuid.uuid4()}", "name": path.name}
        files = {"attachment": (path.name, path.read_bytes())}
        await self.call("POST", "/api/v1/message/attachment", data=form, files=files)

    async def typing(self, chat_id: str) -> None:
        """No typing indicator (it needs BlueBubbles' Private API helper)."""
