"""The in-memory vector index with per-project blocks gives the float32 brute-force answer, scoped or not.

Rows are held as two int8 codes per dimension: a row comes back within scale / 508 per dimension, the scan's
approximate scores only choose the rows that are then scored exactly, and every returned score is within 5e-5
of the float32 cosine (float16 rows were within 1e-3).
"""

from __future__ import annotations

import numpy as np

from memmy.store.vectors import RESIDUAL_STEPS, VectorIndex, VectorMeta, quantize, scan, top_rows


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    unit: np.ndarray = m / np.linalg.norm(m, axis=1, keepdims=True)
    return unit


def test_blocks_match_brute_force_under_every_filter_and_after_moves_and_removals() -> None:
    rng = np.random.default_rng(3)
    dim, n = 16, 600
    vectors = _unit(rng, n, dim)
    projects = [None, "alpha", "beta", "gamma"]
    layers = ["L1", "L2", "L3"]
    meta = {
        f"m{i}": VectorMeta(layer=layers[i % 3], project_id=projects[i % 4], source=("codex", "claude")[i % 2])
        for i in range(n)
    }
    index = VectorIndex(dim, capacity=8)  # small blocks: growth is exercised too
    index.bulk_load((f"m{i}", "vec", vectors[i], meta[f"m{i}"]) for i in range(n))
    for i in range(0, n, 7):  # removals (swap-with-last inside a block)
        index.remove(f"m{i}")
        del meta[f"m{i}"]
    for i in range(1, n, 11):  # a memory that changes scope moves to the other block
        if f"m{i}" in meta:
            meta[f"m{i}"] = VectorMeta(layer=meta[f"m{i}"].layer, project_id="beta", source=meta[f"m{i}"].source)
            index.upsert(f"m{i}", "vec", vectors[i], meta[f"m{i}"])
    assert len(index) == len(meta)
    query = _unit(rng, 1, dim)[0]
    for project in (None, "alpha", "beta", "nowhere"):
        for source in (None, "codex"):
            for layer in (None, "L2"):
                want = sorted(
                    (
                        (mid, float(vectors[int(mid[1:])] @ query))
                        for mid, m in meta.items()
                        if (project is None or m.project_id in (None, project))
                        and (source is None or m.source == source)
                        and (layer is None or m.layer == layer)
                    ),
                    key=lambda hit: -hit[1],
                )[:10]
                got = index.search(query, 10, layers=[layer] if layer else None, project_id=project, source=source)
                assert [g[0] for g in got] == [w[0] for w in want]
                assert np.allclose([g[1] for g in got], [w[1] for w in want], atol=5e-5)
    assert index.vector("m1") is not None and index.contains("m1") and not index.contains("m0")
    stored = index.vector("m1")
    assert stored is not None and stored.dtype == np.float32 and np.allclose(stored, vectors[1], atol=1e-4)
    similar = index.similarities(["m1", "m2", "m0"], query)  # m0 was removed
    assert sorted(similar) == ["m1", "m2"]
    assert np.allclose([similar["m1"], similar["m2"]], [vectors[1] @ query, vectors[2] @ query], atol=5e-5)


def test_bulk_load_sizes_blocks_exactly_and_a_repeated_row_keeps_the_later_vector() -> None:
    rng = np.random.default_rng(5)
    vectors = _unit(rng, 50, 8)
    index = VectorIndex(8)
    items = [(f"m{i}", "vec", vectors[i], VectorMeta("L1", "alpha" if i % 2 else None)) for i in range(40)]
    items.append(("m3", "vec", vectors[45], VectorMeta("L1", None)))  # m3 again, moved to the shared block
    index.bulk_load(items, chunk_rows=7)  # several chunks per block
    assert len(index) == 40
    assert [block.capacity for block in index._blocks.values()] == [20 + 64, 20 + 64]  # noqa: SLF001
    moved = index.vector("m3")
    assert moved is not None and np.allclose(moved, vectors[45], atol=1e-4)
    assert [hit[0] for hit in index.search(vectors[45], 1, project_id="beta")] == ["m3"]
    assert [hit[0] for hit in index.search(vectors[7], 1, project_id="alpha")] == ["m7"]
    assert index.search(vectors[7], 1, project_id="beta")[0][0] != "m7"  # alpha rows are not in beta's scope


def test_top_rows_is_the_partition_of_every_score_whatever_the_distribution() -> None:
    rng = np.random.default_rng(5)
    n = 50_000
    clustered = np.repeat(rng.standard_normal(50), n // 50).astype(np.float32) + 1e-3 * rng.standard_normal(n)
    masked = rng.standard_normal(n).astype(np.float32)
    masked[rng.random(n) < 0.97] = -np.inf  # a layer mask that keeps 3 % of the rows
    rising = np.linspace(-1, 1, n, dtype=np.float32)  # the best rows all in the sample's last stride
    for scores in (rng.standard_normal(n).astype(np.float32), clustered.astype(np.float32), masked, rising):
        for take in (1, 20, 60, 1500):
            expected = set(np.argpartition(-scores, take - 1)[:take].tolist())
            assert set(top_rows(scores, take).tolist()) == expected


def test_codes_give_each_row_back_within_a_508th_of_its_scale_and_a_zero_row_stays_zero() -> None:
    rng = np.random.default_rng(11)
    rows = _unit(rng, 200, 384)
    rows[7] = 0.0
    coarse, residual, scale = quantize(rows)
    assert coarse.dtype == residual.dtype == np.int8
    back = scale[:, None] * (coarse.astype(np.float32) + residual.astype(np.float32) / RESIDUAL_STEPS)
    assert np.all(np.abs(back - rows) <= scale[:, None] / 508 + 1e-7)
    assert np.abs(back - rows).max() < 1e-5  # float16 rounding of the same unit rows: up to ~1e-4
    assert not back[7].any() and scale[7] == 1.0
    query = rows[3]
    assert np.abs(scan(coarse, scale, query) - rows @ query).max() < 0.01  # the scan only chooses rows


def test_a_large_index_ranks_by_exact_score_what_its_approximate_scan_chose() -> None:
    # Near-uniform cosines (random unit rows) are the hardest case for choosing by approximate scores: the best
    # rows lie close together. The scan keeps RERANK_FACTOR times the rows needed, then scores them exactly.
    rng = np.random.default_rng(17)
    n, dim = 30_000, 384
    vectors = _unit(rng, n, dim)
    index = VectorIndex(dim)
    layers = ("L1", "L2")
    index.bulk_load((f"m{i}", "vec", vectors[i], VectorMeta(layers[i % 2], None)) for i in range(n))
    for query in _unit(rng, 25, dim):
        exact = vectors @ query
        for k, layer in ((10, None), (30, "L2")):
            allowed = np.arange(n) if layer is None else np.arange(1, n, 2)
            want = allowed[np.argsort(-exact[allowed])[:k]]
            got = index.search(query, k, layers=[layer] if layer else None)
            assert [int(g[0][1:]) for g in got] == want.tolist()
            assert np.allclose([g[1] for g in got], exact[want], atol=5e-5)
