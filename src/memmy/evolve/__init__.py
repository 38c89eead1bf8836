"""Evolution engine: pure rules and LLM steps that turn L1 traces into policies, world models and skills.

Nothing here touches SQLite: the jobs read each memory as its kind (:mod:`memmy.kinds`; with its id and vector,
:mod:`memmy.evolve.model`), call these functions and persist what they return.
"""
