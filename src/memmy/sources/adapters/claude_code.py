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

from collections.abc import Iterator, Mapping
from pathlib import Path

from memmy.sources.model import Conversation, ScanStats, SourceMessage, git_root_of, home_of, iter_jsonl
from memmy.transcripts.claude_code import SOURCE, ClaudeTranscriptReader
from memmy.transcripts.model import with_fields

__all__ = ["ADAPTER", "SOURCE", "ClaudeCodeAdapter", "decode_project_slug"]


def decode_project_slug(slug: str) -> str:
    """Best-effort cwd from a project directory name (``-home-u-proj`` → ``/home/u/proj``)."""
    return slug.replace("-", "/") if slug.startswith("-") else slug


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
        reader = ClaudeTranscriptReader(path.stem, stats)
        messages = reader.read(iter_jsonl(path, stats))
        if not messages:
            stats.skip("empty_conversation")
            return None
        workspace = reader.first_cwd or decode_project_slug(path.parent.name)
        finished: list[SourceMessage] = []
        for message in messages:
            cwd = message.workspace_path or workspace
            if cwd not in git_roots:
                git_roots[cwd] = git_root_of(cwd) if Path(cwd).is_absolute() else None
            finished.append(with_fields(message, workspace_path=cwd, git_root=git_roots[cwd]))
        stats.messages += len(finished)
        return Conversation(SOURCE, reader.conversation_id, finished, str(path), workspace)


ADAPTER = ClaudeCodeAdapter()
