"""Turn windows: every result shows distinct turns; a window never repeats a turn a better result already shows."""

from __future__ import annotations

import numpy as np
import pytest

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.domain import Memory
from memmy.namespace import Namespace
from memmy.recall.channels import ChannelHit, window_cosines
from memmy.recall.fusion import turn_tokens, turn_window, window_positions
from memmy.service import MemoryService
from tests.answers import must
from tests.conftest import ServiceFactory

NS = Namespace(source="claude_code")
#: Windows of exactly ``contextWindow`` turns on each side, whatever the turns' length.
FIXED_WINDOWS = {"algorithm": {"retrieval": {"contextWindowTokens": 0}}}
#: The same, for every result rather than the first ``contextWindowResults`` (1 by default).
EVERY_RESULT_WINDOWED = {"algorithm": {"retrieval": {"contextWindowTokens": 0, "contextWindowResults": 0}}}


def session(n: int) -> list[Memory]:
    return [Memory(id=f"t{i}", layer="L1", content=f"turn {i}", session_id="s") for i in range(n)]


def vector_of(service: MemoryService, memory_id: str) -> np.ndarray:
    index = service.indexer.index
    assert index is not None
    found = index.vector(memory_id)
    assert found is not None
    return found


def ids(memories: list[Memory]) -> list[str]:
    return [m.id for m in memories]


def chat(service: MemoryService, texts: list[str]) -> list[str]:
    """``texts`` stored as the turns of one session, a second apart, embedded; their ids in order."""
    made = [
        must(
            service.add_memory(
                AddMemory.from_json({"content": t, "sessionId": "chat", "createdAt": f"2026-01-05T10:00:0{i}Z"}), NS
            )["id"]
        )
        for i, t in enumerate(texts)
    ]
    service.indexer.drain()
    return made


def test_a_window_is_the_hit_and_its_nearest_turns_in_time_order() -> None:
    turns = session(9)
    assert ids(turn_window(turns[4], turns[2:7], set(), 1)) == ["t3", "t4", "t5"]
    assert ids(turn_window(turns[0], turns[0:3], set(), 1)) == ["t0", "t1", "t2"]  # session start: both after
    assert ids(turn_window(turns[4], turns[2:7], set(), 0)) == ["t4"]
    assert ids(turn_window(turns[4], turns[5:7], set(), 1)) == ["t4"]  # the hit is not among its neighbours


def test_a_window_skips_turns_a_better_result_shows_and_takes_the_next_nearest() -> None:
    turns = session(9)
    shown = {"t1", "t2", "t3"}  # the window of a better hit on t2
    assert ids(turn_window(turns[4], turns[2:7], shown, 1)) == ["t4", "t5", "t6"]
    assert ids(turn_window(turns[4], turns[2:7], {"t5"}, 1)) == ["t2", "t3", "t4"]  # ties go to the earlier turn
    assert ids(turn_window(turns[4], turns[2:7], {"t2", "t3", "t5", "t6"}, 1)) == ["t4"]  # nothing left nearby


GREYHOUND = [
    "We talked about the weather on Monday.",
    "The release train leaves on Thursday afternoon.",
    "Marta adopted a greyhound called Comet from the shelter.",
    "Coffee in the new office is terrible.",
    "Comet the greyhound already sleeps on Marta's sofa.",
    "The changelog still needs an entry for the parser fix.",
    "Lunch is at noon tomorrow.",
    "Someone left a bicycle in the hallway.",
]


def test_two_hits_two_turns_apart_return_six_distinct_turns(make_service: ServiceFactory) -> None:
    service: MemoryService = make_service(EVERY_RESULT_WINDOWED)
    made = chat(service, GREYHOUND)
    result = service.search(SearchMemory.from_json({"query": "Marta greyhound Comet", "limit": 2}), NS)
    windows = [hit["window"] for hit in result["hits"]]
    assert len(windows) == 2
    shown = [memory_id for window in windows for memory_id in window]
    assert len(shown) == len(set(shown)) == 6  # no turn is shown twice
    assert {made[2], made[4]} <= set(shown)
    for window in windows:
        assert window == [m for m in made if m in window]  # each window in time order


def test_only_the_best_result_spends_the_budget_on_its_neighbours(make_service: ServiceFactory) -> None:
    service: MemoryService = make_service(FIXED_WINDOWS)  # contextWindowResults: 1, the default
    made = chat(service, GREYHOUND)
    hits = service.search(SearchMemory.from_json({"query": "Marta greyhound Comet", "limit": 2}), NS)["hits"]
    assert len(hits) == 2 and {hits[0]["id"], hits[1]["id"]} == {made[2], made[4]}
    first = made.index(hits[0]["id"])
    assert hits[0]["window"] == made[first - 1 : first + 2]  # the best match shows its passage
    assert "window" not in hits[1]  # the second shows its own turn: 4 injected turns, not 6


