"""A small Discord API on loopback for the channel tests, speaking the documented wire format (discord.com
developers docs, API v10): REST under ``/api/v10`` (``GET /users/@me``, ``GET /gateway/bot``,
``POST /channels/{id}/messages`` as JSON or multipart with ``payload_json``, ``POST /channels/{id}/typing``) with
``Authorization: Bot <token>``, and the gateway WebSocket with ``zlib-stream`` transport compression: HELLO, the
client's IDENTIFY (a wrong token closes with 4004), READY, heartbeats acknowledged, ``MESSAGE_CREATE`` dispatches.

Tests push messages with :meth:`FakeDiscord.say`, read what the bot posted in :attr:`FakeDiscord.posted` and close
the gateway with :meth:`FakeDiscord.drop` to stand for a dropped connection."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.fake_platform import PlatformFake, serving

BOT_ID = "900000000000000001"


@dataclass
class Posted:
    """One message the bot created."""

    channel_id: str
    content: str
    filename: str = ""
    data: bytes = b""
    at: float = field(default_factory=time.monotonic)


class FakeDiscord(PlatformFake):
    """The fake's state; thread-safe helpers for the test, asyncio inside the server."""

    def __init__(self, token: str = "discord-test-token") -> None:
        super().__init__()
        self.token = token
        self.posted: list[Posted] = []
        self.typing: list[str] = []
        self.connections = 0  # gateway sessions identified
        self.heartbeats = 0
        self.frames: list[dict[str, Any]] = []
        self._ids = itertools.count(910000000000000000)

    def _snowflake(self) -> str:
        return str(next(self._ids))

    def _user(self, user_id: str, name: str, bot: bool = False) -> dict[str, Any]:
        return {"id": user_id, "username": name, "discriminator": "0", "global_name": name, "avatar": None, "bot": bot}

    def _message(self, channel_id: str, author: dict[str, Any], content: str) -> dict[str, Any]:
        return {
            "id": self._snowflake(),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": "2026-12-04T12:00:00.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
        }

    def say(self, channel_id: str, user_id: str, content: str) -> None:
        """Queue a direct message from ``user_id`` in DM channel ``channel_id``."""
        self.push(self._message(channel_id, self._user(user_id, f"user{user_id}"), content))

    def texts(self, channel_id: str) -> list[str]:
        """What the bot posted in one channel, in order."""
        return [p.content for p in self.posted if p.channel_id == channel_id and not p.filename]

    def outbox(self) -> list[Any]:
        return [(p.channel_id, p.content[:80]) for p in self.posted]

    def _authorised(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bot {self.token}"

    async def me(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, 401)
        return JSONResponse(self._user(BOT_ID, "memmy-bot", bot=True))

    async def application(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, 401)
        owner = self._user("5000", "owner")
        return JSONResponse(
            {
                "id": BOT_ID,
                "name": "memmy",
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": owner,
                "verify_key": "0" * 64,
                "flags": 0,
                "team": None,
            }
        )

    async def gateway_bot(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, 401)
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        url = self.url.replace("http://", "ws://") + "/gateway"
        return JSONResponse({"url": url, "shards": 1, "session_start_limit": limit})

    async def create_message(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, 401)
        channel_id = request.path_params["channel_id"]
        filename, data = "", b""
        if request.headers.get("content-type", "").startswith("multipart/"):
            form = await request.form()
            payload = json.loads(str(form.get("payload_json") or "{}"))
            upload: Any = form.get("files[0]")
            if upload is not None:
                filename, data = upload.filename, await upload.read()
        else:
            payload = await request.json()
        content = str(payload.get("content") or "")
        if len(content) > 2000:
            error = {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer"}]}}
            return JSONResponse({"message": "Invalid Form Body", "code": 50035, "errors": error}, 400)
        if not content and not filename:
            return JSONResponse({"message": "Cannot send an empty message", "code": 50006}, 400)
        self.posted.append(Posted(channel_id, content, filename, data))
        return JSONResponse(self._message(channel_id, self._user(BOT_ID, "memmy-bot", bot=True), content))

    async def trigger_typing(self, request: Request) -> Response:
        self.typing.append(request.path_params["channel_id"])
        return Response(status_code=204)

    async def gateway(self, socket: WebSocket) -> None:
        await socket.accept()
        packer = zlib.compressobj()
        sequence = itertools.count(1)

        async def send(payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            await socket.send_bytes(packer.compress(data) + packer.flush(zlib.Z_SYNC_FLUSH))

        await send({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None})
        identify = json.loads(await socket.receive_text())
        while identify.get("op") == 1:  # a heartbeat may come first (discord.py sends one on HELLO)
            self.heartbeats += 1
            identify = json.loads(await socket.receive_text())
        self.frames.append(identify)
        if identify.get("op") != 2 or identify["d"].get("token") != self.token:
            await socket.close(code=4004, reason="Authentication failed.")
            return
        self.connections += 1
        ready = {
            "v": 10,
            "user": self._user(BOT_ID, "memmy-bot", bot=True),
            "guilds": [],
            "session_id": f"session{self.connections}",
            "resume_gateway_url": self.url.replace("http://", "ws://") + "/gateway",
            "application": {"id": BOT_ID, "flags": 0},
        }
        await send({"op": 0, "s": next(sequence), "t": "READY", "d": ready})

        async def read() -> None:
            try:
                while True:
                    frame = json.loads(await socket.receive_text())
                    if frame.get("op") == 1:
                        self.heartbeats += 1
                        await send({"op": 11, "d": None, "s": None, "t": None})
            except WebSocketDisconnect:
                return

        async def dispatch(message: dict[str, Any]) -> None:
            await send({"op": 0, "s": next(sequence), "t": "MESSAGE_CREATE", "d": message})

        await self.pump(socket, asyncio.create_task(read()), dispatch, drop_code=4000)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/api/v10/users/@me", self.me, methods=["GET"]),
            Route("/api/v10/oauth2/applications/@me", self.application, methods=["GET"]),
            Route("/api/v10/gateway/bot", self.gateway_bot, methods=["GET"]),
            Route("/api/v10/channels/{channel_id}/messages", self.create_message, methods=["POST"]),
            Route("/api/v10/channels/{channel_id}/typing", self.trigger_typing, methods=["POST"]),
            WebSocketRoute("/gateway", self.gateway),
        ]


@contextmanager
def fake_discord() -> Iterator[FakeDiscord]:
    """Run a fake Discord API on a free loopback port for the ``with`` block (``.url`` is its apiBase)."""
    fake = FakeDiscord()
    with serving(fake):
        yield fake
