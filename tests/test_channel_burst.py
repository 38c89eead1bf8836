"""Many chats' messages in one Telegram ``getUpdates`` batch (a burst: 20 chats at once, the messages sent during an
outage): each chat's first message is handed over before the other chats' follow-ups, each chat still in order; the
turns those first messages start go to the chat turns' worker before any of their typing calls; a batch is read one
update at a time, so an update python-telegram-bot cannot read is skipped and the rest of the batch is answered. The
real router, worker process and python-telegram-bot against the fake Bot API server; the fake model answers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from memmy.agent.channels.router import Answer, ChatRouter
from memmy.agent.channels.settings import ChannelSettings
from memmy.agent.channels.telegram import TelegramChannel, chat_rounds
from memmy.agent.channels.turn_worker import TurnPool
from memmy.agent.config import load_agent_config
from tests.agent_stubs import Reply, last_user_text, run_model_stub, write_agent_config
from tests.fake_telegram import FakeTelegram, fake_telegram

CHATS = (41, 42, 43)


class WatchedChannel(TelegramChannel):
    """The Telegram adapter, with each typing call written down (then made) in ``events``."""

    def __init__(self, settings: ChannelSettings, home: Path, events: list[str]) -> None:
        super().__init__(settings, home, poll_timeout_s=1)
        self.events = events

    async def typing(self, chat_id: str) -> None:
        self.events.append(f"typing {chat_id}")
        await super().typing(chat_id)


class WatchedPool(TurnPool):
    """The turns' worker pool, with each turn written down in ``events`` as it goes to its worker."""

    events: list[str]

    async def run(
        self, session: str, text: str, *, source: str, tools: bool, parts: list[dict[str, Any]] | None = None
    ) -> Answer:
        self.events.append(f"turn {text}")
        return await super().run(session, text, source=source, tools=tools, parts=parts)


def run_burst(home: Path, fake: FakeTelegram, answers: int) -> list[str]:
    """Start the channel once every message is queued at the fake (one batch), until ``answers`` answers are sent;
    what was delivered, sent to the worker and typed, in order."""
    events: list[str] = []
    settings = ChannelSettings(
        "telegram", True, {"token": fake.token, "apiBase": fake.url}, tuple(str(chat) for chat in CHATS)
    )

    async def main() -> None:
        pool = WatchedPool(load_agent_config())
        pool.events = events
        adapter = WatchedChannel(settings, home / "bot", events)
        router = ChatRouter(settings, adapter, pool, home / "bot")

        async def deliver(message: Any) -> None:
            events.append(f"deliver {message.text}")
            await router.deliver(message)

        await pool.start()
        polling = asyncio.create_task(adapter.run(deliver))
        try:
            while sum(text.startswith("echo") for chat in CHATS for text in fake.texts(chat)) < answers:
                await asyncio.sleep(0.05)
        finally:
            polling.cancel()
            await asyncio.gather(polling, return_exceptions=True)
            await router.close()
            await pool.close()

    asyncio.run(asyncio.wait_for(main(), 60))
    return events


def test_each_chats_first_message_of_a_batch_goes_first_and_its_turn_before_any_typing(isolated_home: Path) -> None:
    """Before: the batch was handed over as it came (41's follow-ups ahead of 42's and 43's only message) and each
    turn's typing call came between one chat's turn and the next one's."""
    with (
        run_model_stub(lambda body: Reply(text="echo: " + last_user_text(body).strip())) as stub,
        fake_telegram() as fake,
    ):
        write_agent_config(isolated_home, stub, memory=False)
        for text in ("41 one", "41 two", "41 three"):
            fake.say(41, 41, text)
        fake.say(42, 42, "42 one")
        fake.say(43, 43, "43 one")
        events = run_burst(isolated_home, fake, answers=5)
        answers = {chat: [text for text in fake.texts(chat) if text.startswith("echo")] for chat in CHATS}
    assert answers == {
        41: ["echo: 41 one", "echo: 41 two", "echo: 41 three"],
        42: ["echo: 42 one"],
        43: ["echo: 43 one"],
    }
    delivered = [event.removeprefix("deliver ") for event in events if event.startswith("deliver")]
    assert delivered == ["41 one", "42 one", "43 one", "41 two", "41 three"]
    first_turns = [events.index(f"turn {text}") for text in ("41 one", "42 one", "43 one")]
    first_typing = min(events.index(f"typing {chat}") for chat in CHATS)
    assert max(first_turns) < first_typing


def test_an_update_that_cannot_be_read_is_skipped_and_the_batch_goes_on(isolated_home: Path) -> None:
    with (
        run_model_stub(lambda body: Reply(text="echo: " + last_user_text(body).strip())) as stub,
        fake_telegram() as fake,
    ):
        write_agent_config(isolated_home, stub, memory=False)
        fake.say(41, 41, "before")
        fake.updates.append({"update_id": 0, "message": {"message_id": "not a number", "chat": "nowhere"}})
        fake.say(42, 42, "after")
        run_burst(isolated_home, fake, answers=2)
        assert fake.texts(41) == ["echo: before"] and fake.texts(42) == ["echo: after"]


def test_chat_rounds_keeps_each_chats_order() -> None:
    def update(n: int, chat: int | None) -> dict[str, Any]:
        return {"update_id": n, "message": {"chat": {"id": chat}}} if chat is not None else {"update_id": n}

    batch = [update(1, 7), update(2, 7), update(3, 8), update(4, None), update(5, 8), update(6, 9), update(7, 7)]
    batch.append({"update_id": 8, "message": {"chat": "not an object"}})  # read (and skipped) when handed over
    assert [[u["update_id"] for u in round_] for round_ in chat_rounds(batch)] == [[1, 3, 4, 6, 8], [2, 5], [7]]
    assert chat_rounds([]) == []
