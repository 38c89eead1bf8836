"""Stop a benchmark before it measures anything when the local embedding model is missing.

Without weights every embedding fails and the vector channel silently scores 0.000; a benchmark must say why
and stop instead.
"""

from __future__ import annotations

import sys

from memmy.embed.weights import MISSING_HINT, find_model_dir


def require_local_model(provider: str = "local") -> None:
    """Exit with status 2 and the fixing command when ``provider`` is local and no weights are installed."""
    if provider.strip().lower() == "local" and find_model_dir() is None:
        print(f"error: {MISSING_HINT}", file=sys.stderr)
        raise SystemExit(2)
