"""Sessions and turns: open/close a session, turn start (recall) and turn complete (capture)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from memmy.capture.sanitize import sanitize_text
from memmy.commands.answers import SessionClosed, SessionOpened, TurnCompleted, TurnStarted
from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn, normalize_status
from memmy.config import Configured, Settings
from memmy.domain import new_id, sha256_hex
from memmy.errors import Conflict, NotFound
from memmy.evolve.repair import tool_failure_burst
from memmy.evolve.rules_text import call_failed
from memmy.jobs.episode import EpisodeOps
from memmy.jobs.evolution import queue_burst_repair
from memmy.jobs.writer import indexed_trace
from memmy.namespace import Namespace
from memmy.recall.intent import classify_intent, should_skip
from memmy.service.recall import RecallOps
from memmy.store.db import utc_now
from memmy.store.unit import Store
from memmy.traces.turn import CapturedTurn, HostTurn, raw_turn_id_of
from memmy.traces.writer import TraceWriter

RECENT_TURNS_EXCLUDED = 8
__all__ = ["RECENT_TURNS_EXCLUDED", "TurnOps", "normalize_status"]


class TurnOps(Configured):
    """Session lifecycle and turn capture."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        writer: TraceWriter,
        recall_ops: RecallOps,
        episode_ops: EpisodeOps,
        wake_worker: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.store = store
        self.db = store.db
        self.sessions = store.sessions
        self.logs = store.logs
        self.writer = writer
        self.recall_ops = recall_ops
        self.episode_ops = episode_ops
        self.jobs = store.jobs
        self.evolution = store.evolution
        self.wake_worker = wake_worker

    def open_session(self, command: OpenSession, ns: Namespace) -> SessionOpened:
        """Open (or resume) a session for an agent."""
        ns = ns.with_body(command.source, command.workspace_path)
        session_id = command.session_id
        if session_id:
            row = self.sessions.get(session_id)
            if row is not None and not _owns(row, ns):
                raise Conflict(f"session {session_id} belongs to someone else; open a session of your own")
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

    def close_session(self, command: CloseSession) -> SessionClosed:
        """Close a session (and its open episodes)."""
        session_id = command.session_id
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

    def _open_session_row(self, session_id: str, ns: Namespace) -> Any:
        row = self.sessions.get(session_id)
        if row is None or not _owns(row, ns):
            raise NotFound(f"session {session_id} not found; open one with POST /api/v1/sessions/open")
        return row

    def start_turn(self, command: StartTurn, ns: Namespace) -> TurnStarted:
        """Record a turn start and return recalled context for the agent's prompt."""
        session_id = command.session_id
        row = self._open_session_row(session_id, ns)
        if row["status"] != "open":
            raise Conflict(f"session {session_id} is not open")
        ns = ns.with_body(command.source or row["source"], command.workspace_path or row["workspace_path"])
        query = sanitize_text(command.query)
        turn_id = command.turn_id or new_id("turn")
        limit, layers = command.limit, command.layers
        recent = self.sessions.recent_raw_turn_ids(session_id, RECENT_TURNS_EXCLUDED)
        excluded = self.writer.memories.trace_ids_of_raw_turns(session_id, recent)
        status: list[str] = []
        intent = classify_intent(query) if not recent else "task"
        if should_skip(intent):
            markdown, sections, tokens, hits, source_ids, event_id = "", [], 0, [], [], None
            status.append(f"intent:{intent}:retrieval_skipped")
        elif query and self.config.flags.enable_memory_search:
            result = self.recall_ops.run(
                query,
                options=command.recall_options,
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
        raw_turn_id = raw_turn_id_of(session_id, turn_id)
        context_packet_id = "ctx_" + sha256_hex(f"{session_id}::{turn_id}:{event_id}")[:20]
        episode_id: str | None = None
        relation_name: str | None = None
        ident = command.idempotency
        # The turn, its episode routing and the request's idempotency key commit together or not at all: a retry
        # never finds a recorded turn without its stored answer (nor an answer without its turn).
        with self.store.transaction():
            if self.config.flags.enable_memory_add:  # with writes off, turn start recalls but stores nothing
                existing_turn = self.sessions.get_raw_turn(session_id, turn_id)
                episode_id = existing_turn["episode_id"] if existing_turn is not None else None
                if episode_id is None and query:
                    episode_id, relation = self.episode_ops.route_turn(
                        session_id, raw_turn_id, query, user_id=ns.user_id, project_id=ns.project_id
                    )
                    relation_name = relation.relation
                    if self.config.evolution.configured and relation.confidence < 0.85 and relation.rule != "bootstrap":
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
            response: TurnStarted = {
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
                self.logs.store_idempotent_response(ident.key, ident.request_hash, dict(response))
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
            only_started=True,  # a start that arrives after the turn was completed (the agent gave up waiting)
        )

    def complete_turn(self, command: CompleteTurn, ns: Namespace) -> TurnCompleted:
        """Store the raw turn and its L1 trace (tool trace kept, injected context stripped)."""
        turn_id, session_id = command.turn_id, command.session_id
        row = self._open_session_row(session_id, ns)
        started_turn = self.sessions.get_raw_turn(session_id, turn_id)
        if row["status"] != "open" and started_turn is None:
            raise Conflict(f"session {session_id} is closed and turn {turn_id} was never started in it")
        ns = ns.with_body(command.source or row["source"], command.workspace_path or row["workspace_path"])
        reply: dict[str, object] = {"turnId": turn_id, "sessionId": session_id, "status": command.status}
        if not self.config.flags.enable_memory_add:
            # Writes are disabled: answer the hook normally (it must never fail) but store nothing.
            return self._not_captured(reply)
        prepared = self.writer.prepare(captured_turn(command, ns, started_turn))
        if prepared.tombstone is not None:  # the user forgot exactly this turn: store nothing of it again
            return self._not_captured({**reply, "tombstoned": True, "tombstoneId": prepared.tombstone.id})
        turn = prepared.turn
        episode_id = self._episode_for_completion(started_turn, command.episode_id, turn, ns)
        first_completion = started_turn is None or started_turn["status"] == "started"
        if first_completion:  # a step whose evidence shares nothing with its open task starts a task of its own
            step = prepared.step
            split = self.episode_ops.split_on_evidence(episode_id, turn.raw_turn_id, step.user_text, step.tool_calls)
            episode_id = split or episode_id
        with self.store.transaction():
            written = self.writer.write(prepared, episode_id)
            jobs = written.jobs + self._schedule_episode_work(
                episode_id, written.memory.id, turn.raw_turn_id, prepared.tool_calls, first_completion
            )
        self.sessions.touch(session_id)
        self.wake_worker()
        l1_id = written.memory.id
        self.logs.api_call(
            "memory_add", ns.source, {"turnId": turn_id, "layer": "L1"}, {"id": l1_id}, 0.0, True, ns.user_id
        )
        extra = {"deduplicated": True} if written.deduplicated else {}
        answer = {
            **reply,
            "episodeId": episode_id,
            "rawTurnId": turn.raw_turn_id,
            "l1MemoryId": l1_id,
            "captured": True,
            **extra,
            "scheduledEvolution": bool(jobs),
            "jobs": jobs,
            "changeSeq": self.logs.latest_change_seq(),
            "serverTime": utc_now(),
        }
        return cast(TurnCompleted, answer)

    def _not_captured(self, reply: dict[str, object]) -> TurnCompleted:
        """The answer for a completion that stores nothing (writes off, or a forgotten turn)."""
        answer = {
            **reply,
            "episodeId": None,
            "rawTurnId": None,
            "l1MemoryId": None,
            "captured": False,
            "scheduledEvolution": False,
            "jobs": [],
            "changeSeq": self.logs.latest_change_seq(),
            "serverTime": utc_now(),
        }
        return cast(TurnCompleted, answer)

    # -- capture helpers --------------------------------------------------------------------------
    def _episode_for_completion(
        self, started_turn: Any, wanted: str | None, turn: CapturedTurn, ns: Namespace
    ) -> str:
        """The turn's episode: the one chosen at turn start, the caller's, or the heuristic's."""
        if started_turn is not None and started_turn["episode_id"]:
            return str(started_turn["episode_id"])
        if wanted:
            episode = self.episode_ops.episodes.get(wanted)
            if episode is not None and episode.session_id == turn.session_id:
                self.episode_ops.episodes.add_ids(wanted, "raw_turn_ids_json", [turn.raw_turn_id])
                return wanted
        episode_id, _relation = self.episode_ops.route_turn(
            turn.session_id, turn.raw_turn_id, turn.user_text, user_id=ns.user_id, project_id=ns.project_id
        )
        return episode_id

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
        if any(call_failed(c) for c in tool_calls):  # this turn failed a call: has one tool failed in a burst?
            feedback_cfg = self.config.feedback
            episode = episodes.get(episode_id)
            window = (episode.l1_memory_ids if episode else [])[-feedback_cfg.failure_window :]
            recent = [indexed_trace(m) for m in self.writer.memories.get_many(window).values()]
            burst = tool_failure_burst(recent, feedback_cfg.failure_threshold, feedback_cfg.failure_window)
            if burst is not None:
                job = queue_burst_repair(self.jobs, episode_id, burst)
                scheduled.append(
                    {"jobId": job.id, "jobType": job.job_type, "status": job.status, "targetMemoryId": None}
                )
        return scheduled


def _owns(row: Any, ns: Namespace) -> bool:
    """Whether a team server's person may use this session (their own; everyone on a store without people)."""
    return ns.reader is None or row["user_id"] in (None, ns.user_id)


def captured_turn(command: CompleteTurn, ns: Namespace, started_turn: Any) -> CapturedTurn:
    """The typed turn a hook's completion request describes (texts stripped of injected context)."""
    source_ids = command.source_memory_ids
    if not source_ids and started_turn is not None:
        source_ids = json.loads(started_turn["source_memory_ids_json"] or "[]")  # what turn start injected
    host = None
    if command.host_conversation_id and command.host_message_id:
        host = HostTurn(ns.source, command.host_conversation_id, command.host_message_id)
    return CapturedTurn(
        session_id=command.session_id,
        turn_id=command.turn_id,
        user_id=ns.user_id,
        project_id=ns.project_id,
        source=ns.source,
        user_text=sanitize_text(command.query),
        assistant_text=sanitize_text(command.answer),
        tool_calls=command.tool_calls,
        tool_results=command.tool_results,
        status=command.status,
        reasoning=command.reasoning_summary,
        tags=command.tags,
        source_memory_ids=source_ids,
        usage=command.usage,
        host=host,
        conversation_id=command.host_conversation_id,
        workspace_path=ns.workspace_path,
        visibility=ns.visibility,
    )
