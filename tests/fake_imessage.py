"""A small BlueBubbles server on loopback for the iMessage channel tests, speaking its documented REST API v1
(bluebubbles.app, "REST API"): every call carries ``?password=``; ``GET /api/v1/server/info``; ``POST
/api/v1/message/query`` with ``after``/``sort``/``with`` answers the messages (the bot's own, ``isFromMe``, among
them, as Messages has them); ``GET /api/v1/attachment/{guid}/download``; ``POST /api/v1/message/text`` and the
multipart ``POST /api/v1/message/attachment`` send. Answers are ``{status, message, data}``.

Tests push messages with :meth:`FakeBlueBubbles.say`, read what was sent in :meth:`texts` and make the server
fail its next queries with :meth:`drop` (the Mac's server restarting); a client's poll loop counts as one of
:attr:`connections` once it asks for new messages."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tests.fake_platform import PlatformFake, serving


@dataclass
class Sent:
    """One message the bot sent: a text or a file."""

    chat: str
    text: str
    filename: str = ""
    data: bytes = b""
    at: float = field(default_factory=time.monotonic)


class FakeBlueBubbles(PlatformFake):
    """The fake's state; helpers for the test's thread, asyncio inside the server."""

    def __init__(self, password: str = "fake-bluebubbles-password") -> None:
        super().__init__()
        self.password = password
        self.messages: list[dict[str, Any]] = []  # the Messages database, oldest first
        self.sent: list[Sent] = []
        self.files: dict[str, bytes] = {}
        self.connections = 0
        self.fail_queries = 0
        self.polling = False
        self._ids = itertools.count(1)
        self._clock = int(time.time() * 1000)
        self._guard = threading.Lock()

    def _stamp(self) -> int:
        with self._guard:
            self._clock = max(self._clock + 1, int(time.time() * 1000))
            return self._clock

    def _add(self, chat: str, address: str, text: str, from_me: bool, attachments: list[dict[str, Any]]) -> None:
        number = next(self._ids)
        self.messages.append(
            {
                "guid": f"msg-{number}",
                "text": text,
                "isFromMe": from_me,
                "dateCreated": self._stamp(),
                "handle": {"address": address, "service": "iMessage"},
                "chats": [{"guid": chat, "chatIdentifier": chat.rsplit(";", 1)[-1]}],
                "attachments": attachments,
            }
        )

    def say(self, chat: str, address: str, text: str, attachment: tuple[str, bytes, str] | None = None) -> None:
        """A message from ``address`` in chat ``chat`` (an attachment as ``(name, bytes, mime)``)."""
        items = []
        if attachment is not None:
            guid = f"att-{len(self.files) + 1}"
            self.files[guid] = attachment[1]
            items.append(
                {
                    "guid": guid,
                    "transferName": attachment[0],
                    "mimeType": attachment[2],
                    "totalBytes": len(attachment[1]),
                }
            )
        self._add(chat, address, text + ("\ufffc" if attachment else ""), False, items)

    def drop(self) -> None:
        """The server fails its next two queries (the bridge restarting)."""
        self.fail_queries = 2

    def texts(self, chat: str) -> list[str]:
        """What the bot sent to one chat, in order."""
        return [s.text for s in self.sent if s.chat == chat and not s.filename]

    def outbox(self) -> list[Any]:
        return [(s.chat, s.filename or s.text[:80]) for s in self.sent]

    def _refused(self, request: Request) -> JSONResponse | None:
        if request.query_params.get("password") != self.password:
            error = {"type": "Authentication Error", "message": "Unauthorized: the password is wrong"}
            return JSONResponse({"status": 401, "message": "Unauthorized", "error": error}, 401)
        return None

    async def info(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        self.polling = False  # counted as a connection when its poll loop asks for new messages
        data = {"os_version": "15.1", "server_version": "1.9.9", "private_api": False, "detected_icloud": "me@x.y"}
        return JSONResponse({"status": 200, "message": "Success", "data": data})

    async def query(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        if self.fail_queries > 0:
            self.fail_queries -= 1
            return JSONResponse({"status": 500, "message": "Server restarting"}, 500)
        body = await request.json()
        if body.get("sort") == "ASC" and not self.polling:
            self.polling = True
            self.connections += 1
        after = int(body.get("after") or 0)
        found = [m for m in self.messages if m["dateCreated"] > after]
        if body.get("sort", "DESC") != "ASC":
            found.reverse()
        return JSONResponse({"status": 200, "message": "Success", "data": found[: int(body.get("limit") or 100)]})

    async def download(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        data = self.files.get(request.path_params["guid"])
        if data is None:
            return JSONResponse({"status": 404, "message": "Attachment does not exist"}, 404)
        return Response(data, media_type="application/octet-stream")

    async def send_text(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        body = await request.json()
        if not body.get("chatGuid") or not body.get("tempGuid") or not body.get("message"):
            return JSONResponse({"status": 400, "message": "chatGuid, tempGuid and message are required"}, 400)
        self.sent.append(Sent(str(body["chatGuid"]), str(body["message"])))
        self._add(str(body["chatGuid"]), "me", str(body["message"]), True, [])
        return JSONResponse({"status": 200, "message": "Message sent!", "data": self.messages[-1]})

    async def send_attachment(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        form = await request.form()
        upload = form.get("attachment")
        if not form.get("chatGuid") or upload is None or isinstance(upload, str):
            return JSONResponse({"status": 400, "message": "chatGuid and attachment are required"}, 400)
        self.sent.append(Sent(str(form["chatGuid"]), "", str(form.get("name") or upload.filename), await upload.read()))
        return JSONResponse({"status": 200, "message": "Attachment sent!", "data": {}})

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/api/v1/server/info", self.info, methods=["GET"]),
            Route("/api/v1/message/query", self.query, methods=["POST"]),
            Route("/api/v1/attachment/{guid}/download", self.download, methods=["GET"]),
            Route("/api/v1/message/text", self.send_text, methods=["POST"]),
            Route("/api/v1/message/attachment", self.send_attachment, methods=["POST"]),
        ]


@contextmanager
def fake_bluebubbles() -> Iterator[FakeBlueBubbles]:
    """Run a fake BlueBubbles server on a free loopback port for the ``with`` block (``.url``: its apiBase)."""
    fake = FakeBlueBubbles()
    with serving(fake):
        yield fake
