"""The history reader process: ``python -m memmy.sources.reader_process`` (started by the importer, never by hand).

It reads a pickled ``(adapter, env, redactor)`` request on stdin and writes each prepared conversation, then the
scan's stats, as pickles on stdout (see :mod:`memmy.sources.reading`).
"""

from __future__ import annotations

import sys

from memmy.sources.reading import serve

if __name__ == "__main__":
    raise SystemExit(serve(sys.stdin.buffer, sys.stdout.buffer))
