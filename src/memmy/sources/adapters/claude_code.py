"""Claude Code transcripts: ``$CLAUDE_CONFIG_DIR|~/.claude`` + ``projects/<enc-cwd>/<sessionId>.jsonl``.

One JSON object a line. ``user``/``assistant`` lines carry ``uuid``, ``sessionId``, ``cwd``, ``timestamp`` (ISO) and
an Anthropic ``message`` whose ``content`` is a string or a list of blocks (``text``, ``thinking``, ``tool_use``,
``tool_result``, ``image``). Other line types (``summary``, ``system``, ``file-history-snapshot``, ...) are metadata::

    {"type":"user","uuid":"u1","sessionId":"s1","cwd":"/home/u/proj","timestamp":"2026-03-01T22:38:47.557Z",
     "message":{"role":"user","content":"list the projects"}}
    {"type":"assistant","uuid":"a1","cwd":"/home/u/proj","timestamp":"...","message":{"role":"assistant",
     "content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]}}
    {"type":"user","uuid":"r1","cwd":"/home/u/proj","timestamp":"...","message":{"role":"user",
     "content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a b","is_error":false}]}}

Mapping: consecutive text blocks become one user/assistant message; each ``tool_use`` becomes a ``tool`` message
(name, call id, JSON input) and each ``tool_result`` a ``tool`` message with the output (``is_error`` → error), so a
user line holding only tool results opens no turn. The first message of a line has id ``uuid``, further ones
``uuid:1``, ``uuid:2``... User text that is a local command's output (``<local-command-stdout>``, ``<bash-stdout>``,
...) becomes ``system``; the command line itself (``<command-name>``) stays ``user``. ``isMeta`` lines (caveats,
expanded slash-command bodies) and sidechains are skipped; subagent files (``<session>/subagents/``) are not scanned.

Skip reasons: ``sidechain``, ``meta``, ``non_message_record``, ``no_message``, ``duplicate_uuid``,
``thinking_only``, ``empty_message``, ``empty_conversation`` and the JSONL reader's ``malformed_line``,
``truncated_line``, ``non_object_line``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memmy.sources.adapters.shared import tool_content
from memmy.sources.model import (
    EPOCH,
    Conversation,
    Role,
    ScanStats,
    SourceMessage,
    extract_text,
    git_root_of,
    home_of,
    iter_jsonl,
    to_iso,
)

SOURCE = "claude_code"
# User lines that are the output of a local command, not a request: they join the command's turn as system text.
# (The command line itself, ``<command-name>`` or ``<bash-input>``, stays a user message: the user typed it.)
_HARNESS_OUTPUT_PREFIXES = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-stdout>",
    "<bash-stderr>",
)


def decode_project_slug(slug: str) -> str:
    """Best-effort cwd from a project directory name (``-home-u-proj`` → ``/home/u/proj``)."""
    return slug.replace("-", "/") if slug.startswith("-") else slug


def _as_json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass
class _Ctx:
    """Where the messages of one line come from (id, time, cwd) and how many it has produced."""

    uuid: str
    when: str
    cwd: str | None
    emitted: int = 0


class _FileReader:
    """Turns the lines of one transcript file into messages."""

    def __init__(self, path: Path, stats: ScanStats) -> None:
        self.path = path
        self.stats = stats
        self.conversation_id = path.stem
        self.first_cwd: str | None = None
        self.last_time = EPOCH
        self.seen: set[str] = set()
        self.tool_names: dict[str, str] = {}
        self.messages: list[SourceMessage] = []

    def read(self) -> list[SourceMessage]:
        for number, record in iter_jsonl(self.path, self.stats):
            self._record(number, record)
        return self.messages

    def _record(self, number: int, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind not in ("user", "assistant"):
            self.stats.skip("non_message_record")
            return
        if record.get("isSidechain"):
            self.stats.skip("sidechain")
            return
        if record.get("isMeta"):
            self.stats.skip("meta")
            return
        message = record.get("message")
        if not isinstance(message, dict):
            self.stats.skip("no_message")
            return
        uuid = str(record.get("uuid") or f"{self.conversation_id}:{number}")
        if uuid in self.seen:
            self.stats.skip("duplicate_uuid")
            return
        self.seen.add(uuid)
        cwd = record.get("cwd") if isinstance(record.get("cwd"), str) and record.get("cwd") else None
        if cwd and self.first_cwd is None:
            self.first_cwd = cwd
        when = to_iso(record.get("timestamp"))
        if when == EPOCH:
            when = self.last_time
        self.last_time = when
        before = len(self.messages)
        self._blocks(kind, message.get("content"), _Ctx(uuid, when, cwd))
        if len(self.messages) == before:
            blocks = message.get("content")
            only_thinking = (
                isinstance(blocks, list)
                and bool(blocks)
                and all(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking") for b in blocks)
            )
            self.stats.skip("thinking_only" if only_thinking else "empty_message")

    def _blocks(self, kind: str, content: Any, ctx: _Ctx) -> None:
        if isinstance(content, str):
            self._text(kind, content, ctx)
            return
        if not isinstance(content, list):
            return
        texts: list[str] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text":
                text = block.get("text")
                if isinstance(text, str) and text:
                    texts.append(text)
            elif btype == "tool_use":
                self._text(kind, "\n".join(texts), ctx)
                texts = []
                self._tool_use(block, ctx)
            elif btype == "tool_result":
                self._text(kind, "\n".join(texts), ctx)
                texts = []
                self._tool_result(block, ctx)
        self._text(kind, "\n".join(texts), ctx)

    def _text(self, kind: str, text: str, ctx: _Ctx) -> None:
        if not text.strip():
            return
        role: Role = "assistant" if kind == "assistant" else "user"
        if role == "user" and text.lstrip().startswith(_HARNESS_OUTPUT_PREFIXES):
            role = "system"
        self._add(ctx, role, text)

    def _tool_use(self, block: dict[str, Any], ctx: _Ctx) -> None:
        name = str(block.get("name") or "tool")
        call_id = str(block["id"]) if block.get("id") else None
        tool_input = _as_json_text(block.get("input", {}))
        if call_id:
            self.tool_names[call_id] = name
        content = tool_content(name, call_id, tool_input)
        self._add(ctx, "tool", content, tool_name=name, tool_call_id=call_id, tool_input=tool_input)

    def _tool_result(self, block: dict[str, Any], ctx: _Ctx) -> None:
        call_id = str(block["tool_use_id"]) if block.get("tool_use_id") else None
        name = self.tool_names.get(call_id or "", "tool")
        text = extract_text(block.get("content"))
        output, error = (None, text) if block.get("is_error") else (text, None)
        content = tool_content(name, call_id, output=output, error=error)
        self._add(ctx, "tool", content, tool_name=name, tool_call_id=call_id, tool_output=output, tool_error=error)

    def _add(self, ctx: _Ctx, role: Role, content: str, **tool: str | None) -> None:
        message_id = ctx.uuid if ctx.emitted == 0 else f"{ctx.uuid}:{ctx.emitted}"
        ctx.emitted += 1
        self.messages.append(
            SourceMessage(
                message_id=message_id,
                conversation_id=self.conversation_id,
                role=role,
                content=content,
                created_at=ctx.when,
                source=SOURCE,
                workspace_path=ctx.cwd,
                **tool,
            )
        )


class ClaudeCodeAdapter:
    """Reads Claude Code's per-session transcript files."""

    name = SOURCE

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """``$CLAUDE_CONFIG_DIR/projects`` (default ``~/.claude/projects``)."""
        config = env.get("CLAUDE_CONFIG_DIR")
        base = Path(config) if config else home_of(env) / ".claude"
        return [base / "projects"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """One conversation per ``projects/*/*.jsonl`` file, messages in file order."""
        git_roots: dict[str, str | None] = {}
        for root in self.roots(env):
            try:
                files = sorted(p for p in root.glob("*/*.jsonl") if p.is_file())
            except OSError as exc:
                stats.errors.append(f"{root}: {exc}")
                continue
            for path in files:
                conversation = self._read_file(path, stats, git_roots)
                if conversation is not None:
                    yield conversation

    def _read_file(self, path: Path, stats: ScanStats, git_roots: dict[str, str | None]) -> Conversation | None:
        stats.files += 1
        reader = _FileReader(path, stats)
        messages = reader.read()
        if not messages:
            stats.skip("empty_conversation")
            return None
        workspace = reader.first_cwd or decode_project_slug(path.parent.name)
        finished: list[SourceMessage] = []
        for message in messages:
            cwd = message.workspace_path or workspace
            if cwd not in git_roots:
                git_roots[cwd] = git_root_of(cwd) if Path(cwd).is_absolute() else None
            finished.append(replace(message, workspace_path=cwd, git_root=git_roots[cwd]))
        stats.messages += len(finished)
        return Conversation(SOURCE, reader.conversation_id, finished, str(path), workspace)


ADAPTER = ClaudeCodeAdapter()
