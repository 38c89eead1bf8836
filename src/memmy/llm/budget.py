"""A daily spending cap on LLM calls and tokens, shared by every model slot.

Evolution can run many LLM steps per turn; a loop or a chatty agent must not run up a bill. Before each call
:class:`BudgetedLLM` asks the shared :class:`DailyBudget` whether today's (UTC) calls or tokens have reached
their limit and, if so, raises :class:`LLMBudgetExhausted` without any HTTP request, so the caller falls back to
its heuristic as it does on any :class:`LLMError`. After the call every HTTP exchange that reached the server is
recorded in a :class:`UsageMeter` (the SQLite ``runtime_kv`` table in production).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from memmy.llm.client import LLMError, LLMUsage, UsageCallback, scrub

log = logging.getLogger(__name__)


class LLMBudgetExhausted(LLMError):
    """Today's LLM budget (calls or tokens) is spent; callers use their heuristics until 00:00 UTC."""

    code = "llm_budget_exhausted"


class UsageMeter(Protocol):
    """Per-day counters of LLM calls and tokens (implemented by ``memmy.store.llm_usage``)."""

    def used_today(self, day: str) -> tuple[int, int]:
        """(calls, tokens) recorded for ``day`` (``YYYY-MM-DD``, UTC)."""
        ...

    def record(self, day: str, slot: str, calls: int, tokens: int, refused: int = 0) -> None:
        """Add calls, tokens and refusals to ``day`` for model ``slot`` (summary, evolution)."""
        ...


class UsageReportingLLM(Protocol):
    """A JSON model client that reports every HTTP exchange (see ``OpenAICompatibleLLM``)."""

    def complete_json(self, system: str, user: str, *, timeout_s: float, on_usage: UsageCallback | None = None) -> Any:
        """Return the parsed JSON answer or raise :class:`LLMError`; call ``on_usage`` per exchange."""
        ...


def utc_day(moment: datetime) -> str:
    """The UTC calendar day of ``moment`` as ``YYYY-MM-DD``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class BudgetStatus:
    """Where today's spending stands; limits of 0 mean unlimited and give ``remaining`` None."""

    day: str
    calls: int
    tokens: int
    daily_calls: int
    daily_tokens: int
    resets_at: str

    @property
    def remaining_calls(self) -> int | None:
        """Calls left today, or None when unlimited."""
        return max(self.daily_calls - self.calls, 0) if self.daily_calls else None

    @property
    def remaining_tokens(self) -> int | None:
        """Tokens left today, or None when unlimited."""
        return max(self.daily_tokens - self.tokens, 0) if self.daily_tokens else None

    @property
    def exhausted(self) -> bool:
        """True when the next call would be refused."""
        return self.remaining_calls == 0 or self.remaining_tokens == 0


