"""Telegram through python-telegram-bot's own client (``telegram.Bot``): long polling with ``getUpdates``, the
offset kept on disk so a restart neither loses nor repeats a message, ``sendMessage`` in Telegram's HTML parse
mode (plain text when Telegram refuses the markup), ``sendChatAction`` for typing, documents in and out. The API
base is ``channels.telegram.apiBase`` (default ``https://api.telegram.org``; requests go to
``{apiBase}/bot{token}/{method}``), so a self-hosted Bot API server or a test stands in for Telegram."""

from __future__ import annotations

import asyncio
import logging
import re
import warnings
from pathlib import Path
from typing import Any

from memmy.agent.channels.base import Attachment, Inbound, InboundHandler, keep_position, read_position
from memmy.agent.channels.settings import ChannelSettings
from memmy.agent.channels.text import markdown_to_telegram_html

log = logging.getLogger("memmy.channels.telegram")
BOT_PATH = re.compile(r"/bot\d+:[A-Za-z0-9_-]+")


class _HideBotToken(logging.Filter):
    """httpx logs every request URL at INFO, and a Bot API URL carries the token: log ``/bot<token>`` instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg = record.msg % record.args
            record.args = ()
        record.msg = BOT_PATH.sub("/bot<token>", str(record.msg))
        return True


_HIDE = _HideBotToken()
# A logger's filters see only its own records, not its children's: every logger that prints a Bot API URL.
TOKEN_LOGGERS = ("httpx", "httpcore", "telegram", "telegram.Bot", "telegram.HTTPXRequest", "telegram.BaseRequest")

POLL_TIMEOUT_S = 25
READ_TIMEOUT_S = 10  # beyond the long poll's own time
READ_BETWEEN_PASSES = 10  # updates of a batch's later rounds read between two passes of the event loop
SEND_ATTEMPTS = 4
MAX_DOWNLOAD_BYTES = 10 * 1024 * 1024


def chat_rounds(batch: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A batch of updates in the rounds they are handed over in: each chat's first update, then each chat's second,
    and so on (an update with no chat goes in the first). Each chat keeps its own order; a chat's first message, the
    one that starts a turn, is not held back behind other chats' messages that only join a queue, nor a chat's next
    message behind one busy chat's dozens (a burst after an outage)."""
    rounds: list[list[dict[str, Any]]] = []
    seen: dict[object, int] = {}
    for update in batch:
        message = update.get("message")
        chat = message.get("chat") if isinstance(message, dict) else None
        chat = chat.get("id") if isinstance(chat, dict) else None
        index = seen.get(chat, -1) + 1 if chat is not None else 0
        if chat is not None:
            seen[chat] = index
        if index == len(rounds):
            rounds.append([])
        rounds[index].append(update)
    return rounds


async def check(settings: ChannelSettings) -> str:
    """Ask Telegram who the bot is (``getMe``) with these credentials."""
    from telegram import Bot

    base = settings.api_base
    async with Bot(settings.options.get("token", ""), base_url=f"{base}/bot", base_file_url=f"{base}/file/bot") as bot:
        return f"@{bot.username}"


