"""Composition of the evolution handler groups (kept apart so the facade module stays small)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from memmy.jobs.evolution import EpisodeEvolution
from memmy.jobs.higher import HigherEvolution
from memmy.jobs.policies import PolicyEvolution
from memmy.jobs.worker import Handler

if TYPE_CHECKING:
    from memmy.service import MemoryService


class HandlerGroup(Protocol):
    """Anything that contributes job handlers to the worker."""

    def handlers(self) -> dict[str, Callable[..., object]]:
        """Job type → handler."""
        ...


def build_evolution(service: MemoryService) -> list[EpisodeEvolution | PolicyEvolution | HigherEvolution]:
    """The three handler groups over the service's repositories and model slots."""
    service.episode_ops.embed = service.indexer.embed_query  # topic shifts measure meaning, not only words
    return [
        EpisodeEvolution(
            service.config,
            service.db,
            service.memories,
            service.episodes,
            service.feedback,
            service.evolution,
            service.jobs,
            service.queue,
            service.indexer,
            service.episode_ops,
            service.model_slots,
        ),
        PolicyEvolution(
            service.config,
            service.memories,
            service.episodes,
            service.feedback,
            service.evolution,
            service.jobs,
            service.indexer,
            service.model_slots,
        ),
        HigherEvolution(
            service.config,
            service.memories,
            service.episodes,
            service.evolution,
            service.indexer,
            service.model_slots,
        ),
    ]


__all__ = ["Handler", "build_evolution"]
