"""The one writer of turns into memory: redaction, tombstones, dedup, raw turn + L1 trace, indexing and jobs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memmy.config import Configured, Settings
from memmy.domain import Memory, content_hash
from memmy.indexing import Indexer
from memmy.kinds import memory as stored
from memmy.redact import DEFAULT_REDACTOR, Redactor
from memmy.store.db import utc_now
from memmy.store.jsontext import dumps_json
from memmy.store.tombstones import value_hash
from memmy.store.unit import Store
from memmy.traces.prepare import ImportPreparer, PreparedTrace, build_trace
from memmy.traces.turn import CapturedTurn


@dataclass
class WrittenTrace:
    """What a write did: the L1 memory (the existing one when deduplicated) and the jobs it queued."""

    memory: Memory
    jobs: list[dict[str, Any]] = field(default_factory=list)
    deduplicated: bool = False


def _dumps(value: Any) -> str:
    return dumps_json(value)


class TraceWriter(Configured):
    """Writes :class:`CapturedTurn` objects for both capture paths (live hooks and history import)."""

    def __init__(
        self, settings: Settings, store: Store, indexer: Indexer, redactor: Redactor = DEFAULT_REDACTOR
    ) -> None:
        self.settings = settings
        self.db = store.db
        self.memories = store.memories
        self.sessions = store.sessions
        self.indexer = indexer
        self.jobs = store.jobs
        self.redactor = redactor
        self.tombstones = store.tombstones
        self._import_sessions: set[str] = set()

    # -- reading ----------------------------------------------------------------------------------
    def redact(self, turn: CapturedTurn) -> CapturedTurn:
        """The turn with every secret replaced (imported turns were redacted message by message already)."""
        if turn.redacted:
            return turn
        r = self.redactor
        return replace(
            turn,
            user_text=r.redact(turn.user_text),
            assistant_text=r.redact(turn.assistant_text),
            reasoning=r.redact(turn.reasoning) if turn.reasoning else turn.reasoning,
            tool_calls=r.redact_json(turn.tool_calls),
            tool_results=r.redact_json(turn.tool_results),
            tags=[r.redact(t) for t in turn.tags],
            usage=r.redact_json(turn.usage) if turn.usage is not None else None,
            workspace_path=r.redact(turn.workspace_path) if turn.workspace_path else turn.workspace_path,
            redacted=True,
        )

    def prepare(self, turn: CapturedTurn) -> PreparedTrace:
        """Redact the turn, build its trace step and look up its tombstone and an earlier copy of it."""
        prepared = self._build(turn)
        turn = prepared.turn
        prepared.tombstone = self.tombstones.match(turn.user_id, value_hash(prepared.step.content), turn.memory_key)
        if turn.host is not None:
            held = self.memories.find_by_key("L1", turn.memory_key)
            prepared.duplicate = held if held is not None and held.id != turn.memory_id else None
        return prepared

    def _build(self, turn: CapturedTurn) -> PreparedTrace:
        """Redact the turn, normalise its tool calls and build its trace step (no store access)."""
        capture = self.config.capture
        return build_trace(self.redact(turn), capture.max_text_chars, capture.max_tool_output_chars)

    def import_preparer(self) -> ImportPreparer:
        """What builds an imported turn's trace outside this process, under the current capture settings."""
        capture = self.config.capture
        return ImportPreparer(self.config.user_id, capture.max_text_chars, capture.max_tool_output_chars)

    # -- writing ----------------------------------------------------------------------------------
    def write(self, prepared: PreparedTrace, episode_id: str | None = None) -> WrittenTrace:
        """Store the raw turn and its L1 trace and queue its processing; joins the caller's transaction.

        A turn another path stored first (same host identity) is not stored again: its memory is returned.
        """
        turn, step = prepared.turn, prepared.step
        label = f"import:{turn.host.source}" if turn.imported and turn.host else turn.source
        with self.db.transaction():
            if turn.imported:
                self._ensure_import_session(turn)
            fields = self._raw_fields(prepared, episode_id)
            self.sessions.upsert_raw_turn(turn.raw_turn_id, turn.session_id, turn.turn_id, fields)
            if prepared.duplicate is not None:  # the session keeps its raw turn; memory keeps one trace
                return WrittenTrace(prepared.duplicate, [], deduplicated=True)
            memory = self._memory(prepared, episode_id)
            previous = self.memories.get(memory.id, include_deleted=True)
            if previous is None:
                self.memories.insert(memory, source=label)
            elif turn.imported:  # deleted earlier and its tombstone restored since: the same turn comes back
                memory.version = previous.version + 1
                memory.created_at = previous.created_at
                self.memories.update(memory, previous.snapshot(), "restore", label)
            else:  # completed again (a deleted trace only gets here once its tombstone was restored: it comes back)
                before = previous.snapshot()
                if previous.status == "deleted":
                    previous.status, previous.deleted_at = "activated", None
                previous.content, previous.title, previous.tags = memory.content, memory.title, memory.tags
                previous.properties, previous.content_hash = memory.properties, memory.content_hash
                previous.version += 1
                previous.updated_at = memory.updated_at
                self.memories.update(previous, before, "update", label)
                memory = previous
            jobs = self._schedule_processing(memory, step.embedding_text, turn.imported)
        if turn.imported:
            self._import_sessions.add(turn.session_id)
        return WrittenTrace(memory, jobs)

    def write_imported(self, turns: Sequence[CapturedTurn | PreparedTrace]) -> list[str | None]:
        """Store many imported turns of one source in a few statements; each one's memory id, None when forgotten.

        A turn may come prepared already (by :meth:`import_preparer`, in the history reader process). The caller
        checked that none of them is stored yet (or it was deleted and may come back); the batch joins the caller's
        transaction, so a failure undoes the whole batch.
        """
        built = [turn if isinstance(turn, PreparedTrace) else self._build(turn) for turn in turns]
        if not built:
            return []
        user_id = built[0].turn.user_id
        values = [value_hash(p.step.content) for p in built]
        hashes, keys = self.tombstones.matched(user_id, values, [p.turn.memory_key for p in built])
        kept = [
            p for p, value in zip(built, values, strict=True) if p.turn.memory_key not in keys and value not in hashes
        ]
        with self.db.transaction():
            for first in {p.turn.session_id: p.turn for p in kept}.values():
                self._ensure_import_session(first)
            self.sessions.upsert_raw_turns(
                [(p.turn.raw_turn_id, p.turn.session_id, p.turn.turn_id, self._raw_fields(p, None)) for p in kept]
            )
            memories = [self._memory(p, None) for p in kept]
            previous = self.memories.get_any([m.id for m in memories])
            labels = {f"import:{m.info['importSource']}" for m in memories}
            for label in sorted(labels):
                fresh = [m for m in memories if m.id not in previous and f"import:{m.info['importSource']}" == label]
                self.memories.insert_many(fresh, label)
            for memory in memories:
                if memory.id in previous:  # deleted earlier and its tombstone restored since: it comes back
                    before = previous[memory.id]
                    memory.version, memory.created_at = before.version + 1, before.created_at
                    label = f"import:{memory.info['importSource']}"
                    self.memories.update(memory, before.snapshot(), "restore", label)
            texts = [p.step.embedding_text for p in kept]
            self.indexer.enqueue_many([(m.id, "L1", text) for m, text in zip(memories, texts, strict=True)])
        self._import_sessions.update(p.turn.session_id for p in kept)
        written = {p.turn.memory_id for p in kept}
        return [p.turn.memory_id if p.turn.memory_id in written else None for p in built]

    def _ensure_import_session(self, turn: CapturedTurn) -> None:
        """Imported turns live in one closed session per host conversation."""
        if turn.session_id in self._import_sessions or self.sessions.get(turn.session_id) is not None:
            return
        self.sessions.create(
            turn.session_id,
            user_id=turn.user_id,
            project_id=turn.project_id,
            source=turn.source,
            profile_id="import",
            workspace_path=turn.workspace_path,
            host_session_key=None,
            meta={"conversationId": turn.conversation_id, "imported": True},
        )
        self.sessions.close(turn.session_id)

    def _raw_fields(self, prepared: PreparedTrace, episode_id: str | None) -> dict[str, Any]:
        turn = prepared.turn
        fields: dict[str, Any] = {
            "user_id": turn.user_id,
            "user_text": turn.user_text,
            "assistant_text": turn.assistant_text,
            "tool_calls_json": _dumps(prepared.tool_calls),
            "status": turn.status,
        }
        if episode_id is not None:
            fields["episode_id"] = episode_id
        if turn.conversation_id is not None:
            fields["conversation_id"] = turn.conversation_id
        if not turn.imported:
            fields["reasoning_summary"] = turn.reasoning
            fields["tool_results_json"] = _dumps(turn.tool_results)
            fields["source_memory_ids_json"] = json.dumps(turn.source_memory_ids)
            fields["usage_json"] = json.dumps(turn.usage) if turn.usage is not None else None
        return fields

    def _memory(self, prepared: PreparedTrace, episode_id: str | None) -> Memory:
        turn, step = prepared.turn, prepared.step
        now = utc_now()
        created = turn.created_at or now
        trace = {
            "key": f"trace:{turn.session_id}:{turn.turn_id}:0",
            "episode_id": episode_id,
            "turn_id": turn.turn_id,
            "raw_turn_id": turn.raw_turn_id,
            "step_index": 0,
            "sub_step_total": 1,
            "userText": step.user_text,
            "agentText": step.agent_text,
            "tool_calls": step.tool_calls,
            "agent_thinking": turn.reasoning,
            "summary": step.summary,
            "tags": step.tags,
            "signature": step.signature,
            "error_signatures": step.error_signatures,
            "status": turn.status,
            "value": 0,
            "alpha": 0,
            "priority": 0.5,
        }
        properties: dict[str, Any] = {
            "summary": step.summary,
            "trace": trace,
            "embeddingText": step.embedding_text,
            "value": 0,
            "alpha": 0,
            "priority": 0.5,
            "sourceMemoryIds": turn.source_memory_ids,
        }
        if turn.source_message_ids:
            properties = stored.with_values(properties, **{stored.SOURCE_MESSAGE_IDS: turn.source_message_ids})
        info: dict[str, Any] = {}
        if turn.imported and turn.host is not None:
            info = {"importPending": 1, "importSource": turn.host.source, "conversationId": turn.conversation_id}
        return Memory(
            id=turn.memory_id,
            layer="L1",
            content=step.content,
            title=step.summary,
            tags=step.tags,
            user_id=turn.user_id,
            project_id=turn.project_id,
            visibility=turn.visibility,
            source_agent=turn.source,
            session_id=turn.session_id,
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            memory_key=turn.memory_key,
            content_hash=content_hash(step.content),
            info=info,
            properties=properties,
            created_at=created,
            updated_at=now,
            valid_from=created,
        )

    def _schedule_processing(self, memory: Memory, embedding_text: str, imported: bool) -> list[dict[str, Any]]:
        """summary_pending → trace_summary job (summary model configured), else straight to embedding.

        Imported history is only embedded: a summary call per historical turn would flood the model.
        """
        if not imported and self.config.summary.configured:
            self.indexer.queue.set_state(memory.id, "summary_pending", "summary")
            job, _created = self.jobs.enqueue(
                "trace_summary",
                dedupe_key=f"trace_summary:{memory.id}:{memory.content_hash}",
                target_memory_id=memory.id,
            )
            return [{"jobId": job.id, "jobType": "trace_summary", "status": job.status, "targetMemoryId": memory.id}]
        if not imported and not self.config.capture.embed_after_capture:
            self.indexer.queue.set_state(memory.id, "ready_text_only")
            return []
        self.indexer.enqueue(memory.id, "L1", embedding_text)
        return [
            {"jobId": f"embed:{memory.id}", "jobType": "embedding", "status": "queued", "targetMemoryId": memory.id}
        ]
