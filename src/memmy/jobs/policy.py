"""L2 jobs: association, induction and statistics of policies; failure avoidance; decision repair; feedback.

Two-phase handlers like :mod:`memmy.jobs.evolution`: compute (LLM included) first, write in ``apply``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from memmy.config import L2InductionSettings
from memmy.domain import Memory, team_keys
from memmy.evolve.boundaries import is_guidance
from memmy.evolve.failure import (
    RepairDraft,
    avoidance_llm,
    classify_feedback_shape,
    context_hash,
    failed_step,
    failure_key,
    failure_signature,
    is_failure,
    merge_guidance,
    repair_llm,
    shares_evidence,
)
from memmy.evolve.model import IndexedPolicy, IndexedTrace, PolicyDraft
from memmy.evolve.policy import best_association, compute_stats, induce_llm, policy_body, policy_key
from memmy.evolve.topics import content_keywords
from memmy.jobs.evolution import DerivedEvolution
from memmy.jobs.writer import LayerWrite, indexed_policy, indexed_trace, parse_iso
from memmy.kinds import policy, skill
from memmy.kinds import trace as ktrace
from memmy.kinds.catalog import own_words
from memmy.store.jobs import JobRecord
from memmy.store.memories import MemoryFilter

Apply = Callable[[], None]
GUIDANCE_CAP = policy.GUIDANCE_CAP


def _with_seen_in(body: str, seen_in: list[str]) -> str:
    """The policy text plus the tasks it was learned from, so the same task finds it however it is worded."""
    if not seen_in:
        return body
    return body + "\nSeen in:\n" + "\n".join(f"- {task}" for task in seen_in)


def _memory_status(policy_status: str) -> str:
    return {"active": "activated", "archived": "archived"}.get(policy_status, "resolving")


class PolicyEvolution(DerivedEvolution):
    """Handlers: l2_association, l2_induction, failure_experience, decision_repair, policy_feedback."""

    def handlers(self) -> dict[str, Callable[[JobRecord], Apply | None]]:
        """Job type → handler."""
        return {
            "l2_association": self.association,
            "l2_induction": self.induction,
            "failure_experience": self.failure_experience,
            "decision_repair": self.decision_repair,
            "policy_feedback": self.policy_feedback,
            "policy_stats": self.policy_stats,
        }

    def policy_stats(self, job: JobRecord) -> Apply | None:
        """Recompute a policy's statistics after the values of its traces changed."""
        memory = self.memories.get(job.target_memory_id or "")
        if memory is None or policy.of(memory).experience_type != "success_pattern" or memory.status == "archived":
            return None

        def apply() -> None:
            self.recompute(memory.id)

        return apply

    @property
    def _l2(self) -> L2InductionSettings:
        return self.config.l2_induction

    @property
    def _timeout_s(self) -> float:
        return self.config.evolution.timeout_ms / 1000

    def _llm_for(self, section: str) -> Any:
        use_llm = {"l2Induction": self.config.l2_induction.use_llm, "feedback": self.config.feedback.use_llm}
        return self.models.evolution if use_llm[section] else None

    def _success_policies(self) -> list[IndexedPolicy]:
        views = [indexed_policy(m, self.indexer) for m in self.memories.by_layer("L2")]
        return [v for v in views if v.experience_type == "success_pattern" and v.status != "archived"]

    # -- statistics -------------------------------------------------------------------------------
    def recompute(self, policy_id: str) -> str | None:
        """Recompute support/gain/confidence/status of a success policy from its linked traces (apply phase)."""
        memory = self.memories.get(policy_id)
        if memory is None:
            return None
        found = policy.of(memory)
        linked = self.evolution.trace_values(self.evolution.traces_of(policy_id))  # newest links first
        episode_ids = list(dict.fromkeys(episode for _value, episode in linked.values() if episode))
        others = [i for i in self.evolution.episode_trace_ids(episode_ids[:100]) if i not in linked]
        without = [value for value, _episode in self.evolution.trace_values(others).values()]
        l2 = self._l2
        stats = compute_stats(
            [value for value, _episode in linked.values()],
            without,
            self.evolution.pool_mean(),
            self.evolution.support_of(policy_id),
            found.gain if found.stats_runs else None,
            found.status,
            tau=l2.tau_softmax,
            ema_alpha=l2.gain_ema_alpha,
            min_gain=l2.min_gain,
            archive_gain=l2.archive_gain,
        )
        was = found.status
        patch = {
            "support": stats.support,
            "rawGain": round(stats.raw_gain, 6),
            "gain": round(stats.gain, 6),
            "confidence": round(stats.confidence, 4),
            "status": stats.status,
            "statsRuns": found.stats_runs + 1,
            "sourceEpisodeIds": episode_ids[:50],  # the newest evidence (the links table has all of it)
            "sourceTraceIds": list(linked)[:50],
        }
        self.writer.patch_properties(memory, "policy", patch, status=_memory_status(stats.status))
        if stats.status == "archived" and found.signature:
            self.evolution.reject_signature(found.signature)
        if stats.status == "active":
            self._queue_higher(policy_id, found.signature, fresh=was != "active")
        return stats.status

    def _queue_higher(self, policy_id: str, signature: str, *, fresh: bool) -> None:
        self.jobs.enqueue(
            "l3_abstraction", dedupe_key=f"l3_abstraction:{signature or policy_id}", payload={"seedPolicyId": policy_id}
        )
        self.jobs.enqueue(
            "skill_crystallization",
            dedupe_key=f"skill_crystallization:{policy_id}",
            target_memory_id=policy_id,
            payload={"fresh": fresh},
        )

    # -- association ------------------------------------------------------------------------------
    def association(self, job: JobRecord) -> Apply | None:
        """Link a valued trace to the most similar existing success policy (similarity + signature)."""
        memory = self.memories.get(job.target_memory_id or "")
        if memory is None or memory.layer != "L1":
            return None
        trace = indexed_trace(memory, self.indexer)
        success = self._success_policies()
        if memory.project_id is not None:  # a trace supports only its own project's (or a global) policy
            projects = {m.id: m.project_id for m in self.memories.get_many([p.id for p in success]).values()}
            success = [p for p in success if projects.get(p.id) in (memory.project_id, None)]
        best = best_association(
            trace, success, self._l2.min_similarity, self.indexer.cosine_scale("texts").to_reference
        )
        if best is None:
            return None
        policy, _score, cos, relation = best

        def apply() -> None:
            self.evolution.link(trace.id, policy.id, relation, cos, memory.user_id)
            self.recompute(policy.id)

        return apply

    # -- induction --------------------------------------------------------------------------------
    def induction(self, job: JobRecord) -> Apply | None:
        """Group pooled traces by signature and induce (or extend) one policy per signature."""
        pending = self.evolution.pending()
        episode_signatures = (
            {c.signature for c in pending if c.episode_id == job.episode_id} if job.episode_id else None
        )
        groups: dict[str, list[Any]] = {}
        for cand in pending:
            if episode_signatures is None or cand.signature in episode_signatures:
                groups.setdefault(cand.signature, []).append(cand)
        plans: list[tuple[str, list[Any], list[IndexedTrace], str | None, PolicyDraft | None]] = []
        min_episodes = self._l2.min_episodes_for_induction
        llm = self._llm_for("l2Induction")
        success = self._success_policies()
        policy_projects = {m.id: m.project_id for m in self.memories.get_many([p.id for p in success]).values()}
        for signature, all_cands in groups.items():
            found_all = self.memories.get_many([c.trace_id for c in all_cands])
            by_project: dict[str | None, list[Memory]] = {}
            for memory in found_all.values():  # a success policy rests on one project's traces (scope)
                by_project.setdefault(memory.project_id, []).append(memory)
            for project, members in by_project.items():
                ids = {m.id for m in members}
                cands = [c for c in all_cands if c.trace_id in ids]
                keyed = f"{project}|{signature}" if project else signature
                traces = [self._with_task(indexed_trace(m, self.indexer)) for m in members]
                if len({t.episode_id for t in traces if t.episode_id}) < min_episodes:
                    continue
                existing = self.memories.find_by_key("L2", policy_key(keyed))
                if existing is not None or self.evolution.is_rejected(signature):
                    plans.append((keyed, cands, traces, existing.id if existing else None, None))
                    continue
                local = [p for p in success if policy_projects.get(p.id) in (project, None)]
                to_reference = self.indexer.cosine_scale("texts").to_reference
                similar = [best_association(t, local, self._l2.min_similarity, to_reference) for t in traces]
                match = next((s for s in similar if s is not None), None)
                if match is not None:
                    plans.append((keyed, cands, traces, match[0].id, None))
                    continue
                draft = induce_llm(signature, traces, llm, timeout_s=self._timeout_s)
                if draft is not None:
                    plans.append((keyed, cands, traces, None, draft))

        def apply() -> None:
            self.evolution.prune_expired()
            for signature, cands, traces, policy_id, draft in plans:
                if policy_id is None and draft is None:  # rejected signature: remember, never re-promote
                    self.evolution.mark([c.id for c in cands], "rejected")
                    continue
                if policy_id is not None:
                    target = self.memories.get(policy_id)
                    if target is None or target.status == "archived":
                        self.evolution.mark([c.id for c in cands], "rejected")
                        continue
                else:
                    assert draft is not None
                    seen_in = self._seen_in([t.episode_id for t in traces])
                    target = self.writer.upsert(
                        LayerWrite(
                            layer="L2",
                            key=policy_key(signature),
                            title=draft.title,
                            content=_with_seen_in(policy_body(draft), seen_in),
                            tags=sorted({"policy", *draft.tags}),
                            properties={
                                "policy": {**policy.draft_section(draft), "seenIn": seen_in},
                                "summary": draft.title,
                            },
                            status="resolving",
                            user_id=self._user_of(traces[0].id),
                            embedding_text=policy.draft_embedding_text(draft, seen_in),
                        )
                    )
                for trace in traces:
                    relation = "matches_signature" if trace.signature == signature else "similar_pattern"
                    self.evolution.link(trace.id, target.id, relation, 1.0, target.user_id)
                self.evolution.mark([c.id for c in cands], "promoted")
                self.recompute(target.id)
                for episode_id in {t.episode_id for t in traces if t.episode_id}:
                    self.episodes.add_ids(episode_id, "l2_policy_ids_json", [target.id])

        return apply

    def _seen_in(self, episode_ids: Sequence[str | None], limit: int = 3) -> list[str]:
        """Distinct task texts (first request of each episode), newest episodes last, at most ``limit``."""
        tasks: list[str] = []
        for episode_id in dict.fromkeys(e for e in episode_ids if e):
            episode = self.episodes.get(episode_id)
            task = " ".join(str(episode.meta.get("initialUserText") or "").split())[:160] if episode else ""
            if task and task not in tasks:
                tasks.append(task)
        return tasks[-limit:]

    def _with_task(self, trace: IndexedTrace) -> IndexedTrace:
        """A follow-up step ("it still fails, fix it") carries its episode's task, so triggers name the task."""
        episode = self.episodes.get(trace.episode_id) if trace.episode_id else None
        task = str(episode.meta.get("initialUserText") or "") if episode is not None else ""
        if not task or task.strip() in trace.user_text:
            return trace
        return replace(trace, user_text=f"{task.strip()}\n{trace.user_text}")

    def _user_of(self, memory_id: str) -> str:
        memory = self.memories.get(memory_id)
        return memory.user_id if memory is not None else "local-user"

    # -- failure avoidance ------------------------------------------------------------------------
    def failure_experience(self, job: JobRecord) -> Apply | None:
        """Turn the episode's failed steps into ``failure_avoidance`` policies, merged per failure signature."""
        episode = self.episodes.get(job.episode_id or "")
        if episode is None:
            return None
        found = self.memories.get_many(episode.l1_memory_ids)
        traces = sorted((indexed_trace(m, self.indexer) for m in found.values()), key=lambda t: t.created_at)
        failed = [t for t in traces if failed_step(t)]  # tool errors and failed turns, not a low value alone
        if not failed:
            return None
        negative_notes = [  # what the user said to do or avoid; a retry quoting an error ("still fails") is no note
            f.rationale
            for f in self.feedback.for_episode(episode.id)
            if f.polarity == "negative" and (f.channel == "explicit" or is_guidance(f.rationale))
        ]
        groups: dict[str, list[IndexedTrace]] = {}
        for trace in failed:
            groups.setdefault(failure_signature(trace), []).append(trace)
        llm = self._llm_for("feedback")
        plans: list[tuple[str, str, PolicyDraft, list[str], bool, Memory | None]] = []
        for signature, group in groups.items():
            last_failure = max(t.created_at for t in group)
            # pairing by evidence: only a later success of this task that shares evidence with the failure
            recovered = [
                t
                for t in traces
                if not failed_step(t) and t.created_at > last_failure and any(shares_evidence(f, t) for f in group)
            ]
            draft = avoidance_llm(group, recovered, " ".join(negative_notes)[:1000], llm, timeout_s=self._timeout_s)
            keyed = self._team_keyed(group, signature)
            existing = self.memories.find_by_key("L2", failure_key(keyed))
            support = [episode.id]
            if existing is not None:
                view = indexed_policy(existing)
                draft = merge_guidance(view, draft, GUIDANCE_CAP)
                support = sorted(set(view.source_episode_ids) | {episode.id})
            active = bool(recovered) or len(support) >= 2 or (episode.r_task or 0) < 0 or bool(negative_notes)
            plans.append((signature, keyed, draft, support, active, existing))

        def apply() -> None:
            for signature, keyed, draft, support, active, existing in plans:
                previous = policy.of(existing) if existing else policy.Policy()
                payload = policy.draft_section(draft, previous.section())
                status = "active" if active or previous.status == "active" else "candidate"
                payload.update(
                    {
                        "status": status,
                        "support": len(support),
                        "sourceEpisodeIds": support,
                        "failureSignature": signature,
                        "salience": round(min(1.0, 0.4 + 0.2 * len(support)), 3),
                        "skillEligible": False,
                    }
                )
                seen_in = self._seen_in(support)
                payload["seenIn"] = seen_in
                memory = self.writer.upsert(
                    LayerWrite(
                        layer="L2",
                        key=failure_key(keyed),
                        title=draft.title,
                        content=_with_seen_in(policy_body(draft), seen_in),
                        tags=sorted({"policy", "failure_avoidance", *draft.tags}),
                        properties={"policy": payload, "summary": draft.title},
                        status=_memory_status(status),
                        user_id=episode.user_id or "local-user",
                        project_id=episode.project_id,
                        embedding_text=policy.draft_embedding_text(draft, seen_in),
                    )
                )
                for trace_id in draft.support_trace_ids:
                    self.evolution.link(trace_id, memory.id, "avoids", 1.0, memory.user_id)
                self.episodes.add_ids(episode.id, "l2_policy_ids_json", [memory.id])
                if status == "active":
                    self.jobs.enqueue(
                        "l3_abstraction", dedupe_key=f"l3_abstraction:{signature}", payload={"seedPolicyId": memory.id}
                    )

        return apply

    def _team_keyed(self, traces: Sequence[IndexedTrace], signature: str) -> str:
        """A failure's policy key: inside a team project (traces shared there) the project's own, so a team's
        failure policy is never merged with a private one of the same failure; elsewhere the signature itself."""
        found = self.memories.get_many([t.id for t in traces], MemoryFilter(include_pending_imports=True))
        zones = {(m.visibility, m.project_id) for m in found.values()}
        visibility, project = next(iter(zones)) if len(zones) == 1 else ("private", None)
        return f"{team_keys(project)}|{signature}" if visibility == "team" and project else signature

    # -- decision repair --------------------------------------------------------------------------
    def decision_repair(self, job: JobRecord) -> Apply | None:
        """Distil Prefer/Avoid guidance from corrective feedback, tool-failure bursts or value divergence."""
        payload = job.payload
        trigger = str(payload.get("trigger") or "feedback")
        episode = self.episodes.get(job.episode_id or "") if job.episode_id else None
        traces: list[IndexedTrace] = []
        if episode is not None:
            found = self.memories.get_many(episode.l1_memory_ids)
            traces = sorted((indexed_trace(m) for m in found.values()), key=lambda t: t.created_at)
        if trigger == "value_distribution":
            high = [indexed_trace(m) for m in self.memories.get_many(list(payload.get("highIds") or [])).values()]
            low = [indexed_trace(m) for m in self.memories.get_many(list(payload.get("lowIds") or [])).values()]
            ctx = str(payload.get("contextHash") or context_hash("value-distribution", str(payload.get("signature"))))
        elif trigger == "tool_failure_burst":
            tool = str(payload.get("tool") or "")
            low = [t for t in traces if any(c.get("name") == tool for c in t.tool_calls) and is_failure(t)]
            high = [t for t in traces if not is_failure(t)]
            ctx = context_hash("tool-burst", (episode.user_id or "") if episode else "", tool)
        else:
            target = self.memories.get(job.target_memory_id or "") if job.target_memory_id else None
            low = [indexed_trace(target)] if target is not None and target.layer == "L1" else traces[-1:]
            signature = low[0].signature if low else ""
            high = [t for t in self._same_signature(signature) if t.value > 0 and t.id not in {x.id for x in low}]
            ctx = context_hash("feedback", (episode.user_id or "") if episode else "", signature)
            if target is not None and target.layer in ("L2", "Skill"):  # feedback on guidance itself
                ctx = context_hash("feedback", target.id)
        cooldown = timedelta(milliseconds=self.config.feedback.cooldown_ms)
        last = parse_iso(self.evolution.last_repair_at(ctx))
        if last is not None and datetime.now(UTC) - last < cooldown:
            return None
        text = str(payload.get("text") or "")
        burst = None
        if trigger == "tool_failure_burst":
            burst = (str(payload.get("tool")), int(payload.get("failures") or 0), str(payload.get("reason") or ""))
        draft = repair_llm(trigger, ctx, high, low, text, burst, self._llm_for("feedback"), self._timeout_s)
        shape = classify_feedback_shape(text) if text else None
        attach_ids = sorted({p for t in low + high for p in self.evolution.policies_of(t.id)})
        if job.target_memory_id and job.target_memory_id.startswith(("policy_", "skill_")):
            attach_ids = [job.target_memory_id]

        def apply() -> None:
            repair_id = self.evolution.add_repair(
                {
                    "session_id": episode.session_id if episode else None,
                    "episode_id": episode.id if episode else None,
                    "user_id": episode.user_id if episode else None,
                    "project_id": episode.project_id if episode else None,
                    "context_hash": ctx,
                    "issue": draft.issue,
                    "suggestion": draft.suggestion,
                    "preference": policy.labelled(policy.PREFER, draft.preference) if draft.preference else "",
                    "anti_pattern": policy.labelled(policy.AVOID, draft.anti_pattern) if draft.anti_pattern else "",
                    "high_value_memory_ids_json": draft.high_value_ids,
                    "low_value_memory_ids_json": draft.low_value_ids,
                    "attached_policy_memory_ids_json": attach_ids,
                    "feedback_id": payload.get("feedbackId"),
                    "source_json": {"trigger": trigger},
                    "meta_json": {"severity": draft.severity, "confidence": draft.confidence},
                }
            )
            prefer = [x for x in (draft.preference, shape.prefer if shape else "") if x]
            avoid = [x for x in (draft.anti_pattern, shape.avoid if shape else "") if x]
            attached = self._attach(attach_ids, prefer, avoid)
            if not attached and (prefer or avoid):
                # keyed like the failure it repairs, so the episode's failure_avoidance policy later merges into it
                failed = next((t for t in low if is_failure(t)), None)
                key = failure_key(failure_signature(failed)) if failed else failure_key(f"repair:{ctx}")
                self._repair_policy(draft, prefer, avoid, episode.user_id if episode else None, key)
            if episode is not None:
                self.episodes.add_ids(episode.id, "decision_repair_ids_json", [repair_id])

        return apply

    def _same_signature(self, signature: str, limit: int = 50) -> list[IndexedTrace]:
        if not signature:
            return []
        rows = self.store.query(
            "SELECT id FROM memories WHERE memory_layer = 'L1' AND status = 'activated' "
            f"AND json_extract(properties_json, '{ktrace.path(ktrace.SIGNATURE)}') = ? "
            "ORDER BY updated_at DESC LIMIT ?",
            (signature, limit),
        )
        return [indexed_trace(m) for m in self.memories.get_many([r[0] for r in rows]).values()]

    def _attach(self, policy_ids: list[str], prefer: list[str], avoid: list[str]) -> int:
        """Add guidance lines to linked live policies; returns how many took them."""
        count = 0
        for policy_id in policy_ids:
            memory = self.memories.get(policy_id)  # candidates (resolving) take guidance too
            if memory is None or memory.layer not in ("L2", "Skill") or memory.status == "archived":
                continue
            section = policy.KEY if memory.layer == "L2" else skill.KEY
            own = own_words(memory)
            if not content_keywords(" ".join(prefer + avoid)) & content_keywords(f"{memory.title} {own}"):
                continue  # pairing by evidence: guidance about something else does not join this policy
            new_prefer = [policy.labelled(policy.PREFER, line) for line in prefer]
            new_avoid = [policy.labelled(policy.AVOID, line) for line in avoid]
            merged_prefer = _merge_lines(policy.stored_lines(memory.properties, "preference"), new_prefer)
            merged_avoid = _merge_lines(policy.stored_lines(memory.properties, "anti_pattern"), new_avoid)
            self.writer.patch_properties(memory, section, {"preference": merged_prefer, "anti_pattern": merged_avoid})
            count += 1
        return count

    def _repair_policy(
        self, draft: RepairDraft, prefer: list[str], avoid: list[str], user_id: str | None, key: str
    ) -> None:
        """No policy to attach to: keep the repair as a ``repair_instruction`` policy of its own."""
        title = (policy.labelled(policy.AVOID, avoid[0]) if avoid else policy.labelled(policy.PREFER, prefer[0]))[:200]
        repair = PolicyDraft(
            title=title,
            trigger=draft.issue,
            procedure=draft.suggestion,
            verification="",
            boundary="Applies to the same context; check the current situation first.",
            experience_type="repair_instruction",
            evidence_polarity="negative",
            signature=draft.context_hash,
            confidence=draft.confidence,
            support_trace_ids=draft.low_value_ids,
            preference=prefer,
            anti_pattern=avoid,
            tags=["repair"],
        )
        payload = policy.draft_section(repair)
        active = draft.severity == "warn" or draft.confidence >= 0.5
        payload.update({"status": "active" if active else "candidate", "support": 1, "skillEligible": False})
        self.writer.upsert(
            LayerWrite(
                layer="L2",
                key=key,
                title=title,
                content=policy_body(repair),
                tags=["decision_repair", "policy"],
                properties={"policy": payload, "summary": title},
                status="activated" if active else "resolving",
                user_id=user_id or "local-user",
                embedding_text=policy.draft_embedding_text(repair),
            )
        )

    # -- explicit feedback on a policy or skill ---------------------------------------------------
    def policy_feedback(self, job: JobRecord) -> Apply | None:
        """Move a policy's gain (or a skill's eta) toward the user's verdict."""
        memory = self.memories.get(job.target_memory_id or "")
        if memory is None or memory.layer not in ("L2", "Skill"):
            return None
        sign = {"positive": 1.0, "negative": -1.0}.get(str(job.payload.get("polarity")), 0.0)
        magnitude = float(job.payload.get("magnitude", 1.0))
        if sign == 0.0:
            return None

        def apply() -> None:
            current = self.memories.get(memory.id)
            if current is None:
                return
            if current.layer == "L2":
                found = policy.of(current)
                gain = 0.6 * found.gain + 0.4 * 0.3 * sign * magnitude
                status = found.status
                if gain < self._l2.archive_gain and status != "archived":
                    status = "archived"
                elif status == "candidate" and (gain >= self._l2.min_gain or sign > 0):
                    status = "active"
                self.writer.patch_properties(
                    current, "policy", {"gain": round(gain, 6), "status": status}, status=_memory_status(status)
                )
            else:
                current_skill = skill.of(current)
                eta = min(1.0, max(0.0, (current_skill.eta or 0.5) + 0.1 * sign * magnitude))
                status = current_skill.status
                if eta < self.config.skill.archive_eta:
                    status = "archived"
                self.writer.patch_properties(
                    current,
                    "skill",
                    {"eta": round(eta, 4), "status": status},
                    status="archived" if status == "archived" else current.status,
                )

        return apply


def _merge_lines(existing: list[str], new: list[str], cap: int = GUIDANCE_CAP) -> list[str]:
    """Newest first, de-duplicated on a normalised form, capped."""
    out: list[str] = []
    seen: set[str] = set()
    for line in [*new, *existing]:
        norm = " ".join(line.lower().split()).strip(" .;:")
        if line and norm not in seen:
            seen.add(norm)
            out.append(line)
    return out[:cap]