class DailyBudget:
    """The daily limits and the meter every slot shares; thread-safe.

    Calls are reserved before the request so concurrent callers cannot overshoot ``daily_calls``; the token
    limit is checked against what was already spent (one call may overshoot it by its own size).
    """

    def __init__(
        self,
        meter: UsageMeter,
        daily_calls: int,
        daily_tokens: int,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.meter = meter
        self.daily_calls = max(daily_calls, 0)
        self.daily_tokens = max(daily_tokens, 0)
        self.clock = clock
        self._lock = threading.Lock()
        self._pending = 0  # calls admitted that have not recorded an exchange yet

    def today(self) -> str:
        """The current UTC day."""
        return utc_day(self.clock())

    def status(self) -> BudgetStatus:
        """Today's usage against the limits."""
        now = self.clock().astimezone(UTC)
        day = utc_day(now)
        calls, tokens = self._used(day)
        midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
        resets = midnight.isoformat().replace("+00:00", "Z")
        return BudgetStatus(day, calls, tokens, self.daily_calls, self.daily_tokens, resets)

    def _used(self, day: str) -> tuple[int, int]:
        try:
            return self.meter.used_today(day)
        except Exception as exc:  # a spending cap fails closed: no reading, no call
            raise LLMError(f"LLM usage meter unavailable: {scrub(str(exc))}") from exc

    def _record(self, day: str, slot: str, calls: int, tokens: int, refused: int = 0) -> None:
        try:
            self.meter.record(day, slot, calls, tokens, refused)
        except Exception as exc:  # the answer is already paid for; losing a count must not lose it
            log.warning("could not record LLM usage for %s: %s", slot, scrub(str(exc)))

    @contextmanager
    def admit(self, slot: str) -> Iterator[UsageCallback]:
        """Admit one call for ``slot`` or raise :class:`LLMBudgetExhausted` (recording the refusal).

        Yields the ``on_usage`` callback that records each exchange of the call against the admission day.
        """
        with self._lock:
            day = self.today()
            calls, tokens = self._used(day)
            reason = ""
            if self.daily_calls and calls + self._pending >= self.daily_calls:
                reason = f"calls {calls + self._pending}/{self.daily_calls}"
            elif self.daily_tokens and tokens >= self.daily_tokens:
                reason = f"tokens {tokens}/{self.daily_tokens}"
            if reason:
                self._record(day, slot, 0, 0, refused=1)
                raise LLMBudgetExhausted(
                    f"daily LLM budget reached ({reason}); evolution falls back to heuristics until 00:00 UTC"
                )
            self._pending += 1
        pending = [True]

        def on_usage(usage: LLMUsage) -> None:
            with self._lock:
                if pending[0]:
                    pending[0] = False
                    self._pending -= 1
            self._record(day, slot, 1, usage.total_tokens)

        try:
            yield on_usage
        finally:
            with self._lock:
                if pending[0]:
                    pending[0] = False
                    self._pending -= 1


class BudgetedLLM:
    """A :class:`~memmy.llm.client.JsonLLM` that spends from a :class:`DailyBudget` under a slot name."""

    def __init__(self, inner: UsageReportingLLM, budget: DailyBudget, slot: str) -> None:
        self.inner = inner
        self.budget = budget
        self.slot = slot

    def complete_json(self, system: str, user: str, *, timeout_s: float) -> Any:
        """Refuse with :class:`LLMBudgetExhausted` when today's budget is spent, else call and record."""
        with self.budget.admit(self.slot) as on_usage:
            return self.inner.complete_json(system, user, timeout_s=timeout_s, on_usage=on_usage)


class CircuitOpen(LLMError):
    """The model failed several times in a row; calls are skipped for a while (the heuristics take over)."""

    code = "llm_circuit_open"


class CircuitBreakerLLM:
    """Stop calling a model that keeps failing: after ``threshold`` consecutive failures, refuse for ``cooldown_s``.

    A dead endpoint (HTTP 500s, timeouts, garbage answers) would otherwise cost every evolution job its full
    retry and timeout budget; with the circuit open each step falls back to its heuristic at once. One call is
    let through after the cool-down (half-open); a success closes the circuit again. Budget refusals do not
    count as failures (they are not the model's fault and do not reach it).
    """

    def __init__(
        self, inner: Any, *, threshold: int = 3, cooldown_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inner = inner
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.failures = 0
        self.open_until = 0.0
        self._lock = threading.Lock()

    def complete_json(self, system: str, user: str, *, timeout_s: float) -> Any:
        """Call through unless the circuit is open."""
        with self._lock:
            now = self.clock()
            if self.failures >= self.threshold and now < self.open_until:
                raise CircuitOpen(
                    f"model skipped for {self.open_until - now:.0f} s after {self.failures} consecutive failures"
                )
        try:
            answer = self.inner.complete_json(system, user, timeout_s=timeout_s)
        except LLMBudgetExhausted:
            raise
        except LLMError:
            with self._lock:
                self.failures += 1
                if self.failures >= self.threshold:
                    self.open_until = self.clock() + self.cooldown_s
            raise
        with self._lock:
            self.failures = 0
        return answer
