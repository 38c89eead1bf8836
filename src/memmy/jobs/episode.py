"""Episodes: route each turn to a task episode, close and finalize episodes, and take user feedback."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np

from memmy.commands.answers import FeedbackRecorded, MemoryDetail
from memmy.commands.evolution import Feedback
from memmy.config import Configured, Settings
from memmy.domain import Memory
from memmy.errors import NotFound
from memmy.evolve.boundaries import (
    EPISODE_IDLE_TIMEOUT,
    EVIDENCE_SHIFT_MIN,
    MERGE_WINDOW,
    EpisodeContext,
    TurnRelation,
    classify_feedback,
    classify_relation,
    evidence_shift,
    has_cjk,
)
from memmy.evolve.failure import rerun_kind
from memmy.evolve.rules_text import call_failed
from memmy.evolve.topics import step_keywords
from memmy.jobs.writer import iso, parse_iso
from memmy.kinds import trace
from memmy.store.db import utc_now
from memmy.store.episodes import EpisodeRecord, FeedbackRecord
from memmy.store.unit import Store

_CONTEXT_TAG_STOP = frozenset({"trace", "turn", "memory", "openclaw", "codex", "hermes"})


def _open_failure(traces: list[Memory]) -> bool:
    """Whether a step of the task (``traces`` in time order) failed and no later step re-ran its command."""
    failed: list[dict[str, Any]] = []
    for memory in traces:
        calls = [dict(c) for c in trace.of(memory).tool_calls]
        if failed and rerun_kind(failed, calls):
            failed = []
        if calls and call_failed(calls[-1]):
            failed = calls
    return bool(failed)


class EpisodeOps(Configured):
    """Episode boundaries (heuristic on the hook path), closing, finalizing and feedback."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.episodes = store.episodes
        self.feedback = store.feedback
        self.memories = store.memories
        self.jobs = store.jobs
        self.embed: Callable[[str], Any] | None = None  # set by the service: the query embedder (topic shifts)
        #: set by the service: the embedder's cosine between two texts on MiniLM's scale (SHIFT_SIMILARITY's)
        self.to_reference: Callable[[float], float] = lambda cosine: cosine
        self._vectors: dict[str, Any] = {}

    # -- routing ----------------------------------------------------------------------------------
    def context_of(self, episode: EpisodeRecord) -> EpisodeContext:
        """What the relation classifier needs to know about the previous episode."""
        first, latest, answer, last_turn_at = self.episodes.context_texts(episode.id)
        tags: list[str] = []
        evidence: list[str] = []
        traces = self.memories.get_many(episode.l1_memory_ids[-8:])
        for memory in traces.values():
            tags.extend(t for t in memory.tags if t not in _CONTEXT_TAG_STOP and t not in tags)
            found = trace.of(memory)
            evidence.append(found.user_text[:400])
            evidence.extend(e[:200] for e in found.error_signatures)
            for call in found.tool_calls[:8]:
                evidence.append(str(call.get("input") or "")[:300])
                if call.get("error") or call.get("success") is False:  # a retry quotes the error it got
                    evidence.append(f"{call.get('error') or ''} {str(call.get('output') or '')[:300]}")
        return EpisodeContext(
            first_user_text=first,
            latest_user_text=latest,
            last_assistant_text=answer,
            tags=tags,
            last_activity_at=parse_iso(last_turn_at or episode.updated_at),
            evidence_text="\n".join(evidence),
            open_failure=_open_failure([traces[i] for i in episode.l1_memory_ids[-8:] if i in traces]),
        )

    def _similarity(self, text: str, prev: EpisodeContext) -> float | None:
        """Cosine of the new message to the task's first and latest requests (English text only; MiniLM cannot
        judge Chinese by meaning). None without an embedder or for CJK text."""
        if self.embed is None or has_cjk(text) or not prev.first_user_text:
            return None
        vectors = [self._vector(t) for t in dict.fromkeys((text, prev.first_user_text, prev.latest_user_text))]
        if any(v is None for v in vectors) or len(vectors) < 2:
            return None
        head = vectors[0]
        return self.to_reference(max(float(np.dot(head, v)) for v in vectors[1:]))

    def _vector(self, text: str) -> Any:
        cached = self._vectors.get(text)
        if cached is None and self.embed is not None:
            cached = self.embed(text[:1000])
            if cached is not None:
                if len(self._vectors) >= 256:
                    self._vectors.pop(next(iter(self._vectors)))
                self._vectors[text] = cached
        return cached

    def route_turn(
        self,
        session_id: str,
        raw_turn_id: str,
        text: str,
        *,
        user_id: str | None,
        project_id: str | None,
        now: datetime | None = None,
    ) -> tuple[str, TurnRelation]:
        """Put a turn into an episode (append, reopen, or close the old one and open a new one).

        One transaction: two agents starting turns in the same session at once cannot both open a new episode.
        """
        with self.store.transaction():
            return self._route(session_id, raw_turn_id, text, user_id, project_id, now or datetime.now(UTC))

    def _route(
        self,
        session_id: str,
        raw_turn_id: str,
        text: str,
        user_id: str | None,
        project_id: str | None,
        now: datetime,
    ) -> tuple[str, TurnRelation]:
        latest = self.episodes.latest_for_session(session_id)
        if latest is not None and raw_turn_id in latest.raw_turn_ids:
            return latest.id, TurnRelation("follow_up", 1.0, "already routed", "known")
        prev = self.context_of(latest) if latest is not None else None
        if prev is not None and latest is not None and latest.status != "closed":
            prev.similarity = self._similarity(text, prev)
        relation = classify_relation(text, prev, now)
        continues = relation.relation in ("revision", "follow_up", "unknown")
        last_at = prev.last_activity_at if prev is not None else None
        in_window = last_at is not None and now - last_at <= MERGE_WINDOW
        target: str | None = None
        if latest is not None and continues and (in_window or relation.relation == "revision"):
            if latest.status == "closed":
                self.episodes.reopen(latest.id)
                latest = self.episodes.get(latest.id) or latest
            target = latest.id
            self._record_implicit(
                latest, text, session_id, user_id, project_id, revision=relation.relation == "revision"
            )
        else:
            if latest is not None and latest.status != "closed":
                # the message that starts a new task may thank for the last one, but it gives no guidance on it
                self._record_implicit(latest, text, session_id, user_id, project_id, starts_task=True)
                self.close(latest.id, "topic_boundary" if in_window else "idle_timeout")
            meta: dict[str, Any] = {"initialUserText": text[:800], "relation": relation.relation}
            if latest is not None:
                meta["previousEpisodeId"] = latest.id
            target = self.episodes.create(
                session_id, user_id=user_id, project_id=project_id, title=" ".join(text.split())[:120], meta=meta
            )
        self.episodes.add_ids(target, "raw_turn_ids_json", [raw_turn_id])
        return target, relation

    def split_at(self, episode_id: str, raw_turn_id: str, text: str) -> str | None:
        """Move ``raw_turn_id`` and every later turn of an episode into a new episode; close the old one.

        Used when the (asynchronous) LLM relation check says a turn the heuristics appended starts a new task.
        """
        episode = self.episodes.get(episode_id)
        if episode is None or raw_turn_id not in episode.raw_turn_ids or episode.raw_turn_ids[0] == raw_turn_id:
            return None
        moved = episode.raw_turn_ids[episode.raw_turn_ids.index(raw_turn_id) :]
        traces = [
            m.id for m in self.memories.get_many(episode.l1_memory_ids).values() if trace.of(m).raw_turn_id in moved
        ]
        new_episode = self.episodes.create(
            episode.session_id,
            user_id=episode.user_id,
            project_id=episode.project_id,
            title=" ".join(text.split())[:120],
            meta={"initialUserText": text[:800], "relation": "new_task", "previousEpisodeId": episode_id},
        )
        self.episodes.move_turns(episode_id, new_episode, moved, traces)
        for memory in self.memories.get_many(traces).values():
            before = memory.snapshot()
            memory.properties = trace.with_fields(memory.properties, **{trace.EPISODE_ID: new_episode})
            memory.version += 1
            memory.updated_at = utc_now()
            self.memories.update(memory, before, "episode_split", "memmy-evolution")
        self.close(episode_id, "topic_boundary")
        return new_episode

    def split_on_evidence(
        self, episode_id: str, raw_turn_id: str, text: str, tool_calls: list[dict[str, Any]]
    ) -> str | None:
        """At ``turn.complete``: move a step whose files, commands and errors share nothing with its open task
        into a new episode (:func:`memmy.evolve.boundaries.evidence_shift`); returns the new episode's id."""
        if len(step_keywords(tool_calls)) < EVIDENCE_SHIFT_MIN:  # the cheap test first: most steps stop here
            return None
        episode = self.episodes.get(episode_id)
        if (
            episode is None
            or episode.status == "closed"
            or not episode.l1_memory_ids
            or not episode.raw_turn_ids
            or episode.raw_turn_ids[-1] != raw_turn_id
        ):
            return None
        first, _latest, _answer = self.episodes.texts_before(episode_id, raw_turn_id)
        prev = self.context_of(episode)
        prev.first_user_text = first
        if evidence_shift(text, tool_calls, prev) is None:
            return None
        with self.episodes.db.transaction():
            return self.split_at(episode_id, raw_turn_id, text)

    def _latest_trace(self, episode: EpisodeRecord) -> str | None:
        return episode.l1_memory_ids[-1] if episode.l1_memory_ids else None

    def _record_implicit(
        self,
        episode: EpisodeRecord,
        text: str,
        session_id: str,
        user_id: str | None,
        project_id: str | None,
        *,
        revision: bool = False,
        starts_task: bool = False,
    ) -> None:
        """Feedback read from the reply itself; a revision ("that's wrong, redo") is negative with magnitude 1.

        Both are implicit: they judge the step they answer, not the episode (see the reward's feedback filter).
        """
        verdict = classify_feedback(text)
        payload: dict[str, Any]
        if revision:
            polarity, magnitude, payload = "negative", 1.0, {"kind": "revision"}
        elif verdict is None or verdict.polarity == "neutral" or (starts_task and verdict.shape == "guidance"):
            return
        else:
            polarity, magnitude = verdict.polarity, abs(verdict.magnitude)
            payload = {"shape": verdict.shape, "confidence": verdict.confidence}
        record = self.feedback.add(
            channel="implicit",
            polarity=polarity,
            magnitude=magnitude,
            rationale=text[:500],
            user_id=user_id,
            project_id=project_id,
            session_id=session_id,
            episode_id=episode.id,
            l1_memory_id=self._latest_trace(episode),
            payload=payload,
        )
        self._after_feedback(episode.id, record, text)

    def _after_feedback(self, episode_id: str, record: FeedbackRecord, text: str) -> None:
        self.episodes.add_ids(episode_id, "feedback_ids_json", [record.id])
        episode = self.episodes.get(episode_id)
        if episode is None:
            return
        if record.polarity == "negative":
            self.jobs.enqueue(
                "decision_repair",
                dedupe_key=f"decision_repair:feedback:{record.id}",
                episode_id=episode.id,
                session_id=episode.session_id,
                target_memory_id=record.l1_memory_id,
                payload={"trigger": "feedback", "feedbackId": record.id, "text": text[:1000]},
            )
        if episode.status == "closed" and episode.r_task is not None:
            self.episodes.update_meta(episode.id, {"rewardDirty": True})
            self.enqueue_reward(episode.id, delay_s=0.0)

    # -- closing ----------------------------------------------------------------------------------
    def close(self, episode_id: str, reason: str) -> bool:
        """Close an episode and queue its reflection → reward → evolution pipeline (one transaction)."""
        with self.store.transaction():
            if not self.episodes.close(episode_id, reason):
                return False
            self.finalize(episode_id)
        return True

    def finalize(self, episode_id: str) -> None:
        """Queue reflection (when enabled) or the reward directly for a closed episode with traces."""
        episode = self.episodes.get(episode_id)
        if episode is None or not episode.l1_memory_ids:
            return
        if self.config.capture.synth_reflection:
            self.jobs.enqueue(
                "reflection",
                dedupe_key=f"reflection:{episode_id}",
                episode_id=episode_id,
                session_id=episode.session_id,
            )
        else:
            self.enqueue_reward(episode_id)

    def enqueue_reward(self, episode_id: str, delay_s: float | None = None) -> None:
        """Queue the reward after the feedback window (explicit feedback may still arrive)."""
        window = self.config.reward.feedback_window_sec if delay_s is None else delay_s
        run_after = iso(datetime.now(UTC) + timedelta(seconds=window)) if window > 0 else None
        episode = self.episodes.get(episode_id)
        feedback_count = len(episode.feedback_ids) if episode is not None else 0
        self.jobs.enqueue(  # a new feedback item gets a new reward even while an older one is running
            "reward",
            dedupe_key=f"reward:{episode_id}:{feedback_count}",
            episode_id=episode_id,
            run_after=run_after,
            payload={"trigger": "implicit_fallback" if delay_s is None else "feedback"},
        )

    def close_session_episodes(self, session_id: str) -> list[str]:
        """Close every open episode of a session (session close)."""
        closed = []
        for episode in self.episodes.open_for_session(session_id):
            if self.close(episode.id, "session_closed"):
                closed.append(episode.id)
        return closed

    def close_idle(self, now: datetime | None = None, exclude: str | None = None) -> list[str]:
        """Close episodes idle for longer than the idle timeout (2 h)."""
        cutoff = iso((now or datetime.now(UTC)) - EPISODE_IDLE_TIMEOUT)
        return [e.id for e in self.episodes.idle_since(cutoff, exclude) if self.close(e.id, "idle_timeout")]

    # -- explicit feedback ------------------------------------------------------------------------
    def give_feedback(self, cmd: Feedback, user_id: str | None) -> FeedbackRecorded:
        """``POST /api/v1/feedback``: explicit positive/negative feedback on a memory or an episode."""
        target, polarity, magnitude, note = cmd.id, cmd.polarity, cmd.magnitude, cmd.note
        episode: EpisodeRecord | None = None
        memory_id: str | None = None
        if target.startswith("episode_"):
            episode = self.episodes.get(target)
            if episode is None:
                raise NotFound(f"episode {target} not found")
            memory_id = self._latest_trace(episode)
        else:
            memory = self.memories.get(target)
            if memory is None:
                raise NotFound(f"memory {target} not found")
            memory_id = memory.id
            episode_id = trace.episode_of(memory)
            episode = self.episodes.get(episode_id) if episode_id else None
        record = self.feedback.add(
            channel="explicit",
            polarity=polarity,
            magnitude=magnitude,
            rationale=note,
            user_id=user_id,
            project_id=episode.project_id if episode else None,
            session_id=episode.session_id if episode else None,
            episode_id=episode.id if episode else None,
            l1_memory_id=memory_id,
            payload={"target": target},
        )
        jobs: list[str] = []
        if episode is not None:
            self.episodes.add_ids(episode.id, "feedback_ids_json", [record.id])
            if episode.status == "closed":
                self.episodes.update_meta(episode.id, {"rewardDirty": True})
                self.enqueue_reward(episode.id, delay_s=0.0)
                jobs.append("reward")
        if polarity == "negative":
            self.jobs.enqueue(
                "decision_repair",
                dedupe_key=f"decision_repair:feedback:{record.id}",
                episode_id=episode.id if episode else None,
                target_memory_id=memory_id,
                payload={"trigger": "feedback", "feedbackId": record.id, "text": note},
            )
            jobs.append("decision_repair")
        if memory_id and not memory_id.startswith("trace_"):
            self.jobs.enqueue(
                "policy_feedback",
                dedupe_key=f"policy_feedback:{record.id}",
                target_memory_id=memory_id,
                payload={"feedbackId": record.id, "polarity": polarity, "magnitude": magnitude, "note": note},
            )
            jobs.append("policy_feedback")
        return {
            "ok": True,
            "feedback": record.to_json(),
            "episodeId": episode.id if episode else None,
            "scheduled": jobs,
            "serverTime": utc_now(),
        }

    def episode_detail(self, episode_id: str) -> MemoryDetail:
        """An episode with its raw turns and feedback (``GET /api/v1/memory/episode_…``)."""
        episode = self.episodes.get(episode_id)
        if episode is None:
            raise NotFound(f"episode {episode_id} not found")
        turns = [
            {
                "rawTurnId": t["id"],
                "turnId": t["turn_id"],
                "userText": t["user_text"],
                "assistantText": t["assistant_text"],
                "status": t["status"],
                "createdAt": t["created_at"],
            }
            for t in self.episodes.raw_turns(episode_id)
        ]
        detail = episode.to_json()
        detail["kind"] = "episode"
        detail["refs"] = {
            "episode": episode.to_json(),
            "rawTurns": turns,
            "traceMemoryIds": episode.l1_memory_ids,
            "policyMemoryIds": episode.l2_policy_ids,
            "worldModelMemoryIds": episode.l3_world_model_ids,
            "skillMemoryIds": episode.skill_memory_ids,
            "feedbackIds": episode.feedback_ids,
            "decisionRepairIds": episode.decision_repair_ids,
            "feedback": [f.to_json() for f in self.feedback.for_episode(episode_id)],
        }
        return cast(MemoryDetail, detail)
