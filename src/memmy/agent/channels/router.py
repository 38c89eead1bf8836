"""From chat messages to agent turns: who may talk (allow-list and pairing), one agent session per chat
(``/new`` starts another), one ordered queue per chat (a message that arrives while a turn runs waits its turn,
never dropped), ``/stop`` and ``/status`` answered at once, typing shown while the agent works, and the answer
sent back split at the platform's limit with the files the agent wrote."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memmy.agent.asr import hear_voice_notes
from memmy.agent.attachments import MAX_FILES, AttachmentError, Converted, convert, message_text
from memmy.agent.channels.access import AccessBook
from memmy.agent.channels.base import ChannelAdapter, ChannelState, FileCache, Inbound
from memmy.agent.channels.settings import ChannelSettings
from memmy.agent.channels.text import split_message

log = logging.getLogger("memmy.channels")

TYPING_EVERY_S = 4.0
QUEUED = "Queued: it runs after the current turn; messages sent now wait too."
#: The newest stage timings a router (and the turns' worker) keeps for bench/channels.py.
TIMINGS_KEPT = 10_000
HELP = (
    "Send a message and the agent answers, with your memory.\n"
    "/new - start a new session in this chat\n/stop - stop the running turn\n"
    "/status - session, queue and memory state\n/pair CODE - pair with a code from `memmy channels pair`"
)


@dataclass
class Answer:
    """How a turn ended, as the chat sees it."""

    text: str
    status: str = "succeeded"
    files: list[Path] = field(default_factory=list)
    memory_ids: list[str] = field(default_factory=list)


class TurnRunner(Protocol):
    """Runs one agent turn in a named session (the agent runtime in the chat turns' worker process)."""

    async def run(
        self, session: str, text: str, *, source: str, tools: bool, parts: list[dict[str, Any]] | None = None
    ) -> Answer:
        """Run the turn to its end (cancellation stops it); ``parts``: images for a vision-capable model."""

    async def describe(self, session: str) -> str:
        """One line on the session for ``/status``."""

    async def close(self) -> None:
        """Deliver what is pending and release the sessions."""

    async def start(self) -> None:
        """Get ready for the first turn ahead of it (start the worker, load the provider's SDK)."""


def compose_prompt(
    message: Inbound, heard: dict[str, str] | None = None
) -> tuple[str, list[dict[str, Any]], list[str]]:
    """The user text the agent receives (documents turned into text, voice notes as ``heard`` them), the image parts
    for a vision-capable model, and a note for each file that could not be read (the reason a person can act on)."""
    converted: list[Converted] = []
    notes: list[str] = []
    spoken: list[str] = []
    for item in message.attachments[:MAX_FILES]:
        if item.mime.startswith("audio/"):  # heard None: no ASR slot; a failed transcription was already said
            if heard is None:
                notes.append(f"{item.name}: voice notes need a speech-to-text model (the ASR slot in Settings)")
            elif heard.get(item.name):
                spoken.append(f"[voice note] {heard[item.name]}")
            elif item.name in heard:
                notes.append(f"{item.name}: no speech was heard")
            continue
        if not item.data:
            notes.append(f"{item.name} was not read")
            continue
        try:
            converted.append(convert(item.name, item.data))
        except AttachmentError as exc:
            notes.append(f"{exc} (not read)")
    if len(message.attachments) > MAX_FILES:
        notes.append(f"only the first {MAX_FILES} files were read")
    parts = [item.image for item in converted if item.image is not None]
    said = "\n".join([message.text.strip(), *spoken]).strip()
    text = message_text(said, converted) if converted else said
    return text, parts, notes


def _generations(text: str) -> dict[str, int]:
    try:
        data = json.loads(text)
        return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (ValueError, TypeError):
        return {}


class SessionBook:
    """Which agent session each chat is in (``/new`` moves a chat to a fresh one); kept across restarts."""

    def __init__(self, home: Path) -> None:
        self.path = home / "channels" / "sessions.json"
        self.cache: FileCache[dict[str, int]] = FileCache()

    def _read(self) -> dict[str, int]:
        return dict(self.cache.read(self.path, _generations))

    def session(self, chat_key: str) -> str:
        """The chat's current agent session name."""
        generation = self._read().get(chat_key, 1)
        return f"channel:{chat_key}" + (f":{generation}" if generation > 1 else "")

    def renew(self, chat_key: str) -> str:
        """Start a new session for the chat; its name."""
        data = self._read()
        data[chat_key] = data.get(chat_key, 1) + 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.path)
        return self.session(chat_key)


