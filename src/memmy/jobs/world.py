"""L3 world models: abstraction over the active policies of a domain (the ``l3_abstraction`` job).

Two-phase handlers like :mod:`memmy.jobs.evolution`: the handler reads and decides, its ``apply`` writes.
"""

from __future__ import annotations

from collections.abc import Callable

from memmy.domain import Memory
from memmy.evolve.model import IndexedPolicy, WorldModelDraft
from memmy.evolve.world import bucket_policies, domain_key, eligible_policies, world_key, world_model_llm
from memmy.jobs.evolution import DerivedEvolution
from memmy.jobs.writer import LayerWrite, indexed_policy
from memmy.kinds import policy as kpolicy
from memmy.kinds import world as kworld
from memmy.store.jobs import JobRecord

Apply = Callable[[], None]


def _supersedable(memory: Memory, domain: str, policies: list[IndexedPolicy]) -> bool:
    """World models a new note of ``domain`` may replace: another note of the same primary domain, or one built
    from some of the same policies (unrelated domains never retire each other)."""
    if memory.memory_key == world_key(domain):
        return False
    note = kworld.of(memory)
    shared = set(note.policy_ids) & {p.id for p in policies}
    return bool(shared) or (bool(note.domain_key) and note.primary_domain == domain.split("|")[0])


class WorldEvolution(DerivedEvolution):
    """Handler: l3_abstraction."""

    def handlers(self) -> dict[str, Callable[[JobRecord], Apply | None]]:
        """Job type → handler."""
        return {"l3_abstraction": self.abstraction}

    # -- L3 ---------------------------------------------------------------------------------------
    def abstraction(self, job: JobRecord) -> Apply | None:
        """Summarise each domain bucket of active policies into a declarative world-model note."""
        cfg = self.config.l3_abstraction
        views = [indexed_policy(m, self.indexer) for m in self.memories.by_layer("L2", ("activated",))]
        eligible = eligible_policies(views, cfg.min_policy_gain, cfg.min_policy_support)
        # failure-avoidance guidance is knowledge about the environment too (what fails there)
        eligible += [
            v for v in views if v.experience_type != "success_pattern" and v.status == "active" and v not in eligible
        ]
        buckets = bucket_policies(eligible)
        seed = self.memories.get(str(job.payload.get("seedPolicyId") or ""))
        if seed is not None and seed.layer == "L2":
            seed_domain = domain_key(indexed_policy(seed))
            buckets = {k: v for k, v in buckets.items() if k == seed_domain} or buckets
        llm = self.models.evolution if cfg.use_llm else None
        stored = self.memories.by_layer("L3", ("activated",))
        retired = self._superseded_keys()
        drafts: list[WorldModelDraft] = []
        for domain, policies in buckets.items():
            if world_key(domain) in retired:
                continue  # its knowledge lives on in the note that superseded it
            if len(policies) < cfg.min_policies:
                continue
            draft = world_model_llm(
                domain,
                policies,
                llm,
                timeout_s=self.config.evolution.timeout_ms / 1000,
                cluster_min_similarity=cfg.cluster_min_similarity,
                to_reference=self.indexer.cosine_scale("texts").to_reference,
                existing=[(m.id, m.title) for m in stored if _supersedable(m, domain, policies)],
            )
            if draft is not None:
                drafts.append(draft)
        if not drafts:
            return None

        def apply() -> None:
            for draft in drafts:
                memory = self.writer.upsert(
                    LayerWrite(
                        layer="L3",
                        key=world_key(draft.domain_key),
                        title=draft.title,
                        content=draft.body,
                        tags=sorted({"world_model", *draft.domain_tags}),
                        properties={"world_model": kworld.draft_section(draft), "summary": draft.title},
                        embedding_text=f"{draft.title}\n{draft.body}\n{' '.join(draft.domain_tags)}",
                    )
                )
                for policy_id in draft.policy_ids:
                    source = self.memories.get(policy_id)
                    for episode_id in kpolicy.of(source).source_episode_ids if source else ():
                        self.episodes.add_ids(episode_id, "l3_world_model_ids_json", [memory.id])
                for old_id in draft.supersedes:
                    self.writer.supersede(old_id, memory.id)

        return apply

    def _superseded_keys(self) -> set[str]:
        """Keys of world models archived in favour of a replacement that is still active."""
        keys: set[str] = set()
        for memory in self.memories.by_layer("L3", ("archived",)):
            replacement = self.memories.get(memory.superseded_by or "")
            if memory.memory_key and replacement is not None and replacement.status == "activated":
                keys.add(memory.memory_key)
        return keys
