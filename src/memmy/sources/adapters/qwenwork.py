"""QwenWork (千问办公 / Qwen Work desktop) history, read tolerantly because its line schema is unknown.

Where: ``$MEMMY_QWENWORK_HOME`` if set, else both ``~/.qwenwork`` (international) and ``~/.qwenworkcn`` (CN);
every ``projects/**/*.jsonl`` below them (a sibling ``<name>.meta.json`` ``cwd`` is honoured).

Assumption (agent-formats §9/§11: unverified): a line is one of

* a Qwen Code ``ChatRecord`` (the CLI QwenWork may share): ``uuid``, ``parentUuid``, ``sessionId``, ISO
  ``timestamp``, ``type`` ``user|assistant|tool_result|system``, ``cwd`` and a Gemini-style ``message``::

      {"uuid":"u1","parentUuid":null,"sessionId":"s1","timestamp":"2026-08-01T10:00:00Z","type":"user",
       "cwd":"/home/u/proj","message":{"role":"user","parts":[{"text":"list files"}]}}
      {"uuid":"a1","parentUuid":"u1","sessionId":"s1","timestamp":"…","type":"assistant","cwd":"/home/u/proj",
       "message":{"role":"model","parts":[{"functionCall":{"id":"c1","name":"ls","args":{"path":"."}}}]}}
      {"uuid":"t1","parentUuid":"a1","sessionId":"s1","timestamp":"…","type":"tool_result","cwd":"/home/u/proj",
       "message":{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"ls","response":{"output":"a.py"}}}]}}

  ``text`` parts are kept (``thought`` parts dropped), ``functionCall``/``functionResponse`` parts become one
  ``tool`` message per call; ``system`` records (compression, telemetry, slash commands) are skipped as
  ``non_message_record``; records are read in file order;
* otherwise a WorkBuddy-style chat record (``role``/``content``/``timestamp``/``id``, ``function_call`` and
  ``function_call_result`` items), read by :class:`~memmy.sources.adapters.workbuddy.ChatLogReader`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from memmy.sources.adapters.shared import as_text, env_dir
from memmy.sources.adapters.workbuddy import ChatLogReader, first_str
from memmy.sources.model import Conversation, Role, ScanStats, home_of, to_iso

CHAT_RECORD_TYPES = frozenset({"user", "assistant", "tool_result", "system"})


class QwenChatLogReader(ChatLogReader):
    """A chat log reader that understands Qwen Code ``ChatRecord`` lines before WorkBuddy-style ones."""

    def add(self, number: int, record: dict[str, Any]) -> None:
        """Add a ``ChatRecord`` line, or defer to the WorkBuddy-style reader."""
        message = record.get("message")
        if record.get("type") not in CHAT_RECORD_TYPES or not isinstance(message, dict):
            super().add(number, record)
            return
        if record["type"] == "system":
            self.stats.skip("non_message_record")
            return
        transcript = self.transcript(record)
        message_id = first_str(record, "uuid", "id") or f"{transcript.conversation_id}:{number}"
        at = to_iso(record.get("timestamp"))
        parts: list[Any] = message["parts"] if isinstance(message.get("parts"), list) else []
        role: Role = "user" if record["type"] == "user" else "assistant"
        texts: list[str] = []
        runs = tools = 0

        def flush() -> None:
            nonlocal runs
            if texts and record["type"] != "tool_result":
                transcript.text(message_id if not runs else f"{message_id}:text{runs}", role, "\n".join(texts), at)
                runs += 1
            texts.clear()

        for part in parts:
            if not isinstance(part, dict) or part.get("thought"):
                continue
            call, response = part.get("functionCall"), part.get("functionResponse")
            if isinstance(call, dict):
                flush()
                transcript.tool_call(
                    f"{message_id}:{tools}",
                    at,
                    first_str(call, "name"),
                    first_str(call, "id"),
                    as_text(call.get("args")),
                )
                tools += 1
            elif isinstance(response, dict):
                flush()
                output, error = _response_text(response.get("response"))
                transcript.tool_result(
                    f"{message_id}:{tools}",
                    at,
                    first_str(response, "name"),
                    first_str(response, "id"),
                    output=output,
                    error=error,
                )
                tools += 1
            elif isinstance(part.get("text"), str):
                texts.append(part["text"])
        flush()
        if not runs and not tools:
            self.stats.skip("empty_message")


def _response_text(response: Any) -> tuple[str | None, str | None]:
    """(output, error) of a ``functionResponse.response`` (``{"output": …}`` or ``{"error": …}``)."""
    if isinstance(response, dict):
        if response.get("error"):
            return None, as_text(response["error"])
        return as_text(response.get("output", response) or None), None
    return as_text(response), None


class QwenWorkAdapter:
    """Reads QwenWork's ``projects/**/*.jsonl`` under both homes."""

    name = "qwenwork"

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """The override, else the international and the CN home."""
        override = env_dir(env, "MEMMY_QWENWORK_HOME")
        if override is not None:
            return [override]
        return [home_of(env) / ".qwenwork", home_of(env) / ".qwenworkcn"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """One conversation per session per file."""
        for root in self.roots(env):
            projects = root / "projects"
            if projects.is_dir():
                for path in sorted(projects.rglob("*.jsonl")):
                    yield from QwenChatLogReader(self.name, path, stats).read()


ADAPTER = QwenWorkAdapter()