def test_the_best_trace_brings_its_window_when_a_policy_ranks_above_it(make_service: ServiceFactory) -> None:
    service: MemoryService = make_service(FIXED_WINDOWS)
    made = chat(service, GREYHOUND)
    body = {"content": "Marta greyhound Comet: walk Comet the greyhound twice a day.", "layer": "L2"}
    policy = service.add_memory(AddMemory.from_json(body), NS)["id"]
    service.indexer.drain()
    hits = service.search(SearchMemory.from_json({"query": "Marta greyhound Comet", "limit": 3}), NS)["hits"]
    assert hits[0]["id"] == policy and "window" not in hits[0]
    traces = [hit for hit in hits if hit["id"] in made]
    assert len(traces) == 2
    assert len(traces[0]["window"]) == 3 and "window" not in traces[1]


def test_a_trace_hit_is_judged_by_the_meaning_of_its_window(make_service: ServiceFactory) -> None:
    service: MemoryService = make_service(FIXED_WINDOWS)
    texts = [
        "My sister bought an old acoustic guitar at the flea market.",
        "She has been playing it every evening for a month now.",
        "The neighbours have not complained yet.",
    ]
    made = chat(service, texts)
    query = "how long has my sister been practising the guitar"
    found = service.search(SearchMemory.from_json({"query": query, "limit": 3, "verbose": True}), NS)
    index = service.indexer.index
    assert index is not None
    query_vector = service.indexer.embed_query(query)
    assert query_vector is not None
    channels = {c["id"]: c["channels"] for c in found["debug"]["channels"]}
    first = np.mean([vector_of(service, m) for m in made], axis=0)  # the first turn: both neighbours after it
    expected_first = float(first @ query_vector) / float(np.linalg.norm(first))
    assert channels[made[0]]["vec"] == pytest.approx(expected_first, abs=1e-3)

    # the middle turn: its window is itself and both neighbours, and the window's meaning is not its own
    own = float(vector_of(service, made[1]) @ query_vector)
    hits = [ChannelHit(made[1], "vec", own, 0), ChannelHit(made[1], "fts", 3.0, 0)]
    rescored = window_cosines(hits, {made[1]: made}, index, query_vector)
    middle = np.mean([vector_of(service, m) for m in made], axis=0)
    assert rescored[0].score == pytest.approx(float(middle @ query_vector) / float(np.linalg.norm(middle)), abs=1e-5)
    assert rescored[0].score != pytest.approx(own, abs=1e-4)
    assert rescored[1] == hits[1]  # only vector evidence changes

    alone: MemoryService = make_service({"algorithm": {"retrieval": {"contextWindow": 0}}})
    single = chat(alone, texts)
    plain = alone.search(SearchMemory.from_json({"query": query, "limit": 3, "verbose": True}), NS)
    plain_channels = {c["id"]: c["channels"] for c in plain["debug"]["channels"]}
    own_first = float(vector_of(alone, single[0]) @ query_vector)
    assert plain_channels[single[0]]["vec"] == pytest.approx(own_first, abs=1e-3)  # no windows: its own cosine


def test_token_estimates_count_a_cjk_character_as_a_token() -> None:
    english, chinese = "abcd" * 10, "部署脚本" * 5
    assert turn_tokens(len(english), len(english.encode())) == 10
    assert turn_tokens(len(chinese), len(chinese.encode())) == 20
    mixed = "run make deploy 部署"
    assert turn_tokens(len(mixed), len(mixed.encode())) == 6  # 16 ASCII characters + 2 CJK


def test_short_turns_fill_a_window_up_to_its_token_budget() -> None:
    assert window_positions([10] * 9, 4, 1, 256) == [2, 3, 4, 5, 6]  # 2 x size more turns at most
    assert window_positions([10] * 9, 4, 1, 0) == [3, 4, 5]
    assert window_positions([200] * 9, 4, 1, 256) == [3, 4, 5]  # long turns: only the direct neighbours
    assert window_positions([60] * 9, 4, 1, 256) == [2, 3, 4, 5]  # the fourth turn fits, the fifth does not
    assert window_positions([10] * 9, 4, 0, 256) == [4]  # contextWindow 0: no window at all
    shown = [False, False, False, True, False, False, False, False, False]
    assert window_positions([10] * 9, 4, 1, 256, shown) == [1, 2, 4, 5, 6]  # a shown turn is skipped


def test_a_chat_of_short_lines_returns_five_turn_windows(make_service: ServiceFactory) -> None:
    texts = [
        "Morning all.",
        "Did anyone see the build?",
        "Marta adopted a greyhound called Comet.",
        "Nice, what breed again?",
        "A retired racing greyhound.",
        "Lunch at noon?",
        "Sure.",
    ]
    short: MemoryService = make_service()
    made = chat(short, texts)
    hits = short.search(SearchMemory.from_json({"query": "Marta greyhound Comet", "limit": 1}), NS)["hits"]
    assert hits[0]["id"] == made[2]
    assert hits[0]["window"] == made[:5]  # two turns on each side: the lines are short

    fixed: MemoryService = make_service(FIXED_WINDOWS)
    made = chat(fixed, texts)
    hits = fixed.search(SearchMemory.from_json({"query": "Marta greyhound Comet", "limit": 1}), NS)["hits"]
    assert hits[0]["window"] == made[1:4]
