"""Background work: the worker that leases jobs from the durable queue and the evolution handlers it runs.

``worker`` leases, runs, retries and dead-letters jobs (``store.jobs`` is the queue's table); ``episodes``
segments sessions into tasks and scores feedback; ``evolution`` summarises and reflects on L1 traces and rewards
episodes; then one module per kind it writes: ``policy`` induces L2 policies (and Avoid lines from failures),
``world`` abstracts L3 world models, ``skill`` crystallises and tries Skills; ``writer`` is the one place those
layers are written (with the review gate), in the stored form of :mod:`memmy.kinds`. The pure rules live in
``memmy.evolve``; this package wires them to the store and the models.
"""
