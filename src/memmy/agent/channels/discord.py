"""Discord through discord.py: the bot logs in over REST, keeps the gateway WebSocket, and answers direct messages
and the channel messages it can read (the Message Content intent must be on in the developer portal). Discord
renders Markdown, so answers go out as written, split at 2,000 characters; typing is shown while the agent works;
files the agent wrote are attached. ``channels.discord.apiBase`` (default ``https://discord.com``; the REST API
is ``{apiBase}/api/v10`` and the gateway is the URL ``GET /gateway/bot`` answers) lets a test stand in for
Discord. discord.py's own reconnect loop is off: the supervisor reconnects with backoff and shows the drop."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from memmy.agent.channels.base import Attachment, Inbound, InboundHandler
from memmy.agent.channels.settings import ChannelSettings

log = logging.getLogger("memmy.channels.discord")

MAX_DOWNLOAD_BYTES = 10 * 1024 * 1024


async def check(settings: ChannelSettings) -> str:
    """Log in over REST (``GET /users/@me``) with the token; the bot's name."""
    import discord

    DiscordChannel(settings, Path("."))  # points the REST base at apiBase
    client = discord.Client(intents=discord.Intents.default())
    try:
        await client.login(settings.options.get("token", ""))
        return f"{client.user}" if client.user else "the bot"
    finally:
        await client.close()


class DiscordChannel:
    """One Discord bot."""

    name = "discord"

    def __init__(self, settings: ChannelSettings, home: Path) -> None:
        import discord.http

        self.settings = settings
        self.text_limit = settings.text_limit
        # discord.py reads the REST base from a class attribute: one Discord bot per process, as config allows.
        discord.http.Route.BASE = f"{settings.api_base}/api/v10"
        self.client: Any = None

    def _new_client(self, deliver: InboundHandler) -> Any:
        import discord

        intents = discord.Intents.default()
        intents.message_content = True
        channel = self

        class Bot(discord.Client):
            async def on_message(self, message: discord.Message) -> None:
                if self.user is not None and message.author.id == self.user.id:
                    return  # its own answers
                inbound = await channel._inbound(message)
                await deliver(inbound)

        return Bot(intents=intents)

    async def _inbound(self, message: Any) -> Inbound:
        attachments = []
        for item in message.attachments:
            if item.size > MAX_DOWNLOAD_BYTES:
                attachments.append(Attachment(item.filename + " (over the 10 MiB limit, not read)", "", b""))
            else:
                attachments.append(Attachment(item.filename, item.content_type or "", await item.read()))
        return Inbound(
            channel=self.name,
            chat_id=str(message.channel.id),
            user_id=str(message.author.id),
            user_name=str(message.author.name),
            text=message.content or "",
            message_id=str(message.id),
            attachments=tuple(attachments),
        )

    async def run(self, deliver: InboundHandler) -> None:
        """Log in and hold the gateway until it closes or the task is cancelled."""
        import yarl
        from discord.gateway import DiscordWebSocket

        self.client = self._new_client(deliver)
        try:
            await self.client.login(self.settings.options.get("token", ""))
            # The gateway is where GET /gateway/bot says (Discord's advice), not discord.py's built-in address:
            # the same for Discord, and what makes apiBase enough for a proxy or a test.
            _, url, _ = await self.client.http.get_bot_gateway()
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
            await self.client.connect(reconnect=False)
        finally:
            await self.client.close()

    def _channel(self, chat_id: str) -> Any:
        if self.client is None:
            raise RuntimeError("Discord is not connected")
        return self.client.get_partial_messageable(int(chat_id))

    async def send_text(self, chat_id: str, text: str) -> None:
        """Send one message (Discord renders the Markdown)."""
        await self._channel(chat_id).send(text)

    async def send_file(self, chat_id: str, path: Path) -> None:
        """Attach a file the agent made."""
        import discord

        await self._channel(chat_id).send(file=discord.File(path))

    async def typing(self, chat_id: str) -> None:
        """Show "typing…" for a few seconds."""
        await self._channel(chat_id).typing()
