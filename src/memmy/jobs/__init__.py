"""Background work: the worker that leases jobs from the durable queue and the evolution handlers it runs.

``worker`` leases, runs, retries and dead-letters jobs (``store.jobs`` is the queue's table); ``episodes``
segments sessions into tasks and scores feedback; ``evolution`` turns captured turns into L1 traces, rewards
and reflections; ``policies`` induces L2 policies (and Avoid lines from failures); ``higher`` builds L3 world
models and Skills; ``writer`` is the one place those layers are written (with the review gate). The pure
rules live in ``memmy.evolve``; this package wires them to the store and the models.
"""
