"""Who may talk to a bot: the ids listed in ``channels.<name>.allowFrom`` plus the people who paired with a
one-time code. Nobody else, by default. Codes and paired ids live in ``$MEMMY_HOME/channels/access.json`` (0600,
written atomically), so ``memmy channels pair`` in one process and the bot in another agree."""

from __future__ import annotations

import copy
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from memmy.agent.channels.base import FileCache

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
CODE_LENGTH = 8
CODE_TTL_S = 600.0


def _book(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {"paired": {}, "codes": {}}
    if not isinstance(data, dict):
        return {"paired": {}, "codes": {}}
    data.setdefault("paired", {})
    data.setdefault("codes", {})
    return data


class AccessBook:
    """Paired users per channel and the pending one-time codes."""

    def __init__(self, home: Path) -> None:
        self.path = home / "channels" / "access.json"
        self.cache: FileCache[dict[str, Any]] = FileCache()

    def _read(self) -> dict[str, Any]:
        return copy.deepcopy(self.cache.read(self.path, _book))

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)

    def new_code(self, channel: str, ttl_s: float = CODE_TTL_S) -> str:
        """A fresh one-time pairing code for ``channel``, valid for ``ttl_s`` seconds."""
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        data = self._read()
        now = time.time()
        data["codes"] = {k: v for k, v in data["codes"].items() if float(v.get("expires", 0)) > now}
        data["codes"][code] = {"channel": channel, "expires": now + ttl_s}
        self._write(data)
        return code

    def redeem(self, channel: str, code: str, user_id: str, user_name: str = "") -> bool:
        """Pair ``user_id`` when ``code`` is a live code of this channel; the code is spent either way it matched."""
        wanted = code.strip().upper()
        data = self._read()
        now = time.time()
        for known, entry in list(data["codes"].items()):
            if hmac.compare_digest(known, wanted) and entry.get("channel") == channel:
                del data["codes"][known]
                if float(entry.get("expires", 0)) <= now:
                    self._write(data)
                    return False
                paired = data["paired"].setdefault(channel, {})
                paired[user_id] = {"name": user_name, "at": now}
                self._write(data)
                return True
        return False

    def paired(self, channel: str) -> dict[str, Any]:
        """The users paired with ``channel`` (id -> name, when)."""
        found = self._read()["paired"].get(channel) or {}
        return dict(found) if isinstance(found, dict) else {}

    def unpair(self, channel: str, user_id: str) -> bool:
        """Forget one paired user; whether they were paired."""
        data = self._read()
        removed = (data["paired"].get(channel) or {}).pop(user_id, None) is not None
        if removed:
            self._write(data)
        return removed

    def allowed(self, channel: str, user_id: str, allow_from: tuple[str, ...]) -> bool:
        """Whether ``user_id`` may talk to ``channel``."""
        return user_id in allow_from or user_id in self.paired(channel)
