"""Episode-level evolution jobs: trace summary, idle close, reflection and reward (with back-propagation).

Every handler is two-phase (see :mod:`memmy.jobs.worker`): it reads and computes, LLM calls included,
outside any transaction and returns an ``apply`` callable whose writes commit together with the job's
completion. Without an LLM every step still runs on the heuristics of :mod:`memmy.evolve`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from memmy.config import Configured, Settings
from memmy.evolve.boundaries import EpisodeContext, classify_relation_llm
from memmy.evolve.failure import context_hash, is_failure, tool_failure_burst, value_divergence
from memmy.evolve.model import IndexedTrace
from memmy.evolve.reflection import Reflection, is_social_step, reflect_batch
from memmy.evolve.reward import EpisodeTurn, FeedbackItem, backpropagate, score_episode, skip_reason
from memmy.indexing import Indexer
from memmy.jobs.episode import EpisodeOps
from memmy.jobs.writer import LayerWriter, indexed_trace, iso, parse_iso
from memmy.kinds import trace as ktrace
from memmy.llm.client import JsonLLM, LLMError
from memmy.llm.guard import vet_text
from memmy.store.db import utc_now
from memmy.store.episodes import EpisodeRecord
from memmy.store.jobs import JobRecord, JobRepository
from memmy.store.unit import Store

Apply = Callable[[], None]

SUMMARY_PROMPT = (
    "You compress one exchange between a user and a coding agent into its single most useful durable fact. "
    'Answer JSON {"summary": "..."}: at most about 200 characters, in the user\'s language, keeping names, dates, '
    "numbers, paths, commands and error signatures unchanged, and relative time expressions as written. "
    'Do not start with "The user said". Say what was found or decided, not only what was asked.\n'
    "Example exchange: User: which port does the billing API use? Agent: It listens on 7421, set in "
    "config/billing.yaml.\n"
    'Example answer: {"summary": "The billing API listens on port 7421 (config/billing.yaml)."}'
)


class ModelSlots:
    """The summary and evolution models currently configured (replaced on config reload)."""

    def __init__(self, summary: JsonLLM | None = None, evolution: JsonLLM | None = None) -> None:
        self.summary = summary
        self.evolution = evolution


class DerivedEvolution(Configured):
    """What every group of evolution handlers (episodes, policies, world models, skills) works with: the store and
    its repositories, the index, the models and the layer writer."""

    def __init__(self, settings: Settings, store: Store, indexer: Indexer, models: ModelSlots) -> None:
        self.settings = settings
        self.store = store
        self.memories = store.memories
        self.episodes = store.episodes
        self.feedback = store.feedback
        self.evolution = store.evolution
        self.jobs = store.jobs
        self.queue = store.queue
        self.indexer = indexer
        self.models = models
        self.writer = LayerWriter(store, indexer)


def queue_burst_repair(jobs: JobRepository, episode_id: str, burst: tuple[str, int, str]) -> JobRecord:
    """Queue the decision repair of a tool-failure burst (``(tool, failures, reason)`` of
    :func:`memmy.evolve.repair.tool_failure_burst`), once per episode and tool: the one place it is queued, on a
    turn's completion and when the episode is rewarded."""
    tool, count, reason = burst
    job, _ = jobs.enqueue(
        "decision_repair",
        dedupe_key=f"decision_repair:burst:{episode_id}:{tool}",
        episode_id=episode_id,
        payload={"trigger": "tool_failure_burst", "tool": tool, "failures": count, "reason": reason},
    )
    return job