class TelegramChannel:
    """One bot, polled for updates."""

    name = "telegram"

    def __init__(self, settings: ChannelSettings, home: Path, poll_timeout_s: int = POLL_TIMEOUT_S) -> None:
        from telegram import Bot
        from telegram.request import HTTPXRequest
        from telegram.warnings import PTBUserWarning

        # getUpdates goes through the documented ``do_api_request`` for its raw batch (see _poll), which reminds
        # that ``get_updates`` exists
        warnings.filterwarnings("ignore", r"Please use 'Bot\.getUpdates'", PTBUserWarning)

        for name in TOKEN_LOGGERS:
            if _HIDE not in logging.getLogger(name).filters:
                logging.getLogger(name).addFilter(_HIDE)
        self.settings = settings
        self.text_limit = settings.text_limit
        self.poll_timeout_s = poll_timeout_s
        self.offset_file = home / "channels" / "telegram.offset"
        base = settings.api_base
        token = settings.options.get("token", "")
        self.bot = Bot(
            token,
            base_url=f"{base}/bot",
            base_file_url=f"{base}/file/bot",
            # 20 chats at once each hold a connection for typing and one for the answer: with 16, answers waited
            # for a free connection (bench/channels.py: the layer's answer -> sent p95 110-180 ms, 57-136 with 64)
            request=HTTPXRequest(connection_pool_size=64, read_timeout=30, connect_timeout=10),
            get_updates_request=HTTPXRequest(read_timeout=poll_timeout_s + READ_TIMEOUT_S, connect_timeout=10),
        )

    async def run(self, deliver: InboundHandler) -> None:
        """Poll until cancelled; a network failure raises (the supervisor reconnects with backoff)."""
        await self.bot.initialize()  # getMe: a wrong token fails here, with Telegram's own message
        try:
            await self.bot.delete_webhook()
            while True:
                batch = await self._poll()
                last = max((u["update_id"] for u in batch if isinstance(u.get("update_id"), int)), default=None)
                if last is not None:
                    # The offset is kept (once a batch) before the messages are handed over: a crash then loses
                    # at most the turns in flight instead of answering every message of the batch twice.
                    keep_position(self.offset_file, last + 1)
                rounds = chat_rounds(batch)
                for data in rounds[0] if rounds else []:  # ~0.2 ms each, one after another: their turns start
                    await self._hand_over(data, deliver)  # together, each before any typing call
                for index, data in enumerate(update for later in rounds[1:] for update in later):
                    if index % READ_BETWEEN_PASSES == 0:
                        # a pass of the event loop every few updates (~1.5 ms): the turns started above go on to
                        # the agent (their requests to the worker, then their typing calls), and answers go out,
                        # while the rest of the batch is read
                        await asyncio.sleep(0)
                    await self._hand_over(data, deliver)
        finally:
            await self.bot.shutdown()

    async def _hand_over(self, data: dict[str, Any], deliver: InboundHandler) -> None:
        """Read one update into python-telegram-bot's ``Update`` and deliver its message."""
        from telegram import Update

        try:
            update = Update.de_json(data, self.bot)
        except Exception as exc:  # one update python-telegram-bot cannot read must not stop the rest of the batch
            log.warning("telegram: skipped update %s (could not be read: %s)", data.get("update_id"), exc)
            return
        message = await self._inbound(update)
        if message is not None:
            await deliver(message)

    async def _poll(self) -> list[dict[str, Any]]:
        """One ``getUpdates`` long poll: the batch as Telegram sent it (JSON objects, read into python-telegram-bot's
        ``Update`` one at a time as each is handed over; ``get_updates`` reads all of them first, ~0.15 ms an
        update: a batch of 100 held its first message back 15 ms, and the other bot's batch behind it)."""
        batch = await self.bot.do_api_request(
            "getUpdates",
            {"offset": read_position(self.offset_file), "timeout": self.poll_timeout_s, "allowed_updates": ["message"]},
            read_timeout=self.poll_timeout_s + READ_TIMEOUT_S,
        )
        return [update for update in batch if isinstance(update, dict)] if isinstance(batch, list) else []

    async def _inbound(self, update: Any) -> Inbound | None:
        message = update.message
        if message is None or message.from_user is None:
            return None
        attachments: list[Attachment] = []
        file_ref: Any = None
        name, mime = "", ""
        if message.document is not None:
            file_ref, name = message.document, message.document.file_name or "document"
            mime = message.document.mime_type or "application/octet-stream"
        elif message.photo:
            file_ref, name, mime = message.photo[-1], "photo.jpg", "image/jpeg"
        elif message.voice is not None:
            file_ref, name, mime = message.voice, "voice.ogg", message.voice.mime_type or "audio/ogg"
        if file_ref is not None:
            size = getattr(file_ref, "file_size", None) or 0
            if size > MAX_DOWNLOAD_BYTES:
                name += f" (over the {MAX_DOWNLOAD_BYTES // 1024 // 1024} MiB limit, not read)"
                attachments.append(Attachment(name, mime, b""))
            else:
                found = await file_ref.get_file()
                attachments.append(Attachment(name, mime, bytes(await found.download_as_bytearray())))
        return Inbound(
            channel=self.name,
            chat_id=str(message.chat.id),
            user_id=str(message.from_user.id),
            user_name=message.from_user.username or message.from_user.full_name or "",
            text=message.text or message.caption or "",
            message_id=str(message.message_id),
            attachments=tuple(attachments),
        )

    async def _retrying(self, call: Any) -> Any:
        from telegram.error import BadRequest, NetworkError, RetryAfter

        for attempt in range(SEND_ATTEMPTS):
            try:
                return await call()
            except BadRequest:
                raise  # Telegram read the request and said no: sending it again would not change that
            except RetryAfter as exc:
                delay = exc.retry_after
                await asyncio.sleep(min(30.0, float(delay if isinstance(delay, int | float) else 1.0)))
            except NetworkError as exc:
                if attempt == SEND_ATTEMPTS - 1:
                    raise
                log.info("telegram send failed (%s); trying again", self.settings.scrub(str(exc)))
                await asyncio.sleep(0.5 * 2**attempt)
        return None

    async def send_text(self, chat_id: str, text: str) -> None:
        """Send one message, as HTML; as plain text when Telegram cannot parse the markup."""
        from telegram.constants import ParseMode
        from telegram.error import BadRequest

        try:
            await self._retrying(
                lambda: self.bot.send_message(chat_id, markdown_to_telegram_html(text), parse_mode=ParseMode.HTML)
            )
        except BadRequest as exc:
            log.info("telegram refused the markup (%s); sending plain text", self.settings.scrub(str(exc)))
            await self._retrying(lambda: self.bot.send_message(chat_id, text))

    async def send_file(self, chat_id: str, path: Path) -> None:
        """Send a file the agent made as a document."""
        data = path.read_bytes()
        await self._retrying(lambda: self.bot.send_document(chat_id, document=data, filename=path.name))

    async def typing(self, chat_id: str) -> None:
        """Show "typing…" for a few seconds."""
        from telegram.constants import ChatAction

        await self.bot.send_chat_action(chat_id, ChatAction.TYPING)
