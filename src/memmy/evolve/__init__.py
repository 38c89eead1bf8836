"""Evolution engine: pure rules and LLM steps that turn L1 traces into policies, world models and skills.

Nothing here touches SQLite: the service layer loads views (:mod:`memmy.evolve.model`), calls these
functions and persists what they return.
"""
