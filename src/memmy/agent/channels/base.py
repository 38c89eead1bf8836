"""The channel contract: what an inbound chat message is, what a platform adapter must do, and its status."""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar


@dataclass(frozen=True)
class Attachment:
    """A file that came with a message, already downloaded: its name, MIME type and bytes."""

    name: str
    mime: str
    data: bytes


@dataclass(frozen=True)
class Inbound:
    """One message from a chat: who sent it, where, and what it says."""

    channel: str
    chat_id: str
    user_id: str
    text: str
    user_name: str = ""
    message_id: str = ""
    attachments: tuple[Attachment, ...] = ()

    @property
    def chat_key(self) -> str:
        """The chat's key across channels (``telegram:12345``)."""
        return f"{self.channel}:{self.chat_id}"


InboundHandler = Callable[[Inbound], Awaitable[None]]
T = TypeVar("T")


class FileCache(Generic[T]):
    """A small JSON file read once per change (its mtime and size), not on every message: the access book and the
    chats' sessions are read for each message and written rarely, sometimes by another process (``memmy channels
    pair``)."""

    def __init__(self) -> None:
        self.stamp: tuple[int, int] | None = None
        self.value: T | None = None

    def read(self, path: Path, parse: Callable[[str], T]) -> T:
        """``parse`` of the file's text (of ``""`` when it is missing), parsed again only after it changed."""
        try:
            found = path.stat()
            stamp: tuple[int, int] | None = (found.st_mtime_ns, found.st_size)
        except OSError:
            stamp = None
        if self.value is None or stamp != self.stamp:
            try:
                text = path.read_text(encoding="utf-8") if stamp is not None else ""
            except OSError:
                text = ""
            self.value, self.stamp = parse(text), stamp
        return self.value


def freeze_startup_heap() -> None:
    """Leave what start-up loaded (the SDKs, the agent's modules: ~150,000 objects) out of the garbage collector's
    full passes from now on (``gc.freeze``, after one collection so no garbage is kept). A full pass over that heap
    stopped a chat turns' worker for ~60 ms, and the channels' process for ~35 ms, every few hundred messages: every
    chat's message waiting at that moment waited that long too. What later becomes garbage is collected as before."""
    gc.collect()
    gc.freeze()


def read_position(path: Path) -> int | None:
    """A polling channel's position kept on disk (Telegram's update offset, iMessage's last message time)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def keep_position(path: Path, position: int) -> None:
    """Write the position atomically (a crash leaves the old one or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(position))
    tmp.replace(path)


class ChannelAdapter(Protocol):
    """A platform connection. ``run`` receives messages until it is cancelled or the connection drops (then it
    raises, and the supervisor starts it again with backoff)."""

    name: str
    text_limit: int

    async def run(self, deliver: InboundHandler) -> None:
        """Connect, hand every inbound message to ``deliver``, return or raise when the connection ends."""

    async def send_text(self, chat_id: str, text: str) -> None:
        """Send one message (already within ``text_limit``, in Markdown the adapter converts)."""

    async def send_file(self, chat_id: str, path: Path) -> None:
        """Send a file the agent made."""

    async def typing(self, chat_id: str) -> None:
        """Show the platform's typing indicator once (it lasts a few seconds)."""


@dataclass
class ChannelState:
    """What ``memmy channels status`` shows for one channel."""

    name: str
    state: str = "stopped"  # stopped | connecting | connected | retrying | failed | unavailable
    detail: str = ""
    since: float = field(default_factory=time.time)
    restarts: int = 0
    messages_in: int = 0
    messages_out: int = 0
    refused: int = 0

    def moved(self, state: str, detail: str = "") -> None:
        """Record a new state (and when it began)."""
        self.state, self.detail, self.since = state, detail, time.time()
