"""What a compact vector index costs per scan: the index's int8 codes through SimSIMD vs float32, float16 and others.

    python bench/vector_scan.py                  # 100,000 x 384 random unit rows, one BLAS thread
    python bench/vector_scan.py --n 10000 --repeat 20

For each layout: the memory the matrix takes, the time of one full scan (query · every row, best of
``--repeat`` after one warm-up, median printed too), and how far its scores are from float32 (max absolute
error, and whether the top 10 ids are the same). Layouts:

- ``float32``: the index before it went float16, one BLAS sgemv (the baseline of the ratios);
- ``index``: the index now (``memmy.store.vectors``): the rows' coarse int8 codes scanned by SimSIMD's int8
  dot product (``scan``), then its best 80 rows scored exactly from both codes (``exact_scores``; what a top 10
  takes: two rows per memory, four times over); its memory counts both codes and the scales, its error is
  that of the scan for the rows not re-scored;
- ``float16 simsimd``: the index before (until 2026-12-04): SimSIMD's float16 dot-product kernel, float32
  accumulation, one thread;
- ``int8 simsimd``: rows quantised per row (scale = max |x| / 127), SimSIMD's int8 dot product, rescaled, with
  no re-rank (the index's scan alone);
- ``float16 astype``: float16 rows converted to float32 in 8,192-row chunks, then sgemv (numpy has no float16 BLAS);
- ``float16 ort``: onnxruntime Cast(float16 -> float32) + MatMul in one graph (one intra-op thread);
- ``int8 ort``: rows quantised per row (scale = max |x| / 127), onnxruntime MatMulInteger, rescaled; a real index
  would then re-rank its top few hundred in float32.

Set ``OPENBLAS_NUM_THREADS=1`` (the default here) to compare one thread with one thread. The load average is
printed: on a shared machine only the ratios between rows of the same run mean much.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from importlib.metadata import version  # noqa: E402

import numpy as np  # noqa: E402
import simsimd  # noqa: E402
from numpy.typing import NDArray  # noqa: E402

from memmy.store.vectors import RERANK_FACTOR, exact_scores, quantize, scan, top_rows  # noqa: E402

CHUNK = 8192


def timed(func: Callable[[], NDArray[np.float32]], repeat: int) -> tuple[float, float, NDArray[np.float32]]:
    """Best and median ms of ``repeat`` calls after one warm-up, and the last result."""
    result = func()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = func()
        samples.append((time.perf_counter() - started) * 1000)
    return min(samples), statistics.median(samples), result


def ort_session(kind: str, dim: int) -> object:
    """A one-node onnxruntime session: float16 Cast+MatMul, or int8 MatMulInteger."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if kind == "f16":
        inputs = [
            helper.make_tensor_value_info("A", TensorProto.FLOAT16, [None, dim]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [dim, 1]),
        ]
        nodes = [
            helper.make_node("Cast", ["A"], ["Af"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["Af", "B"], ["Y"]),
        ]
        output = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])
    else:
        inputs = [
            helper.make_tensor_value_info("A", TensorProto.INT8, [None, dim]),
            helper.make_tensor_value_info("B", TensorProto.INT8, [dim, 1]),
        ]
        nodes = [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])]
        output = helper.make_tensor_value_info("Y", TensorProto.INT32, [None, 1])
    model = helper.make_model(
        helper.make_graph(nodes, "scan", inputs, [output]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    """Build the rows, time every layout, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((args.n, args.dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    query = rows[5] + 0.1 * rng.standard_normal(args.dim).astype(np.float32)
    query /= np.linalg.norm(query)
    exact = rows @ query
    top = set(np.argsort(-exact)[:10].tolist())
    load_before = os.getloadavg()[0]

    half = rows.astype(np.float16)
    buffer = np.empty((CHUNK, args.dim), dtype=np.float32)

    def f16_astype() -> NDArray[np.float32]:
        out = np.empty(args.n, dtype=np.float32)
        for start in range(0, args.n, CHUNK):
            part = half[start : start + CHUNK]
            np.copyto(buffer[: len(part)], part)
            out[start : start + len(part)] = buffer[: len(part)] @ query
        return out

    half_query = query.astype(np.float16)
    coarse, residual, scale = quantize(rows)  # the index's layout; the int8 rows below are its coarse codes
    rows_i8, row_scale = coarse, scale
    query_scale = float(np.abs(query).max() / 127)
    query_i8 = np.round(query / query_scale).astype(np.int8)
    chosen = 10 * 2 * RERANK_FACTOR

    def index_scan() -> NDArray[np.float32]:
        scores = scan(coarse, scale, query)
        best = top_rows(scores, chosen)
        scores[best] = exact_scores(coarse, residual, scale, best, query)
        return scores

    def f16_simsimd() -> NDArray[np.float32]:
        raw = simsimd.cdist(half_query[None, :], half, metric="dot", out_dtype="float32")
        return np.asarray(raw, dtype=np.float32).reshape(-1)

    layouts: list[tuple[str, int, Callable[[], NDArray[np.float32]]]] = [
        ("float32", rows.nbytes, lambda: rows @ query),
        ("index", coarse.nbytes + residual.nbytes + scale.nbytes, index_scan),
        ("float16 simsimd", half.nbytes, f16_simsimd),
        ("int8 simsimd", rows_i8.nbytes + row_scale.nbytes, lambda: scan(coarse, scale, query)),
        ("float16 astype", half.nbytes, f16_astype),
    ]
    try:
        f16 = ort_session("f16", args.dim)
        q8 = query_i8[:, None]
        i8 = ort_session("i8", args.dim)
        layouts.append(("float16 ort", half.nbytes, lambda: f16.run(None, {"A": half, "B": query[:, None]})[0][:, 0]))  # type: ignore[attr-defined]
        layouts.append(
            (
                "int8 ort",
                rows_i8.nbytes + row_scale.nbytes,
                lambda: i8.run(None, {"A": rows_i8, "B": q8})[0][:, 0] * row_scale * query_scale,  # type: ignore[attr-defined]
            )
        )
    except ImportError:
        print("onnxruntime/onnx not installed: the ort rows are skipped")
    print(f"{args.n:,} x {args.dim} rows, one scan per call, best / median of {args.repeat}\n")
    print(f"{'layout':<16} {'MiB':>7} {'best ms':>9} {'median ms':>10} {'max |err|':>10} {'same top 10':>12}")
    base = None
    for name, size, func in layouts:
        best, median, scores = timed(func, args.repeat)
        base = base or best
        error = float(np.abs(np.asarray(scores, dtype=np.float64) - exact).max())
        same = set(np.argsort(-np.asarray(scores))[:10].tolist()) == top
        print(
            f"{name:<16} {size / 2**20:>7.1f} {best:>9.2f} {median:>10.2f} {error:>10.5f} {str(same):>12}"
            f"   x{best / base:.2f}"
        )
    print(f"\nload average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs")
    capabilities = ", ".join(name for name, on in simsimd.get_capabilities().items() if on)
    print(f"SimSIMD {version('simsimd')}, capabilities: {capabilities}")


if __name__ == "__main__":
    main()
