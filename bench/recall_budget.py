"""Recall at the cost the reader pays: what a ranked list of items injects within a budget of turns or tokens.

A result may be one turn or a window of neighbouring turns. Counting a window as one item of k compares ten
windows (about 34 turns) with ten single turns, so ``bench/locomo.py`` also reads every ranking as the turns it
injects: items in rank order, each item's hit first and then its other turns nearest first, every turn once.

- :func:`within_turns` stops after ``n`` turns (the last item is cut to its hit and its nearest turns);
- :func:`within_tokens` adds turns while they fit in ``budget`` tokens and skips one that does not fit, as the
  turn-start injection skips an item that does not fit its token budget (``render_budgeted``).

Tokens are counted with memmy's own estimate (``memmy.recall.render.estimate_tokens``: four characters a token,
one per CJK character), the rule the turn-start injection budget is kept with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def injected(items: Sequence[Sequence[str]]) -> list[str]:
    """Every turn of ``items`` in injection order (rank order, each item as given), each turn once."""
    return list(dict.fromkeys(turn for item in items for turn in item))


def within_turns(items: Sequence[Sequence[str]], n: int) -> list[str]:
    """The first ``n`` distinct turns injected by ``items``."""
    return injected(items)[:n]


def within_tokens(items: Sequence[Sequence[str]], cost: Callable[[str], int], budget: int) -> list[str]:
    """The turns injected by ``items`` within ``budget`` tokens: a turn that does not fit is skipped."""
    chosen: list[str] = []
    used = 0
    for turn in injected(items):
        price = cost(turn)
        if used + price <= budget:
            chosen.append(turn)
            used += price
    return chosen