@dataclass
class Lane:
    """One chat's queue and its running turn."""

    queue: asyncio.Queue[Inbound] = field(default_factory=asyncio.Queue)
    worker: asyncio.Task[None] | None = None
    turn: asyncio.Task[Answer] | None = None
    started: float = 0.0
    noticed: bool = False  # the "Queued" notice of this busy spell was said
    notice_due: str = ""  # the chat to say it to once its turn has gone to the agent ("": none due)


class ChatRouter:
    """Routes one channel's inbound messages to agent turns and the answers back."""

    def __init__(
        self,
        settings: ChannelSettings,
        adapter: ChannelAdapter,
        runner: TurnRunner,
        home: Path,
        state: ChannelState | None = None,
    ) -> None:
        self.settings = settings
        self.adapter = adapter
        self.runner = runner
        self.access = AccessBook(home)
        self.sessions = SessionBook(home)
        self.state = state or ChannelState(settings.name)
        self.lanes: dict[str, Lane] = {}
        self.notices: set[asyncio.Task[None]] = set()
        # (stage, seconds) the channel layer itself adds to a message, for bench/channels.py: "pick_to_turn" from
        # the chat's queue handing the message over to the agent turn starting, "answer_to_sent" from the turn's
        # answer to the platform having taken every part of it
        self.timings: deque[tuple[str, float]] = deque(maxlen=TIMINGS_KEPT)  # bounded: serve runs for weeks

    async def deliver(self, message: Inbound) -> None:
        """Take one inbound message: refuse strangers, answer commands, queue the rest for the chat's turn."""
        self.state.messages_in += 1
        text = message.text.strip()
        if text.startswith("/pair"):
            await self._pair(message, text)
            return
        if not self.access.allowed(self.settings.name, message.user_id, self.settings.allow_from):
            self.state.refused += 1
            log.info("%s: refused a message from user %s (not paired)", self.settings.name, message.user_id)
            await self._say(
                message.chat_id,
                "This bot is private. Its owner can let you in: `memmy channels pair "
                f"{self.settings.name}` prints a one-time code; send it here as /pair CODE.",
            )
            return
        command = text.split()[0].split("@")[0].lower() if text.startswith("/") else ""
        lane = self.lanes.setdefault(message.chat_key, Lane())
        if command == "/stop":
            stopped = lane.turn is not None and not lane.turn.done()
            if stopped and lane.turn is not None:
                lane.turn.cancel()
            await self._say(message.chat_id, "Stopped." if stopped else "Nothing is running.")
            return
        if command == "/status":
            await self._say(message.chat_id, await self._status(message, lane))
            return
        if command in ("/help", "/start"):
            await self._say(message.chat_id, HELP)
            return
        if lane.worker is not None and not lane.worker.done() and not lane.noticed:
            lane.noticed = True
            # Once per busy spell (the first message that has to wait; the ones after it join silently), and said
            # without waiting for the platform: the next inbound message must not queue behind this notice. Never
            # ahead of the turn it waits behind: when that turn has not gone to the agent yet (messages arriving
            # together), the chat's queue says it once it has.
            if lane.turn is None or lane.turn.done():
                lane.notice_due = message.chat_id
            else:
                self._say_later(message.chat_id, QUEUED)
        lane.queue.put_nowait(message)
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.create_task(self._drain(message.chat_key, lane))

    async def _pair(self, message: Inbound, text: str) -> None:
        parts = text.split()
        if len(parts) != 2:
            await self._say(message.chat_id, "Send /pair CODE with the code `memmy channels pair` printed.")
            return
        if self.access.redeem(self.settings.name, parts[1], message.user_id, message.user_name):
            log.info("%s: user %s paired", self.settings.name, message.user_id)
            await self._say(message.chat_id, "Paired. Send a message and the agent answers.")
        else:
            self.state.refused += 1
            await self._say(message.chat_id, "That code is not valid (codes work once, for 10 minutes).")

    async def _status(self, message: Inbound, lane: Lane) -> str:
        session = self.sessions.session(message.chat_key)
        running = lane.turn is not None and not lane.turn.done()
        lines = [
            f"Session: {session}",
            f"Running: {'yes, for %.0f s' % (time.monotonic() - lane.started) if running else 'no'}",
            f"Queued: {lane.queue.qsize()}",
            f"Tools: {'shell and files on' if self.settings.tools else 'shell and files off (chat sessions)'}",
        ]
        with contextlib.suppress(Exception):
            lines.append(await self.runner.describe(session))
        return "\n".join(lines)

    async def _drain(self, chat_key: str, lane: Lane) -> None:
        try:
            await self._drain_queue(lane)
        finally:
            lane.noticed = False  # the spell is over: the next message that has to wait is told again
            lane.notice_due = ""

    async def _drain_queue(self, lane: Lane) -> None:
        while not lane.queue.empty():
            message = lane.queue.get_nowait()
            try:
                await self._handle(message, lane)
            except Exception:  # one bad turn must not stop the chat's queue
                log.exception("%s: a turn failed in chat %s", self.settings.name, message.chat_id)
                with contextlib.suppress(Exception):
                    await self._say(message.chat_id, "Something went wrong with that turn; the chat goes on.")

    async def _handle(self, message: Inbound, lane: Lane) -> None:
        picked = time.monotonic()
        text = message.text.strip()
        if text.split()[:1] and text.split()[0].split("@")[0].lower() == "/new":
            session = self.sessions.renew(message.chat_key)
            await self._say(message.chat_id, f"New session started ({session}).")
            return
        voice = [(a.name, a.mime, a.data) for a in message.attachments[:MAX_FILES] if a.mime.startswith("audio/")]
        heard, notes = await hear_voice_notes(getattr(self.runner, "config", None), voice) if voice else (None, [])
        prompt, parts, more = compose_prompt(message, heard)
        for note in notes + more:
            await self._say(message.chat_id, note)
        if not prompt and not parts:
            return
        session = self.sessions.session(message.chat_key)
        lane.started = time.monotonic()
        self.timings.append(("pick_to_turn", lane.started - picked))
        lane.turn = asyncio.create_task(
            self.runner.run(session, prompt, source=self.settings.name, tools=self.settings.tools, parts=parts or None)
        )
        typing: asyncio.Task[None] | None = None
        try:
            # One pass of the event loop first: the turn goes to its worker before the typing call's HTTP work is
            # done, and so do the turns of the other chats whose messages came together (each typing call, its
            # connection included, is ~0.5 ms of this process: 20 chats at once, the last turn waited for 19 of
            # them); the same for the "Queued" notice
            await asyncio.sleep(0)
            typing = asyncio.create_task(self._keep_typing(message.chat_id))
            if lane.notice_due:
                self._say_later(lane.notice_due, QUEUED)
                lane.notice_due = ""
            answer = await lane.turn
        except asyncio.CancelledError:
            if lane.turn.cancelled() and not _current_cancelled():
                return  # /stop: the turn was cancelled, the chat goes on
            raise
        finally:
            if typing is not None:
                typing.cancel()
        answered = time.monotonic()
        await self._send_answer(message.chat_id, answer)
        self.timings.append(("answer_to_sent", time.monotonic() - answered))

    async def _send_answer(self, chat_id: str, answer: Answer) -> None:
        text = answer.text.strip() or ("(no answer)" if answer.status == "succeeded" else f"[{answer.status}]")
        for chunk in split_message(text, self.adapter.text_limit):
            await self._say(chat_id, chunk)
        for path in answer.files:
            try:
                await self.adapter.send_file(chat_id, path)
                self.state.messages_out += 1
            except Exception as exc:  # a file the platform refuses must not lose the answer
                log.warning("%s: could not send %s: %s", self.settings.name, path.name, exc)

    async def _say(self, chat_id: str, text: str) -> None:
        await self.adapter.send_text(chat_id, text)
        self.state.messages_out += 1

    def _say_later(self, chat_id: str, text: str) -> None:
        """Send a notice in a task of its own (kept until it is sent; a failure is logged, nothing else waits)."""

        async def say() -> None:
            try:
                await self._say(chat_id, text)
            except Exception as exc:  # a lost notice must not touch the chat's turns
                log.info("%s: a notice to chat %s was not sent: %s", self.settings.name, chat_id, exc)

        task = asyncio.create_task(say())
        self.notices.add(task)
        task.add_done_callback(self.notices.discard)

    async def _keep_typing(self, chat_id: str) -> None:
        with contextlib.suppress(Exception):
            while True:
                await self.adapter.typing(chat_id)
                await asyncio.sleep(TYPING_EVERY_S)

    async def close(self) -> None:
        """Stop every chat's worker and running turn (and the notices not sent yet)."""
        for notice in list(self.notices):
            notice.cancel()
        for lane in self.lanes.values():
            for task in (lane.turn, lane.worker):
                if task is not None and not task.done():
                    task.cancel()
        for lane in self.lanes.values():
            if lane.worker is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await lane.worker


def _current_cancelled() -> bool:
    task = asyncio.current_task()
    return bool(task is not None and task.cancelling())
