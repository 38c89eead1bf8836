"""Skills: crystallisation of an active policy, reward drift, trials and eta (the ``skill_crystallization`` and
``skill_trial_resolve`` jobs).

Two-phase handlers like :mod:`memmy.jobs.evolution`: the handler reads and decides, its ``apply`` writes.
"""

from __future__ import annotations

from collections.abc import Callable

from memmy.domain import Memory
from memmy.evolve.skill import (
    crystallize_llm,
    eta_after_trial,
    eta_drift,
    policy_fingerprint,
    rebuild_level,
    select_evidence,
    skill_eligible,
    skill_key,
    skill_status,
    verify_skill,
)
from memmy.jobs.evolution import DerivedEvolution
from memmy.jobs.writer import LayerWrite, indexed_policy, indexed_trace
from memmy.kinds import policy as kpolicy
from memmy.kinds import skill as kskill
from memmy.store.jobs import JobRecord
from memmy.store.memories import MemoryRepository

Apply = Callable[[], None]


class SkillEvolution(DerivedEvolution):
    """Handlers: skill_crystallization, skill_trial_resolve."""

    def handlers(self) -> dict[str, Callable[[JobRecord], Apply | None]]:
        """Job type → handler."""
        return {"skill_crystallization": self.crystallization, "skill_trial_resolve": self.trial_resolve}

    # -- Skills -----------------------------------------------------------------------------------
    def crystallization(self, job: JobRecord) -> Apply | None:
        """Crystallise an active, successful policy into a reusable Skill (heuristic or LLM), or rebuild it.

        An existing Skill is rebuilt only when its policy changed or new evidence arrived (level L1/L2); at
        level L0 only its eta drifts toward the policy's gain, and no model is called."""
        cfg = self.config.skill
        memory = self.memories.get(job.target_memory_id or "")
        if memory is None or memory.layer != "L2":
            return None
        policy = indexed_policy(memory, self.indexer)
        if not skill_eligible(policy, cfg.min_gain, cfg.min_support):
            return None
        traces = [
            indexed_trace(m, self.indexer) for m in self.memories.get_many(self.evolution.traces_of(policy.id)).values()
        ]
        evidence, counter = select_evidence(
            policy, traces, cfg.evidence_limit, self.indexer.cosine_scale("texts").to_reference
        )
        llm = self.models.evolution if cfg.use_llm else None
        existing = self.memories.find_by_key("Skill", skill_key(policy.id))
        previous = kskill.of(existing).section() if existing else {}
        fingerprint = policy_fingerprint(policy)
        level = rebuild_level(previous, fingerprint, [t.id for t in evidence])
        stats_run = kpolicy.of(memory).stats_runs
        upgrade = llm is not None and previous.get("origin") == "heuristic"
        if existing is not None and level == "L0" and not upgrade:
            return self._drift(existing.id, policy.gain, stats_run)
        draft = crystallize_llm(
            policy,
            evidence,
            counter,
            llm,
            timeout_s=self.config.evolution.timeout_ms / 1000,
            previous_guide=existing.content if existing is not None and level else "",
            level=level,
        )
        if draft is None:
            return None
        coverage, resonance, _ok = verify_skill(draft, evidence)

        def apply() -> None:
            payload = kskill.draft_section(draft, previous, coverage, resonance)
            payload["policyFingerprint"] = fingerprint
            payload["rebuildLevel"] = level or "initial"
            payload["rebuilds"] = int(previous.get("rebuilds") or 0) + (1 if level else 0)
            if previous and previous.get("driftedAtStatsRun") != stats_run:
                payload["eta"] = round(eta_drift(float(previous.get("eta") or draft.eta), policy.gain), 4)
            payload["driftedAtStatsRun"] = stats_run
            seen_in = list(kpolicy.of(memory).seen_in)
            guide = draft.invocation_guide
            if seen_in:
                guide += "\n\nUsed for:\n" + "\n".join(f"- {task}" for task in seen_in)
            created = self.writer.upsert(
                LayerWrite(
                    layer="Skill",
                    key=skill_key(policy.id),
                    title=draft.name,
                    content=guide,
                    tags=sorted({"skill", *draft.tags}),
                    properties={"skill": payload, "summary": draft.summary},
                    status="archived" if payload.get("status") == "archived" else "activated",
                    user_id=memory.user_id,
                    embedding_text=f"{draft.name}\n{guide}",
                )
            )
            for episode_id in policy.source_episode_ids:
                self.episodes.add_ids(episode_id, "skill_memory_ids_json", [created.id])

        return apply

    def _drift(self, skill_id: str, gain: float, stats_run: int) -> Apply | None:
        """Reward drift of an unchanged Skill: ``eta' = .7·eta + .3·gain``, once per policy stats run."""

        def apply() -> None:
            current = self.memories.get(skill_id)
            if current is None or current.status == "archived":
                return
            found = kskill.of(current)
            if found.drifted_at_stats_run == stats_run:
                return
            eta = eta_drift(found.eta or 0.5, gain)
            status = self._skill_status(current, eta, found.trials)
            self.writer.patch_properties(
                current,
                "skill",
                {"eta": round(eta, 4), "status": status, "rebuildLevel": "L0", "driftedAtStatsRun": stats_run},
                status="archived" if status == "archived" else "activated",
            )

        return apply

    def _skill_status(self, skill: Memory, eta: float, trials: int) -> str:
        """The skill's next lifecycle status for a new eta and trial count (config thresholds applied)."""
        cfg = self.config.skill
        return skill_status(
            eta,
            trials,
            kskill.of(skill).status,
            candidate_trials=cfg.candidate_trials,
            min_eta=cfg.min_eta_for_retrieval,
            repair_origin="repair_candidate" in skill.tags,
        )

    def trial_resolve(self, job: JobRecord) -> Apply | None:
        """Update a skill's eta and status from its resolved trials."""
        memory = self.memories.get(job.target_memory_id or "")
        if memory is None or memory.layer != "Skill":
            return None

        def apply() -> None:
            current = self.memories.get(memory.id)
            if current is None:
                return
            found = kskill.of(current)
            passes, attempts = self.evolution.trial_counts(current.id)
            prior = found.prior_eta or found.eta or 0.5
            eta = eta_after_trial(prior, passes, attempts)
            status = self._skill_status(current, eta, attempts)
            self.writer.patch_properties(
                current,
                "skill",
                {"eta": round(eta, 4), "priorEta": prior, "status": status, "trials": attempts, "passes": passes},
                status="archived" if status == "archived" else "activated",
            )

        return apply


def skill_ids_injected(memories: MemoryRepository, ids: list[str]) -> list[str]:
    """The Skill memories among injected ids (each injection starts a trial)."""
    return [m.id for m in memories.get_many([i for i in ids if i.startswith("skill_")]).values() if m.layer == "Skill"]
