"""The composition root: :func:`bootstrap` builds everything the daemon runs on, once, in order.

Settings (one :class:`~memmy.config.Settings` shared by reference), the :class:`~memmy.store.unit.Store` (every
repository and the unit of work), the redactor, the indexer, the budgeted model clients, every ops group and the
evolution worker with its handlers. :class:`~memmy.service.MemoryService` is the small object the edges hold
over the result; nothing here reads attributes off a half-built service.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memmy.config import MemmyConfig, Settings
from memmy.dream.ops import DreamOps
from memmy.embed import Embedder, build_embedder, model_cache_dir
from memmy.errors import ConfigError
from memmy.indexing import Indexer
from memmy.jobs.episode import EpisodeOps
from memmy.jobs.evolution import EpisodeEvolution, ModelSlots
from memmy.jobs.policy import PolicyEvolution
from memmy.jobs.skill import SkillEvolution
from memmy.jobs.worker import EvolutionWorker, Handler
from memmy.jobs.world import WorldEvolution
from memmy.keys.graph import KeyOps
from memmy.redact import RedactionConfigError, Redactor
from memmy.service.data import DataOps, StoreOwnership
from memmy.service.governance import GovernanceOps
from memmy.service.imports import ImportOps
from memmy.service.memories import MemoryOps
from memmy.service.models import ModelClients, build_model_clients
from memmy.service.panel import PanelOps
from memmy.service.recall import RecallOps
from memmy.service.turn_ops import TurnOps
from memmy.service.validity import ValidityOps
from memmy.store.unit import Store
from memmy.traces.writer import TraceWriter

EvolutionGroup = EpisodeEvolution | PolicyEvolution | WorldEvolution | SkillEvolution


def build_redactor(config: MemmyConfig) -> Redactor:
    """The built-in secret rules plus the config's ``redaction.extraPatterns`` and ``redaction.allowlist``."""
    try:
        return Redactor.from_config(config.tree.get("redaction"))
    except RedactionConfigError as exc:
        raise ConfigError(f"{config.path}: {exc}") from None


def embedder_factory(config: MemmyConfig) -> Callable[[], Embedder]:
    """A zero-argument factory for the configured embedder (created lazily, off the start-up path)."""
    settings = config.embedding

    def factory() -> Embedder:
        return build_embedder(
            settings.provider,
            model=settings.model,
            endpoint=settings.endpoint or None,
            api_key=settings.api_key or None,
            batch_size=settings.batch_size,
            timeout_ms=settings.timeout_ms,
            max_retries=settings.max_retries,
            cache_dir=model_cache_dir(config.home),
        )

    return factory


@dataclass
class Components:
    """Everything :func:`bootstrap` built; the facade holds it."""

    settings: Settings
    store: Store
    redactor: Redactor
    indexer: Indexer
    models: ModelClients
    model_slots: ModelSlots
    memory_ops: MemoryOps
    recall_ops: RecallOps
    episode_ops: EpisodeOps
    worker: EvolutionWorker
    evolution_groups: list[EvolutionGroup]
    trace_writer: TraceWriter
    turn_ops: TurnOps
    panel: PanelOps
    imports: ImportOps
    keys: KeyOps
    validity: ValidityOps
    dreams: DreamOps
    governance: GovernanceOps
    data: DataOps
    ownership: StoreOwnership


def _periodic(episode_ops: EpisodeOps, store: Store, dreams: DreamOps, governance: GovernanceOps) -> Callable[[], None]:
    """Work the evolution worker does about once a minute: close idle episodes, prune old jobs, scheduled Dream."""

    def cycle() -> None:
        episode_ops.close_idle()
        store.jobs.prune_finished()
        dreams.run_if_due()
        governance.prune_if_due()

    return cycle


def bootstrap(config: MemmyConfig, embedder: Embedder | None = None, store: Store | None = None) -> Components:
    """Build settings, store, redactor, indexer, models, every ops group and the worker with its handlers.

    ``store`` defaults to the configured SQLite file (opened and migrated); ``embedder`` to the configured one,
    created lazily by the indexer.
    """
    redactor = build_redactor(config)  # a bad redaction rule is refused before the store is opened
    settings = Settings(config)
    if store is None:
        postgres = config.storage.backend == "postgres"
        store = Store.open_postgres(config.storage.postgres_dsn) if postgres else Store.open(config.storage.sqlite_path)
    factory = (lambda: embedder) if embedder is not None else embedder_factory(config)
    indexer = Indexer(factory, store, config.embedding.batch_size)
    models = build_model_clients(config, store)
    slots = ModelSlots(models.summary, models.evolution)
    memory_ops = MemoryOps(settings, store, indexer)
    recall_ops = RecallOps(settings, store, indexer, models)
    episode_ops = EpisodeOps(settings, store)
    episode_ops.embed = indexer.embed_query  # topic shifts measure meaning, not only words
    episode_ops.to_reference = lambda cosine: indexer.cosine_scale("texts").to_reference(cosine)
    groups: list[EvolutionGroup] = [
        EpisodeEvolution(settings, store, indexer, episode_ops, slots),
        PolicyEvolution(settings, store, indexer, slots),
        WorldEvolution(settings, store, indexer, slots),
        SkillEvolution(settings, store, indexer, slots),
    ]
    dreams = DreamOps(settings, store, indexer)
    governance = GovernanceOps(settings, store, indexer)
    handlers: dict[str, Handler] = {}
    for group in groups:
        handlers.update(group.handlers())
        group.writer.review_required = governance.review_required  # the review queue's gate in every writer
    worker = EvolutionWorker(store, handlers, on_cycle=_periodic(episode_ops, store, dreams, governance))
    trace_writer = TraceWriter(settings, store, indexer, redactor)  # one path for a turn, live or imported
    turn_ops = TurnOps(settings, store, trace_writer, recall_ops, episode_ops, worker.wake)
    imports = ImportOps(settings, store, trace_writer, redactor)
    keys = KeyOps(
        settings,
        store,
        indexer,
        memory_ops.forget,
    )
    data = DataOps(settings, store, indexer.load_index)
    return Components(
        settings=settings,
        store=store,
        redactor=redactor,
        indexer=indexer,
        models=models,
        model_slots=slots,
        memory_ops=memory_ops,
        recall_ops=recall_ops,
        episode_ops=episode_ops,
        worker=worker,
        evolution_groups=groups,
        trace_writer=trace_writer,
        turn_ops=turn_ops,
        panel=PanelOps(store),
        imports=imports,
        keys=keys,
        validity=ValidityOps(store),
        dreams=dreams,
        governance=governance,
        data=data,
        ownership=StoreOwnership(data, governance, store.path),  # export / import / wipe, audited
    )


__all__ = ["Components", "EvolutionGroup", "bootstrap", "build_redactor", "embedder_factory"]
