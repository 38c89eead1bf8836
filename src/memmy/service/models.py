"""Build the model clients of the ``summary`` and ``evolution`` slots, both behind one daily LLM budget.

The composition root (the facade, the evolution worker) calls :func:`build_model_clients` once per config and
hands the slots to whoever needs a :class:`~memmy.llm.client.JsonLLM`; ``None`` means "no model: use rules".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from memmy.config import LLMSettings, MemmyConfig
from memmy.llm.budget import BudgetedLLM, CircuitBreakerLLM, DailyBudget
from memmy.llm.client import JsonLLM, LLMEndpoint, OpenAICompatibleLLM, resolve_endpoint
from memmy.store.llm_usage import LLMUsageRepository
from memmy.store.unit import Store

SLOTS = ("summary", "evolution")


def endpoint_of(settings: LLMSettings) -> LLMEndpoint | None:
    """The HTTP endpoint of a configured slot, or None when it cannot be called from here.

    ``host`` models belong to the agent host and unconfigured slots have no model; a slot without an endpoint
    uses its vendor's public URL (DeepSeek, Qwen, Kimi ...) or is not callable.
    """
    if not settings.configured or settings.provider == "host":
        return None
    endpoint = resolve_endpoint(settings.endpoint, settings.vendor)
    if not endpoint or not settings.model:
        return None
    return LLMEndpoint(
        endpoint=endpoint,
        model=settings.model,
        api_key=settings.api_key,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        vendor=settings.vendor,
        enable_thinking=settings.enable_thinking,
        max_retries=settings.max_retries,
        json_mode=settings.json_mode,
        repeat_penalty=settings.repeat_penalty,
    )


@dataclass
class ModelClients:
    """The two model slots (None = not configured), the shared budget and the usage counters."""

    summary: JsonLLM | None
    evolution: JsonLLM | None
    usage: LLMUsageRepository
    budget: DailyBudget
    summary_timeout_s: float = 45.0
    evolution_timeout_s: float = 180.0

    def replace_with(self, other: ModelClients) -> None:
        """Take ``other``'s clients and limits in place (a config reload), so every holder sees them at once."""
        for item in fields(self):
            setattr(self, item.name, getattr(other, item.name))

    def usage_report(self) -> dict[str, Any]:
        """Today's LLM use against the daily limits, for the health route (limits of 0 = unlimited)."""
        status = self.budget.status()
        today = self.usage.usage_of(status.day)
        return {
            "day": status.day,
            "calls": status.calls,
            "tokens": status.tokens,
            "refused": int(today["refused"]),
            "slots": today["slots"],
            "limits": {"dailyCalls": status.daily_calls, "dailyTokens": status.daily_tokens},
            "remaining": {"calls": status.remaining_calls, "tokens": status.remaining_tokens},
            "exhausted": status.exhausted,
            "resetsAt": status.resets_at,
            "configured": {"summary": self.summary is not None, "evolution": self.evolution is not None},
        }


def build_model_clients(config: MemmyConfig, store: Store) -> ModelClients:
    """Budgeted clients for the configured slots, both counting against the same meter and limits."""
    usage = store.llm_usage
    limits = config.llm_budget
    budget = DailyBudget(usage, limits.daily_calls, limits.daily_tokens)

    def client(slot: str, settings: LLMSettings) -> JsonLLM | None:
        endpoint = endpoint_of(settings)
        if endpoint is None:
            return None
        return CircuitBreakerLLM(BudgetedLLM(OpenAICompatibleLLM(endpoint), budget, slot))

    return ModelClients(
        summary=client("summary", config.summary),
        evolution=client("evolution", config.evolution),
        usage=usage,
        budget=budget,
        summary_timeout_s=config.summary.timeout_ms / 1000,
        evolution_timeout_s=config.evolution.timeout_ms / 1000,
    )
