"""Codex CLI rollouts: ``$CODEX_HOME|~/.codex`` + ``{sessions,archived_sessions}/**/rollout-*-<uuid>.jsonl``.

Since Sept 2025 every line is an envelope ``{"timestamp","type","payload"}`` with ``type`` one of ``session_meta``
(``id`` or ``session_id``, ``cwd``), ``turn_context`` (``cwd``), ``response_item`` (the model-visible history),
``event_msg`` (UI events that duplicate the messages), ``compacted``, ...::

    {"timestamp":"2026-04-29T10:58:39.740Z","type":"session_meta","payload":{"id":"019dd8e4-...","cwd":"/home/u/p"}}
    {"timestamp":"...","type":"response_item","payload":{"type":"message","role":"user",
     "content":[{"type":"input_text","text":"run the tests"}]}}
    {"timestamp":"...","type":"response_item","payload":{"type":"function_call","name":"exec_command",
     "arguments":"{\\"cmd\\":\\"pytest -q\\"}","call_id":"call_1"}}
    {"timestamp":"...","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1",
     "output":"3 passed"}}

Older "bare" rollouts have no envelope: line 1 is ``{"id","timestamp","instructions","git"}``, items are bare
``{"type":"message",...}`` lines without times, ``{"record_type":"state"}`` lines are bookkeeping, and the cwd is
only in the ``<environment_context><cwd>`` user message. A line without a time takes the last time seen.

Conversation id: the first ``session_meta``'s ``id``, else its ``session_id``, else the file name's UUID (the
rollout id). One message per line, id ``<rolloutId>:<lineNo>``:

- ``message``: user/assistant as is; ``developer`` and ``system`` → ``system``; user messages that are injected
  context (``<environment_context>``, ``<user_instructions>``, ``# AGENTS.md instructions``, ...) → ``system``.
- ``function_call``/``custom_tool_call``/``local_shell_call``/``web_search_call`` → ``tool`` calls;
  ``function_call_output``/``custom_tool_call_output`` → ``tool`` outputs named after their call (by ``call_id``).
- ``event_msg`` ``user_message``/``agent_message`` are used only when a file has no ``message`` items at all.

Skip reasons: ``reasoning``, ``event_msg``, ``state_record``, ``compacted``, ``unknown_record``, ``unknown_item``,
``unknown_role``, ``empty_message``, ``empty_conversation``, ``duplicate_rollout`` and the JSONL reader's
``malformed_line``, ``truncated_line``, ``non_object_line``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from memmy.sources.model import Conversation, ScanStats, SourceMessage, git_root_of, home_of, iter_jsonl
from memmy.transcripts.codex import SOURCE, read_rollout, rollout_id_of, rollout_messages
from memmy.transcripts.model import with_fields

__all__ = ["ADAPTER", "SOURCE", "CodexAdapter", "rollout_id_of"]


class CodexAdapter:
    """Reads Codex CLI rollout files of every format era."""

    name = SOURCE

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """``$CODEX_HOME/sessions`` and ``$CODEX_HOME/archived_sessions`` (default ``~/.codex``)."""
        configured = env.get("CODEX_HOME")
        base = Path(configured) if configured else home_of(env) / ".codex"
        return [base / "sessions", base / "archived_sessions"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """One conversation per rollout file (a rollout id seen twice is read once)."""
        seen: set[str] = set()
        git_roots: dict[str, str | None] = {}
        for root in self.roots(env):
            try:
                files = sorted(p for p in root.rglob("rollout-*.jsonl") if p.is_file())
            except OSError as exc:
                stats.errors.append(f"{root}: {exc}")
                continue
            for path in files:
                if rollout_id_of(path) in seen:
                    stats.skip("duplicate_rollout")
                    continue
                seen.add(rollout_id_of(path))
                conversation = self._read_file(path, stats, git_roots)
                if conversation is not None:
                    yield conversation

    def _read_file(self, path: Path, stats: ScanStats, git_roots: dict[str, str | None]) -> Conversation | None:
        stats.files += 1
        state = read_rollout(rollout_id_of(path), iter_jsonl(path, stats), stats)
        kept = rollout_messages(state, stats)
        if not kept:
            stats.skip("empty_conversation")
            return None
        conversation_id = state.conversation_id or state.rollout_id
        workspace = state.first_cwd
        finished: list[SourceMessage] = []
        for message in kept:
            cwd = message.workspace_path or workspace
            if cwd is not None and cwd not in git_roots:
                git_roots[cwd] = git_root_of(cwd) if Path(cwd).is_absolute() else None
            root = git_roots.get(cwd) if cwd else None
            finished.append(with_fields(message, conversation_id=conversation_id, workspace_path=cwd, git_root=root))
        stats.messages += len(finished)
        return Conversation(SOURCE, conversation_id, finished, str(path), workspace)


ADAPTER = CodexAdapter()
