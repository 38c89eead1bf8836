"""Built-in tools the model may call: files in the project or workspace, a shell with a timeout and an approval
policy, web fetch with size and time caps, web search (``websearch.py``), and memmy's own memory
(search/get/add). Toggled by ``tools.*``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memmy.agent import websearch
from memmy.agent.config import ToolsConfig
from memmy.agent.memory import MemoryBridge
from memmy.daemon_client import DaemonError

Approver = Callable[[str], Awaitable[bool]]
Runner = Callable[[dict[str, Any]], Awaitable[str]]
MAX_OUTPUT_CHARS = 16000
#: Content types web_fetch reads besides text/* (a picture or an archive is refused, not read as text).
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/xhtml+xml", "")


class ToolError(Exception):
    """A tool refused or failed; the message goes back to the model as the tool's result."""


@dataclass
class Tool:
    """One callable tool: its schema for the model and its implementation."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Runner
    timeout_s: float = 60.0

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _schema(required: list[str], **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


def clip(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head and tail of a long output."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    return text[:head] + f"\n…[{len(text) - limit} characters cut]…\n" + text[-(limit - head) :]


@dataclass
class ToolBox:
    """The tools of one agent, their toggles, and how to call them with a timeout."""

    config: ToolsConfig
    base_dir: Path
    memory: MemoryBridge | None = None
    approve: Approver | None = None
    tools: dict[str, Tool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.config.files_enabled:
            self._add_files()
        if self.config.exec_enabled:
            self.add(
                Tool(
                    "exec",
                    "Run a shell command in the project directory; returns exit code and output.",
                    _schema(["command"], command={"type": "string", "description": "the shell command"}),
                    self._exec,
                    # The shell kills its own process group at tools.exec.timeout; this is the outer guard.
                    timeout_s=self.config.exec_timeout_s + 5,
                )
            )
        if self.config.web_enabled:
            self.add(
                Tool(
                    "web_fetch",
                    "Fetch a web page (http/https) and return its text, capped in size.",
                    _schema(["url"], url={"type": "string"}),
                    self._fetch,
                    timeout_s=self.config.fetch_timeout_s + 5,
                )
            )
            self.add(
                Tool(
                    "web_search",
                    "Search the web; returns the top results (title, URL, snippet). Fetch a result with web_fetch.",
                    _schema(["query"], query={"type": "string"}, limit={"type": "integer"}),
                    self._search,
                    timeout_s=self.config.web_search.timeout_s + 5,
                )
            )
        if self.memory is not None and self.config.memory_tools and self.memory.enabled:
            self._add_memory(self.memory)

    def add(self, tool: Tool) -> None:
        """Register a tool (MCP tools come in this way)."""
        self.tools[tool.name] = tool

    def specs(self) -> list[dict[str, Any]]:
        """Every tool's schema, for the model."""
        return [tool.spec() for tool in self.tools.values()]

    async def call(self, name: str, arguments: str) -> tuple[str, bool]:
        """Run one tool call; returns (output, ok). Bad names, bad JSON and timeouts are answers, not crashes."""
        tool = self.tools.get(name)
        if tool is None:
            return f"error: there is no tool named {name!r}; available: {', '.join(sorted(self.tools))}", False
        try:
            args = json.loads(arguments or "{}")
        except ValueError as exc:
            return f"error: the arguments for {name} were not valid JSON ({exc}); send a JSON object", False
        if not isinstance(args, dict):
            return f"error: the arguments for {name} must be a JSON object", False
        try:
            return clip(await asyncio.wait_for(tool.run(args), tool.timeout_s)), True
        except TimeoutError:
            return f"error: {name} did not finish within {tool.timeout_s:g} s and was stopped", False
        except ToolError as exc:
            return f"error: {exc}", False
        except (OSError, ValueError, KeyError, TypeError, httpx.HTTPError, DaemonError) as exc:
            return f"error: {name} failed: {type(exc).__name__}: {exc}", False

    # --- files -----------------------------------------------------------------------------------------------

    def resolve(self, raw: Any) -> Path:
        """A path relative to the project/workspace; outside it only when not restricted."""
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("path: expected a non-empty string")
        path = Path(raw).expanduser()
        path = (path if path.is_absolute() else self.base_dir / path).resolve()
        if self.config.restrict_to_workspace and not path.is_relative_to(self.base_dir.resolve()):
            raise ToolError(f"{raw} is outside {self.base_dir} (tools.restrictToWorkspace is on)")
        return path

    def _add_files(self) -> None:
        path = {"type": "string", "description": "file path, relative to the project directory"}
        self.add(Tool("read_file", "Read a text file.", _schema(["path"], path=path), self._read))
        self.add(
            Tool(
                "write_file",
                "Create or overwrite a text file.",
                _schema(["path", "content"], path=path, content={"type": "string"}),
                self._write,
            )
        )
        self.add(
            Tool(
                "edit_file",
                "Replace one exact occurrence of old_text with new_text in a file.",
                _schema(
                    ["path", "old_text", "new_text"],
                    path=path,
                    old_text={"type": "string"},
                    new_text={"type": "string"},
                ),
                self._edit,
            )
        )
        self.add(Tool("list_dir", "List a directory.", _schema([], path=path), self._list))

    async def _read(self, args: dict[str, Any]) -> str:
        target = self.resolve(args.get("path"))
        if not target.is_file():
            raise ToolError(f"{args.get('path')}: no such file")
        return target.read_text(encoding="utf-8", errors="replace")

    async def _write(self, args: dict[str, Any]) -> str:
        target = self.resolve(args.get("path"))
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("content: expected a string")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {target}"

    async def _edit(self, args: dict[str, Any]) -> str:
        target = self.resolve(args.get("path"))
        old, new = args.get("old_text"), args.get("new_text")
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            raise ToolError("old_text and new_text: expected strings (old_text non-empty)")
        text = target.read_text(encoding="utf-8")
        count = text.count(old)
        if count != 1:
            raise ToolError(f"old_text occurs {count} times in {target}; it must occur exactly once")
        target.write_text(text.replace(old, new), encoding="utf-8")
        return f"edited {target}"

    async def _list(self, args: dict[str, Any]) -> str:
        target = self.resolve(args.get("path") or ".")
        if not target.is_dir():
            raise ToolError(f"{args.get('path')}: not a directory")
        entries = sorted(target.iterdir())[:500]
        return "\n".join(e.name + ("/" if e.is_dir() else "") for e in entries) or "(empty)"

    # --- shell -----------------------------------------------------------------------------------------------

    async def _exec(self, args: dict[str, Any]) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command: expected a non-empty string")
        policy = self.config.exec_approval
        if policy == "deny":
            raise ToolError("the shell is disabled by tools.exec.approval: deny")
        if policy == "ask":
            if self.approve is None:
                raise ToolError(
                    "running a shell command needs approval and nobody can approve here "
                    "(set tools.exec.approval: allow, or pass --yes to `memmy agent`)"
                )
            if not await self.approve(command):
                raise ToolError("the user did not approve this command")
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=str(self.base_dir),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(), self.config.exec_timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ToolError(f"command killed after {self.config.exec_timeout_s:g} s: {command}") from None
        text = out.decode("utf-8", errors="replace")
        return f"exit code {process.returncode}\n{text}"

    # --- web -------------------------------------------------------------------------------------------------

    async def _fetch(self, args: dict[str, Any]) -> str:
        url = args.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ToolError("url: expected an http:// or https:// URL")
        limit = self.config.fetch_max_chars
        redirects = self.config.fetch_max_redirects
        client = httpx.AsyncClient(timeout=self.config.fetch_timeout_s, follow_redirects=True, max_redirects=redirects)
        async with client, client.stream("GET", url, headers={"user-agent": "memmy-agent"}) as response:
            kind = response.headers.get("content-type", "text/plain").split(";", 1)[0].strip().lower()
            if not (kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml"))):
                raise ToolError(f"{url} is {kind}, not text; not fetched")
            chunks: list[str] = []
            size = 0
            async for text in response.aiter_text():
                chunks.append(text)
                size += len(text)
                if size > limit:
                    break
        body = "".join(chunks)
        cut = f"\n…[cut at {limit} characters]" if len(body) > limit else ""
        moved = f" (from {url})" if str(response.url) != url else ""
        return f"HTTP {response.status_code} {response.url}{moved}\n{body[:limit]}{cut}"

    async def _search(self, args: dict[str, Any]) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query: expected a non-empty string")
        limit = args.get("limit")
        try:
            hits = await websearch.search(self.config.web_search, query, limit if isinstance(limit, int) else None)
        except websearch.SearchError as exc:
            raise ToolError(str(exc)) from None
        return websearch.render(query, hits)

    # --- memory ----------------------------------------------------------------------------------------------

    def _add_memory(self, memory: MemoryBridge) -> None:
        base = str(self.base_dir)

        async def search(args: dict[str, Any]) -> str:
            query = args.get("query")
            if not isinstance(query, str) or not query.strip():
                raise ToolError("query: expected a non-empty string")
            limit = args.get("limit", 8)
            result = await memory.search(query, int(limit) if isinstance(limit, int) else 8, base)
            markdown = result.get("injectedContext") if isinstance(result, dict) else None
            return str(markdown or "").strip() or "(nothing found)"

        async def get(args: dict[str, Any]) -> str:
            return json.dumps(await memory.get(str(args.get("id") or "")), ensure_ascii=False)[:8000]

        async def add(args: dict[str, Any]) -> str:
            content = args.get("content")
            if not isinstance(content, str) or not content.strip():
                raise ToolError("content: expected a non-empty string")
            tags = args.get("tags")
            result = await memory.add(content, tags if isinstance(tags, list) else None, base)
            return f"stored memory {result.get('id')}"

        self.add(
            Tool(
                "memmy_memory_search",
                "Search memmy's long-term memory (earlier sessions of all your agents).",
                _schema(["query"], query={"type": "string"}, limit={"type": "integer"}),
                search,
                timeout_s=15,
            )
        )
        self.add(Tool("memmy_memory_get", "Get one memory by id.", _schema(["id"], id={"type": "string"}), get, 15))
        self.add(
            Tool(
                "memmy_memory_add",
                "Store a fact, preference or decision in memmy's long-term memory.",
                _schema(["content"], content={"type": "string"}, tags={"type": "array", "items": {"type": "string"}}),
                add,
                timeout_s=15,
            )
        )
