"""The LoCoMo bench's reading at equal cost: a window is as many injected turns as it holds, not one item."""

from __future__ import annotations

from bench.recall_budget import injected, within_tokens, within_turns

#: Two windows (hit first, then its neighbours nearest first) against single turns.
WINDOWS = [["t5", "t4", "t6"], ["t9", "t8", "t10"], ["t2", "t1", "t3"]]
SINGLES = [["t5"], ["t9"], ["t2"], ["t7"], ["t1"]]


def test_a_window_spends_one_turn_of_the_budget_per_turn_it_holds() -> None:
    assert within_turns(WINDOWS, 5) == ["t5", "t4", "t6", "t9", "t8"]  # the second window cut to its hit + 1
    assert within_turns(SINGLES, 5) == ["t5", "t9", "t2", "t7", "t1"]
    assert within_turns(WINDOWS, 20) == [t for item in WINDOWS for t in item]  # a short list spends less


def test_a_turn_that_two_items_show_is_injected_and_paid_for_once() -> None:
    overlapping = [["t5", "t4", "t6"], ["t6", "t7"], ["t4"], ["t8"]]
    assert injected(overlapping) == ["t5", "t4", "t6", "t7", "t8"]
    assert within_turns(overlapping, 4) == ["t5", "t4", "t6", "t7"]


def test_a_turn_over_the_token_budget_is_skipped_and_shorter_ones_still_fit() -> None:
    cost = {"t5": 100, "t4": 250, "t6": 80, "t9": 150, "t8": 40, "t10": 10}.get
    chosen = within_tokens(WINDOWS[:2], lambda t: cost(t, 0), 400)
    assert chosen == ["t5", "t4", "t8", "t10"]  # t6 and t9 no longer fit after t4; t8 and t10 do
    assert sum(cost(t, 0) for t in chosen) <= 400
    assert within_tokens(WINDOWS, lambda t: 500, 400) == []