class EpisodeEvolution(DerivedEvolution):
    """Handlers: trace_summary, episode_idle_close, reflection, reward."""

    def __init__(
        self, settings: Settings, store: Store, indexer: Indexer, episode_ops: EpisodeOps, models: ModelSlots
    ) -> None:
        super().__init__(settings, store, indexer, models)
        self.episode_ops = episode_ops

    def handlers(self) -> dict[str, Callable[[JobRecord], Apply | None]]:
        """Job type → handler."""
        return {
            "trace_summary": self.trace_summary,
            "episode_idle_close": self.idle_close,
            "reflection": self.reflection,
            "reward": self.reward,
            "episode_relation": self.relation_check,
        }

    # -- LLM relation check -----------------------------------------------------------------------
    def relation_check(self, job: JobRecord) -> Apply | None:
        """Ask the evolution model whether a turn the heuristics appended really continues its episode.

        Runs in the worker, never on the hook path; a confident ``new_task`` splits the episode at that turn.
        """
        llm = self.models.evolution
        episode = self.episodes.get(job.episode_id or "")
        raw_turn_id = str(job.payload.get("rawTurnId") or "")
        if llm is None or episode is None or raw_turn_id not in episode.raw_turn_ids[1:]:
            return None
        row = self.store.query_one("SELECT user_text, created_at FROM raw_turns WHERE id = ?", (raw_turn_id,))
        if row is None or not row["user_text"]:
            return None
        first, latest, answer = self.episodes.texts_before(episode.id, raw_turn_id)
        previous = EpisodeContext(first, latest, answer, [], parse_iso(row["created_at"]))
        verdict = classify_relation_llm(
            row["user_text"], previous, parse_iso(row["created_at"]) or datetime.now(UTC), llm, timeout_s=6.0
        )

        def apply() -> None:
            self.episodes.update_meta(
                episode.id,
                {"llmRelation": {"rawTurnId": raw_turn_id, "relation": verdict.relation, "reason": verdict.reason}},
            )
            if verdict.relation == "new_task" and verdict.confidence >= 0.8:
                self.episode_ops.split_at(episode.id, raw_turn_id, row["user_text"])

        return apply

    # -- helpers ----------------------------------------------------------------------------------
    def episode_traces(self, episode: EpisodeRecord) -> list[IndexedTrace]:
        """The episode's live traces as the rules read them, oldest first."""
        found = self.memories.get_many(episode.l1_memory_ids)
        views = [indexed_trace(found[i], self.indexer) for i in episode.l1_memory_ids if i in found]
        return sorted(views, key=lambda t: t.created_at)

    def _turns(self, episode: EpisodeRecord) -> list[EpisodeTurn]:
        turns = []
        for row in self.episodes.raw_turns(episode.id):
            if row["status"] == "started":
                continue
            calls = json.loads(row["tool_calls_json"] or "[]")
            last = calls[-1] if calls else {}
            turns.append(
                EpisodeTurn(
                    user_text=row["user_text"] or "",
                    agent_text=row["assistant_text"] or "",
                    tool_call_count=len(calls),
                    tool_failed=bool(calls) and (last.get("success") is False or bool(last.get("error"))),
                    last_tool_output=str(last.get("error") or last.get("output") or "")[:2000],
                )
            )
        return turns

    # -- trace summary ----------------------------------------------------------------------------
    def trace_summary(self, job: JobRecord) -> Apply | None:
        """Rewrite an L1's heuristic summary with the summary model, then queue its embedding."""
        memory = self.memories.get(job.target_memory_id or "")
        if memory is None:
            return None
        found = ktrace.of(memory)
        summary, error = memory.summary, None
        llm = self.models.summary
        if llm is not None:
            try:
                user_text, agent_text = found.user_text, found.agent_text
                user = f"User:\n{user_text[:2000]}\n\nAgent:\n{agent_text[:2000]}"
                answer = llm.complete_json(SUMMARY_PROMPT, user, timeout_s=self.config.summary.timeout_ms / 1000)
                text = vet_text(
                    "trace_summary",
                    answer.get("summary") if isinstance(answer, dict) else answer,
                    instructions=SUMMARY_PROMPT,
                    source=f"{user_text}\n{agent_text}",
                    question=user_text if agent_text.strip() else "",
                    max_chars=400,
                )
                if text:
                    summary = text
                else:
                    error = "the model's summary was not usable (see the log)"
            except LLMError as exc:
                error = exc.message

        def apply() -> None:
            current = self.memories.get(memory.id)
            if current is None:
                return
            exchange = found.exchange()
            embedding_text = f"Summary: {summary}\n\nOriginal exchange:\n{exchange}"[:3000]
            before = current.snapshot()
            current.title = summary[:200]
            current.properties = {
                **current.properties,
                "summary": summary,
                "embeddingText": embedding_text,
                "summarySource": "heuristic" if error or llm is None else "llm",
                "summaryError": error,
            }
            current.properties = ktrace.with_fields(current.properties, summary=summary)
            current.version += 1
            current.updated_at = utc_now()
            self.memories.update(current, before, "summarize", "memmy-evolution")
            self.queue.set_state(current.id, "embedding_pending", "embedding")
            self.indexer.enqueue(current.id, "L1", embedding_text)

        return apply

    # -- idle close -------------------------------------------------------------------------------
    def idle_close(self, job: JobRecord) -> Apply | None:
        """Close every other episode idle for more than two hours."""

        def apply() -> None:
            self.episode_ops.close_idle(exclude=job.episode_id)

        return apply

    # -- reflection -------------------------------------------------------------------------------
    def reflection(self, job: JobRecord) -> Apply | None:
        """Score each trace's relevance (LLM, or local rules), then queue the reward after the feedback window."""
        episode = self.episodes.get(job.episode_id or "")
        if episode is None:
            return None
        traces = self.episode_traces(episode)
        capture = self.config.capture
        llm = self.models.evolution if capture.alpha_scoring else None
        task = str(episode.meta.get("initialUserText") or (traces[0].user_text if traces else ""))
        reflections = reflect_batch(
            traces,
            task[: capture.task_context_max_chars],
            llm,
            window=capture.reflection_batch_window_size,
            overlap=capture.reflection_batch_window_overlap,
            degraded_window=capture.degraded_batch_window_size,
            primary_retries=capture.primary_max_retries,
            degraded_retries=capture.degraded_max_retries,
            timeout_s=self.config.evolution.timeout_ms / 1000,
        )
        reflections = [_credit_failed_step(r, t) for r, t in zip(reflections, traces, strict=False)]

        def apply() -> None:
            for item in reflections:
                memory = self.memories.get(item.trace_id)
                if memory is not None:
                    self.writer.patch_properties(
                        memory,
                        "trace",
                        {
                            "reflection": item.relevance,
                            "alpha": item.alpha,
                            "usable": item.alpha > 0,
                            "reflection_source": item.source,
                            "reflection_reason": item.reason,
                        },
                    )
            self.episode_ops.enqueue_reward(episode.id)

        return apply

    # -- reward -----------------------------------------------------------------------------------
    def reward(self, job: JobRecord) -> Apply | None:
        """Score the episode (R_human), back-propagate values to its traces and queue L2 work."""
        episode = self.episodes.get(job.episode_id or "")
        if episode is None:
            return None
        traces = self.episode_traces(episode)
        if not traces:
            return None
        reward_cfg = self.config.reward
        # implicit feedback is about the turn it answers: "it still fails" after a failed step is not a verdict on
        # an episode that went on to succeed, so only explicit feedback and replies to the final step count
        final = next((t.id for t in reversed(traces) if not is_social_step(t)), traces[-1].id)
        feedback = [
            FeedbackItem(f.channel, f.polarity, f.magnitude, f.rationale, f.created_at)
            for f in self.feedback.for_episode(episode.id)
            if f.channel == "explicit" or f.l1_memory_id in (None, final)
        ]
        turns = self._turns(episode)
        skipped = None if any(f.channel == "explicit" for f in feedback) else skip_reason(turns)
        if skipped is not None:
            skip_detail = {"skipped": True, "reason": skipped, "traceCount": len(traces), "scoredAt": _now_iso()}

            skipped_trials = self.evolution.pending_trials(episode.id)

            def apply_skip() -> None:
                self.episodes.set_reward(episode.id, 0.0, skip_detail)
                self.episodes.update_meta(episode.id, {"closeReason": "abandoned"})
                for trial_id, _skill_id in skipped_trials:
                    self.evolution.resolve_trial(trial_id, "unknown", "unknown")

            return apply_skip
        llm = self.models.summary if reward_cfg.llm_scoring else None
        score = score_episode(
            turns,
            feedback,
            llm,
            llm_scoring=reward_cfg.llm_scoring,
            mission=str(episode.meta.get("initialUserText") or ""),
            timeout_s=self.config.summary.timeout_ms / 1000,
        )
        now = datetime.now(UTC)
        rewards = backpropagate(
            traces,
            score.r_human,
            gamma=reward_cfg.gamma,
            lambda_=reward_cfg.lambda_,
            delta=reward_cfg.delta,
            half_life_days=reward_cfg.decay_half_life_days,
            now=now,
        )
        values = {r.trace_id: r for r in rewards}
        scored = [replace(t, value=values[t.id].value, alpha=values[t.id].alpha) for t in traces if t.id in values]
        l2 = self.config.l2_induction
        fb_cfg = self.config.feedback
        pooled = [t for t in scored if t.value >= l2.min_trace_value]
        failed = [t for t in scored if is_failure(t)]
        burst = tool_failure_burst(scored, fb_cfg.failure_threshold, fb_cfg.failure_window)
        divergent = self._divergent_signatures(scored, fb_cfg.value_delta, fb_cfg.min_low_value_threshold)
        detail: dict[str, Any] = {
            "rHuman": score.r_human,
            "source": score.source,
            "axes": score.axes,
            "label": score.label,
            "reason": score.reason,
            "scoredAt": iso_now(now),
            "trigger": job.payload.get("trigger", "implicit_fallback"),
            "traceCount": len(traces),
            "traceIds": [t.id for t in traces],
        }
        ttl = l2.candidate_ttl_days
        trials = self.evolution.pending_trials(episode.id)
        success_at = self.config.skill.outcome_r_task_success_threshold
        failure_at = self.config.skill.outcome_r_task_failure_threshold

        def apply() -> None:
            for item in rewards:
                memory = self.memories.get(item.trace_id)
                if memory is not None:
                    self.writer.patch_properties(
                        memory,
                        "trace",
                        {
                            "value": round(item.value, 6),
                            "alpha": item.alpha,
                            "priority": round(item.priority, 6),
                            "r_human": score.r_human,
                            "reward_reason": score.reason[:300],
                        },
                    )
            self.episodes.set_reward(episode.id, score.r_human, detail)
            for trial_id, skill_id in trials:
                outcome = (
                    "success"
                    if score.r_human >= success_at
                    else "failure"
                    if score.r_human <= failure_at
                    else "unknown"
                )
                status = {"success": "pass", "failure": "fail"}.get(outcome, "unknown")
                self.evolution.resolve_trial(trial_id, status, outcome)
                self.jobs.enqueue(
                    "skill_trial_resolve",
                    dedupe_key=f"skill_trial_resolve:{trial_id}",
                    target_memory_id=skill_id,
                    payload={"trialId": trial_id, "status": status},
                )
            for trace in pooled:
                self.evolution.add_candidate(
                    trace.id,
                    trace.signature,
                    trace.summary,
                    trace.value,
                    user_id=episode.user_id,
                    session_id=episode.session_id,
                    episode_id=episode.id,
                    ttl_days=ttl,
                )
                self.jobs.enqueue("l2_association", dedupe_key=f"l2_association:{trace.id}", target_memory_id=trace.id)
            if pooled:
                self.jobs.enqueue("l2_induction", dedupe_key=f"l2_induction:{episode.id}", episode_id=episode.id)
            for policy_id in sorted({p for t in traces for p in self.evolution.policies_of(t.id)}):
                # new values (a re-reward after feedback) move the gain of policies these traces support
                self.jobs.enqueue("policy_stats", dedupe_key=f"policy_stats:{policy_id}", target_memory_id=policy_id)
            if failed:
                self.jobs.enqueue(
                    "failure_experience", dedupe_key=f"failure_experience:{episode.id}", episode_id=episode.id
                )
            if burst is not None:
                queue_burst_repair(self.jobs, episode.id, burst)
            for signature, high_ids, low_ids in divergent:
                ctx = context_hash("value-distribution", episode.user_id or "", signature)
                self.jobs.enqueue(
                    "decision_repair",
                    dedupe_key=f"decision_repair:value:{ctx}",
                    episode_id=episode.id,
                    payload={
                        "trigger": "value_distribution",
                        "signature": signature,
                        "contextHash": ctx,
                        "highIds": high_ids,
                        "lowIds": low_ids,
                    },
                )

        return apply

    def _divergent_signatures(
        self, scored: list[IndexedTrace], delta: float, min_low: float
    ) -> list[tuple[str, list[str], list[str]]]:
        """Signatures of this episode whose high- and low-value traces (store-wide) diverge."""
        signatures = {t.signature for t in scored if t.signature and t.signature != "_|_|_|_"}
        fresh = {t.id: t for t in scored}
        found = []
        for signature in signatures:
            # only ids and values are needed: read those two, not 200 full rows (this runs for every reward)
            rows = self.store.query(
                f"SELECT id, json_extract(properties_json, '{ktrace.path(ktrace.VALUE)}') FROM memories "
                f"WHERE memory_layer = 'L1' AND json_extract(properties_json, '{ktrace.path(ktrace.SIGNATURE)}') = ? "
                "AND status = 'activated' "
                "ORDER BY updated_at DESC LIMIT 200",
                (signature,),
            )
            views = [fresh.get(r[0]) or _value_view(r[0], signature, r[1]) for r in rows]
            for sig, high, low in value_divergence(views, delta, min_low):
                found.append((sig, [t.id for t in high], [t.id for t in low]))
        return found


def _value_view(trace_id: str, signature: str, value: Any) -> IndexedTrace:
    """A trace with just what value statistics need."""
    return IndexedTrace(id=trace_id, signature=signature, value=float(value or 0.0))


def _credit_failed_step(reflection: Reflection, trace: IndexedTrace) -> Reflection:
    """Offline credit: a failed step earned no share of the episode's success (the next step gets the δ bonus)."""
    if reflection.source == "default" and is_failure(trace):
        return Reflection(trace.id, "IRRELEVANT", 0.0, "failed step (tool error or failed turn)", "heuristic_failure")
    return reflection


def iso_now(now: datetime | None = None) -> str:
    """ISO timestamp of ``now`` (default: the current time)."""
    return iso(now or datetime.now(UTC))


def _now_iso() -> str:
    return iso_now()
