"""Sessions and turns: open/close a session, turn start (recall) and turn complete (capture)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memmy.capture.sanitize import sanitize_text
from memmy.capture.trace import build_trace_step, normalize_tool_calls
from memmy.config import MemmyConfig
from memmy.domain import Memory, content_hash, new_id, sha256_hex
from memmy.errors import Conflict, InvalidArgument, NotFound
from memmy.recall.intent import classify_intent, should_skip
from memmy.service.episodes import EpisodeOps
from memmy.service.idempotency import idempotency_key
from memmy.service.memories import MemoryOps
from memmy.service.namespace import Namespace
from memmy.service.recall import RecallOps
from memmy.service.validate import layers_of, opt_int, opt_list, opt_str, opt_tags, req_str, require_object
from memmy.store.db import Database, utc_now
from memmy.store.evolution import EvolutionRepository
from memmy.store.jobs import JobRepository
from memmy.store.logs import LogRepository
from memmy.store.sessions import SessionRepository
from memmy.store.tombstones import value_hash

_STATUS_ALIASES = {
    "ok": "succeeded",
    "success": "succeeded",
    "succeeded": "succeeded",
    "error": "failed",
    "failed": "failed",
    "failure": "failed",
    "timeout": "failed",
    "killed": "failed",
    "cancelled": "cancelled",
    "canceled": "cancelled",
    "reset": "cancelled",
    "deleted": "cancelled",
}
RECENT_TURNS_EXCLUDED = 8


def normalize_status(value: Any) -> str:
    """Map host status words onto succeeded | failed | cancelled."""
    if value is None or value == "":
        return "succeeded"
    if not isinstance(value, str) or value.strip().lower() not in _STATUS_ALIASES:
        raise InvalidArgument(f"status: expected succeeded, failed or cancelled, got {value!r}")
    return _STATUS_ALIASES[value.strip().lower()]


def _safe_id(value: str, name: str) -> str:
    if len(value) > 200 or any(ch in value for ch in "\x00\n\r"):
        raise InvalidArgument(f"{name}: expected a short id without control characters")
    return value


class TurnOps:
    """Session lifecycle and turn capture."""

    def __init__(
        self,
        config: MemmyConfig,
        db: Database,
        sessions: SessionRepository,
        logs: LogRepository,
        memory_ops: MemoryOps,
        recall_ops: RecallOps,
        episode_ops: EpisodeOps,
        jobs: JobRepository,
        evolution: EvolutionRepository,
        wake_worker: Callable[[], None],
    ) -> None:
        self.config = config
        self.db = db
        self.sessions = sessions
        self.logs = logs
        self.memory_ops = memory_ops
        self.recall_ops = recall_ops
        self.episode_ops = episode_ops
        self.jobs = jobs
        self.evolution = evolution
        self.wake_worker = wake_worker

    def open_session(self, body: Any, ns: Namespace) -> dict[str, Any]:
        """Open (or resume) a session for an agent."""
        body = require_object(body)
        ns = ns.with_body(body.get("source"), body.get("workspacePath"))
        session_id = opt_str(body, "sessionId")
        if session_id:
            _safe_id(session_id, "sessionId")
            row = self.sessions.get(session_id)
            if row is not None:
                if row["status"] != "open":
                    raise Conflict(f"session {session_id} is not open")
                self.sessions.touch(session_id)
                return {"sessionId": session_id, "status": "open", "resumed": True, "serverTime": utc_now()}
        if ns.session_key and not session_id:
            row = self.sessions.find_open_by_host_key(ns.user_id, ns.source, ns.profile_id, ns.session_key)
            if row is not None:
                self.sessions.touch(row["id"])
                return {"sessionId": row["id"], "status": "open", "resumed": True, "serverTime": utc_now()}
        new_session = session_id or new_id("session")
        self.sessions.create(
            new_session,
            user_id=ns.user_id,
            project_id=ns.project_id,
            source=ns.source,
            profile_id=ns.profile_id,
            workspace_path=ns.workspace_path,
            host_session_key=ns.session_key,
            meta={},
        )
        return {"sessionId": new_session, "status": "open", "resumed": False, "serverTime": utc_now()}

    def close_session(self, session_id: str) -> dict[str, Any]:
        """Close a session (and its open episodes)."""
        row = self.sessions.get(session_id)
        if row is None:
            raise NotFound(f"session {session_id} not found")
        closed = self.episode_ops.close_session_episodes(session_id)
        self.sessions.close(session_id)
        if closed:
            self.wake_worker()
        return {
            "ok": True,
            "sessionId": session_id,
            "status": "closed",
            "closedEpisodeIds": closed,
            "serverTime": utc_now(),
        }

    def _open_session_row(self, session_id: str) -> Any:
        row = self.sessions.get(session_id)
        if row is None:
            raise NotFound(f"session {session_id} not found; open one with POST /api/v1/sessions/open")
        return row

    def start_turn(self, body: Any, ns: Namespace) -> dict[str, Any]:
        """Record a turn start and return recalled context for the agent's prompt."""
        body = require_object(body)
        session_id = _safe_id(req_str(body, "sessionId"), "sessionId")
        row = self._open_session_row(session_id)
        if row["status"] != "open":
            raise Conflict(f"session {session_id} is not open")
        ns = ns.with_body(body.get("source") or row["source"], body.get("workspacePath") or row["workspace_path"])
        query = sanitize_text(req_str(body, "query", max_len=200_000))
        turn_id = _safe_id(opt_str(body, "turnId") or new_id("turn"), "turnId")
        limit = opt_int(body, "limit", 10, minimum=1, maximum=50)
        recent = self.sessions.recent_raw_turn_ids(session_id, RECENT_TURNS_EXCLUDED)
        excluded = self.memory_ops.memories.trace_ids_of_raw_turns(session_id, recent)
        status: list[str] = []
        intent = classify_intent(query) if not recent else "task"
        layers = layers_of(body)
        if should_skip(intent):
            markdown, sections, tokens, hits, source_ids, event_id = "", [], 0, [], [], None
            status.append(f"intent:{intent}:retrieval_skipped")
        elif query and self.config.algorithm["enableMemorySearch"]:
            result = self.recall_ops.run(
                query,
                body=body,
                ns=ns,
                limit=limit,
                layers=layers,
                mode="turn_start",
                session_id=session_id,
                turn_id=turn_id,
                exclude_ids=excluded,
            )
            markdown, sections, tokens = result.markdown, result.sections, result.token_estimate
            hits, source_ids, event_id = result.hits, result.source_memory_ids, result.search_event_id
            status.extend(result.status)
        else:
            markdown, sections, tokens, hits, source_ids, event_id = "", [], 0, [], [], None
            status.append("memory_search:disabled" if query else "query:empty")
        raw_turn_id = "raw_" + sha256_hex(f"{session_id}:{turn_id}")[:20]
        context_packet_id = "ctx_" + sha256_hex(f"{session_id}::{turn_id}:{event_id}")[:20]
        episode_id: str | None = None
        relation_name: str | None = None
        ident = idempotency_key("turn.start", body)
        # The turn, its episode routing and the request's idempotency key commit together or not at all: a retry
        # never finds a recorded turn without its stored answer (nor an answer without its turn).
        with self.db.transaction():
            if self.config.algorithm["enableMemoryAdd"]:  # with writes off, turn start recalls but stores nothing
                existing_turn = self.sessions.get_raw_turn(session_id, turn_id)
                episode_id = existing_turn["episode_id"] if existing_turn is not None else None
                if episode_id is None and query:
                    episode_id, relation = self.episode_ops.route_turn(
                        session_id, raw_turn_id, query, user_id=ns.user_id, project_id=ns.project_id
                    )
                    relation_name = relation.relation
                    if (
                        self.config.evolution.configured
                        and relation.confidence < 0.85
                        and relation.rule != "bootstrap"
                    ):
                        self.jobs.enqueue(  # the model double-checks weak verdicts later, off the hook path
                            "episode_relation",
                            dedupe_key=f"episode_relation:{raw_turn_id}",
                            episode_id=episode_id,
                            payload={"rawTurnId": raw_turn_id, "heuristic": relation.relation},
                        )
                self._record_start(
                    raw_turn_id, session_id, turn_id, ns, query, source_ids, context_packet_id, event_id, episode_id
                )
                if episode_id is not None:
                    for skill_id in [i for i in source_ids if i.startswith("skill_")]:
                        self.evolution.add_trial(skill_id, episode_id, session_id=session_id, user_id=ns.user_id)
            self.sessions.touch(session_id)
            response = {
                "turnId": turn_id,
                "contextPacketId": context_packet_id,
                "sessionId": session_id,
                "episodeId": episode_id,
                "episodeRelation": relation_name,
                "searchEventId": event_id,
                "injectedContext": {"markdown": markdown, "sections": sections, "tokenEstimate": tokens},
                "sourceMemoryIds": source_ids,
                "hits": hits,
                "status": status,
                "serverTime": utc_now(),
            }
            if ident is not None:
                self.logs.store_idempotent_response(ident.key, ident.request_hash, response)
        self.wake_worker()  # routing may have closed an episode or queued a repair
        return response

    def _record_start(
        self,
        raw_turn_id: str,
        session_id: str,
        turn_id: str,
        ns: Namespace,
        query: str,
        source_ids: list[str],
        context_packet_id: str,
        event_id: str | None,
        episode_id: str | None,
    ) -> None:
        self.sessions.upsert_raw_turn(
            raw_turn_id,
            session_id,
            turn_id,
            {
                "episode_id": episode_id,
                "user_id": ns.user_id,
                "user_text": query,
                "status": "started",
                "source_memory_ids_json": json.dumps(source_ids),
                "message_payload_json": json.dumps(
                    {"turn_start": {"contextPacketId": context_packet_id, "searchEventId": event_id}}
                ),
            },
        )

    def complete_turn(self, turn_id: str, body: Any, ns: Namespace) -> dict[str, Any]:
        """Store the raw turn and its L1 trace (tool trace kept, injected context stripped)."""
        body = require_object(body)
        turn_id = _safe_id(turn_id, "turnId")
        session_id = _safe_id(req_str(body, "sessionId"), "sessionId")
        row = self._open_session_row(session_id)
        started_turn = self.sessions.get_raw_turn(session_id, turn_id)
        if row["status"] != "open" and started_turn is None:
            raise Conflict(f"session {session_id} is closed and turn {turn_id} was never started in it")
        ns = ns.with_body(body.get("source") or row["source"], body.get("workspacePath") or row["workspace_path"])
        query = sanitize_text(req_str(body, "query", max_len=2_000_000))
        answer = sanitize_text(req_str(body, "answer", max_len=2_000_000))
        status = normalize_status(body.get("status"))
        reasoning = opt_str(body, "reasoningSummary")
        tool_calls = normalize_tool_calls(opt_list(body, "toolCalls"), opt_list(body, "toolResults"))
        source_ids = [i for i in opt_list(body, "sourceMemoryIds") if isinstance(i, str)]
        if not source_ids and started_turn is not None:
            source_ids = json.loads(started_turn["source_memory_ids_json"] or "[]")  # what turn start injected
        tags = opt_tags(body)
        usage = body.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise InvalidArgument("usage: expected an object")
        if not self.config.algorithm["enableMemoryAdd"]:
            # Writes are disabled: answer the hook normally (it must never fail) but store nothing.
            return {
                "turnId": turn_id,
                "sessionId": session_id,
                "episodeId": None,
                "rawTurnId": None,
                "l1MemoryId": None,
                "status": status,
                "captured": False,
                "scheduledEvolution": False,
                "jobs": [],
                "changeSeq": self.logs.latest_change_seq(),
                "serverTime": utc_now(),
            }
        capture = self.config.algorithm["capture"]
        raw_turn_id = "raw_" + sha256_hex(f"{session_id}:{turn_id}")[:20]
        step = build_trace_step(
            user_text=query,
            assistant_text=answer,
            tool_calls=tool_calls,
            raw_turn_id=raw_turn_id,
            reasoning=reasoning,
            request_tags=tags,
            max_text_chars=int(capture["maxTextChars"]),
            max_tool_output_chars=int(capture["maxToolOutputChars"]),
        )
        l1_id = "trace_" + sha256_hex(f"L1:{session_id}:{turn_id}:0")[:20]
        tombstone = self.memory_ops.tombstones.match(
            ns.user_id, value_hash(step.content), f"trace:{session_id}:{turn_id}:0"
        )
        if tombstone is not None:  # the user forgot exactly this turn: store nothing of it again
            return {
                "turnId": turn_id,
                "sessionId": session_id,
                "episodeId": None,
                "rawTurnId": None,
                "l1MemoryId": None,
                "status": status,
                "captured": False,
                "tombstoned": True,
                "tombstoneId": tombstone.id,
                "scheduledEvolution": False,
                "jobs": [],
                "changeSeq": self.logs.latest_change_seq(),
                "serverTime": utc_now(),
            }
        episode_id = self._episode_for_completion(started_turn, body, session_id, raw_turn_id, query, ns)
        if started_turn is None or started_turn["status"] == "started":  # first completion: the step's evidence
            split = self.episode_ops.split_on_evidence(episode_id, raw_turn_id, step.user_text, step.tool_calls)
            episode_id = split or episode_id
        now = utc_now()
        trace_props = {
            "key": f"trace:{session_id}:{turn_id}:0",
            "episode_id": episode_id,
            "turn_id": turn_id,
            "raw_turn_id": raw_turn_id,
            "step_index": 0,
            "sub_step_total": 1,
            "userText": step.user_text,
            "agentText": step.agent_text,
            "tool_calls": step.tool_calls,
            "agent_thinking": reasoning,
            "summary": step.summary,
            "tags": step.tags,
            "signature": step.signature,
            "error_signatures": step.error_signatures,
            "status": status,
            "value": 0,
            "alpha": 0,
            "priority": 0.5,
        }
        with self.db.transaction():
            self.sessions.upsert_raw_turn(
                raw_turn_id,
                session_id,
                turn_id,
                {
                    "episode_id": episode_id,
                    "user_id": ns.user_id,
                    "user_text": query,
                    "assistant_text": answer,
                    "reasoning_summary": reasoning,
                    "tool_calls_json": json.dumps(tool_calls, ensure_ascii=False, default=str),
                    "tool_results_json": json.dumps(opt_list(body, "toolResults"), ensure_ascii=False, default=str),
                    "source_memory_ids_json": json.dumps(source_ids),
                    "usage_json": json.dumps(usage) if usage is not None else None,
                    "status": status,
                },
            )
            existing = self.memory_ops.memories.get(l1_id, include_deleted=True)
            properties = {
                "summary": step.summary,
                "trace": trace_props,
                "embeddingText": step.embedding_text,
                "value": 0,
                "alpha": 0,
                "priority": 0.5,
                "sourceMemoryIds": source_ids,
            }
            if existing is None:
                memory = Memory(
                    id=l1_id,
                    layer="L1",
                    content=step.content,
                    title=step.summary,
                    tags=step.tags,
                    user_id=ns.user_id,
                    project_id=ns.project_id,
                    source_agent=ns.source,
                    session_id=session_id,
                    turn_id=turn_id,
                    memory_key=f"trace:{session_id}:{turn_id}:0",
                    content_hash=content_hash(step.content),
                    properties=properties,
                    created_at=now,
                    updated_at=now,
                    valid_from=now,
                )
                self.memory_ops.memories.insert(memory, source=ns.source)
            else:  # (a deleted trace only gets here once its tombstone was restored: it comes back)
                before = existing.snapshot()
                if existing.status == "deleted":
                    existing.status, existing.deleted_at = "activated", None
                existing.content = step.content
                existing.title = step.summary
                existing.tags = step.tags
                existing.properties = properties
                existing.content_hash = content_hash(step.content)
                existing.version += 1
                existing.updated_at = now
                self.memory_ops.memories.update(existing, before, "update", ns.source)
                memory = existing
            jobs: list[dict[str, Any]] = []
            if memory.status != "deleted":
                jobs.extend(self._schedule_processing(memory, step.embedding_text))
            first_completion = started_turn is None or started_turn["status"] == "started"
            jobs.extend(self._schedule_episode_work(episode_id, l1_id, raw_turn_id, tool_calls, first_completion))
        self.sessions.touch(session_id)
        self.wake_worker()
        self.logs.api_call(
            "memory_add", ns.source, {"turnId": turn_id, "layer": "L1"}, {"id": l1_id}, 0.0, True, ns.user_id
        )
        return {
            "turnId": turn_id,
            "sessionId": session_id,
            "episodeId": episode_id,
            "rawTurnId": raw_turn_id,
            "l1MemoryId": l1_id,
            "status": status,
            "captured": True,
            "scheduledEvolution": bool(jobs),
            "jobs": jobs,
            "changeSeq": self.logs.latest_change_seq(),
            "serverTime": utc_now(),
        }

    # -- capture helpers --------------------------------------------------------------------------
    def _episode_for_completion(
        self, started_turn: Any, body: dict[str, Any], session_id: str, raw_turn_id: str, query: str, ns: Namespace
    ) -> str:
        """The turn's episode: the one chosen at turn start, the caller's, or the heuristic's."""
        if started_turn is not None and started_turn["episode_id"]:
            return str(started_turn["episode_id"])
        wanted = opt_str(body, "episodeId")
        if wanted:
            episode = self.episode_ops.episodes.get(wanted)
            if episode is not None and episode.session_id == session_id:
                self.episode_ops.episodes.add_ids(wanted, "raw_turn_ids_json", [raw_turn_id])
                return wanted
        episode_id, _relation = self.episode_ops.route_turn(
            session_id, raw_turn_id, query, user_id=ns.user_id, project_id=ns.project_id
        )
        return episode_id

    def _schedule_processing(self, memory: Memory, embedding_text: str) -> list[dict[str, Any]]:
        """summary_pending → trace_summary job (summary model configured), else straight to embedding."""
        capture = self.config.algorithm["capture"]
        if self.config.summary.configured:
            self.memory_ops.queue.set_state(memory.id, "summary_pending", "summary")
            job, _created = self.jobs.enqueue(
                "trace_summary",
                dedupe_key=f"trace_summary:{memory.id}:{memory.content_hash}",
                target_memory_id=memory.id,
            )
            return [{"jobId": job.id, "jobType": "trace_summary", "status": job.status, "targetMemoryId": memory.id}]
        if not capture["embedAfterCapture"]:
            self.memory_ops.queue.set_state(memory.id, "ready_text_only")
            return []
        self.memory_ops.indexer.enqueue(memory.id, "L1", embedding_text)
        return [
            {"jobId": f"embed:{memory.id}", "jobType": "embedding", "status": "queued", "targetMemoryId": memory.id}
        ]

    def _schedule_episode_work(
        self,
        episode_id: str,
        l1_id: str,
        raw_turn_id: str,
        tool_calls: list[dict[str, Any]],
        first_completion: bool,
    ) -> list[dict[str, Any]]:
        """Attach the trace to its episode; queue idle close and, on a tool-failure burst, a decision repair."""
        episodes = self.episode_ops.episodes
        episodes.add_ids(episode_id, "l1_memory_ids_json", [l1_id])
        scheduled: list[dict[str, Any]] = []
        current = episodes.get(episode_id)
        if current is not None and current.status == "closed":  # a late completion: score the episode again
            episodes.update_meta(episode_id, {"rewardDirty": True})
            self.episode_ops.finalize(episode_id)
        if first_completion:
            job, _ = self.jobs.enqueue(
                "episode_idle_close", dedupe_key=f"episode_idle_close:{raw_turn_id}", episode_id=episode_id
            )
            scheduled.append({"jobId": job.id, "jobType": job.job_type, "status": job.status, "targetMemoryId": None})
        failed_tools = {c["name"] for c in tool_calls if c.get("success") is False or c.get("error")}
        if failed_tools:
            feedback_cfg = self.config.algorithm["feedback"]
            episode = episodes.get(episode_id)
            window = (episode.l1_memory_ids if episode else [])[-int(feedback_cfg["failureWindow"]) :]
            recent = self.memory_ops.memories.get_many(window)
            for tool in failed_tools:
                failures = successes = 0
                for memory in recent.values():
                    for call in (memory.properties.get("trace") or {}).get("tool_calls") or []:
                        if call.get("name") != tool:
                            continue
                        if call.get("success") is False or call.get("error"):
                            failures += 1
                        else:
                            successes += 1
                if failures >= int(feedback_cfg["failureThreshold"]) and successes == 0:
                    job, _ = self.jobs.enqueue(
                        "decision_repair",
                        dedupe_key=f"decision_repair:burst:{episode_id}:{tool}",
                        episode_id=episode_id,
                        payload={"trigger": "tool_failure_burst", "tool": tool, "failures": failures, "reason": ""},
                    )
                    scheduled.append(
                        {"jobId": job.id, "jobType": job.job_type, "status": job.status, "targetMemoryId": None}
                    )
        return scheduled
