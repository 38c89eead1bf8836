"""One path for a completed turn into memory, whether a hook captured it live or the importer read it from history.

Owns :class:`~memmy.traces.turn.CapturedTurn` (the typed turn both paths build), ``prepare`` (the trace step built
from it with no store access, also in the history reader process) and
:class:`~memmy.traces.writer.TraceWriter`, which redacts it, checks tombstones, deduplicates it by its identity
(host session + host message id, the same for a live and an imported copy of one turn), inserts or restores its raw
turn and L1 trace memory, and queues its indexing (embedding, or a summary job first). Episode routing and the
evolution jobs that follow a live turn stay with their engine (``memmy.jobs``); the service wires the two.
"""
